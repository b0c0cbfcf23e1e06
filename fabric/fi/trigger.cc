// Triggered operations and deferred work: the queue, the firing, and the
// issue of each operation through its endpoint's own data call (trigger.h
// gives the locking rule).
#include "fabric/fi/trigger.h"

#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_trigger.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <deque>
#include <mutex>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "fabric/fi/cntr.h"
#include "fabric/fi/cq.h"
#include "fabric/fi/domain.h"
#include "fabric/fi/ep.h"
#include "fabric/fi/info/info.h"
#include "fabric/fi/progress.h"
#include "fabric/fi/services.h"

namespace bypass::fi {

// One operation waiting for its counter: a copy of its message (the
// caller's struct and arrays need not outlive the call) or a counter
// operation.
struct Work {
  Cntr* cntr = nullptr;  // the triggering counter (referenced while queued)
  uint64_t threshold = 0;
  uint64_t seq = 0;          // posting order, for equal thresholds
  bool with_errors = false;  // deferred work: value plus errors reach it
  fi_deferred_work* dw = nullptr;  // deferred work: the request
  int op = FI_OP_SEND;             // enum fi_op_type
  Ep* handle = nullptr;            // the endpoint handle given (referenced)
  uint64_t flags = 0;
  std::vector<iovec> iov;
  std::vector<void*> desc;  // empty: none given
  std::vector<fi_rma_iov> rma;
  fi_addr_t addr = FI_ADDR_UNSPEC;
  uint64_t tag = 0;
  uint64_t ignore = 0;
  uint64_t data = 0;
  void* context = nullptr;  // the operation's context (its CQ entry's)
  Cntr* done = nullptr;     // deferred work: its completion counter
  Cntr* target = nullptr;   // FI_OP_CNTR_SET / FI_OP_CNTR_ADD (referenced)
  uint64_t value = 0;
  // FI_OP_ATOMIC, FI_OP_FETCH_ATOMIC, FI_OP_COMPARE_ATOMIC: the message's
  // operands and remote target, and the result and compare buffers.
  std::vector<fi_ioc> ioc;
  std::vector<fi_rma_ioc> rma_ioc;
  std::vector<fi_ioc> result;
  std::vector<void*> result_desc;
  std::vector<fi_ioc> compare;
  std::vector<void*> compare_desc;
  fi_datatype datatype = FI_UINT8;
  fi_op atomic_op = FI_SUM;
};
using WorkPtr = std::unique_ptr<Work>;

struct TriggerQueue {
  std::mutex mu;  // a leaf: see trigger.h
  // By counter, ordered by (threshold, seq).
  absl::flat_hash_map<Cntr*, std::vector<WorkPtr>> waiting;
  std::deque<WorkPtr> ready;  // due, not issued yet, in order
  uint64_t next_seq = 0;
  uint64_t pushed = 0;  // bumped by every move to `ready` (a drainer looks again)
  std::atomic<size_t> ready_count{0};
  std::atomic<bool> draining{false};
};

std::shared_ptr<TriggerQueue> NewTriggerQueue() { return std::make_shared<TriggerQueue>(); }

bool TriggersReady(const Domain* d) {
  return d->triggers != nullptr && d->triggers->ready_count.load(std::memory_order_acquire) != 0;
}

namespace {

bool IsAtomic(int op) {
  return op == FI_OP_ATOMIC || op == FI_OP_FETCH_ATOMIC || op == FI_OP_COMPARE_ATOMIC;
}
bool IsTx(int op) {
  return op == FI_OP_SEND || op == FI_OP_TSEND || op == FI_OP_READ || op == FI_OP_WRITE ||
         IsAtomic(op);
}
bool IsCntrOp(int op) { return op == FI_OP_CNTR_SET || op == FI_OP_CNTR_ADD; }

// Releases what queued work holds: its handle and counters.
void Release(Work& w) {
  if (w.handle != nullptr) w.handle->obj.refs.fetch_sub(1);
  if (w.cntr != nullptr) w.cntr->obj.refs.fetch_sub(1);
  if (w.target != nullptr) w.target->obj.refs.fetch_sub(1);
  if (w.done != nullptr) w.done->obj.refs.fetch_sub(1);
}

bool Live(const Cntr* c) { return c != nullptr && c->obj.magic == Obj::kLive; }

// An endpoint lock for issuing: taken (may_block) or tried.
class IssueLock {
 public:
  IssueLock(Ep* base, bool may_block) {
    DomainLock& t = base->lock->Target();
    if (!t.thread_safe) {
      held_ = true;
      return;
    }
    held_ = may_block ? (t.mu.lock(), true) : t.mu.try_lock();
    if (held_) mu_ = &t.mu;
  }
  ~IssueLock() {
    if (mu_ != nullptr) mu_->unlock();
  }
  IssueLock(const IssueLock&) = delete;
  IssueLock& operator=(const IssueLock&) = delete;
  bool held() const { return held_; }

 private:
  NestedCall nested_;  // the issued call's watch waits for the caller's (progress.h)
  bool held_ = false;
  DomainMutex* mu_ = nullptr;
};

// A CQ error entry for w on its endpoint (the CQ of its side) and one on
// its counter of that class. REQUIRES: the endpoint's lock.
void ReportToEp(Ep* base, const Work& w, int err, const char* what) {
  const bool tx = IsTx(w.op);
  Cntr* c = nullptr;
  switch (w.op) {
    case FI_OP_SEND:
    case FI_OP_TSEND: c = base->cntrs.send; break;
    case FI_OP_READ:
    case FI_OP_FETCH_ATOMIC:
    case FI_OP_COMPARE_ATOMIC: c = base->cntrs.read; break;
    case FI_OP_WRITE:
    case FI_OP_ATOMIC: c = base->cntrs.write; break;
    default: c = base->cntrs.recv; break;
  }
  CountErrorEvent(c);
  Cq* cq = tx ? base->cqs.tx : base->cqs.rx;
  if (cq == nullptr) return;
  if (cq->errors.size() >= cq->capacity) {
    BYPASS_FI_WARN(FI_LOG_CQ, "CQ full: the failure of a triggered operation is not reported\n");
    return;
  }
  CqError e{};
  e.e.op_context = w.context;
  e.e.flags = (w.op == FI_OP_SEND || w.op == FI_OP_RECV)     ? FI_MSG
              : (w.op == FI_OP_TSEND || w.op == FI_OP_TRECV) ? FI_TAGGED
              : IsAtomic(w.op)                               ? FI_ATOMIC
                                                             : FI_RMA;
  e.e.flags |= (w.op == FI_OP_READ || w.op == FI_OP_FETCH_ATOMIC ||
                w.op == FI_OP_COMPARE_ATOMIC)                      ? FI_READ
               : (w.op == FI_OP_WRITE || w.op == FI_OP_ATOMIC)     ? FI_WRITE
               : tx                                                ? FI_SEND
                                                                   : FI_RECV;
  for (const iovec& v : w.iov) e.e.len += v.iov_len;
  e.e.err = err;
  e.e.prov_errno = err;
  e.src = FI_ADDR_NOTAVAIL;
  std::snprintf(e.message, sizeof(e.message), "%s", what);
  cq->errors.push_back(e);
  cq->wait.Signal();
}

// w could not be issued (err, not -FI_EAGAIN) or was canceled
// (FI_ECANCELED): a triggered operation completes in error at its
// endpoint; deferred work counts an error on its completion counter and
// reports at the endpoint only when it asked (FI_COMPLETION).
// REQUIRES: the endpoint's lock (none for counter operations).
void Fail(Work& w, int err) {
  if (IsCntrOp(w.op)) return;  // nothing to report it to
  const char* what = err == FI_ECANCELED ? "triggered operation canceled"
                                         : "a triggered operation failed to post";
  if (err != FI_ECANCELED) {
    BYPASS_FI_WARN(FI_LOG_EP_DATA, "%s: fi_errno %d\n", what, err);
  }
  if (w.dw != nullptr) {
    if (Live(w.done)) CountErrorEvent(w.done);
    if (!(w.flags & FI_COMPLETION)) return;
  }
  ReportToEp(w.handle->base, w, err, what);
}

// Posts w through its endpoint's data call (FI_TRIGGER cleared).
// REQUIRES: the endpoint's lock (none for counter operations).
ssize_t Post(Work& w) {
  if (w.op == FI_OP_CNTR_ADD) return fi_cntr_add(&w.target->fid, w.value);
  if (w.op == FI_OP_CNTR_SET) return fi_cntr_set(&w.target->fid, w.value);
  fid_ep* ep = &w.handle->fid;
  // A deferred operation is posted with its request as context, which
  // FinishDeferred recognizes at completion.
  void* ctx = w.dw != nullptr ? static_cast<void*>(w.dw) : w.context;
  void** desc = w.desc.empty() ? nullptr : w.desc.data();
  const uint64_t flags = w.flags & ~static_cast<uint64_t>(FI_TRIGGER);
  switch (w.op) {
    case FI_OP_SEND:
    case FI_OP_RECV: {
      const fi_msg m{w.iov.data(), desc, w.iov.size(), w.addr, ctx, w.data};
      return w.op == FI_OP_SEND ? fi_sendmsg(ep, &m, flags) : fi_recvmsg(ep, &m, flags);
    }
    case FI_OP_TSEND:
    case FI_OP_TRECV: {
      const fi_msg_tagged m{w.iov.data(), desc, w.iov.size(), w.addr, w.tag, w.ignore, ctx, w.data};
      return w.op == FI_OP_TSEND ? fi_tsendmsg(ep, &m, flags) : fi_trecvmsg(ep, &m, flags);
    }
    case FI_OP_ATOMIC:
    case FI_OP_FETCH_ATOMIC:
    case FI_OP_COMPARE_ATOMIC: {
      const fi_msg_atomic m{w.ioc.data(), desc,       w.ioc.size(), w.addr, w.rma_ioc.data(),
                            w.rma_ioc.size(), w.datatype, w.atomic_op, ctx, w.data};
      void** rdesc = w.result_desc.empty() ? nullptr : w.result_desc.data();
      void** cdesc = w.compare_desc.empty() ? nullptr : w.compare_desc.data();
      if (w.op == FI_OP_ATOMIC) return fi_atomicmsg(ep, &m, flags);
      if (w.op == FI_OP_FETCH_ATOMIC) {
        return fi_fetch_atomicmsg(ep, &m, w.result.data(), rdesc, w.result.size(), flags);
      }
      return fi_compare_atomicmsg(ep, &m, w.compare.data(), cdesc, w.compare.size(),
                                  w.result.data(), rdesc, w.result.size(), flags);
    }
    default: {
      const fi_msg_rma m{w.iov.data(), desc, w.iov.size(), w.addr, w.rma.data(), w.rma.size(),
                         ctx, w.data};
      return w.op == FI_OP_WRITE ? fi_writemsg(ep, &m, flags) : fi_readmsg(ep, &m, flags);
    }
  }
}

// Issues w: 0 done (posted, or failed and reported), -FI_EAGAIN to retry
// (the lock was busy or the post answered -FI_EAGAIN).
ssize_t Issue(Work& w, bool may_block) {
  if (IsCntrOp(w.op)) {
    Post(w);
    return 0;
  }
  Ep* base = w.handle->base;
  IssueLock lock(base, may_block);
  if (!lock.held()) return -FI_EAGAIN;
  if (w.dw != nullptr) {
    base->deferred[w.dw] = {w.context, Live(w.done) ? w.done : nullptr,
                            (w.flags & FI_COMPLETION) != 0};
  }
  const ssize_t r = Post(w);
  if (r == 0) return 0;
  if (w.dw != nullptr) base->deferred.erase(w.dw);
  if (r == -FI_EAGAIN) return r;
  Fail(w, static_cast<int>(-r));
  return 0;
}

// Moves c's work whose condition holds to the ready list, in order.
// REQUIRES: q.mu.
void MoveDue(TriggerQueue& q, Cntr* c) {
  auto it = q.waiting.find(c);
  if (it == q.waiting.end()) return;
  const uint64_t value = c->value.load();
  const uint64_t errors = c->errors.load();
  std::vector<WorkPtr>& v = it->second;
  size_t kept = 0;
  size_t moved = 0;
  for (WorkPtr& w : v) {
    if ((w->with_errors ? value + errors : value) >= w->threshold) {
      q.ready.push_back(std::move(w));
      ++moved;
    } else {
      v[kept++] = std::move(w);
    }
  }
  v.resize(kept);
  if (kept == 0) q.waiting.erase(it);
  if (moved == 0) return;
  c->triggers.fetch_sub(moved);
  ++q.pushed;
  q.ready_count.store(q.ready.size(), std::memory_order_release);
}

// One pass over the ready list: issues each work in order, keeping those
// that must wait (and, behind them, later work for the same endpoint).
// Returns the `pushed` generation it took the list at.
uint64_t DrainOnce(TriggerQueue& q, bool may_block) {
  std::deque<WorkPtr> take;
  uint64_t gen;
  {
    std::lock_guard<std::mutex> l(q.mu);
    take.swap(q.ready);
    gen = q.pushed;
  }
  std::vector<WorkPtr> kept;
  std::vector<const Ep*> blocked;
  for (WorkPtr& w : take) {
    const Ep* base = w->handle != nullptr ? w->handle->base : nullptr;
    if (base != nullptr && std::find(blocked.begin(), blocked.end(), base) != blocked.end()) {
      kept.push_back(std::move(w));
      continue;
    }
    if (Issue(*w, may_block) == -FI_EAGAIN) {
      blocked.push_back(base);
      kept.push_back(std::move(w));
      continue;
    }
    Release(*w);
  }
  if (!kept.empty()) {
    BYPASS_FI_DBG(FI_LOG_EP_DATA, "%zu triggered operations wait for a busy endpoint "
                  "(-FI_EAGAIN or its lock)\n", kept.size());
  }
  std::lock_guard<std::mutex> l(q.mu);
  // What was kept goes ahead of what became due meanwhile.
  for (auto it = kept.rbegin(); it != kept.rend(); ++it) q.ready.push_front(std::move(*it));
  q.ready_count.store(q.ready.size(), std::memory_order_release);
  return gen;
}

void Drain(TriggerQueue& q, bool may_block) {
  for (;;) {
    if (q.draining.exchange(true, std::memory_order_acquire)) return;  // the drainer looks again
    const uint64_t gen = DrainOnce(q, may_block);
    q.draining.store(false, std::memory_order_release);
    std::lock_guard<std::mutex> l(q.mu);
    if (q.pushed == gen) return;  // nothing became due while draining
  }
}

// Queues w on its counter, in order, and issues it if already due.
void Enqueue(Domain* d, WorkPtr w) {
  TriggerQueue& q = *d->triggers;
  Cntr* c = w->cntr;
  {
    std::lock_guard<std::mutex> l(q.mu);
    w->seq = q.next_seq++;
    std::vector<WorkPtr>& v = q.waiting[c];
    const auto at = std::upper_bound(v.begin(), v.end(), w->threshold,
                                     [](uint64_t t, const WorkPtr& x) { return t < x->threshold; });
    v.insert(at, std::move(w));
    c->triggers.fetch_add(1);
  }
  FireTriggers(c, true);  // the threshold may be met already (fi_trigger(3))
}

// The counter of a trigger, or null when it is not a counter of d.
Cntr* CntrOf(fid_cntr* f, const Domain* d) {
  Cntr* c = AsCntr(f);
  return c != nullptr && c->domain == d ? c : nullptr;
}

bool ValidIov(const iovec* iov, size_t count) {
  return count <= kMsgIovLimit && (count == 0 || iov != nullptr);
}

// The checks every FI_TRIGGER call makes; fills w's endpoint and trigger.
int PrepareTriggered(fid_ep* f, void* context, Work* w) {
  Ep* e = AsEp(f);
  if (e == nullptr) return BadFid(f, FI_CLASS_EP);
  Ep* base = e->base;
  if (!(base->caps & FI_TRIGGER)) {
    BYPASS_FI_WARN(FI_LOG_EP_DATA, "FI_TRIGGER on an endpoint opened without it\n");
    return -FI_EOPNOTSUPP;
  }
  if (!Enabled(base)) return -FI_EOPBADSTATE;
  auto* tc = static_cast<fi_triggered_context*>(context);
  if (tc == nullptr) {
    BYPASS_FI_WARN(FI_LOG_EP_DATA, "FI_TRIGGER needs a struct fi_triggered_context\n");
    return -FI_EINVAL;
  }
  if (tc->event_type == FI_TRIGGER_XPU) {
    BYPASS_FI_WARN(FI_LOG_EP_DATA, "FI_TRIGGER_XPU: no FI_XPU\n");
    return -FI_ENOSYS;
  }
  if (tc->event_type != FI_TRIGGER_THRESHOLD) {
    BYPASS_FI_WARN(FI_LOG_EP_DATA, "FI_TRIGGER: unknown event type %d\n", tc->event_type);
    return -FI_EINVAL;
  }
  Cntr* c = CntrOf(tc->trigger.threshold.cntr, base->domain);
  if (c == nullptr) {
    BYPASS_FI_WARN(FI_LOG_EP_DATA, "FI_TRIGGER: the threshold's counter is not one of the "
                   "endpoint's domain\n");
    return -FI_EINVAL;
  }
  w->cntr = c;
  w->threshold = tc->trigger.threshold.threshold;
  w->handle = e;
  w->context = context;
  return 0;
}

// Takes the references of queued work and queues it.
ssize_t Submit(Domain* d, WorkPtr w) {
  if (w->handle != nullptr) w->handle->obj.refs.fetch_add(1);
  w->cntr->obj.refs.fetch_add(1);
  if (w->target != nullptr) w->target->obj.refs.fetch_add(1);
  if (w->done != nullptr) w->done->obj.refs.fetch_add(1);
  Enqueue(d, std::move(w));
  return 0;
}

// Copies a message (fi_msg, fi_msg_tagged or fi_msg_rma) into w: false
// when it is malformed (too many or missing iovs; RMA: one remote iov).
template <class M>
bool CopyMsg(Work& w, const M& m) {
  if (!ValidIov(m.msg_iov, m.iov_count)) return false;
  w.iov.assign(m.msg_iov, m.msg_iov + m.iov_count);
  if (m.desc != nullptr) w.desc.assign(m.desc, m.desc + m.iov_count);
  w.addr = m.addr;
  w.data = m.data;
  if constexpr (std::is_same_v<M, fi_msg_tagged>) {
    w.tag = m.tag;
    w.ignore = m.ignore;
  }
  if constexpr (std::is_same_v<M, fi_msg_rma>) {
    if (m.rma_iov == nullptr || m.rma_iov_count != 1) return false;
    w.rma.assign(m.rma_iov, m.rma_iov + m.rma_iov_count);
  }
  return true;
}

// Copies an atomic message into w (one remote fi_rma_ioc; at most
// kMsgIovLimit operands): false when malformed.
bool CopyAtomic(Work& w, const fi_msg_atomic& m) {
  if (m.iov_count > kMsgIovLimit || (m.iov_count > 0 && m.msg_iov == nullptr)) return false;
  if (m.rma_iov == nullptr || m.rma_iov_count != 1) return false;
  w.ioc.assign(m.msg_iov, m.msg_iov + m.iov_count);
  if (m.desc != nullptr) w.desc.assign(m.desc, m.desc + m.iov_count);
  w.rma_ioc.assign(m.rma_iov, m.rma_iov + m.rma_iov_count);
  w.addr = m.addr;
  w.data = m.data;
  w.datatype = m.datatype;
  w.atomic_op = m.op;
  return true;
}

// The result (fetch) or compare buffers of an atomic into w.
template <class M>
bool CopyIocs(const M& m, std::vector<fi_ioc>* ioc, std::vector<void*>* desc) {
  if (m.iov_count > kMsgIovLimit || (m.iov_count > 0 && m.msg_iov == nullptr)) return false;
  ioc->assign(m.msg_iov, m.msg_iov + m.iov_count);
  if (m.desc != nullptr) desc->assign(m.desc, m.desc + m.iov_count);
  return true;
}

// A data call with FI_TRIGGER of operation `op`.
template <class M>
ssize_t QueueTriggered(fid_ep* ep, const M& m, uint64_t flags, int op) {
  auto w = std::make_unique<Work>();
  if (int r = PrepareTriggered(ep, m.context, w.get()); r != 0) return r;
  if (!CopyMsg(*w, m)) return -FI_EINVAL;
  w->op = op;
  w->flags = flags;
  Domain* d = w->handle->base->domain;
  return Submit(d, std::move(w));
}

}  // namespace

ssize_t QueueTriggeredMsg(fid_ep* ep, const fi_msg* m, uint64_t flags, bool recv) {
  return QueueTriggered(ep, *m, flags, recv ? FI_OP_RECV : FI_OP_SEND);
}
ssize_t QueueTriggeredTagged(fid_ep* ep, const fi_msg_tagged* m, uint64_t flags, bool recv) {
  return QueueTriggered(ep, *m, flags, recv ? FI_OP_TRECV : FI_OP_TSEND);
}
ssize_t QueueTriggeredRma(fid_ep* ep, const fi_msg_rma* m, uint64_t flags, bool read) {
  return QueueTriggered(ep, *m, flags, read ? FI_OP_READ : FI_OP_WRITE);
}
ssize_t QueueTriggeredAtomic(fid_ep* ep, const fi_msg_atomic* m, int op, const fi_ioc* result,
                             void** result_desc, size_t result_count, const fi_ioc* compare,
                             void** compare_desc, size_t compare_count, uint64_t flags) {
  auto w = std::make_unique<Work>();
  if (int r = PrepareTriggered(ep, m->context, w.get()); r != 0) return r;
  const fi_msg_fetch res{const_cast<fi_ioc*>(result), result_desc, result_count};
  const fi_msg_compare cmp{const_cast<fi_ioc*>(compare), compare_desc, compare_count};
  if (!CopyAtomic(*w, *m) || !CopyIocs(res, &w->result, &w->result_desc) ||
      !CopyIocs(cmp, &w->compare, &w->compare_desc)) {
    return -FI_EINVAL;
  }
  w->op = op;
  w->flags = flags;
  Domain* d = w->handle->base->domain;
  return Submit(d, std::move(w));
}

namespace {

// The endpoint of a deferred operation: a handle of d, or null.
Ep* EpOf(fid_ep* f, const Domain* d) {
  Ep* e = AsEp(f);
  return e != nullptr && e->base->domain == d && Enabled(e->base) ? e : nullptr;
}

// The operation of a deferred request (fi_op_msg, fi_op_tagged or
// fi_op_rma) into w; false when it is missing or its message malformed.
template <class Op>
bool FromOp(Work& w, const Op* op, const Domain* d) {
  if (op == nullptr || !CopyMsg(w, op->msg)) return false;
  w.handle = EpOf(op->ep, d);
  w.context = op->msg.context;
  w.flags = op->flags;
  return true;
}

// The atomic operation of a deferred request into w (with its result and
// compare buffers); false when it is missing or malformed.
bool FromAtomicOp(Work& w, fid_ep* ep, const fi_msg_atomic& msg, uint64_t flags, const Domain* d) {
  if (!CopyAtomic(w, msg)) return false;
  w.handle = EpOf(ep, d);
  w.context = msg.context;
  w.flags = flags;
  return true;
}

// FI_QUEUE_WORK: checks the request (fi_trigger(3): the provider may
// validate objects and ranges; what it does not support is -FI_ENOSYS).
int QueueWork(Domain* d, fi_deferred_work* dw) {
  if (dw == nullptr) return -FI_EINVAL;
  auto w = std::make_unique<Work>();
  w->dw = dw;
  w->with_errors = true;
  w->threshold = dw->threshold;
  w->op = dw->op_type;
  w->cntr = CntrOf(dw->triggering_cntr, d);
  if (w->cntr == nullptr) {
    BYPASS_FI_WARN(FI_LOG_DOMAIN, "FI_QUEUE_WORK: triggering_cntr is not a counter of the domain\n");
    return -FI_EINVAL;
  }
  if (dw->completion_cntr != nullptr) {
    w->done = CntrOf(dw->completion_cntr, d);
    if (w->done == nullptr || IsCntrOp(w->op)) {
      BYPASS_FI_WARN(FI_LOG_DOMAIN, "FI_QUEUE_WORK: completion_cntr must be a counter of the "
                     "domain, and NULL for counter operations\n");
      return -FI_EINVAL;
    }
  }
  switch (dw->op_type) {
    case FI_OP_SEND:
    case FI_OP_RECV:
      if (!FromOp(*w, dw->op.msg, d)) return -FI_EINVAL;
      break;
    case FI_OP_TSEND:
    case FI_OP_TRECV:
      if (!FromOp(*w, dw->op.tagged, d)) return -FI_EINVAL;
      break;
    case FI_OP_READ:
    case FI_OP_WRITE:
      if (!FromOp(*w, dw->op.rma, d)) return -FI_EINVAL;
      break;
    case FI_OP_CNTR_SET:
    case FI_OP_CNTR_ADD:
      if (dw->op.cntr == nullptr) return -FI_EINVAL;
      w->target = CntrOf(dw->op.cntr->cntr, d);
      if (w->target == nullptr) return -FI_EINVAL;
      w->value = dw->op.cntr->value;
      return static_cast<int>(Submit(d, std::move(w)));
    case FI_OP_ATOMIC: {
      const fi_op_atomic* a = dw->op.atomic;
      if (a == nullptr || !FromAtomicOp(*w, a->ep, a->msg, a->flags, d)) return -FI_EINVAL;
      break;
    }
    case FI_OP_FETCH_ATOMIC: {
      const fi_op_fetch_atomic* a = dw->op.fetch_atomic;
      if (a == nullptr || !FromAtomicOp(*w, a->ep, a->msg, a->flags, d) ||
          !CopyIocs(a->fetch, &w->result, &w->result_desc)) {
        return -FI_EINVAL;
      }
      break;
    }
    case FI_OP_COMPARE_ATOMIC: {
      const fi_op_compare_atomic* a = dw->op.compare_atomic;
      if (a == nullptr || !FromAtomicOp(*w, a->ep, a->msg, a->flags, d) ||
          !CopyIocs(a->fetch, &w->result, &w->result_desc) ||
          !CopyIocs(a->compare, &w->compare, &w->compare_desc)) {
        return -FI_EINVAL;
      }
      break;
    }
    default:
      BYPASS_FI_WARN(FI_LOG_DOMAIN, "FI_QUEUE_WORK: unknown op_type %d\n", dw->op_type);
      return -FI_ENOSYS;
  }
  if (w->handle == nullptr) {
    BYPASS_FI_WARN(FI_LOG_DOMAIN, "FI_QUEUE_WORK: the operation's ep is not an enabled "
                   "endpoint of the domain\n");
    return -FI_EINVAL;
  }
  return static_cast<int>(Submit(d, std::move(w)));
}

// Removes the queued work `match` selects (not what a drainer is issuing
// at this moment) and returns it.
template <class Match>
std::vector<WorkPtr> Remove(TriggerQueue& q, Match match) {
  std::vector<WorkPtr> out;
  std::lock_guard<std::mutex> l(q.mu);
  for (auto it = q.waiting.begin(); it != q.waiting.end();) {
    std::vector<WorkPtr>& v = it->second;
    size_t kept = 0;
    for (WorkPtr& w : v) {
      if (match(*w)) {
        w->cntr->triggers.fetch_sub(1);
        out.push_back(std::move(w));
      } else {
        v[kept++] = std::move(w);
      }
    }
    v.resize(kept);
    if (kept == 0) {
      q.waiting.erase(it++);
    } else {
      ++it;
    }
  }
  for (auto it = q.ready.begin(); it != q.ready.end();) {
    if (match(**it)) {
      out.push_back(std::move(*it));
      it = q.ready.erase(it);
    } else {
      ++it;
    }
  }
  q.ready_count.store(q.ready.size(), std::memory_order_release);
  return out;
}

// Canceled work: a triggered operation completes with FI_ECANCELED at its
// endpoint (its context goes back to the application); deferred work
// does not (the application canceled it by its request).
void Canceled(std::vector<WorkPtr> works) {
  for (WorkPtr& w : works) {
    if (w->dw == nullptr && w->handle != nullptr) {
      IssueLock lock(w->handle->base, true);
      Fail(*w, FI_ECANCELED);
    }
    Release(*w);
  }
}

}  // namespace

int TriggerControl(Domain* d, int command, void* arg) {
  switch (command) {
    case FI_QUEUE_WORK:
      return QueueWork(d, static_cast<fi_deferred_work*>(arg));
    case FI_CANCEL_WORK: {
      auto* dw = static_cast<fi_deferred_work*>(arg);
      if (dw == nullptr) return -FI_EINVAL;
      std::vector<WorkPtr> out = Remove(*d->triggers, [dw](const Work& w) { return w.dw == dw; });
      if (out.empty()) return -FI_ENOENT;  // not queued (or being issued)
      Canceled(std::move(out));
      return 0;
    }
    case FI_FLUSH_WORK: {
      // All the domain's work, or (a request given) that waiting on its
      // triggering counter.
      auto* dw = static_cast<fi_deferred_work*>(arg);
      Cntr* only = nullptr;
      if (dw != nullptr) {
        only = CntrOf(dw->triggering_cntr, d);
        if (only == nullptr) return -FI_EINVAL;
      }
      Canceled(Remove(*d->triggers,
                      [only](const Work& w) { return only == nullptr || w.cntr == only; }));
      return 0;
    }
    default:
      return -FI_ENOSYS;
  }
}

bool CancelTriggered(Ep* ep, void* context) {
  Ep* base = ep->base;
  std::vector<WorkPtr> out = Remove(*base->domain->triggers, [&](const Work& w) {
    return w.dw == nullptr && w.context == context && w.handle->base == base;
  });
  if (out.empty()) return false;
  Canceled(std::move(out));
  return true;
}

void FireTriggers(Cntr* c, bool may_block) {
  // may_block: an application's call, holding no lock (fi_cntr_add, a
  // triggered post, FI_QUEUE_WORK): what the work it issues leaves is
  // watched once it ends (progress.h; the issue itself is a nested call).
  std::optional<CallWatch> watch;
  if (may_block) watch.emplace(c->domain, /*app_pass=*/false);
  TriggerQueue& q = *c->domain->triggers;
  {
    std::lock_guard<std::mutex> l(q.mu);
    MoveDue(q, c);
  }
  Drain(q, may_block);
}

void DrainTriggers(Domain* d) { Drain(*d->triggers, false); }

void* FinishDeferred(Ep* ep, void* user, bool error, bool* report) {
  auto it = ep->deferred.find(user);
  if (it == ep->deferred.end()) return user;
  const DeferredOp op = it->second;
  ep->deferred.erase(it);
  if (Live(op.done)) (error ? CountErrorEvent : CountEvent)(op.done);
  *report = op.report;
  return op.context;
}

}  // namespace bypass::fi
