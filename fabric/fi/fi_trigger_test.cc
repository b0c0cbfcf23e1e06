// Triggered operations and deferred work (fi_trigger(3)), over the public
// API: two loopback domains (fi_test_util.h), counters moved by the
// application (fi_cntr_add/set) and by completions.
#include <rdma/fi_trigger.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fabric/fi/ep.h"
#include "fabric/fi/fi_test_util.h"
#include "gtest/gtest.h"

namespace bypass::fi::testing {
namespace {

constexpr uint64_t kCaps = FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | FI_TRIGGER;

// A loopback port with three steered queues: a scalable endpoint's
// contexts each get a queue and a lock of their own (lane.h).
constexpr char kSteered[] = "loopback:trigq,queues=3,ip=10.77.12.1";
const bool kSteeredDevice = [] {
  const char* devs = getenv("FI_BYPASS_DEVICES");  // fi_test_util.h's, set first
  setenv("FI_BYPASS_DEVICES", (std::string(devs != nullptr ? devs : "") + ";" + kSteered).c_str(), 1);
  return true;
}();

fid_cntr* OpenCntr(fid_domain* d) {
  fi_cntr_attr attr{};
  attr.events = FI_CNTR_EVENTS_COMP;
  fid_cntr* c = nullptr;
  EXPECT_EQ(fi_cntr_open(d, &attr, &c, nullptr), 0);
  return c;
}

fi_triggered_context Threshold(fid_cntr* c, size_t threshold) {
  fi_triggered_context t{};
  t.event_type = FI_TRIGGER_THRESHOLD;
  t.trigger.threshold.cntr = c;
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

// fi_sendmsg with FI_TRIGGER of `buf` to a's peer.
ssize_t TriggeredSend(Pair& p, const std::string& buf, fi_triggered_context* t) {
  iovec iov{const_cast<char*>(buf.data()), buf.size()};
  fi_msg m{&iov, nullptr, 1, p.a.peer, t, 0};
  return fi_sendmsg(p.a.ep, &m, FI_TRIGGER | FI_COMPLETION);
}

// Receives posted on b, one buffer each.
struct Recvs {
  std::vector<std::vector<char>> bufs;
  Recvs(Pair& p, size_t n, size_t len = 64) : bufs(n, std::vector<char>(len, 0)) {
    for (auto& b : bufs) {
      EXPECT_EQ(fi_recv(p.b.ep, b.data(), b.size(), nullptr, FI_ADDR_UNSPEC, &b), 0);
    }
  }
};

// Progresses both sides `passes` times; true when b received nothing.
bool NothingArrives(Pair& p, int passes = 300) {
  fi_cq_tagged_entry e;
  for (int i = 0; i < passes; ++i) {
    if (fi_cq_read(p.b.rxcq, &e, 1) != -FI_EAGAIN) return false;
    p.Pump();
  }
  return true;
}

// The payload of the next message b receives.
std::string NextMessage(Pair& p) {
  fi_cq_tagged_entry e{};
  if (!p.Wait(p.b.rxcq, &e)) return "<none>";
  return std::string(static_cast<const char*>(e.buf), e.len);
}

// Waits for n send completions at a (a send's buffer must outlive it).
void WaitSends(Pair& p, int n) {
  fi_cq_tagged_entry e;
  for (int i = 0; i < n; ++i) ASSERT_TRUE(p.Wait(p.a.txcq, &e));
}

class TriggerTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(); }
  void TearDown() override {
    if (cntr_ != nullptr) {
      EXPECT_EQ(fi_close(&cntr_->fid), 0);
    }
    p_.Close();
  }
  void Open(fi_threading threading = FI_THREAD_SAFE) {
    fi_info* hints = RdmHints(kCaps);
    hints->domain_attr->threading = threading;
    p_.Open(hints);
    fi_freeinfo(hints);
    cntr_ = OpenCntr(p_.a.domain);
  }
  Pair p_;
  fid_cntr* cntr_ = nullptr;
  // Buffers that outlive the endpoints (a closing endpoint may still
  // answer a peer's retransmitted read from a region).
  std::vector<char> target_, local_, back_;
};

TEST_F(TriggerTest, GetinfoOffersTrigger) {
  EXPECT_TRUE(p_.a.info->caps & FI_TRIGGER);
  EXPECT_TRUE(p_.a.info->tx_attr->caps & FI_TRIGGER);
}

TEST_F(TriggerTest, SendFiresWhenTheCounterReachesTheThreshold) {
  Recvs r(p_, 1);
  const std::string msg = "triggered";
  fi_triggered_context t = Threshold(cntr_, 3);
  ASSERT_EQ(TriggeredSend(p_, msg, &t), 0);
  ASSERT_EQ(fi_cntr_add(cntr_, 2), 0);  // threshold - 1: held
  EXPECT_TRUE(NothingArrives(p_));
  fi_cq_tagged_entry e;
  EXPECT_EQ(fi_cq_read(p_.a.txcq, &e, 1), -FI_EAGAIN);
  ASSERT_EQ(fi_cntr_add(cntr_, 1), 0);
  EXPECT_EQ(NextMessage(p_), msg);
  ASSERT_TRUE(p_.Wait(p_.a.txcq, &e));
  EXPECT_EQ(e.op_context, &t);  // completes as usual, with its context
  EXPECT_TRUE(e.flags & FI_SEND);
}

TEST_F(TriggerTest, ThresholdAlreadyMetIssuesAtOnce) {
  Recvs r(p_, 1);
  ASSERT_EQ(fi_cntr_set(cntr_, 5), 0);
  const std::string msg = "now";
  fi_triggered_context t = Threshold(cntr_, 4);
  ASSERT_EQ(TriggeredSend(p_, msg, &t), 0);
  EXPECT_EQ(NextMessage(p_), msg);
  WaitSends(p_, 1);
}

// fi_trigger(3): in order of threshold, equal thresholds in posting order,
// even when the counter jumps past several.
TEST_F(TriggerTest, OrderOfThresholdsOnOneCounter) {
  Recvs r(p_, 5);
  const std::string a = "A5", b = "B2", c = "C2", d = "D4", e = "E9";
  fi_triggered_context ta = Threshold(cntr_, 5), tb = Threshold(cntr_, 2), tc = Threshold(cntr_, 2),
                       td = Threshold(cntr_, 4), te = Threshold(cntr_, 9);
  ASSERT_EQ(TriggeredSend(p_, a, &ta), 0);
  ASSERT_EQ(TriggeredSend(p_, b, &tb), 0);
  ASSERT_EQ(TriggeredSend(p_, c, &tc), 0);
  ASSERT_EQ(TriggeredSend(p_, d, &td), 0);
  ASSERT_EQ(TriggeredSend(p_, e, &te), 0);
  ASSERT_EQ(fi_cntr_add(cntr_, 2), 0);
  EXPECT_EQ(NextMessage(p_), b);
  EXPECT_EQ(NextMessage(p_), c);
  EXPECT_TRUE(NothingArrives(p_));
  ASSERT_EQ(fi_cntr_set(cntr_, 7), 0);  // past 4 and 5 at once
  EXPECT_EQ(NextMessage(p_), d);
  EXPECT_EQ(NextMessage(p_), a);
  EXPECT_TRUE(NothingArrives(p_));
  ASSERT_EQ(fi_cntr_add(cntr_, 2), 0);
  EXPECT_EQ(NextMessage(p_), e);
  WaitSends(p_, 5);
}

// A triggered tagged send on b fires when b's receive counter counts the
// message a's triggered send delivered: a chain across both endpoints.
TEST(TriggerChainTest, ACompletionCountTriggersTheNext) {
  fi_info* hints = RdmHints(kCaps);
  Pair p;
  p.b.cntr_flags = FI_RECV;
  p.Open(hints);
  fi_freeinfo(hints);
  fid_cntr* start = OpenCntr(p.a.domain);
  std::vector<char> at_b(16), at_a(16);
  ASSERT_EQ(fi_recv(p.b.ep, at_b.data(), at_b.size(), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  ASSERT_EQ(fi_trecv(p.a.ep, at_a.data(), at_a.size(), nullptr, FI_ADDR_UNSPEC, 7, 0, nullptr), 0);
  const std::string ping = "ping", pong = "pong";
  fi_triggered_context t1 = Threshold(start, 1);
  ASSERT_EQ(TriggeredSend(p, ping, &t1), 0);
  fi_triggered_context t2 = Threshold(p.b.cntr, 1);
  iovec iov{const_cast<char*>(pong.data()), pong.size()};
  fi_msg_tagged m{&iov, nullptr, 1, p.b.peer, 7, 0, &t2, 0};
  ASSERT_EQ(fi_tsendmsg(p.b.ep, &m, FI_TRIGGER), 0);
  fi_cq_tagged_entry e;
  for (int i = 0; i < 200; ++i) {
    ASSERT_EQ(fi_cq_read(p.a.rxcq, &e, 1), -FI_EAGAIN);
    p.Pump();
  }
  ASSERT_EQ(fi_cntr_add(start, 1), 0);
  ASSERT_TRUE(p.Wait(p.a.rxcq, &e));
  EXPECT_EQ(std::string(at_a.data(), e.len), pong);
  EXPECT_EQ(std::string(at_b.data(), 4), ping);
  ASSERT_TRUE(p.Wait(p.a.txcq, &e));
  ASSERT_TRUE(p.Wait(p.b.txcq, &e));
  EXPECT_EQ(fi_close(&start->fid), 0);
  p.Close();
}

TEST_F(TriggerTest, RmaWriteAndReadTriggered) {
  target_.assign(256, 0);
  local_.assign(256, 'w');
  back_.assign(256, 0);
  std::vector<char>& target = target_;
  std::vector<char>& local = local_;
  std::vector<char>& back = back_;
  fid_mr* mr = nullptr;
  ASSERT_EQ(fi_mr_reg(p_.b.domain, target.data(), target.size(), FI_REMOTE_WRITE | FI_REMOTE_READ,
                      0, 0, 0, &mr, nullptr),
            0);
  const uint64_t addr = reinterpret_cast<uint64_t>(target.data());
  fi_rma_iov rma{addr, 256, fi_mr_key(mr)};
  iovec wiov{local.data(), 256};
  fi_triggered_context tw = Threshold(cntr_, 1), tr = Threshold(cntr_, 2);
  fi_msg_rma w{&wiov, nullptr, 1, p_.a.peer, &rma, 1, &tw, 0};
  ASSERT_EQ(fi_writemsg(p_.a.ep, &w, FI_TRIGGER), 0);
  iovec riov{back.data(), 256};
  fi_msg_rma rd{&riov, nullptr, 1, p_.a.peer, &rma, 1, &tr, 0};
  ASSERT_EQ(fi_readmsg(p_.a.ep, &rd, FI_TRIGGER), 0);
  for (int i = 0; i < 200; ++i) p_.Pump();
  EXPECT_EQ(target[0], 0);  // held
  ASSERT_EQ(fi_cntr_add(cntr_, 1), 0);
  fi_cq_tagged_entry e;
  ASSERT_TRUE(p_.Wait(p_.a.txcq, &e));
  EXPECT_EQ(e.op_context, &tw);
  EXPECT_TRUE(e.flags & FI_WRITE);
  EXPECT_EQ(std::memcmp(target.data(), local.data(), 256), 0);
  for (int i = 0; i < 100; ++i) p_.Pump();
  EXPECT_EQ(back[0], 0);  // the read is still held
  std::memset(target.data(), 'r', 256);
  ASSERT_EQ(fi_cntr_add(cntr_, 1), 0);
  ASSERT_TRUE(p_.Wait(p_.a.txcq, &e));
  EXPECT_EQ(e.op_context, &tr);
  EXPECT_TRUE(e.flags & FI_READ);
  EXPECT_EQ(back, std::vector<char>(256, 'r'));
  EXPECT_EQ(fi_close(&mr->fid), 0);
}

// Deferred work: a counter operation feeds a second counter, whose
// threshold issues a send that counts on a completion counter and makes no
// CQ entry (fi_trigger(3): none unless FI_COMPLETION).
TEST_F(TriggerTest, DeferredWorkChainsThroughCounters) {
  Recvs r(p_, 2);
  fid_cntr* mid = OpenCntr(p_.a.domain);
  fid_cntr* done = OpenCntr(p_.a.domain);
  fi_op_cntr add{mid, 5};
  fi_deferred_work w1 = CntrWork(cntr_, 1, FI_OP_CNTR_ADD, &add);
  const std::string quiet = "quiet", loud = "loud";
  iovec qiov{const_cast<char*>(quiet.data()), quiet.size()};
  int qctx = 0, lctx = 0;
  fi_op_msg qmsg{p_.a.ep, {&qiov, nullptr, 1, p_.a.peer, &qctx, 0}, 0};
  fi_deferred_work w2{};
  w2.threshold = 5;
  w2.triggering_cntr = mid;
  w2.completion_cntr = done;
  w2.op_type = FI_OP_SEND;
  w2.op.msg = &qmsg;
  iovec liov{const_cast<char*>(loud.data()), loud.size()};
  fi_op_msg lmsg{p_.a.ep, {&liov, nullptr, 1, p_.a.peer, &lctx, 0}, FI_COMPLETION};
  fi_deferred_work w3 = w2;
  w3.threshold = 6;
  w3.op.msg = &lmsg;
  ASSERT_EQ(fi_control(&p_.a.domain->fid, FI_QUEUE_WORK, &w2), 0);
  ASSERT_EQ(fi_control(&p_.a.domain->fid, FI_QUEUE_WORK, &w3), 0);
  ASSERT_EQ(fi_control(&p_.a.domain->fid, FI_QUEUE_WORK, &w1), 0);
  EXPECT_TRUE(NothingArrives(p_));
  ASSERT_EQ(fi_cntr_add(cntr_, 1), 0);
  EXPECT_EQ(fi_cntr_read(mid), 5u);
  EXPECT_EQ(NextMessage(p_), quiet);
  for (int i = 0; i < 2000 && fi_cntr_read(done) < 1; ++i) p_.Pump();
  EXPECT_EQ(fi_cntr_read(done), 1u);
  fi_cq_tagged_entry e;
  EXPECT_EQ(fi_cq_read(p_.a.txcq, &e, 1), -FI_EAGAIN);  // no FI_COMPLETION: no entry
  // Deferred work counts errors toward its threshold too.
  ASSERT_EQ(fi_cntr_adderr(mid, 1), 0);
  EXPECT_EQ(NextMessage(p_), loud);
  ASSERT_TRUE(p_.Wait(p_.a.txcq, &e));
  EXPECT_EQ(e.op_context, &lctx);  // FI_COMPLETION: the operation's context
  EXPECT_EQ(fi_cntr_read(done), 2u);
  EXPECT_EQ(fi_close(&mid->fid), 0);
  EXPECT_EQ(fi_close(&done->fid), 0);
}

// Deferred atomics: an FI_SUM and a fetching FI_SUM, issued when their
// counter reaches the threshold; the fetch answers the value before it.
TEST_F(TriggerTest, DeferredAtomics) {
  target_.assign(8, 0);
  std::vector<char>& target = target_;
  uint64_t start = 10;
  std::memcpy(target.data(), &start, 8);
  fid_mr* mr = nullptr;
  ASSERT_EQ(fi_mr_reg(p_.b.domain, target.data(), 8, FI_REMOTE_WRITE | FI_REMOTE_READ, 0, 0, 0,
                      &mr, nullptr),
            0);
  fid_cntr* done = OpenCntr(p_.a.domain);
  uint64_t two = 2, five = 5, old = 0;
  fi_ioc add2{&two, 1}, add5{&five, 1}, fetched{&old, 1};
  fi_rma_ioc rma{reinterpret_cast<uint64_t>(target.data()), 1, fi_mr_key(mr)};
  int actx = 0, fctx = 0;
  fi_op_atomic a{p_.a.ep, {&add2, nullptr, 1, p_.a.peer, &rma, 1, FI_UINT64, FI_SUM, &actx, 0}, 0};
  fi_op_fetch_atomic f{p_.a.ep,
                       {&add5, nullptr, 1, p_.a.peer, &rma, 1, FI_UINT64, FI_SUM, &fctx, 0},
                       {&fetched, nullptr, 1},
                       0};
  fi_deferred_work wa{};
  wa.threshold = 1;
  wa.triggering_cntr = cntr_;
  wa.completion_cntr = done;
  wa.op_type = FI_OP_ATOMIC;
  wa.op.atomic = &a;
  fi_deferred_work wf = wa;
  wf.threshold = 2;
  wf.op_type = FI_OP_FETCH_ATOMIC;
  wf.op.fetch_atomic = &f;
  ASSERT_EQ(fi_control(&p_.a.domain->fid, FI_QUEUE_WORK, &wa), 0);
  ASSERT_EQ(fi_control(&p_.a.domain->fid, FI_QUEUE_WORK, &wf), 0);
  for (int i = 0; i < 200; ++i) p_.Pump();
  uint64_t now = 0;
  std::memcpy(&now, target.data(), 8);
  EXPECT_EQ(now, 10u);  // held
  ASSERT_EQ(fi_cntr_add(cntr_, 1), 0);
  for (int i = 0; i < 100'000 && fi_cntr_read(done) < 1; ++i) p_.Pump();
  ASSERT_EQ(fi_cntr_read(done), 1u);
  std::memcpy(&now, target.data(), 8);
  EXPECT_EQ(now, 12u);
  ASSERT_EQ(fi_cntr_add(cntr_, 1), 0);
  for (int i = 0; i < 100'000 && fi_cntr_read(done) < 2; ++i) p_.Pump();
  ASSERT_EQ(fi_cntr_read(done), 2u);
  EXPECT_EQ(old, 12u);
  std::memcpy(&now, target.data(), 8);
  EXPECT_EQ(now, 17u);
  fi_cq_tagged_entry e;
  EXPECT_EQ(fi_cq_read(p_.a.txcq, &e, 1), -FI_EAGAIN);  // no FI_COMPLETION: no entry
  EXPECT_EQ(fi_close(&done->fid), 0);
  EXPECT_EQ(fi_close(&mr->fid), 0);
}

// fi_atomicmsg, fi_fetch_atomicmsg and fi_compare_atomicmsg with
// FI_TRIGGER: each is held below its threshold, then executes in
// threshold order and completes with its triggered context; the fi_msg
// and its fi_ioc arrays are the caller's stack and gone by then.
TEST_F(TriggerTest, AtomicMsgTriggered) {
  target_.assign(8, 0);
  uint64_t start = 10;
  std::memcpy(target_.data(), &start, 8);
  fid_mr* mr = nullptr;
  ASSERT_EQ(fi_mr_reg(p_.b.domain, target_.data(), 8, FI_REMOTE_WRITE | FI_REMOTE_READ, 0, 0, 0,
                      &mr, nullptr),
            0);
  uint64_t three = 3, four = 4, expect = 17, swap = 100, fetched = 0, old = 0;
  fi_triggered_context ta = Threshold(cntr_, 1), tf = Threshold(cntr_, 2), tc = Threshold(cntr_, 3);
  {
    fi_ioc add3{&three, 1}, add4{&four, 1}, res{&fetched, 1}, cmp{&expect, 1}, sw{&swap, 1},
        res2{&old, 1};
    fi_rma_ioc rma{reinterpret_cast<uint64_t>(target_.data()), 1, fi_mr_key(mr)};
    // Posted out of order: the compare (threshold 3) first.
    fi_msg_atomic c{&sw, nullptr, 1, p_.a.peer, &rma, 1, FI_UINT64, FI_CSWAP, &tc, 0};
    ASSERT_EQ(fi_compare_atomicmsg(p_.a.ep, &c, &cmp, nullptr, 1, &res2, nullptr, 1,
                                   FI_TRIGGER | FI_COMPLETION),
              0);
    fi_msg_atomic f{&add4, nullptr, 1, p_.a.peer, &rma, 1, FI_UINT64, FI_SUM, &tf, 0};
    ASSERT_EQ(fi_fetch_atomicmsg(p_.a.ep, &f, &res, nullptr, 1, FI_TRIGGER | FI_COMPLETION), 0);
    fi_msg_atomic a{&add3, nullptr, 1, p_.a.peer, &rma, 1, FI_UINT64, FI_SUM, &ta, 0};
    ASSERT_EQ(fi_atomicmsg(p_.a.ep, &a, FI_TRIGGER | FI_COMPLETION), 0);
    // Malformed: no remote target.
    fi_msg_atomic bad = a;
    bad.rma_iov_count = 0;
    EXPECT_EQ(fi_atomicmsg(p_.a.ep, &bad, FI_TRIGGER), -FI_EINVAL);
    std::memset(&rma, 0xee, sizeof rma);  // the provider kept its own copies
    std::memset(&add3, 0xee, sizeof add3);
  }
  for (int i = 0; i < 200; ++i) p_.Pump();
  uint64_t now = 0;
  std::memcpy(&now, target_.data(), 8);
  EXPECT_EQ(now, 10u);  // held
  fi_cq_tagged_entry e;
  EXPECT_EQ(fi_cq_read(p_.a.txcq, &e, 1), -FI_EAGAIN);
  ASSERT_EQ(fi_cntr_add(cntr_, 1), 0);
  ASSERT_TRUE(p_.Wait(p_.a.txcq, &e));
  EXPECT_EQ(e.op_context, &ta);
  EXPECT_TRUE((e.flags & (FI_ATOMIC | FI_WRITE)) == (FI_ATOMIC | FI_WRITE));
  std::memcpy(&now, target_.data(), 8);
  EXPECT_EQ(now, 13u);
  ASSERT_EQ(fi_cntr_add(cntr_, 2), 0);  // past both remaining thresholds: in order
  ASSERT_TRUE(p_.Wait(p_.a.txcq, &e));
  EXPECT_EQ(e.op_context, &tf);
  EXPECT_TRUE(e.flags & FI_READ);
  EXPECT_EQ(fetched, 13u);
  ASSERT_TRUE(p_.Wait(p_.a.txcq, &e));
  EXPECT_EQ(e.op_context, &tc);
  EXPECT_EQ(old, 17u);  // the fetch-add ran first: the compare matched
  std::memcpy(&now, target_.data(), 8);
  EXPECT_EQ(now, 100u);
  EXPECT_EQ(fi_close(&mr->fid), 0);
}

TEST_F(TriggerTest, CancelAndFlushWork) {
  Recvs r(p_, 1);
  fid_cntr* target = OpenCntr(p_.a.domain);
  fi_op_cntr set{target, 42};
  fi_deferred_work w = CntrWork(cntr_, 1, FI_OP_CNTR_SET, &set);
  fi_deferred_work w2 = w;
  ASSERT_EQ(fi_control(&p_.a.domain->fid, FI_QUEUE_WORK, &w), 0);
  ASSERT_EQ(fi_control(&p_.a.domain->fid, FI_QUEUE_WORK, &w2), 0);
  const std::string msg = "never";
  fi_triggered_context t = Threshold(cntr_, 1);
  ASSERT_EQ(TriggeredSend(p_, msg, &t), 0);
  EXPECT_EQ(fi_control(&p_.a.domain->fid, FI_CANCEL_WORK, &w), 0);
  EXPECT_EQ(fi_control(&p_.a.domain->fid, FI_CANCEL_WORK, &w), -FI_ENOENT);
  // Work waits on both counters and the endpoint: they cannot close.
  EXPECT_EQ(fi_close(&cntr_->fid), -FI_EBUSY);
  EXPECT_EQ(fi_close(&target->fid), -FI_EBUSY);
  EXPECT_EQ(fi_close(&p_.a.ep->fid), -FI_EBUSY);
  EXPECT_EQ(fi_control(&p_.a.domain->fid, FI_FLUSH_WORK, nullptr), 0);
  ASSERT_EQ(fi_cntr_add(cntr_, 1), 0);
  EXPECT_EQ(fi_cntr_read(target), 0u);
  EXPECT_TRUE(NothingArrives(p_));
  // The flushed triggered send completes FI_ECANCELED with its context.
  fi_cq_err_entry err{};
  ASSERT_TRUE(p_.WaitError(p_.a.txcq, &err));
  EXPECT_EQ(err.err, FI_ECANCELED);
  EXPECT_EQ(err.op_context, &t);
  EXPECT_EQ(fi_close(&target->fid), 0);
}

// fi_cancel reaches a triggered operation that has not been issued: it
// completes with FI_ECANCELED and its context, and never runs.
TEST_F(TriggerTest, FiCancelOfAWaitingTriggeredSend) {
  Recvs r(p_, 1);
  const std::string msg = "canceled";
  fi_triggered_context t = Threshold(cntr_, 1);
  ASSERT_EQ(TriggeredSend(p_, msg, &t), 0);
  ASSERT_EQ(fi_cancel(&p_.a.ep->fid, &t), 0);
  fi_cq_err_entry err{};
  ASSERT_TRUE(p_.WaitError(p_.a.txcq, &err));
  EXPECT_EQ(err.err, FI_ECANCELED);
  EXPECT_EQ(err.op_context, &t);
  ASSERT_EQ(fi_cntr_add(cntr_, 1), 0);
  EXPECT_TRUE(NothingArrives(p_));
  EXPECT_EQ(fi_cancel(&p_.a.ep->fid, &t), -FI_ENOENT);
}

TEST_F(TriggerTest, FlushOneCounterOnly) {
  fid_cntr* other = OpenCntr(p_.a.domain);
  fid_cntr* target = OpenCntr(p_.a.domain);
  fi_op_cntr add{target, 1};
  fi_deferred_work on_mine = CntrWork(cntr_, 1, FI_OP_CNTR_ADD, &add);
  fi_deferred_work on_other = CntrWork(other, 1, FI_OP_CNTR_ADD, &add);
  ASSERT_EQ(fi_control(&p_.a.domain->fid, FI_QUEUE_WORK, &on_mine), 0);
  ASSERT_EQ(fi_control(&p_.a.domain->fid, FI_QUEUE_WORK, &on_other), 0);
  fi_deferred_work which{};
  which.triggering_cntr = cntr_;
  ASSERT_EQ(fi_control(&p_.a.domain->fid, FI_FLUSH_WORK, &which), 0);
  ASSERT_EQ(fi_cntr_add(cntr_, 1), 0);
  ASSERT_EQ(fi_cntr_add(other, 1), 0);
  EXPECT_EQ(fi_cntr_read(target), 1u);  // only the other counter's work ran
  EXPECT_EQ(fi_close(&other->fid), 0);
  EXPECT_EQ(fi_close(&target->fid), 0);
}

TEST_F(TriggerTest, ErrorsAreDocumentedErrnos) {
  const std::string msg = "x";
  iovec iov{const_cast<char*>(msg.data()), 1};
  fi_msg m{&iov, nullptr, 1, p_.a.peer, nullptr, 0};
  EXPECT_EQ(fi_sendmsg(p_.a.ep, &m, FI_TRIGGER), -FI_EINVAL);  // no triggered context
  fi_triggered_context t = Threshold(cntr_, 1);
  m.context = &t;
  t.event_type = static_cast<fi_trigger_event>(7);
  EXPECT_EQ(fi_sendmsg(p_.a.ep, &m, FI_TRIGGER), -FI_EINVAL);
  t.event_type = FI_TRIGGER_XPU;
  EXPECT_EQ(fi_sendmsg(p_.a.ep, &m, FI_TRIGGER), -FI_ENOSYS);
  t = Threshold(nullptr, 1);
  EXPECT_EQ(fi_sendmsg(p_.a.ep, &m, FI_TRIGGER), -FI_EINVAL);  // no counter
  fid_cntr* foreign = OpenCntr(p_.b.domain);
  t = Threshold(foreign, 1);
  EXPECT_EQ(fi_sendmsg(p_.a.ep, &m, FI_TRIGGER), -FI_EINVAL);  // another domain's
  EXPECT_EQ(fi_close(&foreign->fid), 0);
  // Deferred work.
  fid_domain* d = p_.a.domain;
  EXPECT_EQ(fi_control(&d->fid, FI_QUEUE_WORK, nullptr), -FI_EINVAL);
  fi_deferred_work w{};
  w.op_type = FI_OP_CNTR_ADD;
  fi_op_cntr add{cntr_, 1};
  w.op.cntr = &add;
  EXPECT_EQ(fi_control(&d->fid, FI_QUEUE_WORK, &w), -FI_EINVAL);  // no triggering counter
  w.triggering_cntr = cntr_;
  w.completion_cntr = cntr_;
  EXPECT_EQ(fi_control(&d->fid, FI_QUEUE_WORK, &w), -FI_EINVAL);  // counter op with one
  w.completion_cntr = nullptr;
  w.op_type = FI_OP_ATOMIC;
  w.op.atomic = nullptr;
  EXPECT_EQ(fi_control(&d->fid, FI_QUEUE_WORK, &w), -FI_EINVAL);  // no operation
  w.op.cntr = &add;
  w.op_type = static_cast<fi_op_type>(99);
  EXPECT_EQ(fi_control(&d->fid, FI_QUEUE_WORK, &w), -FI_ENOSYS);
  w.op_type = FI_OP_SEND;
  w.op.msg = nullptr;
  EXPECT_EQ(fi_control(&d->fid, FI_QUEUE_WORK, &w), -FI_EINVAL);
  fi_op_msg om{p_.b.ep, m, 0};  // b's endpoint is not of this domain
  w.op.msg = &om;
  EXPECT_EQ(fi_control(&d->fid, FI_QUEUE_WORK, &w), -FI_EINVAL);
  EXPECT_EQ(fi_control(&d->fid, FI_CANCEL_WORK, &w), -FI_ENOENT);
  EXPECT_EQ(fi_control(&d->fid, FI_CANCEL_WORK, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_control(&d->fid, FI_GETOPSFLAG, nullptr), -FI_ENOSYS);
}

// A triggered operation whose post answers -FI_EAGAIN (more sends at once
// than the engine's 256 unacknowledged ones) is issued by later progress,
// in order, never lost.
TEST(TriggerRetryTest, EagainIsRetriedInOrder) {
  fi_info* hints = RdmHints(kCaps);
  Pair p;
  p.Open(hints);
  fi_freeinfo(hints);
  fid_cntr* c = OpenCntr(p.a.domain);
  constexpr int kOps = 400;
  constexpr int kPosted = 128;  // receives kept posted at b
  std::vector<std::vector<char>> bufs(kOps, std::vector<char>(16, 0));
  for (int i = 0; i < kPosted; ++i) {
    ASSERT_EQ(fi_recv(p.b.ep, bufs[i].data(), 16, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  }
  std::vector<std::string> msgs;
  std::vector<fi_triggered_context> ts(kOps, Threshold(c, 1));
  for (int i = 0; i < kOps; ++i) msgs.push_back("m" + std::to_string(i));
  for (int i = 0; i < kOps; ++i) ASSERT_EQ(TriggeredSend(p, msgs[i], &ts[i]), 0);
  ASSERT_EQ(fi_cntr_add(c, 1), 0);
  for (int i = 0; i < kOps; ++i) {
    ASSERT_EQ(NextMessage(p), msgs[i]);
    if (i + kPosted < kOps) {
      ASSERT_EQ(fi_recv(p.b.ep, bufs[i + kPosted].data(), 16, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    }
  }
  int completed = 0;
  fi_cq_tagged_entry e;
  while (completed < kOps && p.Wait(p.a.txcq, &e)) ++completed;
  EXPECT_EQ(completed, kOps);
  EXPECT_EQ(fi_close(&c->fid), 0);
  p.Close();
}

// Another thread's fi_cntr_add fires work on endpoints a third thread
// progresses (FI_THREAD_SAFE): every message arrives once, in order.
TEST_F(TriggerTest, ThreadsAddWhileAnotherProgresses) {
  constexpr int kOps = 64;
  Recvs r(p_, kOps);
  std::vector<std::string> msgs;
  for (int i = 0; i < kOps; ++i) msgs.push_back("t" + std::to_string(i));
  std::vector<fi_triggered_context> ts;
  for (int i = 0; i < kOps; ++i) ts.push_back(Threshold(cntr_, i + 1));
  for (int i = 0; i < kOps; ++i) ASSERT_EQ(TriggeredSend(p_, msgs[i], &ts[i]), 0);
  std::atomic<int> received{0};
  int sent = 0;  // the progress thread's, then the main thread's
  std::vector<std::string> got;
  std::thread progress([&] {
    fi_cq_tagged_entry e;
    for (long i = 0; i < 50'000'000 && received.load() < kOps; ++i) {
      if (fi_cq_read(p_.b.rxcq, &e, 1) == 1) {
        got.emplace_back(static_cast<const char*>(e.buf), e.len);
        received.fetch_add(1);
      }
      if (fi_cq_read(p_.a.txcq, &e, 1) == 1) ++sent;
    }
  });
  std::thread adder([&] {
    for (int i = 0; i < kOps; ++i) {
      fi_cntr_add(cntr_, 1);
      std::this_thread::yield();
    }
  });
  adder.join();
  progress.join();
  ASSERT_EQ(received.load(), kOps);
  EXPECT_EQ(got, msgs);
  fi_cq_tagged_entry e;
  while (sent < kOps && p_.Wait(p_.a.txcq, &e)) ++sent;
  EXPECT_EQ(sent, kOps);
}

// The locking rule across locks: a counter counted by context 0 of a
// scalable endpoint (its queue's lock) fires sends on context 1 (another
// lock) while a thread progresses each context. The progress path only
// try-locks context 1's lock; what it cannot take, context 1's own
// progress issues. Every message arrives once, in order.
TEST(TriggerLocksTest, CounterOfOneContextFiresWorkOnAnother) {
  fi_info* hints = RdmHints(FI_MSG | FI_TRIGGER | FI_NAMED_RX_CTX);
  hints->domain_attr->threading = FI_THREAD_SAFE;
  hints->ep_attr->tx_ctx_cnt = 2;
  hints->ep_attr->rx_ctx_cnt = 2;
  fi_info* list = nullptr;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list), 0);
  fi_freeinfo(hints);
  fi_info* info = fi_dupinfo(ForDomain(list, kSteered));
  fi_freeinfo(list);
  ASSERT_NE(info, nullptr);
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_ep* sep = nullptr;
  ASSERT_EQ(fi_fabric(info->fabric_attr, &fabric, nullptr), 0);
  ASSERT_EQ(fi_domain(fabric, info, &domain, nullptr), 0);
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  av_attr.rx_ctx_bits = 1;
  ASSERT_EQ(fi_av_open(domain, &av_attr, &av, nullptr), 0);
  ASSERT_EQ(fi_scalable_ep(domain, info, &sep, nullptr), 0);
  ASSERT_EQ(fi_scalable_ep_bind(sep, &av->fid, 0), 0);
  fid_cntr* received = OpenCntr(domain);
  fid_ep *tx[2], *rx[2];
  fid_cq *txcq[2], *rxcq[2];
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_TAGGED;
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(fi_tx_context(sep, i, nullptr, &tx[i], nullptr), 0);
    ASSERT_EQ(fi_rx_context(sep, i, nullptr, &rx[i], nullptr), 0);
    ASSERT_EQ(fi_cq_open(domain, &cq_attr, &txcq[i], nullptr), 0);
    ASSERT_EQ(fi_cq_open(domain, &cq_attr, &rxcq[i], nullptr), 0);
    ASSERT_EQ(fi_ep_bind(tx[i], &txcq[i]->fid, FI_TRANSMIT), 0);
    ASSERT_EQ(fi_ep_bind(rx[i], &rxcq[i]->fid, FI_RECV), 0);
  }
  ASSERT_EQ(fi_ep_bind(rx[0], &received->fid, FI_RECV), 0);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(fi_enable(tx[i]), 0);
    ASSERT_EQ(fi_enable(rx[i]), 0);
  }
  ASSERT_EQ(fi_enable(sep), 0);
  // The case this test is for: the two contexts serialize on two locks.
  ASSERT_NE(&AsEp(tx[0])->base->lock->Target(), &AsEp(tx[1])->base->lock->Target());
  std::vector<char> name(64);
  size_t len = name.size();
  ASSERT_EQ(fi_getname(&sep->fid, name.data(), &len), 0);
  fi_addr_t self;
  ASSERT_EQ(fi_av_insert(av, name.data(), 1, &self, 0, nullptr), 1);
  const fi_addr_t to0 = fi_rx_addr(self, 0, 1), to1 = fi_rx_addr(self, 1, 1);
  constexpr int kOps = 48;
  std::vector<std::vector<char>> in0(kOps, std::vector<char>(16)), in1 = in0;
  std::vector<std::string> msgs;
  for (int i = 0; i < kOps; ++i) msgs.push_back("c" + std::to_string(i));
  std::vector<fi_triggered_context> ts;
  for (int i = 0; i < kOps; ++i) ts.push_back(Threshold(received, i + 1));
  for (int i = 0; i < kOps; ++i) {
    ASSERT_EQ(fi_recv(rx[0], in0[i].data(), 16, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    ASSERT_EQ(fi_recv(rx[1], in1[i].data(), 16, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    iovec iov{msgs[i].data(), msgs[i].size()};
    fi_msg m{&iov, nullptr, 1, to1, &ts[i], 0};
    ASSERT_EQ(fi_sendmsg(tx[1], &m, FI_TRIGGER), 0);
  }
  // Context 0: its thread sends to itself and progresses (the counter
  // moves here); context 1: its thread progresses what was fired.
  std::vector<std::string> got;
  std::atomic<bool> done{false};
  std::thread ctx0([&] {
    fi_cq_tagged_entry e;
    int sent = 0, completed = 0;
    const char payload[] = "in";
    while (!done.load()) {
      if (sent < kOps && fi_send(tx[0], payload, 2, nullptr, to0, nullptr) == 0) ++sent;
      if (fi_cq_read(txcq[0], &e, 1) == 1) ++completed;
      fi_cq_read(rxcq[0], &e, 1);
    }
  });
  std::thread ctx1([&] {
    fi_cq_tagged_entry e;
    for (long i = 0; i < 50'000'000 && got.size() < static_cast<size_t>(kOps); ++i) {
      if (fi_cq_read(rxcq[1], &e, 1) == 1) got.emplace_back(static_cast<const char*>(e.buf), e.len);
      fi_cq_read(txcq[1], &e, 1);
    }
    done.store(true);
  });
  ctx1.join();
  ctx0.join();
  EXPECT_EQ(got, msgs);
  fi_cq_tagged_entry e;
  for (int i = 0; i < 100'000; ++i) {  // the last sends' completions, before closing
    fi_cq_read(txcq[0], &e, 1);
    fi_cq_read(txcq[1], &e, 1);
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(fi_close(&tx[i]->fid), 0);
    EXPECT_EQ(fi_close(&rx[i]->fid), 0);
    EXPECT_EQ(fi_close(&txcq[i]->fid), 0);
    EXPECT_EQ(fi_close(&rxcq[i]->fid), 0);
  }
  EXPECT_EQ(fi_close(&received->fid), 0);
  EXPECT_EQ(fi_close(&sep->fid), 0);
  EXPECT_EQ(fi_close(&av->fid), 0);
  EXPECT_EQ(fi_close(&domain->fid), 0);
  EXPECT_EQ(fi_close(&fabric->fid), 0);
  fi_freeinfo(info);
}

}  // namespace
}  // namespace bypass::fi::testing
