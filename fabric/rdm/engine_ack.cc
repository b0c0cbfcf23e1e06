// The sender's side of acknowledgements: cumulative ACKs, RTT samples,
// credits, RNR, SACK-driven fast retransmit and completing sends.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>

#include "fabric/rdm/engine.h"

namespace bypass::rdm {

void Engine::OnAckPacket(uint32_t pi, const wire::View& v) {
  if (pi == kNone) {
    ++counters_.stale_dropped;
    return;
  }
  Peer& p = peers_[pi];
  if (p.addr.incarnation == 0 || v.common.src_incarnation != p.addr.incarnation || !p.rx_known) {
    ++counters_.stale_dropped;
    return;
  }
  p.activity_ns = now_;
  if (v.common.flags & wire::kFlagAckReq) {  // a liveness probe: answer it
    p.ack_now = p.ack_standalone = true;
    Enqueue(pi);
  }
  OnAck(pi, p, v.common, &v.ack);
}

void Engine::OnAck(uint32_t pi, Peer& p, const wire::Common& c, const wire::AckFields* sack) {
  if ((c.flags & wire::kFlagAckValid) == 0) return;
  const Psn ack = c.ack_psn;
  if (!p.tx_ready) {
    // The first acknowledgement of our initial PSN: the peer has our session.
    if (ack == p.snd_una && p.next_psn == p.snd_una) {
      p.tx_ready = true;
      p.hello_wanted = false;
      p.hello_tries = 0;
      p.window_end = ack + c.credit;
      MaybeEstablished(p);
      Enqueue(pi);
    }
    return;
  }
  if (ack.Before(p.snd_una) || ack.After(p.next_psn)) return;  // stale or bogus
  if (ack.After(p.snd_una)) {
    bool sampled = false;
    uint64_t sample = 0;
    for (Psn q = p.snd_una; q.Before(ack); ++q) {
      TxEntry& e = p.entry(q);
      if ((e.state & kTxRetransmitted) == 0) {  // Karn: only packets sent once
        sample = now_ - e.first_sent_ns;
        sampled = true;
      }
      if (e.state & kTxNeedsRetx) --p.retx_queued;
      e.state = 0;
      e.op = kNone;
    }
    if (sampled) p.rtt.Sample(sample);
    p.acks_on_data = c.type != wire::PacketType::kAck;
    p.snd_una = ack;
    p.backoff = 0;
    p.rnr_wait = false;
    p.rnr_delay = 0;
    p.rnr_since = 0;
    CompleteAckedOps(p);
    p.rto_deadline = p.inflight() > 0 ? now_ + p.rtt.rto() : 0;
    if (p.rto_deadline != 0) ArmTimer(p.rto_deadline);
    ArmTailProbe(p);
  }
  p.window_end = ack + c.credit;
  if (c.flags & wire::kFlagRnr) {
    if (p.inflight() > 0) {
      // Refused for lack of receive resources: not a loss; retry later,
      // unless it has been refused for rnr_give_up_ns.
      ++counters_.rnr_received;
      if (p.rnr_since == 0) p.rnr_since = now_;
      if (now_ - p.rnr_since >= config_.rnr_give_up_ns && GiveUpRefused(pi, p)) return;
      p.rnr_delay = p.rnr_delay == 0 ? config_.rnr_retry_min_ns
                                     : std::min(2 * p.rnr_delay, config_.rnr_retry_max_ns);
      p.rnr_wait = true;
      p.rnr_until = now_ + p.rnr_delay;
      p.rto_deadline = 0;
      ArmTimer(p.rnr_until);
    }
  } else if (p.rnr_wait && c.type == wire::PacketType::kAck) {
    // A window update: the receiver has room again.
    p.rnr_wait = false;
    if (p.inflight() > 0) {
      MarkRetx(p, p.snd_una, /*fast=*/false);
      p.rto_deadline = now_ + p.rtt.rto(p.backoff);
      ArmTimer(p.rto_deadline);
    }
  }
  if (sack != nullptr && !p.rnr_wait) ProcessSack(pi, p, ack, *sack);
  if (HasWork(p)) Enqueue(pi);
}

void Engine::ProcessSack(uint32_t pi, Peer& p, Psn ack, const wire::AckFields& sack) {
  bool any = false;
  Psn highest;
  uint64_t latest_sent = 0;  // of any packet the receiver holds
  for (uint32_t i = 0; i < wire::kSackBits; ++i) {
    const Psn q = ack + 1 + i;
    if (!q.Before(p.next_psn)) break;
    if (!sack.Has(i)) continue;
    TxEntry& e = p.entry(q);
    latest_sent = std::max(latest_sent, e.last_sent_ns);
    if ((e.state & kTxSacked) == 0) {
      e.state |= kTxSacked;
      if (e.state & kTxNeedsRetx) {
        e.state &= static_cast<uint8_t>(~(kTxNeedsRetx | kTxFast));
        --p.retx_queued;
      }
    }
    highest = q;
    any = true;
  }
  if (!any) return;
  // A hole far enough below the highest SACKed PSN is lost. A hole already
  // retransmitted is lost again only if a packet sent after that
  // retransmission has arrived (as in RACK), so one loss costs one
  // retransmission however many SACKs report it.
  for (Psn q = ack; q.Before(highest); ++q) {
    if (static_cast<uint32_t>(highest - q) < config_.fast_retransmit_threshold) break;
    TxEntry& e = p.entry(q);
    if (e.state & (kTxSacked | kTxNeedsRetx)) continue;
    if ((e.state & kTxRetransmitted) && latest_sent <= e.last_sent_ns) continue;
    MarkRetx(p, q, /*fast=*/true);
  }
  if (p.retx_queued > 0) Enqueue(pi);
}

bool Engine::GiveUpRefused(uint32_t pi, Peer& p) {
  const TxEntry& e = p.entry(p.snd_una);
  if (e.op == kNone || e.offset != 0) return false;  // refusals only happen at a message's start
  const uint32_t o = e.op;
  SendOp& op = ops_[o];
  if (op.abandoned) return false;
  // RMA requests and answers are not messages (engine_rma.cc): never given
  // up; nor is a pulled message's data (the receiver asked for it).
  if ((op.kind != OpKind::kMsg && op.kind != OpKind::kRndv) || op.pulled) return false;
  op.abandoned = true;
  if (p.cursor_op == o) {  // its unsent segments never go
    op.all_sent = true;
    op.last_psn = p.next_psn + UINT32_MAX;  // next_psn - 1
    p.cursor_op = op.next;
    p.cursor_offset = 0;
  }
  ++counters_.rnr_give_ups;
  ++counters_.ops_failed;
  char why[128];
  std::snprintf(why, sizeof(why),
                "has posted no receive for it for %llu ms (unexpected queue full); send failed",
                static_cast<unsigned long long>((now_ - p.rnr_since) / 1'000'000));
  ReportSendError(o, ENOSPC, why);
  // What is in flight of it goes again as abandoned, so that the receiver
  // spends its PSNs and message number and goes on with the next message.
  p.rnr_since = 0;
  p.rnr_wait = false;
  p.rnr_delay = 0;
  MarkRetx(p, p.snd_una, /*fast=*/false);
  p.rto_deadline = now_ + p.rtt.rto(p.backoff);
  ArmTimer(p.rto_deadline);
  Enqueue(pi);
  return true;
}

void Engine::CompleteAckedOps(Peer& p) {
  while (!p.ops.empty()) {
    const uint32_t o = p.ops.front();
    const SendOp& op = ops_[o];
    if (!op.all_sent || !op.last_psn.Before(p.snd_una)) break;
    p.ops.Remove(ops_.get(), o);
    OpAcked(p, o);
  }
}

}  // namespace bypass::rdm
