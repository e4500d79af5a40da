// The host's copy bandwidth as the collectives see it: N processes at once (as N ranks on this
// host), each moving its own S-byte buffer R times, in three ways — memcpy, a copy with streaming
// stores (as the transport's StreamingCopy.cpp does), and streaming stores alone with no reads
// (the least an operation that must write S bytes per rank can cost). Bandwidth "in all" is
// N x R x S over the wall time from the first process's start to the last one's end, so that
// processes sharing a core count once (docs/benchmarks.md, Collectives, uses it as a floor).
//
//     cc -O2 -o /tmp/host_copy bench/host_copy.c && /tmp/host_copy 16384 4 100   # KiB, N, R
#include <emmintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

// dst and n are multiples of 64 bytes.
static void copy_streaming(char* dst, const char* src, size_t n) {
  for (size_t i = 0; i < n; i += 64) {
    const __m128i a = _mm_loadu_si128((const __m128i*)(src + i));
    const __m128i b = _mm_loadu_si128((const __m128i*)(src + i + 16));
    const __m128i c = _mm_loadu_si128((const __m128i*)(src + i + 32));
    const __m128i d = _mm_loadu_si128((const __m128i*)(src + i + 48));
    _mm_stream_si128((__m128i*)(dst + i), a);
    _mm_stream_si128((__m128i*)(dst + i + 16), b);
    _mm_stream_si128((__m128i*)(dst + i + 32), c);
    _mm_stream_si128((__m128i*)(dst + i + 48), d);
  }
  _mm_sfence();
}

static void write_streaming(char* dst, size_t n) {
  const __m128i v = _mm_set1_epi8(7);
  for (size_t i = 0; i < n; i += 64) {
    _mm_stream_si128((__m128i*)(dst + i), v);
    _mm_stream_si128((__m128i*)(dst + i + 16), v);
    _mm_stream_si128((__m128i*)(dst + i + 32), v);
    _mm_stream_si128((__m128i*)(dst + i + 48), v);
  }
  _mm_sfence();
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s <KiB per process> <processes> <repetitions>\n", argv[0]);
    return 2;
  }
  const size_t bytes = strtoull(argv[1], NULL, 10) << 10;
  const int procs = atoi(argv[2]), reps = atoi(argv[3]);
  if (bytes == 0 || procs < 1 || reps < 1) {
    fprintf(stderr, "sizes, processes and repetitions must be positive\n");
    return 2;
  }
  static const char* const names[3] = {"memcpy", "streaming copy", "streaming writes alone"};
  printf("%zu KiB x %d processes x %d:", bytes >> 10, procs, reps);
  for (int how = 0; how < 3; ++how) {
    const double start = now();
    for (int p = 0; p < procs; ++p) {
      if (fork() != 0) continue;
      char* src = aligned_alloc(64, bytes);
      char* dst = aligned_alloc(64, bytes);
      memset(src, p + 1, bytes);  // touched first: no page faults in the timed copies
      memset(dst, 0, bytes);
      for (int r = 0; r < reps; ++r) {
        if (how == 0) memcpy(dst, src, bytes);
        if (how == 1) copy_streaming(dst, src, bytes);
        if (how == 2) write_streaming(dst, bytes);
      }
      _exit(0);
    }
    while (wait(NULL) > 0) {
    }
    printf("%s %s %.2f GB/s", how ? ";" : "", names[how],
           (double)procs * reps * bytes / (now() - start) / 1e9);
  }
  printf(" in all\n");
  return 0;
}
