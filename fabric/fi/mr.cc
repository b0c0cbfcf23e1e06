// Memory regions: registration (the domain's fi_mr_* calls), keys, and the
// engine registrations of regions open to remote access.
#include "fabric/fi/mr.h"

#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "fabric/fi/cntr.h"
#include "fabric/fi/domain.h"
#include "fabric/fi/hmem.h"
#include "fabric/fi/ep.h"
#include "fabric/fi/eq.h"
#include "fabric/fi/services.h"
#include "fabric/rdm/rdm.h"

namespace bypass::fi {
namespace {

constexpr uint64_t kAccessBits = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ |
                                 FI_REMOTE_WRITE;

bool RemoteAccess(const Mr* mr) { return (mr->access & (FI_REMOTE_READ | FI_REMOTE_WRITE)) != 0; }

void DropCntr(Cntr*& c) {
  if (c != nullptr) c->obj.refs.fetch_sub(1);
  c = nullptr;
}

// Makes a region open to remote access known to every RDM endpoint of its
// domain (all or none).
int RegisterWithDomainEps(Mr* mr) {
  if (!RemoteAccess(mr)) return 0;
  for (Ep* ep : mr->domain->eps) {
    if (ep->rdm == nullptr) continue;
    // Connections sharing a listener's port share its engine: once there.
    const bool there = std::any_of(mr->registered.begin(), mr->registered.end(),
                                   [ep](const Ep* r) { return r->rdm == ep->rdm; });
    if (there) continue;
    if (int ret = RegisterMrWithEp(mr, ep); ret != 0) {
      while (!mr->registered.empty()) DeregisterMrFromEp(mr, mr->registered.back());
      return ret;
    }
  }
  return 0;
}

// fi_mr_bind to a counter (fi_mr(3)): FI_REMOTE_WRITE and/or FI_REMOTE_READ
// events of the region count on it. Before fi_mr_enable under
// FI_MR_RMA_EVENT; at any time otherwise (the region is enabled at
// registration and there is no enable step).
int BindCntrToMr(Mr* mr, Cntr* c, uint64_t flags) {
  if (c->domain != mr->domain) return -FI_EINVAL;
  if (flags == 0 || (flags & ~static_cast<uint64_t>(FI_REMOTE_WRITE | FI_REMOTE_READ)) != 0) {
    BYPASS_FI_WARN(FI_LOG_MR, "fi_mr_bind to a counter takes FI_REMOTE_WRITE and/or "
                   "FI_REMOTE_READ (flags 0x%llx)\n", static_cast<unsigned long long>(flags));
    return -FI_EBADFLAGS;
  }
  if ((mr->domain->mr_mode & FI_MR_RMA_EVENT) && mr->enabled) {
    BYPASS_FI_WARN(FI_LOG_MR, "fi_mr_bind after fi_mr_enable: under FI_MR_RMA_EVENT register "
                   "with FI_RMA_EVENT, bind the counters, then enable\n");
    return -FI_EINVAL;
  }
  if (((flags & FI_REMOTE_WRITE) && mr->remote_write_cntr != nullptr) ||
      ((flags & FI_REMOTE_READ) && mr->remote_read_cntr != nullptr)) {
    return -FI_EINVAL;  // one counter per kind of event
  }
  if (flags & FI_REMOTE_WRITE) {
    mr->remote_write_cntr = c;
    c->obj.refs.fetch_add(1);
  }
  if (flags & FI_REMOTE_READ) {
    mr->remote_read_cntr = c;
    c->obj.refs.fetch_add(1);
  }
  return 0;
}

int MrClose(fid* f) {
  Mr* mr = AsMr(f);
  if (mr == nullptr) return BadFid(f, FI_CLASS_MR);
  Domain* d = mr->domain;
  DomainGuard g(d->lock);
  if (mr->obj.refs.load() > 0) return -FI_EBUSY;
  while (!mr->registered.empty()) DeregisterMrFromEp(mr, mr->registered.back());
  DropCntr(mr->remote_write_cntr);
  DropCntr(mr->remote_read_cntr);
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
  if (bfid != nullptr && bfid->fclass == FI_CLASS_CNTR) {
    Cntr* c = AsCntr(bfid);
    if (c == nullptr) return BadFid(bfid, FI_CLASS_CNTR);
    DomainGuard g(mr->domain->lock);
    return BindCntrToMr(mr, c, flags);
  }
  if (!(mr->domain->mr_mode & FI_MR_ENDPOINT)) return -FI_EINVAL;  // only with FI_MR_ENDPOINT
  Ep* ep = AsEp(bfid);
  if (ep == nullptr) return BadFid(bfid, FI_CLASS_EP);
  if (flags != 0) return -FI_EBADFLAGS;
  ep = ep->base;
  if (ep->domain != mr->domain) return -FI_EINVAL;
  DomainGuard g(mr->domain->lock);
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
  DomainGuard g(mr->domain->lock);
  if (!(mr->domain->mr_mode & FI_MR_ENDPOINT)) {
    // Enabled at registration, or (FI_RMA_EVENT under FI_MR_RMA_EVENT) now.
    if (mr->enabled) return 0;
    if (int ret = RegisterWithDomainEps(mr); ret != 0) return ret;
    mr->enabled = true;
    return 0;
  }
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

// FI_REG_MR (fi_domain_bind): registration is asynchronous; it is done by
// now, so its FI_MR_COMPLETE event goes to the domain's EQ at once (after
// *mr is written, as fi_mr(3) asks).
int ReportRegistration(Eq* eq, fid_mr* mr, void* context) {
  fi_eq_entry entry{};
  entry.fid = &mr->fid;
  entry.context = context;
  EqEvent ev;
  ev.event = FI_MR_COMPLETE;
  ev.bytes.assign(reinterpret_cast<uint8_t*>(&entry),
                  reinterpret_cast<uint8_t*>(&entry) + sizeof(entry));
  if (EqPush(eq, std::move(ev))) return 0;
  // No room for the event: the registration is undone and may be retried.
  (void)MrClose(&mr->fid);
  return -FI_EAGAIN;
}

bool KeyTaken(const Domain* d, uint64_t key) {
  for (const Mr* other : d->mrs) {
    if (other->fid.key == key) return true;
  }
  return false;
}

// FI_MR_PROV_KEY: a key from the kernel's CSPRNG that no live region of the
// domain has (so never one still in use).
uint64_t ProviderKey(const Domain* d) {
  uint64_t key;
  do {
    key = rdm::RandomRegionKey();
  } while (KeyTaken(d, key));
  return key;
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

}  // namespace

fi_ops_mr g_mr_ops = {
    .size = sizeof(fi_ops_mr),
    .reg = MrReg,
    .regv = MrRegv,
    .regattr = MrRegattr,
};

// fi_mr(3) iface: FI_HMEM_SYSTEM (named or left 0, its value) is host
// memory. The provider offers no FI_HMEM (no device library on these
// machines), so device memory is refused rather than read as host memory.
// With the application's copy functions (hmem.h) a region peers may
// access is refused too: the engine serves a peer's RMA and atomics from
// the region itself, not through them.
int CheckIface(const Domain* d, const fi_mr_attr* attr) {
  if (attr->iface != FI_HMEM_SYSTEM) {
    BYPASS_FI_WARN(FI_LOG_MR, "fi_mr_regattr: iface %d is device memory; only FI_HMEM_SYSTEM is "
                   "supported (no FI_HMEM)\n", static_cast<int>(attr->iface));
    return -FI_EOPNOTSUPP;
  }
  if (HmemOverridden(d) && (attr->access & (FI_REMOTE_READ | FI_REMOTE_WRITE))) {
    BYPASS_FI_WARN(FI_LOG_MR, "fi_mr_regattr: remote access to a region of a domain with "
                   "fi_hmem_override_ops is not supported (peers' RMA would bypass them)\n");
    return -FI_EOPNOTSUPP;
  }
  return 0;
}

int RegMr(fid* f, const fi_mr_attr* attr, uint64_t flags, fid_mr** out) {
  Domain* d = AsDomain(f);
  if (d == nullptr) return BadFid(f, FI_CLASS_DOMAIN);
  if (attr == nullptr || out == nullptr) return -FI_EINVAL;
  if (attr->iov_count > 1) return -FI_EINVAL;  // mr_iov_limit is 1
  if (attr->iov_count == 1 && attr->mr_iov == nullptr) return -FI_EINVAL;
  if ((attr->access & ~kAccessBits) != 0) return -FI_EINVAL;
  if (int ret = CheckIface(d, attr); ret != 0) return ret;
  if (flags != 0 && flags != FI_RMA_EVENT) return -FI_EBADFLAGS;
  void* addr = attr->iov_count == 1 ? attr->mr_iov[0].iov_base : nullptr;
  const size_t len = attr->iov_count == 1 ? attr->mr_iov[0].iov_len : 0;
  if (addr == nullptr && len > 0) return -FI_EINVAL;
  DomainGuard g(d->lock);
  if (d->mrs.size() >= d->mr_cnt) {
    BYPASS_FI_WARN(FI_LOG_MR, "the domain already has mr_cnt (%zu) regions; close one first\n",
                   d->mr_cnt);
    return -FI_EINVAL;
  }
  uint64_t key;
  if (d->mr_mode & FI_MR_PROV_KEY) {
    key = ProviderKey(d);
  } else {
    key = attr->requested_key;
    if (KeyTaken(d, key)) return -FI_ENOKEY;  // keys are unique per domain
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
  // fi_mr(3): exactly the rights asked; no remote bit, no remote access
  // (the engine never hears of the region, so peers get a bad key).
  mr->access = attr->access;
  mr->offset = attr->offset;
  mr->context = attr->context;
  mr->fid.mem_desc = mr.get();  // fi_mr_desc: the region itself
  // fi_mr(3): under FI_MR_ENDPOINT, and under FI_MR_RMA_EVENT for regions
  // registered with FI_RMA_EVENT, a region starts disabled (fi_mr_enable).
  const bool deferred = (d->mr_mode & FI_MR_ENDPOINT) ||
                        ((d->mr_mode & FI_MR_RMA_EVENT) && (flags & FI_RMA_EVENT));
  if (!deferred) {
    if (int ret = RegisterWithDomainEps(mr.get()); ret != 0) return ret;
    mr->enabled = true;
  }
  d->mrs.push_back(mr.get());
  d->obj.refs.fetch_add(1);
  *out = &mr.release()->fid;
  if (d->eq_reg_mr) return ReportRegistration(d->eq, *out, attr->context);
  return 0;
}

int RegisterMrWithEp(Mr* mr, Ep* ep) {
  DomainGuard g(*ep->lock);  // a slot of a scalable endpoint has its own
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
  r.context = mr;  // the engine's events name the region (CountMrEvent)
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
  DomainGuard g(*ep->lock);
  if (ep->rdm != nullptr) (void)ep->rdm->DeregisterRegion(mr->fid.key);
  EraseOne(mr->registered, ep);
}

void* CountMrEvent(void* region_context, bool write) {
  Mr* mr = AsMr(region_context);  // closed since: its shell answers null
  if (mr == nullptr) return nullptr;
  CountEvent(write ? mr->remote_write_cntr : mr->remote_read_cntr);
  return mr->context;
}

}  // namespace bypass::fi
