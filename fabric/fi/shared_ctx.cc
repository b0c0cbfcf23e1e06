// Shared receive and transmit contexts (shared_ctx.h): opening, binding,
// closing, cancel and sizes. The srx's receive calls are in ep_ops.cc; its
// completions are delivered by progress.cc through the endpoint each
// message arrived at.
#include "fabric/fi/shared_ctx.h"

#include <rdma/fi_cm.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>

#include "fabric/fi/domain.h"
#include "fabric/fi/fabric.h"
#include "fabric/fi/info/info.h"
#include "fabric/fi/services.h"

namespace bypass::fi {
namespace {

// Closes a shared context: -FI_EBUSY while endpoints are bound to it.
template <class T>
int CloseContext(T* s) {
  Domain* d = s->domain;
  DomainGuard g(d->lock);
  if (s->obj.refs.load() > 0) return -FI_EBUSY;
  if constexpr (std::is_same_v<T, Srx>) {
    s->queue.reset();  // its endpoints have left it
    s->records.Release();
  }
  d->obj.refs.fetch_sub(1);
  s->obj.magic = Obj::kDead;
  Retire(s);
  return 0;
}

// ---- The shared receive context.

int SrxClose(fid* f) {
  Srx* s = AsSrx(f);
  return s != nullptr ? CloseContext(s) : BadFid(f, FI_CLASS_SRX_CTX);
}

int SrxControl(fid* f, int command, void*) {
  if (AsSrx(f) == nullptr) return BadFid(f, FI_CLASS_SRX_CTX);
  return command == FI_ENABLE ? 0 : -FI_ENOSYS;  // usable from fi_srx_context on
}

fi_ops g_srx_fi_ops = {
    .size = sizeof(fi_ops),
    .close = SrxClose,
    .bind = NoSysBind,
    .control = SrxControl,
    .ops_open = NoSysOpsOpen,
    .tostr = NoSysTostr,
    .ops_set = NoSysOpsSet,
};

ssize_t SrxCancel(fid_t f, void* context) {
  Srx* s = AsSrx(f);
  if (s == nullptr) return BadFid(f, FI_CLASS_SRX_CTX);
  return CancelSharedRecv(s, context);
}

int SrxGetopt(fid_t, int, int, void*, size_t*) { return -FI_ENOPROTOOPT; }
int SrxSetopt(fid_t, int, int, const void*, size_t) { return -FI_ENOPROTOOPT; }
int SrxTxCtx(fid_ep*, int, fi_tx_attr*, fid_ep**, void*) { return -FI_ENOSYS; }
int SrxRxCtx(fid_ep*, int, fi_rx_attr*, fid_ep**, void*) { return -FI_ENOSYS; }

ssize_t SrxRxSizeLeft(fid_ep* f) {
  Srx* s = AsSrx(f);
  if (s == nullptr) return BadFid(f, FI_CLASS_SRX_CTX);
  DomainGuard g(s->domain->lock);
  return s->queue->RecvSlotsFree();
}

ssize_t SrxTxSizeLeft(fid_ep* f) {
  if (AsSrx(f) == nullptr) return BadFid(f, FI_CLASS_SRX_CTX);
  return -FI_ENOSYS;  // a receive context
}

// An stx has the same table: each call answers it an error.
fi_ops_ep g_srx_ep_ops = {
    .size = sizeof(fi_ops_ep),
    .cancel = SrxCancel,
    .getopt = SrxGetopt,
    .setopt = SrxSetopt,
    .tx_ctx = SrxTxCtx,
    .rx_ctx = SrxRxCtx,
    .rx_size_left = SrxRxSizeLeft,
    .tx_size_left = SrxTxSizeLeft,
};

// A receive context has no name, peer or connection.
fi_ops_cm g_srx_cm_ops = {
    .size = sizeof(fi_ops_cm),
    .setname = [](fid_t, void*, size_t) { return -FI_ENOSYS; },
    .getname = [](fid_t, void*, size_t*) { return -FI_ENOSYS; },
    .getpeer = [](fid_ep*, void*, size_t*) { return -FI_ENOSYS; },
    .connect = [](fid_ep*, const void*, const void*, size_t) { return -FI_ENOSYS; },
    .listen = [](fid_pep*) { return -FI_ENOSYS; },
    .accept = [](fid_ep*, const void*, size_t) { return -FI_ENOSYS; },
    .reject = [](fid_pep*, fid_t, const void*, size_t) { return -FI_ENOSYS; },
    .shutdown = [](fid_ep*, uint64_t) { return -FI_ENOSYS; },
    .join = [](fid_ep*, const void*, uint64_t, fid_mc**, void*) { return -FI_ENOSYS; },
};

// ---- The shared transmit context.

int StxClose(fid* f) {
  Stx* s = AsStx(f);
  return s != nullptr ? CloseContext(s) : BadFid(f, FI_CLASS_STX_CTX);
}

int StxControl(fid* f, int, void*) {
  if (AsStx(f) == nullptr) return BadFid(f, FI_CLASS_STX_CTX);
  return -FI_ENOSYS;
}

fi_ops g_stx_fi_ops = {
    .size = sizeof(fi_ops),
    .close = StxClose,
    .bind = NoSysBind,
    .control = StxControl,
    .ops_open = NoSysOpsOpen,
    .tostr = NoSysTostr,
    .ops_set = NoSysOpsSet,
};


// The size an srx or stx gets: the attribute's (0: the endpoint's
// default), at most what an endpoint may have (fabric/fi/info offers it).
bool ContextSize(size_t asked, uint32_t dflt, size_t* out) {
  if (asked > (1u << 16)) return false;
  *out = asked != 0 ? asked : dflt;
  return true;
}

}  // namespace

int OpenSrx(fid_domain* domain, fi_rx_attr* attr, fid_ep** out, void* context) {
  Domain* d = AsDomain(domain);
  if (d == nullptr) return BadFid(domain, FI_CLASS_DOMAIN);
  if (out == nullptr) return -FI_EINVAL;
  const rdm::EndpointConfig& engine = d->fabric->settings.engine;
  size_t size = 0;
  if (!ContextSize(attr != nullptr ? attr->size : 0, engine.max_posted_recvs, &size)) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, "fi_srx_context: rx_attr->size %zu is beyond 65536\n",
                   attr->size);
    return -FI_EINVAL;
  }
  if (attr != nullptr && attr->iov_limit > kMsgIovLimit) return -FI_EINVAL;
  DomainGuard g(d->lock);
  rdm::SharedRecvConfig qc;
  qc.max_posted_recvs = static_cast<uint32_t>(size);
  qc.max_unexpected_msgs = engine.max_unexpected_msgs;
  qc.unexpected_bytes = engine.unexpected_bytes;
  qc.unexpected_chunk_bytes = engine.unexpected_chunk_bytes;
  qc.unexpected_pool = d->unexpected.get();
  absl::StatusOr<std::unique_ptr<rdm::SharedRecvQueue>> q =
      rdm::SharedRecvQueue::Create(*d->port, qc);
  if (!q.ok()) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, "fi_srx_context: %s\n", std::string(q.status().message()).c_str());
    return FromStatus(q.status());
  }
  auto s = std::make_unique<Srx>();
  std::memset(&s->fid, 0, sizeof(s->fid));
  s->fid.fid.fclass = FI_CLASS_SRX_CTX;
  s->fid.fid.context = context;
  s->fid.fid.ops = &g_srx_fi_ops;
  s->fid.ops = &g_srx_ep_ops;
  s->fid.cm = &g_srx_cm_ops;
  // The endpoints' tables: their receive calls take an srx (ep_ops.cc), the
  // others answer -FI_EINVAL for a handle that is no endpoint.
  s->fid.msg = &g_msg_ops;
  s->fid.tagged = &g_tagged_ops;
  s->fid.rma = &g_rma_ops;
  s->fid.atomic = &g_atomic_ops;
  s->fid.collective = &g_collective_ops;
  s->domain = d;
  s->caps = attr != nullptr ? attr->caps : 0;
  s->op_flags = attr != nullptr ? attr->op_flags : 0;
  s->queue = *std::move(q);
  s->records.Init(size);
  d->obj.refs.fetch_add(1);
  *out = &s.release()->fid;
  return 0;
}

int OpenStx(fid_domain* domain, fi_tx_attr* attr, fid_stx** out, void* context) {
  Domain* d = AsDomain(domain);
  if (d == nullptr) return BadFid(domain, FI_CLASS_DOMAIN);
  if (out == nullptr) return -FI_EINVAL;
  size_t size = 0;
  if (!ContextSize(attr != nullptr ? attr->size : 0, d->fabric->settings.engine.max_send_ops,
                   &size)) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, "fi_stx_context: tx_attr->size %zu is beyond 65536\n",
                   attr->size);
    return -FI_EINVAL;
  }
  DomainGuard g(d->lock);
  auto s = std::make_unique<Stx>();
  std::memset(&s->fid, 0, sizeof(s->fid));
  s->fid.fid.fclass = FI_CLASS_STX_CTX;
  s->fid.fid.context = context;
  s->fid.fid.ops = &g_stx_fi_ops;
  s->fid.ops = &g_srx_ep_ops;  // its calls answer -FI_EINVAL: an stx is no srx
  s->domain = d;
  s->size = size;
  d->obj.refs.fetch_add(1);
  *out = &s.release()->fid;
  return 0;
}

ssize_t CancelSharedRecv(Srx* s, void* context) {
  DomainGuard g(s->domain->lock);
  // A receive posted with a record is known to the engine by the record.
  for (OpRecord& r : s->records.slots) {
    if (r.user_context == context && context != nullptr && s->queue->CancelRecv(&r)) return 0;
  }
  return s->queue->CancelRecv(context) ? 0 : -FI_ENOENT;
}

int BindSharedContext(Ep* ep, fid* ctx, uint64_t flags) {
  if (flags != 0) return -FI_EBADFLAGS;
  const bool rx = ctx->fclass == FI_CLASS_SRX_CTX;
  if (ep->type != FI_EP_RDM) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, "fi_ep_bind: shared contexts are for FI_EP_RDM endpoints\n");
    return -FI_EINVAL;
  }
  if (!(rx ? ep->shared_rx : ep->shared_tx)) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL,
                   "fi_ep_bind: open the endpoint with ep_attr->%s FI_SHARED_CONTEXT to bind a "
                   "shared %s context\n",
                   rx ? "rx_ctx_cnt" : "tx_ctx_cnt", rx ? "receive" : "transmit");
    return -FI_EINVAL;
  }
  if (rx) {
    Srx* s = AsSrx(ctx);
    if (s == nullptr) return -FI_EBADF;
    if (s->domain != ep->domain || ep->srx != nullptr) return -FI_EINVAL;
    ep->srx = s;
    s->eps.push_back(ep);
    s->obj.refs.fetch_add(1);
  } else {
    Stx* s = AsStx(ctx);
    if (s == nullptr) return -FI_EBADF;
    if (s->domain != ep->domain || ep->stx != nullptr) return -FI_EINVAL;
    ep->stx = s;
    s->obj.refs.fetch_add(1);
  }
  return 0;
}

void UnbindSharedContexts(Ep* ep) {
  if (ep->srx != nullptr) {
    EraseOne(ep->srx->eps, ep);
    ep->srx->obj.refs.fetch_sub(1);
    ep->srx = nullptr;
  }
  if (ep->stx != nullptr) {
    // Its operations in flight were dropped with its engine.
    ep->stx->outstanding -= ep->stx_outstanding;
    ep->stx_outstanding = 0;
    ep->stx->obj.refs.fetch_sub(1);
    ep->stx = nullptr;
  }
}

}  // namespace bypass::fi
