// The domain: one device queue (lane.h), and the domain's calls (the
// objects it opens are in their own files; its fi_mr_* calls in mr.cc).
#include "fabric/fi/domain.h"
#include "fabric/fi/hmem.h"

#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_ext.h>

#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <system_error>

#include "driver/clock.h"
#include "driver/device.h"
#include "driver/host.h"
#include "driver/uri.h"
#include "fabric/fi/atomic.h"
#include "fabric/fi/av.h"
#include "fabric/fi/cntr.h"
#include "fabric/fi/coll.h"
#include "fabric/fi/cq.h"
#include "fabric/fi/ep.h"
#include "fabric/fi/eq.h"
#include "fabric/fi/fabric.h"
#include "fabric/fi/info/info.h"
#include "fabric/fi/mr.h"
#include "fabric/fi/poll.h"
#include "fabric/fi/sep.h"
#include "fabric/fi/services.h"
#include "fabric/fi/shared_ctx.h"
#include "fabric/fi/trigger.h"

namespace bypass::fi {
namespace {

int DomainClose(fid* f) {
  Domain* d = AsDomain(f);
  if (d == nullptr) return BadFid(f, FI_CLASS_DOMAIN);
  if (d->obj.refs.load() > 0) return -FI_EBUSY;
  d->progress_running.store(nullptr, std::memory_order_release);
  d->progress.reset();  // no endpoint left to progress; joined before the port goes
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
  d->lane.reset();  // the queue (and, with the last lane, the device) closes
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
  DomainGuard g(d->lock);
  if (d->eq != nullptr) return -FI_EINVAL;  // one EQ per domain
  d->eq = eq;
  d->eq_reg_mr = (flags & FI_REG_MR) != 0;
  eq->obj.refs.fetch_add(1);
  return 0;
}

// FI_QUEUE_WORK, FI_CANCEL_WORK, FI_FLUSH_WORK (trigger.h); nothing else.
int DomainControl(fid* f, int command, void* arg) {
  Domain* d = AsDomain(f);
  if (d == nullptr) return BadFid(f, FI_CLASS_DOMAIN);
  return TriggerControl(d, command, arg);
}

int DomainOpsOpen(fid* f, const char*, uint64_t, void**, void*) {
  if (AsDomain(f) == nullptr) return BadFid(f, FI_CLASS_DOMAIN);
  return -FI_ENOSYS;  // no provider-specific interfaces
}

// FI_SET_OPS_HMEM_OVERRIDE: the application's copy functions, used for
// every copy to or from its memory from then on (hmem.h).
int DomainOpsSet(fid* f, const char* name, uint64_t flags, void* ops, void*) {
  Domain* d = AsDomain(f);
  if (d == nullptr) return BadFid(f, FI_CLASS_DOMAIN);
  if (name == nullptr || ops == nullptr) return -FI_EINVAL;
  if (flags != 0) return -FI_EBADFLAGS;
  if (std::strcmp(name, FI_SET_OPS_HMEM_OVERRIDE) != 0) return -FI_ENOSYS;
  DomainGuard g(d->lock);
  return SetHmemOverride(d, ops);
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

int Endpoint2(fid_domain* d, fi_info* info, fid_ep** ep, uint64_t flags, void* ctx) {
  if (flags != 0) return -FI_EBADFLAGS;
  return OpenEp(d, info, ep, ctx);
}

fi_ops_domain g_domain_ops = {
    .size = sizeof(fi_ops_domain),
    .av_open = OpenAv,
    .cq_open = OpenCq,
    .endpoint = OpenEp,
    .scalable_ep = OpenSep,
    .cntr_open = OpenCntr,
    .poll_open = PollOpen,
    .stx_ctx = OpenStx,
    .srx_ctx = OpenSrx,
    .query_atomic = QueryAtomic,
    .query_collective = QueryCollective,  // coll.h
    .endpoint2 = Endpoint2,
};

// The mr_mode bits the domain follows: the legacy values as the bits they
// stand for (fi_mr(3): FI_MR_BASIC is FI_MR_VIRT_ADDR, FI_MR_ALLOCATED and
// FI_MR_PROV_KEY; FI_MR_SCALABLE none), and of the rest only the ones
// fi_getinfo offers (fabric/fi/info), so an FI_MR_ENDPOINT set by hand is
// not half followed.
static_assert(kMaxEndpoints == rdm::Port::kMaxEndpoints, "ep_cnt is the port's endpoints");

uint64_t MrModeBits(int mr_mode) {
  if (mr_mode == FI_MR_BASIC) return FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  if (mr_mode == FI_MR_SCALABLE) return 0;
  return static_cast<uint64_t>(mr_mode) & (FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_RMA_EVENT);
}

}  // namespace

std::optional<driver::Ipv4Address> LoopbackName(const Domain* d, const rdm::Address& a) {
  const driver::DeviceInfo& info = d->dev->info();
  if (info.host_address && driver::IsLoopbackIpv4(a.ip) && !driver::IsLoopbackIpv4(info.ipv4)) {
    return a.ip;
  }
  return std::nullopt;
}

rdm::Address LocalToDevice(const Domain* d, rdm::Address a) {
  if (LoopbackName(d, a)) a.ip = d->dev->info().ipv4;
  return a;
}

int OpenDomain(fid_fabric* fabric, fi_info* info, fid_domain** dom, void* context) {
  return OpenDomainOf(fabric, info, dom, context, false);
}

int OpenDomainOf(fid_fabric* fabric, fi_info* info, fid_domain** dom, void* context,
                 bool for_listener) {
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
  UserKey user_key;
  if (int ret = DomainUserKey(fab->settings.auth_key_file, info->domain_attr, &user_key);
      ret != 0) {
    return ret;
  }
  // Every endpoint of the domain shares its device queue (and the engine
  // progresses it from any of them), so only FI_THREAD_DOMAIN, where the
  // application serializes the whole domain, may go without the lock.
  const bool thread_safe = info->domain_attr == nullptr ||
                           RawEnum(info->domain_attr->threading) != FI_THREAD_DOMAIN;
  std::string note;
  absl::StatusOr<std::unique_ptr<rdm::UnexpectedPool>> pool = rdm::UnexpectedPool::Create(
      fab->settings.engine.unexpected_bytes, fab->settings.engine.unexpected_chunk_bytes);
  if (!pool.ok()) {
    BYPASS_FI_WARN(FI_LOG_DOMAIN, "FI_BYPASS_UNEXPECTED_BYTES: %s\n",
                   std::string(pool.status().message()).c_str());
    return -FI_EINVAL;
  }
  absl::StatusOr<std::shared_ptr<Lane>> lane = OpenDomainLane(uri, thread_safe, for_listener, &note);
  if (!note.empty()) BYPASS_FI_WARN(FI_LOG_DOMAIN, "%s\n", note.c_str());
  if (!lane.ok()) {
    BYPASS_FI_WARN(FI_LOG_DOMAIN, "cannot open %s: %s\n", uri.c_str(),
                   std::string(lane.status().message()).c_str());
    return absl::IsFailedPrecondition(lane.status()) ? -FI_EBUSY : FromStatus(lane.status());
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
  d->user_key = user_key;
  d->lane = *std::move(lane);
  d->unexpected = *std::move(pool);
  d->dev = std::shared_ptr<driver::Device>(d->lane, d->lane->dev);
  d->port = std::shared_ptr<rdm::Port>(d->lane, d->lane->port.get());
  d->lock.shared = &d->lane->lock;
  d->lock.thread_safe = d->lane->lock.thread_safe;
  if (info->domain_attr != nullptr) {
    d->mr_mode = MrModeBits(info->domain_attr->mr_mode);
    d->av_type = info->domain_attr->av_type;
  }
  d->ep_cnt = kMaxEndpoints;
  d->mr_cnt = fab->settings.engine.max_regions;
  d->caps = info->caps;
  d->triggers = NewTriggerQueue();
  if (info->domain_attr != nullptr &&
      (RawEnum(info->domain_attr->data_progress) == FI_PROGRESS_AUTO ||
       RawEnum(info->domain_attr->control_progress) == FI_PROGRESS_AUTO)) {
    // A thread progresses the domain from now on: it shares the lock.
    LockEveryQueue(d.get());
    try {
      d->progress = std::make_unique<ProgressThread>(d.get(), true);
      d->progress_running.store(d->progress.get(), std::memory_order_release);
    } catch (const std::system_error& e) {
      BYPASS_FI_WARN(FI_LOG_DOMAIN, "FI_PROGRESS_AUTO: cannot start the progress thread: %s\n",
                     e.what());
      d->port.reset();
      d->dev.reset();
      return -FI_ENOMEM;
    }
  }
  fab->obj.refs.fetch_add(1);
  BYPASS_FI_INFO(FI_LOG_DOMAIN, "opened %s: %s mac %s mtu %u, queue %u\n", uri.c_str(),
                 d->dev->info().ipv4.ToString().c_str(), d->dev->info().mac.ToString().c_str(),
                 d->dev->info().mtu, d->lane->queue);
  *dom = &d.release()->fid;
  return 0;
}

}  // namespace bypass::fi
