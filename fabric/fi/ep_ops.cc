// The data path: every msg, tagged and RMA variant resolves its endpoint
// once and converts its arguments into one engine request and one engine
// call. Copies happen only where said: an iov of several buffers is
// gathered into (or scattered from) one bounce buffer, fi_sendmsg with
// FI_INJECT copies the payload, and the engine copies injects and buffered
// sends (PostSend says which sends are buffered).
#include <rdma/fi_atomic.h>
#include <rdma/fi_collective.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <cstring>
#include <optional>
#include <vector>

#include "fabric/fi/av.h"
#include "fabric/fi/cm.h"
#include "fabric/fi/cntr.h"
#include "fabric/fi/coll.h"
#include "fabric/fi/dgram.h"
#include "fabric/fi/domain.h"
#include "fabric/fi/hmem.h"
#include "fabric/fi/ep.h"
#include "fabric/fi/info/info.h"
#include "fabric/fi/msg_ep.h"
#include "fabric/fi/progress.h"
#include "fabric/fi/services.h"
#include "fabric/fi/shared_ctx.h"
#include "fabric/fi/trigger.h"
#include "fabric/rdm/rdm.h"

namespace bypass::fi {
namespace {

constexpr uint64_t kSendFlags = FI_COMPLETION | FI_INJECT | FI_REMOTE_CQ_DATA | FI_MORE |
                                FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE |
                                FI_INJECT_COMPLETE | FI_FENCE | FI_MSG | FI_TAGGED | FI_RMA |
                                FI_READ | FI_WRITE | FI_SEND;
// An iov of several buffers that the engine copies at once (an inject, a
// buffered send) is gathered on the stack first, up to this many bytes (the
// default inject_size); more is refused (-FI_EMSGSIZE) or, for a send, not
// buffered.
constexpr size_t kGatherBytes = 4096;

// What an endpoint's op_flags (tx_attr/rx_attr->op_flags at fi_endpoint,
// then fi_control(FI_SETOPSFLAG)) give the calls without a flags argument
// (fi_endpoint(3), "Operation Flags"): whether to complete at all, at which
// level, buffering, fencing; for receives, multi-receive buffers (fi_recv
// and fi_recvv only: FI_MULTI_RECV is fi_msg(3)'s).
constexpr uint64_t kSendDefaultFlags = FI_COMPLETION | FI_TRANSMIT_COMPLETE |
                                       FI_DELIVERY_COMPLETE | FI_INJECT_COMPLETE | FI_INJECT |
                                       FI_FENCE;
constexpr uint64_t kReadDefaultFlags = kSendDefaultFlags & ~static_cast<uint64_t>(FI_INJECT);
constexpr uint64_t kRecvDefaultFlags = FI_COMPLETION | FI_MULTI_RECV;
constexpr uint64_t kTaggedRecvDefaultFlags = FI_COMPLETION;
constexpr uint64_t kRecvFlags =
    FI_COMPLETION | FI_MULTI_RECV | FI_PEEK | FI_CLAIM | FI_DISCARD | FI_MORE | FI_MSG |
    FI_TAGGED | FI_RECV;

// The enabled endpoint behind a handle (an alias or a context gives its
// flags), or for receives a shared receive context.
struct Target {
  Ep* ep = nullptr;       // the base endpoint
  Srx* srx = nullptr;     // or the shared receive context (receives only)
  uint64_t tx_flags = 0;  // the handle's default flags
  uint64_t rx_flags = 0;
  Ep::Side side = Ep::kWhole;  // a context's side: a transmit context cannot receive
  int err = 0;
};

Target Resolve(fid_ep* f) {
  Target t;
  Ep* e = AsEp(f);
  if (e == nullptr) {
    t.err = BadFid(f, FI_CLASS_EP);
    return t;
  }
  t.ep = e->base;
  t.tx_flags = e->tx_op_flags;
  t.rx_flags = e->rx_op_flags;
  t.side = e->side;
  if (!Enabled(t.ep) || (e->side != Ep::kWhole && !e->side_enabled)) {
    t.err = -FI_EOPBADSTATE;  // fi_enable first
  }
  return t;
}

// The same for a receive call: a shared receive context takes them too.
Target ResolveRx(fid_ep* f) {
  if (f != nullptr && f->fid.fclass == FI_CLASS_SRX_CTX) {
    Target t;
    t.srx = AsSrx(f);
    if (t.srx == nullptr) {
      t.err = BadFid(f, FI_CLASS_SRX_CTX);
    } else {
      t.rx_flags = t.srx->op_flags;
    }
    return t;
  }
  return Resolve(f);
}

// An iov the engine can take: at most iov_limit buffers (fi_endpoint(3)),
// none null with bytes, and a total that does not overflow (*len).
bool ValidIov(const iovec* iov, size_t count, size_t* len) {
  if (count == 1 && iov != nullptr) {  // fi_send, fi_recv, fi_inject: one buffer
    if (iov->iov_base == nullptr && iov->iov_len > 0) return false;
    *len = iov->iov_len;
    return true;
  }
  if (count > kMsgIovLimit || (count > 0 && iov == nullptr)) return false;
  size_t n = 0;
  for (size_t i = 0; i < count; ++i) {
    if (iov[i].iov_base == nullptr && iov[i].iov_len > 0) return false;
    if (__builtin_add_overflow(n, iov[i].iov_len, &n)) return false;
  }
  *len = n;
  return true;
}

}  // namespace

// A failure reported after its operation's completion (a buffered send, an
// inject) with no EQ bound to tell: the next operation to that peer fails
// instead (progress.cc), once.
bool TakeLateError(Ep* ep, fi_addr_t to) {
  const fi_addr_t dest = AvEntry(ep->av, to);
  if (dest >= ep->peers.late_error.size() || !ep->peers.late_error[dest]) return false;
  ep->peers.late_error[dest] = false;
  return true;
}

// FI_FENCE (fi_cq(3)): the operation and those after it wait until every
// earlier one to the peer has completed. The engine keeps a peer's
// operations in order, so waiting for the earlier ones to be acknowledged
// (and answered: RMA, rendezvous) before posting it is enough: -FI_EAGAIN
// until then (progress and retry).
bool FenceHolds(const Ep* ep, rdm::PeerId dest) {
  const std::optional<rdm::PeerStats> st = ep->rdm->peer_stats(dest);
  return st && st->queued_ops + st->waiting_ops > 0;
}

void Gather(const Domain* d, const iovec* iov, size_t count, uint8_t* out) {
  size_t len = 0;
  for (size_t i = 0; i < count; ++i) len += iov[i].iov_len;
  CopyFromUser(d, iov, count, out, len);
}

namespace {

int Map(rdm::Result r) { return static_cast<int>(r); }

// One send of any kind.
struct SendArgs {
  const iovec* iov = nullptr;
  size_t count = 0;
  fi_addr_t dest = FI_ADDR_UNSPEC;
  void* context = nullptr;
  uint64_t tag = 0;
  uint64_t data = 0;
  uint64_t flags = 0;  // FI_* operation flags
  bool tagged = false;
  bool inject_call = false;  // fi_inject / fi_injectdata: no completion at all
};

ssize_t PostSend(const Target& t, const SendArgs& a) {
  if (t.err != 0) return t.err;
  if (t.side == Ep::kRx) return -FI_EOPNOTSUPP;  // a receive context
  Ep* ep = t.ep;
  size_t len = 0;
  if (!ValidIov(a.iov, a.count, &len)) return -FI_EINVAL;
  const uint64_t multicast = ep->type == FI_EP_DGRAM ? FI_MULTICAST : 0;  // mcast.h
  if ((a.flags & ~(kSendFlags | multicast)) != 0) return -FI_EBADFLAGS;
  CallWatch w(ep->domain, /*app_pass=*/false);  // after the guard: what the send left
  DomainGuard g(*ep->lock);
  if (ep->dgram != nullptr) {
    if (a.tagged) return -FI_ENOSYS;  // FI_EP_DGRAM offers FI_MSG only
    if (a.flags & FI_DELIVERY_COMPLETE) return -FI_EBADFLAGS;  // datagrams are not acknowledged
    return DgramSend(ep, a.iov, a.count, a.dest, a.context, a.flags, a.inject_call);
  }
  rdm::SendRequest r;
  fi_addr_t dest = a.dest;  // a connected endpoint's is its peer (msg_ep.h)
  if (int ret = MsgDest(ep, &dest); ret != 0) return ret;
  if (a.tagged && (a.tag & kCmTagBit) && ReservesTopTag(ep)) return -FI_EINVAL;  // cm.h, coll.h
  if (!FindPeer(ep, dest, &r.dest)) return -FI_EINVAL;
  if (TakeLateError(ep, dest)) return -FI_EIO;
  if ((a.flags & FI_FENCE) && FenceHolds(ep, r.dest)) return -FI_EAGAIN;
  r.tag = a.tag;
  r.data = a.data;
  r.context = a.context;
  if (a.tagged) r.flags |= rdm::kSendTagged;
  if (a.flags & FI_REMOTE_CQ_DATA) r.flags |= rdm::kSendRemoteData;
  // The application posts more at once (fi_msg(3)): this one waits for
  // them, or for the next progress, and small ones share a packet.
  if (a.flags & FI_MORE) r.flags |= rdm::kSendMore;
  if (a.inject_call) {
    if (len > ep->config.inject_size) return -FI_EMSGSIZE;
    r.flags |= rdm::kSendInject;
    r.context = nullptr;
    uint8_t gathered[kGatherBytes];
    if (a.count > 1 || HmemOverridden(ep->domain)) {
      // The engine copies an inject at once; gather on the stack first.
      if (len > sizeof(gathered)) return -FI_EMSGSIZE;
      Gather(ep->domain, a.iov, a.count, gathered);
      r.buf = gathered;
    } else {
      r.buf = a.count == 1 ? a.iov[0].iov_base : nullptr;
    }
    r.len = len;
    const rdm::Result res = ep->rdm->Send(r);
    NoteUnfinished(ep->domain, ep->rdm.get());
    if (res == rdm::Result::kOk) {
      CountEvent(ep->cntrs.send);
      ep->peers.NoteBuffered(AvEntry(ep->av, dest));
    }
    return Map(res);
  }
  const bool suppress = ep->cqs.tx_selective && !(a.flags & FI_COMPLETION);
  // The completion level (README.md, "Completions and errors"). A send
  // that asks for FI_INJECT_COMPLETE alone (on the call or in op_flags) of
  // at most inject_size bytes is buffered: the engine copies it and it
  // completes at once, and its acknowledgement rides on the next packet
  // back. Any other send completes on the peer's acknowledgement, which
  // comes once the peer consumed it (placed it in a receive or buffered it
  // as unexpected: FI_DELIVERY_COMPLETE, and so FI_TRANSMIT_COMPLETE, the
  // default); its last packet asks for that acknowledgement at once: the
  // application may wait for the completion and nothing else, and the peer
  // may have stopped progressing once it had the message.
  if (StxFull(ep)) return -FI_EAGAIN;  // the shared transmit context's size
  uint8_t gathered[kGatherBytes];
  // With the application's copy functions (hmem.h) the engine reads only
  // provider buffers: every send is gathered.
  const bool always_copy = HmemOverridden(ep->domain);
  const bool gather = a.count > 1 || always_copy;
  const bool buffered = (a.flags & FI_INJECT_COMPLETE) != 0 &&
                        (a.flags & (FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE)) == 0 &&
                        len <= ep->config.inject_size && (!gather || len <= sizeof(gathered));
  if (buffered) {
    r.flags |= rdm::kSendBuffered;
    ep->peers.NoteBuffered(AvEntry(ep->av, dest));
  } else {
    r.flags |= rdm::kSendAckNow;
  }
  const bool copy = !buffered && (gather || (a.flags & FI_INJECT));
  OpRecord* rec = nullptr;
  if (suppress || copy) {
    if ((a.flags & FI_INJECT) && len > ep->config.inject_size) return -FI_EMSGSIZE;
    rec = ep->records.Alloc();
    if (rec == nullptr) return -FI_EAGAIN;
    rec->user_context = a.context;
    rec->suppress = suppress;
    r.context = rec;
  }
  if (copy) {
    rec->bounce.resize(len);  // a copy: several buffers, or FI_INJECT
    Gather(ep->domain, a.iov, a.count, rec->bounce.data());
    r.buf = rec->bounce.data();
  } else if (buffered && gather) {
    Gather(ep->domain, a.iov, a.count, gathered);  // the engine copies it at once
    r.buf = gathered;
  } else {
    r.buf = a.count == 1 ? a.iov[0].iov_base : nullptr;
  }
  r.len = len;
  const rdm::Result res = ep->rdm->Send(r);
  NoteUnfinished(ep->domain, ep->rdm.get());
  if (res == rdm::Result::kOk) StxTake(ep);
  if (res != rdm::Result::kOk && rec != nullptr) ep->records.Free(rec);
  return Map(res);
}

struct RecvArgs {
  const iovec* iov = nullptr;
  size_t count = 0;
  fi_addr_t src = FI_ADDR_UNSPEC;
  void* context = nullptr;
  uint64_t tag = 0;
  uint64_t ignore = 0;
  uint64_t flags = 0;
  bool tagged = false;
};

// Where a receive's bytes land (r->buf): its buffer, or for several
// buffers a record's bounce buffer, scattered at completion (progress.cc);
// a record also carries `suppress`. The record (null: none), or
// *err = -FI_EAGAIN when every record is in use.
OpRecord* PlaceRecv(OpRecords& records, const RecvArgs& a, size_t len, bool suppress,
                    bool always_copy, rdm::RecvRequest* r, int* err) {
  const bool peek_or_claim = (a.flags & (FI_PEEK | FI_CLAIM)) != 0;
  const bool scatter = (a.count > 1 || always_copy) && !peek_or_claim;
  OpRecord* rec = nullptr;
  r->context = a.context;
  if (suppress || scatter) {
    rec = records.Alloc();
    if (rec == nullptr) {
      *err = -FI_EAGAIN;
      return nullptr;
    }
    rec->user_context = a.context;
    rec->suppress = suppress;
    r->context = rec;
  }
  if (scatter) {
    rec->bounce.resize(len);  // a copy: the message lands here, then scatters
    rec->scatter.assign(a.iov, a.iov + a.count);
    r->buf = rec->bounce.data();
  } else {
    r->buf = a.count >= 1 ? a.iov[0].iov_base : nullptr;
  }
  r->len = len;
  return rec;
}

// The sender a directed receive of an srx names: its address in the AV
// of the first bound endpoint that has it.
std::optional<rdm::Address> SharedSource(Srx* s, fi_addr_t src) {
  for (Ep* ep : s->eps) {
    if (ep->av == nullptr) continue;
    if (std::optional<rdm::Address> a = AvAddress(ep->av, src)) return a;
  }
  return std::nullopt;
}

// A receive posted to a shared receive context (rdm::SharedRecvQueue):
// plain receives, from any source or (FI_DIRECTED_RECV) from the sender an
// fi_addr of the bound endpoints' AV names. Whether it is reported is
// decided where it completes: FI_COMPLETION, or the completing endpoint's
// receive CQ bound without FI_SELECTIVE_COMPLETION (progress.cc).
ssize_t PostSharedRecv(Srx* s, const RecvArgs& a, size_t len) {
  if (a.flags & (FI_MULTI_RECV | FI_PEEK | FI_CLAIM | FI_DISCARD)) {
    BYPASS_FI_WARN(FI_LOG_EP_DATA, "shared receive contexts take no FI_MULTI_RECV, FI_PEEK, "
                   "FI_CLAIM or FI_DISCARD receives\n");
    return -FI_EOPNOTSUPP;
  }
  DomainGuard g(s->domain->lock);
  std::optional<rdm::Address> from;
  if (a.src != FI_ADDR_UNSPEC && (s->caps & FI_DIRECTED_RECV)) {
    from = SharedSource(s, a.src);
    if (!from) return -FI_EINVAL;  // no bound endpoint's AV has it
  }
  rdm::RecvRequest r;
  r.tagged = a.tagged;
  r.tag = a.tag;
  r.ignore = a.ignore;
  int err = 0;
  OpRecord* rec = PlaceRecv(s->records, a, len, !(a.flags & FI_COMPLETION),
                            HmemOverridden(s->domain), &r, &err);
  if (err != 0) return err;
  const rdm::Result res = from ? s->queue->PostRecvFrom(r, *from) : s->queue->PostRecv(r);
  if (res != rdm::Result::kOk && rec != nullptr) s->records.Free(rec);
  return Map(res);
}

ssize_t PostRecv(const Target& t, const RecvArgs& a) {
  if (t.err != 0) return t.err;
  if (t.side == Ep::kTx) return -FI_EOPNOTSUPP;  // a transmit context
  Ep* ep = t.ep;
  size_t len = 0;
  if (!ValidIov(a.iov, a.count, &len)) return -FI_EINVAL;
  if ((a.flags & ~kRecvFlags) != 0) return -FI_EBADFLAGS;
  if ((a.flags & FI_MULTI_RECV) && (a.count != 1 || a.tagged)) return -FI_EINVAL;
  // fi_tagged(3) only, but for claims of buffered receives (fi_msg(3)).
  const bool buffered = t.srx == nullptr && ep->buffered != nullptr;
  if ((a.flags & (FI_PEEK | FI_CLAIM)) && !a.tagged && !(buffered && !(a.flags & FI_PEEK))) {
    return -FI_EINVAL;
  }
  if (t.srx != nullptr) return PostSharedRecv(t.srx, a, len);
  // An endpoint bound to an srx posts to it (its records are the srx's:
  // the receive may complete at another endpoint).
  if (ep->srx != nullptr) return PostSharedRecv(ep->srx, a, len);
  if (buffered && (a.flags & (FI_CLAIM | FI_DISCARD)) && !(a.flags & FI_PEEK)) {
    // fi_msg(3) "Buffered Receives": the context is the notification's
    // fi_recv_context (buffered.h).
    DomainGuard g(*ep->lock);
    return ClaimBuffered(ep, a.iov, a.count, a.context, a.flags);
  }
  DomainGuard g(*ep->lock);
  iovec payload[kMsgIovLimit];
  RecvArgs args = a;
  if (ep->dgram != nullptr) {
    if (args.tagged) return -FI_ENOSYS;  // FI_EP_DGRAM offers FI_MSG only
    if (args.flags & (FI_MULTI_RECV | FI_PEEK | FI_CLAIM | FI_DISCARD)) return -FI_EINVAL;
    if (ep->msg_prefix != 0) {
      if (!SkipPrefix(a.iov, a.count, ep->msg_prefix, payload)) return -FI_EINVAL;
      args.iov = payload;
      len -= ep->msg_prefix;
    }
  }
  rdm::RecvRequest r;
  r.source = rdm::kAnyPeer;
  if ((ep->caps & FI_DIRECTED_RECV) && args.src != FI_ADDR_UNSPEC && ep->rdm != nullptr) {
    if (!FindPeer(ep, args.src, &r.source)) return -FI_EINVAL;
  }
  r.tagged = args.tagged;
  r.tag = args.tag;
  r.ignore = args.ignore;
  if (ReservesTopTag(ep)) {  // never the connection manager's (cm.h) or collectives' (coll.h)
    r.tag &= ~kCmTagBit;
    r.ignore &= ~kCmTagBit;
    // On its listener's port, a connection's receives take its peer's
    // messages only (the peer is known from fi_enable).
    if (ep->shares != nullptr && !ep->peers.Find(0, &r.source)) return -FI_EOPBADSTATE;
  }
  if (args.flags & FI_MULTI_RECV) r.flags |= rdm::kRecvMulti;
  if (args.flags & FI_PEEK) r.flags |= rdm::kRecvPeek;
  if (args.flags & FI_CLAIM) r.flags |= rdm::kRecvClaim;
  if (args.flags & FI_DISCARD) r.flags |= rdm::kRecvDiscard;
  const bool peek_or_claim = (args.flags & (FI_PEEK | FI_CLAIM)) != 0;
  const bool suppress = ep->cqs.rx_selective && !(args.flags & FI_COMPLETION) && !peek_or_claim &&
                        !(args.flags & FI_MULTI_RECV);
  int err = 0;
  OpRecord* rec = PlaceRecv(ep->records, args, len, suppress, HmemOverridden(ep->domain), &r, &err);
  if (err != 0) return err;
  const rdm::Result res = ep->dgram != nullptr ? ep->dgram->PostRecv(r) : ep->rdm->PostRecv(r);
  if (res != rdm::Result::kOk && rec != nullptr) ep->records.Free(rec);
  return Map(res);
}

struct RmaArgs {
  const iovec* iov = nullptr;
  size_t count = 0;
  fi_addr_t dest = FI_ADDR_UNSPEC;
  uint64_t addr = 0;
  uint64_t key = 0;
  void* context = nullptr;
  uint64_t data = 0;
  uint64_t flags = 0;
  bool read = false;
  bool inject_call = false;
};

ssize_t PostRma(const Target& t, const RmaArgs& a) {
  if (t.err != 0) return t.err;
  if (t.side == Ep::kRx) return -FI_EOPNOTSUPP;  // a receive context
  Ep* ep = t.ep;
  size_t len = 0;
  if (!ValidIov(a.iov, a.count, &len)) return -FI_EINVAL;
  if ((a.flags & ~kSendFlags) != 0) return -FI_EBADFLAGS;
  if (a.read && (a.flags & (FI_INJECT | FI_REMOTE_CQ_DATA))) return -FI_EINVAL;
  CallWatch w(ep->domain, /*app_pass=*/false);  // after the guard: what the post left
  DomainGuard g(*ep->lock);
  if (ep->dgram != nullptr) return -FI_ENOSYS;  // no RMA on datagrams
  rdm::RmaRequest r;
  fi_addr_t dest = a.dest;  // a connected endpoint's is its peer (msg_ep.h)
  if (int ret = MsgDest(ep, &dest); ret != 0) return ret;
  if (!FindPeer(ep, dest, &r.dest)) return -FI_EINVAL;
  if (TakeLateError(ep, dest)) return -FI_EIO;
  if ((a.flags & FI_FENCE) && FenceHolds(ep, r.dest)) return -FI_EAGAIN;
  r.addr = a.addr;
  r.key = a.key;
  r.data = a.data;
  r.context = a.context;
  if (a.flags & FI_REMOTE_CQ_DATA) r.flags |= rdm::kRmaRemoteData;
  uint8_t gathered[kGatherBytes];
  if (a.inject_call) {
    if (len > ep->config.inject_size ||
        ((a.count > 1 || HmemOverridden(ep->domain)) && len > sizeof(gathered))) {
      return -FI_EMSGSIZE;
    }
    r.flags |= rdm::kRmaInject;
    r.context = nullptr;
    if (a.count > 1 || HmemOverridden(ep->domain)) {
      Gather(ep->domain, a.iov, a.count, gathered);  // the engine copies an inject at once
      r.buf = gathered;
    } else {
      r.buf = a.count == 1 ? a.iov[0].iov_base : nullptr;
    }
    r.len = len;
    const rdm::Result res = ep->rdm->Write(r);
    NoteUnfinished(ep->domain, ep->rdm.get());
    if (res == rdm::Result::kOk) {
      CountEvent(ep->cntrs.write);
      ep->peers.NoteBuffered(AvEntry(ep->av, dest));
    }
    return Map(res);
  }
  if (StxFull(ep)) return -FI_EAGAIN;  // the shared transmit context's size
  const bool suppress = ep->cqs.tx_selective && !(a.flags & FI_COMPLETION);
  // With the application's copy functions (hmem.h), always a copy.
  const bool copy = a.count > 1 || (a.flags & FI_INJECT) || HmemOverridden(ep->domain);
  OpRecord* rec = nullptr;
  if (suppress || copy) {
    rec = ep->records.Alloc();
    if (rec == nullptr) return -FI_EAGAIN;
    rec->user_context = a.context;
    rec->suppress = suppress;
    r.context = rec;
  }
  if (copy) {
    rec->bounce.resize(len);  // a copy: several buffers, or FI_INJECT
    if (a.read) {
      rec->scatter.assign(a.iov, a.iov + a.count);
    } else {
      Gather(ep->domain, a.iov, a.count, rec->bounce.data());
    }
    r.buf = rec->bounce.data();
  } else {
    r.buf = a.count == 1 ? a.iov[0].iov_base : nullptr;
  }
  r.len = len;
  const rdm::Result res = a.read ? ep->rdm->Read(r) : ep->rdm->Write(r);
  NoteUnfinished(ep->domain, ep->rdm.get());
  if (res == rdm::Result::kOk) StxTake(ep);
  if (res != rdm::Result::kOk && rec != nullptr) ep->records.Free(rec);
  return Map(res);
}

// ---- fi_ops_msg ----

ssize_t Recv(fid_ep* ep, void* buf, size_t len, void*, fi_addr_t src, void* ctx) {
  const iovec iov{buf, len};
  Target t = ResolveRx(ep);
  return PostRecv(t, {.iov = &iov, .count = 1, .src = src, .context = ctx,
                       .flags = t.rx_flags & kRecvDefaultFlags});
}
ssize_t Recvv(fid_ep* ep, const iovec* iov, void**, size_t count, fi_addr_t src, void* ctx) {
  Target t = ResolveRx(ep);
  return PostRecv(t, {.iov = iov, .count = count, .src = src, .context = ctx,
                       .flags = t.rx_flags & kRecvDefaultFlags});
}
ssize_t RecvMsg(fid_ep* ep, const fi_msg* m, uint64_t flags) {
  if (m == nullptr) return -FI_EINVAL;
  if (flags & FI_TRIGGER) return QueueTriggeredMsg(ep, m, flags, true);
  return PostRecv(ResolveRx(ep), {.iov = m->msg_iov, .count = m->iov_count, .src = m->addr,
                       .context = m->context, .flags = flags});
}
ssize_t Send(fid_ep* ep, const void* buf, size_t len, void*, fi_addr_t dest, void* ctx) {
  const iovec iov{const_cast<void*>(buf), len};
  Target t = Resolve(ep);
  return PostSend(t, {.iov = &iov, .count = 1, .dest = dest, .context = ctx,
                       .flags = t.tx_flags & kSendDefaultFlags});
}
ssize_t Sendv(fid_ep* ep, const iovec* iov, void**, size_t count, fi_addr_t dest, void* ctx) {
  Target t = Resolve(ep);
  return PostSend(t, {.iov = iov, .count = count, .dest = dest, .context = ctx,
                       .flags = t.tx_flags & kSendDefaultFlags});
}
ssize_t SendMsg(fid_ep* ep, const fi_msg* m, uint64_t flags) {
  if (m == nullptr) return -FI_EINVAL;
  if (flags & FI_TRIGGER) return QueueTriggeredMsg(ep, m, flags, false);
  return PostSend(Resolve(ep), {.iov = m->msg_iov, .count = m->iov_count, .dest = m->addr,
                       .context = m->context, .data = m->data, .flags = flags});
}
ssize_t Inject(fid_ep* ep, const void* buf, size_t len, fi_addr_t dest) {
  const iovec iov{const_cast<void*>(buf), len};
  return PostSend(Resolve(ep), {.iov = &iov, .count = 1, .dest = dest, .inject_call = true});
}
ssize_t SendData(fid_ep* ep, const void* buf, size_t len, void*, uint64_t data, fi_addr_t dest,
                 void* ctx) {
  const iovec iov{const_cast<void*>(buf), len};
  Target t = Resolve(ep);
  return PostSend(t, {.iov = &iov, .count = 1, .dest = dest, .context = ctx, .data = data,
                       .flags = FI_REMOTE_CQ_DATA | (t.tx_flags & kSendDefaultFlags)});
}
ssize_t InjectData(fid_ep* ep, const void* buf, size_t len, uint64_t data, fi_addr_t dest) {
  const iovec iov{const_cast<void*>(buf), len};
  return PostSend(Resolve(ep), {.iov = &iov, .count = 1, .dest = dest, .data = data,
                       .flags = FI_REMOTE_CQ_DATA, .inject_call = true});
}

// ---- fi_ops_tagged ----

ssize_t TRecv(fid_ep* ep, void* buf, size_t len, void*, fi_addr_t src, uint64_t tag,
              uint64_t ignore, void* ctx) {
  const iovec iov{buf, len};
  Target t = ResolveRx(ep);
  return PostRecv(t, {.iov = &iov, .count = 1, .src = src, .context = ctx, .tag = tag,
                       .ignore = ignore, .flags = t.rx_flags & kTaggedRecvDefaultFlags,
                       .tagged = true});
}
ssize_t TRecvv(fid_ep* ep, const iovec* iov, void**, size_t count, fi_addr_t src, uint64_t tag,
               uint64_t ignore, void* ctx) {
  Target t = ResolveRx(ep);
  return PostRecv(t, {.iov = iov, .count = count, .src = src, .context = ctx, .tag = tag,
                       .ignore = ignore, .flags = t.rx_flags & kTaggedRecvDefaultFlags,
                       .tagged = true});
}
ssize_t TRecvMsg(fid_ep* ep, const fi_msg_tagged* m, uint64_t flags) {
  if (m == nullptr) return -FI_EINVAL;
  if (flags & FI_TRIGGER) return QueueTriggeredTagged(ep, m, flags, true);
  return PostRecv(ResolveRx(ep), {.iov = m->msg_iov, .count = m->iov_count, .src = m->addr,
                       .context = m->context, .tag = m->tag, .ignore = m->ignore, .flags = flags,
                       .tagged = true});
}
ssize_t TSend(fid_ep* ep, const void* buf, size_t len, void*, fi_addr_t dest, uint64_t tag,
              void* ctx) {
  const iovec iov{const_cast<void*>(buf), len};
  Target t = Resolve(ep);
  return PostSend(t, {.iov = &iov, .count = 1, .dest = dest, .context = ctx, .tag = tag,
                       .flags = t.tx_flags & kSendDefaultFlags, .tagged = true});
}
ssize_t TSendv(fid_ep* ep, const iovec* iov, void**, size_t count, fi_addr_t dest, uint64_t tag,
               void* ctx) {
  Target t = Resolve(ep);
  return PostSend(t, {.iov = iov, .count = count, .dest = dest, .context = ctx, .tag = tag,
                       .flags = t.tx_flags & kSendDefaultFlags, .tagged = true});
}
ssize_t TSendMsg(fid_ep* ep, const fi_msg_tagged* m, uint64_t flags) {
  if (m == nullptr) return -FI_EINVAL;
  if (flags & FI_TRIGGER) return QueueTriggeredTagged(ep, m, flags, false);
  return PostSend(Resolve(ep), {.iov = m->msg_iov, .count = m->iov_count, .dest = m->addr,
                       .context = m->context, .tag = m->tag, .data = m->data, .flags = flags,
                       .tagged = true});
}
ssize_t TInject(fid_ep* ep, const void* buf, size_t len, fi_addr_t dest, uint64_t tag) {
  const iovec iov{const_cast<void*>(buf), len};
  return PostSend(Resolve(ep), {.iov = &iov, .count = 1, .dest = dest, .tag = tag, .tagged = true,
                       .inject_call = true});
}
ssize_t TSendData(fid_ep* ep, const void* buf, size_t len, void*, uint64_t data, fi_addr_t dest,
                  uint64_t tag, void* ctx) {
  const iovec iov{const_cast<void*>(buf), len};
  Target t = Resolve(ep);
  return PostSend(t, {.iov = &iov, .count = 1, .dest = dest, .context = ctx, .tag = tag,
                       .data = data, .flags = FI_REMOTE_CQ_DATA | (t.tx_flags & kSendDefaultFlags),
                       .tagged = true});
}
ssize_t TInjectData(fid_ep* ep, const void* buf, size_t len, uint64_t data, fi_addr_t dest,
                    uint64_t tag) {
  const iovec iov{const_cast<void*>(buf), len};
  return PostSend(Resolve(ep), {.iov = &iov, .count = 1, .dest = dest, .tag = tag, .data = data,
                       .flags = FI_REMOTE_CQ_DATA, .tagged = true, .inject_call = true});
}

// ---- fi_ops_rma ----

ssize_t RmaRead(fid_ep* ep, void* buf, size_t len, void*, fi_addr_t src, uint64_t addr,
                uint64_t key, void* ctx) {
  const iovec iov{buf, len};
  Target t = Resolve(ep);
  return PostRma(t, {.iov = &iov, .count = 1, .dest = src, .addr = addr, .key = key,
                      .context = ctx, .flags = t.tx_flags & kReadDefaultFlags, .read = true});
}
ssize_t RmaReadv(fid_ep* ep, const iovec* iov, void**, size_t count, fi_addr_t src, uint64_t addr,
                 uint64_t key, void* ctx) {
  Target t = Resolve(ep);
  return PostRma(t, {.iov = iov, .count = count, .dest = src, .addr = addr, .key = key,
                      .context = ctx, .flags = t.tx_flags & kReadDefaultFlags, .read = true});
}
ssize_t RmaReadMsg(fid_ep* ep, const fi_msg_rma* m, uint64_t flags) {
  if (m == nullptr || m->rma_iov == nullptr || m->rma_iov_count != 1) return -FI_EINVAL;
  if (flags & FI_TRIGGER) return QueueTriggeredRma(ep, m, flags, true);
  return PostRma(Resolve(ep), {.iov = m->msg_iov, .count = m->iov_count, .dest = m->addr,
                      .addr = m->rma_iov[0].addr, .key = m->rma_iov[0].key,
                      .context = m->context, .flags = flags, .read = true});
}
ssize_t RmaWrite(fid_ep* ep, const void* buf, size_t len, void*, fi_addr_t dest, uint64_t addr,
                 uint64_t key, void* ctx) {
  const iovec iov{const_cast<void*>(buf), len};
  Target t = Resolve(ep);
  return PostRma(t, {.iov = &iov, .count = 1, .dest = dest, .addr = addr, .key = key,
                      .context = ctx, .flags = t.tx_flags & kSendDefaultFlags});
}
ssize_t RmaWritev(fid_ep* ep, const iovec* iov, void**, size_t count, fi_addr_t dest,
                  uint64_t addr, uint64_t key, void* ctx) {
  Target t = Resolve(ep);
  return PostRma(t, {.iov = iov, .count = count, .dest = dest, .addr = addr, .key = key,
                      .context = ctx, .flags = t.tx_flags & kSendDefaultFlags});
}
ssize_t RmaWriteMsg(fid_ep* ep, const fi_msg_rma* m, uint64_t flags) {
  if (m == nullptr || m->rma_iov == nullptr || m->rma_iov_count != 1) return -FI_EINVAL;
  if (flags & FI_TRIGGER) return QueueTriggeredRma(ep, m, flags, false);
  return PostRma(Resolve(ep), {.iov = m->msg_iov, .count = m->iov_count, .dest = m->addr,
                      .addr = m->rma_iov[0].addr, .key = m->rma_iov[0].key,
                      .context = m->context, .data = m->data, .flags = flags});
}
ssize_t RmaInject(fid_ep* ep, const void* buf, size_t len, fi_addr_t dest, uint64_t addr,
                  uint64_t key) {
  const iovec iov{const_cast<void*>(buf), len};
  return PostRma(Resolve(ep), {.iov = &iov, .count = 1, .dest = dest, .addr = addr, .key = key,
                      .inject_call = true});
}
ssize_t RmaWriteData(fid_ep* ep, const void* buf, size_t len, void*, uint64_t data,
                     fi_addr_t dest, uint64_t addr, uint64_t key, void* ctx) {
  const iovec iov{const_cast<void*>(buf), len};
  Target t = Resolve(ep);
  return PostRma(t, {.iov = &iov, .count = 1, .dest = dest, .addr = addr, .key = key,
                      .context = ctx, .data = data,
                      .flags = FI_REMOTE_CQ_DATA | (t.tx_flags & kSendDefaultFlags)});
}
ssize_t RmaInjectData(fid_ep* ep, const void* buf, size_t len, uint64_t data, fi_addr_t dest,
                      uint64_t addr, uint64_t key) {
  const iovec iov{const_cast<void*>(buf), len};
  return PostRma(Resolve(ep), {.iov = &iov, .count = 1, .dest = dest, .addr = addr, .key = key,
                      .data = data, .flags = FI_REMOTE_CQ_DATA, .inject_call = true});
}

}  // namespace

fi_ops_msg g_msg_ops = {
    .size = sizeof(fi_ops_msg),
    .recv = Recv,
    .recvv = Recvv,
    .recvmsg = RecvMsg,
    .send = Send,
    .sendv = Sendv,
    .sendmsg = SendMsg,
    .inject = Inject,
    .senddata = SendData,
    .injectdata = InjectData,
};

fi_ops_tagged g_tagged_ops = {
    .size = sizeof(fi_ops_tagged),
    .recv = TRecv,
    .recvv = TRecvv,
    .recvmsg = TRecvMsg,
    .send = TSend,
    .sendv = TSendv,
    .sendmsg = TSendMsg,
    .inject = TInject,
    .senddata = TSendData,
    .injectdata = TInjectData,
};

fi_ops_rma g_rma_ops = {
    .size = sizeof(fi_ops_rma),
    .read = RmaRead,
    .readv = RmaReadv,
    .readmsg = RmaReadMsg,
    .write = RmaWrite,
    .writev = RmaWritev,
    .writemsg = RmaWriteMsg,
    .inject = RmaInject,
    .writedata = RmaWriteData,
    .injectdata = RmaInjectData,
};

}  // namespace bypass::fi
