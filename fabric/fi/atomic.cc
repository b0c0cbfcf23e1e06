// fi_atomic(3) on the engine: each call's operands (and compare operands)
// gathered into one engine atomic, its result scattered from one bounce
// buffer where the application gave several (progress.cc), the valid
// calls and fi_query_atomic answered from the engine's op table.
#include "fabric/fi/atomic.h"

#include <rdma/fi_atomic.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_trigger.h>

#include <cstring>

#include "fabric/fi/av.h"
#include "fabric/fi/cntr.h"
#include "fabric/fi/domain.h"
#include "fabric/fi/hmem.h"
#include "fabric/fi/ep.h"
#include "fabric/fi/msg_ep.h"
#include "fabric/fi/progress.h"
#include "fabric/fi/info/info.h"
#include "fabric/fi/services.h"
#include "fabric/fi/shared_ctx.h"
#include "fabric/fi/trigger.h"
#include "fabric/rdm/rdm.h"

namespace bypass::fi {
namespace {

// The engine numbers ops and datatypes as libfabric does (types.h).
static_assert(FI_MIN == static_cast<int>(rdm::AtomicOp::kMin));
static_assert(FI_ATOMIC_WRITE == static_cast<int>(rdm::AtomicOp::kWrite));
static_assert(FI_MSWAP == static_cast<int>(rdm::AtomicOp::kMswap));
static_assert(FI_ATOMIC_OP_LAST == rdm::kAtomicOps);
static_assert(FI_LONG_DOUBLE_COMPLEX == static_cast<int>(rdm::AtomicType::kLongDoubleComplex));
static_assert(FI_INT128 == static_cast<int>(rdm::AtomicType::kInt128));
static_assert(FI_UINT128 + 1 == rdm::kAtomicTypes);

// The three families of fi_atomic(3) and the ops each takes.
enum class Form { kBase, kFetch, kCompare };

bool FormTakes(Form f, fi_op op) {
  switch (f) {
    case Form::kBase:
      return op <= FI_BXOR || op == FI_ATOMIC_WRITE;
    case Form::kFetch:
      return op <= FI_ATOMIC_WRITE;
    case Form::kCompare:
      return op >= FI_CSWAP && op <= FI_MSWAP;
  }
  return false;
}

// Operation flags an atomic honours (fi_atomic(3), "FLAGS"); the
// completion levels are those of sends (an atomic completes on the
// target's answer, which is FI_DELIVERY_COMPLETE).
constexpr uint64_t kAtomicFlags = FI_COMPLETION | FI_INJECT | FI_MORE | FI_FENCE |
                                  FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE |
                                  FI_INJECT_COMPLETE | FI_ATOMIC | FI_READ | FI_WRITE;
constexpr uint64_t kAtomicDefaultFlags = FI_COMPLETION | FI_INJECT | FI_FENCE;

// The largest UDP payload the domain's device carries.
uint32_t MaxDatagram(const Domain* d) {
  const uint32_t mtu = d->port->info().mtu;
  return mtu > 28 ? mtu - 28 : 0;
}

// The elements one call of form f with (datatype, op) carries, or
// -FI_EOPNOTSUPP: the form does not take op, or op is not defined on it.
int ValidCount(const Domain* d, Form f, fi_datatype dt, fi_op op, size_t* count) {
  if (count == nullptr) return -FI_EINVAL;
  if (dt < 0 || dt > FI_UINT128 || op < 0 || op >= FI_ATOMIC_OP_LAST || !FormTakes(f, op) ||
      !rdm::AtomicDefined(static_cast<rdm::AtomicOp>(op), static_cast<rdm::AtomicType>(dt))) {
    return -FI_EOPNOTSUPP;
  }
  *count = rdm::AtomicMaxCount(static_cast<rdm::AtomicOp>(op), static_cast<rdm::AtomicType>(dt),
                               MaxDatagram(d));
  return *count > 0 ? 0 : -FI_EOPNOTSUPP;
}

// The elements a fi_ioc list names, or SIZE_MAX when it is malformed.
size_t Elements(const fi_ioc* iov, size_t n) {
  if (n > kMsgIovLimit || (n > 0 && iov == nullptr)) return SIZE_MAX;
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    if ((iov[i].addr == nullptr && iov[i].count > 0) || iov[i].count > rdm::kMaxAtomicBytes) {
      return SIZE_MAX;
    }
    total += iov[i].count;
  }
  return total;
}

// One atomic call of any form.
struct AtomicArgs {
  Form form = Form::kBase;
  const fi_ioc* iov = nullptr;  // operands (may be absent for FI_ATOMIC_READ)
  size_t iov_count = 0;
  const fi_ioc* compare = nullptr;
  size_t compare_count = 0;
  const fi_ioc* result = nullptr;
  size_t result_count = 0;
  fi_addr_t dest = FI_ADDR_UNSPEC;
  const fi_rma_ioc* rma = nullptr;  // exactly one
  size_t rma_count = 0;
  fi_datatype datatype = FI_UINT64;
  fi_op op = FI_SUM;
  void* context = nullptr;
  uint64_t flags = 0;
  bool msg_call = false;     // fi_*atomicmsg: flags as given
  bool inject_call = false;  // fi_inject_atomic: no completion at all
};

// Gathers count elements of size bytes from iov into out.
void GatherIoc(const Domain* d, const fi_ioc* iov, size_t n, size_t size, uint8_t* out) {
  iovec v[kMsgIovLimit];
  for (size_t i = 0; i < n; ++i) v[i] = {iov[i].addr, iov[i].count * size};
  Gather(d, v, n, out);
}

ssize_t Refuse(int err, const char* why) {
  BYPASS_FI_WARN(FI_LOG_EP_DATA, "atomic refused: %s\n", why);
  return err;
}

ssize_t PostAtomic(fid_ep* fep, AtomicArgs a) {
  Ep* alias = AsEp(fep);
  if (alias == nullptr) return BadFid(fep, FI_CLASS_EP);
  Ep* ep = alias->base;
  if (!a.msg_call) a.flags = alias->tx_op_flags & kAtomicDefaultFlags;
  if ((a.flags & ~kAtomicFlags) != 0) {
    return Refuse(-FI_EBADFLAGS,
                  "flags other than FI_COMPLETION, FI_INJECT, FI_FENCE, FI_MORE and the "
                  "completion levels (no FI_TAGGED targets, no FI_REMOTE_CQ_DATA)");
  }
  if (!Enabled(ep) || (alias->side != Ep::kWhole && !alias->side_enabled)) {
    return -FI_EOPBADSTATE;  // fi_enable first
  }
  if (alias->side == Ep::kRx) return -FI_EOPNOTSUPP;  // a receive context
  if (ep->dgram != nullptr) return -FI_ENOSYS;  // no atomics on datagrams
  size_t max = 0;
  if (ValidCount(ep->domain, a.form, a.datatype, a.op, &max) != 0) {
    return Refuse(-FI_EOPNOTSUPP, "this (op, datatype) pair is not offered for this call");
  }
  if (a.rma == nullptr || a.rma_count != 1) {
    return Refuse(-FI_EINVAL, "exactly one remote fi_rma_ioc is taken");
  }
  const bool reads = a.op == FI_ATOMIC_READ;
  const size_t size = rdm::AtomicTypeSize(static_cast<rdm::AtomicType>(a.datatype));
  const size_t results = a.form == Form::kBase ? 0 : Elements(a.result, a.result_count);
  const size_t n = reads ? results : Elements(a.iov, a.iov_count);
  if (n == 0 || n == SIZE_MAX || results == SIZE_MAX || (a.form != Form::kBase && results != n) ||
      (a.form == Form::kCompare && Elements(a.compare, a.compare_count) != n) ||
      a.rma[0].count != n) {
    return Refuse(-FI_EINVAL,
                  "operand, compare, result and remote counts must agree and be at least 1");
  }
  if (n > max) return Refuse(-FI_EMSGSIZE, "more elements than fi_atomicvalid allows");
  const size_t bytes = n * size;
  if (a.inject_call && bytes > ep->config.inject_size) return -FI_EMSGSIZE;

  CallWatch w(ep->domain, /*app_pass=*/false);  // after the guard: what the post left
  DomainGuard g(*ep->lock);
  rdm::AtomicRequest r;
  fi_addr_t dest = a.dest;  // a connected endpoint's is its peer (msg_ep.h)
  if (int ret = MsgDest(ep, &dest); ret != 0) return ret;
  if (!FindPeer(ep, dest, &r.dest)) return -FI_EINVAL;
  if (TakeLateError(ep, dest)) return -FI_EIO;
  if ((a.flags & FI_FENCE) && FenceHolds(ep, r.dest)) return -FI_EAGAIN;
  uint8_t operands[rdm::kMaxAtomicBytes];
  uint8_t compares[rdm::kMaxAtomicBytes];
  if (!reads) GatherIoc(ep->domain, a.iov, a.iov_count, size, operands);
  if (a.form == Form::kCompare) GatherIoc(ep->domain, a.compare, a.compare_count, size, compares);
  r.op = static_cast<rdm::AtomicOp>(a.op);
  r.type = static_cast<rdm::AtomicType>(a.datatype);
  r.count = static_cast<uint32_t>(n);
  r.operand = reads ? nullptr : operands;
  r.compare = a.form == Form::kCompare ? compares : nullptr;
  r.fetch = a.form != Form::kBase;
  r.addr = a.rma[0].addr;
  r.key = a.rma[0].key;
  r.context = a.context;
  if (a.inject_call) {
    r.flags = rdm::kAtomicInject;
    r.context = nullptr;
    const rdm::Result res = ep->rdm->Atomic(r);
    NoteUnfinished(ep->domain, ep->rdm.get());
    if (res == rdm::Result::kOk) {
      CountEvent(ep->cntrs.write);
      ep->peers.NoteBuffered(AvEntry(ep->av, a.dest));
    }
    return static_cast<int>(res);
  }
  if (StxFull(ep)) return -FI_EAGAIN;  // the shared transmit context's size
  const bool suppress = ep->cqs.tx_selective && !(a.flags & FI_COMPLETION);
  // Fetched values land in a provider buffer when there are several
  // result buffers, or the application's copy functions must write them.
  const bool scatter = r.fetch && (a.result_count > 1 || HmemOverridden(ep->domain));
  OpRecord* rec = nullptr;
  if (suppress || scatter) {
    rec = ep->records.Alloc();
    if (rec == nullptr) return -FI_EAGAIN;
    rec->user_context = a.context;
    rec->suppress = suppress;
    r.context = rec;
  }
  if (scatter) {
    rec->bounce.resize(bytes);  // the fetched values land here, then scatter
    for (size_t i = 0; i < a.result_count; ++i) {
      rec->scatter.push_back({a.result[i].addr, a.result[i].count * size});
    }
    r.result = rec->bounce.data();
  } else if (r.fetch) {
    r.result = a.result[0].addr;
  }
  const rdm::Result res = ep->rdm->Atomic(r);
  NoteUnfinished(ep->domain, ep->rdm.get());
  if (res == rdm::Result::kOk) StxTake(ep);
  if (res != rdm::Result::kOk && rec != nullptr) ep->records.Free(rec);
  return static_cast<int>(res);
}

// ---- fi_ops_atomic ----

ssize_t Write(fid_ep* ep, const void* buf, size_t count, void*, fi_addr_t dest, uint64_t addr,
              uint64_t key, fi_datatype dt, fi_op op, void* ctx) {
  const fi_ioc iov{const_cast<void*>(buf), count};
  const fi_rma_ioc rma{addr, count, key};
  return PostAtomic(ep, {.iov = &iov, .iov_count = 1, .dest = dest, .rma = &rma, .rma_count = 1,
                         .datatype = dt, .op = op, .context = ctx});
}
ssize_t Writev(fid_ep* ep, const fi_ioc* iov, void**, size_t count, fi_addr_t dest,
               uint64_t addr, uint64_t key, fi_datatype dt, fi_op op, void* ctx) {
  const fi_rma_ioc rma{addr, Elements(iov, count), key};
  return PostAtomic(ep, {.iov = iov, .iov_count = count, .dest = dest, .rma = &rma,
                         .rma_count = 1, .datatype = dt, .op = op, .context = ctx});
}
ssize_t WriteMsg(fid_ep* ep, const fi_msg_atomic* m, uint64_t flags) {
  if (m == nullptr) return -FI_EINVAL;
  if (flags & FI_TRIGGER) {
    return QueueTriggeredAtomic(ep, m, FI_OP_ATOMIC, nullptr, nullptr, 0, nullptr, nullptr, 0,
                                flags);
  }
  return PostAtomic(ep, {.iov = m->msg_iov, .iov_count = m->iov_count, .dest = m->addr,
                         .rma = m->rma_iov, .rma_count = m->rma_iov_count,
                         .datatype = m->datatype, .op = m->op, .context = m->context,
                         .flags = flags, .msg_call = true});
}
ssize_t Inject(fid_ep* ep, const void* buf, size_t count, fi_addr_t dest, uint64_t addr,
               uint64_t key, fi_datatype dt, fi_op op) {
  const fi_ioc iov{const_cast<void*>(buf), count};
  const fi_rma_ioc rma{addr, count, key};
  return PostAtomic(ep, {.iov = &iov, .iov_count = 1, .dest = dest, .rma = &rma, .rma_count = 1,
                         .datatype = dt, .op = op, .inject_call = true});
}

ssize_t ReadWrite(fid_ep* ep, const void* buf, size_t count, void*, void* result, void*,
                  fi_addr_t dest, uint64_t addr, uint64_t key, fi_datatype dt, fi_op op,
                  void* ctx) {
  const fi_ioc iov{const_cast<void*>(buf), count};
  const fi_ioc res{result, count};
  const fi_rma_ioc rma{addr, count, key};
  return PostAtomic(ep, {.form = Form::kFetch, .iov = &iov, .iov_count = buf != nullptr ? 1u : 0u,
                         .result = &res, .result_count = 1, .dest = dest, .rma = &rma,
                         .rma_count = 1, .datatype = dt, .op = op, .context = ctx});
}
ssize_t ReadWritev(fid_ep* ep, const fi_ioc* iov, void**, size_t count, fi_ioc* resultv, void**,
                   size_t result_count, fi_addr_t dest, uint64_t addr, uint64_t key,
                   fi_datatype dt, fi_op op, void* ctx) {
  const fi_rma_ioc rma{addr, Elements(resultv, result_count), key};
  return PostAtomic(ep, {.form = Form::kFetch, .iov = iov, .iov_count = count, .result = resultv,
                         .result_count = result_count, .dest = dest, .rma = &rma,
                         .rma_count = 1, .datatype = dt, .op = op, .context = ctx});
}
ssize_t ReadWriteMsg(fid_ep* ep, const fi_msg_atomic* m, fi_ioc* resultv, void** result_desc,
                     size_t result_count, uint64_t flags) {
  if (m == nullptr) return -FI_EINVAL;
  if (flags & FI_TRIGGER) {
    return QueueTriggeredAtomic(ep, m, FI_OP_FETCH_ATOMIC, resultv, result_desc, result_count,
                                nullptr, nullptr, 0, flags);
  }
  return PostAtomic(ep, {.form = Form::kFetch, .iov = m->msg_iov, .iov_count = m->iov_count,
                         .result = resultv, .result_count = result_count, .dest = m->addr,
                         .rma = m->rma_iov, .rma_count = m->rma_iov_count,
                         .datatype = m->datatype, .op = m->op, .context = m->context,
                         .flags = flags, .msg_call = true});
}

ssize_t CompWrite(fid_ep* ep, const void* buf, size_t count, void*, const void* compare, void*,
                  void* result, void*, fi_addr_t dest, uint64_t addr, uint64_t key,
                  fi_datatype dt, fi_op op, void* ctx) {
  const fi_ioc iov{const_cast<void*>(buf), count};
  const fi_ioc cmp{const_cast<void*>(compare), count};
  const fi_ioc res{result, count};
  const fi_rma_ioc rma{addr, count, key};
  return PostAtomic(ep, {.form = Form::kCompare, .iov = &iov, .iov_count = 1, .compare = &cmp,
                         .compare_count = 1, .result = &res, .result_count = 1, .dest = dest,
                         .rma = &rma, .rma_count = 1, .datatype = dt, .op = op, .context = ctx});
}
ssize_t CompWritev(fid_ep* ep, const fi_ioc* iov, void**, size_t count, const fi_ioc* comparev,
                   void**, size_t compare_count, fi_ioc* resultv, void**, size_t result_count,
                   fi_addr_t dest, uint64_t addr, uint64_t key, fi_datatype dt, fi_op op,
                   void* ctx) {
  const fi_rma_ioc rma{addr, Elements(iov, count), key};
  return PostAtomic(ep, {.form = Form::kCompare, .iov = iov, .iov_count = count,
                         .compare = comparev, .compare_count = compare_count, .result = resultv,
                         .result_count = result_count, .dest = dest, .rma = &rma,
                         .rma_count = 1, .datatype = dt, .op = op, .context = ctx});
}
ssize_t CompWriteMsg(fid_ep* ep, const fi_msg_atomic* m, const fi_ioc* comparev,
                     void** compare_desc, size_t compare_count, fi_ioc* resultv,
                     void** result_desc, size_t result_count, uint64_t flags) {
  if (m == nullptr) return -FI_EINVAL;
  if (flags & FI_TRIGGER) {
    return QueueTriggeredAtomic(ep, m, FI_OP_COMPARE_ATOMIC, resultv, result_desc, result_count,
                                comparev, compare_desc, compare_count, flags);
  }
  return PostAtomic(ep, {.form = Form::kCompare, .iov = m->msg_iov, .iov_count = m->iov_count,
                         .compare = comparev, .compare_count = compare_count, .result = resultv,
                         .result_count = result_count, .dest = m->addr, .rma = m->rma_iov,
                         .rma_count = m->rma_iov_count, .datatype = m->datatype, .op = m->op,
                         .context = m->context, .flags = flags, .msg_call = true});
}

// The valid calls answer for the endpoint's domain (its device's packet).
template <Form F>
int Valid(fid_ep* fep, fi_datatype dt, fi_op op, size_t* count) {
  Ep* ep = AsEp(fep);
  if (ep == nullptr) return BadFid(fep, FI_CLASS_EP);
  if (ep->base->type == FI_EP_DGRAM) return -FI_EOPNOTSUPP;
  return ValidCount(ep->base->domain, F, dt, op, count);
}

}  // namespace

int QueryAtomic(fid_domain* fd, fi_datatype dt, fi_op op, fi_atomic_attr* attr, uint64_t flags) {
  Domain* d = AsDomain(fd);
  if (d == nullptr) return BadFid(fd, FI_CLASS_DOMAIN);
  if (attr == nullptr || ((flags & FI_FETCH_ATOMIC) && (flags & FI_COMPARE_ATOMIC))) {
    return -FI_EINVAL;
  }
  if ((flags & ~(FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC | FI_TAGGED)) != 0) return -FI_EBADFLAGS;
  if (flags & FI_TAGGED) return -FI_EOPNOTSUPP;  // atomics into tagged receive buffers
  const Form f = (flags & FI_FETCH_ATOMIC)     ? Form::kFetch
                 : (flags & FI_COMPARE_ATOMIC) ? Form::kCompare
                                               : Form::kBase;
  const int ret = ValidCount(d, f, dt, op, &attr->count);
  if (ret != 0) return ret;
  attr->size = rdm::AtomicTypeSize(static_cast<rdm::AtomicType>(dt));
  return 0;
}

fi_ops_atomic g_atomic_ops = {
    .size = sizeof(fi_ops_atomic),
    .write = Write,
    .writev = Writev,
    .writemsg = WriteMsg,
    .inject = Inject,
    .readwrite = ReadWrite,
    .readwritev = ReadWritev,
    .readwritemsg = ReadWriteMsg,
    .compwrite = CompWrite,
    .compwritev = CompWritev,
    .compwritemsg = CompWriteMsg,
    .writevalid = Valid<Form::kBase>,
    .readwritevalid = Valid<Form::kFetch>,
    .compwritevalid = Valid<Form::kCompare>,
};

}  // namespace bypass::fi
