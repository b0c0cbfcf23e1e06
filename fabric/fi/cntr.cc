// Counters: reading or waiting runs the engine of every endpoint bound to
// the counter first (progress.h); fi_cntr_wait sleeps on the counter's wait
// object (wait.h) while the domain's progress thread progresses.
#include "fabric/fi/cntr.h"

#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <cstring>
#include <memory>

#include "fabric/fi/domain.h"
#include "fabric/fi/info/info.h"
#include "fabric/fi/progress.h"
#include "fabric/fi/services.h"

namespace bypass::fi {
namespace {

int CntrClose(fid* f) {
  Cntr* c = AsCntr(f);
  if (c == nullptr) return BadFid(f, FI_CLASS_CNTR);
  Domain* d = c->domain;
  DomainGuard g(d->lock);
  if (c->obj.refs.load() > 0) return -FI_EBUSY;
  c->wait.Close();
  if (c->wait.set() != nullptr) LeaveWaitSet(c->wait.set(), &c->fid.fid);
  d->cntrs.fetch_sub(1);
  d->obj.refs.fetch_sub(1);
  c->obj.magic = Obj::kDead;
  Retire(c);
  return 0;
}

int CntrControl(fid* f, int command, void* arg) {
  Cntr* c = AsCntr(f);
  if (c == nullptr) return BadFid(f, FI_CLASS_CNTR);
  return c->wait.Control(command, arg);
}

fi_ops g_cntr_fi_ops = {
    .size = sizeof(fi_ops),
    .close = CntrClose,
    .bind = NoSysBind,
    .control = CntrControl,
    .ops_open = NoSysOpsOpen,
    .tostr = NoSysTostr,
    .ops_set = NoSysOpsSet,
};

// fi_cntr_read has no error return: a bad handle reads 0.
uint64_t CntrRead(fid_cntr* f) {
  Cntr* c = AsCntr(f);
  if (c == nullptr) return 0;
  CallWatch w(c->domain);
  DomainGuard g(*c->lock.load());
  ProgressAll(c->eps);
  const uint64_t v = c->value.load();
  c->read_value.store(v, std::memory_order_relaxed);
  return v;
}

uint64_t CntrReadErr(fid_cntr* f) {
  Cntr* c = AsCntr(f);
  if (c == nullptr) return 0;
  CallWatch w(c->domain);
  DomainGuard g(*c->lock.load());
  ProgressAll(c->eps);
  const uint64_t v = c->errors.load();
  c->read_errors.store(v, std::memory_order_relaxed);
  return v;
}

// The application's own change: a new baseline for fi_poll and fi_trywait
// (fi_poll(3)), then a signal for the waits.
void AppChanged(Cntr* c, bool baseline) {
  if (baseline) {
    const uint64_t v = c->value.load();
    const uint64_t e = c->errors.load();
    c->poll_value.store(v, std::memory_order_relaxed);
    c->poll_errors.store(e, std::memory_order_relaxed);
    c->read_value.store(v, std::memory_order_relaxed);
    c->read_errors.store(e, std::memory_order_relaxed);
  }
  c->wait.Signal();
  // The application holds no endpoint lock here: due work is issued now.
  if (c->triggers.load() != 0) FireTriggers(c, true);
}

int CntrAdd(fid_cntr* f, uint64_t v) {
  Cntr* c = AsCntr(f);
  if (c == nullptr) return BadFid(f, FI_CLASS_CNTR);
  c->value.fetch_add(v);
  AppChanged(c, true);
  return 0;
}
int CntrSet(fid_cntr* f, uint64_t v) {
  Cntr* c = AsCntr(f);
  if (c == nullptr) return BadFid(f, FI_CLASS_CNTR);
  c->value.store(v);
  AppChanged(c, true);
  return 0;
}
int CntrAddErr(fid_cntr* f, uint64_t v) {
  Cntr* c = AsCntr(f);
  if (c == nullptr) return BadFid(f, FI_CLASS_CNTR);
  c->errors.fetch_add(v);
  AppChanged(c, false);
  return 0;
}
int CntrSetErr(fid_cntr* f, uint64_t v) {
  Cntr* c = AsCntr(f);
  if (c == nullptr) return BadFid(f, FI_CLASS_CNTR);
  c->errors.store(v);
  AppChanged(c, false);
  return 0;
}

// Waits until the counter reaches threshold (0), an error is counted
// (-FI_EAVAIL) or timeout milliseconds pass (-FI_ETIMEDOUT; -1: forever).
int CntrWait(fid_cntr* f, uint64_t threshold, int timeout) {
  Cntr* c = AsCntr(f);
  if (c == nullptr) return BadFid(f, FI_CLASS_CNTR);
  const uint64_t errors = c->errors.load();
  int ret = -FI_ETIMEDOUT;
  CallWatch w(c->domain);
  SleepUntil(&c->wait, &c->fid.fid, DeadlineAfterMs(timeout), [&] {
    {
      DomainGuard g(*c->lock.load());
      ProgressAll(c->eps);
    }
    if (c->value.load() >= threshold) {
      ret = 0;
    } else if (c->errors.load() != errors) {
      ret = -FI_EAVAIL;
    }
    return ret != -FI_ETIMEDOUT;
  });
  return ret;
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

}  // namespace

int OpenCntr(fid_domain* domain, fi_cntr_attr* attr, fid_cntr** out, void* context) {
  Domain* d = AsDomain(domain);
  if (d == nullptr) return BadFid(domain, FI_CLASS_DOMAIN);
  if (out == nullptr) return -FI_EINVAL;
  if (attr != nullptr) {
    if (RawEnum(attr->events) != FI_CNTR_EVENTS_COMP) return -FI_ENOSYS;
    if (attr->flags != 0) return -FI_EBADFLAGS;
  }
  const int wait_obj = attr != nullptr ? RawEnum(attr->wait_obj) : FI_WAIT_NONE;
  int err;
  WaitSet* ws = AttrWaitSet(wait_obj, attr != nullptr ? attr->wait_set : nullptr, &err);
  if (err != 0) return err;
  if (!TakeSlot(d->cntrs, kMaxCntrs)) return -FI_EINVAL;  // cntr_cnt (fabric/fi/info)
  auto c = std::make_unique<Cntr>();
  std::memset(&c->fid, 0, sizeof(c->fid));
  c->fid.fid.fclass = FI_CLASS_CNTR;
  c->fid.fid.context = context;
  c->fid.fid.ops = &g_cntr_fi_ops;
  c->fid.ops = &g_cntr_ops;
  c->domain = d;
  if (int ret = c->wait.Init(wait_obj, ws); ret != 0) {
    d->cntrs.fetch_sub(1);
    return ret;
  }
  if (ws != nullptr) JoinWaitSet(ws, &c->fid.fid);
  c->lock.store(&d->lock);
  d->obj.refs.fetch_add(1);
  *out = &c.release()->fid;
  return 0;
}

}  // namespace bypass::fi
