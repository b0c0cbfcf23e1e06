// Issue 19, part 2: fi_atomic(3). FI_ATOMIC offered; the valid calls and
// fi_query_atomic; base, fetch and compare atomics executed with their
// completion flags; the target's access rights; the counters of each event
// class (FI_WRITE, FI_READ at the initiator, FI_REMOTE_WRITE and
// FI_REMOTE_READ at an FI_RMA_EVENT target); the atomic orders of
// msg_order.
#include <rdma/fi_atomic.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "fabric/fi/conformance/conformance.h"

namespace bypass::fi::conformance {
namespace {

constexpr size_t kWords = 8;

// An initiator a and a target b with a region of kWords uint64_t on b's
// domain (access as given), counters on both sides when asked.
struct Atomics {
  fi_info* info = nullptr;
  Ep a, b;
  fi_addr_t to_b = FI_ADDR_NOTAVAIL;
  uint64_t* region = nullptr;
  fid_mr* mr = nullptr;
  uint64_t addr = 0;
  uint64_t key = 0;
  fid_cntr *write = nullptr, *read = nullptr, *remote_write = nullptr, *remote_read = nullptr;
};

fi_info* AtomicInfo(Ctx& c, uint64_t extra_caps = 0) {
  fi_info* h = c.Hints(FI_MSG | FI_RMA | FI_ATOMIC | extra_caps);
  fi_info* i = c.Info(h);
  CHECK(i->caps & FI_ATOMIC, "fi_getinfo answered without the FI_ATOMIC asked for");
  return i;
}

Atomics OpenAtomics(Ctx& c, uint64_t access, bool counters = false) {
  Atomics r;
  r.info = AtomicInfo(c, counters ? FI_RMA_EVENT : 0);
  fid_fabric* f = c.Fabric(r.info);
  fid_domain* da = c.Domain(f, r.info);
  fid_domain* db = c.Domain(f, r.info);
  EpOpts oa, ob;
  if (counters) {
    r.write = c.Cntr(da);
    r.read = c.Cntr(da);
    r.remote_write = c.Cntr(db);
    r.remote_read = c.Cntr(db);
    oa.opened = OpenWithCntrs(c, da, r.info, {{r.write, FI_WRITE}, {r.read, FI_READ}});
    ob.opened = OpenWithCntrs(c, db, r.info,
                            {{r.remote_write, FI_REMOTE_WRITE}, {r.remote_read, FI_REMOTE_READ}});
  }
  r.region = reinterpret_cast<uint64_t*>(c.Buf(kWords * sizeof(uint64_t)));
  static uint64_t next_key = 190;
  CHECK_RET(fi_mr_reg(db, r.region, kWords * sizeof(uint64_t), access, 0, next_key++, 0, &r.mr,
                      nullptr),
            0);
  c.Own(&r.mr->fid);
  r.a = c.OpenEp(da, r.info, oa);
  r.b = c.OpenEp(db, r.info, ob);
  if (r.info->domain_attr->mr_mode & FI_MR_ENDPOINT) {
    CHECK_RET(fi_mr_bind(r.mr, &r.b.ep->fid, 0), 0);
    CHECK_RET(fi_mr_enable(r.mr), 0);
  }
  r.to_b = c.Insert(r.a.av, r.b.name);
  c.Insert(r.b.av, r.a.name);
  r.addr = RmaAddr(r.info, r.region);
  r.key = fi_mr_key(r.mr);
  return r;
}

// Waits for the one atomic posted last; its flags must be want.
void Done(Ctx& c, Atomics& r, uint64_t want, const char* what) {
  const Completion done = c.Wait(r.a.tx, what);
  CHECK(!done.error, what << " failed: " << Err(-done.err.err));
  CHECK(done.entry.flags == want, what << " completed with flags 0x" << std::hex
                                       << done.entry.flags << ", want 0x" << want);
}

}  // namespace

// fi_getinfo(3): FI_ATOMIC asked on FI_EP_RDM is offered.
CONFORMANCE_CASE(atomic_getinfo_caps, kShm) { AtomicInfo(c); }

// fi_atomic(3), "Atomic Valid Functions": a supported pair answers 0 and a
// count of at least 1; a call family that does not take the op (CSWAP in
// fi_atomicvalid, ATOMIC_READ in fi_atomicvalid) and a pair the provider
// does not support answer -FI_EOPNOTSUPP rather than a count.
CONFORMANCE_CASE(atomic_valid_calls, kShm) {
  Atomics r = OpenAtomics(c, FI_REMOTE_READ | FI_REMOTE_WRITE);
  size_t count = 0;
  CHECK_RET(fi_atomicvalid(r.a.ep, FI_UINT64, FI_SUM, &count), 0);
  CHECK(count >= 1, "fi_atomicvalid(UINT64, SUM) gave count " << count);
  CHECK_RET(fi_fetch_atomicvalid(r.a.ep, FI_UINT64, FI_ATOMIC_READ, &count), 0);
  CHECK(count >= 1, "fi_fetch_atomicvalid(UINT64, ATOMIC_READ) gave count " << count);
  CHECK_RET(fi_compare_atomicvalid(r.a.ep, FI_UINT64, FI_CSWAP, &count), 0);
  CHECK(count >= 1, "fi_compare_atomicvalid(UINT64, CSWAP) gave count " << count);
  CHECK_RET(fi_atomicvalid(r.a.ep, FI_UINT64, FI_CSWAP, &count), -FI_EOPNOTSUPP);
  CHECK_RET(fi_atomicvalid(r.a.ep, FI_UINT64, FI_ATOMIC_READ, &count), -FI_EOPNOTSUPP);
  CHECK_RET(fi_compare_atomicvalid(r.a.ep, FI_UINT64, FI_SUM, &count), -FI_EOPNOTSUPP);
}

// fi_atomic(3), "Query Atomic Attributes": fi_query_atomic agrees with the
// valid calls and reports the datatype's size; FI_FETCH_ATOMIC and
// FI_COMPARE_ATOMIC together are refused.
CONFORMANCE_CASE(atomic_query, kShm) {
  Atomics r = OpenAtomics(c, FI_REMOTE_READ | FI_REMOTE_WRITE);
  fi_atomic_attr attr{};
  size_t count = 0;
  CHECK_RET(fi_query_atomic(r.a.domain, FI_UINT32, FI_SUM, &attr, 0), 0);
  CHECK_RET(fi_atomicvalid(r.a.ep, FI_UINT32, FI_SUM, &count), 0);
  CHECK(attr.count == count && attr.size == 4,
        "fi_query_atomic(UINT32, SUM) gave count " << attr.count << " size " << attr.size
                                                   << "; fi_atomicvalid's count " << count);
  CHECK_RET(fi_query_atomic(r.a.domain, FI_DOUBLE, FI_CSWAP, &attr, FI_COMPARE_ATOMIC), 0);
  CHECK(attr.size == 8, "fi_query_atomic(DOUBLE, CSWAP) size " << attr.size);
  const int both = fi_query_atomic(r.a.domain, FI_UINT64, FI_SUM, &attr,
                                   FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC);
  CHECK(both < 0, "FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC together answered " << Err(both));
}

// fi_atomic(3): bitwise ops are not defined on floating point; a provider
// answers -FI_EOPNOTSUPP for the pair rather than a count.
CONFORMANCE_CASE(atomic_valid_bitwise_float, kShm) {
  Atomics r = OpenAtomics(c, FI_REMOTE_READ | FI_REMOTE_WRITE);
  size_t count = 0;
  CHECK_RET(fi_atomicvalid(r.a.ep, FI_DOUBLE, FI_BOR, &count), -FI_EOPNOTSUPP);
  CHECK_RET(fi_compare_atomicvalid(r.a.ep, FI_FLOAT, FI_MSWAP, &count), -FI_EOPNOTSUPP);
}

// fi_atomic, fi_fetch_atomic, fi_compare_atomic: the target's values change
// as the man page's pseudo-code says, fetched values are the ones from
// before, and completions carry FI_ATOMIC with FI_WRITE (base) or FI_READ
// (fetch, compare) (fi_cq(3)).
CONFORMANCE_CASE(atomic_sum_fetch_cswap, kShm) {
  Atomics r = OpenAtomics(c, FI_REMOTE_READ | FI_REMOTE_WRITE);
  for (size_t i = 0; i < kWords; ++i) r.region[i] = 100 + i;
  const uint64_t add[2] = {5, 6};
  c.Post("fi_atomic", [&] {
    return fi_atomic(r.a.ep, add, 2, nullptr, r.to_b, r.addr, r.key, FI_UINT64, FI_SUM, nullptr);
  });
  // A base atomic's completion says only that its buffer may be reused
  // (fi_atomic(3), "Completions"): the fetch after it shows what it did.
  Done(c, r, FI_ATOMIC | FI_WRITE, "the fi_atomic");
  uint64_t old[2] = {0, 0};
  c.Post("fi_fetch_atomic", [&] {
    return fi_fetch_atomic(r.a.ep, add, 2, nullptr, old, nullptr, r.to_b, r.addr, r.key,
                           FI_UINT64, FI_MAX, nullptr);
  });
  Done(c, r, FI_ATOMIC | FI_READ, "the fi_fetch_atomic");
  CHECK(old[0] == 105 && old[1] == 107, "fetched " << old[0] << ", " << old[1] << " after FI_SUM");
  CHECK(r.region[0] == 105, "FI_MAX lowered the target to " << r.region[0]);
  const uint64_t swap = 1, cmp = 102;
  uint64_t was = 0;
  c.Post("fi_compare_atomic", [&] {
    return fi_compare_atomic(r.a.ep, &swap, 1, nullptr, &cmp, nullptr, &was, nullptr, r.to_b,
                             r.addr + 16, r.key, FI_UINT64, FI_CSWAP, nullptr);
  });
  Done(c, r, FI_ATOMIC | FI_READ, "the fi_compare_atomic");
  CHECK(was == 102 && r.region[2] == 1, "CSWAP fetched " << was << ", left " << r.region[2]);
}

// fi_atomic(3): "The target buffer of fetch-atomic operations must be
// enabled for remote read access": a region without FI_REMOTE_READ fails
// the fetch at the initiator and keeps its value.
CONFORMANCE_CASE(atomic_fetch_needs_remote_read, kShm) {
  Atomics r = OpenAtomics(c, FI_REMOTE_WRITE);
  r.region[0] = 9;
  const uint64_t one = 1;
  uint64_t old = 0;
  c.Post("fi_fetch_atomic", [&] {
    return fi_fetch_atomic(r.a.ep, &one, 1, nullptr, &old, nullptr, r.to_b, r.addr, r.key,
                           FI_UINT64, FI_SUM, nullptr);
  });
  const Completion done = c.Wait(r.a.tx, "the fi_fetch_atomic");
  CHECK(done.error, "a fetch from a region without FI_REMOTE_READ completed without error");
  CHECK(r.region[0] == 9, "the target changed to " << r.region[0]);
}

// fi_endpoint(3), fi_ep_bind: FI_WRITE counts base atomics, FI_READ fetch
// and compare atomics at the initiator; FI_REMOTE_WRITE base atomics and
// FI_REMOTE_READ fetch and compare atomics at an FI_RMA_EVENT target; each
// once.
CONFORMANCE_CASE(atomic_counters, kShm) {
  Atomics r = OpenAtomics(c, FI_REMOTE_READ | FI_REMOTE_WRITE, /*counters=*/true);
  const uint64_t one = 1;
  uint64_t old = 0;
  for (int k = 0; k < 3; ++k) {
    c.Post("fi_atomic", [&] {
      return fi_atomic(r.a.ep, &one, 1, nullptr, r.to_b, r.addr, r.key, FI_UINT64, FI_SUM,
                       nullptr);
    });
    Done(c, r, FI_ATOMIC | FI_WRITE, "the fi_atomic");
  }
  for (int k = 0; k < 2; ++k) {
    c.Post("fi_fetch_atomic", [&] {
      return fi_fetch_atomic(r.a.ep, &one, 1, nullptr, &old, nullptr, r.to_b, r.addr, r.key,
                             FI_UINT64, FI_SUM, nullptr);
    });
    Done(c, r, FI_ATOMIC | FI_READ, "the fi_fetch_atomic");
  }
  c.WaitCntr(r.remote_write, 3, "the target's FI_REMOTE_WRITE counter");
  c.WaitCntr(r.remote_read, 2, "the target's FI_REMOTE_READ counter");
  for (int i = 0; i < 300; ++i) c.Progress();
  CHECK(r.region[0] == 5, "the target reads " << r.region[0] << " after 5 additions of 1");
  CHECK(fi_cntr_read(r.write) == 3, "FI_WRITE counted " << fi_cntr_read(r.write) << " of 3");
  CHECK(fi_cntr_read(r.read) == 2, "FI_READ counted " << fi_cntr_read(r.read) << " of 2");
  CHECK(fi_cntr_read(r.remote_write) == 3,
        "FI_REMOTE_WRITE counted " << fi_cntr_read(r.remote_write) << " of 3");
  CHECK(fi_cntr_read(r.remote_read) == 2,
        "FI_REMOTE_READ counted " << fi_cntr_read(r.remote_read) << " of 2");
}

// fi_endpoint(3), msg_order: FI_ORDER_ATOMIC_RAR, _RAW, _WAR and _WAW asked
// in tx_attr and rx_attr are answered; a write then a read of one word,
// posted back to back, read what was written.
CONFORMANCE_CASE(atomic_order_raw, kShm) {
  fi_info* h = c.Hints(FI_MSG | FI_RMA | FI_ATOMIC);
  constexpr uint64_t kOrder =
      FI_ORDER_ATOMIC_RAR | FI_ORDER_ATOMIC_RAW | FI_ORDER_ATOMIC_WAR | FI_ORDER_ATOMIC_WAW;
  h->tx_attr->msg_order = kOrder;
  h->rx_attr->msg_order = kOrder;
  fi_info* i = c.Info(h);
  CHECK((i->tx_attr->msg_order & kOrder) == kOrder, "tx msg_order 0x" << std::hex
                                                                      << i->tx_attr->msg_order);
  Atomics r = OpenAtomics(c, FI_REMOTE_READ | FI_REMOTE_WRITE);
  const uint64_t v = 77;
  uint64_t got = 0;
  c.Post("fi_atomic", [&] {
    return fi_atomic(r.a.ep, &v, 1, nullptr, r.to_b, r.addr, r.key, FI_UINT64, FI_ATOMIC_WRITE,
                     nullptr);
  });
  c.Post("fi_fetch_atomic", [&] {
    return fi_fetch_atomic(r.a.ep, nullptr, 1, nullptr, &got, nullptr, r.to_b, r.addr, r.key,
                           FI_UINT64, FI_ATOMIC_READ, nullptr);
  });
  c.Wait(r.a.tx, "the first atomic");
  c.Wait(r.a.tx, "the second atomic");
  CHECK(got == 77, "the read posted after the write fetched " << got);
}

}  // namespace bypass::fi::conformance
