// A small deterministic PRNG for fault injection: xoshiro256** seeded by
// splitmix64 (Blackman & Vigna). No global state, no std::random_device.
#ifndef BYPASS_DRIVER_FAULT_PRNG_H_
#define BYPASS_DRIVER_FAULT_PRNG_H_

#include <cstdint>

namespace bypass::driver::fault {

// splitmix64: one step of the sequence starting at *state.
inline uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// xoshiro256**: the same seed gives the same sequence on every platform.
class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed) {
    for (uint64_t& word : s_) word = SplitMix64(&seed);
  }

  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1), 53 bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

  // Uniform in [0, n) for n > 0 (multiply-shift; bias below 2^-32 * n).
  uint32_t Below(uint32_t n) {
    return static_cast<uint32_t>(((Next() >> 32) * static_cast<uint64_t>(n)) >> 32);
  }

  // True with probability p (p <= 0: never, p >= 1: always). Draws nothing
  // when p <= 0, so a disabled fault does not shift the sequence of others.
  bool Chance(double p) { return p > 0 && Uniform() < p; }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace bypass::driver::fault

#endif  // BYPASS_DRIVER_FAULT_PRNG_H_
