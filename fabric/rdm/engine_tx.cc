// The transmit side: which peer sends what next, and the packet builders.
#include <algorithm>
#include <cstdint>

#include "fabric/rdm/engine.h"

namespace bypass::rdm {

bool Engine::HasWork(const Peer& p) const {
  if (!p.tx_ready && p.hello_wanted && p.hello_due_ns <= now_) return true;
  if (p.hello_ack_owed) return true;
  if (p.rx_known && (p.ack_now || p.ack_standalone || p.rnr_owed)) return true;
  if (!p.tx_ready) return false;
  if (p.retx_queued > 0) return true;
  return !p.rnr_wait && p.cursor_op != kNone && p.WindowOpen() && !CursorHeld(p);
}

size_t Engine::BuildTx(absl::Span<driver::Packet* const> bufs) {
  size_t n = 0;
  while (n < bufs.size() && reset_count_ > 0) {
    BuildResetPacket(resets_[reset_head_], bufs[n++]);
    reset_head_ = (reset_head_ + 1) % kMaxPendingResets;
    --reset_count_;
  }
  // Each peer queued now gets one turn of up to kPacketsPerTurn packets.
  for (uint32_t turns = work_count_; turns > 0 && n < bufs.size(); --turns) {
    const uint32_t pi = work_[work_head_];
    work_head_ = work_head_ + 1 == config_.max_peers ? 0 : work_head_ + 1;
    --work_count_;
    Peer& p = peers_[pi];
    p.queued = false;
    const size_t room = std::min<size_t>(bufs.size() - n, kPacketsPerTurn);
    n += BuildForPeer(p, bufs.subspan(n, room));
    if (HasWork(p)) Enqueue(pi);
  }
  return n;
}

size_t Engine::BuildForPeer(Peer& p, absl::Span<driver::Packet* const> bufs) {
  size_t n = 0;
  if (!p.tx_ready && p.hello_wanted && p.hello_due_ns <= now_ && n < bufs.size()) {
    BuildHello(p, wire::PacketType::kHello, bufs[n++]);
    // Repeated after the RTO, doubling each time (the initial RTO before
    // any round trip was measured).
    p.hello_due_ns = now_ + p.rtt.rto(p.hello_tries);
    ++p.hello_tries;
    ArmTimer(p.hello_due_ns);
  }
  if (p.hello_ack_owed && n < bufs.size()) {
    BuildHello(p, wire::PacketType::kHelloAck, bufs[n++]);
    p.hello_ack_owed = false;
  }
  if (p.tx_ready) {
    for (Psn q = p.snd_una; p.retx_queued > 0 && q.Before(p.next_psn) && n < bufs.size(); ++q) {
      if (p.entry(q).state & kTxNeedsRetx) BuildRetransmit(p, q, bufs[n++]);
    }
    while (!p.rnr_wait && p.cursor_op != kNone && n < bufs.size() && p.WindowOpen() &&
           !CursorHeld(p)) {
      BuildSegment(p, bufs[n++]);
    }
    // Data waiting and a closed window: count the stall once per closing.
    const bool stalled = p.cursor_op != kNone && !p.WindowOpen();
    if (stalled && !p.window_stalled) ++counters_.window_stalls;
    p.window_stalled = stalled;
  }
  if (p.rx_known && (p.ack_standalone || p.rnr_owed || p.ack_now) && n < bufs.size()) {
    BuildAckPacket(p, bufs[n++]);
  }
  return n;
}

uint16_t Engine::Grant(const Peer& p) const {
  // rcv_nxt is always welcome (it is consumed at once); beyond it, only what
  // can be held out of order.
  const uint32_t free_held = held_budget_ - held_total_ + p.held_count;
  return static_cast<uint16_t>(1 + std::min(config_.window_packets - 1, free_held));
}

wire::Common Engine::CommonFor(Peer& p, wire::PacketType type, uint16_t flags) {
  wire::Common c;
  c.type = type;
  c.flags = flags;
  c.src_incarnation = incarnation_;
  c.dst_incarnation = p.addr.incarnation;
  c.auth_key = config_.auth_key;
  c.psn = p.next_psn;
  if (p.rx_known) {
    c.flags |= wire::kFlagAckValid;
    c.ack_psn = p.rcv_nxt;
    c.credit = Grant(p);
  }
  return c;
}

void Engine::NoteAckSent(Peer& p, bool standalone) {
  if (!p.rx_known) return;
  p.unacked_rx = 0;
  p.ack_deadline = 0;
  p.ack_now = false;
  if (standalone) {
    p.ack_standalone = false;
    p.rnr_owed = false;
  }
}

void Engine::BuildHello(Peer& p, wire::PacketType type, driver::Packet* pkt) {
  wire::Common c = CommonFor(p, type, 0);
  c.psn = p.tx_isn;  // HELLO and HELLO_ACK name the session by its initial PSN
  if (!p.rx_known) c.credit = Grant(p);
  wire::HelloFields h;
  h.max_datagram = static_cast<uint16_t>(max_datagram_);
  pkt->len = static_cast<uint32_t>(wire::BuildHello(p.flow, c, h, {pkt->data, pkt->capacity}));
  NoteAckSent(p, false);
  ++counters_.tx_packets;
}

void Engine::BuildAckPacket(Peer& p, driver::Packet* pkt) {
  // A probe (engine_rma.cc) asks the peer to answer at once.
  const wire::Common c =
      CommonFor(p, wire::PacketType::kAck,
                static_cast<uint16_t>((p.rnr_owed ? wire::kFlagRnr : 0) |
                                      (p.probe_owed ? wire::kFlagAckReq : 0)));
  p.probe_owed = false;
  wire::AckFields a;
  if (p.held_count > 0) {
    for (uint32_t i = 0; i < wire::kSackBits && i + 1 < config_.window_packets; ++i) {
      if (p.held_at(p.rcv_nxt + 1 + i).pkt != nullptr) a.Set(i);
    }
  }
  pkt->len = static_cast<uint32_t>(wire::BuildAck(p.flow, c, a, {pkt->data, pkt->capacity}));
  NoteAckSent(p, true);
  ++counters_.tx_packets;
  ++counters_.tx_acks;
}

void Engine::BuildSegment(Peer& p, driver::Packet* pkt) {
  const uint32_t o = p.cursor_op;
  SendOp& op = ops_[o];
  if (!op.started) {
    op.started = true;
    if (op.kind == OpKind::kMsg || op.kind == OpKind::kRndv) op.msg_id = p.next_msg_id++;
  }
  // What this phase of the op streams: a message's bytes, or (engine_rma.cc)
  // an RMA write's or read answer's; requests are one packet.
  const uint64_t wire_len = op.kind == OpKind::kMsg ? op.len : op.wire_len;
  const uint64_t seg = std::min<uint64_t>(SegmentMax(p, op), wire_len - p.cursor_offset);
  const Psn psn = p.next_psn;
  TxEntry& e = p.entry(psn);
  e.op = o;
  e.len = static_cast<uint32_t>(seg);
  e.offset = p.cursor_offset;
  e.first_sent_ns = e.last_sent_ns = now_;
  e.state = 0;
  // Ask for an ACK when this packet fills the window (the sender waits
  // next), or ends a send whose owner waits for its completion (kSendAckNow:
  // a message, or a rendezvous message's pulled bytes).
  const bool fills = !(psn + 1).Before(p.window_end) || p.inflight() + 1 > p.ring_mask;
  const bool completes = op.ack_now && p.cursor_offset + seg == wire_len &&
                         (op.kind == OpKind::kMsg || (op.kind == OpKind::kRndv && op.pulled));
  WriteData(p, psn, e, fills || completes ? wire::kFlagAckReq : 0, pkt);
  ++p.next_psn;
  p.cursor_offset += seg;
  if (op.kind == OpKind::kRndv && !op.pulled) {  // engine_rma.cc
    p.rndv_hold = true;
    p.rndv_hold_msg_id = op.msg_id;
  }
  if (p.cursor_offset == wire_len) {
    op.all_sent = true;
    op.last_psn = psn;
    p.cursor_op = op.next;
    p.cursor_offset = 0;
  }
  if (p.rto_deadline == 0 && !p.rnr_wait) {
    p.rto_deadline = now_ + p.rtt.rto(p.backoff);
    ArmTimer(p.rto_deadline);
    ArmTailProbe(p);
  }
}

void Engine::BuildRetransmit(Peer& p, Psn psn, driver::Packet* pkt) {
  TxEntry& e = p.entry(psn);
  if (e.state & kTxFast) {
    ++counters_.retransmits_fast;
  } else {
    ++counters_.retransmits_timeout;
  }
  WriteData(p, psn, e, wire::kFlagRetransmit | wire::kFlagAckReq, pkt);
  e.last_sent_ns = now_;
  e.state =
      static_cast<uint8_t>((e.state | kTxRetransmitted) & ~(kTxNeedsRetx | kTxFast | kTxSacked));
  --p.retx_queued;
  if (p.rto_deadline == 0 && !p.rnr_wait) {
    p.rto_deadline = now_ + p.rtt.rto(p.backoff);
    ArmTimer(p.rto_deadline);
  }
}

void Engine::WriteData(Peer& p, Psn psn, const TxEntry& e, uint16_t flags, driver::Packet* pkt) {
  const SendOp& op = ops_[e.op];
  if (op.kind != OpKind::kMsg && !(op.kind == OpKind::kRndv && !op.pulled)) {
    WriteRmaPacket(p, psn, e, flags, pkt);
    return;
  }
  wire::Common c = CommonFor(p, wire::PacketType::kData, flags);
  c.psn = psn;
  wire::MsgFields m;
  m.msg_id = op.msg_id;
  m.msg_flags = op.msg_flags;
  m.total_length = op.len;
  m.offset = e.offset;
  m.tag = op.tag;
  m.data = op.data;
  if (op.kind == OpKind::kRndv) m.protocol = wire::MsgProtocol::kRendezvous;  // no payload
  absl::Span<const uint8_t> payload =
      e.len > 0 ? absl::Span<const uint8_t>(op.buf + e.offset, e.len) : absl::Span<const uint8_t>();
  if (op.abandoned) {  // given up: the PSN goes, the bytes do not
    m.msg_flags |= wire::kMsgAbandoned;
    payload = {};
  }
  pkt->len =
      static_cast<uint32_t>(wire::BuildData(p.flow, c, m, payload, {pkt->data, pkt->capacity}));
  NoteAckSent(p, false);
  ++counters_.tx_packets;
  ++counters_.tx_data_packets;
}

void Engine::BuildResetPacket(const PendingReset& r, driver::Packet* pkt) {
  wire::Common c;
  c.type = wire::PacketType::kReset;
  c.src_incarnation = incarnation_;
  c.dst_incarnation = r.dst_incarnation;
  c.auth_key = config_.auth_key;
  c.psn = r.psn;
  wire::ResetFields f;
  f.reason = r.reason;
  f.incarnation = r.about_incarnation;
  pkt->len = static_cast<uint32_t>(wire::BuildReset(r.flow, c, f, {pkt->data, pkt->capacity}));
  ++counters_.tx_packets;
  ++counters_.resets_sent;
}

}  // namespace bypass::rdm
