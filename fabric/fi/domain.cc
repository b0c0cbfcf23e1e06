// The domain (one device and its queue 0) and memory registration.
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_ext.h>

#include <unistd.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>

#include "driver/clock.h"
#include "driver/device.h"
#include "fabric/fi/objects.h"
#include "fabric/fi/services.h"

namespace bypass::fi {
namespace {

int DomainClose(fid* f) {
  Domain* d = AsDomain(f);
  if (d == nullptr) return BadFid(f, FI_CLASS_DOMAIN);
  if (d->obj.refs.load() > 0) return -FI_EBUSY;
  if (d->eq != nullptr) d->eq->obj.refs.fetch_sub(1);
  // Frames still in a shared-memory ring (memif) vanish when the link goes:
  // a datagram sent just now gets kDgramDrainNs to be read by the peer.
  constexpr uint64_t kDgramDrainNs = 100'000'000;
  const driver::Clock& clock = driver::SteadyClock::Get();
  while (d->last_dgram_tx_ns != 0 && clock.NowNs() - d->last_dgram_tx_ns < kDgramDrainNs) {
    usleep(1000);
  }
  d->port.reset();
  d->dev.reset();
  d->fabric->obj.refs.fetch_sub(1);
  d->obj.magic = Obj::kDead;
  Retire(d);
  return 0;
}

int DomainBind(fid* f, fid* bfid, uint64_t flags) {
  Domain* d = AsDomain(f);
  if (d == nullptr) return BadFid(f, FI_CLASS_DOMAIN);
  Eq* eq = AsEq(bfid);
  if (eq == nullptr) return BadFid(bfid, FI_CLASS_EQ);
  if (flags != 0 && flags != FI_REG_MR) return -FI_EBADFLAGS;
  DomainGuard g(d);
  if (d->eq != nullptr) return -FI_EINVAL;  // one EQ per domain
  d->eq = eq;
  eq->obj.refs.fetch_add(1);
  return 0;
}

int DomainControl(fid* f, int, void*) {
  if (AsDomain(f) == nullptr) return BadFid(f, FI_CLASS_DOMAIN);
  return -FI_ENOSYS;
}

int DomainOpsOpen(fid* f, const char*, uint64_t, void**, void*) {
  if (AsDomain(f) == nullptr) return BadFid(f, FI_CLASS_DOMAIN);
  return -FI_ENOSYS;  // no provider-specific interfaces
}

// FI_SET_OPS_HMEM_OVERRIDE: the application's copy functions for device
// memory. Every buffer here is host memory, which they never see; kept so
// the call succeeds as libfabric's own providers answer it.
int DomainOpsSet(fid* f, const char* name, uint64_t flags, void* ops, void*) {
  Domain* d = AsDomain(f);
  if (d == nullptr) return BadFid(f, FI_CLASS_DOMAIN);
  if (name == nullptr || ops == nullptr) return -FI_EINVAL;
  if (flags != 0) return -FI_EBADFLAGS;
  if (std::strcmp(name, FI_SET_OPS_HMEM_OVERRIDE) != 0) return -FI_ENOSYS;
  DomainGuard g(d);
  d->hmem_override = ops;
  return 0;
}

fi_ops g_domain_fi_ops = {
    .size = sizeof(fi_ops),
    .close = DomainClose,
    .bind = DomainBind,
    .control = DomainControl,
    .ops_open = DomainOpsOpen,
    .tostr = NoSysTostr,
    .ops_set = DomainOpsSet,
};

int ScalableEp(fid_domain*, fi_info*, fid_ep**, void*) { return -FI_ENOSYS; }
int PollOpen(fid_domain*, fi_poll_attr*, fid_poll**) { return -FI_ENOSYS; }
int StxCtx(fid_domain*, fi_tx_attr*, fid_stx**, void*) { return -FI_ENOSYS; }
int SrxCtx(fid_domain*, fi_rx_attr*, fid_ep**, void*) { return -FI_ENOSYS; }
int QueryAtomic(fid_domain*, fi_datatype, fi_op, fi_atomic_attr*, uint64_t) { return -FI_ENOSYS; }
int QueryCollective(fid_domain*, fi_collective_op, fi_collective_attr*, uint64_t) {
  return -FI_ENOSYS;
}
int Endpoint2(fid_domain* d, fi_info* info, fid_ep** ep, uint64_t flags, void* ctx) {
  if (flags != 0) return -FI_EBADFLAGS;
  return OpenEp(d, info, ep, ctx);
}

fi_ops_domain g_domain_ops = {
    .size = sizeof(fi_ops_domain),
    .av_open = OpenAv,
    .cq_open = OpenCq,
    .endpoint = OpenEp,
    .scalable_ep = ScalableEp,
    .cntr_open = OpenCntr,
    .poll_open = PollOpen,
    .stx_ctx = StxCtx,
    .srx_ctx = SrxCtx,
    .query_atomic = QueryAtomic,
    .query_collective = QueryCollective,
    .endpoint2 = Endpoint2,
};

// ---- memory regions ----

constexpr uint64_t kAccessBits = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ |
                                 FI_REMOTE_WRITE;

bool RemoteAccess(const Mr* mr) { return (mr->access & (FI_REMOTE_READ | FI_REMOTE_WRITE)) != 0; }

int MrClose(fid* f) {
  Mr* mr = AsMr(f);
  if (mr == nullptr) return BadFid(f, FI_CLASS_MR);
  Domain* d = mr->domain;
  DomainGuard g(d);
  if (mr->obj.refs.load() > 0) return -FI_EBUSY;
  while (!mr->registered.empty()) DeregisterMrFromEp(mr, mr->registered.back());
  if (mr->bound != nullptr) {
    EraseOne(mr->bound->mrs, mr);
    mr->bound->obj.refs.fetch_sub(1);
  }
  EraseOne(d->mrs, mr);
  d->obj.refs.fetch_sub(1);
  mr->obj.magic = Obj::kDead;
  Retire(mr);
  return 0;
}

int MrBind(fid* f, fid* bfid, uint64_t flags) {
  Mr* mr = AsMr(f);
  if (mr == nullptr) return BadFid(f, FI_CLASS_MR);
  if (!(mr->domain->mr_mode & FI_MR_ENDPOINT)) return -FI_EINVAL;  // only with FI_MR_ENDPOINT
  Ep* ep = AsEp(bfid);
  if (ep == nullptr) return BadFid(bfid, FI_CLASS_EP);
  if (flags != 0) return -FI_EBADFLAGS;
  ep = ep->base;
  if (ep->domain != mr->domain) return -FI_EINVAL;
  DomainGuard g(mr->domain);
  if (mr->bound != nullptr || mr->enabled) return -FI_EINVAL;
  mr->bound = ep;
  ep->mrs.push_back(mr);
  ep->obj.refs.fetch_add(1);
  return 0;
}

int MrControl(fid* f, int command, void* arg) {
  Mr* mr = AsMr(f);
  if (mr == nullptr) return BadFid(f, FI_CLASS_MR);
  if (command != FI_ENABLE) return -FI_ENOSYS;
  (void)arg;
  DomainGuard g(mr->domain);
  if (!(mr->domain->mr_mode & FI_MR_ENDPOINT)) return 0;  // enabled at registration
  if (mr->bound == nullptr) return -FI_EINVAL;              // fi_mr_bind first
  if (mr->enabled) return 0;
  if (RemoteAccess(mr) && mr->bound->rdm != nullptr) {
    if (int ret = RegisterMrWithEp(mr, mr->bound); ret != 0) return ret;
  }
  mr->enabled = true;
  return 0;
}

fi_ops g_mr_fi_ops = {
    .size = sizeof(fi_ops),
    .close = MrClose,
    .bind = MrBind,
    .control = MrControl,
    .ops_open = NoSysOpsOpen,
    .tostr = NoSysTostr,
    .ops_set = NoSysOpsSet,
};

uint64_t RandomKey() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return rng();
}

int MrReg(fid* f, const void* buf, size_t len, uint64_t access, uint64_t offset,
          uint64_t requested_key, uint64_t flags, fid_mr** mr, void* context) {
  iovec iov{const_cast<void*>(buf), len};
  fi_mr_attr attr{};
  attr.mr_iov = &iov;
  attr.iov_count = 1;
  attr.access = access;
  attr.offset = offset;
  attr.requested_key = requested_key;
  attr.context = context;
  return RegMr(f, &attr, flags, mr);
}

int MrRegv(fid* f, const iovec* iov, size_t count, uint64_t access, uint64_t offset,
           uint64_t requested_key, uint64_t flags, fid_mr** mr, void* context) {
  fi_mr_attr attr{};
  attr.mr_iov = iov;
  attr.iov_count = count;
  attr.access = access;
  attr.offset = offset;
  attr.requested_key = requested_key;
  attr.context = context;
  return RegMr(f, &attr, flags, mr);
}

int MrRegattr(fid* f, const fi_mr_attr* attr, uint64_t flags, fid_mr** mr) {
  return RegMr(f, attr, flags, mr);
}

fi_ops_mr g_mr_ops = {
    .size = sizeof(fi_ops_mr),
    .reg = MrReg,
    .regv = MrRegv,
    .regattr = MrRegattr,
};

}  // namespace

int OpenDomain(fid_fabric* fabric, fi_info* info, fid_domain** dom, void* context) {
  Fabric* fab = AsFabric(fabric);
  if (fab == nullptr) return BadFid(fabric, FI_CLASS_FABRIC);
  if (info == nullptr || dom == nullptr) return -FI_EINVAL;
  std::string uri;
  if (info->domain_attr != nullptr && info->domain_attr->name != nullptr) {
    uri = info->domain_attr->name;
    bool known = false;
    for (const std::string& u : fab->settings.devices) known = known || u == uri;
    if (!known) {
      BYPASS_FI_WARN(FI_LOG_DOMAIN, "domain %s is not in FI_BYPASS_DEVICES\n", uri.c_str());
      return -FI_ENODEV;
    }
  } else if (!fab->settings.devices.empty()) {
    uri = fab->settings.devices.front();
  } else {
    return -FI_ENODEV;
  }
  absl::StatusOr<std::unique_ptr<driver::Device>> dev = driver::OpenDevice(uri);
  if (!dev.ok()) {
    BYPASS_FI_WARN(FI_LOG_DOMAIN, "cannot open %s: %s\n", uri.c_str(),
                   std::string(dev.status().message()).c_str());
    return FromStatus(dev.status());
  }
  auto d = std::make_unique<Domain>();
  std::memset(&d->fid, 0, sizeof(d->fid));
  d->fid.fid.fclass = FI_CLASS_DOMAIN;
  d->fid.fid.context = context;
  d->fid.fid.ops = &g_domain_fi_ops;
  d->fid.ops = &g_domain_ops;
  d->fid.mr = &g_mr_ops;
  d->fabric = fab;
  d->uri = uri;
  d->dev = *std::move(dev);
  d->port = std::make_unique<rdm::Port>(d->dev->queue(0), d->dev->info());
  if (info->domain_attr != nullptr) {
    const fi_threading t = info->domain_attr->threading;
    d->thread_safe = t == FI_THREAD_SAFE || t == FI_THREAD_FID || t == FI_THREAD_ENDPOINT;
    d->mr_mode = static_cast<uint64_t>(info->domain_attr->mr_mode);
    d->av_type = info->domain_attr->av_type;
  }
  d->caps = info->caps;
  fab->obj.refs.fetch_add(1);
  BYPASS_FI_INFO(FI_LOG_DOMAIN, "opened %s: %s mac %s mtu %u\n", uri.c_str(),
                 d->dev->info().ipv4.ToString().c_str(), d->dev->info().mac.ToString().c_str(),
                 d->dev->info().mtu);
  *dom = &d.release()->fid;
  return 0;
}

int RegMr(fid* f, const fi_mr_attr* attr, uint64_t flags, fid_mr** out) {
  Domain* d = AsDomain(f);
  if (d == nullptr) return BadFid(f, FI_CLASS_DOMAIN);
  if (attr == nullptr || out == nullptr) return -FI_EINVAL;
  if (attr->iov_count > 1) return -FI_EINVAL;  // mr_iov_limit is 1
  if (attr->iov_count == 1 && attr->mr_iov == nullptr) return -FI_EINVAL;
  if ((attr->access & ~kAccessBits) != 0) return -FI_EINVAL;
  if (attr->iface != FI_HMEM_SYSTEM) return -FI_ENOSYS;  // host memory only
  if (flags != 0 && flags != FI_RMA_EVENT) return -FI_EBADFLAGS;
  void* addr = attr->iov_count == 1 ? attr->mr_iov[0].iov_base : nullptr;
  const size_t len = attr->iov_count == 1 ? attr->mr_iov[0].iov_len : 0;
  if (addr == nullptr && len > 0) return -FI_EINVAL;
  DomainGuard g(d);
  uint64_t key;
  if (d->mr_mode & FI_MR_PROV_KEY) {
    key = RandomKey();
  } else {
    key = attr->requested_key;
    for (const Mr* other : d->mrs) {
      if (other->fid.key == key) return -FI_ENOKEY;  // keys are unique per domain
    }
  }
  auto mr = std::make_unique<Mr>();
  std::memset(&mr->fid, 0, sizeof(mr->fid));
  mr->fid.fid.fclass = FI_CLASS_MR;
  mr->fid.fid.context = attr->context;
  mr->fid.fid.ops = &g_mr_fi_ops;
  mr->fid.key = key;
  mr->domain = d;
  mr->addr = addr;
  mr->len = len;
  mr->access = attr->access == 0 ? kAccessBits : attr->access;
  mr->offset = attr->offset;
  mr->context = attr->context;
  mr->fid.mem_desc = mr.get();  // fi_mr_desc: the region itself
  if (!(d->mr_mode & FI_MR_ENDPOINT)) {
    mr->enabled = true;
    if (RemoteAccess(mr.get())) {
      for (Ep* ep : d->eps) {
        if (ep->rdm == nullptr) continue;
        if (int ret = RegisterMrWithEp(mr.get(), ep); ret != 0) {
          while (!mr->registered.empty()) DeregisterMrFromEp(mr.get(), mr->registered.back());
          return ret;
        }
      }
    }
  }
  d->mrs.push_back(mr.get());
  d->obj.refs.fetch_add(1);
  *out = &mr.release()->fid;
  return 0;
}

int RegisterMrWithEp(Mr* mr, Ep* ep) {
  rdm::RegionRequest r;
  r.addr = mr->addr;
  r.len = mr->len;
  if (mr->access & FI_REMOTE_READ) r.access |= rdm::kAccessRemoteRead;
  if (mr->access & FI_REMOTE_WRITE) r.access |= rdm::kAccessRemoteWrite;
  // FI_MR_VIRT_ADDR: peers name bytes by virtual address; otherwise by
  // offset, starting at the registration's offset.
  r.base = (mr->domain->mr_mode & FI_MR_VIRT_ADDR) ? reinterpret_cast<uint64_t>(mr->addr)
                                                   : mr->offset;
  r.key = mr->fid.key;
  r.context = mr->context;
  absl::StatusOr<uint64_t> key = ep->rdm->RegisterRegion(r);
  if (!key.ok()) {
    BYPASS_FI_WARN(FI_LOG_MR, "cannot register a region for remote access: %s\n",
                   std::string(key.status().message()).c_str());
    return FromStatus(key.status());
  }
  mr->registered.push_back(ep);
  return 0;
}

void DeregisterMrFromEp(Mr* mr, Ep* ep) {
  if (ep->rdm != nullptr) (void)ep->rdm->DeregisterRegion(mr->fid.key);
  EraseOne(mr->registered, ep);
}

}  // namespace bypass::fi
