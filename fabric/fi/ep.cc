// Endpoints: opening, binding, enabling (creating the engine endpoint),
// names, options, cancel, aliases and closing. The data-path calls are in
// ep_ops.cc.
#include "fabric/fi/ep.h"

#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "driver/clock.h"
#include "fabric/fi/address/address.h"
#include "fabric/fi/av.h"
#include "fabric/fi/cntr.h"
#include "fabric/fi/cq.h"
#include "fabric/fi/dgram.h"
#include "fabric/fi/domain.h"
#include "fabric/fi/engine_clock.h"
#include "fabric/fi/eq.h"
#include "fabric/fi/fabric.h"
#include "fabric/fi/info/info.h"
#include "fabric/fi/keys.h"
#include "fabric/fi/mcast.h"
#include "fabric/fi/mr.h"
#include "fabric/fi/msg_ep.h"
#include "fabric/fi/progress.h"
#include "fabric/fi/services.h"
#include "fabric/fi/shared_ctx.h"
#include "fabric/fi/tclass.h"
#include "fabric/fi/trigger.h"
#include "fabric/rdm/rdm.h"

namespace bypass::fi {
namespace {

uint16_t FreePort(const Domain* d, uint16_t base);
absl::Status CreateOnPort(Ep* ep);

constexpr uint64_t kBindFlags = FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION;
constexpr uint64_t kCntrBindFlags =
    FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;

// A CQ or counter that serves no endpoint any more takes the domain's
// lock again (the one it served may go with its queue).
template <class T>
void StopServing(T* obj, Ep* ep) {
  EraseOne(obj->eps, ep);
  if (obj->eps.empty()) obj->lock.store(&ep->domain->lock);
}

void Unbind(Ep* ep) {
  UnbindCompletions(ep, true, true);
  if (ep->av != nullptr) {
    ep->av->obj.refs.fetch_sub(1);
    EraseOne(ep->av->eps, ep);
    ep->av = nullptr;
  }
  if (ep->eq != nullptr) {
    ep->eq->obj.refs.fetch_sub(1);
    ep->eq = nullptr;
  }
}

// Before an endpoint goes, like TCP's TIME_WAIT: keep progressing until its
// own sends are acknowledged and nothing has arrived for FI_BYPASS_LINGER_MS, so the
// acknowledgements it owes get out and a peer that missed one (and
// retransmits) is answered; at most kLingerMaxNs. A peer whose last
// message was not acknowledged before we left would fail it after its
// peer timeout. Completions arriving meanwhile go to the CQs as usual.
void Linger(Ep* ep) {
  const uint64_t quiet_ns = ep->base->domain->fabric->settings.linger_quiet_ns;
  constexpr uint64_t kLingerMaxNs = 1'000'000'000;
  if (ep->peers.addr_of.empty()) return;  // never talked to anyone
  const driver::Clock& clock = driver::SteadyClock::Get();
  const uint64_t start = clock.NowNs();
  uint64_t last_rx = start;
  uint64_t rx_seen = ep->rdm->counters().rx_packets;
  for (;;) {
    ProgressEp(ep);
    const uint64_t now = clock.NowNs();
    if (ep->rdm->counters().rx_packets != rx_seen) {
      rx_seen = ep->rdm->counters().rx_packets;
      last_rx = now;
    }
    if (now - start >= kLingerMaxNs) return;
    if (now - last_rx < quiet_ns || ep->rdm->HasTxWork()) continue;
    bool pending = false;
    for (size_t i = 0; i < ep->peers.peer_of.size() && !pending; ++i) {
      std::optional<rdm::PeerStats> st = ep->rdm->peer_stats(ep->peers.peer_of[i]);
      pending = st && st->established && st->queued_ops > 0;
    }
    if (!pending) return;
  }
}

}  // namespace

void UnbindCompletions(Ep* ep, bool tx, bool rx) {
  EpCqs& q = ep->cqs;
  for (Cq** c : {tx ? &q.tx : nullptr, rx ? &q.rx : nullptr}) {
    if (c == nullptr || *c == nullptr) continue;
    Cq* cq = *c;
    *c = nullptr;
    cq->obj.refs.fetch_sub(1);
    if (q.tx != cq && q.rx != cq) StopServing(cq, ep);
  }
  EpCntrs& b = ep->cntrs;
  struct Side {
    Cntr** where;
    bool tx;
  } cntrs[] = {{&b.send, true},  {&b.recv, false},        {&b.read, true},
               {&b.write, true}, {&b.remote_read, false}, {&b.remote_write, false}};
  for (const Side& s : cntrs) {
    Cntr* c = *s.where;
    if (c == nullptr || !(s.tx ? tx : rx)) continue;
    *s.where = nullptr;
    c->obj.refs.fetch_sub(1);
    bool still = false;
    for (const Side& o : cntrs) still = still || *o.where == c;
    if (!still) StopServing(c, ep);
  }
}

int PutName(const rdm::Address& a, void* addr, size_t* addrlen) {
  const size_t given = *addrlen;
  *addrlen = kAddrLen;
  if (given < kAddrLen || addr == nullptr) return -FI_ETOOSMALL;
  const sockaddr_in s = ToSockaddr(a);
  std::memcpy(addr, &s, kAddrLen);
  return 0;
}

namespace {

int EpClose(fid* f) {
  Ep* ep = AsEp(f);
  if (ep == nullptr) return BadFid(f, FI_CLASS_EP);
  Domain* d = ep->base->domain;
  DomainGuard g(d->lock);
  if (ep->obj.refs.load() > 0) return -FI_EBUSY;
  if (ep->side != Ep::kWhole) {
    CloseContext(ep);
  } else if (ep->base != ep) {  // an alias
    ep->base->obj.refs.fetch_sub(1);
  } else {
    CloseEngineEp(ep);
  }
  ep->obj.magic = Obj::kDead;
  Retire(ep);
  return 0;
}

}  // namespace

void CloseEngineEp(Ep* ep) {
  Domain* d = ep->domain;
  if (ep->shares != nullptr) {  // a connection on its listener's port (msg_ep.h)
    MsgPort* last;
    {
      DomainGuard g(*ep->lock);
      last = LeaveSharedPort(ep);
      Unbind(ep);
      ep->rdm.reset();
      FreeMsg(ep);
      ep->records.Release();
    }
    ep->shares = nullptr;
    ep->lock = &d->lock;
    ep->lane.reset();
    EraseOne(d->eps, ep);
    d->ep_count.store(d->eps.size(), std::memory_order_relaxed);
    d->obj.refs.fetch_sub(1);
    CloseSharedPort(last);
    return;
  }
  {
    DomainGuard g(*ep->lock);
    for (Mr* mr : d->mrs) {
      for (Ep* r : mr->registered) {
        if (r == ep) {
          DeregisterMrFromEp(mr, ep);
          break;
        }
      }
    }
    CloseMsg(ep);  // a connected peer is told (FI_SHUTDOWN there) during the linger
    if (ep->rdm != nullptr) {
      Linger(ep);
      rdm::Port& port = *ep->lane->port;
      driver::QueuePair& qp = port.qp();
      BYPASS_FI_INFO(FI_LOG_EP_CTRL, "closing %s: %s; pool %u/%u free; port rx %llu, no_endpoint %llu, inbox_full %llu; send ops %u, recvs %u; queue %u rx %llu tx %llu rx_dropped %llu tx_full %llu; link %s\n",
                     ep->rdm->address().ToString().c_str(), ep->rdm->counters().ToString().c_str(),
                     qp.PoolAvailable(), qp.PoolCapacity(),
                     static_cast<unsigned long long>(port.counters().rx_packets),
                     static_cast<unsigned long long>(port.counters().no_endpoint),
                     static_cast<unsigned long long>(port.counters().inbox_full),
                     ep->config.max_send_ops, ep->config.max_posted_recvs, ep->lane->queue,
                     static_cast<unsigned long long>(qp.stats().rx_packets),
                     static_cast<unsigned long long>(qp.stats().tx_packets),
                     static_cast<unsigned long long>(qp.stats().rx_dropped),
                     static_cast<unsigned long long>(qp.stats().tx_ring_full),
                     ep->lane->dev->link_state() == driver::LinkState::kUp ? "up" : "down");
    }
    const bool claimed = Enabled(ep);
    CloseDgram(ep);
    Unbind(ep);
    ep->rdm.reset();  // detaches from the port; operations in flight are dropped
    FreeMsg(ep);
    UnbindSharedContexts(ep);  // after the engine left the shared receive queue
    ep->drain.reset();
    ep->records.Release();
    if (claimed) ReleasePort(*ep->lane, ep->udp_port);
  }
  ep->lock = &d->lock;
  ep->lane.reset();  // a slot's own queue closes (its lock with it)
  EraseOne(d->eps, ep);
  d->ep_count.store(d->eps.size(), std::memory_order_relaxed);
  d->obj.refs.fetch_sub(1);
}

namespace {

// Whether a CQ or counter serving eps under `lock` can serve ep too: a read
// progresses every endpoint it serves under that one lock, so they must
// share it (a scalable endpoint's contexts on their own queues each have
// their own: bind each its own CQs, fi_scalable_ep(3) says each context
// has its own completion queue).
bool ServesLock(const std::vector<Ep*>& eps, const DomainLock* lock, const Ep* ep) {
  for (const Ep* e : eps) {
    if (e != ep && lock != ep->lock) {
      BYPASS_FI_WARN(FI_LOG_EP_CTRL, "a CQ or counter of a context of a scalable endpoint on "
                     "its own queue serves only endpoints on that queue (its transmit and receive "
                     "contexts of one index); open one per context\n");
      return false;
    }
  }
  return true;
}

int BindCq(Ep* ep, Cq* cq, uint64_t flags) {
  if ((flags & ~kBindFlags) != 0) return -FI_EBADFLAGS;
  if (!(flags & (FI_TRANSMIT | FI_RECV))) return -FI_EINVAL;
  EpCqs& b = ep->cqs;
  if ((flags & FI_TRANSMIT) && b.tx != nullptr) return -FI_EINVAL;
  if ((flags & FI_RECV) && b.rx != nullptr) return -FI_EINVAL;
  if (!ServesLock(cq->eps, cq->lock.load(), ep)) return -FI_EINVAL;
  const bool already = b.tx == cq || b.rx == cq;
  cq->lock.store(ep->lock);
  if (flags & FI_TRANSMIT) {
    b.tx = cq;
    b.tx_selective = (flags & FI_SELECTIVE_COMPLETION) != 0;
    cq->obj.refs.fetch_add(1);
  }
  if (flags & FI_RECV) {
    b.rx = cq;
    b.rx_selective = (flags & FI_SELECTIVE_COMPLETION) != 0;
    cq->obj.refs.fetch_add(1);
  }
  if (!already) cq->eps.push_back(ep);
  return 0;
}

int BindCntr(Ep* ep, Cntr* c, uint64_t flags) {
  if (flags == 0) return -FI_EINVAL;
  if ((flags & ~kCntrBindFlags) != 0) return -FI_EBADFLAGS;
  EpCntrs& b = ep->cntrs;
  const bool already = b.send == c || b.recv == c || b.read == c || b.write == c ||
                       b.remote_read == c || b.remote_write == c;
  struct Slot {
    uint64_t flag;
    Cntr** where;
  } slots[] = {{FI_SEND, &b.send},
               {FI_RECV, &b.recv},
               {FI_READ, &b.read},
               {FI_WRITE, &b.write},
               {FI_REMOTE_READ, &b.remote_read},
               {FI_REMOTE_WRITE, &b.remote_write}};
  for (const Slot& s : slots) {
    if ((flags & s.flag) && *s.where != nullptr) return -FI_EINVAL;
  }
  if (!ServesLock(c->eps, c->lock.load(), ep)) return -FI_EINVAL;
  c->lock.store(ep->lock);
  for (const Slot& s : slots) {
    if (!(flags & s.flag)) continue;
    *s.where = c;
    c->obj.refs.fetch_add(1);
  }
  if (!already) c->eps.push_back(ep);
  return 0;
}

int EpBind(fid* f, fid* bfid, uint64_t flags) {
  Ep* ep = AsEp(f);
  if (ep == nullptr) return BadFid(f, FI_CLASS_EP);
  if (bfid == nullptr) return -FI_EINVAL;
  Ep* const handle = ep;
  if (ep->side != Ep::kWhole) {
    // A context binds its CQs and counters to its side of its slot.
    if (int ret = CheckContextBind(ep, bfid, flags); ret != 0) return ret;
    ep = ep->base;
  } else if (ep->base != ep) {
    return -FI_EINVAL;  // bind the endpoint, not an alias
  }
  Domain* d = ep->domain;
  DomainGuard g(d->lock);
  DomainGuard q(*ep->lock);  // a slot's other context may be in use
  const bool enabled = handle->side != Ep::kWhole ? handle->side_enabled : Enabled(ep);
  if (enabled && bfid->fclass != FI_CLASS_MR) return -FI_EOPBADSTATE;  // enabled
  switch (bfid->fclass) {
    case FI_CLASS_CQ: {
      Cq* cq = AsCq(bfid);
      if (cq == nullptr) return -FI_EBADF;
      if (cq->domain != d) return -FI_EINVAL;
      return BindCq(ep, cq, flags);
    }
    case FI_CLASS_CNTR: {
      Cntr* c = AsCntr(bfid);
      if (c == nullptr) return -FI_EBADF;
      if (c->domain != d) return -FI_EINVAL;
      return BindCntr(ep, c, flags);
    }
    case FI_CLASS_AV: {
      Av* av = AsAv(bfid);
      if (av == nullptr) return -FI_EBADF;
      if (av->domain != d || ep->av != nullptr) return -FI_EINVAL;
      if (ep->type == FI_EP_MSG) return -FI_EINVAL;  // its one peer is the connection's
      if (flags != 0) return -FI_EBADFLAGS;
      ep->av = av;
      av->eps.push_back(ep);
      av->obj.refs.fetch_add(1);
      return 0;
    }
    case FI_CLASS_SRX_CTX:
    case FI_CLASS_STX_CTX:
      return BindSharedContext(ep, bfid, flags);
    case FI_CLASS_EQ: {
      Eq* eq = AsEq(bfid);
      if (eq == nullptr) return -FI_EBADF;
      if (ep->eq != nullptr) return -FI_EINVAL;
      if (flags != 0) return -FI_EBADFLAGS;
      ep->eq = eq;
      eq->obj.refs.fetch_add(1);
      return 0;
    }
    default:
      return -FI_EINVAL;
  }
}

// Ports tried at fi_enable past one another process holds.
constexpr int kPortTries = 4096;

absl::Status CreateEngineEndpoint(Ep* ep) {
  // Another domain's endpoint on the same device (lane.h) may have the port.
  if (absl::Status s = ClaimPort(*ep->lane, ep->udp_port); !s.ok()) return s;
  absl::Status made = CreateOnPort(ep);
  if (!made.ok()) ReleasePort(*ep->lane, ep->udp_port);
  return made;
}

absl::Status CreateOnPort(Ep* ep) {
  if (ep->type == FI_EP_DGRAM) {
    absl::StatusOr<std::unique_ptr<rdm::DatagramEndpoint>> r = CreateDgram(ep);
    if (r.ok()) ep->dgram = *std::move(r);
    return r.status();
  }
  absl::StatusOr<std::unique_ptr<rdm::Endpoint>> r =
      rdm::Endpoint::Create(*ep->lane->port, EngineClock(), ep->config);
  if (r.ok()) ep->rdm = *std::move(r);
  return r.status();
}

}  // namespace

void DisableEp(Ep* ep) {
  for (Mr* mr : ep->domain->mrs) EraseOne(mr->registered, ep);
  ReleasePort(*ep->lane, ep->udp_port);
  ep->rdm.reset();
  ep->dgram.reset();
  ep->drain.reset();
  ep->records.Release();
  ep->peers = PeerMap();
}

int EnableEp(Ep* ep) {
  if (Enabled(ep)) return 0;
  if (ep->av == nullptr && ep->type != FI_EP_MSG) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, "fi_enable: bind an AV to the RDM endpoint first\n");
    return -FI_ENOAV;
  }
  const EpCntrs& n = ep->cntrs;
  // Any counter will do: an RMA target may count remote writes and nothing
  // else. A slot of a scalable endpoint is enabled with its first context
  // (its contexts bind their CQs, sep.cc).
  if (ep->sep == nullptr && ep->cqs.tx == nullptr && ep->cqs.rx == nullptr &&
      n.send == nullptr && n.recv == nullptr && n.read == nullptr && n.write == nullptr &&
      n.remote_read == nullptr && n.remote_write == nullptr) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, "fi_enable: bind a CQ or counter first\n");
    return -FI_ENOCQ;
  }
  if ((ep->shared_rx && ep->srx == nullptr) || (ep->shared_tx && ep->stx == nullptr)) {
    const bool rx = ep->shared_rx && ep->srx == nullptr;
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, "fi_enable: the endpoint was opened with FI_SHARED_CONTEXT: "
                   "bind its shared %s context first\n", rx ? "receive" : "transmit");
    return -FI_EOPBADSTATE;
  }
  if (ep->shares != nullptr) return EnableSharedMsg(ep);  // on its listener's port
  ep->config.shared_recv = ep->srx != nullptr ? ep->srx->queue.get() : nullptr;
  Domain* d = ep->domain;
  ep->config.unexpected_pool = d->unexpected.get();
  const uint16_t first_port = ep->udp_port;
  absl::Status made = CreateEngineEndpoint(ep);
  // On a device whose ports the host shares (kernel UDP, intra-host), a
  // port no endpoint of this domain has may belong to another process: a
  // port the application did not name moves on to the next free one.
  for (int tries = 0; !made.ok() && absl::IsAlreadyExists(made) && !ep->port_given &&
                      tries < kPortTries;
       ++tries) {
    const uint16_t next = FreePort(d, static_cast<uint16_t>(ep->udp_port + 1));
    if (next == 0) break;
    ep->udp_port = next;
    ep->config.udp_port = next;
    made = CreateEngineEndpoint(ep);
  }
  if (made.ok() && ep->udp_port != first_port) {
    BYPASS_FI_INFO(FI_LOG_EP_CTRL, "fi_enable: UDP port %u is another process's; the endpoint takes %u\n",
                   first_port, ep->udp_port);
  }
  if (!made.ok()) {
    // A scalable endpoint's slot whose port is taken moves with its run
    // (sep.cc EnableSlots, which says so if it cannot).
    if (ep->sep == nullptr || !absl::IsAlreadyExists(made)) {
      BYPASS_FI_WARN(FI_LOG_EP_CTRL, "fi_enable: %s\n", std::string(made.message()).c_str());
    }
    return FromStatus(made);
  }
  ep->drain = std::make_unique<DrainBuffers>();
  auto fail = [ep](int ret) {
    DisableEp(ep);
    return ret;
  };
  if (ep->dscp && ep->rdm != nullptr) {
    if (absl::Status s = ep->rdm->SetDscp(*ep->dscp); !s.ok()) {
      BYPASS_FI_WARN(FI_LOG_EP_CTRL, "fi_enable: DSCP %u: %s\n", *ep->dscp,
                     std::string(s.message()).c_str());
      return fail(FromStatus(s));
    }
  }
  if (ep->min_multi_recv_set && ep->rdm != nullptr) ep->rdm->SetMinMultiRecv(ep->min_multi_recv);
  for (fi_addr_t fa = 0; ep->av != nullptr && fa < ep->av->addrs.size(); ++fa) {
    if (!ep->av->addrs[fa]) continue;
    if (int ret = AddPeerToEp(ep, fa, *ep->av->addrs[fa]); ret != 0) return fail(ret);
  }
  for (Mr* mr : ep->rdm != nullptr ? d->mrs : std::vector<Mr*>{}) {  // no RMA on datagrams
    const bool remote = (mr->access & (FI_REMOTE_READ | FI_REMOTE_WRITE)) != 0;
    const bool mine = (d->mr_mode & FI_MR_ENDPOINT) ? mr->bound == ep && mr->enabled : mr->enabled;
    if (!remote || !mine) continue;
    if (int ret = RegisterMrWithEp(mr, ep); ret != 0) {
      for (Mr* m : d->mrs) EraseOne(m->registered, ep);
      return fail(ret);
    }
  }
  ep->records.Init(ep->config.max_send_ops + ep->config.max_posted_recvs);
  if (ep->msg != nullptr) {
    if (int ret = EnableMsg(ep); ret != 0) return fail(ret);
  }
  const rdm::Address self = ep->rdm != nullptr ? ep->rdm->address() : ep->dgram->address();
  BYPASS_FI_INFO(FI_LOG_EP_CTRL, "%s endpoint %s enabled on %s queue %u\n",
                 ep->rdm != nullptr ? "RDM" : "datagram", self.ToString().c_str(), d->uri.c_str(),
                 ep->lane->queue);
  return 0;
}

namespace {

int Alias(Ep* ep, struct fi_alias* a) {
  if (a == nullptr || a->fid == nullptr) return -FI_EINVAL;
  const uint64_t side = a->flags & (FI_TRANSMIT | FI_RECV);
  if (side != FI_TRANSMIT && side != FI_RECV) {
    // fi_endpoint(3): "must include FI_TRANSMIT or FI_RECV (not both)".
    BYPASS_FI_WARN(FI_LOG_EP_CTRL,
                   "fi_ep_alias: flags take FI_TRANSMIT or FI_RECV, not %s\n",
                   side == 0 ? "neither" : "both");
    return -FI_EINVAL;
  }
  Ep* base = ep->base;
  auto alias = std::make_unique<Ep>();
  alias->fid = base->fid;  // the same ops tables
  alias->fid.fid.context = base->fid.fid.context;
  alias->base = base;
  alias->tx_op_flags = base->tx_op_flags;
  alias->rx_op_flags = base->rx_op_flags;
  const uint64_t op = a->flags & ~static_cast<uint64_t>(FI_TRANSMIT | FI_RECV);
  if (a->flags & FI_TRANSMIT) alias->tx_op_flags = op;
  if (a->flags & FI_RECV) alias->rx_op_flags = op;
  base->obj.refs.fetch_add(1);
  *a->fid = &alias.release()->fid.fid;
  return 0;
}

int EpControl(fid* f, int command, void* arg) {
  Ep* ep = AsEp(f);
  if (ep == nullptr) return BadFid(f, FI_CLASS_EP);
  DomainGuard g(ep->base->domain->lock);
  DomainGuard q(*ep->base->lock);
  switch (command) {
    case FI_ENABLE:
      if (ep->side != Ep::kWhole) return EnableContext(ep);
      if (ep->base != ep) return -FI_EINVAL;
      return EnableEp(ep);
    case FI_GETOPSFLAG: {
      auto* flags = static_cast<uint64_t*>(arg);
      if (flags == nullptr) return -FI_EINVAL;
      if ((*flags & FI_TRANSMIT) && (*flags & FI_RECV)) return -FI_EINVAL;
      if (*flags & FI_TRANSMIT) {
        *flags = ep->tx_op_flags | FI_TRANSMIT;
      } else if (*flags & FI_RECV) {
        *flags = ep->rx_op_flags | FI_RECV;
      } else {
        return -FI_EINVAL;
      }
      return 0;
    }
    case FI_SETOPSFLAG: {
      auto* flags = static_cast<uint64_t*>(arg);
      if (flags == nullptr) return -FI_EINVAL;
      const uint64_t op = *flags & ~static_cast<uint64_t>(FI_TRANSMIT | FI_RECV);
      if (!(*flags & (FI_TRANSMIT | FI_RECV))) return -FI_EINVAL;
      if (*flags & FI_TRANSMIT) ep->tx_op_flags = op;
      if (*flags & FI_RECV) ep->rx_op_flags = op;
      return 0;
    }
    case FI_ALIAS:
      if (ep->side != Ep::kWhole) return -FI_ENOSYS;  // no aliases of contexts
      return Alias(ep, static_cast<struct fi_alias*>(arg));
    default:
      return -FI_ENOSYS;
  }
}

fi_ops g_ep_fi_ops = {
    .size = sizeof(fi_ops),
    .close = EpClose,
    .bind = EpBind,
    .control = EpControl,
    .ops_open = NoSysOpsOpen,
    .tostr = NoSysTostr,
    .ops_set = NoSysOpsSet,
};

ssize_t EpCancel(fid_t f, void* context) {
  Ep* ep = AsEp(f);
  if (ep == nullptr) return BadFid(f, FI_CLASS_EP);
  ep = ep->base;
  if (context != nullptr && CancelTriggered(ep, context)) return 0;  // trigger.h
  if (ep->srx != nullptr && Enabled(ep)) return CancelSharedRecv(ep->srx, context);
  DomainGuard g(*ep->lock);
  if (!Enabled(ep)) return -FI_EOPBADSTATE;
  // A connection on its listener's port cancels a receive of its own peer
  // only (another connection may use the same context).
  rdm::PeerId only = rdm::kAnyPeer;
  if (ep->shares != nullptr) ep->peers.Find(0, &only);
  const auto cancel = [ep, only](void* ctx) {
    return ep->dgram != nullptr ? ep->dgram->CancelRecv(ctx) : ep->rdm->CancelRecv(ctx, only);
  };
  // A receive posted with a record is known to the engine by the record.
  for (OpRecord& r : ep->records.slots) {
    if (r.user_context == context && context != nullptr && cancel(&r)) return 0;
  }
  return cancel(context) ? 0 : -FI_ENOENT;
}

// An option the endpoint does not have (fi_endpoint(3) lists them all):
// FI_OPT_BUFFERED_MIN/LIMIT belong to FI_BUFFERED_RECV endpoints;
// FI_OPT_SEND/RECV_BUF_SIZE and TX/RX_SIZE are socket buffer sizes (the
// sizes here are tx_attr/rx_attr's); FI_OPT_CM_DATA_SIZE is a
// connected endpoint's.
int NoOption(int optname) {
  BYPASS_FI_WARN(FI_LOG_EP_CTRL,
                 "endpoint option %d is not supported (FI_OPT_MIN_MULTI_RECV, "
                 "FI_OPT_FI_HMEM_P2P and, to fi_getopt, FI_OPT_XPU_TRIGGER are)\n",
                 optname);
  return -FI_ENOPROTOOPT;
}

// Copies a value of type T out for fi_getopt (-FI_ETOOSMALL with the size
// when *optlen is short).
template <class T>
int GetValue(T v, void* optval, size_t* optlen) {
  if (*optlen < sizeof(T)) {
    *optlen = sizeof(T);
    return -FI_ETOOSMALL;
  }
  std::memcpy(optval, &v, sizeof(v));
  *optlen = sizeof(T);
  return 0;
}

int EpGetopt(fid_t f, int level, int optname, void* optval, size_t* optlen) {
  Ep* ep = AsEp(f);
  if (ep == nullptr) return BadFid(f, FI_CLASS_EP);
  ep = ep->base;
  if (optval == nullptr || optlen == nullptr) return -FI_EINVAL;
  if (level != FI_OPT_ENDPOINT) return -FI_ENOPROTOOPT;
  DomainGuard g(*ep->lock);
  switch (optname) {
    case FI_OPT_MIN_MULTI_RECV:
      return GetValue(ep->rdm != nullptr ? ep->rdm->min_multi_recv()
                                         : static_cast<size_t>(ep->config.min_multi_recv),
                      optval, optlen);
    case FI_OPT_FI_HMEM_P2P:
      return GetValue(ep->hmem_p2p, optval, optlen);
    case FI_OPT_XPU_TRIGGER:
      // No device (HMEM) memory here, so no XPU can trigger (fi_endpoint(3)).
      return -FI_EOPNOTSUPP;
    case FI_OPT_BUFFERED_LIMIT:
    case FI_OPT_BUFFERED_MIN:
      if (ep->buffered == nullptr) return NoOption(optname);
      return GetBufferedOpt(ep, optname, optval, optlen);
    default:
      return NoOption(optname);
  }
}

int EpSetopt(fid_t f, int level, int optname, const void* optval, size_t optlen) {
  Ep* ep = AsEp(f);
  if (ep == nullptr) return BadFid(f, FI_CLASS_EP);
  ep = ep->base;
  if (optval == nullptr) return -FI_EINVAL;
  if (level != FI_OPT_ENDPOINT) return -FI_ENOPROTOOPT;
  if (optname == FI_OPT_FI_HMEM_P2P) {
    if (optlen != sizeof(int)) return -FI_EINVAL;
    int mode;
    std::memcpy(&mode, optval, sizeof(mode));
    if (mode == FI_HMEM_P2P_REQUIRED) {
      // Only system memory: no transfer can be peer to peer.
      BYPASS_FI_WARN(FI_LOG_EP_CTRL,
                     "FI_OPT_FI_HMEM_P2P: FI_HMEM_P2P_REQUIRED cannot hold (system memory "
                     "only); ENABLED, PREFERRED and DISABLED are accepted\n");
      return -FI_EOPNOTSUPP;
    }
    if (mode != FI_HMEM_P2P_ENABLED && mode != FI_HMEM_P2P_PREFERRED &&
        mode != FI_HMEM_P2P_DISABLED) {
      return -FI_EINVAL;
    }
    DomainGuard g(*ep->lock);
    ep->hmem_p2p = mode;
    return 0;
  }
  if (optname == FI_OPT_XPU_TRIGGER) return -FI_EINVAL;  // fi_getopt only (fi_endpoint(3))
  if ((optname == FI_OPT_BUFFERED_LIMIT || optname == FI_OPT_BUFFERED_MIN) &&
      ep->buffered != nullptr) {
    DomainGuard g(*ep->lock);
    return SetBufferedOpt(ep, optname, optval, optlen);
  }
  if (optname != FI_OPT_MIN_MULTI_RECV) return NoOption(optname);
  if (optlen != sizeof(size_t)) return -FI_EINVAL;
  DomainGuard g(*ep->lock);
  size_t v;
  std::memcpy(&v, optval, sizeof(v));
  ep->min_multi_recv = v;
  ep->min_multi_recv_set = true;
  ep->config.min_multi_recv = v;
  if (ep->rdm != nullptr) ep->rdm->SetMinMultiRecv(v);
  return 0;
}

// fi_tx_context / fi_rx_context on an endpoint that is not scalable (sep.cc
// has the scalable endpoint's).
int NoCtx(fid_ep*, int, fi_tx_attr*, fid_ep**, void*) { return -FI_ENOSYS; }
int NoRxCtx(fid_ep*, int, fi_rx_attr*, fid_ep**, void*) { return -FI_ENOSYS; }

ssize_t RxSizeLeft(fid_ep* f) {
  Ep* ep = AsEp(f);
  if (ep == nullptr) return BadFid(f, FI_CLASS_EP);
  ep = ep->base;
  DomainGuard g(*ep->lock);
  if (ep->dgram != nullptr) return ep->dgram->RecvSlotsFree();
  if (ep->rdm == nullptr) return -FI_EOPBADSTATE;
  return ep->rdm->RecvSlotsFree();
}

ssize_t TxSizeLeft(fid_ep* f) {
  Ep* ep = AsEp(f);
  if (ep == nullptr) return BadFid(f, FI_CLASS_EP);
  ep = ep->base;
  DomainGuard g(*ep->lock);
  if (ep->dgram != nullptr) return ep->cqs.tx != nullptr ? ep->cqs.tx->room() : 1;
  if (ep->rdm == nullptr) return -FI_EOPBADSTATE;
  const size_t left = ep->rdm->SendSlotsFree();
  return ep->stx != nullptr ? std::min(left, ep->stx->size - ep->stx->outstanding) : left;
}

fi_ops_ep g_ep_ops = {
    .size = sizeof(fi_ops_ep),
    .cancel = EpCancel,
    .getopt = EpGetopt,
    .setopt = EpSetopt,
    .tx_ctx = NoCtx,
    .rx_ctx = NoRxCtx,
    .rx_size_left = RxSizeLeft,
    .tx_size_left = TxSizeLeft,
};

// ---- names ----

int GetName(fid_t f, void* addr, size_t* addrlen) {
  Ep* ep = AsEp(f);
  if (ep == nullptr) return BadFid(f, FI_CLASS_EP);
  ep = ep->base;
  if (addrlen == nullptr) return -FI_EINVAL;
  DomainGuard g(*ep->lock);
  rdm::Address a;
  if (ep->rdm != nullptr) {
    a = ep->rdm->address();
  } else {
    a.mac = ep->domain->dev->info().mac;
    a.ip = ep->domain->dev->info().ipv4;
    a.udp_port = ep->udp_port;
  }
  if (ep->base->loopback_name) a.ip = *ep->base->loopback_name;
  return PutName(a, addr, addrlen);
}

int SetName(fid_t f, void* addr, size_t addrlen) {
  Ep* ep = AsEp(f);
  if (ep == nullptr) return BadFid(f, FI_CLASS_EP);
  if (ep->side != Ep::kWhole) return -FI_EINVAL;  // a context's address is its slot's
  ep = ep->base;
  std::optional<rdm::Address> a = FromSockaddr(addr, addrlen);
  if (!a || addrlen != kAddrLen) return -FI_EINVAL;
  DomainGuard g(ep->domain->lock);
  if (Enabled(ep)) return -FI_EOPBADSTATE;  // before fi_enable only
  const driver::DeviceInfo& info = ep->domain->dev->info();
  const std::optional<driver::Ipv4Address> loopback = LoopbackName(ep->domain, *a);
  *a = LocalToDevice(ep->domain, *a);  // 127.0.0.1 names a device with the host's address
  if (a->ip.value != 0 && !(a->ip == info.ipv4)) return -FI_EADDRNOTAVAIL;
  for (Ep* other : ep->domain->eps) {
    if (other != ep && other->udp_port == a->udp_port) return -FI_EADDRINUSE;
  }
  ep->udp_port = a->udp_port;
  ep->config.udp_port = a->udp_port;
  ep->port_given = true;
  ep->loopback_name = loopback;
  return 0;
}

int GetPeer(fid_ep*, void*, size_t*) { return -FI_ENOSYS; }
int Connect(fid_ep*, const void*, const void*, size_t) { return -FI_ENOSYS; }
int Listen(fid_pep*) { return -FI_ENOSYS; }
int Accept(fid_ep*, const void*, size_t) { return -FI_ENOSYS; }
int Reject(fid_pep*, fid_t, const void*, size_t) { return -FI_ENOSYS; }
int Shutdown(fid_ep*, uint64_t) { return -FI_ENOSYS; }

fi_ops_cm g_cm_ops = {
    .size = sizeof(fi_ops_cm),
    .setname = SetName,
    .getname = GetName,
    .getpeer = GetPeer,
    .connect = Connect,
    .listen = Listen,
    .accept = Accept,
    .reject = Reject,
    .shutdown = Shutdown,
    .join = JoinGroup,  // mcast.h
};

// The DSCP of the endpoint's traffic class (tclass.h): tx_attr's, else
// the domain's; none for FI_TC_UNSPEC in both.
int TclassDscp(const fi_info* info, std::optional<uint8_t>* out) {
  const uint32_t ep_tc = info->tx_attr != nullptr ? info->tx_attr->tclass : uint32_t{FI_TC_UNSPEC};
  const uint32_t tc = ep_tc != FI_TC_UNSPEC || info->domain_attr == nullptr
                          ? ep_tc
                          : info->domain_attr->tclass;
  bool bad = false;
  *out = DscpOfTclass(tc, &bad);
  if (!bad) return 0;
  BYPASS_FI_WARN(FI_LOG_EP_CTRL, "tclass 0x%x is no traffic class: FI_TC_* or fi_tc_dscp_set(0..63)\n",
                 tc);
  return -FI_EINVAL;
}

// A UDP port no endpoint of the domain has, from the base port up.
uint16_t FreePort(const Domain* d, uint16_t base) {
  for (uint32_t p = base; p < 65536; ++p) {
    bool used = false;
    for (const Ep* e : d->eps) used = used || e->udp_port == p;
    if (!used) return static_cast<uint16_t>(p);
  }
  return 0;
}

// The first attribute of info beyond what an endpoint of this domain has
// (fabric/fi/info offers these limits), or null. fi_getinfo's own entries
// never exceed them; an application that raises one by hand is told which.
const char* AttrBeyondLimits(const fi_info* info, const rdm::EndpointConfig& c, fi_ep_type type,
                             size_t max_ctx) {
  if (const fi_tx_attr* tx = info->tx_attr; tx != nullptr) {
    if (tx->iov_limit > kMsgIovLimit) return "tx_attr->iov_limit";
    if (tx->rma_iov_limit > kIovLimit) return "tx_attr->rma_iov_limit";
    if (type != FI_EP_DGRAM && tx->inject_size > c.inject_size) return "tx_attr->inject_size";
  }
  if (info->rx_attr != nullptr && info->rx_attr->iov_limit > kMsgIovLimit) {
    return "rx_attr->iov_limit";
  }
  if (const fi_ep_attr* ep = info->ep_attr; ep != nullptr) {
    if (type != FI_EP_DGRAM && ep->max_msg_size > c.max_msg_size) return "ep_attr->max_msg_size";
    // One context each way (a scalable endpoint: max_ep_tx_ctx, sep.h), or
    // a shared one (FI_EP_RDM, shared_ctx.h).
    const bool rdm = type != FI_EP_DGRAM;
    if (ep->tx_ctx_cnt > max_ctx && !(rdm && ep->tx_ctx_cnt == FI_SHARED_CONTEXT)) {
      return "ep_attr->tx_ctx_cnt";
    }
    if (ep->rx_ctx_cnt > max_ctx && !(rdm && ep->rx_ctx_cnt == FI_SHARED_CONTEXT)) {
      return "ep_attr->rx_ctx_cnt";
    }
  }
  return nullptr;
}

}  // namespace

void FinishBeforeRemove(Ep* ep, fi_addr_t fa) {
  DomainGuard g(*ep->lock);
  PeerMap& m = ep->peers;
  if (fa < m.late_error.size()) m.late_error[fa] = false;
  if (fa < m.av_addr.size()) m.av_addr[fa].reset();
  const int bits = ep->av != nullptr ? ep->av->rx_ctx_bits : 0;
  for (auto it = m.named.begin(); it != m.named.end();) {
    auto here = it++;
    if ((here->first & RxIndexMask(bits)) != fa) continue;
    if (ep->rdm != nullptr) (void)ep->rdm->RemovePeer(here->second);  // its operations fail
    if (here->second.slot() < m.addr_of.size()) m.addr_of[here->second.slot()] = FI_ADDR_NOTAVAIL;
    m.named.erase(here);
  }
  rdm::PeerId p;
  if (ep->rdm == nullptr || !m.Find(fa, &p)) return;
  // The ACK still owed for the peer's last messages goes out in the
  // engine's RemovePeer (rdm::Endpoint::RemovePeer flushes it first).
  const driver::Clock& clock = driver::SteadyClock::Get();
  if (fa >= m.buffered.size() || !m.buffered[fa]) return;
  m.buffered[fa] = false;
  // Progress until the peer's operations are acknowledged, or the engine
  // fails them (a dead peer times out after peer_timeout; their failures
  // are then reported as failures after completion, progress.cc).
  const uint64_t deadline = clock.NowNs() + ep->config.peer_timeout_ns + 1'000'000'000;
  for (;;) {
    const std::optional<rdm::PeerStats> st = ep->rdm->peer_stats(p);
    if (!st || st->queued_ops + st->waiting_ops == 0 || clock.NowNs() >= deadline) return;
    ProgressEp(ep);
  }
}

bool FindPeer(Ep* ep, fi_addr_t fa, rdm::PeerId* out) {
  const int bits = ep->av != nullptr ? ep->av->rx_ctx_bits : 0;
  if (bits == 0 || fa == FI_ADDR_UNSPEC || (fa & RxIndexMask(bits)) == fa) {
    return FindEntryPeer(ep, fa, out);
  }
  PeerMap& m = ep->peers;
  if (auto it = m.named.find(fa); it != m.named.end()) {
    *out = it->second;
    return true;
  }
  const fi_addr_t entry = fa & RxIndexMask(bits);
  const uint64_t index = fa >> (64 - bits);
  if (ep->rdm == nullptr || entry >= m.av_addr.size() || !m.av_addr[entry] ||
      m.av_addr[entry]->udp_port + index > 65535) {
    return false;
  }
  rdm::Address a = *m.av_addr[entry];
  a.udp_port = static_cast<uint16_t>(a.udp_port + index);
  absl::StatusOr<rdm::PeerId> p = ep->rdm->InsertPeer(a);
  if (!p.ok()) {
    BYPASS_FI_WARN(FI_LOG_AV, "receive context %llu of fi_addr %llu: %s\n",
                   static_cast<unsigned long long>(index), static_cast<unsigned long long>(entry),
                   std::string(p.status().message()).c_str());
    return false;
  }
  m.named[fa] = *p;
  const uint32_t slot = p->slot();
  if (m.addr_of.size() <= slot) m.addr_of.resize(slot + 1, FI_ADDR_NOTAVAIL);
  if (m.addr_of[slot] == FI_ADDR_NOTAVAIL) m.addr_of[slot] = fa;  // its messages' source
  *out = *p;
  return true;
}

fi_addr_t SourceOf(Ep* ep, rdm::PeerId p) {
  PeerMap& m = ep->peers;
  const fi_addr_t fa = AddrOfPeer(ep, p);  // a named AV's entries read again if need be
  const int bits = ep->av != nullptr ? ep->av->rx_ctx_bits : 0;
  const uint32_t slot = p.slot();
  if (fa != FI_ADDR_NOTAVAIL || bits == 0 || ep->rdm == nullptr ||
      (slot < m.unnamed.size() && m.unnamed[slot])) {
    return fa;
  }
  // Once per peer the engine learned from the network: which entry's
  // receive context it is.
  const std::optional<rdm::Address> a = ep->rdm->PeerAddress(p);
  fi_addr_t found = FI_ADDR_NOTAVAIL;
  for (fi_addr_t e = 0; a && e < m.av_addr.size() && found == FI_ADDR_NOTAVAIL; ++e) {
    const std::optional<rdm::Address>& entry = m.av_addr[e];
    if (entry && entry->ip == a->ip && a->udp_port > entry->udp_port &&
        a->udp_port - entry->udp_port < (1 << bits)) {
      found = fi_rx_addr(e, a->udp_port - entry->udp_port, bits);
    }
  }
  if (found == FI_ADDR_NOTAVAIL) {
    if (m.unnamed.size() <= slot) m.unnamed.resize(slot + 1);
    m.unnamed[slot] = true;
    return found;
  }
  if (m.addr_of.size() <= slot) m.addr_of.resize(slot + 1, FI_ADDR_NOTAVAIL);
  m.addr_of[slot] = found;
  return found;
}

int AddPeerToEp(Ep* ep, fi_addr_t fa, const rdm::Address& a) {
  DomainGuard g(*ep->lock);
  if (ep->peers.av_addr.size() <= fa) ep->peers.av_addr.resize(fa + 1);
  ep->peers.av_addr[fa] = a;
  ep->peers.unnamed.clear();  // SourceOf looks again
  absl::StatusOr<rdm::PeerId> p =
      ep->rdm != nullptr ? ep->rdm->InsertPeer(a) : ep->dgram->InsertPeer(a);
  if (!p.ok()) {
    BYPASS_FI_WARN(FI_LOG_AV, "%s\n", std::string(p.status().message()).c_str());
    return FromStatus(p.status());
  }
  ep->peers.Set(fa, *p);
  // Which device of the domain carries it: in "LOCAL+REMOTE", a peer at
  // the device's own IPv4 is on this host (the intra-host device reaches
  // it once its process holds the port), any other is remote.
  const driver::DeviceInfo& info = ep->domain->dev->info();
  std::string path = info.driver;
  if (const size_t plus = path.find('+'); plus != std::string::npos) {
    path = a.ip == info.ipv4 ? path.substr(0, plus) + " (this host)"
                             : path.substr(plus + 1) + " (another host)";
  }
  BYPASS_FI_INFO(FI_LOG_AV, "endpoint port %u: peer %s:%u (fi_addr %llu) through %s\n",
                 ep->udp_port, a.ip.ToString().c_str(), a.udp_port,
                 static_cast<unsigned long long>(fa), path.c_str());
  return 0;
}

namespace {

// The mode bits fi_getinfo offers only when asked (info.h): FI_BUFFERED_RECV
// on a plain FI_EP_RDM endpoint (not a scalable endpoint's slot, not on a
// shared receive context: the engine's peeks are per endpoint), and
// FI_MSG_PREFIX on FI_EP_DGRAM.
int ReceiveModes(const fi_info* info, size_t max_ctx, Ep* ep) {
  if (info->mode & FI_BUFFERED_RECV) {
    if (ep->type != FI_EP_RDM || max_ctx != 1 || ep->shared_rx) {
      BYPASS_FI_WARN(FI_LOG_EP_CTRL, "FI_BUFFERED_RECV is offered on plain FI_EP_RDM endpoints "
                     "only (not FI_EP_MSG, scalable endpoints or shared receive contexts)\n");
      return -FI_EINVAL;
    }
    ep->buffered = std::make_unique<BufferedRecvs>();
    InitBuffered(ep);
  }
  if ((info->mode & FI_MSG_PREFIX) && ep->type == FI_EP_DGRAM) {
    ep->msg_prefix = kDgramMsgPrefixSize;
  }
  return 0;
}

}  // namespace

int NewEp(Domain* d, const fi_info* info, void* context, size_t max_ctx,
          std::unique_ptr<Ep>* out) {
  const fi_ep_type type = info->ep_attr != nullptr ? info->ep_attr->type : FI_EP_RDM;
  if (type != FI_EP_RDM && type != FI_EP_DGRAM && type != FI_EP_MSG && type != FI_EP_UNSPEC) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, "only FI_EP_RDM, FI_EP_MSG and FI_EP_DGRAM endpoints are implemented\n");
    return -FI_ENOSYS;
  }
  // Connections on their listener's port (msg_ep.h) take no port: they
  // do not count.
  const bool shares_port = type == FI_EP_MSG && info->handle != nullptr;
  const size_t own_ports = static_cast<size_t>(
      std::count_if(d->eps.begin(), d->eps.end(), [](const Ep* e) { return e->shares == nullptr; }));
  if (!shares_port && own_ports >= d->ep_cnt) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, "the domain already has ep_cnt (%zu) endpoints; close one or "
                   "open another domain\n", d->ep_cnt);
    return -FI_EINVAL;
  }
  if (const char* attr = AttrBeyondLimits(info, d->fabric->settings.engine, type, max_ctx)) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, "%s is beyond what fi_getinfo offers for this domain; "
                   "use the value fi_getinfo returned%s\n", attr,
                   max_ctx == 1 && std::strstr(attr, "ctx_cnt") != nullptr
                       ? " (more than one context: fi_scalable_ep)"
                       : "");
    return -FI_EINVAL;
  }
  auto ep = std::make_unique<Ep>();
  std::memset(&ep->fid, 0, sizeof(ep->fid));
  ep->fid.fid.fclass = FI_CLASS_EP;
  ep->fid.fid.context = context;
  ep->fid.fid.ops = &g_ep_fi_ops;
  ep->fid.ops = &g_ep_ops;
  ep->fid.cm = &g_cm_ops;
  ep->fid.msg = &g_msg_ops;
  ep->fid.tagged = &g_tagged_ops;
  ep->fid.rma = &g_rma_ops;
  ep->fid.atomic = &g_atomic_ops;
  ep->fid.collective = &g_collective_ops;
  ep->base = ep.get();
  ep->domain = d;
  ep->lane = d->lane;
  ep->lock = &d->lock;
  ep->type = type == FI_EP_DGRAM || type == FI_EP_MSG ? type : FI_EP_RDM;
  ep->caps = info->caps;
  if (info->ep_attr != nullptr) {
    ep->shared_tx = info->ep_attr->tx_ctx_cnt == FI_SHARED_CONTEXT;
    ep->shared_rx = info->ep_attr->rx_ctx_cnt == FI_SHARED_CONTEXT;
  }
  ep->config = d->fabric->settings.engine;
  // FI_RMA_EVENT holds on every RDM endpoint: the engine reports each
  // peer's write and read here, for the FI_REMOTE_WRITE/READ counters of
  // the endpoint and of the region (progress.cc).
  ep->config.rma_events = true;
  // Requested ACKs wait for the application's next call on FI_EP_RDM
  // endpoints only (fabric.cc): a connection's CM messages want theirs at
  // once (a closing endpoint lingers until its SHUTDOWN is acknowledged).
  if (ep->type != FI_EP_RDM) ep->config.defer_requested_acks = false;
  uint16_t port = 0;
  if (info->src_addr != nullptr &&
      (info->addr_format == FI_SOCKADDR_IN || info->addr_format == FI_SOCKADDR)) {
    if (auto a = FromSockaddr(info->src_addr, info->src_addrlen)) {
      port = a->udp_port;
      ep->loopback_name = LoopbackName(d, *a);
    }
  }
  ep->port_given = port != 0;
  if (port == 0) port = FreePort(d, d->fabric->settings.base_port);
  for (const Ep* e : d->eps) {
    if (e->udp_port == port) return -FI_EADDRINUSE;
  }
  if (port == 0) return -FI_EADDRNOTAVAIL;
  ep->udp_port = port;
  ep->config.udp_port = port;
  if (info->tx_attr != nullptr) {
    ep->tx_op_flags = info->tx_attr->op_flags;
    if (info->tx_attr->size > 0) {
      ep->config.max_send_ops = static_cast<uint32_t>(
          std::min<size_t>(std::max<size_t>(info->tx_attr->size, ep->config.max_send_ops), 1u << 16));
    }
  }
  if (int ret = TclassDscp(info, &ep->dscp); ret != 0) return ret;
  if (info->rx_attr != nullptr) {
    ep->rx_op_flags = info->rx_attr->op_flags;
    if (info->rx_attr->size > 0) {
      ep->config.max_posted_recvs = static_cast<uint32_t>(
          std::min<size_t>(std::max<size_t>(info->rx_attr->size, ep->config.max_posted_recvs), 1u << 16));
    }
  }
  if (int ret = EndpointKeys(d, info, ep->type != FI_EP_DGRAM, &ep->config); ret != 0) return ret;
  if (int ret = ReceiveModes(info, max_ctx, ep.get()); ret != 0) return ret;
  if (ep->type == FI_EP_MSG) {
    if (int ret = OpenMsg(ep.get(), info); ret != 0) return ret;
  }
  *out = std::move(ep);
  return 0;
}

int OpenEp(fid_domain* domain, fi_info* info, fid_ep** out, void* context) {
  Domain* d = AsDomain(domain);
  if (d == nullptr) return BadFid(domain, FI_CLASS_DOMAIN);
  if (info == nullptr || out == nullptr) return -FI_EINVAL;
  DomainGuard g(d->lock);
  std::unique_ptr<Ep> ep;
  if (int ret = NewEp(d, info, context, 1, &ep); ret != 0) return ret;
  d->eps.push_back(ep.get());
  d->ep_count.store(d->eps.size(), std::memory_order_relaxed);
  d->obj.refs.fetch_add(1);
  *out = &ep.release()->fid;
  return 0;
}

namespace {
const driver::Clock* g_engine_clock = nullptr;
}  // namespace

const driver::Clock& EngineClock() {
  return g_engine_clock != nullptr ? *g_engine_clock : driver::SteadyClock::Get();
}

void SetEngineClockForBenchmark(const driver::Clock* clock) { g_engine_clock = clock; }

}  // namespace bypass::fi
