// Threads that run one large interpreter instruction as ranges of its partitions. A NeuronCore's
// partitions are independent lanes for elementwise, activation, free-axis reduction, scan and
// copy instructions, so the interpreter may compute partition ranges of such an instruction on
// several host threads: each partition is computed by the same code, in the same order, as on
// one thread, so the values do not depend on the thread count (Interpreter.cpp decides which
// instructions split and where).
#pragma once

#include <cstdint>
#include <functional>

namespace nrtsim::nki {

// The number of threads the interpreter splits an instruction over (1: it does not split):
// set_partition_threads's value where one is set, else NRTSIM_NKI_THREADS where it names a count,
// else automatic: the cores this process may run on, at most kAutoPartitionThreads, of which an
// instruction uses only those that other processes leave free (partition_threads_automatic);
// at most kMaxPartitionThreads.
int partition_threads();
bool partition_threads_automatic();
inline constexpr int kMaxPartitionThreads = 16;
inline constexpr int kAutoPartitionThreads = 4;

// Overrides the configured count for this process (0: back to the configuration). Returns the
// count in effect before.
int set_partition_threads(int threads);

// Runs task(0) .. task(n - 1) on the calling thread and up to threads - 1 worker threads, each
// task once, and returns true when all have finished. Each thread has a home block of
// consecutive tasks (the same for every call with the same n and threads, so the partitions a
// thread wrote are still in its core's cache at the next instruction) and takes from the others'
// blocks when its own is done, so which thread runs a task is not fixed and a task's result must
// not depend on it. The workers run on any of the process's cores but the caller's. Where the
// tasks would all run on the calling thread (one thread, the workers busy with another caller's
// instruction, or with `adapt`, the automatic count, the host leaving no core free for a worker,
// or for 50 ms after a worker lost its core in the middle of a range) it runs none of them and
// returns false: the caller then does the work in one piece. `task` must not throw.
bool try_run_on_workers(int n, int threads, const std::function<void(int)>& task,
                        bool adapt = false);
// The same, with the tasks run on the calling thread in turn where no worker would take them.
void run_on_workers(int n, int threads, const std::function<void(int)>& task,
                    bool adapt = false);

// Instructions run as partition ranges on several threads since the process started, and the
// ranges (tasks) that worker threads (not the callers) ran: let a test see that the split path
// ran, and a benchmark how much of it the workers took.
uint64_t split_instruction_count();
uint64_t worker_task_count();
void count_split_instruction();

}  // namespace nrtsim::nki
