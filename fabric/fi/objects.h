// The fi_* objects of the bypass provider: each embeds its libfabric struct
// first (checked by static_assert), points at a static ops table, and counts
// the objects that depend on it so fi_close answers -FI_EBUSY while any do.
// Internal to fabric/fi; applications see only the libfabric structs.
#ifndef BYPASS_FABRIC_FI_OBJECTS_H_
#define BYPASS_FABRIC_FI_OBJECTS_H_

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "driver/device.h"
#include "fabric/rdm/config.h"
#include "fabric/rdm/rdm.h"
#include "fabric/rdm/rdm.h"
#include "fabric/rdm/inbox.h"
#include "fabric/rdm/types.h"

namespace bypass::fi {

struct Domain;
struct Ep;
struct Cq;
struct Cntr;
struct Av;
struct Eq;
struct Mr;

// What every object has after its libfabric struct: a liveness mark checked
// on every call (a closed object answers -FI_EBADF instead of crashing: its
// shell stays allocated, see Retire) and its dependents.
struct Obj {
  static constexpr uint32_t kLive = 0xb1fa'b71c;
  static constexpr uint32_t kDead = 0xdead'0b1c;
  uint32_t magic = kLive;
  std::atomic<int> refs{0};  // objects that depend on this one
};

// Keeps the shell of a closed object (marked kDead, its heavy parts freed)
// until the provider is cleaned up (libfabric's fi_fini, before it unloads
// the provider; never with the static library), so a call through a stale
// handle answers -FI_EBADF instead of touching freed memory. A few hundred
// bytes per close.
void RetireShell(void* shell, void (*destroy)(void*));
template <class T>
void Retire(T* shell) {
  RetireShell(shell, [](void* p) { delete static_cast<T*>(p); });
}

// The configured devices and engine knobs (FI_BYPASS_*), read once per fabric.
struct Settings {
  std::vector<std::string> devices;  // URIs; each is a domain
  uint16_t base_port = 0;            // endpoints take base_port, base_port + 1, ...
  rdm::EndpointConfig engine;        // sizes and timers every endpoint starts from
};
Settings ReadSettings();

struct Fabric {
  fid_fabric fid;
  Obj obj;
  Settings settings;
  uint32_t api_version = 0;
};

// One device (port) and the endpoints on its queue 0.
struct Domain {
  fid_domain fid;
  Obj obj;
  Fabric* fabric = nullptr;
  std::string uri;
  std::unique_ptr<driver::Device> dev;
  std::unique_ptr<rdm::Port> port;
  // FI_THREAD_SAFE: every call takes mu; other threading levels take nothing.
  bool thread_safe = false;
  std::recursive_mutex mu;
  uint64_t mr_mode = 0;
  fi_av_type av_type = FI_AV_UNSPEC;
  uint64_t caps = 0;
  Eq* eq = nullptr;  // fi_domain_bind: asynchronous events
  std::vector<Ep*> eps;
  std::vector<Mr*> mrs;
  void* hmem_override = nullptr;  // FI_SET_OPS_HMEM_OVERRIDE (host memory only)
  uint64_t last_dgram_tx_ns = 0;  // when a datagram endpoint last sent
};

// Takes the domain lock only in FI_THREAD_SAFE mode.
class DomainGuard {
 public:
  explicit DomainGuard(Domain* d) : mu_(d->thread_safe ? &d->mu : nullptr) {
    if (mu_ != nullptr) mu_->lock();
  }
  ~DomainGuard() {
    if (mu_ != nullptr) mu_->unlock();
  }
  DomainGuard(const DomainGuard&) = delete;
  DomainGuard& operator=(const DomainGuard&) = delete;

 private:
  std::recursive_mutex* mu_;
};

// A FIFO on a power-of-two ring that grows on demand (callers bound it): an
// O(1) size for the room checks of every progress pass, which std::deque
// computes from its node map.
template <class T>
class Ring {
 public:
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  T& front() { return buf_[head_]; }
  void pop_front() {
    head_ = (head_ + 1) & (buf_.size() - 1);
    --n_;
  }
  void push_back(const T& v) {
    if (n_ == buf_.size()) Grow();
    buf_[(head_ + n_) & (buf_.size() - 1)] = v;
    ++n_;
  }
  void clear() {
    std::vector<T>().swap(buf_);
    head_ = 0;
    n_ = 0;
  }

 private:
  void Grow() {
    std::vector<T> b(buf_.empty() ? 16 : 2 * buf_.size());
    for (size_t i = 0; i < n_; ++i) b[i] = buf_[(head_ + i) & (buf_.size() - 1)];
    buf_.swap(b);
    head_ = 0;
  }
  std::vector<T> buf_;
  size_t head_ = 0;
  size_t n_ = 0;
};

// A completion as the CQ stores it: the widest format plus its source.
struct CqEntry {
  fi_cq_tagged_entry e;
  fi_addr_t src;
};
struct CqError {
  fi_cq_err_entry e;
  fi_addr_t src;
  char message[160];
};

struct Cq {
  fid_cq fid;
  Obj obj;
  Domain* domain = nullptr;
  fi_cq_format format = FI_CQ_FORMAT_CONTEXT;
  size_t entry_size = sizeof(fi_cq_entry);
  size_t capacity = 0;
  Ring<CqEntry> entries;  // bounded by capacity
  Ring<CqError> errors;   // bounded by capacity
  char last_error[160] = {};    // err_data of the last readerr without a buffer
  std::vector<Ep*> eps;         // progressed by every read
  std::atomic<bool> signaled{false};

  size_t room() const { return capacity - entries.size(); }
};

struct Cntr {
  fid_cntr fid;
  Obj obj;
  Domain* domain = nullptr;
  std::atomic<uint64_t> value{0};
  std::atomic<uint64_t> errors{0};
  std::vector<Ep*> eps;
};

// One event as fi_eq_read hands it out.
struct EqEvent {
  uint32_t event = 0;
  std::vector<uint8_t> bytes;
  bool error = false;
  fi_eq_err_entry err{};
};

struct Eq {
  fid_eq fid;
  Obj obj;
  Fabric* fabric = nullptr;
  std::mutex mu;
  std::deque<EqEvent> events;
  size_t capacity = 0;
  char last_error[160] = {};
};

struct Av {
  fid_av fid;
  Obj obj;
  Domain* domain = nullptr;
  fi_av_type type = FI_AV_TABLE;
  std::vector<std::optional<rdm::Address>> addrs;  // indexed by fi_addr
  std::vector<Ep*> eps;
  Eq* eq = nullptr;  // fi_av_bind: inserts complete as FI_AV_COMPLETE events
};

struct Mr {
  fid_mr fid;
  Obj obj;
  Domain* domain = nullptr;
  void* addr = nullptr;
  size_t len = 0;
  uint64_t access = 0;
  uint64_t offset = 0;
  Ep* bound = nullptr;  // FI_MR_ENDPOINT: the endpoint it is bound to
  bool enabled = false;
  std::vector<Ep*> registered;  // endpoints whose engine knows the region
  void* context = nullptr;
};

// A send or receive that needs more than the application's context: an
// operation without a CQ entry under FI_SELECTIVE_COMPLETION, or an iov
// of several buffers (gathered into, or scattered from, `bounce`: a copy).
struct OpRecord {
  void* user_context = nullptr;
  bool suppress = false;  // no CQ entry (counters still count it)
  std::vector<uint8_t> bounce;
  std::vector<iovec> scatter;  // receive: where the bounce goes on completion
  uint32_t next_free = UINT32_MAX;
};

// An FI_EP_DGRAM endpoint's state: datagrams straight onto the device
// queue, no engine (no reliability, no order).
struct DgramPosted {
  std::vector<iovec> iov;
  void* context = nullptr;
  bool suppress = false;
};
struct DgramState {
  rdm::Inbox inbox{1024};
  std::deque<DgramPosted> posted;
  bool attached = false;
  uint32_t max_posted = 0;
  uint64_t dropped = 0;  // arrivals with no posted receive, or malformed
};

struct Ep {
  fid_ep fid;
  Obj obj;
  Ep* base = this;  // an alias (fi_ep_alias) points at the endpoint it aliases
  uint64_t tx_op_flags = 0;
  uint64_t rx_op_flags = 0;
  // Everything below lives in the base endpoint only.
  Domain* domain = nullptr;
  fi_ep_type type = FI_EP_RDM;
  uint64_t caps = 0;
  uint16_t udp_port = 0;
  bool port_reserved = false;
  std::optional<uint8_t> dscp;
  size_t min_multi_recv = 0;
  bool min_multi_recv_set = false;
  rdm::EndpointConfig config;
  std::unique_ptr<rdm::Endpoint> rdm;  // after fi_enable (FI_EP_RDM)
  // ProgressEp's buffers for draining the engine, allocated with rdm: on
  // ProgressEp's stack they would be zero-initialised on every pass (about
  // 2 KiB per fi_cq_read).
  static constexpr size_t kDrainBurst = 32;
  std::unique_ptr<rdm::Completion[]> drain;
  std::unique_ptr<rdm::ErrorCompletion> drain_error;
  std::unique_ptr<DgramState> dgram;     // after fi_enable (FI_EP_DGRAM)
  Cq* tx_cq = nullptr;
  Cq* rx_cq = nullptr;
  bool tx_selective = false;
  bool rx_selective = false;
  Cntr* send_cntr = nullptr;
  Cntr* recv_cntr = nullptr;
  Cntr* read_cntr = nullptr;
  Cntr* write_cntr = nullptr;
  Cntr* rem_read_cntr = nullptr;
  Cntr* rem_write_cntr = nullptr;
  Av* av = nullptr;
  Eq* eq = nullptr;
  std::vector<rdm::PeerId> peer_of;  // by fi_addr
  std::vector<fi_addr_t> addr_of;    // by PeerId.slot()
  std::vector<OpRecord> records;
  uint32_t free_record = UINT32_MAX;
  std::vector<Mr*> mrs;  // FI_MR_ENDPOINT regions bound here
};

// Returns a record to its endpoint's free list.
inline void FreeRecord(Ep* ep, OpRecord* r) {
  r->bounce.clear();
  r->scatter.clear();
  r->user_context = nullptr;
  r->suppress = false;
  r->next_free = ep->free_record;
  ep->free_record = static_cast<uint32_t>(r - ep->records.data());
}

static_assert(offsetof(Fabric, fid) == 0);
static_assert(offsetof(Domain, fid) == 0);
static_assert(offsetof(Cq, fid) == 0);
static_assert(offsetof(Cntr, fid) == 0);
static_assert(offsetof(Eq, fid) == 0);
static_assert(offsetof(Av, fid) == 0);
static_assert(offsetof(Mr, fid) == 0);
static_assert(offsetof(Ep, fid) == 0);

// The object behind a fid of class C, or null (null fid, another class, or
// closed: the caller answers -FI_EINVAL or -FI_EBADF, see Check).
template <class T>
T* As(const void* fid, size_t fclass) {
  if (fid == nullptr) return nullptr;
  auto* f = static_cast<const ::fid*>(fid);
  if (f->fclass != fclass) return nullptr;
  T* t = const_cast<T*>(reinterpret_cast<const T*>(fid));
  return t->obj.magic == Obj::kLive ? t : nullptr;
}
// -FI_EINVAL for a null or foreign fid, -FI_EBADF for a closed one.
int BadFid(const void* fid, size_t fclass);

inline Fabric* AsFabric(const void* f) { return As<Fabric>(f, FI_CLASS_FABRIC); }
inline Domain* AsDomain(const void* f) { return As<Domain>(f, FI_CLASS_DOMAIN); }
inline Cq* AsCq(const void* f) { return As<Cq>(f, FI_CLASS_CQ); }
inline Cntr* AsCntr(const void* f) { return As<Cntr>(f, FI_CLASS_CNTR); }
inline Eq* AsEq(const void* f) { return As<Eq>(f, FI_CLASS_EQ); }
inline Av* AsAv(const void* f) { return As<Av>(f, FI_CLASS_AV); }
inline Mr* AsMr(const void* f) { return As<Mr>(f, FI_CLASS_MR); }
inline Ep* AsEp(const void* f) { return As<Ep>(f, FI_CLASS_EP); }

// Object constructors (the ops tables live beside them).
int OpenFabric(fi_fabric_attr* attr, fid_fabric** fabric, void* context);
int OpenDomain(fid_fabric* fabric, fi_info* info, fid_domain** dom, void* context);
int OpenEq(fid_fabric* fabric, fi_eq_attr* attr, fid_eq** eq, void* context);
int OpenCq(fid_domain* domain, fi_cq_attr* attr, fid_cq** cq, void* context);
int OpenCntr(fid_domain* domain, fi_cntr_attr* attr, fid_cntr** cntr, void* context);
int OpenAv(fid_domain* domain, fi_av_attr* attr, fid_av** av, void* context);
int OpenEp(fid_domain* domain, fi_info* info, fid_ep** ep, void* context);
int RegMr(fid* domain, const fi_mr_attr* attr, uint64_t flags, fid_mr** mr);

// Engine results and statuses as negative fi_errno values.
int FromStatus(const absl::Status& s);

// Manual progress: one engine pass of ep, then its completions into its
// CQs and counters. REQUIRES: the domain guard is held; ep enabled.
void ProgressEp(Ep* ep);
// Adds an event to eq (cold path); false when it is full.
bool EqPush(Eq* eq, EqEvent ev);
// FI_EP_DGRAM (dgram.cc). REQUIRES: the domain guard is held.
int EnableDgram(Ep* ep);
void CloseDgram(Ep* ep);
void ProgressDgram(Ep* ep);
ssize_t DgramSend(Ep* ep, const iovec* iov, size_t count, fi_addr_t dest, void* context,
                  uint64_t flags, bool inject);
ssize_t DgramRecv(Ep* ep, const iovec* iov, size_t count, void* context, uint64_t flags);
bool DgramCancel(Ep* ep, void* context);
inline bool Enabled(const Ep* ep) { return ep->rdm != nullptr || ep->dgram != nullptr; }

// Wires an AV entry into an enabled endpoint's engine.
int AddPeerToEp(Ep* ep, fi_addr_t fa, const rdm::Address& a);
// Registers mr with ep's engine (remote access regions).
int RegisterMrWithEp(Mr* mr, Ep* ep);
void DeregisterMrFromEp(Mr* mr, Ep* ep);

// Unsupported calls, with the signatures of the ops tables they fill.
int NoSysOpsOpen(fid*, const char*, uint64_t, void**, void*);
int NoSysOpsSet(fid*, const char*, uint64_t, void*, void*);
int NoSysTostr(const fid*, char*, size_t);

template <class T>
void EraseOne(std::vector<T>& v, T x) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == x) {
      v[i] = v.back();
      v.pop_back();
      return;
    }
  }
}

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_OBJECTS_H_
