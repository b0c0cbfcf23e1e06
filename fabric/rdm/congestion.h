// A sender's congestion window and pacing toward one peer (PROTOCOL.md,
// "Congestion control"): slow start, additive increase of one packet per
// round trip, a multiplicative decrease (halving) at most once per round
// trip on a loss signal, a collapse to the minimum window on a
// retransmission timeout; and a next-send time that spreads a window over the smoothed
// RTT with a bounded burst. It counts packets, not bytes: the engine's
// window and credit are in packets. Reliability owns one per peer and
// applies it only to peers that can congest (not this host's: their frames
// come through memory shared by this host's processes, which never drops).
#ifndef BYPASS_FABRIC_RDM_CONGESTION_H_
#define BYPASS_FABRIC_RDM_CONGESTION_H_

#include <algorithm>
#include <cstdint>

#include "fabric/rdm/psn.h"

namespace bypass::rdm {

class CongestionWindow {
 public:
  // Packets that may leave back to back (a NIC's TX batch, ~12 KB at 1500 B).
  static constexpr uint32_t kPacingBurst = 8;
  // Gaps shorter than this are not waited for (PaceAllows).
  static constexpr uint64_t kPacingSlackNs = 2'000;
  // The smallest window, and what an RTO leaves: 4 packets, the fewest in
  // which a loss is still found by SACK (3 later packets, the default
  // fast_retransmit_threshold) rather than by another timeout. (TCP's
  // 1-packet loss window makes every loss under random drop an RTO with
  // backoff: measured here, 20% corruption then took 10x the steps.)
  static constexpr uint32_t kMinWindow = 4;
  static constexpr uint32_t kLossWindow = kMinWindow;

  // A new flight from `isn`: `initial` packets, growing to at most `max`
  // (the credit window can never let more go).
  void Reset(uint32_t initial, uint32_t max, Psn isn) {
    *this = CongestionWindow{};
    max_ = std::max(max, kMinWindow);
    cwnd_ = std::clamp(initial, kMinWindow, max_);
    ssthresh_ = max_;
    round_end_ = recovery_end_ = isn;
  }

  uint32_t cwnd() const { return cwnd_; }
  uint32_t ssthresh() const { return ssthresh_; }
  bool in_recovery() const { return in_recovery_; }

  // New data waited while the window was full: the window is in use, so
  // ACKs may grow it (an application-limited sender's window does not
  // grow past what it uses, as RFC 7661).
  void NoteLimited() { limited_now_ = true; }

  // `acked` packets were newly acknowledged cumulatively, una is the new
  // snd_una and next the next PSN to send. Ends recovery once the flight
  // of the last decrease is acknowledged; grows the window otherwise.
  void OnAcked(uint32_t acked, Psn una, Psn next) {
    if (!una.Before(round_end_)) {  // a round trip ended
      limited_prev_ = limited_now_;
      limited_now_ = false;
      round_end_ = next;
    }
    if (in_recovery_) {
      if (una.Before(recovery_end_)) return;
      in_recovery_ = false;
    }
    if (!limited_now_ && !limited_prev_) return;
    if (cwnd_ < ssthresh_) {  // slow start: +1 per packet acknowledged
      cwnd_ = std::min({cwnd_ + acked, ssthresh_, max_});
      return;
    }
    acked_in_ca_ += acked;  // congestion avoidance: +1 per window acknowledged
    while (acked_in_ca_ >= cwnd_) {
      acked_in_ca_ -= cwnd_;
      cwnd_ = std::min(cwnd_ + 1, max_);
    }
  }

  // A loss signal (a fast retransmit: a SACK gap) while snd_una is una
  // and next is the next PSN: halves the window unless this flight was
  // already cut (once per round trip). Returns whether it did.
  bool OnLoss(Psn una, Psn next) {
    if (una.Before(recovery_end_)) return false;
    ssthresh_ = std::max(cwnd_ / 2, kMinWindow);
    cwnd_ = ssthresh_;
    acked_in_ca_ = 0;
    in_recovery_ = true;
    recovery_end_ = next;
    return true;
  }

  // The retransmission timer expired: everything in flight may be lost.
  // The minimum window, then slow start to half the window it had.
  void OnRto(Psn next) {
    if (cwnd_ > kLossWindow) ssthresh_ = std::max(cwnd_ / 2, kMinWindow);  // not again on backoff
    cwnd_ = kLossWindow;
    acked_in_ca_ = 0;
    in_recovery_ = false;  // slow start grows it back at once
    recovery_end_ = next;  // no further halving for this flight
  }

  // ---- Pacing: a window over the smoothed RTT, faster than it (gain 2 in
  // slow start, 5/4 after, as Linux's pacing) so that pacing never holds
  // the window below its rate, only spreads its bursts.
  void SetRtt(uint64_t srtt_ns) {
    interval_ns_ = cwnd_ < ssthresh_ ? srtt_ns / (2 * uint64_t{cwnd_})
                                     : srtt_ns * 4 / (5 * uint64_t{cwnd_});
  }
  // A packet may leave now: its time has come, or comes within
  // kPacingSlackNs (waiting for less costs a timer and a pass for nothing:
  // measured, waits of tens of nanoseconds on a fast path delayed ACKs
  // past the tail-loss probe and cost retransmissions on a lossless link).
  bool PaceAllows(uint64_t now) const { return next_send_ns_ <= now + kPacingSlackNs; }
  uint64_t next_send_ns() const { return next_send_ns_; }
  // A packet left at `now`: the next one is due an interval later, with
  // up to kPacingBurst saved while the sender was idle.
  void OnSent(uint64_t now) {
    const uint64_t saved = (kPacingBurst - 1) * interval_ns_;
    next_send_ns_ = std::max(next_send_ns_, now > saved ? now - saved : 0) + interval_ns_;
  }

 private:
  uint32_t cwnd_ = kMinWindow;
  uint32_t ssthresh_ = kMinWindow;
  uint32_t max_ = kMinWindow;
  uint32_t acked_in_ca_ = 0;
  bool in_recovery_ = false;  // cut this flight: no growth until recovery_end_
  bool limited_now_ = false;  // this round trip / the previous one
  bool limited_prev_ = false;
  Psn round_end_;
  Psn recovery_end_;
  uint64_t interval_ns_ = 0;  // 0 until an RTT is measured: no pacing
  uint64_t next_send_ns_ = 0;
};

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_CONGESTION_H_
