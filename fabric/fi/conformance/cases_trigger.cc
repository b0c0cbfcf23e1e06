// Issue 20 part 1: triggered operations and deferred work (fi_trigger(3),
// fi_domain(3) FI_QUEUE_WORK / FI_CANCEL_WORK / FI_FLUSH_WORK). libfabric
// 1.17's shm and tcp;ofi_rxm offer no FI_TRIGGER; its `sockets` provider
// does (triggered operations and deferred work), so it is the reference.
#include <rdma/fi_trigger.h>

#include <cstring>
#include <string>

#include "fabric/fi/conformance/conformance.h"

namespace bypass::fi::conformance {
namespace {

constexpr size_t kLen = 64;
constexpr char kSockets[] = "sockets";

fi_info* TriggerHints(Ctx& c, uint64_t caps = FI_MSG) { return c.Hints(caps | FI_TRIGGER); }

fi_triggered_context Threshold(fid_cntr* cntr, size_t threshold) {
  fi_triggered_context t{};
  t.event_type = FI_TRIGGER_THRESHOLD;
  t.trigger.threshold.cntr = cntr;
  t.trigger.threshold.threshold = threshold;
  return t;
}

// A deferred counter operation (FI_OP_CNTR_ADD or FI_OP_CNTR_SET) of *op,
// due when `trigger` reaches `threshold`.
fi_deferred_work CntrWork(fid_cntr* trigger, uint64_t threshold, fi_op_type type, fi_op_cntr* op) {
  fi_deferred_work w{};
  w.threshold = threshold;
  w.triggering_cntr = trigger;
  w.op_type = type;
  w.op.cntr = op;
  return w;
}

// A send of kLen bytes of buf from p.a with FI_TRIGGER on t.
ssize_t TriggeredSend(Pair& p, char* buf, fi_triggered_context* t) {
  iovec iov{buf, kLen};
  fi_msg m{&iov, nullptr, 1, p.a_to_b, t, 0};
  return fi_sendmsg(p.a.ep, &m, FI_TRIGGER | FI_COMPLETION);
}

void PostRecv(Ctx& c, Pair& p, char* buf) {
  c.Post("fi_recv", [&] { return fi_recv(p.b.ep, buf, kLen, nullptr, FI_ADDR_UNSPEC, buf); });
}

}  // namespace

CONFORMANCE_CASE(trigger_getinfo_offers, kSockets) {
  fi_info* i = c.Info(TriggerHints(c));
  CHECK(i->caps & FI_TRIGGER, "fi_getinfo answered without the FI_TRIGGER asked for");
}

CONFORMANCE_CASE(trigger_send_at_threshold, kSockets) {
  Pair p = c.OpenPair(TriggerHints(c));
  fid_cntr* cntr = c.Cntr(p.a.domain);
  char* in = c.Buf(kLen);
  char* out = c.Buf(kLen, 'S');
  PostRecv(c, p, in);
  fi_triggered_context t = Threshold(cntr, 2);
  CHECK_RET(TriggeredSend(p, out, &t), 0);
  CHECK_RET(fi_cntr_add(cntr, 1), 0);
  Completion got;
  CHECK(!c.Poll(p.b.rx, &got, 200), "the send arrived before the counter reached its threshold");
  CHECK_RET(fi_cntr_add(cntr, 1), 0);
  got = c.Wait(p.b.rx, "the triggered send's message");
  CHECK(!got.error && got.entry.len == kLen && in[0] == 'S', "wrong message");
  got = c.Wait(p.a.tx, "the triggered send's completion");
  CHECK(!got.error && got.entry.op_context == &t,
        "the completion does not carry the fi_triggered_context");
}

CONFORMANCE_CASE(trigger_order_of_thresholds, kSockets) {
  Pair p = c.OpenPair(TriggerHints(c));
  fid_cntr* cntr = c.Cntr(p.a.domain);
  char* in[3] = {c.Buf(kLen), c.Buf(kLen), c.Buf(kLen)};
  char* out[3] = {c.Buf(kLen, '3'), c.Buf(kLen, 'a'), c.Buf(kLen, 'b')};
  for (char* b : in) PostRecv(c, p, b);
  // Thresholds 3, 1, 1: issued 'a', 'b' (equal: posting order), then '3'.
  fi_triggered_context t[3] = {Threshold(cntr, 3), Threshold(cntr, 1), Threshold(cntr, 1)};
  for (int i = 0; i < 3; ++i) CHECK_RET(TriggeredSend(p, out[i], &t[i]), 0);
  CHECK_RET(fi_cntr_set(cntr, 5), 0);  // past every threshold at once
  const char want[3] = {'a', 'b', '3'};
  for (int i = 0; i < 3; ++i) {
    Completion got = c.Wait(p.b.rx, "a triggered message");
    CHECK(!got.error && static_cast<char*>(got.entry.op_context)[0] == want[i],
          "message " << i << " is '" << static_cast<char*>(got.entry.op_context)[0] << "', want '"
                     << want[i] << "'");
  }
}

CONFORMANCE_CASE(trigger_deferred_cntr_chain, kSockets) {
  Pair p = c.OpenPair(TriggerHints(c));
  fid_domain* d = p.a.domain;
  fid_cntr* start = c.Cntr(d);
  fid_cntr* mid = c.Cntr(d);
  fid_cntr* done = c.Cntr(d);
  char* in = c.Buf(kLen);
  char* out = c.Buf(kLen, 'D');
  PostRecv(c, p, in);
  fi_op_cntr add{mid, 4};
  fi_deferred_work w1 = CntrWork(start, 1, FI_OP_CNTR_ADD, &add);
  iovec iov{out, kLen};
  fi_op_msg msg{p.a.ep, {&iov, nullptr, 1, p.a_to_b, nullptr, 0}, 0};
  fi_deferred_work w2{};
  w2.threshold = 4;
  w2.triggering_cntr = mid;
  w2.completion_cntr = done;
  w2.op_type = FI_OP_SEND;
  w2.op.msg = &msg;
  CHECK_RET(fi_control(&d->fid, FI_QUEUE_WORK, &w2), 0);
  CHECK_RET(fi_control(&d->fid, FI_QUEUE_WORK, &w1), 0);
  Completion got;
  CHECK(!c.Poll(p.b.rx, &got, 100), "deferred work ran before its counter moved");
  CHECK_RET(fi_cntr_add(start, 1), 0);
  got = c.Wait(p.b.rx, "the deferred send's message");
  CHECK(!got.error && in[0] == 'D', "wrong message");
  c.WaitCntr(done, 1, "the deferred send's completion counter");
  CHECK(!c.Poll(p.a.tx, &got, 50), "deferred work without FI_COMPLETION wrote a CQ entry");
}

CONFORMANCE_CASE(trigger_cancel_and_flush_work, kSockets) {
  Pair p = c.OpenPair(TriggerHints(c));
  fid_domain* d = p.a.domain;
  fid_cntr* cntr = c.Cntr(d);
  fid_cntr* target = c.Cntr(d);
  fi_op_cntr set{target, 9};
  fi_deferred_work w1 = CntrWork(cntr, 1, FI_OP_CNTR_SET, &set), w2 = w1;
  CHECK_RET(fi_control(&d->fid, FI_QUEUE_WORK, &w1), 0);
  CHECK_RET(fi_control(&d->fid, FI_QUEUE_WORK, &w2), 0);
  CHECK_RET(fi_control(&d->fid, FI_CANCEL_WORK, &w1), 0);
  CHECK(fi_control(&d->fid, FI_CANCEL_WORK, &w1) != 0, "a canceled request canceled again");
  CHECK_RET(fi_control(&d->fid, FI_FLUSH_WORK, nullptr), 0);
  CHECK_RET(fi_cntr_add(cntr, 1), 0);
  CHECK(fi_cntr_read(target) == 0, "canceled work ran");
}

CONFORMANCE_CASE(trigger_cntr_close_busy, kSockets) {
  Pair p = c.OpenPair(TriggerHints(c));
  fid_domain* d = p.a.domain;
  fid_cntr* cntr = nullptr;
  fi_cntr_attr attr{};
  attr.events = FI_CNTR_EVENTS_COMP;
  CHECK_RET(fi_cntr_open(d, &attr, &cntr, nullptr), 0);
  fid_cntr* target = c.Cntr(d);
  fi_op_cntr add{target, 1};
  fi_deferred_work w = CntrWork(cntr, 1, FI_OP_CNTR_ADD, &add);
  CHECK_RET(fi_control(&d->fid, FI_QUEUE_WORK, &w), 0);
  CHECK_RET(fi_close(&cntr->fid), -FI_EBUSY);
  CHECK_RET(fi_control(&d->fid, FI_CANCEL_WORK, &w), 0);
  CHECK_RET(fi_close(&cntr->fid), 0);
}

// Deferred atomics: the atomics branch adds fi_atomic; FI_QUEUE_WORK does
// not take FI_OP_ATOMIC yet (-FI_ENOSYS), so this case fails.
CONFORMANCE_CASE(trigger_deferred_atomic, kSockets) {
  Pair p = c.OpenPair(TriggerHints(c, FI_MSG | FI_ATOMIC));
  fid_domain* d = p.a.domain;
  fid_cntr* cntr = c.Cntr(d);
  uint64_t* region = reinterpret_cast<uint64_t*>(c.Buf(sizeof(uint64_t)));
  fid_mr* mr = nullptr;
  CHECK_RET(fi_mr_reg(p.b.domain, region, sizeof(uint64_t), FI_REMOTE_WRITE | FI_REMOTE_READ, 0,
                      0, 0, &mr, nullptr),
            0);
  c.Own(&mr->fid);
  uint64_t one = 1;
  fi_ioc ioc{&one, 1};
  fi_rma_ioc rma{RmaAddr(p.b.info, region), 1, fi_mr_key(mr)};
  fi_op_atomic op{};
  op.ep = p.a.ep;
  op.msg.msg_iov = &ioc;
  op.msg.iov_count = 1;
  op.msg.addr = p.a_to_b;
  op.msg.rma_iov = &rma;
  op.msg.rma_iov_count = 1;
  op.msg.datatype = FI_UINT64;
  op.msg.op = FI_SUM;
  fi_deferred_work w{};
  w.threshold = 1;
  w.triggering_cntr = cntr;
  w.op_type = FI_OP_ATOMIC;
  w.op.atomic = &op;
  CHECK_RET(fi_control(&d->fid, FI_QUEUE_WORK, &w), 0);
  CHECK_RET(fi_cntr_add(cntr, 1), 0);
  Completion got;
  for (int i = 0; i < 1000 && *region == 0; ++i) c.Poll(p.a.tx, &got, 1);
  CHECK(*region == 1, "the deferred atomic did not add 1");
}

}  // namespace bypass::fi::conformance
