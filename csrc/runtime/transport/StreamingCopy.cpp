#include "runtime/transport/StreamingCopy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace nrtsim::transport {
namespace {

constexpr size_t kLine = 64;

// Bytes from `dst` to its next cache-line boundary (streaming stores need 16-byte alignment, and
// whole lines let the write-combining buffers fill).
size_t to_line(const void* dst) { return (kLine - reinterpret_cast<uintptr_t>(dst) % kLine) % kLine; }

#if defined(__x86_64__)
// One cache line, src anywhere, dst line-aligned.
inline void stream_line(char* dst, const char* src) {
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16));
  const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32));
  const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 48));
  _mm_stream_si128(reinterpret_cast<__m128i*>(dst), a);
  _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 16), b);
  _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 32), c);
  _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 48), d);
}

void stream_parts(const CopyPart* parts, int count) {
  struct Lines {
    char* dst;
    const char* src;
    size_t lines;
  };
  std::vector<Lines> body(count);
  size_t most = 0;
  for (int k = 0; k < count; ++k) {
    auto* d = static_cast<char*>(parts[k].dst);
    const auto* s = static_cast<const char*>(parts[k].src);
    const size_t head = std::min(to_line(d), parts[k].bytes);
    std::memcpy(d, s, head);
    const size_t lines = (parts[k].bytes - head) / kLine;
    body[k] = {d + head, s + head, lines};
    most = std::max(most, lines);
    const size_t tail = head + lines * kLine;
    std::memcpy(d + tail, s + tail, parts[k].bytes - tail);
  }
  for (size_t j = 0; j < most; ++j) {
    for (const Lines& b : body) {
      if (j < b.lines) stream_line(b.dst + j * kLine, b.src + j * kLine);
    }
  }
  // Streaming stores are weakly ordered: fence them before the barrier that publishes the data.
  _mm_sfence();
}
#endif

}  // namespace

void copy_large(void* dst, const void* src, size_t n) {
  const CopyPart part{dst, src, n};
  copy_parts(&part, 1);
}

void copy_parts(const CopyPart* parts, int count) {
  size_t total = 0;
  for (int k = 0; k < count; ++k) total += parts[k].bytes;
#if defined(__x86_64__)
  if (total >= kStreamingCopyBytes) return stream_parts(parts, count);
#endif
  for (int k = 0; k < count; ++k) std::memcpy(parts[k].dst, parts[k].src, parts[k].bytes);
}

}  // namespace nrtsim::transport
