// Issue 18, parts 2, 6 and 7: counters for every event class of fi_cntr(3)
// with FI_RMA_EVENT (remote reads and writes counted at the target, once),
// FI_MR_RMA_EVENT with fi_mr_bind to counters and fi_mr_enable, seterr and
// readerr beside real errors; shared receive and transmit contexts
// (fi_srx_context, fi_stx_context, FI_SHARED_CONTEXT); shared AVs
// (FI_AV_NAME, in cases_multiprocess style with two processes).
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "fabric/fi/conformance/conformance.h"

namespace bypass::fi::conformance {
namespace {

constexpr size_t kLen = 512;

// An initiator a and a target b on two domains of one fabric, with
// counters bound before enable: on a FI_WRITE and FI_READ, on b
// FI_REMOTE_WRITE and FI_REMOTE_READ (each its own counter), and a region
// of b's domain open to remote reads and writes.
struct RmaCntrs {
  fi_info* info = nullptr;
  Ep a, b;
  fi_addr_t to_b = FI_ADDR_NOTAVAIL;
  fid_cntr *write = nullptr, *read = nullptr, *remote_write = nullptr, *remote_read = nullptr;
  char* region = nullptr;
  char* local = nullptr;
  fid_mr* mr = nullptr;
};

fid_ep* OpenWithCntrs(Ctx& c, fid_domain* d, fi_info* i,
                      const std::vector<std::pair<fid_cntr*, uint64_t>>& binds) {
  fid_ep* ep = nullptr;
  CHECK_RET(fi_endpoint(d, i, &ep, nullptr), 0);
  c.Own(&ep->fid);
  for (const auto& [cntr, flags] : binds) CHECK_RET(fi_ep_bind(ep, &cntr->fid, flags), 0);
  return ep;
}

fi_info* RmaEventInfo(Ctx& c, uint64_t extra_mr_mode = 0) {
  fi_info* h = c.Hints(FI_MSG | FI_RMA | FI_RMA_EVENT);
  h->domain_attr->mr_mode |= extra_mr_mode;
  fi_info* i = c.Info(h);
  CHECK(i->caps & FI_RMA_EVENT, "fi_getinfo answered without the FI_RMA_EVENT asked for");
  return i;
}

RmaCntrs OpenRmaCntrs(Ctx& c) {
  RmaCntrs r;
  r.info = RmaEventInfo(c);
  fid_fabric* f = c.Fabric(r.info);
  fid_domain* da = c.Domain(f, r.info);
  fid_domain* db = c.Domain(f, r.info);
  r.write = c.Cntr(da);
  r.read = c.Cntr(da);
  r.remote_write = c.Cntr(db);
  r.remote_read = c.Cntr(db);
  EpOpts oa, ob;
  oa.opened = OpenWithCntrs(c, da, r.info, {{r.write, FI_WRITE}, {r.read, FI_READ}});
  ob.opened = OpenWithCntrs(c, db, r.info,
                            {{r.remote_write, FI_REMOTE_WRITE}, {r.remote_read, FI_REMOTE_READ}});
  r.region = c.Buf(kLen, 'T');
  r.local = c.Buf(kLen, 'L');
  CHECK_RET(fi_mr_reg(db, r.region, kLen, FI_REMOTE_WRITE | FI_REMOTE_READ, 0, 77, 0, &r.mr, nullptr), 0);
  c.Own(&r.mr->fid);
  r.a = c.OpenEp(da, r.info, oa);
  r.b = c.OpenEp(db, r.info, ob);
  r.to_b = c.Insert(r.a.av, r.b.name);
  c.Insert(r.b.av, r.a.name);
  return r;
}

// An fi_write (or fi_read) of the region's first `len` bytes, waited for at
// the initiator; it must succeed.
void Access(Ctx& c, const fi_info* info, Ep& a, fi_addr_t to, char* local, char* region, fid_mr* mr,
            bool write, size_t len = kLen) {
  const uint64_t addr = RmaAddr(info, region);
  const uint64_t key = fi_mr_key(mr);
  c.Post(write ? "fi_write" : "fi_read", [&] {
    return write ? fi_write(a.ep, local, len, nullptr, to, addr, key, nullptr)
                 : fi_read(a.ep, local, len, nullptr, to, addr, key, nullptr);
  });
  const Completion done = c.Wait(a.tx, write ? "the fi_write" : "the fi_read");
  CHECK(!done.error, (write ? "the fi_write" : "the fi_read") << " failed: " << Err(-done.err.err));
}

// Progress for a while, so that an event counted twice would show.
void Settle(Ctx& c) {
  for (int i = 0; i < 300; ++i) c.Progress();
}

}  // namespace

// fi_cntr(3) / fi_endpoint(3): FI_WRITE and FI_READ count the initiator's
// RMA, FI_REMOTE_WRITE and FI_REMOTE_READ the target's (FI_RMA_EVENT),
// each access exactly once and only in its own class.
CONFORMANCE_CASE(cntr_rma_event_classes, kShm) {
  RmaCntrs r = OpenRmaCntrs(c);
  for (int k = 0; k < 5; ++k) Access(c, r.info, r.a, r.to_b, r.local, r.region, r.mr, true);
  for (int k = 0; k < 3; ++k) Access(c, r.info, r.a, r.to_b, r.local, r.region, r.mr, false);
  c.WaitCntr(r.remote_write, 5, "the target's FI_REMOTE_WRITE counter");
  c.WaitCntr(r.remote_read, 3, "the target's FI_REMOTE_READ counter");
  Settle(c);
  CHECK(fi_cntr_read(r.write) == 5, "FI_WRITE counted " << fi_cntr_read(r.write) << " of 5 writes");
  CHECK(fi_cntr_read(r.read) == 3, "FI_READ counted " << fi_cntr_read(r.read) << " of 3 reads");
  CHECK(fi_cntr_read(r.remote_write) == 5,
        "FI_REMOTE_WRITE counted " << fi_cntr_read(r.remote_write) << " of 5 remote writes");
  CHECK(fi_cntr_read(r.remote_read) == 3,
        "FI_REMOTE_READ counted " << fi_cntr_read(r.remote_read) << " of 3 remote reads");
  for (fid_cntr* n : {r.write, r.read, r.remote_write, r.remote_read}) {
    CHECK(fi_cntr_readerr(n) == 0, "an error was counted: " << fi_cntr_readerr(n));
  }
}

// fi_writedata with FI_REMOTE_CQ_DATA: one receive-CQ entry at the target
// (FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, the data) and one count on its
// FI_REMOTE_WRITE counter.
CONFORMANCE_CASE(cntr_remote_write_cq_data, kShm) {
  RmaCntrs r = OpenRmaCntrs(c);
  const uint64_t addr = RmaAddr(r.info, r.region);
  c.Post("fi_writedata", [&] {
    return fi_writedata(r.a.ep, r.local, 64, nullptr, 0x5eed, r.to_b, addr, fi_mr_key(r.mr), nullptr);
  });
  CHECK(!c.Wait(r.a.tx, "the fi_writedata").error, "the fi_writedata failed");
  const Completion got = c.Wait(r.b.rx, "the target's remote CQ data entry");
  CHECK(!got.error, "the target's entry is an error: " << Err(-got.err.err));
  CHECK(got.entry.flags & FI_REMOTE_CQ_DATA, "flags 0x" << std::hex << got.entry.flags << " lack FI_REMOTE_CQ_DATA");
  CHECK(got.entry.flags & FI_REMOTE_WRITE, "flags 0x" << std::hex << got.entry.flags << " lack FI_REMOTE_WRITE");
  CHECK(got.entry.data == 0x5eed, "data 0x" << std::hex << got.entry.data);
  c.WaitCntr(r.remote_write, 1, "the target's FI_REMOTE_WRITE counter");
  Settle(c);
  CHECK(fi_cntr_read(r.remote_write) == 1, "FI_REMOTE_WRITE counted " << fi_cntr_read(r.remote_write));
  Completion extra;
  CHECK(!c.Poll(r.b.rx, &extra, 100), "a second target entry for one fi_writedata");
}

// fi_cntr_seterr / fi_cntr_readerr: a failed operation adds to the error
// value that was set; the success value does not move.
CONFORMANCE_CASE(cntr_seterr_then_error, kShm) {
  RmaCntrs r = OpenRmaCntrs(c);
  CHECK_RET(fi_cntr_seterr(r.write, 7), 0);
  CHECK_RET(fi_cntr_set(r.write, 2), 0);
  const uint64_t addr = RmaAddr(r.info, r.region);
  c.Post("fi_write", [&] {
    return fi_write(r.a.ep, r.local, 16, nullptr, r.to_b, addr, fi_mr_key(r.mr) ^ 0x5151, nullptr);
  });
  const Completion done = c.Wait(r.a.tx, "the fi_write through a bad key");
  CHECK(done.error, "a write through a key no region has succeeded");
  CHECK(fi_cntr_readerr(r.write) == 8, "readerr " << fi_cntr_readerr(r.write) << " after seterr 7 and one error");
  CHECK(fi_cntr_read(r.write) == 2, "read " << fi_cntr_read(r.write) << " after set 2 and one error");
  CHECK(fi_cntr_read(r.remote_write) == 0, "the refused write counted at the target");
}

// fi_mr(3) FI_MR_RMA_EVENT: a region registered with FI_RMA_EVENT is bound
// to a counter (FI_REMOTE_WRITE) and enabled; writes into it count there,
// writes into another region do not.
CONFORMANCE_CASE(mr_rma_event_bind_enable, kShm) {
  fi_info* i = RmaEventInfo(c, FI_MR_RMA_EVENT);
  fid_fabric* f = c.Fabric(i);
  fid_domain* da = c.Domain(f, i);
  fid_domain* db = c.Domain(f, i);
  char* region = c.Buf(kLen, 'T');
  char* other = c.Buf(kLen, 'O');
  char* local = c.Buf(kLen, 'L');
  fid_mr *mr = nullptr, *mr_other = nullptr;
  CHECK_RET(fi_mr_reg(db, region, kLen, FI_REMOTE_WRITE, 0, 81, FI_RMA_EVENT, &mr, nullptr), 0);
  c.Own(&mr->fid);
  CHECK_RET(fi_mr_reg(db, other, kLen, FI_REMOTE_WRITE, 0, 82, FI_RMA_EVENT, &mr_other, nullptr), 0);
  c.Own(&mr_other->fid);
  fid_cntr* counted = c.Cntr(db);
  CHECK_RET(fi_mr_bind(mr, &counted->fid, FI_REMOTE_WRITE), 0);
  CHECK_RET(fi_mr_enable(mr), 0);
  CHECK_RET(fi_mr_enable(mr_other), 0);
  Ep a = c.OpenEp(da, i);
  Ep b = c.OpenEp(db, i);
  const fi_addr_t to_b = c.Insert(a.av, b.name);
  c.Insert(b.av, a.name);
  for (int k = 0; k < 4; ++k) Access(c, i, a, to_b, local, region, mr, true);
  Access(c, i, a, to_b, local, other, mr_other, true);
  c.WaitCntr(counted, 4, "the region's counter");
  Settle(c);
  CHECK(fi_cntr_read(counted) == 4, "the region's counter reads " << fi_cntr_read(counted) << " after 4 writes");
  CHECK(std::memcmp(region, local, kLen) == 0, "the writes did not land");
}

// fi_mr(3): "After calling fi_mr_enable(), no further resource bindings may
// be made to the memory region."
CONFORMANCE_CASE(mr_bind_after_enable_refused, kShm) {
  fi_info* i = RmaEventInfo(c, FI_MR_RMA_EVENT);
  CHECK(i->domain_attr->mr_mode & FI_MR_RMA_EVENT, "the entry does not require FI_MR_RMA_EVENT");
  fid_domain* d = c.Domain(c.Fabric(i), i);
  char* region = c.Buf(kLen);
  fid_mr* mr = nullptr;
  CHECK_RET(fi_mr_reg(d, region, kLen, FI_REMOTE_WRITE, 0, 91, FI_RMA_EVENT, &mr, nullptr), 0);
  c.Own(&mr->fid);
  CHECK_RET(fi_mr_enable(mr), 0);
  fid_cntr* n = c.Cntr(d);
  CHECK_RET(fi_mr_bind(mr, &n->fid, FI_REMOTE_WRITE), -FI_EINVAL);
}

// fi_cntr(3): "When closing the counter, there must be no opened ...
// memory regions associated with the counter ... -FI_EBUSY".
CONFORMANCE_CASE(cntr_close_busy_mr_bound, kShm) {
  fi_info* i = RmaEventInfo(c, FI_MR_RMA_EVENT);
  fid_domain* d = c.Domain(c.Fabric(i), i);
  char* region = c.Buf(kLen);
  fid_mr* mr = nullptr;
  CHECK_RET(fi_mr_reg(d, region, kLen, FI_REMOTE_WRITE, 0, 92, FI_RMA_EVENT, &mr, nullptr), 0);
  c.Own(&mr->fid);
  fi_cntr_attr attr{};
  attr.events = FI_CNTR_EVENTS_COMP;
  fid_cntr* n = nullptr;
  CHECK_RET(fi_cntr_open(d, &attr, &n, nullptr), 0);
  CHECK_RET(fi_mr_bind(mr, &n->fid, FI_REMOTE_WRITE), 0);
  CHECK_RET(fi_close(&n->fid), -FI_EBUSY);
  CHECK_RET(c.Close(&mr->fid), 0);
  CHECK_RET(fi_close(&n->fid), 0);
}

}  // namespace bypass::fi::conformance
