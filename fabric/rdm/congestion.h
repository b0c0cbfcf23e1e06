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

// What a window needs during one flight (from the first packet sent after
// the peer was idle until nothing is in flight again): kept in the peer's
// busy record (Reliability's ActiveStreams), and fresh (CcFlight{}) when a
// flight starts. None of it outlives its flight: recovery ends once the
// flight of the last decrease is acknowledged, the round-trip marks and
// "in use" notes are per round trip, and the pacing rate is remade from
// the RTT estimate when a flight starts (a sender idle for a round trip
// had saved a full burst anyway).
struct CcFlight {
  Psn round_end;     // the round trip in progress ends when this is acknowledged
  Psn recovery_end;  // cut this flight: no growth, no further cut, until this is acknowledged
  uint32_t interval_ns = 0;  // pacing gap; 0 until an RTT is measured: no pacing
  bool started : 1 = false;  // a packet of this flight was sent (OnSent)
  bool in_recovery : 1 = false;
  bool limited_now : 1 = false;  // this round trip / the previous one
  bool limited_prev : 1 = false;
  uint64_t next_send_ns = 0;
};

// What persists while the peer is idle (8 B in the peer's slot): the
// window, slow start's threshold, the maximum, and the packets acknowledged
// toward the next +1 in congestion avoidance. Windows are at most the credit
// window (256 packets, config.cc), so 16 bits hold them.
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
  static constexpr uint32_t kMaxWindow = 0xffff;

  // A new session: `initial` packets, growing to at most `max` (the credit
  // window can never let more go). The flight's part starts fresh apart.
  void Reset(uint32_t initial, uint32_t max) {
    *this = CongestionWindow{};
    max_ = static_cast<uint16_t>(std::clamp(max, kMinWindow, kMaxWindow));
    cwnd_ = static_cast<uint16_t>(std::clamp<uint32_t>(initial, kMinWindow, max_));
    ssthresh_ = max_;
  }

  uint32_t cwnd() const { return cwnd_; }
  uint32_t ssthresh() const { return ssthresh_; }

  // New data waited while the window was full: the window is in use, so
  // ACKs may grow it (an application-limited sender's window does not
  // grow past what it uses, as RFC 7661).
  static void NoteLimited(CcFlight& f) { f.limited_now = true; }

  // `acked` packets were newly acknowledged cumulatively, una is the new
  // snd_una and next the next PSN to send. Ends recovery once the flight
  // of the last decrease is acknowledged; grows the window otherwise.
  void OnAcked(CcFlight& f, uint32_t acked, Psn una, Psn next) {
    if (!una.Before(f.round_end)) {  // a round trip ended
      f.limited_prev = f.limited_now;
      f.limited_now = false;
      f.round_end = next;
    }
    if (f.in_recovery) {
      if (una.Before(f.recovery_end)) return;
      f.in_recovery = false;
    }
    if (!f.limited_now && !f.limited_prev) return;
    if (cwnd_ < ssthresh_) {  // slow start: +1 per packet acknowledged
      cwnd_ = static_cast<uint16_t>(std::min({cwnd_ + acked, uint32_t{ssthresh_}, uint32_t{max_}}));
      return;
    }
    // congestion avoidance: +1 per window acknowledged
    uint32_t in_ca = acked_in_ca_ + acked;
    while (in_ca >= cwnd_) {
      in_ca -= cwnd_;
      cwnd_ = static_cast<uint16_t>(std::min<uint32_t>(cwnd_ + 1, max_));
    }
    acked_in_ca_ = static_cast<uint16_t>(in_ca);  // < cwnd_
  }

  // A loss signal (a fast retransmit: a SACK gap) while snd_una is una
  // and next is the next PSN: halves the window unless this flight was
  // already cut (once per round trip). Returns whether it did.
  bool OnLoss(CcFlight& f, Psn una, Psn next) {
    if (una.Before(f.recovery_end)) return false;
    ssthresh_ = static_cast<uint16_t>(std::max<uint32_t>(cwnd_ / 2, kMinWindow));
    cwnd_ = ssthresh_;
    acked_in_ca_ = 0;
    f.in_recovery = true;
    f.recovery_end = next;
    return true;
  }

  // The retransmission timer expired: everything in flight may be lost.
  // The minimum window, then slow start to half the window it had.
  void OnRto(CcFlight& f, Psn next) {
    if (cwnd_ > kLossWindow) {  // not again on backoff
      ssthresh_ = static_cast<uint16_t>(std::max<uint32_t>(cwnd_ / 2, kMinWindow));
    }
    cwnd_ = kLossWindow;
    acked_in_ca_ = 0;
    f.in_recovery = false;  // slow start grows it back at once
    f.recovery_end = next;  // no further halving for this flight
  }

  // ---- Pacing: a window over the smoothed RTT, faster than it (gain 2 in
  // slow start, 5/4 after, as Linux's pacing) so that pacing never holds
  // the window below its rate, only spreads its bursts.
  void SetRtt(CcFlight& f, uint64_t srtt_ns) const {
    const uint64_t gap = cwnd_ < ssthresh_ ? srtt_ns / (2 * uint64_t{cwnd_})
                                           : srtt_ns * 4 / (5 * uint64_t{cwnd_});
    f.interval_ns = static_cast<uint32_t>(std::min<uint64_t>(gap, UINT32_MAX));
  }
  // A packet may leave now: its time has come, or comes within
  // kPacingSlackNs (waiting for less costs a timer and a pass for nothing:
  // measured, waits of tens of nanoseconds on a fast path delayed ACKs
  // past the tail-loss probe and cost retransmissions on a lossless link).
  static bool PaceAllows(const CcFlight& f, uint64_t now) {
    return f.next_send_ns <= now + kPacingSlackNs;
  }
  // Packet `psn` left at `now`: the next one is due an interval later, with
  // up to kPacingBurst saved while the sender was idle. The first packet
  // of a flight starts its round trip (the caller set its pacing first).
  static void OnSent(CcFlight& f, Psn psn, uint64_t now) {
    if (!f.started) {
      f.started = true;
      f.round_end = f.recovery_end = psn;
    }
    const uint64_t saved = (kPacingBurst - 1) * uint64_t{f.interval_ns};
    f.next_send_ns = std::max(f.next_send_ns, now > saved ? now - saved : 0) + f.interval_ns;
  }

 private:
  uint16_t cwnd_ = kMinWindow;
  uint16_t ssthresh_ = kMinWindow;
  uint16_t max_ = kMinWindow;
  uint16_t acked_in_ca_ = 0;
};
static_assert(sizeof(CongestionWindow) == 8);

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_CONGESTION_H_
