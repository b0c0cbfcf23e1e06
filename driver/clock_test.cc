#include "driver/clock.h"

#include <time.h>

#include <cstdint>
#include <cstdlib>

#include "gtest/gtest.h"

namespace bypass::driver {
namespace {

// The TSC is used exactly where the CPU and the kernel allow it.
TEST(SteadyClockTest, UsesTheCounterWhereAllowed) {
  const char* env = std::getenv("BYPASS_CLOCK");
  const bool forced_off = env != nullptr && std::string_view(env) == "monotonic";
  EXPECT_EQ(SteadyClock::Get().uses_tsc(), SteadyClock::TscUsable() && !forced_off);
  if (SteadyClock::Get().uses_tsc()) {
    // A plausible rate: 100 MHz to 10 GHz.
    EXPECT_GT(SteadyClock::Get().tsc_hz(), 1e8);
    EXPECT_LT(SteadyClock::Get().tsc_hz(), 1e10);
  }
}

TEST(SteadyClockTest, Monotonic) {
  const Clock& c = SteadyClock::Get();
  uint64_t last = c.NowNs();
  for (int i = 0; i < 1'000'000; ++i) {
    const uint64_t now = c.NowNs();
    ASSERT_GE(now, last) << "at read " << i;
    last = now;
  }
}

// How far a reading of c is from CLOCK_MONOTONIC's at the same moment:
// the reading between two CLOCK_MONOTONIC reads, taking the tightest of a
// few such brackets (a preemption or interrupt inside one widens it).
int64_t OffsetFromMonotonic(const Clock& c) {
  int64_t best_width = INT64_MAX;
  int64_t offset = 0;
  for (int i = 0; i < 32; ++i) {
    const uint64_t before = MonotonicNs();
    const uint64_t ours = c.NowNs();
    const uint64_t after = MonotonicNs();
    const auto width = static_cast<int64_t>(after - before);
    if (width < best_width) {
      best_width = width;
      offset = static_cast<int64_t>(ours) - static_cast<int64_t>(before + (after - before) / 2);
    }
  }
  return offset;
}

// In CLOCK_MONOTONIC's time base, across sleeps: within the calibration's
// error (10 ppm of the time since) plus 2 us.
TEST(SteadyClockTest, AgreesWithClockMonotonicAcrossSleeps) {
  const Clock& c = SteadyClock::Get();
  const uint64_t start = MonotonicNs();
  for (int round = 0; round < 5; ++round) {
    const timespec pause{0, 20'000'000};
    nanosleep(&pause, nullptr);
    const int64_t bound = static_cast<int64_t>((MonotonicNs() - start) / 100'000 + 2'000);
    const int64_t off = OffsetFromMonotonic(c);
    EXPECT_LT(std::llabs(off), bound) << "round " << round;
  }
}

}  // namespace
}  // namespace bypass::driver
