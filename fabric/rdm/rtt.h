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

class RttEstimator {
 public:
  // One round trip of a packet that was sent once (Karn: never of a
  // retransmitted one).
  void Sample(uint64_t rtt_ns) {
    min_rtt_ = has_sample_ ? std::min(min_rtt_, rtt_ns) : rtt_ns;
    if (!has_sample_) {
      srtt_ = rtt_ns;
      rttvar_ = rtt_ns / 2;
      has_sample_ = true;
      return;
    }
    const uint64_t err = srtt_ > rtt_ns ? srtt_ - rtt_ns : rtt_ns - srtt_;
    rttvar_ = (3 * rttvar_ + err) / 4;
    srtt_ = (7 * srtt_ + rtt_ns) / 8;
  }

  // The timeout before backoff: SRTT + 4 RTTVAR within [min, max], or the
  // initial value before any sample.
  uint64_t rto(const RtoBounds& b) const {
    if (!has_sample_) return b.initial;
    return std::clamp(srtt_ + 4 * rttvar_, b.min, b.max);
  }
  // The timeout after `backoff` expirations in a row: doubled each time.
  uint64_t rto(const RtoBounds& b, uint32_t backoff) const {
    const uint64_t base = rto(b);
    if (backoff >= 32 || base > (b.max >> std::min<uint32_t>(backoff, 63))) return b.max;
    return std::min(base << backoff, b.max);
  }

  bool has_sample() const { return has_sample_; }
  uint64_t srtt() const { return srtt_; }
  uint64_t rttvar() const { return rttvar_; }
  uint64_t min_rtt() const { return min_rtt_; }  // the smallest sample (0 before any)

 private:
  uint64_t srtt_ = 0;
  uint64_t rttvar_ = 0;
  uint64_t min_rtt_ = 0;
  bool has_sample_ = false;
};

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_RTT_H_
