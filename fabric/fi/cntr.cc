// Counters: reading or waiting runs the engine of every endpoint bound to
// the counter first (progress.h); fi_cntr_wait polls.
#include "fabric/fi/cntr.h"

#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <sched.h>

#include <cstring>
#include <memory>

#include "driver/clock.h"
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
  d->cntrs.fetch_sub(1);
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
  DomainGuard g(*c->lock.load());
  ProgressAll(c->eps);
  return c->value.load();
}

uint64_t CntrReadErr(fid_cntr* f) {
  Cntr* c = AsCntr(f);
  if (c == nullptr) return 0;
  DomainGuard g(*c->lock.load());
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
      DomainGuard g(*c->lock.load());
      ProgressAll(c->eps);
    }
    if (c->value.load() >= threshold) return 0;
    if (c->errors.load() != errors) return -FI_EAVAIL;
    if (clock.NowNs() >= deadline) return -FI_ETIMEDOUT;
    if (c->domain->lock.thread_safe) sched_yield();
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

}  // namespace

int OpenCntr(fid_domain* domain, fi_cntr_attr* attr, fid_cntr** out, void* context) {
  Domain* d = AsDomain(domain);
  if (d == nullptr) return BadFid(domain, FI_CLASS_DOMAIN);
  if (out == nullptr) return -FI_EINVAL;
  if (attr != nullptr) {
    if (RawEnum(attr->events) != FI_CNTR_EVENTS_COMP) return -FI_ENOSYS;
    if (!BusyPollWait(attr->wait_obj)) return -FI_ENOSYS;
    if (attr->flags != 0) return -FI_EBADFLAGS;
  }
  if (!TakeSlot(d->cntrs, kMaxCntrs)) return -FI_EINVAL;  // cntr_cnt (fabric/fi/info)
  auto c = std::make_unique<Cntr>();
  std::memset(&c->fid, 0, sizeof(c->fid));
  c->fid.fid.fclass = FI_CLASS_CNTR;
  c->fid.fid.context = context;
  c->fid.fid.ops = &g_cntr_fi_ops;
  c->fid.ops = &g_cntr_ops;
  c->domain = d;
  c->lock.store(&d->lock);
  d->obj.refs.fetch_add(1);
  *out = &c.release()->fid;
  return 0;
}

}  // namespace bypass::fi
