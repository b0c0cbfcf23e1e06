// Packet sequence numbers: 32-bit, compared with serial-number arithmetic so
// they wrap safely (RFC 1982 style).
#ifndef BYPASS_FABRIC_RDM_PSN_H_
#define BYPASS_FABRIC_RDM_PSN_H_

#include <cstdint>

namespace bypass::rdm {

// A packet sequence number of one direction of one peer pair. Two PSNs
// compare correctly while they are less than 2^31 apart; the window (at most
// 256 packets) keeps every PSN in use far closer than that.
class Psn {
 public:
  constexpr Psn() = default;
  constexpr explicit Psn(uint32_t v) : v_(v) {}
  constexpr uint32_t value() const { return v_; }

  // Unsigned wrap-around is relied on: Psn(0xffffffff) + 1 == Psn(0).
  constexpr Psn operator+(uint32_t n) const { return Psn(v_ + n); }
  constexpr Psn& operator++() {
    ++v_;
    return *this;
  }
  // The signed distance from `o` to this: positive when this is later.
  constexpr int32_t operator-(Psn o) const { return static_cast<int32_t>(v_ - o.v_); }
  constexpr bool Before(Psn o) const { return (*this - o) < 0; }
  constexpr bool After(Psn o) const { return (*this - o) > 0; }
  constexpr bool operator==(const Psn&) const = default;

 private:
  uint32_t v_ = 0;
};

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_PSN_H_
