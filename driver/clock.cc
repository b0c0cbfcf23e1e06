#include "driver/clock.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace bypass::driver {
namespace {

// How long the counter is calibrated against CLOCK_MONOTONIC: the error of
// the rate is about a bracketing read's width (tens of ns) over this.
constexpr uint64_t kCalibrationNs = 5'000'000;

#if defined(__x86_64__)
// One reading of both clocks: the counter at the midpoint of the tightest
// of a few brackets around a CLOCK_MONOTONIC read, so that a preemption or
// an interrupt inside one bracket does not skew it.
struct Pair {
  uint64_t tsc;
  uint64_t ns;
};
Pair ReadPair() {
  Pair best{0, 0};
  uint64_t best_width = UINT64_MAX;
  for (int i = 0; i < 16; ++i) {
    const uint64_t a = __rdtsc();
    const uint64_t ns = MonotonicNs();
    const uint64_t b = __rdtsc();
    if (b >= a && b - a < best_width) {
      best_width = b - a;
      best = {a + (b - a) / 2, ns};
    }
  }
  return best;
}
#endif

bool KernelClockSourceIsTsc() {
  FILE* f = std::fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
  if (f == nullptr) return false;
  char name[32] = {};
  const bool ok = std::fgets(name, sizeof(name), f) != nullptr;
  std::fclose(f);
  return ok && std::strncmp(name, "tsc\n", 4) == 0;
}

}  // namespace

bool SteadyClock::TscUsable() {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0x80000007, &a, &b, &c, &d) == 0) return false;
  const bool invariant = (d & (1u << 8)) != 0;
  return invariant && KernelClockSourceIsTsc();
#else
  return false;
#endif
}

SteadyClock::SteadyClock() {
  const char* env = std::getenv("BYPASS_CLOCK");
  if (env != nullptr && std::strcmp(env, "monotonic") == 0) return;
  if (!TscUsable()) return;
#if defined(__x86_64__)
  const Pair p0 = ReadPair();
  const timespec pause{0, static_cast<long>(kCalibrationNs)};
  nanosleep(&pause, nullptr);
  const Pair p1 = ReadPair();
  if (p1.tsc <= p0.tsc || p1.ns <= p0.ns) return;  // a counter that did not move: not usable
  const unsigned __int128 ns = p1.ns - p0.ns;
  const uint64_t mult = static_cast<uint64_t>((ns << kShift) / (p1.tsc - p0.tsc));
  if (mult == 0) return;
  base_tsc_ = p1.tsc;
  base_ns_ = p1.ns;
  mult_ = mult;
#endif
}

double SteadyClock::tsc_hz() const {
  return mult_ == 0 ? 0.0 : 1e9 * static_cast<double>(uint64_t{1} << kShift) / static_cast<double>(mult_);
}

SteadyClock& SteadyClock::Get() {
  static SteadyClock clock;
  return clock;
}

}  // namespace bypass::driver
