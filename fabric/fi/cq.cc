// Completion queues and counters, and manual progress: reading either runs
// the engine of every endpoint bound to it and moves that endpoint's
// completions into its CQs and counters.
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "driver/clock.h"
#include "fabric/fi/objects.h"
#include "fabric/fi/services.h"

namespace bypass::fi {
namespace {

constexpr size_t kDefaultCqSize = 1024;
constexpr size_t kMaxCqSize = 1u << 20;

uint64_t FiFlags(uint64_t f) {
  uint64_t out = 0;
  if (f & rdm::kCompSend) out |= FI_SEND;
  if (f & rdm::kCompRecv) out |= FI_RECV;
  if (f & rdm::kCompMsg) out |= FI_MSG;
  if (f & rdm::kCompTagged) out |= FI_TAGGED;
  if (f & rdm::kCompRemoteData) out |= FI_REMOTE_CQ_DATA;
  if (f & rdm::kCompRma) out |= FI_RMA;
  if (f & rdm::kCompRead) out |= FI_READ;
  if (f & rdm::kCompWrite) out |= FI_WRITE;
  if (f & rdm::kCompRemoteWrite) out |= FI_REMOTE_WRITE;
  if (f & rdm::kCompMultiRecv) out |= FI_MULTI_RECV;
  return out;
}

bool TxSide(uint64_t f) { return (f & (rdm::kCompSend | rdm::kCompRead | rdm::kCompWrite)) != 0; }

OpRecord* RecordOf(Ep* ep, void* ctx) {
  if (ep->records.empty()) return nullptr;
  const auto p = reinterpret_cast<uintptr_t>(ctx);
  const auto lo = reinterpret_cast<uintptr_t>(ep->records.data());
  if (p < lo || p >= lo + ep->records.size() * sizeof(OpRecord)) return nullptr;
  return static_cast<OpRecord*>(ctx);
}


// The application's view of an engine completion's context, scattering a
// bounce buffer where there is one. Sets *suppress for CQ-less operations.
void* Resolve(Ep* ep, const rdm::Completion& c, bool* suppress, size_t* len) {
  OpRecord* r = RecordOf(ep, c.context);
  if (r == nullptr) return c.context;
  void* user = r->user_context;
  *suppress = r->suppress;
  if (!r->scatter.empty()) {
    size_t done = 0;
    for (const iovec& v : r->scatter) {
      const size_t n = std::min(v.iov_len, std::min(*len, r->bounce.size()) - done);
      std::memcpy(v.iov_base, r->bounce.data() + done, n);
      done += n;
      if (done == std::min(*len, r->bounce.size())) break;
    }
  }
  FreeRecord(ep, r);
  return user;
}

fi_addr_t SourceOf(const Ep* ep, rdm::PeerId p) {
  const uint32_t slot = p.slot();
  return slot < ep->addr_of.size() ? ep->addr_of[slot] : FI_ADDR_NOTAVAIL;
}

void Count(Cntr* c) {
  if (c != nullptr) c->value.fetch_add(1, std::memory_order_relaxed);
}
void CountError(Cntr* c) {
  if (c != nullptr) c->errors.fetch_add(1, std::memory_order_relaxed);
}

void CountCompletion(Ep* ep, uint64_t f, bool error) {
  auto count = error ? CountError : Count;
  if (f & rdm::kCompSend) count(ep->send_cntr);
  if (f & rdm::kCompRecv) count(ep->recv_cntr);
  if (f & rdm::kCompRead) count(ep->read_cntr);
  if (f & rdm::kCompWrite) count(ep->write_cntr);
  if (f & rdm::kCompRemoteWrite) count(ep->rem_write_cntr);
}

void Deliver(Ep* ep, const rdm::Completion& c) {
  bool suppress = false;
  size_t len = c.len;
  void* user = Resolve(ep, c, &suppress, &len);
  CountCompletion(ep, c.flags, false);
  const bool tx = TxSide(c.flags);
  Cq* cq = tx ? ep->tx_cq : ep->rx_cq;
  if (cq == nullptr || suppress) return;
  CqEntry e{};
  e.e.op_context = user;
  e.e.flags = FiFlags(c.flags);
  e.e.len = c.len;
  e.e.buf = c.buf;
  e.e.data = c.data;
  e.e.tag = c.tag;
  e.src = tx ? FI_ADDR_NOTAVAIL : SourceOf(ep, c.source);
  cq->entries.push_back(e);
}

void DeliverError(Ep* ep, const rdm::ErrorCompletion& ec) {
  bool suppress = false;
  size_t len = ec.op.len;
  void* user = Resolve(ep, ec.op, &suppress, &len);
  CountCompletion(ep, ec.op.flags, true);
  const bool tx = TxSide(ec.op.flags);
  Cq* cq = tx ? ep->tx_cq : ep->rx_cq;
  BYPASS_FI_DBG(FI_LOG_CQ, "operation failed (errno %d): %s\n", ec.err, ec.message);
  if (cq == nullptr) return;  // errors are reported even for selective operations
  CqError e{};
  e.e.op_context = user;
  e.e.flags = FiFlags(ec.op.flags);
  e.e.len = ec.op.len;
  e.e.buf = ec.op.buf;
  e.e.data = ec.op.data;
  e.e.tag = ec.op.tag;
  e.e.olen = ec.olen;
  e.e.err = ec.err == EMSGSIZE && ec.olen > 0 ? FI_ETRUNC : ec.err;
  e.e.prov_errno = ec.err;
  e.src = tx ? FI_ADDR_NOTAVAIL : SourceOf(ep, ec.op.source);
  std::snprintf(e.message, sizeof(e.message), "%s", ec.message);
  cq->errors.push_back(e);
}

size_t RoomFor(const Cq* cq, bool errors) {
  if (cq == nullptr) return Ep::kDrainBurst;
  return errors ? cq->capacity - cq->errors.size() : cq->room();
}

// ---- completion queues ----

int CqClose(fid* f) {
  Cq* cq = AsCq(f);
  if (cq == nullptr) return BadFid(f, FI_CLASS_CQ);
  Domain* d = cq->domain;
  DomainGuard g(d);
  if (cq->obj.refs.load() > 0) return -FI_EBUSY;
  cq->entries.clear();
  cq->errors.clear();
  d->obj.refs.fetch_sub(1);
  cq->obj.magic = Obj::kDead;
  Retire(cq);
  return 0;
}

int CqControl(fid* f, int command, void*) {
  if (AsCq(f) == nullptr) return BadFid(f, FI_CLASS_CQ);
  (void)command;
  return -FI_ENOSYS;  // no wait object to hand out
}

int NoBind(fid*, fid*, uint64_t) { return -FI_ENOSYS; }

fi_ops g_cq_fi_ops = {
    .size = sizeof(fi_ops),
    .close = CqClose,
    .bind = NoBind,
    .control = CqControl,
    .ops_open = NoSysOpsOpen,
    .tostr = NoSysTostr,
    .ops_set = NoSysOpsSet,
};

void ProgressAll(const std::vector<Ep*>& eps) {
  for (Ep* ep : eps) {
    if (ep->rdm != nullptr) {
      ProgressEp(ep);
    } else if (ep->dgram != nullptr) {
      ProgressDgram(ep);
    }
  }
}

ssize_t CqReadLocked(Cq* cq, void* buf, size_t count, fi_addr_t* src) {
  if (cq->entries.size() < count) ProgressAll(cq->eps);
  if (!cq->errors.empty()) return -FI_EAVAIL;
  if (cq->entries.empty()) return -FI_EAGAIN;
  const size_t n = std::min(count, cq->entries.size());
  auto* out = static_cast<uint8_t*>(buf);
  for (size_t i = 0; i < n; ++i) {
    const CqEntry& e = cq->entries.front();
    std::memcpy(out + i * cq->entry_size, &e.e, cq->entry_size);
    if (src != nullptr) src[i] = e.src;
    cq->entries.pop_front();
  }
  return static_cast<ssize_t>(n);
}

ssize_t CqReadFrom(fid_cq* f, void* buf, size_t count, fi_addr_t* src) {
  Cq* cq = AsCq(f);
  if (cq == nullptr) return BadFid(f, FI_CLASS_CQ);
  if (buf == nullptr && count > 0) return -FI_EINVAL;
  DomainGuard g(cq->domain);
  if (count == 0) {
    ProgressAll(cq->eps);
    return cq->errors.empty() ? -FI_EAGAIN : -FI_EAVAIL;
  }
  return CqReadLocked(cq, buf, count, src);
}

ssize_t CqRead(fid_cq* f, void* buf, size_t count) { return CqReadFrom(f, buf, count, nullptr); }

ssize_t CqReadErr(fid_cq* f, fi_cq_err_entry* buf, uint64_t flags) {
  Cq* cq = AsCq(f);
  if (cq == nullptr) return BadFid(f, FI_CLASS_CQ);
  if (buf == nullptr) return -FI_EINVAL;
  if (flags != 0) return -FI_EBADFLAGS;
  DomainGuard g(cq->domain);
  if (cq->errors.empty()) ProgressAll(cq->eps);
  if (cq->errors.empty()) return -FI_EAGAIN;
  const CqError& e = cq->errors.front();
  void* user_data = buf->err_data;
  const size_t user_size = buf->err_data_size;
  *buf = e.e;
  const size_t msg_len = std::strlen(e.message) + 1;
  if (user_size > 0 && user_data != nullptr) {
    // The application's buffer (API 1.5 and later): as much as fits.
    const size_t n = std::min(user_size, msg_len);
    std::memcpy(user_data, e.message, n);
    static_cast<char*>(user_data)[n - 1] = '\0';
    buf->err_data = user_data;
    buf->err_data_size = n;
  } else {
    // Ours, valid until the next readerr on this CQ.
    std::memcpy(cq->last_error, e.message, msg_len);
    buf->err_data = cq->last_error;
    buf->err_data_size = msg_len;
  }
  cq->errors.pop_front();
  return 1;
}

ssize_t CqSReadFrom(fid_cq* f, void* buf, size_t count, fi_addr_t* src, const void* cond,
                    int timeout) {
  Cq* cq = AsCq(f);
  if (cq == nullptr) return BadFid(f, FI_CLASS_CQ);
  if (buf == nullptr || count == 0) return -FI_EINVAL;
  (void)cond;  // FI_CQ_COND_NONE only: any completion ends the wait
  const driver::Clock& clock = driver::SteadyClock::Get();
  const uint64_t deadline =
      timeout < 0 ? UINT64_MAX : clock.NowNs() + static_cast<uint64_t>(timeout) * 1'000'000;
  for (;;) {
    ssize_t ret;
    {
      DomainGuard g(cq->domain);
      ret = CqReadLocked(cq, buf, count, src);
    }
    if (ret != -FI_EAGAIN) return ret;
    if (cq->signaled.exchange(false)) return -FI_EAGAIN;
    if (clock.NowNs() >= deadline) return -FI_EAGAIN;
    if (cq->domain->thread_safe) sched_yield();  // let other threads take the lock
  }
}

ssize_t CqSRead(fid_cq* f, void* buf, size_t count, const void* cond, int timeout) {
  return CqSReadFrom(f, buf, count, nullptr, cond, timeout);
}

int CqSignal(fid_cq* f) {
  Cq* cq = AsCq(f);
  if (cq == nullptr) return BadFid(f, FI_CLASS_CQ);
  cq->signaled.store(true);
  return 0;
}

const char* CqStrerror(fid_cq* f, int prov_errno, const void* err_data, char* buf, size_t len) {
  (void)f;  // err_data carries everything: it is our message
  return ErrorText(prov_errno, err_data, buf, len);
}

fi_ops_cq g_cq_ops = {
    .size = sizeof(fi_ops_cq),
    .read = CqRead,
    .readfrom = CqReadFrom,
    .readerr = CqReadErr,
    .sread = CqSRead,
    .sreadfrom = CqSReadFrom,
    .signal = CqSignal,
    .strerror = CqStrerror,
};

// ---- counters ----

int CntrClose(fid* f) {
  Cntr* c = AsCntr(f);
  if (c == nullptr) return BadFid(f, FI_CLASS_CNTR);
  Domain* d = c->domain;
  DomainGuard g(d);
  if (c->obj.refs.load() > 0) return -FI_EBUSY;
  d->obj.refs.fetch_sub(1);
  c->obj.magic = Obj::kDead;
  Retire(c);
  return 0;
}

int CntrControl(fid* f, int, void*) {
  if (AsCntr(f) == nullptr) return BadFid(f, FI_CLASS_CNTR);
  return -FI_ENOSYS;
}

fi_ops g_cntr_fi_ops = {
    .size = sizeof(fi_ops),
    .close = CntrClose,
    .bind = NoBind,
    .control = CntrControl,
    .ops_open = NoSysOpsOpen,
    .tostr = NoSysTostr,
    .ops_set = NoSysOpsSet,
};

// fi_cntr_read has no error return: a bad handle reads 0.
uint64_t CntrRead(fid_cntr* f) {
  Cntr* c = AsCntr(f);
  if (c == nullptr) return 0;
  DomainGuard g(c->domain);
  ProgressAll(c->eps);
  return c->value.load();
}

uint64_t CntrReadErr(fid_cntr* f) {
  Cntr* c = AsCntr(f);
  if (c == nullptr) return 0;
  DomainGuard g(c->domain);
  ProgressAll(c->eps);
  return c->errors.load();
}

int CntrAdd(fid_cntr* f, uint64_t v) {
  Cntr* c = AsCntr(f);
  if (c == nullptr) return BadFid(f, FI_CLASS_CNTR);
  c->value.fetch_add(v);
  return 0;
}
int CntrSet(fid_cntr* f, uint64_t v) {
  Cntr* c = AsCntr(f);
  if (c == nullptr) return BadFid(f, FI_CLASS_CNTR);
  c->value.store(v);
  return 0;
}
int CntrAddErr(fid_cntr* f, uint64_t v) {
  Cntr* c = AsCntr(f);
  if (c == nullptr) return BadFid(f, FI_CLASS_CNTR);
  c->errors.fetch_add(v);
  return 0;
}
int CntrSetErr(fid_cntr* f, uint64_t v) {
  Cntr* c = AsCntr(f);
  if (c == nullptr) return BadFid(f, FI_CLASS_CNTR);
  c->errors.store(v);
  return 0;
}

// Progresses until the counter reaches threshold (0), an error is counted
// (-FI_EAVAIL) or timeout milliseconds pass (-FI_ETIMEDOUT; -1: forever).
int CntrWait(fid_cntr* f, uint64_t threshold, int timeout) {
  Cntr* c = AsCntr(f);
  if (c == nullptr) return BadFid(f, FI_CLASS_CNTR);
  const driver::Clock& clock = driver::SteadyClock::Get();
  const uint64_t deadline =
      timeout < 0 ? UINT64_MAX : clock.NowNs() + static_cast<uint64_t>(timeout) * 1'000'000;
  const uint64_t errors = c->errors.load();
  for (;;) {
    {
      DomainGuard g(c->domain);
      ProgressAll(c->eps);
    }
    if (c->value.load() >= threshold) return 0;
    if (c->errors.load() != errors) return -FI_EAVAIL;
    if (clock.NowNs() >= deadline) return -FI_ETIMEDOUT;
    if (c->domain->thread_safe) sched_yield();
  }
}

fi_ops_cntr g_cntr_ops = {
    .size = sizeof(fi_ops_cntr),
    .read = CntrRead,
    .readerr = CntrReadErr,
    .add = CntrAdd,
    .set = CntrSet,
    .wait = CntrWait,
    .adderr = CntrAddErr,
    .seterr = CntrSetErr,
};

bool BusyPollWait(fi_wait_obj w) {
  return w == FI_WAIT_NONE || w == FI_WAIT_UNSPEC || w == FI_WAIT_YIELD;
}

}  // namespace

void ProgressEp(Ep* ep) {
  // One pass. What a peer waits for to complete a send is acknowledged in
  // the same pass (its last packet asks, see ep_ops.cc), so that ACK is out
  // before the application sees the completion and can stop progressing
  // (fi_pingpong does, before exiting).
  ep->rdm->Progress();
  rdm::Completion* const comps = ep->drain.get();
  // Each completion adds at most one entry to one CQ: the room, read once,
  // only shrinks by what was delivered.
  size_t room = std::min(RoomFor(ep->tx_cq, false), RoomFor(ep->rx_cq, false));
  while (room > 0) {
    const size_t want = std::min(Ep::kDrainBurst, room);
    const size_t n = ep->rdm->PollCompletions({comps, want});
    for (size_t i = 0; i < n; ++i) Deliver(ep, comps[i]);
    if (n < want) break;
    room -= n;
  }
  rdm::ErrorCompletion* const err = ep->drain_error.get();
  while (RoomFor(ep->tx_cq, true) > 0 && RoomFor(ep->rx_cq, true) > 0 &&
         ep->rdm->PollErrors({err, 1}) == 1) {
    DeliverError(ep, *err);
  }
}

int OpenCq(fid_domain* domain, fi_cq_attr* attr, fid_cq** out, void* context) {
  Domain* d = AsDomain(domain);
  if (d == nullptr) return BadFid(domain, FI_CLASS_DOMAIN);
  if (attr == nullptr || out == nullptr) return -FI_EINVAL;
  size_t entry_size;
  fi_cq_format format = attr->format == FI_CQ_FORMAT_UNSPEC ? FI_CQ_FORMAT_CONTEXT : attr->format;
  switch (format) {
    case FI_CQ_FORMAT_CONTEXT:
      entry_size = sizeof(fi_cq_entry);
      break;
    case FI_CQ_FORMAT_MSG:
      entry_size = sizeof(fi_cq_msg_entry);
      break;
    case FI_CQ_FORMAT_DATA:
      entry_size = sizeof(fi_cq_data_entry);
      break;
    case FI_CQ_FORMAT_TAGGED:
      entry_size = sizeof(fi_cq_tagged_entry);
      break;
    default:
      return -FI_ENOSYS;
  }
  if (!BusyPollWait(attr->wait_obj)) {
    BYPASS_FI_WARN(FI_LOG_CQ, "CQ wait objects other than FI_WAIT_NONE/UNSPEC/YIELD are not "
                   "supported: progress is manual, fi_cq_sread polls\n");
    return -FI_ENOSYS;
  }
  if (attr->size > kMaxCqSize) return -FI_EINVAL;
  if ((attr->flags & ~static_cast<uint64_t>(FI_AFFINITY)) != 0) return -FI_EBADFLAGS;
  auto cq = std::make_unique<Cq>();
  std::memset(&cq->fid, 0, sizeof(cq->fid));
  cq->fid.fid.fclass = FI_CLASS_CQ;
  cq->fid.fid.context = context;
  cq->fid.fid.ops = &g_cq_fi_ops;
  cq->fid.ops = &g_cq_ops;
  cq->domain = d;
  cq->format = format;
  cq->entry_size = entry_size;
  cq->capacity = attr->size == 0 ? kDefaultCqSize : attr->size;
  d->obj.refs.fetch_add(1);
  *out = &cq.release()->fid;
  return 0;
}

int OpenCntr(fid_domain* domain, fi_cntr_attr* attr, fid_cntr** out, void* context) {
  Domain* d = AsDomain(domain);
  if (d == nullptr) return BadFid(domain, FI_CLASS_DOMAIN);
  if (out == nullptr) return -FI_EINVAL;
  if (attr != nullptr) {
    if (attr->events != FI_CNTR_EVENTS_COMP) return -FI_ENOSYS;
    if (!BusyPollWait(attr->wait_obj)) return -FI_ENOSYS;
    if (attr->flags != 0) return -FI_EBADFLAGS;
  }
  auto c = std::make_unique<Cntr>();
  std::memset(&c->fid, 0, sizeof(c->fid));
  c->fid.fid.fclass = FI_CLASS_CNTR;
  c->fid.fid.context = context;
  c->fid.fid.ops = &g_cntr_fi_ops;
  c->fid.ops = &g_cntr_ops;
  c->domain = d;
  d->obj.refs.fetch_add(1);
  *out = &c.release()->fid;
  return 0;
}

}  // namespace bypass::fi
