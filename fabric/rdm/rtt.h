// The retransmission timeout of one peer from measured round trips
// (RFC 6298: SRTT and RTTVAR, Karn's rule applied by the caller), with a
// floor, a ceiling and exponential backoff.
#ifndef BYPASS_FABRIC_RDM_RTT_H_
#define BYPASS_FABRIC_RDM_RTT_H_

#include <algorithm>
#include <cstdint>

namespace bypass::rdm {

// SRTT/RTTVAR estimator and the RTO derived from it.
// The RTO's bounds: the endpoint's (EndpointConfig::rto_*_ns), kept once
// rather than in every peer's estimator.
struct RtoBounds {
  uint64_t initial = 1'000'000;
  uint64_t min = 100'000;
  uint64_t max = 100'000'000;
};

// In 32-bit nanoseconds (12 B in every peer's slot): a round trip is
// counted as at most 4.29 s, far above the RTO's ceiling (rto_max_ns,
// 100 ms by default), and at least 1 ns, so that 0 means no sample yet.
class RttEstimator {
 public:
  // One round trip of a packet that was sent once (Karn: never of a
  // retransmitted one).
  void Sample(uint64_t rtt_ns) {
    const uint32_t rtt = static_cast<uint32_t>(std::clamp<uint64_t>(rtt_ns, 1, UINT32_MAX));
    if (!has_sample()) {
      srtt_ = min_rtt_ = rtt;
      rttvar_ = rtt / 2;
      return;
    }
    min_rtt_ = std::min(min_rtt_, rtt);
    const uint32_t err = srtt_ > rtt ? srtt_ - rtt : rtt - srtt_;
    rttvar_ = static_cast<uint32_t>((3 * uint64_t{rttvar_} + err) / 4);
    srtt_ = static_cast<uint32_t>((7 * uint64_t{srtt_} + rtt) / 8);
  }

  // The timeout before backoff: SRTT + 4 RTTVAR within [min, max], or the
  // initial value before any sample.
  uint64_t rto(const RtoBounds& b) const {
    if (!has_sample()) return b.initial;
    return std::clamp(uint64_t{srtt_} + 4 * uint64_t{rttvar_}, b.min, b.max);
  }
  // The timeout after `backoff` expirations in a row: doubled each time.
  uint64_t rto(const RtoBounds& b, uint32_t backoff) const {
    const uint64_t base = rto(b);
    if (backoff >= 32 || base > (b.max >> std::min<uint32_t>(backoff, 63))) return b.max;
    return std::min(base << backoff, b.max);
  }

  bool has_sample() const { return srtt_ != 0; }
  uint64_t srtt() const { return srtt_; }
  uint64_t rttvar() const { return rttvar_; }
  uint64_t min_rtt() const { return min_rtt_; }  // the smallest sample (0 before any)

 private:
  uint32_t srtt_ = 0;  // 0: no sample (a sample is at least 1 ns)
  uint32_t rttvar_ = 0;
  uint32_t min_rtt_ = 0;
};
static_assert(sizeof(RttEstimator) == 12);

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_RTT_H_
