// The domain (fi_domain(3)): one device queue (lane.h), shared by the
// endpoints opened on it.
#ifndef BYPASS_FABRIC_FI_DOMAIN_H_
#define BYPASS_FABRIC_FI_DOMAIN_H_

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_ext.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "driver/device.h"
#include "fabric/fi/common.h"
#include "fabric/fi/keys.h"
#include "fabric/fi/progress_thread.h"
#include "fabric/fi/lane.h"
#include "fabric/rdm/rdm.h"

namespace bypass::fi {

struct Fabric;
struct Eq;
struct Ep;
struct Mr;
struct TriggerQueue;

// One device (port) and the endpoints on its queue (lane.h: the process
// opens a device that delivers by frame once, and each domain takes a
// queue of it; with none free, a domain shares another's).
struct Domain {
  fid_domain fid;
  Obj obj;
  Fabric* fabric = nullptr;
  std::string uri;
  std::shared_ptr<Lane> lane;  // the domain's queue, its port and its lock
  std::shared_ptr<driver::Device> dev;  // lane's device (kept open by lane)
  std::shared_ptr<rdm::Port> port;      // lane's port
  // The buffer every endpoint of the domain (and its shared receive
  // contexts) keeps unexpected messages in: one budget per domain
  // (FI_BYPASS_UNEXPECTED_BYTES).
  std::unique_ptr<rdm::UnexpectedPool> unexpected;
  // Every level but FI_THREAD_DOMAIN: every call takes it (DomainGuard). It
  // stands for the lane's lock (shared with domains on the same queue).
  DomainLock lock;
  uint64_t mr_mode = 0;
  fi_av_type av_type = FI_AV_UNSPEC;
  uint64_t caps = 0;
  UserKey user_key;  // auth_key of 32+ bytes or FI_BYPASS_AUTH_KEY_FILE (keys.h)
  Eq* eq = nullptr;  // fi_domain_bind: asynchronous events
  bool eq_reg_mr = false;  // bound with FI_REG_MR: registrations report to eq
  // Limits of domain_attr (fabric/fi/info): enforced where objects open.
  size_t ep_cnt = 0;
  size_t mr_cnt = 0;
  // Open CQs and counters, against cq_cnt and cntr_cnt (TakeSlot).
  std::atomic<size_t> cqs{0};
  std::atomic<size_t> cntrs{0};
  std::vector<Ep*> eps;
  // eps.size(), for the progress thread to read without the lock (written
  // under it, wherever eps changes).
  std::atomic<size_t> ep_count{0};
  std::vector<Mr*> mrs;
  // FI_SET_OPS_HMEM_OVERRIDE (hmem.h): the application's copy functions,
  // set (hmem_overridden) before the data paths read them.
  fi_hmem_override_ops hmem_override{};
  std::atomic<bool> hmem_overridden{false};
  uint64_t last_dgram_tx_ns = 0;  // when a datagram endpoint last sent
  // FI_PROGRESS_AUTO (started at fi_domain), or a blocking wait's progress
  // (started at the first one: EnsureProgressThread). Stopped first at close.
  std::unique_ptr<ProgressThread> progress;
  // The same thread for readers that hold only a context's lock (a
  // scalable endpoint's context on a queue of its own: ProgressAll), set
  // once it is running: `progress` is written under the domain's lock.
  std::atomic<ProgressThread*> progress_running{nullptr};
  // The watch (progress.h, CallWatch): an application call or a pass left
  // an endpoint with something only a later pass finishes (an ACK deferred
  // to the application's next call, packets in flight, data queued behind
  // the window: rdm::Endpoint::Unfinished), and the application may never
  // call again. watch_wanted: set under the lock by such a call or pass;
  // watched: the progress thread holds a demand for it, which it drops
  // after a pass of its own found every endpoint finished.
  std::atomic<bool> watch_wanted{false};
  std::atomic<bool> watched{false};
  // Triggered operations and deferred work (trigger.h).
  std::shared_ptr<TriggerQueue> triggers;
};

// Takes one of max slots counted by used (the domain's cq_cnt, cntr_cnt);
// false when all are taken. The object's close gives it back (fetch_sub).
inline bool TakeSlot(std::atomic<size_t>& used, size_t max) {
  if (used.fetch_add(1) < max) return true;
  used.fetch_sub(1);
  return false;
}

// 127.0.0.0/8 names a device with the host's address (driver::DeviceInfo::
// host_address): LoopbackName is a's loopback address when it names d's
// device that way, LocalToDevice a with the device's own address for it.
std::optional<driver::Ipv4Address> LoopbackName(const Domain* d, const rdm::Address& a);
rdm::Address LocalToDevice(const Domain* d, rdm::Address a);
static_assert(offsetof(Domain, fid) == 0);

inline Domain* AsDomain(const void* f) { return As<Domain>(f, FI_CLASS_DOMAIN); }

// fi_domain: opens the device the info names (or the fabric's first).
int OpenDomain(fid_fabric* fabric, fi_info* info, fid_domain** dom, void* context);
// The same, for a passive endpoint's listening port (msg_ep.h): on a
// device whose every queue is taken, it shares the first domain's even
// when that domain takes no lock (FI_THREAD_DOMAIN), whose calls take it
// from then on (OpenDomainLane).
int OpenDomainOf(fid_fabric* fabric, fi_info* info, fid_domain** dom, void* context,
                 bool for_listener);

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_DOMAIN_H_
