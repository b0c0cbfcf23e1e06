// Buffered receives: see buffered.h.
#include "fabric/fi/buffered.h"

#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "fabric/fi/cntr.h"
#include "fabric/fi/cq.h"
#include "fabric/fi/ep.h"
#include "fabric/fi/hmem.h"
#include "fabric/fi/services.h"
#include "fabric/rdm/rdm.h"

namespace bypass::fi {

// One message the provider took from the engine for the application.
struct BufferedRecv {
  fi_recv_context rc{};  // what the notification's op_context points at
  bool peeking = true;   // the peek is in flight (else the claim, or notified)
  bool notified = false;
  std::vector<uint8_t> bytes;
  uint64_t fi_flags = 0;  // FI_MSG or FI_TAGGED, FI_REMOTE_CQ_DATA
  uint64_t tag = 0;
  uint64_t data = 0;
  fi_addr_t src = FI_ADDR_NOTAVAIL;
};

BufferedRecvs::BufferedRecvs() = default;
BufferedRecvs::~BufferedRecvs() = default;

namespace {

BufferedRecv* Find(Ep* ep, const void* context) {
  auto it = ep->buffered->live.find(static_cast<const BufferedRecv*>(context));
  return it != ep->buffered->live.end() ? it->second.get() : nullptr;
}

void Forget(Ep* ep, BufferedRecv* b) {
  ep->buffered->held_bytes -= b->bytes.size();
  ep->buffered->live.erase(b);
}

// Receives a peeked (claimed) message into its provider buffer.
void PostClaim(Ep* ep, BufferedRecv* b) {
  rdm::RecvRequest r;
  r.buf = b->bytes.data();
  r.len = b->bytes.size();
  r.context = b;
  r.flags = rdm::kRecvClaim;
  const rdm::Result res = ep->rdm->PostRecv(r);
  if (res == rdm::Result::kAgain) {
    ep->buffered->to_claim.push_back(b);
  } else if (res != rdm::Result::kOk) {
    BYPASS_FI_WARN(FI_LOG_EP_DATA, "buffered receive: the engine refused a claim (%d)\n",
                   static_cast<int>(res));
    Forget(ep, b);
  }
}

// Peeks the oldest unexpected message of one kind, claiming it for a new
// record. False when the engine had no room for the peek's completion.
bool Peek(Ep* ep, bool tagged) {
  auto rec = std::make_unique<BufferedRecv>();
  BufferedRecv* b = rec.get();
  rdm::RecvRequest r;
  r.context = b;
  r.tagged = tagged;
  r.ignore = ~uint64_t{0};
  r.flags = rdm::kRecvPeek | rdm::kRecvClaim;
  if (ep->rdm->PostRecv(r) != rdm::Result::kOk) return false;
  b->rc.ep = &ep->fid;
  ep->buffered->live.emplace(b, std::move(rec));
  return true;
}

// The fields of a claim's completion (CqEntry or CqError): fi_msg(3), its
// context is the one the application set in the fi_recv_context.
template <class E>
void FillClaim(const BufferedRecv& b, size_t len, E* e) {
  e->e.op_context = b.rc.context;
  e->e.flags = FI_RECV | FI_CLAIM | b.fi_flags;
  e->e.len = len;
  e->e.data = b.data;
  e->e.tag = b.tag;
  e->src = b.src;
}

}  // namespace

void InitBuffered(Ep* ep) {
  // One inject's worth reported without FI_MORE by default; every
  // notification's buffer holds its whole message, so MIN holds at any
  // value up to max_msg_size.
  ep->buffered->limit = ep->config.inject_size;
  ep->buffered->min = ep->config.inject_size;
}

void ScanBuffered(Ep* ep) {
  BufferedRecvs& s = *ep->buffered;
  if (ep->cqs.rx == nullptr) return;  // nowhere to notify: the engine keeps them
  std::vector<BufferedRecv*> retry;
  retry.swap(s.to_claim);
  for (BufferedRecv* b : retry) PostClaim(ep, b);
  const uint64_t arrived = ep->rdm->counters().unexpected_msgs;
  if (arrived == s.seen && !s.again) return;
  if (s.held_bytes >= ep->config.unexpected_bytes) {
    s.again = true;  // full: look again once the application gave some back
    return;
  }
  s.seen = arrived;
  s.again = false;
  // One peek of each kind per pass; a success asks for another pass.
  bool ok = true;
  if (ep->caps & FI_MSG) ok = Peek(ep, false);
  if (ok && (ep->caps & FI_TAGGED)) ok = Peek(ep, true);
  if (!ok) s.again = true;
}

bool BufferedCompletion(Ep* ep, const rdm::Completion& c) {
  if (ep->buffered == nullptr) return false;
  BufferedRecv* b = Find(ep, c.context);
  if (b == nullptr) return false;
  BufferedRecvs& s = *ep->buffered;
  if (b->peeking) {
    b->peeking = false;
    b->fi_flags = ((c.flags & rdm::kCompTagged) ? FI_TAGGED : FI_MSG) |
                  ((c.flags & rdm::kCompRemoteData) ? FI_REMOTE_CQ_DATA : 0);
    b->tag = c.tag;
    b->data = c.data;
    b->src = SourceOf(ep, c.source);
    b->bytes.resize(c.len);
    s.held_bytes += c.len;
    s.again = true;  // there may be more
    PostClaim(ep, b);
    return true;
  }
  // Landed: the notification.
  Cq* cq = ep->cqs.rx;
  b->notified = true;
  CqEntry e{};
  e.e.op_context = &b->rc;
  e.e.flags = FI_RECV | b->fi_flags | (b->bytes.size() > s.limit ? FI_MORE : 0);
  e.e.len = b->bytes.size();
  e.e.buf = b->bytes.data();
  e.e.data = b->data;
  e.e.tag = b->tag;
  e.src = b->src;
  cq->entries.push_back(e);
  cq->wait.Signal();
  return true;
}

bool BufferedError(Ep* ep, const rdm::ErrorCompletion& ec) {
  if (ep->buffered == nullptr) return false;
  BufferedRecv* b = Find(ep, ec.op.context);
  if (b == nullptr) return false;
  if (b->peeking && ec.err == ENOMSG) {
    Forget(ep, b);  // nothing (more) of that kind has arrived
    return true;
  }
  // The message could not be received (its sender died or restarted
  // while it was pulled): no operation of the application failed, so no
  // CQ entry; one line says what was lost.
  BYPASS_FI_WARN(FI_LOG_EP_DATA, "buffered receive: a message was lost before it was notified "
                 "(errno %d): %s\n", ec.err, ec.message);
  Forget(ep, b);
  return true;
}

ssize_t ClaimBuffered(Ep* ep, const iovec* iov, size_t count, void* context, uint64_t flags) {
  BufferedRecv* b = Find(ep, context);
  if (b == nullptr || !b->notified) {
    BYPASS_FI_WARN(FI_LOG_EP_DATA, "FI_CLAIM/FI_DISCARD: the context is not the fi_recv_context "
                   "of a buffered receive of this endpoint still unclaimed\n");
    return -FI_EINVAL;
  }
  if (flags & FI_DISCARD) {
    Forget(ep, b);
    return 0;
  }
  Cq* cq = ep->cqs.rx;
  size_t room = 0;
  for (size_t i = 0; i < count; ++i) room += iov[i].iov_len;
  const size_t len = std::min(room, b->bytes.size());
  const bool truncated = len < b->bytes.size();
  if (truncated ? cq->errors.size() >= cq->capacity : cq->room() == 0) return -FI_EAGAIN;
  if (ssize_t r = CopyToUser(ep->domain, iov, count, b->bytes.data(), len); r < 0) return r;
  if (truncated) {
    CountErrorEvent(ep->cntrs.recv);
    CqError e{};
    FillClaim(*b, len, &e);
    e.e.olen = b->bytes.size() - len;
    e.e.err = FI_ETRUNC;
    e.e.prov_errno = FI_ETRUNC;
    std::snprintf(e.message, sizeof(e.message), "claimed into %zu bytes: %zu did not fit", room,
                  b->bytes.size() - len);
    cq->errors.push_back(e);
  } else {
    CountEvent(ep->cntrs.recv);
    if (!ep->cqs.rx_selective || (flags & FI_COMPLETION)) {
      CqEntry e{};
      FillClaim(*b, len, &e);
      cq->entries.push_back(e);
    }
  }
  cq->wait.Signal();
  Forget(ep, b);
  return 0;
}

int GetBufferedOpt(const Ep* ep, int optname, void* optval, size_t* optlen) {
  const size_t v = optname == FI_OPT_BUFFERED_LIMIT ? ep->buffered->limit : ep->buffered->min;
  if (*optlen < sizeof(size_t)) {
    *optlen = sizeof(size_t);
    return -FI_ETOOSMALL;
  }
  std::memcpy(optval, &v, sizeof(v));
  *optlen = sizeof(size_t);
  return 0;
}

int SetBufferedOpt(Ep* ep, int optname, const void* optval, size_t optlen) {
  if (optlen != sizeof(size_t)) return -FI_EINVAL;
  if (Enabled(ep)) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, "FI_OPT_BUFFERED_LIMIT/MIN are set before fi_enable\n");
    return -FI_EOPBADSTATE;
  }
  size_t v;
  std::memcpy(&v, optval, sizeof(v));
  const size_t max = ep->config.max_msg_size;
  if (optname == FI_OPT_BUFFERED_LIMIT) {
    if (v == SIZE_MAX) v = max;  // fi_endpoint(3): the largest supported
    if (v > max) {
      BYPASS_FI_WARN(FI_LOG_EP_CTRL, "FI_OPT_BUFFERED_LIMIT %zu is above max_msg_size %zu\n", v,
                     max);
      return -FI_EMSGSIZE;
    }
    ep->buffered->limit = v;
    return 0;
  }
  if (v > max) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, "FI_OPT_BUFFERED_MIN %zu is above max_msg_size %zu\n", v, max);
    return -FI_EMSGSIZE;
  }
  ep->buffered->min = v;
  return 0;
}

}  // namespace bypass::fi
