// Completion queues: reading (in the CQ's format, with sources, errors
// with their messages) runs the engine of every endpoint bound to the CQ
// first (progress.h); fi_cq_sread sleeps on the CQ's wait object (wait.h)
// while the domain's progress thread progresses.
#include "fabric/fi/cq.h"

#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>

#include "fabric/fi/domain.h"
#include "fabric/fi/fabric.h"
#include "fabric/fi/info/info.h"
#include "fabric/fi/progress.h"
#include "fabric/fi/services.h"
#include "fabric/fi/wait.h"

namespace bypass::fi {
namespace {

constexpr size_t kDefaultCqSize = 1024;
constexpr size_t kMaxCqSize = 1u << 20;

int CqClose(fid* f) {
  Cq* cq = AsCq(f);
  if (cq == nullptr) return BadFid(f, FI_CLASS_CQ);
  Domain* d = cq->domain;
  DomainGuard g(d->lock);
  if (cq->obj.refs.load() > 0) return -FI_EBUSY;
  cq->wait.Close();
  if (cq->wait.set() != nullptr) LeaveWaitSet(cq->wait.set(), &cq->fid.fid);
  cq->entries.clear();
  cq->errors.clear();
  d->cqs.fetch_sub(1);
  d->obj.refs.fetch_sub(1);
  cq->obj.magic = Obj::kDead;
  Retire(cq);
  return 0;
}

int CqControl(fid* f, int command, void* arg) {
  Cq* cq = AsCq(f);
  if (cq == nullptr) return BadFid(f, FI_CLASS_CQ);
  return cq->wait.Control(command, arg);
}

fi_ops g_cq_fi_ops = {
    .size = sizeof(fi_ops),
    .close = CqClose,
    .bind = NoSysBind,
    .control = CqControl,
    .ops_open = NoSysOpsOpen,
    .tostr = NoSysTostr,
    .ops_set = NoSysOpsSet,
};

// A read of a CQ the application has closed: nothing to read (-FI_EAGAIN),
// where every other call on a closed object answers -FI_EBADF. Open MPI
// 4.1's OFI MTL with thread grouping (mtl_ofi_thread_grouping) closes a
// context's CQ in MPI_Comm_free and goes on polling it in every progress
// pass; -FI_EBADF aborted the job there, while a closed CQ simply holds no
// completion. Said once per process.
ssize_t ReadOfClosedCq(fid_cq* f) {
  const ssize_t bad = BadFid(f, FI_CLASS_CQ);
  if (bad != -FI_EBADF) return bad;
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) {
    BYPASS_FI_WARN(FI_LOG_CQ,
                   "a CQ was read after fi_close: it stays empty (-FI_EAGAIN); the application "
                   "should stop polling a CQ it closed (Open MPI 4.1's thread grouping does this "
                   "after MPI_Comm_free)\n");
  }
  return -FI_EAGAIN;
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
  if (cq == nullptr) return ReadOfClosedCq(f);
  if (buf == nullptr && count > 0) return -FI_EINVAL;
  CallWatch w(cq->domain);
  DomainGuard g(*cq->lock.load());
  if (count == 0) {
    ProgressAll(cq->eps);
    return cq->errors.empty() ? -FI_EAGAIN : -FI_EAVAIL;
  }
  return CqReadLocked(cq, buf, count, src);
}

ssize_t CqRead(fid_cq* f, void* buf, size_t count) { return CqReadFrom(f, buf, count, nullptr); }

ssize_t CqReadErr(fid_cq* f, fi_cq_err_entry* buf, uint64_t flags) {
  Cq* cq = AsCq(f);
  if (cq == nullptr) return ReadOfClosedCq(f);
  if (buf == nullptr) return -FI_EINVAL;
  if (flags != 0) return -FI_EBADFLAGS;
  CallWatch w(cq->domain);
  DomainGuard g(*cq->lock.load());
  if (cq->errors.empty()) ProgressAll(cq->eps);
  if (cq->errors.empty()) return -FI_EAGAIN;
  const CqError& e = cq->errors.front();
  const uint32_t api = cq->domain->fabric->api_version;
  if (e.source_len > 0) {
    CopyErrBytes(api, e.e, e.source, e.source_len, cq->last_error, buf);
  } else {
    CopyErrData(api, e.e, e.message, cq->last_error, buf);
  }
  cq->errors.pop_front();
  return 1;
}

ssize_t CqSReadFrom(fid_cq* f, void* buf, size_t count, fi_addr_t* src, const void* cond,
                    int timeout) {
  Cq* cq = AsCq(f);
  if (cq == nullptr) return BadFid(f, FI_CLASS_CQ);
  if (buf == nullptr || count == 0) return -FI_EINVAL;
  const int kind = cq->wait.kind();
  if (kind == FI_WAIT_NONE || kind == FI_WAIT_SET) {
    BYPASS_FI_WARN(FI_LOG_CQ,
                   "fi_cq_sread on a CQ opened with wait_obj %s: open it with FI_WAIT_UNSPEC "
                   "(or FD, MUTEX_COND, YIELD), or wait on its wait set with fi_wait\n",
                   kind == FI_WAIT_NONE ? "FI_WAIT_NONE" : "FI_WAIT_SET");
    return -FI_EINVAL;  // fi_cq(3): invalid for FI_WAIT_NONE and FI_WAIT_SET
  }
  // FI_CQ_COND_THRESHOLD: wait until that many entries are queued (at most
  // count); an error entry or the timeout ends the wait with what is there.
  size_t want = 1;
  if (cq->threshold) {
    want = std::clamp<size_t>(reinterpret_cast<uintptr_t>(cond), 1, count);
  }
  ssize_t ret = -FI_EAGAIN;
  CallWatch w(cq->domain);
  SleepUntil(&cq->wait, &cq->fid.fid, DeadlineAfterMs(timeout), [&] {
    if (cq->signaled.exchange(false)) return true;  // ret stays -FI_EAGAIN
    DomainGuard g(*cq->lock.load());
    if (want > 1 && cq->errors.empty() && cq->entries.size() < want) {
      ProgressAll(cq->eps);
      if (cq->errors.empty() && cq->entries.size() < want) return false;
    }
    ret = CqReadLocked(cq, buf, count, src);
    return ret != -FI_EAGAIN;
  });
  if (ret == -FI_EAGAIN && want > 1) {  // timed out short of the threshold: what there is
    DomainGuard g(*cq->lock.load());
    ret = CqReadLocked(cq, buf, count, src);
  }
  return ret;
}

ssize_t CqSRead(fid_cq* f, void* buf, size_t count, const void* cond, int timeout) {
  return CqSReadFrom(f, buf, count, nullptr, cond, timeout);
}

int CqSignal(fid_cq* f) {
  Cq* cq = AsCq(f);
  if (cq == nullptr) return BadFid(f, FI_CLASS_CQ);
  cq->signaled.store(true);
  cq->wait.Wake();
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

}  // namespace

int OpenCq(fid_domain* domain, fi_cq_attr* attr, fid_cq** out, void* context) {
  Domain* d = AsDomain(domain);
  if (d == nullptr) return BadFid(domain, FI_CLASS_DOMAIN);
  if (attr == nullptr || out == nullptr) return -FI_EINVAL;
  size_t entry_size;
  const int raw_format = RawEnum(attr->format);
  if (raw_format < FI_CQ_FORMAT_UNSPEC || raw_format > FI_CQ_FORMAT_TAGGED) return -FI_ENOSYS;
  const fi_cq_format format = raw_format == FI_CQ_FORMAT_UNSPEC
                                  ? FI_CQ_FORMAT_CONTEXT
                                  : static_cast<fi_cq_format>(raw_format);
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
  int err;
  WaitSet* ws = AttrWaitSet(RawEnum(attr->wait_obj), attr->wait_set, &err);
  if (err != 0) return err;
  if (attr->size > kMaxCqSize) return -FI_EINVAL;
  if ((attr->flags & ~static_cast<uint64_t>(FI_AFFINITY)) != 0) return -FI_EBADFLAGS;
  const int cond = RawEnum(attr->wait_cond);
  if (cond != FI_CQ_COND_NONE && cond != FI_CQ_COND_THRESHOLD) {
    BYPASS_FI_WARN(FI_LOG_CQ, "wait_cond %d: FI_CQ_COND_NONE or FI_CQ_COND_THRESHOLD\n", cond);
    return -FI_EINVAL;
  }
  if (!TakeSlot(d->cqs, kMaxCqs)) return -FI_EINVAL;  // cq_cnt (fabric/fi/info)
  auto cq = std::make_unique<Cq>();
  std::memset(&cq->fid, 0, sizeof(cq->fid));
  cq->fid.fid.fclass = FI_CLASS_CQ;
  cq->fid.fid.context = context;
  cq->fid.fid.ops = &g_cq_fi_ops;
  cq->fid.ops = &g_cq_ops;
  cq->domain = d;
  cq->lock.store(&d->lock);
  cq->format = format;
  cq->entry_size = entry_size;
  cq->capacity = attr->size == 0 ? kDefaultCqSize : attr->size;
  cq->threshold = cond == FI_CQ_COND_THRESHOLD;
  if (int ret = cq->wait.Init(RawEnum(attr->wait_obj), ws); ret != 0) {
    d->cqs.fetch_sub(1);
    return ret;
  }
  if (ws != nullptr) JoinWaitSet(ws, &cq->fid.fid);
  d->obj.refs.fetch_add(1);
  *out = &cq.release()->fid;
  return 0;
}

}  // namespace bypass::fi
