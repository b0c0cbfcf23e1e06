// Scalable endpoints and their transmit and receive contexts (sep.h).
#include "fabric/fi/sep.h"

#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "fabric/fi/address/address.h"
#include "fabric/fi/av.h"
#include "fabric/fi/domain.h"
#include "fabric/fi/ep.h"
#include "fabric/fi/fabric.h"
#include "fabric/fi/progress.h"
#include "fabric/fi/info/info.h"
#include "fabric/fi/services.h"

namespace bypass::fi {
namespace {

// Bases tried at a first fi_enable past a run another process holds.
constexpr int kPortTries = 4096;

// The first run of n UDP ports from `from` that no endpoint of d outside
// sep has, or 0.
uint16_t FreeRun(const Domain* d, uint32_t from, size_t n, const Sep* sep) {
  for (uint32_t p = from; p != 0 && p + n <= 65536; ++p) {
    bool used = false;
    for (const Ep* e : d->eps) {
      used = used || (e->sep != sep && e->udp_port >= p && e->udp_port < p + n);
    }
    if (!used) return static_cast<uint16_t>(p);
  }
  return 0;
}

int EnableSlots(Sep* sep);

void SetBase(Sep* sep, uint16_t base) {
  sep->base_port = base;
  for (Ep* slot : sep->slots) {
    slot->udp_port = static_cast<uint16_t>(base + slot->sep_index);
    slot->config.udp_port = slot->udp_port;
  }
}

bool AnyEnabled(const Sep* sep) {
  for (const Ep* slot : sep->slots) {
    if (Enabled(slot)) return true;
  }
  return false;
}

// Closes the slots (their engine endpoints linger as endpoints do).
// REQUIRES: the domain's lock; no context open.
void CloseSlots(Sep* sep) {
  for (Ep* slot : sep->slots) {
    CloseEngineEp(slot);
    slot->obj.magic = Obj::kDead;
    Retire(slot);
  }
  sep->slots.clear();
}

int SepClose(fid* f) {
  Sep* sep = AsSep(f);
  if (sep == nullptr) return BadFid(f, FI_CLASS_SEP);
  Domain* d = sep->domain;
  DomainGuard g(d->lock);
  if (sep->obj.refs.load() > 0) return -FI_EBUSY;  // contexts open (fi_endpoint(3))
  CloseSlots(sep);
  if (sep->av != nullptr) sep->av->obj.refs.fetch_sub(1);
  FreeInfo(sep->info);
  sep->info = nullptr;
  d->obj.refs.fetch_sub(1);
  sep->obj.magic = Obj::kDead;
  Retire(sep);
  return 0;
}

// fi_scalable_ep_bind: the AV, which every context uses.
int SepBind(fid* f, fid* bfid, uint64_t flags) {
  Sep* sep = AsSep(f);
  if (sep == nullptr) return BadFid(f, FI_CLASS_SEP);
  if (bfid == nullptr) return -FI_EINVAL;
  Domain* d = sep->domain;
  DomainGuard g(d->lock);
  if (bfid->fclass != FI_CLASS_AV) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, "a scalable endpoint binds an AV only; bind CQs and counters "
                   "to its transmit and receive contexts\n");
    return -FI_EINVAL;
  }
  Av* av = AsAv(bfid);
  if (av == nullptr) return -FI_EBADF;
  if (av->domain != d || sep->av != nullptr) return -FI_EINVAL;
  if (av->shared != nullptr) {
    // A named AV brings other processes' entries into every endpoint on it
    // from whichever endpoint's call reads the table (av.cc, WireNew):
    // contexts that each run under their own lock cannot share that.
    BYPASS_FI_WARN(FI_LOG_EP_CTRL,
                   "fi_scalable_ep_bind: a named AV (attr->name) cannot serve a scalable "
                   "endpoint; open an AV without a name for it\n");
    return -FI_EOPNOTSUPP;
  }
  if (flags != 0) return -FI_EBADFLAGS;
  if (AnyEnabled(sep)) return -FI_EOPBADSTATE;
  sep->av = av;
  av->obj.refs.fetch_add(1);
  for (Ep* slot : sep->slots) {
    slot->av = av;
    av->eps.push_back(slot);
    av->obj.refs.fetch_add(1);
  }
  return 0;
}

int SepControl(fid* f, int command, void*) {
  Sep* sep = AsSep(f);
  if (sep == nullptr) return BadFid(f, FI_CLASS_SEP);
  DomainGuard g(sep->domain->lock);
  if (command != FI_ENABLE) return -FI_ENOSYS;
  if (sep->av == nullptr) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, "fi_enable: bind an AV to the scalable endpoint first\n");
    return -FI_ENOAV;
  }
  // The run of ports is taken now, so that fi_getname after fi_enable names
  // ports that are ours (Open MPI publishes the name before it enables the
  // contexts); the contexts are enabled one by one.
  if (!AnyEnabled(sep)) {
    if (int ret = EnableSlots(sep); ret != 0) return ret;
  }
  sep->enabled = true;
  return 0;
}

fi_ops g_sep_fi_ops = {
    .size = sizeof(fi_ops),
    .close = SepClose,
    .bind = SepBind,
    .control = SepControl,
    .ops_open = NoSysOpsOpen,
    .tostr = NoSysTostr,
    .ops_set = NoSysOpsSet,
};

// A transmit (side kTx) or receive context: a side of slot `index`.
int OpenContext(fid_ep* f, int index, Ep::Side side, const uint64_t* op_flags, fid_ep** out,
                void* context) {
  Sep* sep = AsSep(f);
  if (sep == nullptr) return BadFid(f, FI_CLASS_SEP);
  if (out == nullptr) return -FI_EINVAL;
  const bool tx = side == Ep::kTx;
  const size_t count = tx ? sep->tx_cnt : sep->rx_cnt;
  if (index < 0 || static_cast<size_t>(index) >= count) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, "%s context %d: the scalable endpoint has %zu (ep_attr->%s)\n",
                   tx ? "transmit" : "receive", index, count, tx ? "tx_ctx_cnt" : "rx_ctx_cnt");
    return -FI_EINVAL;
  }
  DomainGuard g(sep->domain->lock);
  Ep* slot = sep->slots[index];
  DomainGuard q(*slot->lock);
  Ep*& held = slot->contexts[tx ? 0 : 1];
  if (held != nullptr) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, "%s context %d is open already; close it first\n",
                   tx ? "transmit" : "receive", index);
    return -FI_EBUSY;
  }
  auto ctx = std::make_unique<Ep>();
  ctx->fid = slot->fid;  // the same ops tables
  ctx->fid.fid.fclass = tx ? FI_CLASS_TX_CTX : FI_CLASS_RX_CTX;
  ctx->fid.fid.context = context;
  ctx->base = slot;
  ctx->side = side;
  ctx->tx_op_flags = slot->tx_op_flags;
  ctx->rx_op_flags = slot->rx_op_flags;
  if (op_flags != nullptr && *op_flags != 0) (tx ? ctx->tx_op_flags : ctx->rx_op_flags) = *op_flags;
  held = ctx.get();
  sep->obj.refs.fetch_add(1);
  *out = &ctx.release()->fid;
  return 0;
}

// The attributes a context is given (fi_endpoint(3): returned through
// attr): its scalable endpoint's, with the op_flags asked.
template <class Attr>
void ReturnAttr(const Attr* of, Attr* attr) {
  if (attr == nullptr || of == nullptr) return;
  const uint64_t op_flags = attr->op_flags != 0 ? attr->op_flags : of->op_flags;
  *attr = *of;
  attr->op_flags = op_flags;
}

int SepTxCtx(fid_ep* f, int index, fi_tx_attr* attr, fid_ep** out, void* context) {
  const int ret =
      OpenContext(f, index, Ep::kTx, attr != nullptr ? &attr->op_flags : nullptr, out, context);
  if (ret == 0) ReturnAttr(AsSep(f)->info->tx_attr, attr);
  return ret;
}

int SepRxCtx(fid_ep* f, int index, fi_rx_attr* attr, fid_ep** out, void* context) {
  const int ret =
      OpenContext(f, index, Ep::kRx, attr != nullptr ? &attr->op_flags : nullptr, out, context);
  if (ret == 0) ReturnAttr(AsSep(f)->info->rx_attr, attr);
  return ret;
}

// Calls that need a context, not the scalable endpoint.
ssize_t NotOnSep(fid_t, void*) { return -FI_ENOSYS; }
int NoOpt(fid_t, int, int, void*, size_t*) { return -FI_ENOPROTOOPT; }
int NoSetOpt(fid_t, int, int, const void*, size_t) { return -FI_ENOPROTOOPT; }
ssize_t NoSizeLeft(fid_ep*) { return -FI_ENOSYS; }

fi_ops_ep g_sep_ops = {
    .size = sizeof(fi_ops_ep),
    .cancel = NotOnSep,
    .getopt = NoOpt,
    .setopt = NoSetOpt,
    .tx_ctx = SepTxCtx,
    .rx_ctx = SepRxCtx,
    .rx_size_left = NoSizeLeft,
    .tx_size_left = NoSizeLeft,
};

// fi_getname: the scalable endpoint's address, its contexts' base port
// (context i listens at port + i).
int SepGetName(fid_t f, void* addr, size_t* addrlen) {
  Sep* sep = AsSep(f);
  if (sep == nullptr) return BadFid(f, FI_CLASS_SEP);
  if (addrlen == nullptr) return -FI_EINVAL;
  DomainGuard g(sep->domain->lock);
  // Named before fi_enable: the run is taken first (another process may
  // hold the one it would try), once the AV that enabling needs is bound.
  // Without an AV the name is the run it will try first.
  if (sep->av != nullptr && !AnyEnabled(sep)) {
    if (int ret = EnableSlots(sep); ret != 0) return ret;
  }
  rdm::Address a;
  a.mac = sep->domain->dev->info().mac;
  a.ip = sep->loopback_name ? *sep->loopback_name : sep->domain->dev->info().ipv4;
  a.udp_port = sep->base_port;
  return PutName(a, addr, addrlen);
}

int NoSetName(fid_t, void*, size_t) { return -FI_ENOSYS; }  // src_addr at fi_scalable_ep
int NoGetPeer(fid_ep*, void*, size_t*) { return -FI_ENOSYS; }
int NoConnect(fid_ep*, const void*, const void*, size_t) { return -FI_ENOSYS; }
int NoListen(fid_pep*) { return -FI_ENOSYS; }
int NoAccept(fid_ep*, const void*, size_t) { return -FI_ENOSYS; }
int NoReject(fid_pep*, fid_t, const void*, size_t) { return -FI_ENOSYS; }
int NoShutdown(fid_ep*, uint64_t) { return -FI_ENOSYS; }
int NoJoin(fid_ep*, const void*, uint64_t, fid_mc**, void*) { return -FI_ENOSYS; }

fi_ops_cm g_sep_cm_ops = {
    .size = sizeof(fi_ops_cm),
    .setname = NoSetName,
    .getname = SepGetName,
    .getpeer = NoGetPeer,
    .connect = NoConnect,
    .listen = NoListen,
    .accept = NoAccept,
    .reject = NoReject,
    .shutdown = NoShutdown,
    .join = NoJoin,
};

// Puts slot on a queue of its own where the device gives one (lane.h).
void PlaceSlot(Domain* d, Ep* slot) {
  std::string why;
  std::shared_ptr<Lane> lane = OpenContextLane(*d->lane, d->lane->lock.thread_safe, &why);
  if (lane == nullptr) {
    BYPASS_FI_INFO(FI_LOG_EP_CTRL, "context %u of a scalable endpoint on %s: software "
                   "demultiplexing on the domain's queue, with the domain's lock (%s)\n",
                   slot->sep_index, d->uri.c_str(), why.c_str());
    return;
  }
  BYPASS_FI_INFO(FI_LOG_EP_CTRL, "context %u of a scalable endpoint on %s: its own queue (%s "
                 "queue %u)\n", slot->sep_index, d->uri.c_str(),
                 lane->open.get() == d->lane->open.get() ? "the device's" : "a new instance's",
                 lane->queue);
  slot->lane = std::move(lane);
  slot->lock = &slot->lane->lock;
}

size_t ContextCount(size_t asked) { return asked == 0 ? 1 : asked; }

// The engine endpoints of every slot at once (the first context's
// fi_enable), so that the run of ports is the scalable endpoint's before
// any context uses it. On a device whose ports the host shares, the run
// may be another process's: a base nobody named moves on. REQUIRES: the
// domain's lock.
int EnableSlots(Sep* sep) {
  for (int tries = 0;; ++tries) {
    int ret = 0;
    for (Ep* slot : sep->slots) {
      DomainGuard q(*slot->lock);
      ret = EnableEp(slot);
      if (ret != 0) break;
    }
    if (ret == 0) return 0;
    for (Ep* slot : sep->slots) {
      DomainGuard q(*slot->lock);
      if (Enabled(slot)) DisableEp(slot);
    }
    if (ret != -FI_EADDRINUSE) return ret;
    const uint16_t next = sep->port_given || tries == kPortTries
                              ? 0
                              : FreeRun(sep->domain, sep->base_port + 1u, sep->slots.size(), sep);
    if (next == 0) {
      BYPASS_FI_WARN(FI_LOG_EP_CTRL, "fi_enable: UDP ports %u..%zu of the scalable endpoint: one "
                     "is another process's%s\n", sep->base_port,
                     sep->base_port + sep->slots.size() - 1,
                     sep->port_given ? "; give it another src_addr" : ", and no free run is left");
      return ret;
    }
    SetBase(sep, next);
  }
}

}  // namespace

int CheckContextBind(const Ep* ctx, const fid* bfid, uint64_t flags) {
  const bool tx = ctx->side == Ep::kTx;
  if (bfid->fclass == FI_CLASS_CQ) {
    const uint64_t side = tx ? FI_TRANSMIT : FI_RECV;
    if ((flags & side) != 0 && (flags & ~(side | FI_SELECTIVE_COMPLETION)) == 0) return 0;
  } else if (bfid->fclass == FI_CLASS_CNTR) {
    const uint64_t side =
        tx ? (FI_SEND | FI_READ | FI_WRITE) : (FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE);
    if (flags != 0 && (flags & ~side) == 0) return 0;
  }
  BYPASS_FI_WARN(FI_LOG_EP_CTRL, "a %s context binds CQs (%s) and counters (%s) of its side; its "
                 "AV is its scalable endpoint's\n", tx ? "transmit" : "receive",
                 tx ? "FI_TRANSMIT" : "FI_RECV",
                 tx ? "FI_SEND, FI_READ, FI_WRITE" : "FI_RECV, FI_REMOTE_READ, FI_REMOTE_WRITE");
  return -FI_EINVAL;
}

int EnableContext(Ep* ctx) {
  if (ctx->side_enabled) return 0;
  Ep* slot = ctx->base;
  Sep* sep = slot->sep;
  const bool tx = ctx->side == Ep::kTx;
  const bool bound = tx ? (slot->cqs.tx != nullptr || slot->cntrs.send != nullptr)
                        : (slot->cqs.rx != nullptr || slot->cntrs.recv != nullptr);
  if (!bound) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, "fi_enable: bind a CQ or counter to the context first\n");
    return -FI_ENOCQ;
  }
  if (sep->av == nullptr) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, "fi_enable: bind an AV to the scalable endpoint first\n");
    return -FI_ENOAV;
  }
  if (!Enabled(slot)) {
    if (int ret = EnableSlots(sep); ret != 0) return ret;
  }
  ctx->side_enabled = true;
  return 0;
}

void CloseContext(Ep* ctx) {
  Ep* slot = ctx->base;
  DomainGuard q(*slot->lock);
  const bool tx = ctx->side == Ep::kTx;
  UnbindCompletions(slot, tx, !tx);
  slot->contexts[tx ? 0 : 1] = nullptr;
  slot->sep->obj.refs.fetch_sub(1);
}

int OpenSep(fid_domain* domain, fi_info* info, fid_ep** out, void* context) {
  Domain* d = AsDomain(domain);
  if (d == nullptr) return BadFid(domain, FI_CLASS_DOMAIN);
  if (info == nullptr || out == nullptr) return -FI_EINVAL;
  if (info->ep_attr != nullptr && info->ep_attr->type == FI_EP_DGRAM) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, "scalable endpoints are FI_EP_RDM only\n");
    return -FI_ENOSYS;
  }
  const size_t tx_cnt = ContextCount(info->ep_attr != nullptr ? info->ep_attr->tx_ctx_cnt : 0);
  const size_t rx_cnt = ContextCount(info->ep_attr != nullptr ? info->ep_attr->rx_ctx_cnt : 0);
  if (tx_cnt == FI_SHARED_CONTEXT || rx_cnt == FI_SHARED_CONTEXT) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, "a scalable endpoint has its own contexts, not shared ones\n");
    return -FI_EINVAL;
  }
  const size_t n = std::max(tx_cnt, rx_cnt);
  DomainGuard g(d->lock);
  if (d->eps.size() + n > d->ep_cnt) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, "%zu contexts would exceed the domain's ep_cnt (%zu, %zu "
                   "open): each context index is an endpoint\n", n, d->ep_cnt, d->eps.size());
    return -FI_EINVAL;
  }
  auto sep = std::make_unique<Sep>();
  std::memset(&sep->fid, 0, sizeof(sep->fid));
  sep->fid.fid.fclass = FI_CLASS_SEP;
  sep->fid.fid.context = context;
  sep->fid.fid.ops = &g_sep_fi_ops;
  sep->fid.ops = &g_sep_ops;
  sep->fid.cm = &g_sep_cm_ops;
  // Data calls on the scalable endpoint itself answer -FI_EINVAL (not an
  // endpoint: use a context).
  sep->fid.msg = &g_msg_ops;
  sep->fid.tagged = &g_tagged_ops;
  sep->fid.rma = &g_rma_ops;
  sep->fid.atomic = &g_atomic_ops;
  sep->fid.collective = &g_collective_ops;
  sep->domain = d;
  sep->tx_cnt = tx_cnt;
  sep->rx_cnt = rx_cnt;
  std::vector<std::unique_ptr<Ep>> slots(n);
  for (size_t i = 0; i < n; ++i) {
    if (int ret = NewEp(d, info, context, kMaxEpContexts, &slots[i]); ret != 0) return ret;
    slots[i]->sep = sep.get();
    slots[i]->sep_index = static_cast<uint32_t>(i);
  }
  sep->port_given = slots[0]->port_given;
  sep->loopback_name = slots[0]->loopback_name;
  const uint16_t base = sep->port_given ? slots[0]->udp_port
                                        : FreeRun(d, d->fabric->settings.base_port, n, sep.get());
  if (base == 0 || base + n > 65536u) return -FI_EADDRNOTAVAIL;
  if (FreeRun(d, base, n, sep.get()) != base) return -FI_EADDRINUSE;
  sep->info = DupInfo(info);
  if (sep->info == nullptr) return -FI_ENOMEM;
  for (std::unique_ptr<Ep>& s : slots) {
    s->port_given = true;  // the address scheme: base + index
    s->loopback_name = sep->loopback_name;
    PlaceSlot(d, s.get());
    d->eps.push_back(s.get());
    d->ep_count.store(d->eps.size(), std::memory_order_relaxed);
    d->obj.refs.fetch_add(1);
    sep->slots.push_back(s.release());
  }
  SetBase(sep.get(), base);
  d->obj.refs.fetch_add(1);
  BYPASS_FI_INFO(FI_LOG_EP_CTRL, "scalable endpoint on %s: %zu transmit, %zu receive contexts "
                 "at UDP ports %u..%zu\n", d->uri.c_str(), tx_cnt, rx_cnt, base, base + n - 1);
  *out = &sep.release()->fid;
  return 0;
}

}  // namespace bypass::fi
