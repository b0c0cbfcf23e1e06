// An injectable monotonic clock: tests control time, production reads TSC-free
// CLOCK_MONOTONIC once per progress pass.
#ifndef BYPASS_DRIVER_CLOCK_H_
#define BYPASS_DRIVER_CLOCK_H_

#include <cstdint>
#include <ctime>

namespace bypass::driver {

// A source of monotonic nanoseconds.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual uint64_t NowNs() const = 0;
};

// CLOCK_MONOTONIC through the vDSO (no system call).
class SteadyClock final : public Clock {
 public:
  uint64_t NowNs() const override {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u +
           static_cast<uint64_t>(ts.tv_nsec);
  }
  static SteadyClock& Get() {
    static SteadyClock clock;
    return clock;
  }
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
