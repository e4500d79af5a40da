// One logical core's HBM: capacity enforcement, ownership, alignment.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "runtime/Error.h"
#include "runtime/HbmAllocator.h"

namespace {

using nrtsim::Error;
using nrtsim::ErrorCode;
using nrtsim::HbmAllocator;
using nrtsim::OutOfMemoryError;

constexpr uint64_t kKiB = 1024;

TEST(HbmAllocator, StartsEmpty) {
  HbmAllocator hbm(0, 64 * kKiB);
  EXPECT_EQ(hbm.capacity(), 64 * kKiB);
  EXPECT_EQ(hbm.used(), 0u);
  EXPECT_EQ(hbm.free_bytes(), 64 * kKiB);
  EXPECT_EQ(hbm.live_allocations(), 0u);
}

TEST(HbmAllocator, AllocationsAreAlignedAndSizesRounded) {
  EXPECT_EQ(HbmAllocator::kAlignment, 512u);
  EXPECT_EQ(HbmAllocator::rounded(1), 512u);
  EXPECT_EQ(HbmAllocator::rounded(512), 512u);
  EXPECT_EQ(HbmAllocator::rounded(513), 1024u);

  HbmAllocator hbm(0, 64 * kKiB);
  uint64_t expected_used = 0;
  for (size_t bytes : {1, 100, 512, 513, 1000, 4096, 0}) {
    void* p = hbm.allocate(bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % HbmAllocator::kAlignment, 0u) << bytes;
    expected_used += HbmAllocator::rounded(bytes == 0 ? 1 : bytes);
    EXPECT_EQ(hbm.used(), expected_used) << bytes;
    // The memory is really there: write all of it.
    std::memset(p, 0xAB, bytes);
  }
  EXPECT_EQ(hbm.live_allocations(), 7u);
  EXPECT_EQ(hbm.free_bytes(), 64 * kKiB - expected_used);
}

TEST(HbmAllocator, CapacityIsEnforcedWithTheNumbersOfTheFailure) {
  HbmAllocator hbm(3, 4 * kKiB);
  void* a = hbm.allocate(3 * kKiB - 100);  // rounds to 3 KiB
  EXPECT_EQ(hbm.free_bytes(), 1 * kKiB);
  try {
    hbm.allocate(1 * kKiB + 1);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory);
    EXPECT_EQ(e.device(), 3);
    EXPECT_EQ(e.requested(), 1 * kKiB + 1);
    EXPECT_EQ(e.free_bytes(), 1 * kKiB);
    EXPECT_EQ(e.capacity(), 4 * kKiB);
    const std::string message = e.what();
    EXPECT_NE(message.find("neuron:3 is out of HBM"), std::string::npos) << message;
    EXPECT_NE(message.find("(1025 bytes)"), std::string::npos) << message;
    EXPECT_NE(message.find("1.00 KiB (1024 bytes) free"), std::string::npos) << message;
    EXPECT_NE(message.find("4.00 KiB (4096 bytes)"), std::string::npos) << message;
    EXPECT_NE(message.find("NRTSIM_HBM_BYTES"), std::string::npos) << message;
  }
  // The failed attempt changed nothing; exactly what is left still fits.
  EXPECT_EQ(hbm.used(), 3 * kKiB);
  EXPECT_EQ(hbm.live_allocations(), 1u);
  void* b = hbm.allocate(1 * kKiB);
  EXPECT_EQ(hbm.free_bytes(), 0u);
  EXPECT_THROW(hbm.allocate(1), OutOfMemoryError);
  hbm.free(a);
  hbm.free(b);
}

TEST(HbmAllocator, AnAllocationLargerThanTheCapacityFails) {
  HbmAllocator hbm(0, 4 * kKiB);
  EXPECT_THROW(hbm.allocate(4 * kKiB + 1), OutOfMemoryError);
  // Sizes whose rounding would overflow must not wrap around to a tiny allocation.
  const size_t huge = std::numeric_limits<size_t>::max();
  for (size_t bytes : {huge, huge - 1, huge - HbmAllocator::kAlignment + 2}) {
    try {
      void* p = hbm.allocate(bytes);
      hbm.free(p);
      ADD_FAILURE() << "allocate(" << bytes << ") succeeded";
    } catch (const OutOfMemoryError& e) {
      EXPECT_EQ(e.requested(), bytes);
      EXPECT_EQ(e.capacity(), 4 * kKiB);
    }
  }
  EXPECT_EQ(hbm.used(), 0u);
  EXPECT_EQ(hbm.live_allocations(), 0u);
}

TEST(HbmAllocator, FreeRestoresCapacity) {
  HbmAllocator hbm(0, 8 * kKiB);
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(hbm.allocate(1 * kKiB));
  EXPECT_EQ(hbm.free_bytes(), 0u);
  EXPECT_THROW(hbm.allocate(1), OutOfMemoryError);
  hbm.free(blocks[3]);
  EXPECT_EQ(hbm.free_bytes(), 1 * kKiB);
  EXPECT_EQ(hbm.live_allocations(), 7u);
  blocks[3] = hbm.allocate(1 * kKiB);
  for (void* p : blocks) hbm.free(p);
  EXPECT_EQ(hbm.used(), 0u);
  EXPECT_EQ(hbm.free_bytes(), 8 * kKiB);
  EXPECT_EQ(hbm.live_allocations(), 0u);
  // The whole capacity is usable again in one piece.
  void* all = hbm.allocate(8 * kKiB);
  EXPECT_EQ(hbm.free_bytes(), 0u);
  hbm.free(all);
}

TEST(HbmAllocator, FreeOfNullIsANoOp) {
  HbmAllocator hbm(0, 4 * kKiB);
  void* p = hbm.allocate(10);
  hbm.free(nullptr);
  EXPECT_EQ(hbm.live_allocations(), 1u);
  hbm.free(p);
}

TEST(HbmAllocator, OwnsEveryAddressInsideALiveAllocation) {
  HbmAllocator hbm(0, 64 * kKiB);
  auto* p = static_cast<char*>(hbm.allocate(1000));  // rounded to 1024
  EXPECT_TRUE(hbm.owns(p));
  EXPECT_TRUE(hbm.owns(p + 1));
  EXPECT_TRUE(hbm.owns(p + 999));
  EXPECT_TRUE(hbm.owns(p + 1023));
  EXPECT_FALSE(hbm.owns(p + 1024));
  EXPECT_FALSE(hbm.owns(p - 1));
  EXPECT_FALSE(hbm.owns(nullptr));
  int on_the_stack = 0;
  EXPECT_FALSE(hbm.owns(&on_the_stack));
  std::vector<char> on_the_heap(100);
  EXPECT_FALSE(hbm.owns(on_the_heap.data()));
  hbm.free(p);
  EXPECT_FALSE(hbm.owns(p));
  EXPECT_FALSE(hbm.owns(p + 10));
}

TEST(HbmAllocator, FreeingAForeignPointerThrows) {
  HbmAllocator mine(2, 64 * kKiB);
  HbmAllocator other(5, 64 * kKiB);
  auto* p = static_cast<char*>(mine.allocate(1024));
  void* q = other.allocate(1024);
  int on_the_stack = 0;
  for (void* foreign : {static_cast<void*>(&on_the_stack), q, static_cast<void*>(p + 512)}) {
    try {
      mine.free(foreign);
      ADD_FAILURE() << "free of a foreign pointer succeeded";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("neuron:2"), std::string::npos) << e.what();
    }
  }
  // Nothing was disturbed.
  EXPECT_EQ(mine.live_allocations(), 1u);
  EXPECT_EQ(mine.used(), 1024u);
  EXPECT_TRUE(other.owns(q));
  mine.free(p);
  // A double free is foreign too.
  EXPECT_THROW(mine.free(p), Error);
  other.free(q);
}

}  // namespace
