// An injectable monotonic clock: tests control time, production reads the
// CPU's invariant time-stamp counter (or CLOCK_MONOTONIC where it has none)
// once per progress pass.
#ifndef BYPASS_DRIVER_CLOCK_H_
#define BYPASS_DRIVER_CLOCK_H_

#include <cstdint>
#include <ctime>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace bypass::driver {

// A source of monotonic nanoseconds.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual uint64_t NowNs() const = 0;
};

// CLOCK_MONOTONIC through the vDSO (no system call).
inline uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

// CLOCK_MONOTONIC's nanoseconds, read from the time-stamp counter where
// that is safe: the CPU says its TSC is invariant (CPUID 0x80000007 EDX
// bit 8: constant rate, runs in every C- and P-state) and the kernel keeps
// the TSC as its clock source (so it found it synchronised across CPUs).
// The counter's rate is calibrated once against CLOCK_MONOTONIC (a few
// milliseconds, on the first Get()), and readings are CLOCK_MONOTONIC at
// calibration plus the counter's ticks since, scaled. A read is an rdtsc and
// a multiply (about 8 ns) against the vDSO's 20-30 ns on a VM (kvm-clock,
// or a TSC the vDSO must scale and check for updates).
//
// Contract, either way: monotonic in one thread; in CLOCK_MONOTONIC's time
// base, agreeing with it to within the calibration's error (below 10 ppm:
// 10 us per second since calibration) plus any NTP slewing of
// CLOCK_MONOTONIC since. Elsewhere (no invariant TSC, another clock source,
// not x86-64, or BYPASS_CLOCK=monotonic in the environment) every read is
// CLOCK_MONOTONIC.
class SteadyClock final : public Clock {
 public:
  uint64_t NowNs() const override {
#if defined(__x86_64__)
    if (mult_ != 0) return TicksToNs(__rdtsc());
#endif
    return MonotonicNs();
  }
  // Whether reads take the counter (for tests and tools' reports).
  bool uses_tsc() const { return mult_ != 0; }
  // Counter ticks per second, as calibrated (0 without the counter).
  double tsc_hz() const;
  static SteadyClock& Get();

  // Whether this CPU and kernel allow the counter (see above; ignores
  // BYPASS_CLOCK).
  static bool TscUsable();

 private:
  SteadyClock();
  uint64_t TicksToNs(uint64_t tsc) const {
    // Ticks since calibration times mult_ / 2^kShift, in 128 bits: no
    // overflow for centuries.
    const unsigned __int128 d = tsc - base_tsc_;
    return base_ns_ + static_cast<uint64_t>((d * mult_) >> kShift);
  }
  static constexpr unsigned kShift = 32;
  uint64_t base_tsc_ = 0;
  uint64_t base_ns_ = 0;
  uint64_t mult_ = 0;  // ns per tick, fixed point with kShift fraction bits; 0: no counter
};

// A clock that moves only when told to. Single-threaded.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(uint64_t start_ns = 0) : now_(start_ns) {}
  uint64_t NowNs() const override { return now_; }
  void Advance(uint64_t ns) { now_ += ns; }
  void Set(uint64_t ns) { now_ = ns; }

 private:
  uint64_t now_;
};

}  // namespace bypass::driver

#endif  // BYPASS_DRIVER_CLOCK_H_
