// The receive-side calls beyond a plain receive: multi-receive buffers,
// peek / claim / discard (fi_tagged(3)), cancel (fi_cancel) and the slot
// counts (fi_rx_size_left).
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>

#include "fabric/rdm/engine.h"

namespace bypass::rdm {

uint32_t Engine::RecvSlotsFree() const { return matcher_.recv_slots_free(); }

void Engine::SetMinMultiRecv(size_t bytes) { matcher_.set_min_multi_recv(bytes); }

size_t Engine::min_multi_recv() const { return matcher_.min_multi_recv(); }

Result Engine::PostMulti(const RecvRequest& r) {
  // REQUIRES: a completion reserved (for the buffer's release or cancel).
  const uint32_t slot = matcher_.AllocRecv(r);
  if (slot == kNone) {
    cq_.Unreserve();
    return Result::kAgain;
  }
  matcher_.QueueRecv(slot);
  // Messages already waiting, in order, as long as they fit and the
  // completion queue has room for their records. Rendezvous messages are
  // pulled into plain receives only.
  RecvSlot& s = matcher_.slot(slot);
  while (!s.released) {
    const uint32_t e = matcher_.FindUnexpected(r, r.len - s.used, /*eager_only=*/true);
    if (e == kNone || !cq_.Reserve()) break;
    const UnexpectedMsg& m = matcher_.unexpected(e);
    const uint64_t base = matcher_.TakeMulti(slot, m.total);
    if (!m.complete) {
      BindArriving(e, slot, base);
      continue;
    }
    RxMessage done;
    done.total = m.total;
    done.received = m.received;
    done.msg_flags = m.msg_flags;
    done.tag = m.tag;
    done.data = m.data;
    done.base = base;
    matcher_.CopyOut(e, static_cast<uint8_t*>(r.buf) + base, m.total);
    const PeerId src = m.source;
    matcher_.Release(e);
    NoteUnexpectedDepth();
    uint64_t flags = 0;
    const RecvRequest landed = EndRecvSlot(slot, done, &flags);
    CompleteRecv(src, landed, done, flags);
    if (flags != 0) break;  // released and freed
  }
  ResourcesFreed();
  return Result::kOk;
}

Result Engine::Peek(const RecvRequest& r) {
  if (!cq_.Reserve()) return Result::kAgain;
  const uint32_t e = matcher_.FindUnexpected(r);
  Completion c;
  c.context = r.context;
  c.flags = kCompRecv | kCompMsg | (r.tagged ? kCompTagged : 0);
  if (e == kNone) {
    ErrorCompletion ec;
    ec.op = c;
    ec.err = ENOMSG;
    std::snprintf(ec.message, sizeof(ec.message), "peek: no matching message has arrived");
    cq_.PushError(ec);
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
      cq_.Unreserve();
      return res;
    }
  } else if (r.flags & kRecvClaim) {
    m.claimed = true;
    m.claim_context = r.context;
  }
  cq_.Push(c);
  return Result::kOk;
}

Result Engine::Claim(const RecvRequest& r) {
  const uint32_t e = matcher_.FindClaimed(r.context);
  if (e == kNone) return Result::kInvalid;  // no peek claimed a message for this context
  if (!cq_.Reserve()) return Result::kAgain;
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
      cq_.Unreserve();
      return res;
    }
    cq_.Push(c);
    return Result::kOk;
  }
  if (m.rendezvous) return PullUnexpected(e, q);
  if (m.complete) {
    DeliverUnexpected(e, q);
    ResourcesFreed();
    return Result::kOk;
  }
  const uint32_t slot = matcher_.AllocRecv(q);
  if (slot == kNone) {
    cq_.Unreserve();
    return Result::kAgain;
  }
  BindArriving(e, slot, 0);
  ResourcesFreed();
  return Result::kOk;
}

void Engine::BindArriving(uint32_t e, uint32_t slot, uint64_t base) {
  // What came so far moves to the receive's buffer; the rest goes there
  // directly.
  const UnexpectedMsg& m = matcher_.unexpected(e);
  const RecvRequest& r = matcher_.recv(slot);
  const uint64_t cap = (r.flags & kRecvMulti) ? m.total : r.len;
  matcher_.CopyOut(e, static_cast<uint8_t*>(r.buf) + base, cap);
  RxMessage& rx = peers_[PeerTable::Index(m.source)].rx_msg;
  rx.sink = RxSink::kPosted;
  rx.index = slot;
  rx.base = base;
  matcher_.Release(e);
  NoteUnexpectedDepth();
}

Result Engine::DiscardMessage(uint32_t e, void* context) {
  const UnexpectedMsg& m = matcher_.unexpected(e);
  if (!m.rendezvous) {
    DropUnexpected(e);
    return Result::kOk;
  }
  // Its sender holds the bytes until they are pulled: pull none, so that
  // its send completes; the receive completes silently (CompleteRecv).
  if (!cq_.Reserve()) return Result::kAgain;
  RecvRequest q;
  q.source = m.source;
  q.context = context;
  q.tagged = m.tagged;
  q.flags = kRecvDiscard;
  return PullUnexpected(e, q);  // gives the reservation back on kAgain
}

void Engine::DropUnexpected(uint32_t e) {
  const UnexpectedMsg& m = matcher_.unexpected(e);
  if (!m.complete) {
    RxMessage& rx = peers_[PeerTable::Index(m.source)].rx_msg;
    rx.sink = RxSink::kDiscard;
    rx.index = kNone;
  }
  matcher_.Release(e);
  NoteUnexpectedDepth();
  ResourcesFreed();
}

RecvRequest Engine::EndRecvSlot(uint32_t slot, const RxMessage& m, uint64_t* flags) {
  RecvSlot& s = matcher_.slot(slot);
  RecvRequest q = s.req;
  *flags = 0;
  if ((q.flags & kRecvMulti) == 0) {
    matcher_.FreeRecv(slot);
    return q;
  }
  if (m.total > 0) q.buf = static_cast<uint8_t*>(q.buf) + m.base;
  q.len = m.total;
  if (--s.active == 0 && s.released) {
    // The last message of a released buffer says so; the completion
    // reserved when it was posted is not needed.
    *flags = kCompMultiRecv;
    cq_.Unreserve();
    matcher_.FreeRecv(slot);
  }
  return q;
}

void Engine::CancelSlot(uint32_t slot, const char* why) {
  RecvSlot& s = matcher_.slot(slot);
  ErrorCompletion ec;
  ec.op.context = s.req.context;
  ec.op.flags = kCompRecv | kCompMsg | (s.req.tagged ? kCompTagged : 0);
  ec.op.buf = s.req.buf;
  ec.err = ECANCELED;
  std::snprintf(ec.message, sizeof(ec.message), "%s", why);
  if (s.req.flags & kRecvMulti) {
    s.released = true;
    // Messages still arriving into it complete normally; the last one
    // carries kCompMultiRecv.
    if (s.active > 0) return;
    ec.op.flags |= kCompMultiRecv;
  }
  cq_.PushError(ec);
  matcher_.FreeRecv(slot);
}

bool Engine::CancelRecv(void* context) {
  const uint32_t slot = matcher_.TakePosted(context);
  if (slot == kNone) return false;
  CancelSlot(slot, "receive canceled");
  return true;
}

}  // namespace bypass::rdm
