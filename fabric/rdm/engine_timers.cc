// Timers (delayed ACK, retransmission, RNR retry, handshake retry, peer
// timeout) and tearing a peer's session down.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>

#include "fabric/rdm/engine.h"

namespace bypass::rdm {

void Engine::RunTimers() {
  if (now_ < next_timer_ns_) return;
  uint64_t next = UINT64_MAX;
  const auto due = [&](uint64_t when) {
    if (when > now_) {
      next = std::min(next, when);
      return false;
    }
    return true;
  };
  for (uint32_t i = 0; i < peers_.size(); ++i) {
    Peer& p = peers_[i];
    if (p.ack_deadline != 0 && due(p.ack_deadline)) {
      p.ack_deadline = 0;
      if (p.unacked_rx > 0) {
        p.ack_now = true;
        if (p.held_count > 0) p.ack_standalone = true;
        Enqueue(i);
      }
    }
    if (p.hello_wanted && !p.tx_ready && due(p.hello_due_ns)) Enqueue(i);
    if (p.rnr_wait && due(p.rnr_until)) {
      // Try the refused packet again; the RTO guards the try.
      p.rnr_wait = false;
      if (p.inflight() > 0) {
        MarkRetx(p, p.snd_una, /*fast=*/false);
        p.rto_deadline = now_ + p.rtt.rto(p.backoff);
        Enqueue(i);
      }
    }
    if (p.tlp_deadline != 0 && due(p.tlp_deadline)) OnTailProbe(i, p);
    if (p.tlp_deadline != 0) next = std::min(next, p.tlp_deadline);
    if (p.rto_deadline != 0 && due(p.rto_deadline)) OnRto(i, p);
    if (p.rto_deadline != 0) next = std::min(next, p.rto_deadline);
    RunProbe(i, p, &next);  // engine_rma.cc
    if (p.busy() && due(p.activity_ns + config_.peer_timeout_ns)) {
      ++counters_.peer_timeouts;
      char why[96];
      std::snprintf(why, sizeof(why), "did not answer for %.3f s; operation timed out",
                    static_cast<double>(config_.peer_timeout_ns) / 1e9);
      FailPeer(i, ETIMEDOUT, why, /*keep_unsent=*/false);
    }
    // Deadlines set above (and by FailPeer) count for the next pass.
    if (p.hello_wanted && !p.tx_ready) next = std::min(next, std::max(p.hello_due_ns, now_));
    if (p.busy()) next = std::min(next, p.activity_ns + config_.peer_timeout_ns);
  }
  next_timer_ns_ = next;
}

// A lost tail (or, in a ping-pong, the only packet in flight) has nothing
// after it to be SACKed: the probe resends the newest unacknowledged packet
// after about two round trips (as RFC 8985's PTO: 2 SRTT, or SRTT + 4 RTTVAR
// if the RTT jitters more, plus the peer's ACK delay unless its ACKs have
// been coming on its replies), once per flight or ACK advance, so such a
// loss costs about one round trip more, not the RTO floor. A peer that was
// only slow costs one duplicate; the RTO (with its floor and backoff)
// stays the backstop.
void Engine::ArmTailProbe(Peer& p) {
  p.tlp_deadline = 0;
  if (p.inflight() == 0 || !p.rtt.has_sample() || p.backoff != 0 || p.rnr_wait) return;
  const uint64_t srtt = p.rtt.srtt();
  const uint64_t at = now_ + std::max(2 * srtt, srtt + 4 * p.rtt.rttvar()) +
                      (p.acks_on_data ? 0 : config_.ack_delay_ns);
  if (p.rto_deadline != 0 && at >= p.rto_deadline) return;
  p.tlp_deadline = at;
  ArmTimer(at);
}

void Engine::OnTailProbe(uint32_t pi, Peer& p) {
  p.tlp_deadline = 0;
  if (p.inflight() == 0 || p.backoff != 0 || p.rnr_wait) return;
  Psn q = p.snd_una + (p.inflight() - 1);  // the newest, unless the peer holds it
  if (p.entry(q).state & (kTxSacked | kTxNeedsRetx)) q = p.snd_una;
  if (p.entry(q).state & (kTxSacked | kTxNeedsRetx)) return;  // recovery under way
  ++counters_.tail_probes;
  MarkRetx(p, q, /*fast=*/false);
  Enqueue(pi);
}

void Engine::OnRto(uint32_t pi, Peer& p) {
  ++counters_.rto_expirations;
  p.tlp_deadline = 0;
  if (p.inflight() == 0) {
    p.rto_deadline = 0;
    return;
  }
  // The oldest unacknowledged packet always goes; later ones that were not
  // SACKed and have waited a whole RTO too (a lost tail).
  const uint64_t rto = p.rtt.rto(p.backoff);
  for (Psn q = p.snd_una; q.Before(p.next_psn); ++q) {
    TxEntry& e = p.entry(q);
    if (e.state & kTxNeedsRetx) {
      e.state &= static_cast<uint8_t>(~kTxFast);
      continue;
    }
    if (q == p.snd_una || ((e.state & kTxSacked) == 0 && now_ - e.last_sent_ns >= rto)) {
      MarkRetx(p, q, /*fast=*/false);
    }
  }
  p.backoff = std::min<uint32_t>(p.backoff + 1, 30);
  p.rto_deadline = now_ + p.rtt.rto(p.backoff);
  Enqueue(pi);
}

void Engine::MarkRetx(Peer& p, Psn psn, bool fast) {
  TxEntry& e = p.entry(psn);
  if ((e.state & kTxNeedsRetx) == 0) ++p.retx_queued;
  e.state = static_cast<uint8_t>((e.state | kTxNeedsRetx) & ~kTxSacked);
  if (fast) {
    e.state |= kTxFast;
  } else {
    e.state &= static_cast<uint8_t>(~kTxFast);
  }
}

void Engine::FailPeer(uint32_t pi, int err, const char* why, bool keep_unsent) {
  Peer& p = peers_[pi];
  // Send operations: those that put anything on the wire of this session
  // fail; the others wait for the next session if keep_unsent.
  for (uint32_t o = p.ops.front(); o != kNone;) {
    const uint32_t next = ops_[o].next;
    // The engine's own ops (answers, pulls: engine_rma.cc) belong to the session.
    if (!keep_unsent || ops_[o].started || !IsUserOp(o)) {
      p.ops.Remove(ops_.get(), o);
      FailOp(o, err, why);
    }
    o = next;
  }
  while (!p.waiting.empty()) {  // RMA and rendezvous waiting for its answer
    const uint32_t o = p.waiting.front();
    p.waiting.Remove(ops_.get(), o);
    FailOp(o, err, why);
  }
  p.rx_rma = RxRma{};
  p.rndv_hold = false;
  p.cursor_op = p.ops.front();
  p.cursor_offset = 0;
  for (Psn q = p.snd_una; q.Before(p.next_psn); ++q) p.entry(q) = TxEntry{};
  // Receive side: the message in flight and everything held.
  AbortRxMessage(pi, p, err, why);
  // Its requests to send waiting unexpected: their bytes stay with a session
  // that is gone, so nothing can pull them; no receive or peek finds them.
  const PeerId id = peers_.Id(pi);
  const uint64_t lost = counters_.rendezvous_lost;
  for (uint32_t e = matcher_.FindRendezvousFrom(id); e != kNone;
       e = matcher_.FindRendezvousFrom(id)) {
    matcher_.Release(e);
    ++counters_.rendezvous_lost;
  }
  if (counters_.rendezvous_lost != lost) {
    NoteUnexpectedDepth();
    ResourcesFreed();
  }
  for (uint32_t k = 0; k <= p.ring_mask && p.held_count > 0; ++k) {
    if (p.held[k].pkt == nullptr) continue;
    Release(p.held[k].pkt);
    p.held[k].pkt = nullptr;
    --p.held_count;
    --held_total_;
  }
  if (p.rx_refused) {
    p.rx_refused = false;
    --refused_peers_;
  }
  // A fresh session, to be shaken hands again when there is something to send.
  NewTxSession(p);
  p.rx_known = false;
  p.counted_established = false;
  p.rx_next_msg_id = 0;
  p.rx_skip = false;
  p.unacked_rx = 0;
  p.ack_deadline = 0;
  p.ack_now = p.ack_standalone = p.rnr_owed = false;
  p.hello_ack_owed = false;
  p.hello_tries = 0;
  p.hello_wanted = !p.ops.empty();
  p.hello_due_ns = now_;
  if (!p.ops.empty()) {
    p.activity_ns = now_;
    Enqueue(pi);
  }
}

}  // namespace bypass::rdm
