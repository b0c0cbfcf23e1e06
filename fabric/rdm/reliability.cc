// Sequenced streams: segmentation, acknowledgement, loss recovery, credits
// and refusals (PROTOCOL.md, "Reliability").
#include "fabric/rdm/reliability.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace bypass::rdm {

const ActiveStreams Reliability::kIdle{};

Reliability::Reliability(Context& ctx, Session& session, OpTable& ops, Completions& completions,
                         uint32_t ring_size, uint32_t held_budget)
    : ctx_(ctx),
      session_(session),
      ops_(ops),
      completions_(completions),
      ring_mask_(ring_size - 1),
      held_budget_(held_budget),
      rto_bounds_{ctx.config.rto_initial_ns, ctx.config.rto_min_ns, ctx.config.rto_max_ns},
      peers_(new PeerStreams[ctx.config.max_peers]),
      active_pool_(ctx.config.ActivePeers(), 1),
      tx_pool_(ctx.config.ActivePeers(), ring_size),
      held_pool_(ctx.config.ActivePeers(), ring_size) {}

Reliability::~Reliability() {
  for (uint32_t pi = 0; pi < ctx_.config.max_peers; ++pi) {
    ActiveStreams* a = peers_[pi].active;
    if (a == nullptr) continue;
    if (a->tx.ring != nullptr) GiveTxRing(a->tx);
    if (a->rx.held != nullptr) GiveHeldRing(a->rx);
    active_pool_.Give(a);
  }
}

bool Reliability::Idle(const ActiveStreams& a) {
  // Then the record reads as a fresh one (ActiveStreams{}), so that giving
  // it back loses nothing and the next peer takes a fresh one: with no op
  // queued the cursor is at none; with no ring nothing is in flight, and the
  // ACK that ended the flight (or RestartTx) cleared the retransmissions
  // queued, the backoff, the RNR state and an RTO's episode (whose other
  // fields are read only within one); with no held ring nothing is
  // held (highest_held is set again with the first packet held).
  const TxActive& t = a.tx;
  return t.ops.empty() && t.waiting.empty() && t.ring == nullptr && a.rx.held == nullptr &&
         t.rto_deadline == 0 && t.tlp_deadline == 0;
}

// ---- Peers and sessions.

void Reliability::AddPeer(uint32_t pi) {
  const EndpointConfig& c = ctx_.config;
  PeerStreams& p = peers_[pi];
  if (p.active != nullptr) {
    ActiveStreams& a = *p.active;
    if (a.tx.ring != nullptr) GiveTxRing(a.tx);
    if (a.rx.held != nullptr) GiveHeldRing(a.rx);
    a = ActiveStreams{};  // as fresh as the pool's others (Idle)
    active_pool_.Give(p.active);
    --busy_peers_;
  }
  ClearAckDeadline(p.rx);
  p = PeerStreams{};
  TxStream& t = p.tx;
  t.next_psn = t.snd_una = t.window_end = session_[pi].tx_isn;
  t.cc.Reset(c.cc_initial_window, c.window_packets);
}

void Reliability::GiveTxRing(TxActive& a) {
  tx_pool_.Give(a.ring);
  a.ring = nullptr;
}

void Reliability::GiveHeldRing(RxActive& a) {
  held_pool_.Give(a.held);
  a.held = nullptr;
}

void Reliability::RestartTx(uint32_t pi) {
  TxStream& t = tx(pi);
  if (peers_[pi].active != nullptr) {
    TxActive& a = Act(pi).tx;
    for (Psn q = t.snd_una; q.Before(t.next_psn); ++q) entry(a, q) = TxEntry{};
    if (a.ring != nullptr) GiveTxRing(a);
    a.retx_queued = 0;
    a.backoff = 0;
    a.rto_deadline = 0;
    a.tlp_deadline = 0;
    a.rnr = RnrState{};
    a.cc = CcFlight{};
    a.rto_pending = false;
    a.rto_second = false;
  }
  t.next_psn = t.snd_una = t.window_end = session_[pi].tx_isn;
  t.acks_on_data = false;
  t.window_stalled = false;
  t.cc.Reset(ctx_.config.cc_initial_window, ctx_.config.window_packets);
  t.cwnd_stalled = false;
  t.pace_wait = false;
  t.hold = false;
  Rewind(pi);
}

void Reliability::Rewind(uint32_t pi) {
  if (peers_[pi].active == nullptr) return;  // nothing queued: the cursor is at none already
  TxActive& a = Act(pi).tx;
  a.cursor_op = a.ops.front();
  a.cursor_offset = 0;
  Settle(pi);
}

void Reliability::StartRx(uint32_t pi, uint16_t credit) {
  rx(pi).rcv_nxt = session_[pi].rx_isn;
  if (!session_[pi].tx_ready) tx(pi).window_end = tx(pi).snd_una + credit;
}

void Reliability::DropAllHeld(uint32_t pi) {
  if (peers_[pi].active == nullptr) return;
  RxActive& a = Act(pi).rx;
  for (uint32_t k = 0; k <= ring_mask_ && a.held_count > 0; ++k) {
    if (a.held[k].pkt != nullptr) Unhold(pi, &a.held[k]);
  }
}

void Reliability::ResetRx(uint32_t pi) {
  DropAllHeld(pi);
  RxStream& r = rx(pi);
  if (r.refused) {
    r.refused = false;
    --refused_peers_;
  }
  r.unacked = 0;
  ClearAckDeadline(r);
  r.ack_now = r.ack_standalone = r.rnr_owed = r.ack_deferred = false;
  Settle(pi);
}

void Reliability::ReleaseAll() {
  for (uint32_t pi = 0; pi < session_.peers().size(); ++pi) {
    DropAllHeld(pi);
    Settle(pi);
  }
}

// ---- Sending.

void Reliability::Queue(uint32_t pi, uint32_t o) {
  SendOp& op = ops_[o];
  op.peer = pi;
  op.state = OpState::kQueued;
  op.all_sent = false;
  if (!Busy(pi) && !session_[pi].hello_wanted) {
    // Work begins: the peer's silence counts from now.
    session_[pi].activity_ns = ctx_.now;
    ctx_.ArmTimer(pi, ctx_.now + ctx_.config.peer_timeout_ns);
  }
  TxActive& t = Act(pi).tx;
  if (t.cursor_op == kNone) {
    t.ops.PushBack(ops_.base(), o);
    t.cursor_op = o;
    t.cursor_offset = 0;
  } else if (!Traits(op.kind).jumps_queue) {
    t.ops.PushBack(ops_.base(), o);
  } else {
    // Answers and pulled bytes go after the others of their kind but before
    // the user's ops not yet started: nothing the receiver may refuse
    // delays them.
    uint32_t at = t.cursor_offset == 0 ? t.cursor_op : ops_[t.cursor_op].next;
    while (at != kNone && Traits(ops_[at].kind).jumps_queue) at = ops_[at].next;
    if (at == kNone) {
      t.ops.PushBack(ops_.base(), o);
    } else {
      t.ops.InsertBefore(ops_.base(), at, o);
      if (at == t.cursor_op) t.cursor_op = o;  // cursor_offset is 0 there
    }
  }
  session_.WantHello(pi);
  ctx_.Enqueue(pi);
}

bool Reliability::CursorHeld(const TxStream& t, const TxActive& a) const {
  return t.hold && ops_.IsUser(a.cursor_op) && !Traits(ops_[a.cursor_op].kind).jumps_queue;
}

wire::Common Reliability::Header(uint32_t pi, wire::PacketType type, uint16_t flags) const {
  wire::Common c;
  c.type = type;
  c.flags = flags;
  c.src_incarnation = ctx_.incarnation;
  c.dst_incarnation = session_.address(pi).incarnation;
  c.auth_key = ctx_.config.auth_key;
  c.psn = tx(pi).next_psn;
  // Handshakes (built from this header too) always carry their CRC.
  if (session_[pi].sends_unchecked && type != wire::PacketType::kHello) {
    c.flags |= wire::kFlagUnchecked;
  }
  if (session_[pi].rx_known) {
    c.flags |= wire::kFlagAckValid;
    c.ack_psn = rx(pi).rcv_nxt;
    c.credit = Grant(pi);
  }
  return c;
}

uint16_t Reliability::Grant(uint32_t pi) const {
  // rcv_nxt is always welcome (it is consumed at once); beyond it, only what
  // can be held out of order.
  const uint32_t free_held = held_budget_ - held_total_ + rx_active(pi).held_count;
  return static_cast<uint16_t>(1 + std::min(ctx_.config.window_packets - 1, free_held));
}

void Reliability::NoteAckSent(uint32_t pi, bool standalone) {
  if (!session_[pi].rx_known) return;
  RxStream& r = rx(pi);
  r.unacked = 0;
  ClearAckDeadline(r);
  r.ack_now = false;
  r.ack_deferred = false;
  if (standalone) {
    r.ack_standalone = false;
    r.rnr_owed = false;
  }
}

size_t Reliability::Build(uint32_t pi, bool* probe_owed,
                         absl::Span<driver::Packet* const> bufs, uint32_t rx_next_msg_id) {
  size_t n = 0;
  TxStream& t = tx(pi);
  if (session_[pi].tx_ready) {
    if (t.pace_wait && !Paced(pi)) t.pace_wait = false;
    // A peer with nothing to send has no record, and Build takes none: it
    // changes `busy`, which is there whenever anything is to be sent.
    ActiveStreams* busy = peers_[pi].active;
    const TxActive& a = busy != nullptr ? busy->tx : kIdle.tx;
    for (Psn q = t.snd_una; a.retx_queued > 0 && q.Before(t.next_psn) && n < bufs.size() &&
                            !Paced(pi);
         ++q) {
      if (entry(a, q).state & kTxNeedsRetx) BuildRetransmit(pi, q, bufs[n++]);
    }
    while (!a.rnr.waiting && a.cursor_op != kNone && n < bufs.size() && WindowOpen(t) &&
           CwndOpen(pi, t) && !Paced(pi) && !CursorHeld(t, a)) {
      NeedRing(busy->tx);
      BuildSegment(pi, busy->tx, bufs[n++]);
    }
    // Data waiting and a closed window: count the stall once per closing.
    const bool stalled = a.cursor_op != kNone && !WindowOpen(t);
    if (stalled && !t.window_stalled) {
      ++ctx_.counters.window_stalls;
      ctx_.Count(pi, PeerCount::kCreditStalls);
    }
    t.window_stalled = stalled;
    if (CcOn(pi)) NoteCongestionLimits(pi, a);
  }
  const RxStream& r = rx(pi);
  if (session_[pi].rx_known && (r.ack_standalone || r.rnr_owed || r.ack_now || *probe_owed) &&
      n < bufs.size()) {
    BuildAck(pi, *probe_owed, rx_next_msg_id, bufs[n++]);
    *probe_owed = false;
  }
  Settle(pi);
  return n;
}

void Reliability::BuildAck(uint32_t pi, bool probe, uint32_t rx_next_msg_id,
                           driver::Packet* pkt) {
  const RxStream& r = rx(pi);
  const RxActive& h = rx_active(pi);
  const wire::Common c =
      Header(pi, wire::PacketType::kAck,
             static_cast<uint16_t>((r.rnr_owed ? wire::kFlagRnr : 0) |
                                   (probe ? wire::kFlagAckReq : 0)));
  wire::AckFields a;
  if (h.held_count > 0) {
    for (uint32_t i = 0; i < wire::kSackBits && i + 1 < ctx_.config.window_packets; ++i) {
      if (held_at(h, r.rcv_nxt + 1 + i).pkt != nullptr) a.Set(i);
    }
  }
  a.next_msg_id = rx_next_msg_id;
  pkt->len = static_cast<uint32_t>(
      wire::BuildAck(session_.Flow(pi), c, a, {pkt->data, pkt->capacity}));
  NoteAckSent(pi, true);
  ++ctx_.counters.tx_packets;
  ctx_.Count(pi, PeerCount::kTxPackets);
  ++ctx_.counters.tx_acks;
}

// At most this many messages in one bundle (TxEntry::msgs is 8 bits).
constexpr uint32_t kMaxBundleMsgs = 64;

uint32_t Reliability::BundleFrom(uint32_t pi, const TxActive& a, uint32_t max_seg) const {
  // Only to a peer that takes them, and not where a refused send may be
  // given up (rnr_give_up_ns): the receiver may take the first messages of
  // a bundle and refuse the next, and a sender that gave the packet up
  // could not tell which of its messages were delivered.
  if (!session_[pi].takes_bundles || ctx_.config.rnr_give_up_ns != 0 || a.cursor_offset != 0) {
    return 1;
  }
  const auto whole = [&](const SendOp& op) {
    return op.kind == OpKind::kMsg && op.msg.protocol == wire::MsgProtocol::kEager &&
           !op.abandoned && op.wire_len <= max_seg;
  };
  const SendOp* op = &ops_[a.cursor_op];
  if (!whole(*op)) return 1;
  // The payload a packet carries: every message's header but the first
  // (the extension header) and its bytes.
  uint64_t bytes = op->wire_len;
  uint32_t n = 1;
  while (n < kMaxBundleMsgs && op->next != kNone) {
    const SendOp& next = ops_[op->next];
    if (!whole(next) || bytes + sizeof(wire::MsgHeader) + next.wire_len > max_seg) break;
    bytes += sizeof(wire::MsgHeader) + next.wire_len;
    ++n;
    op = &next;
  }
  return n;
}

void Reliability::BuildSegment(uint32_t pi, TxActive& a, driver::Packet* pkt) {
  TxStream& t = tx(pi);
  const uint32_t o = a.cursor_op;
  SendOp& op = ops_[o];
  op.started = true;
  // The peer's limit, within ours toward it (Session::Accept).
  const uint32_t dg = std::min<uint32_t>(ctx_.same_host_max_datagram, session_[pi].max_datagram);
  const uint32_t max_seg = op.type == wire::PacketType::kData ? wire::MaxDataPayload(dg)
                                                              : wire::MaxRmaPayload(dg);
  // A bundle needs another op queued behind this one (a ping-pong never
  // has one: it pays only this test).
  const uint32_t msgs =
      op.type == wire::PacketType::kData && op.next != kNone ? BundleFrom(pi, a, max_seg) : 1;
  const uint64_t seg = std::min<uint64_t>(max_seg, op.wire_len - a.cursor_offset);
  const Psn psn = t.next_psn;
  TxEntry& e = entry(a, psn);
  e.op = o;
  e.len = static_cast<uint32_t>(seg);
  e.offset = a.cursor_offset;
  e.first_sent_ns = e.last_sent_ns = ctx_.now;
  e.state = 0;
  e.msgs = msgs > 1 ? static_cast<uint8_t>(msgs) : 0;
  // Ask for an ACK when this packet fills the window (the sender waits
  // next), or ends an op whose owner waits for its completion on the ACK
  // (kSendAckNow).
  const bool fills = !(psn + 1).Before(t.window_end) || t.inflight() + 1 > ring_mask_ ||
                     (CcOn(pi) && t.inflight() + 1 >= t.cc.cwnd());
  bool completes = op.ack_now && a.cursor_offset + seg == op.wire_len &&
                   Traits(op.kind).after_ack == AfterAck::kComplete;
  if (msgs > 1) {
    // Every message of a bundle is sent whole in this packet.
    uint32_t b = o;
    for (uint32_t i = 0; i < msgs; ++i, b = ops_[b].next) {
      SendOp& m = ops_[b];
      m.started = m.all_sent = true;
      m.last_psn = psn;
      completes = completes || m.ack_now;
      a.cursor_op = m.next;
    }
    a.cursor_offset = 0;
    ctx_.counters.tx_bundled_msgs += msgs;
  }
  WritePacket(pi, psn, e, fills || completes ? wire::kFlagAckReq : 0, pkt);
  ++t.next_psn;
  if (msgs == 1) {
    a.cursor_offset += seg;
    // A request to send holds our later messages until the peer answers, so
    // that the bytes it pulls never queue behind a message it refuses
    // (PROTOCOL.md, Rendezvous). A peer that reads our offers in place pulls
    // nothing: its answer comes after the copy, and waiting for it would
    // leave one message in flight at a time (the offer went on the wire:
    // WritePacket above keeps offer_pid only then).
    if (Traits(op.kind).holds_stream &&
        !(op.msg.offer_pid != 0 && session_[pi].reads_in_place)) {
      t.hold = true;
      t.hold_id = op.msg.msg_id;
    }
    if (a.cursor_offset == op.wire_len) {
      op.all_sent = true;
      op.last_psn = psn;
      a.cursor_op = op.next;
      a.cursor_offset = 0;
    }
  }
  if (a.rto_deadline == 0 && !a.rnr.waiting) ArmFlight(pi, a, /*start=*/true);
  if (CcOn(pi)) CcSent(t, a, psn);
}

void Reliability::BuildRetransmit(uint32_t pi, Psn psn, driver::Packet* pkt) {
  TxStream& t = tx(pi);
  TxActive& a = Act(pi).tx;
  TxEntry& e = entry(a, psn);
  if (e.state & kTxFast) {
    ++ctx_.counters.retransmits_fast;
  } else {
    ++ctx_.counters.retransmits_timeout;
  }
  ctx_.Count(pi, PeerCount::kRetransmits);
  WritePacket(pi, psn, e, wire::kFlagRetransmit | wire::kFlagAckReq, pkt);
  e.last_sent_ns = ctx_.now;
  e.state =
      static_cast<uint8_t>((e.state | kTxRetransmitted) & ~(kTxNeedsRetx | kTxFast | kTxSacked));
  --a.retx_queued;
  if (a.rto_deadline == 0 && !a.rnr.waiting) ArmRto(pi);
  if (CcOn(pi)) CcSent(t, a, psn);
}

void Reliability::WritePacket(uint32_t pi, Psn psn, const TxEntry& e, uint16_t flags,
                              driver::Packet* pkt) {
  const SendOp& op = ops_[e.op];
  wire::Common c = Header(pi, op.type, flags);
  c.psn = psn;
  absl::Span<const uint8_t> payload =
      e.len > 0 ? absl::Span<const uint8_t>(op.src + e.offset, e.len) : absl::Span<const uint8_t>();
  const driver::UdpFlow flow = session_.Flow(pi);
  const absl::Span<uint8_t> frame(pkt->data, pkt->capacity);
  if (e.msgs > 1) {
    pkt->len = static_cast<uint32_t>(WriteBundle(flow, c, e, pkt));
  } else if (op.type == wire::PacketType::kData) {
    if (op.msg.offer_pid != 0 && !session_[pi].same_host) {
      // An offer to read in place goes only to a peer known to be on this
      // host; decided at the first send, so every copy of the request
      // agrees (Messaging::PostSend).
      ops_[e.op].msg.offer_pid = 0;
      ops_[e.op].msg.offer_addr = 0;
    }
    wire::MsgFields m = op.msg;
    m.offset = e.offset;
    if (op.abandoned) {  // given up: the PSN goes, the bytes do not
      m.msg_flags |= wire::kMsgAbandoned;
      payload = {};
      m.offer_pid = 0;  // nor the offer to read them: the send failed, the buffer is the user's
      m.offer_addr = 0;
    }
    pkt->len = static_cast<uint32_t>(wire::BuildData(flow, c, m, payload, frame));
  } else {
    wire::RmaFields r = op.rma;
    r.offset = e.offset;
    pkt->len = static_cast<uint32_t>(wire::BuildRma(flow, c, r, payload, frame));
  }
  NoteAckSent(pi, false);
  ++ctx_.counters.tx_packets;
  ctx_.Count(pi, PeerCount::kTxPackets);
  ++ctx_.counters.tx_data_packets;
}

size_t Reliability::WriteBundle(const driver::UdpFlow& flow, const wire::Common& c,
                                const TxEntry& e, driver::Packet* pkt) {
  wire::BundleWriter w({pkt->data, pkt->capacity});
  uint32_t o = e.op;
  for (uint32_t i = 0; i < e.msgs; ++i, o = ops_[o].next) {
    const SendOp& op = ops_[o];
    if (op.abandoned) {  // given up: the message number goes, the bytes do not
      wire::MsgFields m = op.msg;
      m.msg_flags |= wire::kMsgAbandoned;
      w.Add(m, {});
    } else {
      w.Add(op.msg, {op.src, op.wire_len});
    }
  }
  return w.Finish(flow, c);
}

// ---- Acknowledgements.

void Reliability::AckRequested(uint32_t pi) {
  rx(pi).ack_now = rx(pi).ack_standalone = true;
  ctx_.Enqueue(pi);
}

void Reliability::Acknowledged(uint32_t pi, const wire::Common& c,
                               const wire::AckFields* sack) {
  if ((c.flags & wire::kFlagAckValid) == 0) return;
  TxStream& t = tx(pi);
  const Psn ack = c.ack_psn;
  if (!session_[pi].tx_ready) {
    // The first acknowledgement of our initial PSN: the peer has our session.
    if (ack == t.snd_una && t.next_psn == t.snd_una) {
      session_.TxReady(pi);
      t.window_end = ack + c.credit;
      ctx_.Enqueue(pi);
    }
    return;
  }
  if (ack.Before(t.snd_una) || ack.After(t.next_psn)) return;  // stale or bogus
  if (peers_[pi].active == nullptr) {
    // Nothing in flight (packets in flight hold a ring, and so a record):
    // the ACK brings credit alone.
    t.window_end = ack + c.credit;
    if (HasWork(pi)) ctx_.Enqueue(pi);
    return;
  }
  TxActive& a = Act(pi).tx;
  const uint64_t now = ctx_.now;
  if (ack.After(t.snd_una)) {
    if (a.rto_pending) OnRtoAnswered(a, ack);
    bool sampled = false;
    uint64_t sample = 0;
    for (Psn q = t.snd_una; q.Before(ack); ++q) {
      TxEntry& e = entry(a, q);
      if ((e.state & kTxRetransmitted) == 0) {  // Karn: only packets sent once
        sample = now - e.first_sent_ns;
        sampled = true;
      }
      if (e.state & kTxNeedsRetx) --a.retx_queued;
      e.state = 0;
      e.op = kNone;
    }
    if (sampled) t.rtt.Sample(sample);
    t.acks_on_data = c.type != wire::PacketType::kAck;
    if (CcOn(pi)) {
      t.cc.OnAcked(a.cc, static_cast<uint32_t>(ack - t.snd_una), ack, t.next_psn);
      SetPacing(t, a);
    }
    t.snd_una = ack;
    a.backoff = 0;
    a.rnr = RnrState{};
    CompleteAcked(pi, a);
    if (t.inflight() > 0) {
      ArmFlight(pi, a, /*start=*/false);
    } else {
      a.rto_deadline = a.tlp_deadline = 0;
      if (a.ring != nullptr) GiveTxRing(a);
    }
  }
  t.window_end = ack + c.credit;
  if (c.flags & wire::kFlagRnr) {
    if (t.inflight() > 0) {
      // Refused for lack of receive resources: not a loss; retry later,
      // forever while the receiver answers, unless the opt-in
      // rnr_give_up_ns has passed since the first refusal.
      ++ctx_.counters.rnr_received;
      ctx_.Count(pi, PeerCount::kRnrReceived);
      if (sack != nullptr && entry(a, t.snd_una).msgs != 0) TakenFromBundle(pi, a, sack->next_msg_id);
      if (a.rnr.since == 0) a.rnr.since = now;
      const uint64_t give_up = ctx_.config.rnr_give_up_ns;
      if (give_up != 0 && now - a.rnr.since >= give_up && GiveUpRefused(pi)) return;
      a.rnr.delay = a.rnr.delay == 0
                        ? ctx_.config.rnr_retry_min_ns
                        : std::min(2 * a.rnr.delay, ctx_.config.rnr_retry_max_ns);
      a.rnr.waiting = true;
      a.rnr.until = now + a.rnr.delay;
      a.rto_deadline = 0;
      ctx_.ArmTimer(pi, a.rnr.until);
    }
  } else if (a.rnr.waiting && c.type == wire::PacketType::kAck) {
    // A window update: the receiver has room again.
    a.rnr.waiting = false;
    if (t.inflight() > 0) {
      MarkRetx(a, t.snd_una, /*fast=*/false);
      ArmRto(pi);
    }
  }
  if (sack != nullptr && !a.rnr.waiting) ProcessSack(pi, ack, *sack);
  if (HasWork(pi)) ctx_.Enqueue(pi);
}

void Reliability::ProcessSack(uint32_t pi, Psn ack, const wire::AckFields& sack) {
  TxStream& t = tx(pi);
  TxActive& a = Act(pi).tx;
  bool any = false;
  bool lost = false;
  Psn highest;
  uint64_t latest_sent = 0;  // of any packet the receiver holds
  // The set bits only, in order: an ACK with no hole below what it holds
  // (the usual one) has none, and costs no walk over the packets in flight.
  bool beyond = false;
  for (uint32_t w = 0; w < sack.sack.size() && !beyond; ++w) {
    for (uint64_t bits = sack.sack[w]; bits != 0; bits &= bits - 1) {
      const uint32_t i = w * 64 + static_cast<uint32_t>(__builtin_ctzll(bits));
      const Psn q = ack + 1 + i;
      if (!q.Before(t.next_psn)) {  // never sent: nor is anything above it
        beyond = true;
        break;
      }
      TxEntry& e = entry(a, q);
      latest_sent = std::max(latest_sent, e.last_sent_ns);
      if ((e.state & kTxSacked) == 0) {
        e.state |= kTxSacked;
        if (e.state & kTxNeedsRetx) {
          e.state &= static_cast<uint8_t>(~(kTxNeedsRetx | kTxFast));
          --a.retx_queued;
        }
      }
      highest = q;
      any = true;
    }
  }
  if (!any) return;
  // A hole far enough below the highest SACKed PSN is lost. A hole already
  // retransmitted is lost again only if a packet sent after that
  // retransmission has arrived (as in RACK), so one loss costs one
  // retransmission however many SACKs report it.
  for (Psn q = ack; q.Before(highest); ++q) {
    if (static_cast<uint32_t>(highest - q) < ctx_.config.fast_retransmit_threshold) break;
    TxEntry& e = entry(a, q);
    if (e.state & (kTxSacked | kTxNeedsRetx)) continue;
    if ((e.state & kTxRetransmitted) && latest_sent <= e.last_sent_ns) continue;
    MarkRetx(a, q, /*fast=*/true);
    lost = true;
  }
  if (lost) CcLoss(pi);
  if (a.retx_queued > 0) ctx_.Enqueue(pi);
}

void Reliability::CompleteAcked(uint32_t pi, TxActive& a) {
  const TxStream& t = tx(pi);
  while (!a.ops.empty()) {
    const uint32_t o = a.ops.front();
    SendOp& op = ops_[o];
    if (!op.all_sent || !op.last_psn.Before(t.snd_una)) break;
    a.ops.Remove(ops_.base(), o);
    op.state = OpState::kIdle;
    const OpTraits& traits = Traits(op.kind);
    if (op.abandoned) {
      // Given up while refused: its error is out already, and nobody will
      // answer it.
      if (traits.holds_stream) ReleaseHold(pi, op.msg.msg_id);
      ops_.Free(o);
      continue;
    }
    switch (traits.after_ack) {
      case AfterAck::kComplete:
        completions_.OpDone(op);
        ops_.Free(o);
        break;
      case AfterAck::kFree:
        ops_.Free(o);
        break;
      case AfterAck::kAwaitAnswer:
        op.state = OpState::kWaiting;
        a.waiting.PushBack(ops_.base(), o);
        // Nothing in flight may be all that is left: the probe keeps the
        // peer's liveness known (Session::RunTimers).
        ctx_.ArmTimer(pi, ctx_.now + std::max<uint64_t>(1, ctx_.config.peer_timeout_ns / 4));
        break;
    }
  }
}

void Reliability::TakenFromBundle(uint32_t pi, TxActive& a, uint32_t next_msg_id) {
  const TxEntry& e = entry(a, tx(pi).snd_una);
  uint32_t o = e.op;
  for (uint32_t i = 0; i < e.msgs; ++i, o = ops_[o].next) {
    SendOp& op = ops_[o];
    if (op.abandoned || static_cast<int32_t>(op.msg.msg_id - next_msg_id) >= 0) continue;
    // Delivered: its completion now; the packet, resent until the peer
    // takes the rest, carries it as abandoned (no bytes; the peer passes
    // over it by its msg_id), and the op goes at the packet's ACK.
    completions_.OpDone(op);
    op.abandoned = true;
  }
}

bool Reliability::GiveUpRefused(uint32_t pi) {
  TxStream& t = tx(pi);
  TxActive& a = Act(pi).tx;
  const TxEntry& e = entry(a, t.snd_una);
  // Refusals only happen at an op's start; a bundle is never given up
  // (BundleFrom).
  if (e.op == kNone || e.offset != 0 || e.msgs != 0) return false;
  const uint32_t o = e.op;
  SendOp& op = ops_[o];
  // Only messages: RMA requests and answers, and a pulled message's bytes
  // (the receiver asked for them), are never refused for long.
  if (op.abandoned || !Traits(op.kind).may_give_up) return false;
  op.abandoned = true;
  if (a.cursor_op == o) {  // its unsent segments never go
    op.all_sent = true;
    op.last_psn = t.next_psn + UINT32_MAX;  // next_psn - 1
    a.cursor_op = op.next;
    a.cursor_offset = 0;
  }
  ++ctx_.counters.rnr_give_ups;
  char why[128];
  std::snprintf(why, sizeof(why),
                "has posted no receive for it for %llu ms (unexpected queue full); send failed",
                static_cast<unsigned long long>((ctx_.now - a.rnr.since) / 1'000'000));
  completions_.OpFailed(op, ENOSPC, why);
  // What is in flight of it goes again as abandoned, so that the receiver
  // spends its PSNs and message number and goes on with the next message.
  a.rnr = RnrState{};
  MarkRetx(a, t.snd_una, /*fast=*/false);
  ArmRto(pi);
  ctx_.Enqueue(pi);
  return true;
}

uint32_t Reliability::LandReadData(uint32_t pi, const wire::RmaFields& r,
                                   absl::Span<const uint8_t> payload, OpKind kind) {
  const uint32_t o = ops_.Answered(pi, r, kind);
  if (o == kNone) {
    ++ctx_.counters.protocol_errors;
    return kNone;
  }
  SendOp& op = ops_[o];
  if (!payload.empty()) std::memcpy(op.dst + r.offset, payload.data(), payload.size());
  op.rx_done += payload.size();
  if (op.rx_done < op.len) return kNone;
  Unpark(pi, o);
  return o;
}

// ---- Receiving.

Arrival Reliability::Arrive(uint32_t pi, const wire::View& v, driver::Packet* pkt) {
  RxStream& r = rx(pi);
  const int32_t d = v.common.psn - r.rcv_nxt;
  if (d < 0) {
    // A retransmission of something we have: our ACK was lost or late.
    ++ctx_.counters.duplicates_dropped;
    ctx_.Count(pi, PeerCount::kDuplicates);
    r.ack_now = true;
    ctx_.Enqueue(pi);
    return Arrival::kDropped;
  }
  if (static_cast<uint32_t>(d) >= ctx_.config.window_packets) {
    ++ctx_.counters.out_of_window_dropped;
    return Arrival::kDropped;
  }
  // In order. (The held slot of rcv_nxt is always empty here: the engine
  // consumes or drops it whenever rcv_nxt reaches it.)
  if (d == 0) return Arrival::kInOrder;
  return Hold(pi, v, pkt);
}

Arrival Reliability::Hold(uint32_t pi, const wire::View& v, driver::Packet* pkt) {
  RxStream& r = rx(pi);
  RxActive& ha = Act(pi).rx;
  const Psn psn = v.common.psn;
  if (ha.held == nullptr) {
    // Nothing held yet: a ring from the pool, unless every one is another
    // peer's (the packet comes again).
    if (held_total_ < held_budget_) ha.held = held_pool_.TryTake();
    if (ha.held == nullptr) {
      ++ctx_.counters.reorder_buffer_full;
      Settle(pi);
      return Arrival::kDropped;
    }
  }
  HeldPacket& h = held_at(ha, psn);
  if (h.pkt != nullptr) {
    ++ctx_.counters.duplicates_dropped;
    ctx_.Count(pi, PeerCount::kDuplicates);
    r.ack_now = true;
    r.ack_standalone = true;
    ctx_.Enqueue(pi);
    return Arrival::kDropped;
  }
  if (held_total_ >= held_budget_) {
    ++ctx_.counters.reorder_buffer_full;
    return Arrival::kDropped;
  }
  ++ctx_.counters.out_of_order_held;
  ctx_.Count(pi, PeerCount::kOutOfOrder);
  h.pkt = pkt;
  h.type = v.common.type;
  h.msg = v.msg;
  h.rma = v.rma;
  h.payload_offset = static_cast<uint32_t>(v.payload.data() - pkt->data);
  h.payload_len = static_cast<uint32_t>(v.payload.size());
  ++ha.held_count;
  ++held_total_;
  bool new_hole = ha.held_count == 1;
  if (ha.held_count == 1 || psn.After(ha.highest_held)) {
    new_hole = new_hole || (psn - ha.highest_held) > 1;
    ha.highest_held = psn;
  }
  // A gap: SACK at once while the sender may still be short of its
  // fast-retransmit threshold, and whenever a new hole opens.
  if (new_hole || ha.held_count <= ctx_.config.fast_retransmit_threshold) {
    r.ack_now = true;
    r.ack_standalone = true;
    ctx_.Enqueue(pi);
  } else {
    ++r.unacked;
    AfterReceive(pi, v.common.flags);
  }
  return Arrival::kHeld;
}

void Reliability::Consumed(uint32_t pi, uint32_t messages) {
  RxStream& r = rx(pi);
  ++r.rcv_nxt;
  r.unacked = static_cast<uint16_t>(std::min<uint32_t>(r.unacked + messages, UINT16_MAX));
  ++ctx_.counters.rx_data_packets;
}

void Reliability::Refused(uint32_t pi) {
  RxStream& r = rx(pi);
  ++ctx_.counters.rnr_sent;
  ctx_.Count(pi, PeerCount::kRnrSent);
  r.rnr_owed = true;
  if (!r.refused) {
    r.refused = true;
    ++refused_peers_;
  }
  ctx_.Enqueue(pi);
}

HeldPacket* Reliability::NextHeld(uint32_t pi) {
  const RxStream& r = rx(pi);
  const RxActive& ha = rx_active(pi);
  if (ha.held_count == 0) return nullptr;
  HeldPacket& h = held_at(ha, r.rcv_nxt);
  return h.pkt != nullptr ? &h : nullptr;
}

void Reliability::Unhold(uint32_t pi, HeldPacket* h) {
  ctx_.Release(h->pkt);
  h->pkt = nullptr;
  --held_total_;
  RxActive& a = Act(pi).rx;
  if (--a.held_count == 0) GiveHeldRing(a);
}

void Reliability::AfterReceive(uint32_t pi, uint16_t flags) {
  RxStream& r = rx(pi);
  const RxActive& ha = rx_active(pi);
  if (r.unacked >= ctx_.config.ack_every_packets) {
    r.ack_now = true;
  } else if ((flags & wire::kFlagAckReq) != 0) {
    if (ctx_.config.defer_requested_acks && ha.held_count == 0) {
      // The owner has not seen the message yet: its reply, if it sends
      // one in its next call, carries the ACK; else that call releases it.
      if (!r.ack_deferred) {
        r.ack_deferred = true;
        if (deferred_.empty()) deferred_since_ = ctx_.now;
        deferred_.push_back(pi);
      }
    } else {
      r.ack_now = true;
    }
  }
  if (r.ack_now && ha.held_count > 0) r.ack_standalone = true;
  if (r.ack_now || r.ack_standalone) {
    ctx_.Enqueue(pi);
  } else if (r.unacked > 0 && r.ack_deadline == 0) {
    r.ack_deadline = ctx_.now + ctx_.config.ack_delay_ns;
    ++acks_delayed_;
    ctx_.ArmExactTimer(pi, r.ack_deadline);
  }
}

void Reliability::RetryRefused() {
  // A receive or unexpected-queue room appeared: tell each peer we refused
  // to retry now rather than after its backoff.
  for (uint32_t pi = 0; pi < session_.peers().size() && refused_peers_ > 0; ++pi) {
    RxStream& r = rx(pi);
    if (!r.refused) continue;
    r.refused = false;
    --refused_peers_;
    r.ack_standalone = true;
    ctx_.Enqueue(pi);
  }
}

void Reliability::ReleaseDeferredAcks() {
  for (const uint32_t pi : deferred_) {
    RxStream& r = rx(pi);
    if (!r.ack_deferred) continue;  // carried since, or the peer was reset
    r.ack_deferred = false;
    r.ack_now = true;
    ctx_.Enqueue(pi);
  }
  deferred_.clear();
}

// ---- Timers.

void Reliability::RunDeadlines(uint32_t pi, uint64_t* next, uint64_t* floor) {
  const uint64_t now = ctx_.now;
  const auto due = [&](uint64_t when) {
    if (when > now) {
      *next = std::min(*next, when);
      *floor = std::min(*floor, when);
      return false;
    }
    return true;
  };
  RxStream& r = rx(pi);
  TxStream& t = tx(pi);
  if (r.ack_deadline > now) {
    *next = std::min(*next, r.ack_deadline);
  } else if (r.ack_deadline != 0) {
    ClearAckDeadline(r);
    if (r.unacked > 0) {
      r.ack_now = true;
      if (rx_active(pi).held_count > 0) r.ack_standalone = true;
      ctx_.Enqueue(pi);
    }
  }
  if (t.pace_wait && due(Peek(pi).tx.cc.next_send_ns)) {
    t.pace_wait = false;
    ctx_.Enqueue(pi);
  }
  if (peers_[pi].active == nullptr) return;  // no RNR retry, probe or RTO
  TxActive& a = Act(pi).tx;
  if (a.rnr.waiting && due(a.rnr.until)) {
    // Try the refused packet again; the RTO guards the try.
    a.rnr.waiting = false;
    if (t.inflight() > 0) {
      MarkRetx(a, t.snd_una, /*fast=*/false);
      a.rto_deadline = now + Rto(t, a.backoff);
      ctx_.Enqueue(pi);
    }
  }
  if (a.tlp_deadline != 0 && a.tlp_deadline <= now) OnTailProbe(pi);
  if (a.tlp_deadline != 0) *next = std::min(*next, a.tlp_deadline);
  if (a.rto_deadline != 0 && a.rto_deadline <= now) OnRto(pi);
  if (a.rto_deadline != 0) *next = std::min(*next, a.rto_deadline);
}

// ---- Congestion control (congestion.h; only where CcOn).

void Reliability::NoteCongestionLimits(uint32_t pi, const TxActive& a) {
  TxStream& t = tx(pi);
  // New data the credit would let go but the congestion window or pacing
  // holds: the window is in use (it may grow), and a stall is counted once
  // per filling.
  const bool fresh = !a.rnr.waiting && a.cursor_op != kNone && WindowOpen(t) && !CursorHeld(t, a);
  // (Data to send: the peer has a record.)
  if (fresh && (!CwndOpen(pi, t) || Paced(pi))) CongestionWindow::NoteLimited(Act(pi).tx.cc);
  const bool cwnd_full = fresh && !CwndOpen(pi, t);
  if (cwnd_full && !t.cwnd_stalled) ++ctx_.counters.cwnd_stalls;
  t.cwnd_stalled = cwnd_full;
  // Packets held back only by pacing: a timer lets them go.
  if ((a.retx_queued > 0 || (fresh && CwndOpen(pi, t))) && Paced(pi) && !t.pace_wait) {
    t.pace_wait = true;
    ++ctx_.counters.pacing_waits;
    ctx_.ArmTimer(pi, a.cc.next_send_ns);
  }
}

void Reliability::CcLoss(uint32_t pi) {
  TxStream& t = tx(pi);
  if (!CcOn(pi)) return;
  TxActive& a = Act(pi).tx;  // a loss: packets in flight, so a record
  if (!t.cc.OnLoss(a.cc, t.snd_una, t.next_psn)) return;
  ++ctx_.counters.cwnd_reductions;
  SetPacing(t, a);
}

void Reliability::ArmRto(uint32_t pi) {
  const TxStream& t = tx(pi);
  TxActive& a = Act(pi).tx;
  a.rto_deadline = ctx_.now + Rto(t, a.backoff);
  ctx_.ArmExactTimer(pi, a.rto_deadline);
}

// A lost tail (or, in a ping-pong, the only packet in flight) has nothing
// after it to be SACKed: the probe resends the newest unacknowledged packet
// after about two round trips (as RFC 8985's PTO: 2 SRTT, or SRTT + 4 RTTVAR
// if the RTT jitters more, plus the peer's ACK delay unless its ACKs have
// been coming on its replies), once per flight or ACK advance, so such a
// loss costs about one round trip more, not the RTO floor. A peer that was
// only slow costs one duplicate; the RTO (with its floor and backoff)
// stays the backstop.
uint64_t Reliability::TailProbeAt(const TxStream& t, const TxActive& a) const {
  if (t.inflight() == 0 || !t.rtt.has_sample() || a.backoff != 0 || a.rnr.waiting) return 0;
  const uint64_t srtt = t.rtt.srtt();
  const uint64_t at = ctx_.now + std::max(2 * srtt, srtt + 4 * t.rtt.rttvar()) +
                      (t.acks_on_data ? 0 : ctx_.config.ack_delay_ns);
  return a.rto_deadline != 0 && at >= a.rto_deadline ? 0 : at;
}

// The probe comes before the RTO whenever it is armed, so the peer's timer
// is armed once, at the earlier of the two (it may be armed earlier still).
// A flight that starts moves the timer, later too: it may be armed at the
// probe deadline of the last flight, which its ACK made moot (in a
// ping-pong, always), and a fire there would only find nothing due. The
// delayed ACK is the other deadline Reliability keeps exactly; the rest
// are not before the peer's timer floor (Context::MoveTimer).
void Reliability::ArmFlight(uint32_t pi, TxActive& a, bool start) {
  const TxStream& t = tx(pi);
  a.rto_deadline = ctx_.now + Rto(t, a.backoff);
  a.tlp_deadline = TailProbeAt(t, a);
  const uint64_t at = a.tlp_deadline != 0 ? a.tlp_deadline : a.rto_deadline;
  if (start) {
    const uint64_t ack = rx(pi).ack_deadline;
    ctx_.MoveTimer(pi, ack != 0 && ack < at ? ack : at);
  } else {
    ctx_.ArmExactTimer(pi, at);
  }
}

void Reliability::OnTailProbe(uint32_t pi) {
  TxStream& t = tx(pi);
  TxActive& a = Act(pi).tx;
  a.tlp_deadline = 0;
  if (t.inflight() == 0 || a.backoff != 0 || a.rnr.waiting) return;
  Psn q = t.snd_una + (t.inflight() - 1);  // the newest, unless the peer holds it
  if (entry(a, q).state & (kTxSacked | kTxNeedsRetx)) q = t.snd_una;
  if (entry(a, q).state & (kTxSacked | kTxNeedsRetx)) return;  // recovery under way
  ++ctx_.counters.tail_probes;
  MarkRetx(a, q, /*fast=*/false);
  ctx_.Enqueue(pi);
}

void Reliability::OnRto(uint32_t pi) {
  TxStream& t = tx(pi);
  TxActive& a = Act(pi).tx;
  ++ctx_.counters.rto_expirations;
  a.tlp_deadline = 0;
  if (t.inflight() == 0) {
    a.rto_deadline = 0;
    return;
  }
  // The oldest unacknowledged packet goes again, and with it every packet
  // not SACKed that has waited a whole RTO (a lost tail) -- except toward a
  // peer whose frames come through this host's memory (the intra-host
  // device, same-host loopback), where nothing is lost but to a receiver
  // that stopped reading for long (driver/shm: 10 ms): there a timeout
  // mostly means a receiver descheduled on a busy host (an RTO floor of
  // 100 us, 1 ms in the fi provider, is shorter than what a process waits
  // for a CPU there), so the oldest goes alone, as TCP's RTO, and the next
  // ACK that advances tells whether the timeout was needed (OnRtoAnswered,
  // as RFC 5682's F-RTO). Resending the whole window there made a
  // descheduled receiver take it twice. What such a receiver dropped (it
  // stopped reading for 10 ms) is repaired by SACKs, the tail-loss probe
  // and further RTOs, each resending the oldest.
  const bool probe_only = session_[pi].local;
  const uint64_t rto = Rto(t, a.backoff);
  bool hole = false;  // the peer holds later packets: snd_una is lost, not late
  for (Psn q = t.snd_una; q.Before(t.next_psn); ++q) {
    TxEntry& e = entry(a, q);
    if (e.state & kTxNeedsRetx) {
      e.state &= static_cast<uint8_t>(~kTxFast);
    } else if (e.state & kTxSacked) {
      hole = true;
    } else if (q == t.snd_una || (!probe_only && ctx_.now - e.last_sent_ns >= rto)) {
      MarkRetx(a, q, /*fast=*/false);
    }
  }
  if (probe_only) {
    a.rto_hole = a.rto_pending && !a.rto_second ? a.rto_hole || hole : hole;
    a.rto_pending = true;
    a.rto_second = false;
    a.rto_psn = t.snd_una;
    a.rto_end = t.next_psn;
  }
  a.backoff = std::min<uint32_t>(a.backoff + 1, 30);
  a.rto_deadline = ctx_.now + Rto(t, a.backoff);
  if (CcOn(pi)) {
    t.cc.OnRto(a.cc, t.next_psn);
    SetPacing(t, a);
  }
  ctx_.Enqueue(pi);
}

// The first ACK that advances after an RTO that resent snd_una alone
// (`ack`, before snd_una moves and its entries are cleared), toward a peer
// of this host: whether the timeout was spurious (counted: a receiver
// descheduled, not a drop). One that acknowledges the packet after the
// resent one, sent before the RTO and never resent, says that it arrived
// as first sent (as RFC 5682's F-RTO), unless the peer had reported
// holding later packets before the RTO (then the resent packet filled a
// hole). One that stops right after the resent packet says nothing yet: a
// receiver that acknowledges every packet as it reads it (the fi facade's
// sends ask for it) sent it for the original as often as for the resent
// one; the next advance decides, by the same test on the packet after it,
// or the next RTO starts another episode.
void Reliability::OnRtoAnswered(TxActive& a, Psn ack) {
  if (!a.rto_second && ack == a.rto_psn + 1 && a.rto_end.After(ack)) {
    a.rto_second = true;
    a.rto_psn = ack;
    return;
  }
  const Psn q = a.rto_second ? a.rto_psn : a.rto_psn + 1;
  const bool passed = q.Before(ack) && q.Before(a.rto_end) &&
                      (entry(a, q).state & kTxRetransmitted) == 0;
  a.rto_pending = false;
  a.rto_second = false;
  if (passed && !a.rto_hole) ++ctx_.counters.rto_spurious;
}

void Reliability::MarkRetx(TxActive& a, Psn psn, bool fast) {
  TxEntry& e = entry(a, psn);
  if ((e.state & kTxNeedsRetx) == 0) ++a.retx_queued;
  e.state = static_cast<uint8_t>((e.state | kTxNeedsRetx) & ~kTxSacked);
  if (fast) {
    e.state |= kTxFast;
  } else {
    e.state &= static_cast<uint8_t>(~kTxFast);
  }
}

}  // namespace bypass::rdm
