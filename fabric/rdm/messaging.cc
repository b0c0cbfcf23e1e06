// Messages: sends, matching, unexpected messages, reassembly, multi-receive,
// peek / claim / discard, cancel and the rendezvous protocol (PROTOCOL.md,
// "Messages" and "Rendezvous").
#include "fabric/rdm/messaging.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace bypass::rdm {
namespace {

MessageInfo InfoOf(uint64_t total, uint16_t msg_flags, uint64_t tag, uint64_t data) {
  return MessageInfo{total, tag, data, (msg_flags & wire::kMsgRemoteData) != 0};
}

}  // namespace

Messaging::Messaging(Context& ctx, Session& session, OpTable& ops, Completions& completions,
                     Reliability& reliability, SharedMatch* shared)
    : ctx_(ctx),
      session_(session),
      ops_(ops),
      completions_(completions),
      reliability_(reliability),
      own_(shared != nullptr ? nullptr
                             : std::make_unique<MatchQueues>(
                                   ctx.config.max_posted_recvs, ctx.config.max_unexpected_msgs,
                                   ctx.config.unexpected_bytes, ctx.config.unexpected_chunk_bytes,
                                   PoolOf(ctx.config.unexpected_pool))),
      shared_(shared),
      matcher_(shared != nullptr ? shared->queues() : *own_),
      peers_(new MsgPeer[ctx.config.max_peers]),
      rx_(ctx.config.ActivePeers()) {
  if (shared_ != nullptr) {
    owner_ = shared_->Join(this);
  } else {
    matcher_.set_min_multi_recv(ctx.config.min_multi_recv);
  }
}

Messaging::~Messaging() {
  if (shared_ == nullptr) return;
  // The shared receives it was landing messages in (arriving, or pulled)
  // go back to the pool: their messages will never end here.
  for (uint32_t pi = 0; pi < ctx_.config.max_peers; ++pi) {
    if (peers_[pi].rx == kNone) continue;
    const RxMessage& rx = rx_[peers_[pi].rx];
    if (rx.sink == RxSink::kPosted) matcher_.FreeRecv(rx.index);
  }
  for (uint32_t o = 0; o < ops_.capacity(); ++o) {
    if (ops_[o].kind == OpKind::kPull && ops_[o].state != OpState::kIdle && !ops_[o].delivered) {
      matcher_.FreeRecv(ops_[o].slot);
    }
  }
  for (uint32_t e = matcher_.FindOwned(owner_); e != kNone; e = matcher_.FindOwned(owner_)) {
    matcher_.Release(e);
  }
  shared_->Leave(owner_);
  shared_->NoteFreed();
}

void Messaging::NoteUnexpectedDepth() {
  Counters& c = ctx_.counters;
  c.unexpected_depth = matcher_.unexpected_depth();
  c.unexpected_bytes = matcher_.unexpected_bytes();
  c.unexpected_depth_max = std::max(c.unexpected_depth_max, c.unexpected_depth);
}

// ---- Sending.

Result Messaging::PostSend(const SendRequest& r) {
  const EndpointConfig& config = ctx_.config;
  if (!session_.peers().Valid(r.dest)) return Result::kInvalid;
  if (r.len > 0 && r.buf == nullptr) return Result::kInvalid;
  const bool buffered = (r.flags & kSendBuffered) != 0 && (r.flags & kSendInject) == 0;
  const bool inject = (r.flags & kSendInject) != 0 || buffered;  // copied now; no completion later
  if (inject ? r.len > config.inject_size : r.len > config.max_msg_size) {
    return Result::kTooLong;
  }
  if (ops_.user_free() == 0) return Result::kAgain;
  if ((r.flags & kSendInject) == 0 && !completions_.Reserve()) return Result::kAgain;
  const uint32_t pi = r.dest.slot();
  const bool can_offer = config.read_in_place && ctx_.dev.pid != 0;
  const bool in_place = can_offer && session_[pi].same_host;
  const bool rendezvous =
      !inject && r.len > (in_place ? std::min(config.in_place_threshold, config.rendezvous_threshold)
                                   : config.rendezvous_threshold);
  const uint32_t o = ops_.Alloc(rendezvous ? OpKind::kRndvRequest : OpKind::kMsg);
  SendOp& op = ops_[o];
  op.peer = pi;
  op.comp_flags = kCompSend | kCompMsg | ((r.flags & kSendTagged) ? kCompTagged : 0);
  op.len = r.len;
  op.context = r.context;
  op.ack_now = (r.flags & kSendAckNow) != 0;
  if (buffered) {  // its completion, at once; a later error is an inject's
    completions_.OpDone(op);
    op.context = nullptr;
  }
  op.inject = inject;
  const uint8_t* bytes = static_cast<const uint8_t*>(r.buf);
  if (inject && r.len > 0) {
    bytes = ops_.inject_buffer(o);
    std::memcpy(ops_.inject_buffer(o), r.buf, r.len);
  }
  op.type = wire::PacketType::kData;
  op.msg.msg_id = peers_[pi].next_msg_id++;
  op.msg.msg_flags = static_cast<uint16_t>(((r.flags & kSendTagged) ? wire::kMsgTagged : 0) |
                                           ((r.flags & kSendRemoteData) ? wire::kMsgRemoteData : 0));
  op.msg.total_length = r.len;
  op.msg.tag = (r.flags & kSendTagged) ? r.tag : 0;
  op.msg.data = (r.flags & kSendRemoteData) ? r.data : 0;
  if (rendezvous) {
    // A request to send (one packet, no payload); the bytes go when pulled.
    op.msg.protocol = wire::MsgProtocol::kRendezvous;
    op.src = bytes;
    op.wire_len = 0;
    if (can_offer) {
      // A receiver of this host may read it in place (PROTOCOL.md). A
      // candidate: the offer goes on the wire only to a peer known to be
      // on this host when the request is sent (Reliability::WritePacket),
      // never onto a network.
      op.msg.offer_pid = ctx_.dev.pid;
      op.msg.offer_addr = reinterpret_cast<uintptr_t>(bytes);
      const uint64_t* guard = ops_.ArmGuard(o);
      op.msg.offer_guard_addr = reinterpret_cast<uintptr_t>(guard);
      op.msg.offer_guard = *guard;
    }
    ++ctx_.counters.rendezvous_sent;
  } else {
    op.src = bytes;
    op.wire_len = r.len;
  }
  reliability_.Queue(pi, o);
  return Result::kOk;
}

// ---- Posting receives.

Result Messaging::PostRecv(const RecvRequest& r) {
  const uint32_t f = r.flags;
  if ((f & ~(kRecvMulti | kRecvPeek | kRecvClaim | kRecvDiscard)) != 0 ||
      ((f & kRecvMulti) && (f & (kRecvPeek | kRecvClaim | kRecvDiscard))) ||
      ((f & kRecvDiscard) && !(f & (kRecvPeek | kRecvClaim)))) {
    return Result::kInvalid;
  }
  if ((f & kRecvPeek) == 0 && r.len > 0 && r.buf == nullptr) return Result::kInvalid;
  if ((f & kRecvClaim) && !(f & kRecvPeek)) return Claim(r);  // source and tag do not apply
  if (shared_ != nullptr) {
    // A shared queue takes receives from any source with no flags: peers
    // are per endpoint, and multi-receive buffers, peeks and claims are
    // not shared (rdm.h, SharedRecvQueue).
    if (f != 0 || !(r.source == kAnyPeer)) return Result::kInvalid;
    return shared_->PostRecv(r);
  }
  if (!(r.source == kAnyPeer) && !session_.peers().Valid(r.source)) return Result::kInvalid;
  if (f & kRecvPeek) return Peek(r);
  if (!completions_.Reserve()) return Result::kAgain;
  if (f & kRecvMulti) return PostMulti(r);
  return Receive(r, matcher_.FindUnexpected(r));
}

Result Messaging::ReceiveShared(const RecvRequest& r, uint32_t e) {
  if (!completions_.Reserve()) return Result::kAgain;
  return Receive(r, e);
}

Result Messaging::CancelShared(void* context) {
  if (!completions_.Reserve()) return Result::kAgain;
  const uint32_t slot = matcher_.TakePosted(context);
  if (slot == kNone) {
    completions_.Unreserve();
    return Result::kInvalid;
  }
  CancelSlot(slot, "receive canceled");
  return Result::kOk;
}

Result Messaging::Receive(const RecvRequest& r, uint32_t e) {
  if (e != kNone && matcher_.unexpected(e).rendezvous) return PullUnexpected(e, r);
  if (e != kNone && matcher_.unexpected(e).complete) {
    DeliverUnexpected(e, r);
    NoteFreed();
    return Result::kOk;
  }
  const uint32_t slot = matcher_.AllocRecv(r);
  if (slot == kNone) {
    completions_.Unreserve();
    return Result::kAgain;
  }
  if (e == kNone) {
    matcher_.QueueRecv(slot);
  } else {
    BindArriving(e, slot, 0);
  }
  NoteFreed();
  return Result::kOk;
}

void Messaging::DeliverUnexpected(uint32_t e, const RecvRequest& r) {
  const UnexpectedMsg& m = matcher_.unexpected(e);
  matcher_.CopyOut(e, static_cast<uint8_t*>(r.buf), r.len);
  completions_.Received(m.source, r, InfoOf(m.total, m.msg_flags, m.tag, m.data), 0);
  matcher_.Release(e);
  NoteUnexpectedDepth();
}

Result Messaging::PostMulti(const RecvRequest& r) {
  // REQUIRES: a completion reserved (for the buffer's release or cancel).
  // Messages already waiting that it takes, in order, as far as they fit
  // before it is released (rendezvous messages are pulled into plain
  // receives only): each needs a completion too, and it takes all of them
  // or is not posted, so that no later message can overtake one left waiting.
  uint32_t take = 0;
  uint64_t used = 0;
  for (uint32_t e = matcher_.FindUnexpected(r, r.len, /*eager_only=*/true); e != kNone;
       e = matcher_.FindUnexpected(r, r.len - used, /*eager_only=*/true, e)) {
    ++take;
    used += matcher_.unexpected(e).total;
    if (r.len - used == 0 || r.len - used < matcher_.min_multi_recv()) break;
  }
  for (uint32_t i = 0; i < take; ++i) {
    if (completions_.Reserve()) continue;
    for (uint32_t k = 0; k <= i; ++k) completions_.Unreserve();
    return Result::kAgain;
  }
  const uint32_t slot = matcher_.AllocRecv(r);
  if (slot == kNone) {
    for (uint32_t k = 0; k <= take; ++k) completions_.Unreserve();
    return Result::kAgain;
  }
  matcher_.QueueRecv(slot);
  for (uint32_t i = 0; i < take; ++i) {
    const RecvSlot& s = matcher_.slot(slot);
    const uint32_t e = matcher_.FindUnexpected(r, r.len - s.used, /*eager_only=*/true);
    const UnexpectedMsg& m = matcher_.unexpected(e);
    const uint64_t base = matcher_.TakeMulti(slot, m.total);
    if (!m.complete) {
      BindArriving(e, slot, base);
      continue;
    }
    const MessageInfo info = InfoOf(m.total, m.msg_flags, m.tag, m.data);
    matcher_.CopyOut(e, static_cast<uint8_t*>(r.buf) + base, m.total);
    const PeerId src = m.source;
    matcher_.Release(e);
    NoteUnexpectedDepth();
    uint64_t flags = 0;
    const RecvRequest landed = EndRecvSlot(slot, info.total, base, &flags);
    completions_.Received(src, landed, info, flags);
  }
  NoteFreed();
  return Result::kOk;
}

Result Messaging::Peek(const RecvRequest& r) {
  if (!completions_.Reserve()) return Result::kAgain;
  const uint32_t e = matcher_.FindUnexpected(r);
  Completion c;
  c.context = r.context;
  c.flags = kCompRecv | kCompMsg | (r.tagged ? kCompTagged : 0);
  if (e == kNone) {
    ErrorCompletion ec;
    ec.op = c;
    ec.err = ENOMSG;
    std::snprintf(ec.message, sizeof(ec.message), "peek: no matching message has arrived");
    completions_.PushError(ec);
    return Result::kOk;
  }
  UnexpectedMsg& m = matcher_.unexpected(e);
  c.flags |= (m.msg_flags & wire::kMsgRemoteData) ? kCompRemoteData : 0;
  c.len = m.total;
  c.tag = m.tag;
  c.data = m.data;
  c.source = m.source;
  if (r.flags & kRecvDiscard) {
    c.len = 0;
    if (const Result res = DiscardMessage(e, r.context); res != Result::kOk) {
      completions_.Unreserve();
      return res;
    }
  } else if (r.flags & kRecvClaim) {
    m.claimed = true;
    m.claim_context = r.context;
  }
  completions_.Push(c);
  return Result::kOk;
}

Result Messaging::Claim(const RecvRequest& r) {
  const uint32_t e = matcher_.FindClaimed(r.context);
  if (e == kNone) return Result::kInvalid;  // no peek claimed a message for this context
  if (!completions_.Reserve()) return Result::kAgain;
  const UnexpectedMsg& m = matcher_.unexpected(e);
  // The message decides the kind; the request's source and tag do not apply.
  RecvRequest q = r;
  q.tagged = m.tagged;
  q.source = m.source;
  if (r.flags & kRecvDiscard) {
    Completion c;
    c.context = r.context;
    c.flags = kCompRecv | kCompMsg | (m.tagged ? kCompTagged : 0) |
              ((m.msg_flags & wire::kMsgRemoteData) ? kCompRemoteData : 0);
    c.tag = m.tag;
    c.data = m.data;
    c.source = m.source;
    if (const Result res = DiscardMessage(e, r.context); res != Result::kOk) {
      completions_.Unreserve();
      return res;
    }
    completions_.Push(c);
    return Result::kOk;
  }
  if (m.rendezvous) return PullUnexpected(e, q);
  if (m.complete) {
    DeliverUnexpected(e, q);
    NoteFreed();
    return Result::kOk;
  }
  const uint32_t slot = matcher_.AllocRecv(q);
  if (slot == kNone) {
    completions_.Unreserve();
    return Result::kAgain;
  }
  BindArriving(e, slot, 0);
  NoteFreed();
  return Result::kOk;
}

void Messaging::BindArriving(uint32_t e, uint32_t slot, uint64_t base) {
  // What came so far moves to the receive's buffer; the rest goes there
  // directly.
  const UnexpectedMsg& m = matcher_.unexpected(e);
  const RecvRequest& r = matcher_.recv(slot);
  const uint64_t cap = (r.flags & kRecvMulti) ? m.total : r.len;
  matcher_.CopyOut(e, static_cast<uint8_t*>(r.buf) + base, cap);
  RxMessage& rx = rx_[peers_[m.source.slot()].rx];  // arriving: it has a record
  rx.sink = RxSink::kPosted;
  rx.index = slot;
  rx.base = base;
  matcher_.Release(e);
  NoteUnexpectedDepth();
}

Result Messaging::DiscardMessage(uint32_t e, void* context) {
  const UnexpectedMsg& m = matcher_.unexpected(e);
  if (!m.rendezvous) {
    DropUnexpected(e);
    return Result::kOk;
  }
  // Its sender holds the bytes until they are pulled: pull none, so that
  // its send completes; the receive completes silently (Completions::Received).
  if (!completions_.Reserve()) return Result::kAgain;
  RecvRequest q;
  q.source = m.source;
  q.context = context;
  q.tagged = m.tagged;
  q.flags = kRecvDiscard;
  return PullUnexpected(e, q);  // gives the reservation back on kAgain
}

void Messaging::DropUnexpected(uint32_t e) {
  const UnexpectedMsg& m = matcher_.unexpected(e);
  if (!m.complete) {
    RxMessage& rx = rx_[peers_[m.source.slot()].rx];  // arriving: it has a record
    rx.sink = RxSink::kDiscard;
    rx.index = kNone;
  }
  matcher_.Release(e);
  NoteUnexpectedDepth();
  NoteFreed();
}

RecvRequest Messaging::EndRecvSlot(uint32_t slot, uint64_t total, uint64_t base,
                                   uint64_t* flags) {
  RecvSlot& s = matcher_.slot(slot);
  RecvRequest q = s.req;
  *flags = 0;
  if ((q.flags & kRecvMulti) == 0) {
    matcher_.FreeRecv(slot);
    return q;
  }
  if (total > 0) q.buf = static_cast<uint8_t*>(q.buf) + base;
  q.len = total;
  if (--s.active == 0 && s.released) {
    // The last message of a released buffer says so; the completion
    // reserved when it was posted is not needed.
    *flags = kCompMultiRecv;
    completions_.Unreserve();
    matcher_.FreeRecv(slot);
  }
  return q;
}

void Messaging::EndSlot(uint32_t slot, int err, const char* why, bool failure) {
  RecvSlot& s = matcher_.slot(slot);
  uint64_t flags = 0;
  if (s.req.flags & kRecvMulti) {
    s.released = true;
    // Messages still arriving into it complete normally; the last one
    // carries kCompMultiRecv.
    if (s.active > 0) return;
    flags = kCompMultiRecv;
  }
  const RecvRequest q = s.req;
  matcher_.FreeRecv(slot);
  // (A shared queue's directed receive names its sender by the queue's id,
  // no peer of this endpoint.)
  const bool named = !(q.source == kAnyPeer) && shared_ == nullptr;
  completions_.ReceiveFailed(named ? q.source : PeerId{}, q, MessageInfo{}, 0,
                             flags, err, why, failure);
}

bool Messaging::CancelRecv(void* context, PeerId only) {
  if (shared_ != nullptr) return shared_->CancelRecv(context);
  const uint32_t slot = matcher_.TakePosted(context, only);
  if (slot == kNone) return false;
  CancelSlot(slot, "receive canceled");
  return true;
}

size_t Messaging::CancelRecvs(PeerId only) {
  if (shared_ != nullptr) return 0;  // the shared queue's receives are not this endpoint's
  size_t n = 0;
  for (uint32_t slot = matcher_.TakeAnyPosted(only); slot != kNone;
       slot = matcher_.TakeAnyPosted(only)) {
    CancelSlot(slot, "receive canceled (the connection was shut down)");
    ++n;
  }
  return n;
}

// ---- Receiving.

bool Messaging::ConsumeData(uint32_t pi, const wire::MsgFields& m,
                            absl::Span<const uint8_t> payload) {
  MsgPeer& p = peers_[pi];
  const PeerId src = session_.peers().Id(pi);
  const bool active = p.rx != kNone;
  if (!active && p.rx_skip && m.msg_id == p.rx_next_msg_id - 1) {
    return true;  // the rest of a message its sender abandoned
  }
  if (m.msg_flags & wire::kMsgAbandoned) {
    if (active && m.msg_id == rx_[p.rx].msg_id) {
      // We took an older copy of its first segment after its sender gave it
      // up: the rest never comes. The message number is spent.
      AbortReceive(pi, ECANCELED, "gave the message up (refused too long); receive aborted");
      p.rx_skip = true;
      return true;
    }
    // Its sender gave it up before we took its first segment: nothing to
    // deliver, but the message number is spent.
    if (active || m.offset != 0 || m.msg_id != p.rx_next_msg_id) {
      ++ctx_.counters.protocol_errors;
      return true;
    }
    ++p.rx_next_msg_id;
    p.rx_skip = true;
    return true;
  }
  // The message, in a local while this segment lands: one of a single
  // segment starts and ends here and never needs a record; one of several
  // keeps it in the pool between its segments.
  RxMessage r;
  if (!active) {
    if (m.offset != 0 || m.msg_id != p.rx_next_msg_id) {
      ++ctx_.counters.protocol_errors;
      return true;  // acknowledged and dropped: it can never fit
    }
    if (m.protocol == wire::MsgProtocol::kRendezvous) return ConsumeRequestToSend(pi, m);
    const bool tagged = (m.msg_flags & wire::kMsgTagged) != 0;
    // A multi-receive needs a completion of its own for each message;
    // without room for one the message waits (refused) rather than go to
    // a later receive or the unexpected queue ahead of its order.
    const bool cq_room = completions_.Reserve();
    // A shared receive reserves its completion here, when it takes the
    // message: without room the message waits (refused).
    const PeerId match = p.match_source;
    if (shared_ != nullptr && !cq_room && matcher_.HasPosted(tagged, match, m.tag)) return false;
    uint64_t base = 0;
    uint32_t index = matcher_.MatchPosted(tagged, match, m.tag, m.total_length,
                                          cq_room ? MatchQueues::Multi::kTake
                                                  : MatchQueues::Multi::kBlock,
                                          &base);
    if (index == MatchQueues::kBlocked) return false;
    const bool keep =
        index != kNone && (shared_ != nullptr || (matcher_.recv(index).flags & kRecvMulti) != 0);
    if (cq_room && !keep) completions_.Unreserve();
    RxSink sink = RxSink::kPosted;
    if (index == kNone) {
      index = matcher_.Admit(src, tagged, m.tag, m.data, m.msg_flags, m.total_length);
      // No room to buffer it: not acknowledged, so the sender backs off.
      if (index == kNone) return false;
      matcher_.unexpected(index).owner = owner_;
      matcher_.unexpected(index).match_source = match;
      sink = RxSink::kUnexpected;
      ++ctx_.counters.unexpected_msgs;
      NoteUnexpectedDepth();
    }
    r.msg_id = m.msg_id;
    r.total = m.total_length;
    r.received = 0;
    r.msg_flags = m.msg_flags;
    r.tag = m.tag;
    r.data = m.data;
    r.sink = sink;
    r.index = index;
    r.base = base;
    p.rx_skip = false;
  } else {
    r = rx_[p.rx];
    if (m.msg_id != r.msg_id || m.offset != r.received || m.total_length != r.total) {
      ++ctx_.counters.protocol_errors;
      AbortReceive(pi, EPROTO, "broke its message framing; receive aborted");
      return ConsumeData(pi, m, payload);  // perhaps the next message: as one
    }
  }
  if (r.sink == RxSink::kPosted) {
    const RecvRequest& q = matcher_.recv(r.index);
    // A multi-receive handed this message exactly its length.
    const uint64_t cap = (q.flags & kRecvMulti) ? r.total : q.len;
    if (r.received < cap && !payload.empty()) {
      const uint64_t n = std::min<uint64_t>(payload.size(), cap - r.received);
      std::memcpy(static_cast<uint8_t*>(q.buf) + r.base + r.received, payload.data(), n);
    }
  } else if (r.sink == RxSink::kUnexpected) {
    matcher_.Append(r.index, payload);
  }
  r.received += payload.size();
  if (r.received == r.total) {
    if (r.sink == RxSink::kPosted) {
      uint64_t flags = 0;
      const RecvRequest q = EndRecvSlot(r.index, r.total, r.base, &flags);
      completions_.Received(src, q, InfoOf(r.total, r.msg_flags, r.tag, r.data), flags);
    } else if (r.sink == RxSink::kUnexpected) {
      matcher_.unexpected(r.index).complete = true;
    }
    if (p.rx != kNone) [[unlikely]] EndRx(p);
    ++p.rx_next_msg_id;
    return true;
  }
  // More segments to come: the message keeps its record, or takes one.
  if (p.rx == kNone) p.rx = rx_.Take();
  rx_[p.rx] = r;
  return true;
}

bool Messaging::ConsumeBundle(uint32_t pi, const wire::MsgFields& m,
                              absl::Span<const uint8_t> payload) {
  wire::BundleReader bundle(m, payload);
  wire::MsgFields each;
  absl::Span<const uint8_t> bytes;
  while (bundle.Next(&each, &bytes)) {
    const MsgPeer& p = peers_[pi];
    // Taken from an earlier copy of this packet, refused after it.
    if (p.rx == kNone && static_cast<int32_t>(each.msg_id - p.rx_next_msg_id) < 0) continue;
    if (!ConsumeData(pi, each, bytes)) return false;
  }
  return true;
}

void Messaging::AbortReceive(uint32_t pi, int err, const char* why) {
  MsgPeer& p = peers_[pi];
  if (p.rx == kNone) return;
  const RxMessage& r = rx_[p.rx];
  if (r.sink == RxSink::kPosted) {
    uint64_t flags = 0;
    const RecvRequest q = EndRecvSlot(r.index, r.total, r.base, &flags);
    char message[sizeof(ErrorCompletion::message)];
    completions_.NamePeer(message, sizeof(message), pi, why);
    completions_.ReceiveFailed(session_.peers().Id(pi), q,
                               InfoOf(r.total, r.msg_flags, r.tag, r.data),
                               std::min<uint64_t>(r.received, q.len), flags, err, message,
                               /*failure=*/true);
  } else if (r.sink == RxSink::kUnexpected) {
    matcher_.Release(r.index);
    NoteUnexpectedDepth();
    NoteFreed();
  }
  EndRx(p);
  ++p.rx_next_msg_id;
}

// ---- Rendezvous.

bool Messaging::CanPull() const {
  const uint32_t cap = ctx_.config.max_rma_ops - std::max(1u, ctx_.config.max_rma_ops / 4);
  return ops_.engine_free() && ops_.live(OpKind::kPull) < cap;
}

uint64_t Messaging::RxSessionId(uint32_t pi) const {
  return uint64_t{session_.address(pi).incarnation} << 32 | session_[pi].rx_isn.value();
}

bool Messaging::ConsumeRequestToSend(uint32_t pi, const wire::MsgFields& m) {
  const PeerId src = session_.peers().Id(pi);
  const PeerId match = peers_[pi].match_source;
  const bool tagged = (m.msg_flags & wire::kMsgTagged) != 0;
  if (!ops_.engine_free()) {
    ++ctx_.counters.rma_no_slot;
    return false;  // no op to answer with: refused, comes again
  }
  if (!CanPull() && matcher_.HasPosted(tagged, match, m.tag)) {
    // Every op pulls may take is pulling: refused, comes again.
    ++ctx_.counters.rma_no_slot;
    return false;
  }
  // A shared receive's completion is reserved here (see ConsumeData).
  if (shared_ != nullptr && matcher_.HasPosted(tagged, match, m.tag) && !completions_.Reserve()) {
    return false;
  }
  // Pulled straight into a receive; never into a multi-receive.
  const uint32_t slot = matcher_.MatchPosted(tagged, match, m.tag);
  if (slot != kNone) {
    StartPull(pi, slot, m.msg_id, InfoOf(m.total_length, m.msg_flags, m.tag, m.data),
              m.msg_flags, m);
  } else {
    // Unexpected: an entry, no bytes (the sender keeps them). The answer
    // goes after those of the reads gathered before it.
    FlushReads();
    const uint32_t e = matcher_.AdmitRendezvous(src, tagged, m.tag, m.data, m.msg_flags,
                                                m.total_length, m.msg_id, RxSessionId(pi));
    if (e == kNone) return false;
    matcher_.unexpected(e).owner = owner_;
    matcher_.unexpected(e).match_source = match;
    matcher_.unexpected(e).rndv_pid = m.offer_pid;
    matcher_.unexpected(e).rndv_addr = m.offer_addr;
    matcher_.unexpected(e).rndv_guard_addr = m.offer_guard_addr;
    matcher_.unexpected(e).rndv_guard = m.offer_guard;
    ++ctx_.counters.unexpected_msgs;
    NoteUnexpectedDepth();
    // Tell the sender, which holds its next messages until it knows.
    const uint32_t a = ops_.Alloc(OpKind::kResponse);
    MakeResponse(ops_[a], wire::kRmaFlagMessage, wire::RmaStatus::kOk, 0, m.msg_id, 0,
                 m.total_length);
    reliability_.Queue(pi, a);
  }
  MsgPeer& p = peers_[pi];
  ++p.rx_next_msg_id;
  p.rx_skip = false;
  return true;
}

void Messaging::StartPull(uint32_t pi, uint32_t slot, uint32_t msg_id, const MessageInfo& m,
                          uint16_t msg_flags, const wire::MsgFields& offer) {
  const uint32_t o = ops_.Alloc(OpKind::kPull);
  SendOp& op = ops_[o];
  op.total = m.total;
  op.len = std::min<uint64_t>(m.total, matcher_.recv(slot).len);  // a shorter receive truncates
  op.slot = slot;
  op.dst = static_cast<uint8_t*>(matcher_.recv(slot).buf);
  // What the message's completion reports, kept until the bytes are in.
  op.msg.msg_flags = msg_flags;
  op.msg.tag = m.tag;
  op.msg.data = m.data;
  op.type = wire::PacketType::kRma;
  op.rma.op = wire::RmaOp::kReadReq;
  op.rma.flags = wire::kRmaFlagMessage;
  op.rma.rma_id = ops_.RmaId(o);
  op.rma.key = msg_id;
  op.rma.total_length = op.len;
  op.wire_len = 0;  // the request is one packet
  if (offer.offer_pid == 0 || !ReadsInPlace()) {
    FlushReads();  // gathered ones first: their READ_REQs go ahead of this one
    FinishPull(pi, o, InPlace::kNotRead);
    return;
  }
  // Read in place, with the other messages of this burst offered by the
  // same process (FlushReads), unless this one would make the call too big.
  if (n_reads_ != 0 && (offer.offer_pid != reads_pid_ || n_reads_ == kMaxBatchedReads ||
                        reads_bytes_ + op.len > kMaxBatchedReadBytes)) {
    FlushReads();
  }
#if defined(__x86_64__)
  const uint64_t guard = offer.offer_guard;
#else
  const uint64_t guard = 0;  // only x86's load order lets the guard vouch
#endif
  reads_[n_reads_++] = PendingRead{o, pi, offer.offer_addr, offer.offer_guard_addr, guard};
  reads_pid_ = offer.offer_pid;
  reads_bytes_ += op.len;
}

void Messaging::FinishPull(uint32_t pi, uint32_t o, InPlace read) {
  SendOp& op = ops_[o];
  if (read != InPlace::kNotRead) {
    // Copied: the READ_REQ tells the sender so; its RESPONSE completes us,
    // unless the guard vouched for the bytes: then the receive completes
    // now and the RESPONSE only ends o.
    op.copied = true;
    op.rma.flags |= wire::kRmaFlagCopied;
    if (read == InPlace::kVouched) {
      // The receive completes now, and the READ_REQ says so: the sender's
      // send completes on it and no RESPONSE comes back, so nothing here
      // waits for the sender after the completion (manual progress: our
      // application may stop calling us once it has its message). o is
      // an answer from here on, freed once acknowledged.
      ++ctx_.counters.rendezvous_in_place_vouched;
      ++ctx_.counters.rendezvous_copied_in_place;
      op.rma.flags |= wire::kRmaFlagVouched;
      DeliverPull(pi, o);
      ops_.SetKind(o, OpKind::kResponse);
    }
  }
  reliability_.Queue(pi, o);
}

void Messaging::ReadGathered() {
  // For each message, its bytes and then its guard word: the kernel copies
  // the ranges in order, the sender clears the word before its send can
  // end, and stores (its clear, then the application's writes to the
  // buffer) are seen in order, as are our loads (x86's TSO; elsewhere the
  // guard is not read and the RESPONSE decides). Still the offer's value:
  // every byte read was the message's. A read that stops short stops at
  // the message it failed in: that one is pulled, and the next ones are
  // read by another call.
  uint64_t guards[kMaxBatchedReads];
  driver::PeerRange ranges[2 * kMaxBatchedReads];
  const DeviceParams& dev = ctx_.dev;
  uint32_t first = 0;
  while (first < n_reads_) {
    size_t n = 0;
    for (uint32_t i = first; i < n_reads_; ++i) {
      const PendingRead& r = reads_[i];
      const SendOp& op = ops_[r.o];
      if (op.len > 0) ranges[n++] = {r.addr, op.dst, op.len};
      if (r.guard != 0) ranges[n++] = {r.guard_addr, &guards[i], sizeof(guards[i])};
    }
    int64_t got = 0;
    if (n != 0) {
      got = dev.read_peer_memory(dev.read_peer_memory_arg, reads_pid_, {ranges, n});
      ++ctx_.counters.rendezvous_in_place_reads;
    }
    uint32_t i = first;
    for (; i < n_reads_; ++i) {
      const PendingRead& r = reads_[i];
      const uint64_t len = ops_[r.o].len;
      InPlace read = InPlace::kCopied;
      bool whole = true;
      if (got < static_cast<int64_t>(len)) {
        // Not permitted (ptrace scope), gone, a bad address or short: pulled.
        ++ctx_.counters.rendezvous_in_place_failed;
        read = InPlace::kNotRead;
        whole = false;
      } else if (r.guard != 0) {
        got -= static_cast<int64_t>(len);
        if (got >= static_cast<int64_t>(sizeof(uint64_t))) {
          got -= static_cast<int64_t>(sizeof(uint64_t));
          if (guards[i] == r.guard) read = InPlace::kVouched;
        } else {
          whole = false;  // its guard not read: the RESPONSE vouches
        }
      } else {
        got -= static_cast<int64_t>(len);
      }
      FinishPull(r.pi, r.o, read);
      if (!whole) break;
    }
    first = i + 1;
  }
  n_reads_ = 0;
  reads_bytes_ = 0;
}

Result Messaging::PullUnexpected(uint32_t e, const RecvRequest& r) {
  // REQUIRES (PostRecv): a completion reserved for r.
  const UnexpectedMsg& m = matcher_.unexpected(e);
  const uint32_t pi = m.source.slot();
  if (!session_.peers().Valid(m.source) || !session_[pi].rx_known ||
      m.rndv_session != RxSessionId(pi)) {
    // Its sender's session ended (restart, timeout) before we took it: the
    // bytes are gone with it.
    char message[sizeof(ErrorCompletion::message)];
    std::snprintf(message, sizeof(message),
                  "rendezvous message of %llu bytes lost: its sender's session ended before a "
                  "receive took it",
                  static_cast<unsigned long long>(m.total));
    completions_.ReceiveFailed(m.source, r, InfoOf(m.total, m.msg_flags, m.tag, m.data), 0, 0,
                               ECONNRESET, message, /*failure=*/true);
    matcher_.Release(e);
    NoteUnexpectedDepth();
    NoteFreed();
    return Result::kOk;
  }
  if (!CanPull()) {  // the rest of max_rma_ops stay for answers
    completions_.Unreserve();
    return Result::kAgain;
  }
  const uint32_t slot = matcher_.AllocRecv(r);
  if (slot == kNone) {
    completions_.Unreserve();
    return Result::kAgain;
  }
  wire::MsgFields offer;
  offer.offer_pid = m.rndv_pid;
  offer.offer_addr = m.rndv_addr;
  offer.offer_guard_addr = m.rndv_guard_addr;
  offer.offer_guard = m.rndv_guard;
  StartPull(pi, slot, m.rndv_msg_id, InfoOf(m.total, m.msg_flags, m.tag, m.data), m.msg_flags,
            offer);
  FlushReads();  // an application's call: read now
  matcher_.Release(e);
  NoteUnexpectedDepth();
  NoteFreed();
  return Result::kOk;
}

bool Messaging::ConsumePullRequest(uint32_t pi, const wire::RmaFields& r) {
  uint32_t o = reliability_.tx_active(pi).waiting.front();
  for (; o != kNone; o = ops_[o].next) {
    const SendOp& op = ops_[o];
    if (op.kind == OpKind::kRndvRequest && op.msg.msg_id == r.key) break;
  }
  const bool copied = (r.flags & wire::kRmaFlagCopied) != 0;
  // COPIED names a request that offered its bytes in place.
  if (o == kNone || r.total_length > ops_[o].len || (copied && ops_[o].msg.offer_pid == 0)) {
    // Not a message of ours waiting to be pulled: a peer that breaks the
    // protocol. Its pull fails there, once we have an op to say so with.
    const uint32_t a = ops_.Alloc(OpKind::kResponse);
    if (a == kNone) {
      ++ctx_.counters.rma_no_slot;
      return false;  // refused: comes again when an answer of ours is acknowledged
    }
    ++ctx_.counters.protocol_errors;
    MakeResponse(ops_[a], wire::kRmaFlagMessage, wire::RmaStatus::kNoMessage, r.rma_id, r.key, 0,
                 r.total_length);
    reliability_.Queue(pi, a);
    return true;
  }
  SendOp& op = ops_[o];
  reliability_.Unpark(pi, o);
  // A pull of an older message (one that waited unexpected) is not the
  // answer the hold waits for.
  reliability_.ReleaseHold(pi, op.msg.msg_id);
  ops_.SetKind(o, OpKind::kRndvData);
  op.type = wire::PacketType::kRma;
  if (copied && (r.flags & wire::kRmaFlagVouched) != 0) {
    // Read in place and already received: the send completes now, and the
    // peer has shown that it reads us (its next requests are not waited for).
    session_[pi].reads_in_place = true;
    ++ctx_.counters.rendezvous_read_by_peer;
    completions_.OpDone(op);
    ops_.Free(o);
    return true;
  }
  if (copied) {
    // The receiver read the bytes in place: one RESPONSE instead of the
    // READ_DATA, and the send completes when it is acknowledged.
    MakeResponse(op, wire::kRmaFlagMessage, wire::RmaStatus::kOk, r.rma_id, op.msg.msg_id, 0,
                 r.total_length);
    ++ctx_.counters.rendezvous_read_by_peer;
    reliability_.Queue(pi, o);
    return true;
  }
  if (op.msg.offer_pid != 0) {
    // We offered and the peer pulled: it cannot read our memory (ptrace
    // rules, another pid namespace...). Messages to it go eager again up
    // to the general threshold, where an extra round trip buys nothing.
    session_[pi].same_host = false;
    session_[pi].in_place_refused = true;
    session_[pi].reads_in_place = false;
  }
  op.rma.op = wire::RmaOp::kReadData;
  op.rma.flags = wire::kRmaFlagMessage;
  op.rma.rma_id = r.rma_id;
  op.rma.key = op.msg.msg_id;
  op.rma.total_length = r.total_length;  // the receive may be shorter than the message
  op.wire_len = r.total_length;
  reliability_.Queue(pi, o);
  return true;
}

void Messaging::ConsumePulledData(uint32_t pi, const wire::RmaFields& r,
                                  absl::Span<const uint8_t> payload) {
  const uint32_t o = reliability_.LandReadData(pi, r, payload, OpKind::kPull);
  if (o == kNone) return;
  ++ctx_.counters.rendezvous_pulled;
  EndPull(pi, o);
}

void Messaging::EndPull(uint32_t pi, uint32_t o) {
  if (!ops_[o].delivered) DeliverPull(pi, o);
  ops_.Free(o);
}

void Messaging::DeliverPull(uint32_t pi, uint32_t o) {
  SendOp& op = ops_[o];
  uint64_t flags = 0;
  const RecvRequest q = EndRecvSlot(op.slot, op.total, 0, &flags);
  completions_.Received(session_.peers().Id(pi), q,
                        InfoOf(op.total, op.msg.msg_flags, op.msg.tag, op.msg.data), flags);
  op.delivered = true;
  op.slot = kNone;
}

void Messaging::ConsumePullResponse(uint32_t pi, const wire::RmaFields& r) {
  if (r.status == wire::RmaStatus::kOk && r.rma_id != 0) {
    // The sender's word on a pull we read in place: it was its message,
    // still waiting; the bytes we copied are the receive's.
    const uint32_t o = ops_.Answered(pi, r, OpKind::kPull);
    if (o == kNone || !ops_[o].copied) {
      ++ctx_.counters.protocol_errors;
      return;
    }
    reliability_.Unpark(pi, o);
    if (!ops_[o].delivered) ++ctx_.counters.rendezvous_copied_in_place;
    EndPull(pi, o);
    return;
  }
  if (r.status == wire::RmaStatus::kOk) {
    // "Your request to send waits in my unexpected queue": send on.
    if (r.key <= UINT32_MAX) reliability_.ReleaseHold(pi, static_cast<uint32_t>(r.key));
    if (reliability_.HasWork(pi)) ctx_.Enqueue(pi);
    return;
  }
  // A refusal of our pull: it echoes the pull's key (the msg_id) and length.
  const uint32_t o = ops_.Answered(pi, r, OpKind::kPull);
  if (o == kNone) {
    ++ctx_.counters.protocol_errors;
    return;
  }
  reliability_.Unpark(pi, o);
  PullFailed(o, EPROTO, "had no such message to pull; receive failed");
  ops_.Free(o);
}

// ---- Failure.

void Messaging::PullFailed(uint32_t o, int err, const char* why) {
  const SendOp& op = ops_[o];
  if (op.delivered) return;  // its receive completed already (vouched for in place)
  uint64_t flags = 0;
  const RecvRequest q = EndRecvSlot(op.slot, op.total, 0, &flags);
  char message[sizeof(ErrorCompletion::message)];
  completions_.NamePeer(message, sizeof(message), op.peer, why);
  completions_.ReceiveFailed(session_.peers().Id(op.peer), q,
                             InfoOf(op.total, op.msg.msg_flags, op.msg.tag, op.msg.data),
                             op.rx_done, flags, err, message, /*failure=*/true);
}

void Messaging::EndSession(uint32_t pi, int err, const char* why) {
  AbortReceive(pi, err, why);
  // Its requests to send waiting unexpected: their bytes stay with a session
  // that is gone, so nothing can pull them; no receive or peek finds them.
  const PeerId id = session_.peers().Id(pi);
  bool lost = false;
  for (uint32_t e = matcher_.FindRendezvousFrom(id, owner_); e != kNone;
       e = matcher_.FindRendezvousFrom(id, owner_)) {
    matcher_.Release(e);
    ++ctx_.counters.rendezvous_lost;
    lost = true;
  }
  if (lost) {
    NoteUnexpectedDepth();
    NoteFreed();
  }
  MsgPeer& p = peers_[pi];
  p.rx_next_msg_id = 0;
  p.rx_skip = false;
  // The next session may be another process at this address: where it is
  // is learned again from its frames.
  session_[pi].same_host = false;
  session_[pi].in_place_refused = false;
  session_[pi].reads_in_place = false;
  // The messages still queued (none started) open the next session.
  p.next_msg_id = 0;
  for (uint32_t o = reliability_.tx_active(pi).ops.front(); o != kNone; o = ops_[o].next) {
    if (ops_[o].type == wire::PacketType::kData) ops_[o].msg.msg_id = p.next_msg_id++;
  }
}

void Messaging::FailDirected(uint32_t pi, int err, const char* why) {
  const PeerId id = peers_[pi].match_source;  // a shared queue's receives name it so
  for (;;) {
    // A shared receive has no completion reserved until one takes it.
    if (shared_ != nullptr && !completions_.Reserve()) break;
    const uint32_t s = matcher_.TakePostedFrom(id);
    if (s == kNone) {
      if (shared_ != nullptr) completions_.Unreserve();
      break;
    }
    EndSlot(s, err, why, /*failure=*/true);
  }
  NoteFreed();
}

void Messaging::RemovePeer(uint32_t pi) {
  const PeerId id = session_.peers().Id(pi);
  // A shared queue's receives directed to it stay: another endpoint may
  // still have it.
  for (uint32_t s = shared_ == nullptr ? matcher_.TakePostedFrom(id) : kNone; s != kNone;
       s = matcher_.TakePostedFrom(id)) {
    CancelSlot(s, "receive canceled: its source was removed");
  }
  for (uint32_t e = matcher_.FindFrom(id, owner_); e != kNone; e = matcher_.FindFrom(id, owner_)) {
    matcher_.Release(e);
  }
  NoteUnexpectedDepth();
  NoteFreed();
}

}  // namespace bypass::rdm
