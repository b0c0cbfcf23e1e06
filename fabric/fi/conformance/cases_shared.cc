// Issue 18, parts 2, 6 and 7: counters for every event class of fi_cntr(3)
// with FI_RMA_EVENT (remote reads and writes counted at the target, once),
// FI_MR_RMA_EVENT with fi_mr_bind to counters and fi_mr_enable, seterr and
// readerr beside real errors; shared receive and transmit contexts
// (fi_srx_context, fi_stx_context, FI_SHARED_CONTEXT); shared AVs
// (FI_AV_NAME, in cases_multiprocess style with two processes).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
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


// ---- Shared contexts.

// Endpoints a and b on one domain, opened with FI_SHARED_CONTEXT on the
// receive side (srx) or the transmit side (stx) and bound to one context,
// each with its own CQs, sharing one AV; two peers p and q on another
// domain, each knowing a and b, and known to them.
struct Shared {
  fi_info* info = nullptr;
  fid_domain* domain = nullptr;
  fid_ep* srx = nullptr;
  fid_stx* stx = nullptr;
  fid_av* av = nullptr;
  Ep a, b, p, q;
  fi_addr_t p_to[2] = {}, q_to[2] = {};  // p's and q's addresses of a and b
  fi_addr_t from_p = FI_ADDR_NOTAVAIL, from_q = FI_ADDR_NOTAVAIL;  // in a's and b's AV
};

// From hints asking FI_SHARED_CONTEXT on one side (rx: the receive side).
Shared OpenSharedFrom(Ctx& c, fi_info* hints, size_t size) {
  Shared s;
  s.info = c.Info(hints);
  const bool rx = hints->ep_attr->rx_ctx_cnt == FI_SHARED_CONTEXT;
  fid_fabric* f = c.Fabric(s.info);
  s.domain = c.Domain(f, s.info);
  if (rx) {
    fi_rx_attr attr = *s.info->rx_attr;
    attr.size = size;
    CHECK_RET(fi_srx_context(s.domain, &attr, &s.srx, nullptr), 0);
    c.Own(&s.srx->fid);
  } else {
    fi_tx_attr attr = *s.info->tx_attr;
    attr.size = size;
    CHECK_RET(fi_stx_context(s.domain, &attr, &s.stx, nullptr), 0);
    c.Own(&s.stx->fid);
  }
  s.av = c.Av(s.domain, FI_AV_TABLE);
  EpOpts o;
  o.av = s.av;
  for (Ep* e : {&s.a, &s.b}) {
    CHECK_RET(fi_endpoint(s.domain, s.info, &o.opened, nullptr), 0);
    c.Own(&o.opened->fid);
    CHECK_RET(fi_ep_bind(o.opened, rx ? &s.srx->fid : &s.stx->fid, 0), 0);
    *e = c.OpenEp(s.domain, s.info, o);
  }
  // The peers: plain endpoints of another domain.
  fi_info* plain_hints = c.Hints(FI_MSG | FI_TAGGED | FI_SOURCE);
  plain_hints->domain_attr->threading = hints->domain_attr->threading;
  fi_info* plain = c.Info(plain_hints);
  fid_domain* other = c.Domain(f, plain);
  s.p = c.OpenEp(other, plain);
  s.q = c.OpenEp(other, plain);
  for (int k = 0; k < 2; ++k) {
    s.p_to[k] = c.Insert(s.p.av, k == 0 ? s.a.name : s.b.name);
    s.q_to[k] = c.Insert(s.q.av, k == 0 ? s.a.name : s.b.name);
  }
  s.from_p = c.Insert(s.av, s.p.name);
  s.from_q = c.Insert(s.av, s.q.name);
  return s;
}

Shared OpenShared(Ctx& c, bool rx, size_t size) {
  fi_info* h = c.Hints(FI_MSG | FI_TAGGED | FI_SOURCE);
  (rx ? h->ep_attr->rx_ctx_cnt : h->ep_attr->tx_ctx_cnt) = FI_SHARED_CONTEXT;
  return OpenSharedFrom(c, h, size);
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

// fi_endpoint(3) asks only that what an endpoint uses be bound before
// fi_enable: an RMA target with no CQ, counting remote writes on a
// FI_REMOTE_WRITE counter (reading the counter progresses it).
CONFORMANCE_CASE(cntr_remote_write_no_cq, kShm) {
  fi_info* i = RmaEventInfo(c);
  fid_fabric* f = c.Fabric(i);
  fid_domain* da = c.Domain(f, i);
  fid_domain* db = c.Domain(f, i);
  fid_cntr* counted = c.Cntr(db);
  fid_ep* target = OpenWithCntrs(c, db, i, {{counted, FI_REMOTE_WRITE}});
  fid_av* av = c.Av(db, FI_AV_TABLE);
  CHECK_RET(fi_ep_bind(target, &av->fid, 0), 0);
  CHECK_RET(fi_enable(target), 0);
  std::vector<char> name(256);
  size_t len = name.size();
  CHECK_RET(fi_getname(&target->fid, name.data(), &len), 0);
  name.resize(len);
  char* region = c.Buf(kLen, 'T');
  char* local = c.Buf(kLen, 'L');
  fid_mr* mr = nullptr;
  CHECK_RET(fi_mr_reg(db, region, kLen, FI_REMOTE_WRITE, 0, 93, 0, &mr, nullptr), 0);
  c.Own(&mr->fid);
  Ep a = c.OpenEp(da, i);
  const fi_addr_t to = c.Insert(a.av, name);
  for (int k = 0; k < 3; ++k) {
    c.Post("fi_write", [&] { return fi_write(a.ep, local, kLen, nullptr, to, RmaAddr(i, region), fi_mr_key(mr), nullptr); });
    // The write completes once the target applied it: it must progress too.
    for (Completion done; !c.Poll(a.tx, &done, 1);) (void)fi_cntr_read(counted);
  }
  c.WaitCntr(counted, 3, "the target's FI_REMOTE_WRITE counter");
  CHECK(fi_cntr_read(counted) == 3, "the counter reads " << fi_cntr_read(counted) << " after 3 writes");
  CHECK(std::memcmp(region, local, kLen) == 0, "the writes did not land");
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

// fi_endpoint(3) "Shared Contexts": receives posted to a shared receive
// context take messages arriving at any endpoint bound to it; each
// completes in the receive CQ of the endpoint its message came to, and
// fi_cq_readfrom reports its sender. Two peers send to two endpoints, half
// of it before the receives are posted (unexpected).
CONFORMANCE_CASE(srx_two_endpoints_two_peers, kShm) {
  Shared s = OpenShared(c, true, 64);
  static char out[4][16];
  static char in[8][16];
  auto send = [&](Ep& from, fi_addr_t to, int id) {
    std::snprintf(out[id], sizeof out[id], "msg %d", id);
    c.Post("fi_send", [&] { return fi_send(from.ep, out[id], sizeof out[id], nullptr, to, nullptr); });
  };
  // p -> a and q -> b before any receive: they wait unexpected.
  send(s.p, s.p_to[0], 0);
  send(s.q, s.q_to[1], 1);
  for (int i = 0; i < 200; ++i) c.Progress();
  for (auto& buf : in) {
    c.Post("fi_recv on the srx", [&] { return fi_recv(s.srx, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, buf); });
  }
  // p -> b and q -> a after.
  send(s.p, s.p_to[1], 2);
  send(s.q, s.q_to[0], 3);
  // Who sent each message to which endpoint (0: a, 1: b).
  const struct {
    int at;
    fi_addr_t from;
  } want[4] = {{0, s.from_p}, {1, s.from_q}, {1, s.from_p}, {0, s.from_q}};
  bool seen[4] = {};
  for (int n = 0; n < 4; ++n) {
    Completion got;
    int at = -1;
    const double deadline_passes = 200000;
    for (int pass = 0; at < 0 && pass < deadline_passes; ++pass) {
      for (int k = 0; k < 2 && at < 0; ++k) {
        got = Completion{};
        const ssize_t r = fi_cq_readfrom((k == 0 ? s.a : s.b).rx, &got.entry, 1, &got.src);
        if (r == 1) at = k;
        CHECK(r == 1 || r == -FI_EAGAIN, "fi_cq_readfrom returned " << Err(r));
      }
      if (at < 0) c.Progress();
    }
    CHECK(at >= 0, "hang: only " << n << " of 4 messages completed");
    int id = -1;
    CHECK(std::sscanf(static_cast<const char*>(got.entry.buf), "msg %d", &id) == 1 && id >= 0 && id < 4,
          "a completion whose buffer holds no message");
    CHECK(!seen[id], "message " << id << " completed twice");
    seen[id] = true;
    CHECK(at == want[id].at, "message " << id << " completed at endpoint " << at << ", sent to " << want[id].at);
    CHECK(got.src == want[id].from, "message " << id << " reported source " << got.src << ", sent by "
                                                   << want[id].from);
    CHECK(got.entry.flags & FI_RECV, "flags 0x" << std::hex << got.entry.flags << " lack FI_RECV");
  }
}

// A message to one endpoint is taken by a receive on the srx even when
// the other endpoint's CQ is the one being read (progress of any bound
// endpoint), and the srx's receives match tags.
CONFORMANCE_CASE(srx_tagged_match, kShm) {
  Shared s = OpenShared(c, true, 16);
  static char in7[8], in9[8], out7[8] = "seven", out9[8] = "nine";
  c.Post("fi_trecv", [&] { return fi_trecv(s.srx, in9, sizeof in9, nullptr, FI_ADDR_UNSPEC, 9, 0, in9); });
  c.Post("fi_trecv", [&] { return fi_trecv(s.srx, in7, sizeof in7, nullptr, FI_ADDR_UNSPEC, 7, 0, in7); });
  c.Post("fi_tsend", [&] { return fi_tsend(s.p.ep, out7, sizeof out7, nullptr, s.p_to[1], 7, nullptr); });
  c.Post("fi_tsend", [&] { return fi_tsend(s.q.ep, out9, sizeof out9, nullptr, s.q_to[1], 9, nullptr); });
  for (int n = 0; n < 2; ++n) {
    const Completion got = c.Wait(s.b.rx, "a tagged message at b", true);
    CHECK(!got.error, "an error completion: " << Err(-got.err.err));
    if (got.entry.op_context == in7) {
      CHECK(got.entry.tag == 7 && std::strcmp(in7, "seven") == 0 && got.src == s.from_p, "tag 7 mismatched");
    } else {
      CHECK(got.entry.op_context == in9, "an op_context no receive had");
      CHECK(got.entry.tag == 9 && std::strcmp(in9, "nine") == 0 && got.src == s.from_q, "tag 9 mismatched");
    }
  }
}

// A receive posted through a bound endpoint goes to the shared queue: one
// of two buffers (fi_recvv) posted at a takes a message sent to b and
// completes at b with its context, the bytes scattered; fi_cancel on the
// srx ends another with FI_ECANCELED at one of the endpoints.
CONFORMANCE_CASE(srx_posted_through_endpoint, kShm) {
  Shared s = OpenShared(c, true, 16);
  static char head[4], tail[12], spare[16];
  static const char out[16] = "abcdefghijklmno";
  static int ctx_v, ctx_spare;
  iovec iov[2] = {{head, sizeof head}, {tail, sizeof tail}};
  const ssize_t posted = fi_recvv(s.a.ep, iov, nullptr, 2, FI_ADDR_UNSPEC, &ctx_v);
  if (posted == -FI_EINVAL && s.info->rx_attr->iov_limit < 2) Refuse("rx iov_limit is below 2");
  CHECK_RET(posted, 0);
  c.Post("fi_send to b", [&] { return fi_send(s.p.ep, out, sizeof out, nullptr, s.p_to[1], nullptr); });
  const Completion got = c.Wait(s.b.rx, "the message at b", true);
  CHECK(!got.error, "the receive failed: " << Err(-got.err.err));
  CHECK(got.entry.op_context == &ctx_v, "the completion's op_context is not the fi_recvv's");
  CHECK(got.src == s.from_p, "source " << got.src << ", sent by " << s.from_p);
  CHECK(std::memcmp(head, out, 4) == 0 && std::memcmp(tail, out + 4, 12) == 0, "the bytes were not scattered");
  CHECK_RET(fi_recv(s.srx, spare, sizeof spare, nullptr, FI_ADDR_UNSPEC, &ctx_spare), 0);
  CHECK_RET(fi_cancel(&s.srx->fid, &ctx_spare), 0);
  Completion canceled;
  bool found = false;
  for (int pass = 0; pass < 2000 && !found; ++pass) {
    found = c.Poll(s.a.rx, &canceled, 1) || c.Poll(s.b.rx, &canceled, 1);
  }
  CHECK(found, "no completion for the canceled receive at either endpoint");
  CHECK(canceled.error && canceled.err.err == FI_ECANCELED && canceled.err.op_context == &ctx_spare,
        "the canceled receive did not end with FI_ECANCELED and its context");
}

// FI_THREAD_SAFE: one thread reads each bound endpoint's CQ (their reads
// progress the shared queue from two threads) while the main thread sends
// from two peers to both endpoints; every message completes once, at the
// endpoint it was sent to.
CONFORMANCE_CASE(srx_threads, kShm) {
  constexpr int kEach = 40;  // per peer and endpoint
  fi_info* h = c.Hints(FI_MSG | FI_TAGGED | FI_SOURCE);
  h->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT;
  h->domain_attr->threading = FI_THREAD_SAFE;
  (void)c.Info(h);  // refused here if the provider cannot
  Shared s = OpenSharedFrom(c, h, 4 * kEach);
  static char in[4 * kEach][8];
  for (auto& buf : in) {
    c.Post("fi_recv on the srx", [&] { return fi_recv(s.srx, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, nullptr); });
  }
  std::atomic<int> got[2] = {0, 0};
  std::atomic<bool> wrong{false};
  std::atomic<bool> stop{false};
  auto reader = [&](int k) {
    fid_cq* cq = (k == 0 ? s.a : s.b).rx;
    while (!stop.load() && got[k].load() < 2 * kEach) {
      fi_cq_tagged_entry e;
      fi_addr_t src;
      const ssize_t r = fi_cq_readfrom(cq, &e, 1, &src);
      if (r == 1) {
        // "p0".."q1": who sent it, to which endpoint.
        const char* m = static_cast<const char*>(e.buf);
        if (m[1] - '0' != k || src != (m[0] == 'p' ? s.from_p : s.from_q)) wrong = true;
        ++got[k];
      } else if (r != -FI_EAGAIN) {
        wrong = true;
        return;
      }
    }
  };
  std::thread ra(reader, 0), rb(reader, 1);
  static char out[4][3] = {"p0", "p1", "q0", "q1"};
  for (int n = 0; n < kEach; ++n) {
    for (int m = 0; m < 4; ++m) {
      Ep& from = m < 2 ? s.p : s.q;
      const fi_addr_t to = (m < 2 ? s.p_to : s.q_to)[m % 2];
      c.Post("fi_send", [&] { return fi_send(from.ep, out[m], sizeof out[m], nullptr, to, nullptr); });
      fi_cq_tagged_entry done;
      (void)fi_cq_read(from.tx, &done, 1);  // the peers progress here
    }
  }
  const double deadline = 200000;
  for (int pass = 0; pass < deadline && got[0].load() + got[1].load() < 4 * kEach; ++pass) {
    fi_cq_tagged_entry done;
    (void)fi_cq_read(s.p.tx, &done, 1);
    (void)fi_cq_read(s.q.tx, &done, 1);
  }
  stop = true;
  ra.join();
  rb.join();
  CHECK(!wrong.load(), "a message completed at the wrong endpoint, with the wrong source, or a read failed");
  CHECK(got[0].load() == 2 * kEach && got[1].load() == 2 * kEach,
        "a got " << got[0].load() << " and b " << got[1].load() << " of " << 2 * kEach << " each");
}

// FI_MULTI_RECV on a shared receive context: one buffer takes messages
// arriving at both endpoints, each at its own offset, the last one
// flagged FI_MULTI_RECV once the buffer is released.
CONFORMANCE_CASE(srx_multi_recv, kShm) {
  Shared s = OpenShared(c, true, 16);
  static char buf[64];
  static char out[3][24] = {"one", "two", "three"};
  iovec iov{buf, sizeof buf};
  fi_msg m{};
  m.msg_iov = &iov;
  m.iov_count = 1;
  m.addr = FI_ADDR_UNSPEC;
  m.context = buf;
  CHECK_RET(fi_recvmsg(s.srx, &m, FI_MULTI_RECV), 0);
  for (int k = 0; k < 3; ++k) {
    c.Post("fi_send", [&] { return fi_send(s.p.ep, out[k], sizeof out[k], nullptr, s.p_to[k % 2], nullptr); });
  }
  int got = 0;
  bool released = false;
  for (int pass = 0; pass < 200000 && got < 3; ++pass) {
    for (int k = 0; k < 2; ++k) {
      Completion e;
      if (!c.Poll((k == 0 ? s.a : s.b).rx, &e, 1)) continue;
      CHECK(!e.error, "a multi-receive completion is an error: " << Err(-e.err.err));
      const char* at = static_cast<const char*>(e.entry.buf);
      CHECK(at >= buf && at + e.entry.len <= buf + sizeof buf, "a message landed outside the buffer");
      released = released || (e.entry.flags & FI_MULTI_RECV);
      ++got;
    }
  }
  CHECK(got == 3, got << " of 3 messages completed");
  CHECK(released, "the buffer (64 B, 72 B sent) was not released with FI_MULTI_RECV");
}

// FI_DIRECTED_RECV on a shared receive context: a receive from q's
// address takes q's message, not p's that arrived first.
CONFORMANCE_CASE(srx_directed_recv, kShm) {
  fi_info* h = c.Hints(FI_MSG | FI_TAGGED | FI_SOURCE | FI_DIRECTED_RECV);
  h->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT;
  Shared s = OpenSharedFrom(c, h, 16);
  static char from_p[8] = "p", from_q[8] = "q", in[8];
  c.Post("fi_send p", [&] { return fi_send(s.p.ep, from_p, sizeof from_p, nullptr, s.p_to[0], nullptr); });
  for (int i = 0; i < 200; ++i) c.Progress();
  CHECK_RET(fi_recv(s.srx, in, sizeof in, nullptr, s.from_q, in), 0);
  c.Post("fi_send q", [&] { return fi_send(s.q.ep, from_q, sizeof from_q, nullptr, s.q_to[0], nullptr); });
  const Completion got = c.Wait(s.a.rx, "the directed receive");
  CHECK(!got.error && std::strcmp(in, "q") == 0, "the directed receive did not take q's message");
}

// The srx's rx_attr->size bounds the receives posted to it: one more
// answers -FI_EAGAIN; fi_rx_size_left says what is left.
CONFORMANCE_CASE(srx_size_enforced, kShm) {
  Shared s = OpenShared(c, true, 4);
  static char in[5][8];
  for (int i = 0; i < 4; ++i) CHECK_RET(fi_recv(s.srx, in[i], sizeof in[i], nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  CHECK_RET(fi_recv(s.srx, in[4], sizeof in[4], nullptr, FI_ADDR_UNSPEC, nullptr), -FI_EAGAIN);
  CHECK_RET(s.srx->ops->rx_size_left(s.srx), 0);  // fi_rx_size_left (deprecated in 1.17)
}

// fi_close of a shared context with bound endpoints open: -FI_EBUSY; 0
// once they are closed.
CONFORMANCE_CASE(srx_close_busy, kShm) {
  Shared s = OpenShared(c, true, 16);
  CHECK_RET(fi_close(&s.srx->fid), -FI_EBUSY);
  CHECK_RET(c.Close(&s.a.ep->fid), 0);
  CHECK_RET(fi_close(&s.srx->fid), -FI_EBUSY);
  CHECK_RET(c.Close(&s.b.ep->fid), 0);
  CHECK_RET(c.Close(&s.srx->fid), 0);
}

CONFORMANCE_CASE(stx_close_busy, kShm) {
  Shared s = OpenShared(c, false, 16);
  CHECK_RET(fi_close(&s.stx->fid), -FI_EBUSY);
  CHECK_RET(c.Close(&s.a.ep->fid), 0);
  CHECK_RET(c.Close(&s.b.ep->fid), 0);
  CHECK_RET(c.Close(&s.stx->fid), 0);
}

// Two endpoints on one shared transmit context both send; each send
// completes once in its own endpoint's transmit CQ and arrives from that
// endpoint's address.
CONFORMANCE_CASE(stx_two_endpoints, kShm) {
  Shared s = OpenShared(c, false, 16);
  static char in[2][8], out[2][8] = {"from a", "from b"};
  for (auto& buf : in) {
    c.Post("fi_recv", [&] { return fi_recv(s.p.ep, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, buf); });
  }
  const fi_addr_t p_in_av = s.from_p;
  c.Post("fi_send a", [&] { return fi_send(s.a.ep, out[0], sizeof out[0], nullptr, p_in_av, out[0]); });
  c.Post("fi_send b", [&] { return fi_send(s.b.ep, out[1], sizeof out[1], nullptr, p_in_av, out[1]); });
  for (int k = 0; k < 2; ++k) {
    const Completion done = c.Wait((k == 0 ? s.a : s.b).tx, "a send through the stx");
    CHECK(!done.error, "the send failed: " << Err(-done.err.err));
    CHECK(done.entry.op_context == out[k], "endpoint " << k << " reported another endpoint's send");
  }
  for (int n = 0; n < 2; ++n) {
    const Completion got = c.Wait(s.p.rx, "the peer's receive", true);
    CHECK(!got.error, "a receive failed: " << Err(-got.err.err));
    const int k = std::strcmp(static_cast<const char*>(got.entry.buf), "from a") == 0 ? 0 : 1;
    CHECK(got.src == s.p_to[k], "the message of endpoint " << k << " came from address " << got.src);
  }
  Completion extra;
  CHECK(!c.Poll(s.a.tx, &extra, 100) && !c.Poll(s.b.tx, &extra, 100), "a send completed twice");
}

// The stx's tx_attr->size is shared: with size 2, two sends of a not yet
// completed leave b -FI_EAGAIN (fi_tx_size_left 0) until they complete.
CONFORMANCE_CASE(stx_size_shared, kShm) {
  Shared s = OpenShared(c, false, 2);
  static char in[3][8], out[8] = "x";
  for (auto& buf : in) {
    c.Post("fi_recv", [&] { return fi_recv(s.p.ep, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, nullptr); });
  }
  CHECK_RET(fi_send(s.a.ep, out, sizeof out, nullptr, s.from_p, nullptr), 0);
  CHECK_RET(fi_send(s.a.ep, out, sizeof out, nullptr, s.from_p, nullptr), 0);
  CHECK_RET(s.b.ep->ops->tx_size_left(s.b.ep), 0);  // fi_tx_size_left (deprecated in 1.17)
  CHECK_RET(fi_send(s.b.ep, out, sizeof out, nullptr, s.from_p, nullptr), -FI_EAGAIN);
  for (int k = 0; k < 2; ++k) CHECK(!c.Wait(s.a.tx, "a's send").error, "a's send failed");
  c.Post("fi_send b", [&] { return fi_send(s.b.ep, out, sizeof out, nullptr, s.from_p, nullptr); });
  CHECK(!c.Wait(s.b.tx, "b's send").error, "b's send failed");
}

// fi_getinfo(3): ep_attr tx_ctx_cnt / rx_ctx_cnt FI_SHARED_CONTEXT are
// answered, with room for a shared context per endpoint.
CONFORMANCE_CASE(getinfo_shared_context, kShm) {
  fi_info* h = c.Hints(FI_MSG);
  h->ep_attr->tx_ctx_cnt = FI_SHARED_CONTEXT;
  h->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT;
  fi_info* i = c.Info(h);
  CHECK(i->ep_attr->tx_ctx_cnt == FI_SHARED_CONTEXT && i->ep_attr->rx_ctx_cnt == FI_SHARED_CONTEXT,
        "the entry's ctx counts are " << i->ep_attr->tx_ctx_cnt << " and " << i->ep_attr->rx_ctx_cnt);
  CHECK(i->domain_attr->max_ep_stx_ctx >= 1 && i->domain_attr->max_ep_srx_ctx >= 1,
        "max_ep_stx_ctx " << i->domain_attr->max_ep_stx_ctx << ", max_ep_srx_ctx " << i->domain_attr->max_ep_srx_ctx);
}

// ---- Shared AVs.

namespace {

fi_info* AvInfo(Ctx& c) {
  fi_info* h = c.Hints(FI_MSG | FI_TAGGED | FI_SOURCE | FI_SHARED_AV);
  return c.Info(h);
}

fid_av* NamedAv(Ctx& c, fid_domain* d, const std::string& name, uint64_t flags) {
  fi_av_attr attr{};
  attr.type = FI_AV_TABLE;
  attr.name = name.c_str();
  attr.flags = flags;
  fid_av* av = nullptr;
  CHECK_RET(fi_av_open(d, &attr, &av, nullptr), 0);
  c.Own(&av->fid);
  return av;
}

std::vector<char> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

// The second process: opens the AV by name with FI_READ, its endpoint on
// it, gives its address, learns the fi_addrs the first process inserted,
// and exchanges a tagged message each way through them.
void SharedAvChild(Ctx& c, int in, int out) {
  const std::string name = ReadMsg(in, "the AV's name");
  fi_info* i = AvInfo(c);
  fid_domain* d = c.Domain(c.Fabric(i), i);
  fid_av* av = NamedAv(c, d, name, FI_READ);
  EpOpts o;
  o.av = av;
  Ep b = c.OpenEp(d, i, o);
  WriteMsg(out, std::string(b.name.begin(), b.name.end()));
  const std::string addrs = ReadMsg(in, "the fi_addrs");
  unsigned long long xa = 0, xb = 0;
  CHECK(std::sscanf(addrs.c_str(), "%llu %llu", &xa, &xb) == 2, "bad fi_addrs \"" << addrs << "\"");
  // FI_READ: the table is the other process's to change.
  fi_addr_t ignored;
  CHECK(fi_av_insert(av, b.name.data(), 1, &ignored, 0, nullptr) < 0, "an insert into an FI_READ AV succeeded");
  // The entry the other process made for us names us.
  std::vector<char> mine(b.name.size());
  size_t len = mine.size();
  CHECK_RET(fi_av_lookup(av, xb, mine.data(), &len), 0);
  const auto* s1 = reinterpret_cast<const sockaddr_in*>(mine.data());
  const auto* s2 = reinterpret_cast<const sockaddr_in*>(b.name.data());
  CHECK(s1->sin_port == s2->sin_port, "fi_addr " << xb << " does not name this endpoint here");
  // a's message first: a was inserted after this process opened the AV,
  // so its source is found by reading the table again.
  static char in_buf[16], out_buf[16] = "from b";
  CHECK_RET(fi_trecv(b.ep, in_buf, sizeof in_buf, nullptr, FI_ADDR_UNSPEC, 1, 0, nullptr), 0);
  const Completion got = c.Wait(b.rx, "a's message", true);
  CHECK(!got.error, "a's message failed: " << Err(-got.err.err));
  CHECK(std::strcmp(in_buf, "from a") == 0, "a's message arrived damaged");
  CHECK(got.src == xa, "a's message came from fi_addr " << got.src << " here, " << xa << " in a's process");
  c.Post("fi_tsend to a", [&] { return fi_tsend(b.ep, out_buf, sizeof out_buf, nullptr, xa, 2, nullptr); });
  CHECK(!c.Wait(b.tx, "the send to a").error, "the send to a failed");
}

}  // namespace

// fi_av(3) name: "Address vectors may be shared across multiple processes
// ... by using the same name"; FI_READ opens an existing one read-only. One
// process inserts (a third party, itself, then the second process's
// endpoint); the second opens the AV by name with FI_READ, and both send
// to and report sources by the same fi_addr values.
CONFORMANCE_CASE(av_shared_two_processes, kShm) {
  int down[2], up[2];
  CHECK(pipe(down) == 0 && pipe(up) == 0, "pipe failed");
  const pid_t pid = fork();  // before this process touches libfabric
  CHECK(pid >= 0, "fork failed");
  if (pid == 0) {
    close(down[1]);
    close(up[0]);
    std::string verdict = "ok";
    {
      Ctx child(c.prov());
      try {
        SharedAvChild(child, down[0], up[1]);
      } catch (const Failure& f) {
        verdict = "child: " + f.what;
      } catch (const Refused& r) {
        verdict = "child: " + r.what;
      }
      try {
        WriteMsg(up[1], verdict);
      } catch (const Failure&) {
      }
    }
    _exit(0);
  }
  close(down[0]);
  close(up[1]);
  // However the case ends, the child sees the pipe close and ends too.
  struct Reap {
    pid_t pid;
    int to_child;
    ~Reap() {
      close(to_child);
      int status;
      waitpid(pid, &status, 0);
    }
  } reap{pid, down[1]};
  const std::string name = "bypass-conformance-av-" + std::to_string(getpid());
  fi_info* i = AvInfo(c);
  fid_domain* d = c.Domain(c.Fabric(i), i);
  fid_av* av = NamedAv(c, d, name, 0);
  EpOpts o;
  o.av = av;
  Ep a = c.OpenEp(d, i, o);
  // A third party first, so that the fi_addrs are not just 0 and 1.
  sockaddr_in third{};
  third.sin_family = AF_INET;
  third.sin_port = htons(9);
  third.sin_addr.s_addr = htonl(0x0afffe01);  // 10.255.254.1
  std::vector<char> third_name(a.name.size(), 0);
  std::memcpy(third_name.data(), &third, std::min(sizeof third, third_name.size()));
  c.Insert(av, third_name);
  WriteMsg(down[1], name);
  const std::string b_name = ReadMsg(up[0], "the second process's address");
  // Both after the second process opened the AV.
  const fi_addr_t xa = c.Insert(av, a.name);
  const fi_addr_t xb = c.Insert(av, Bytes(b_name));
  WriteMsg(down[1], std::to_string(xa) + " " + std::to_string(xb));
  static char in_buf[16], out_buf[16] = "from a";
  CHECK_RET(fi_trecv(a.ep, in_buf, sizeof in_buf, nullptr, FI_ADDR_UNSPEC, 2, 0, nullptr), 0);
  c.Post("fi_tsend to b", [&] { return fi_tsend(a.ep, out_buf, sizeof out_buf, nullptr, xb, 1, nullptr); });
  CHECK(!c.Wait(a.tx, "the send to b").error, "the send to b failed");
  const Completion got = c.Wait(a.rx, "b's message", true);
  CHECK(!got.error, "b's message failed: " << Err(-got.err.err));
  CHECK(std::strcmp(in_buf, "from b") == 0, "b's message arrived damaged");
  CHECK(got.src == xb, "b's message came from fi_addr " << got.src << ", inserted as " << xb);
  const std::string verdict = ReadMsg(up[0], "the second process's verdict");
  CHECK(verdict == "ok", verdict);
}

// FI_READ opens an AV that exists: a name nobody opened fails.
CONFORMANCE_CASE(av_read_only_needs_existing, kShm) {
  fi_info* i = AvInfo(c);
  fid_domain* d = c.Domain(c.Fabric(i), i);
  fi_av_attr attr{};
  attr.type = FI_AV_TABLE;
  const std::string name = "bypass-conformance-none-" + std::to_string(getpid());
  attr.name = name.c_str();
  attr.flags = FI_READ;
  fid_av* av = nullptr;
  const int r = fi_av_open(d, &attr, &av, nullptr);
  if (r == 0) c.Own(&av->fid);
  CHECK(r < 0, "fi_av_open(FI_READ) of an AV nobody created succeeded");
}

}  // namespace bypass::fi::conformance
