#include "driver/loopback/spsc_ring.h"

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace bypass::driver::loopback {
namespace {

TEST(SpscRingTest, StagedFramesAreInvisibleUntilPublished) {
  SpscRing ring(4, 64);
  const uint8_t frame[3] = {1, 2, 3};
  ASSERT_TRUE(ring.CanStage());
  ring.Stage(frame, 3);
  EXPECT_EQ(ring.Readable(), 0u);
  ring.Publish();
  ASSERT_EQ(ring.Readable(), 1u);
  uint32_t len = 0;
  const uint8_t* got = ring.Frame(0, &len);
  ASSERT_EQ(len, 3u);
  EXPECT_EQ(std::memcmp(got, frame, 3), 0);
  ring.Release(1);
  EXPECT_EQ(ring.Readable(), 0u);
}

TEST(SpscRingTest, FullAfterSlotsFramesAndFreedByRelease) {
  SpscRing ring(8, 16);
  uint8_t b = 0;
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(ring.CanStage()) << i;
    b = static_cast<uint8_t>(i);
    ring.Stage(&b, 1);
  }
  EXPECT_FALSE(ring.CanStage());
  ring.Publish();
  EXPECT_FALSE(ring.CanStage());
  EXPECT_EQ(ring.Readable(), 8u);
  ring.Release(3);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(ring.CanStage());
    ring.Stage(&b, 1);
  }
  EXPECT_FALSE(ring.CanStage());
}

TEST(SpscRingTest, IndicesWrapAroundManyTimes) {
  SpscRing ring(4, 8);
  uint64_t next_in = 0;
  uint64_t next_out = 0;
  // 2^20 frames: the masked slot index wraps 2^18 times.
  while (next_out < (1u << 20)) {
    while (ring.CanStage()) {
      ring.Stage(reinterpret_cast<const uint8_t*>(&next_in), 8);
      ++next_in;
    }
    ring.Publish();
    const uint32_t n = ring.Readable();
    for (uint32_t i = 0; i < n; ++i) {
      uint32_t len = 0;
      uint64_t v = 0;
      std::memcpy(&v, ring.Frame(i, &len), 8);
      ASSERT_EQ(v, next_out++);
    }
    ring.Release(n);
  }
}

// One producer and one consumer thread; TSan checks the index pairing.
TEST(SpscRingTest, TwoThreadsPassEveryFrameInOrder) {
  SpscRing ring(64, 16);
  constexpr uint64_t kFrames = 200'000;
  std::thread producer([&] {
    for (uint64_t i = 0; i < kFrames;) {
      if (!ring.CanStage()) {
        ring.Publish();
        std::this_thread::yield();
        continue;
      }
      ring.Stage(reinterpret_cast<const uint8_t*>(&i), 8);
      ++i;
      if (i % 7 == 0) ring.Publish();
    }
    ring.Publish();
  });
  uint64_t expect = 0;
  while (expect < kFrames) {
    const uint32_t n = ring.Readable();
    if (n == 0) {
      std::this_thread::yield();
      continue;
    }
    for (uint32_t i = 0; i < n; ++i) {
      uint32_t len = 0;
      uint64_t v = 0;
      std::memcpy(&v, ring.Frame(i, &len), 8);
      ASSERT_EQ(len, 8u);
      ASSERT_EQ(v, expect++);
    }
    ring.Release(n);
  }
  producer.join();
}

}  // namespace
}  // namespace bypass::driver::loopback
