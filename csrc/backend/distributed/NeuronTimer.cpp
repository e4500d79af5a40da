// The timer DDP's Reducer asks each device type for (c10d::TimerRegistry), which times forward,
// backward compute and backward communication for DDP's runtime statistics
// (model._get_ddp_logging_data(): avg_forward_compute_time, avg_backward_comm_time, ...). Without
// one for the device, every rank of a DDP or Accelerate run warns "Time stats are currently only
// collected for CPU and CUDA devices".
//
// Like CUDA's, it measures device time: each event stamps the simulated Trainium clock of the
// current stream of the module's device, where the kernels and collectives between two events
// take their modelled time (what torch.neuron.Event.elapsed_time reports). The host time of each
// event is kept too, as the base class does, for DDP's host-side timestamps.
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

#include <array>
#include <cstdint>
#include <optional>

#include "backend/core/NeuronStream.h"

namespace torch_neuronx::distributed {
namespace {

class NeuronTimer : public c10d::Timer {
 public:
  explicit NeuronTimer(c10::Device device) : device_(device) {}

  void record(Event event) override {
    Timer::record(event);
    sim_ns_[static_cast<size_t>(event)] = current_stream_object(device_.index()).sim_cursor_ns();
  }

  std::optional<int64_t> measureDifference(Event start, Event end) override {
    const double begin = sim_ns_[static_cast<size_t>(start)];
    const double finish = sim_ns_[static_cast<size_t>(end)];
    // Not recorded in this iteration (DDP without a synchronising backward, for one): no value,
    // as the CPU timer does.
    if (begin < 0 || finish < begin) return std::nullopt;
    return static_cast<int64_t>(finish - begin);
  }

 private:
  c10::Device device_;
  std::array<double, 5> sim_ns_{-1, -1, -1, -1, -1};  // by Timer::Event
};

}  // namespace
}  // namespace torch_neuronx::distributed

namespace c10d {
C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::kPrivateUse1,
                         torch_neuronx::distributed::NeuronTimer)
}  // namespace c10d
