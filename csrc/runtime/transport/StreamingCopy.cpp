#include "runtime/transport/StreamingCopy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace nrtsim::transport {

void copy_large(void* dst, const void* src, size_t n) {
#if defined(__x86_64__)
  if (n >= kStreamingCopyBytes) {
    auto* d = static_cast<char*>(dst);
    const auto* s = static_cast<const char*>(src);
    // Up to the destination's next 64-byte boundary with memcpy; streaming stores need 16-byte
    // alignment, and whole lines let the write-combining buffers fill.
    const size_t head = (64 - reinterpret_cast<uintptr_t>(d) % 64) % 64;
    std::memcpy(d, s, head);
    size_t i = head;
    for (; i + 64 <= n; i += 64) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
      const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
    }
    // Streaming stores are weakly ordered: fence them before the barrier that publishes the data.
    _mm_sfence();
    std::memcpy(d + i, s + i, n - i);
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

}  // namespace nrtsim::transport
