#include "fabric/rdm/timer_wheel.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace bypass::rdm {
namespace {

constexpr uint64_t kTick = uint64_t{1} << TimerWheel::kTickShift;

uint64_t RoundUp(uint64_t ns) { return (ns + kTick - 1) / kTick * kTick; }

TEST(TimerWheelTest, FiresAtItsDeadlineNotBefore) {
  TimerWheel w(4);
  EXPECT_EQ(w.next_ns(), UINT64_MAX);
  w.ArmAtMost(1, 1000);
  EXPECT_EQ(w.next_ns(), RoundUp(1000));
  std::vector<uint32_t> fired;
  const auto fire = [&](uint32_t i) { fired.push_back(i); };
  EXPECT_EQ(w.Expire(999, fire), 0u);
  EXPECT_EQ(w.Expire(RoundUp(1000), fire), 1u);
  EXPECT_EQ(fired, std::vector<uint32_t>{1});
  EXPECT_FALSE(w.armed(1));
  EXPECT_EQ(w.next_ns(), UINT64_MAX);
}

TEST(TimerWheelTest, KeepsTheEarliestDeadlineOfATimer) {
  TimerWheel w(2);
  w.ArmAtMost(0, 5'000'000);
  w.ArmAtMost(0, 10'000'000);  // later: ignored
  w.ArmAtMost(0, 2'000);       // earlier: moves it
  EXPECT_EQ(w.armed_count(), 1u);
  uint32_t fired = 0;
  EXPECT_EQ(w.Expire(3'000, [&](uint32_t) { ++fired; }), 1u);
  EXPECT_EQ(w.Expire(20'000'000, [&](uint32_t) { ++fired; }), 0u);
  EXPECT_EQ(fired, 1u);
}

TEST(TimerWheelTest, AMovedTimerFiresAtItsNewDeadlineOnly) {
  TimerWheel w(2);
  w.ArmAtMost(0, 2'000);
  EXPECT_EQ(w.Move(0, 9'000), RoundUp(9'000));  // later
  EXPECT_EQ(w.armed_count(), 1u);
  EXPECT_EQ(w.next_ns(), RoundUp(9'000));
  uint32_t fired = 0;
  const auto fire = [&](uint32_t) { ++fired; };
  EXPECT_EQ(w.Expire(8'000, fire), 0u) << "not at the old deadline";
  EXPECT_EQ(w.Expire(RoundUp(9'000), fire), 1u);
  EXPECT_EQ(w.Move(1, 5'000'000), RoundUp(5'000'000));  // not armed: armed
  EXPECT_EQ(w.Move(1, 20'000), RoundUp(20'000));        // earlier
  EXPECT_EQ(w.Expire(RoundUp(20'000), fire), 1u);
  EXPECT_EQ(fired, 2u);
  EXPECT_EQ(w.armed_count(), 0u);
}

TEST(TimerWheelTest, ATimerArmedForNowWhileFiringWaitsForTheNextCall) {
  TimerWheel w(2);
  w.ArmAtMost(0, 100);
  uint32_t fired = 0;
  w.Expire(1000, [&](uint32_t i) {
    ++fired;
    w.ArmAtMost(i, 0);
  });
  EXPECT_EQ(fired, 1u);
  EXPECT_TRUE(w.armed(0));
  EXPECT_LE(w.next_ns(), 1000u);
  w.Expire(1000, [&](uint32_t) { ++fired; });
  EXPECT_EQ(fired, 2u);
}

TEST(TimerWheelTest, HugeDeadlinesNeverOverflow) {
  TimerWheel w(2);
  w.ArmAtMost(0, UINT64_MAX);
  w.ArmAtMost(1, UINT64_MAX - 5);
  EXPECT_EQ(w.Expire(UINT64_MAX / 2, [](uint32_t) {}), 0u);
  EXPECT_EQ(w.Expire(UINT64_MAX, [](uint32_t) {}), 2u);
}

// Against a plain model: random arms, cancels and expiries across every
// level, each timer fired exactly when its rounded deadline has come.
TEST(TimerWheelTest, MatchesAModel) {
  constexpr uint32_t kN = 300;
  TimerWheel w(kN);
  std::vector<uint64_t> model(kN, UINT64_MAX);  // rounded deadline, or none
  std::mt19937_64 rng(7);
  uint64_t now = 1'000'000;
  for (int step = 0; step < 60'000; ++step) {
    const uint32_t i = static_cast<uint32_t>(rng() % kN);
    switch (rng() % 8) {
      case 0:
        w.Cancel(i);
        model[i] = UINT64_MAX;
        break;
      case 1:
      case 2:
      case 3:
      case 4: {
        // Deadlines from the past to hours ahead, log-uniform.
        const int bits = static_cast<int>(rng() % 44);
        const uint64_t d = rng() & ((uint64_t{1} << bits) - 1);
        const uint64_t when = rng() % 16 == 0 ? now - std::min(now, d) : now + d;
        if (step % 4 == 0) {  // moved, later as well as earlier
          EXPECT_EQ(w.Move(i, when), RoundUp(when));
          model[i] = RoundUp(when);
        } else {
          w.ArmAtMost(i, when);
          model[i] = std::min(model[i], RoundUp(when));
        }
        ASSERT_EQ(w.at_ns(i), model[i]);
        break;
      }
      default: {
        const int bits = static_cast<int>(rng() % 30);
        now += rng() & ((uint64_t{1} << bits) - 1);
        std::vector<bool> fired(kN);
        w.Expire(now, [&](uint32_t t) {
          ASSERT_FALSE(fired[t]);
          fired[t] = true;
        });
        for (uint32_t t = 0; t < kN; ++t) {
          ASSERT_EQ(fired[t], model[t] <= now) << "timer " << t << " step " << step;
          if (fired[t]) model[t] = UINT64_MAX;
          ASSERT_EQ(w.armed(t), model[t] != UINT64_MAX);
        }
        uint64_t earliest = UINT64_MAX;
        for (uint64_t m : model) earliest = std::min(earliest, m);
        ASSERT_LE(w.next_ns(), earliest);
        ASSERT_GT(w.next_ns(), now);
      }
    }
  }
}

}  // namespace
}  // namespace bypass::rdm
