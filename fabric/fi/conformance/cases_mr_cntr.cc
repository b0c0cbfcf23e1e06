// fi_mr(3) and fi_cntr(3): remote access rights enforced at the target with
// an error completion at the initiator, keys; counter add/set/read/readerr,
// wait and its timeout, counting completions and errors.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "fabric/fi/conformance/conformance.h"

namespace bypass::fi::conformance {
namespace {

constexpr size_t kLen = 256;

// The target's region (registered on b's domain with `access`) and a local
// buffer at a; the pair carries RMA.
struct Rma {
  Pair p;
  char* target;
  char* local;
  fid_mr* mr = nullptr;  // null when registration refused `access`
  int reg = 0;
};

Rma OpenRma(Ctx& c, uint64_t access) {
  Rma r;
  r.p = c.OpenPair(c.Hints(FI_MSG | FI_RMA));
  r.target = c.Buf(kLen, 'T');
  r.local = c.Buf(kLen, 'L');
  static uint64_t next_key = 1;
  r.reg = fi_mr_reg(r.p.b.domain, r.target, kLen, access, 0, next_key++, 0, &r.mr, nullptr);
  if (r.reg == 0) {
    c.Own(&r.mr->fid);
    if (r.p.b.info->domain_attr->mr_mode & FI_MR_ENDPOINT) {
      CHECK_RET(fi_mr_bind(r.mr, &r.p.b.ep->fid, 0), 0);
      CHECK_RET(fi_mr_enable(r.mr), 0);
    }
  } else {
    r.mr = nullptr;
  }
  return r;
}

// An fi_write or fi_read (write=false) of the whole region.
Completion Access(Ctx& c, Rma& r, bool write, uint64_t key_delta = 0) {
  CHECK(r.mr != nullptr, "fi_mr_reg failed: " << Err(r.reg));
  const uint64_t key = fi_mr_key(r.mr) + key_delta;
  const uint64_t addr = RmaAddr(r.p.b.info, r.target);
  static int ctx;
  c.Post(write ? "fi_write" : "fi_read", [&] {
    return write ? fi_write(r.p.a.ep, r.local, kLen, nullptr, r.p.a_to_b, addr, key, &ctx)
                 : fi_read(r.p.a.ep, r.local, kLen, nullptr, r.p.a_to_b, addr, key, &ctx);
  });
  Completion done = c.Wait(r.p.a.tx, write ? "the fi_write" : "the fi_read");
  const void* got = done.error ? done.err.op_context : done.entry.op_context;
  CHECK(got == &ctx, "the RMA completion's op_context is not the operation's");
  return done;
}

// An access the region's rights do not allow: registration itself may
// refuse `access`; otherwise the initiator gets an error completion and
// neither side's memory changes.
void RefusedAccess(Ctx& c, uint64_t access, bool write, uint64_t key_delta = 0) {
  Rma r = OpenRma(c, access);
  if (r.mr == nullptr && key_delta == 0) return;  // refused at fi_mr_reg
  const Completion done = Access(c, r, write, key_delta);
  CHECK(done.error, "a remote " << (write ? "write" : "read") << " the region's access 0x" << std::hex << access
                                << " does not allow completed without error");
  Completion extra;
  c.Poll(r.p.b.rx, &extra, 200);  // the target gets its chance to misbehave
  CHECK(std::count(r.target, r.target + kLen, 'T') == kLen, "the target region was written");
  CHECK(std::count(r.local, r.local + kLen, 'L') == kLen, "the initiator's buffer was written");
}

}  // namespace

// FI_REMOTE_WRITE: fi_write lands.
CONFORMANCE_CASE(mr_remote_write_allowed, kShm) {
  Rma r = OpenRma(c, FI_REMOTE_WRITE);
  const Completion done = Access(c, r, true);
  CHECK(!done.error, "the fi_write failed: " << Err(-done.err.err));
  CHECK(std::memcmp(r.target, r.local, kLen) == 0, "the target region does not hold the written bytes");
}

// FI_REMOTE_READ: fi_read fetches.
CONFORMANCE_CASE(mr_remote_read_allowed, kShm) {
  Rma r = OpenRma(c, FI_REMOTE_READ);
  const Completion done = Access(c, r, false);
  CHECK(!done.error, "the fi_read failed: " << Err(-done.err.err));
  CHECK(std::memcmp(r.target, r.local, kLen) == 0, "the local buffer does not hold the region's bytes");
}

// "FI_REMOTE_WRITE: The memory buffer may be used as the target buffer of
// an RMA write": without it, no remote write.
CONFORMANCE_CASE(mr_access_zero_refuses_write, kShm) { RefusedAccess(c, 0, true); }
CONFORMANCE_CASE(mr_access_zero_refuses_read, kShm) { RefusedAccess(c, 0, false); }
CONFORMANCE_CASE(mr_access_read_refuses_write, kShm) { RefusedAccess(c, FI_READ, true); }
CONFORMANCE_CASE(mr_access_read_refuses_read, kShm) { RefusedAccess(c, FI_READ, false); }
CONFORMANCE_CASE(mr_remote_read_refuses_write, kShm) { RefusedAccess(c, FI_REMOTE_READ, true); }
CONFORMANCE_CASE(mr_remote_write_refuses_read, kShm) { RefusedAccess(c, FI_REMOTE_WRITE, false); }

// A key no region has: an error completion at the initiator.
CONFORMANCE_CASE(mr_bad_key, kShm) { RefusedAccess(c, FI_REMOTE_WRITE | FI_REMOTE_READ, true, 0x5151); }

// Two regions have two keys (the provider's under FI_MR_PROV_KEY, else the
// requested ones).
CONFORMANCE_CASE(mr_keys_distinct, kShm) {
  fi_info* i = c.Info(c.Hints(FI_MSG | FI_RMA));
  fid_domain* d = c.Domain(c.Fabric(i), i);
  static char a[64], b[64];
  fid_mr *ma, *mb;
  CHECK_RET(fi_mr_reg(d, a, sizeof a, FI_REMOTE_WRITE, 0, 11, 0, &ma, nullptr), 0);
  c.Own(&ma->fid);
  CHECK_RET(fi_mr_reg(d, b, sizeof b, FI_REMOTE_WRITE, 0, 12, 0, &mb, nullptr), 0);
  c.Own(&mb->fid);
  CHECK(fi_mr_key(ma) != fi_mr_key(mb), "two regions share key " << fi_mr_key(ma));
  if (!(i->domain_attr->mr_mode & FI_MR_PROV_KEY)) {
    CHECK(fi_mr_key(ma) == 11 && fi_mr_key(mb) == 12, "the requested keys were not used without FI_MR_PROV_KEY");
  }
}

// fi_cntr_add / fi_cntr_set / fi_cntr_read.
CONFORMANCE_CASE(cntr_add_set_read, kShm) {
  fi_info* i = c.Info(c.Hints());
  fid_cntr* n = c.Cntr(c.Domain(c.Fabric(i), i));
  CHECK(fi_cntr_read(n) == 0, "a new counter reads " << fi_cntr_read(n));
  CHECK_RET(fi_cntr_add(n, 5), 0);
  CHECK(fi_cntr_read(n) == 5, "after add 5 it reads " << fi_cntr_read(n));
  CHECK_RET(fi_cntr_set(n, 2), 0);
  CHECK(fi_cntr_read(n) == 2, "after set 2 it reads " << fi_cntr_read(n));
}

// fi_cntr_adderr / fi_cntr_seterr / fi_cntr_readerr, apart from the value.
CONFORMANCE_CASE(cntr_err_add_set_read, kShm) {
  fi_info* i = c.Info(c.Hints());
  fid_cntr* n = c.Cntr(c.Domain(c.Fabric(i), i));
  CHECK_RET(fi_cntr_adderr(n, 3), 0);
  CHECK(fi_cntr_readerr(n) == 3, "after adderr 3 it reads " << fi_cntr_readerr(n));
  CHECK_RET(fi_cntr_seterr(n, 1), 0);
  CHECK(fi_cntr_readerr(n) == 1, "after seterr 1 it reads " << fi_cntr_readerr(n));
  CHECK(fi_cntr_read(n) == 0, "the errors moved the value to " << fi_cntr_read(n));
}

// fi_cntr_wait returns 0 once the value reaches the threshold.
CONFORMANCE_CASE(cntr_wait_reached, kShm) {
  fi_info* i = c.Info(c.Hints());
  fid_cntr* n = c.Cntr(c.Domain(c.Fabric(i), i), FI_WAIT_UNSPEC);
  CHECK_RET(fi_cntr_set(n, 5), 0);
  HangGuard guard(kHangSeconds + 5, "fi_cntr_wait");
  CHECK_RET(fi_cntr_wait(n, 3, kHangSeconds * 1000), 0);
}

// "If the call returns due to timeout, -FI_ETIMEDOUT will be returned. The
// error value associated with the counter remains unchanged."
CONFORMANCE_CASE(cntr_wait_timeout, kShm) {
  fi_info* i = c.Info(c.Hints());
  fid_cntr* n = c.Cntr(c.Domain(c.Fabric(i), i), FI_WAIT_UNSPEC);
  CHECK_RET(fi_cntr_set(n, 5), 0);
  {
    HangGuard guard(kHangSeconds, "fi_cntr_wait with a 20 ms timeout");
    CHECK_RET(fi_cntr_wait(n, 10, 20), -FI_ETIMEDOUT);
  }
  CHECK(fi_cntr_readerr(n) == 0, "the timeout moved the error value to " << fi_cntr_readerr(n));
  CHECK(fi_cntr_read(n) == 5, "the timeout moved the value to " << fi_cntr_read(n));
}

// "an increment in a counter's error value will unblock any thread inside
// fi_cntr_wait" (FI_THREAD_SAFE, errors added from another thread).
CONFORMANCE_CASE(cntr_wait_error_unblocks, kShm) {
  fi_info* h = c.Hints();
  h->domain_attr->threading = FI_THREAD_SAFE;
  fi_info* i = c.Info(h);
  fid_cntr* n = c.Cntr(c.Domain(c.Fabric(i), i), FI_WAIT_UNSPEC);
  std::atomic<bool> done{false};
  std::thread errors([&] {
    while (!done.load()) {
      fi_cntr_adderr(n, 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  int r;
  {
    HangGuard guard(kHangSeconds + 5, "fi_cntr_wait");
    r = fi_cntr_wait(n, 1, kHangSeconds * 1000);
  }
  done = true;
  errors.join();
  CHECK(r != -FI_ETIMEDOUT, "hang: fi_cntr_wait stayed blocked for " << kHangSeconds
                                                                    << " s while the error value grew");
  CHECK(r < 0, "fi_cntr_wait returned " << Err(r) << " with the value below the threshold");
}

// A counter bound FI_SEND / FI_RECV counts completed operations.
CONFORMANCE_CASE(cntr_counts_ops, kShm) {
  fi_info* i = c.Info(c.Hints());
  fid_fabric* f = c.Fabric(i);
  fid_domain* da = c.Domain(f, i);
  fid_domain* db = c.Domain(f, i);
  fid_cntr* sent = c.Cntr(da);
  fid_cntr* recvd = c.Cntr(db);
  EpOpts oa, ob;
  oa.format = ob.format = FI_CQ_FORMAT_CONTEXT;
  oa.cntr = sent;
  oa.cntr_flags = FI_SEND;
  ob.cntr = recvd;
  ob.cntr_flags = FI_RECV;
  Ep a = c.OpenEp(da, i, oa);
  Ep b = c.OpenEp(db, i, ob);
  const fi_addr_t to_b = c.Insert(a.av, b.name);
  static char in[3][8], out[8] = "count";
  for (auto& buf : in) CHECK_RET(fi_recv(b.ep, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  for (int k = 0; k < 3; ++k) c.Post("fi_send", [&] { return fi_send(a.ep, out, sizeof out, nullptr, to_b, nullptr); });
  c.WaitCntr(recvd, 3, "the three receives");
  c.WaitCntr(sent, 3, "the three sends");
  CHECK(fi_cntr_readerr(sent) == 0 && fi_cntr_readerr(recvd) == 0, "an error counted");
}

}  // namespace bypass::fi::conformance
