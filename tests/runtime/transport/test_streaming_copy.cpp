// copy_large and copy_parts copy exactly the bytes asked, whatever the alignment of either end,
// on both sides of the size where they switch to streaming stores, and write nothing outside
// the destinations.
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

TEST(StreamingCopy, PartsOfDifferentSizesAndAlignmentsCopyTogether) {
  using nrtsim::transport::copy_parts;
  using nrtsim::transport::CopyPart;
  // Totals below and above the streaming size; parts of unequal lengths (one empty, one shorter
  // than a line) at unequal offsets from a cache line.
  for (size_t big : {size_t{1000}, kStreamingCopyBytes / 2 + 77}) {
    const size_t sizes[] = {big, 0, 50, big + 129, big / 3};
    const size_t offsets[] = {5, 0, 17, 64, 33};
    constexpr int kParts = 5;
    std::vector<std::vector<uint8_t>> src(kParts), dst(kParts);
    CopyPart parts[kParts];
    for (int k = 0; k < kParts; ++k) {
      src[k].resize(sizes[k] + 3);
      for (size_t i = 0; i < src[k].size(); ++i) src[k][i] = static_cast<uint8_t>(i * 31 + k);
      dst[k].assign(offsets[k] + sizes[k] + 64, 0xCD);
      parts[k] = {dst[k].data() + offsets[k], src[k].data() + 3, sizes[k]};
    }
    copy_parts(parts, kParts);
    for (int k = 0; k < kParts; ++k) {
      ASSERT_EQ(std::memcmp(dst[k].data() + offsets[k], src[k].data() + 3, sizes[k]), 0)
          << "part " << k << " of total " << big;
      for (size_t i = 0; i < offsets[k]; ++i) ASSERT_EQ(dst[k][i], 0xCD) << "part " << k;
      for (size_t i = offsets[k] + sizes[k]; i < dst[k].size(); ++i) ASSERT_EQ(dst[k][i], 0xCD);
    }
  }
}
