// copy_large copies exactly n bytes, whatever the alignment of either end, on both sides of the
// size where it switches to streaming stores, and writes nothing outside the destination.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/transport/StreamingCopy.h"

using nrtsim::transport::copy_large;
using nrtsim::transport::kStreamingCopyBytes;

TEST(StreamingCopy, CopiesExactlyTheBytesAtAnyAlignment) {
  constexpr size_t kGuard = 128;
  for (size_t n : {size_t{0}, size_t{1}, size_t{100}, kStreamingCopyBytes - 1, kStreamingCopyBytes,
                   kStreamingCopyBytes + 1, kStreamingCopyBytes + 127}) {
    for (size_t src_offset : {0, 3}) {
      for (size_t dst_offset : {0, 1, 16, 63}) {
        std::vector<uint8_t> src(n + src_offset);
        for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
        std::vector<uint8_t> dst(kGuard + dst_offset + n + kGuard, 0xAB);
        uint8_t* to = dst.data() + kGuard + dst_offset;
        copy_large(to, src.data() + src_offset, n);
        ASSERT_EQ(std::memcmp(to, src.data() + src_offset, n), 0)
            << n << " bytes, offsets " << src_offset << "/" << dst_offset;
        for (size_t i = 0; i < kGuard + dst_offset; ++i) ASSERT_EQ(dst[i], 0xAB) << "before, " << n;
        for (size_t i = kGuard + dst_offset + n; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xAB) << "after, " << n;
      }
    }
  }
}
