// A receiver that is not ready (issue 21): no give-up while the peer is
// alive. A sender refused for lack of receive resources retries for as
// long as the receiver answers, however late its receives come; the error
// comes only when the receiver is gone (ETIMEDOUT, with the send's
// context); messages nobody asked for yet wait in a buffer one budget
// bounds, shared by the endpoints given it (UnexpectedPool), and beyond it
// are refused, not lost; rendezvous requests are queued even when eager
// messages fill the queue; and a removed peer gets the ACK it was owed.
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fabric/rdm/rdm.h"
#include "fabric/rdm/test_util.h"
#include "gtest/gtest.h"

namespace bypass::rdm {
namespace {

using testing::Drain;
using testing::Net;
using testing::NetOptions;

// A message's payload: its sender node and number first, then a pattern
// that depends on both.
std::vector<uint8_t> Payload(int sender, uint32_t seq, size_t len) {
  std::vector<uint8_t> b(len);
  for (size_t i = 0; i < len; ++i) b[i] = static_cast<uint8_t>(sender * 131 + seq * 7 + i);
  const uint64_t id = uint64_t{static_cast<uint32_t>(sender)} << 32 | seq;
  std::memcpy(b.data(), &id, sizeof(id));
  return b;
}

// Shortened receiver-not-ready intervals: retries back off from 20 us to
// 1 ms, and a silent peer is given up after 50 ms.
NetOptions ShortIntervals(int nodes) {
  NetOptions o;
  o.nodes = nodes;
  o.tick_ns = 50'000;
  o.config.rnr_retry_min_ns = 20'000;
  o.config.rnr_retry_max_ns = 1'000'000;
  o.config.peer_timeout_ns = 50'000'000;
  return o;
}

// What one receiving node got: per sender, the numbers in arrival order.
struct Received {
  std::map<int, std::vector<uint32_t>> seqs;
  int wrong = 0;  // payloads that are not what their sender sent
};

// The sends of one sender node to one receiver node, kept until completion.
struct Flow {
  Flow(int f, int t) : from(f), to(t) {}
  int from, to;
  std::vector<std::vector<uint8_t>> bufs;
  std::vector<int> contexts;
};

void StartFlow(Net& net, Flow* f, uint32_t count, size_t len) {
  f->bufs.resize(count);
  f->contexts.resize(count);
  const PeerId dest = net.Peer(f->from, f->to);
  for (uint32_t i = 0; i < count; ++i) {
    f->bufs[i] = Payload(f->from, i, len);
    ASSERT_EQ(net.ep(f->from).Send({.dest = dest,
                                    .buf = f->bufs[i].data(),
                                    .len = len,
                                    .context = &f->contexts[i]}),
              Result::kOk);
  }
}

// Posts `count` receives of `len` bytes on node r and steps until they
// complete, recording what arrived; false if the steps ran out.
bool ReceiveAll(Net& net, int r, const std::vector<int>& senders, uint32_t count, size_t len,
                Received* got) {
  std::vector<std::vector<uint8_t>> bufs(count, std::vector<uint8_t>(len));
  std::vector<Completion> ok;
  std::vector<ErrorCompletion> err;
  uint32_t posted = 0;
  const bool done = net.RunUntil(
      [&] {
        while (posted < count &&
               net.ep(r).PostRecv({.buf = bufs[posted].data(), .len = len,
                                   .context = bufs[posted].data()}) == Result::kOk) {
          ++posted;
        }
        Drain(net.ep(r), &ok, &err);
        return ok.size() + err.size() >= count;
      },
      400'000);
  EXPECT_TRUE(err.empty()) << err[0].message;
  for (const Completion& c : ok) {
    uint64_t id = 0;
    std::memcpy(&id, c.context, sizeof(id));
    const int sender = static_cast<int>(id >> 32);
    const uint32_t seq = static_cast<uint32_t>(id);
    bool known = false;
    for (int s : senders) known |= s == sender && net.Peer(r, s) == c.source;
    const std::vector<uint8_t> want = Payload(sender, seq, len);
    if (!known || c.len != len || std::memcmp(c.context, want.data(), len) != 0) ++got->wrong;
    got->seqs[sender].push_back(seq);
  }
  return done;
}

std::vector<uint32_t> Iota(uint32_t n) {
  std::vector<uint32_t> v(n);
  for (uint32_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

// Steps until node i has `n` send completions or errors, checking that each
// names one of the flow's contexts once.
bool SendsDone(Net& net, const Flow& f, std::vector<Completion>* ok,
               std::vector<ErrorCompletion>* err, uint64_t steps = 400'000) {
  return net.RunUntil(
      [&] {
        Drain(net.ep(f.from), ok, err);
        return ok->size() + err->size() >= f.contexts.size();
      },
      steps);
}

// Two senders flood a receiver that posts nothing for 2 s of its clock:
// forty times the peer timeout, two thousand times the longest retry
// interval. It answers (refusals) all along, so nothing is given up; once
// its receives come every message arrives, in order per sender, intact,
// and every send completes with its context.
TEST(LateReceiverTest, EverySendCompletesHoweverLateTheReceiverPosts) {
  NetOptions o = ShortIntervals(3);
  o.configure = [](int node, EndpointConfig* c) {
    if (node == 0) {
      c->max_unexpected_msgs = 4;
      c->unexpected_bytes = 2048;
      c->unexpected_chunk_bytes = 256;
    }
  };
  Net net(o);
  constexpr uint32_t kCount = 40;
  constexpr size_t kLen = 100;
  Flow a(1, 0), b(2, 0);
  StartFlow(net, &a, kCount, kLen);
  StartFlow(net, &b, kCount, kLen);
  const uint64_t start = net.clock().NowNs();
  ASSERT_TRUE(net.RunUntil([&] { return net.clock().NowNs() - start >= 2'000'000'000; },
                           1'000'000));
  EXPECT_EQ(net.ep(0).counters().unexpected_depth, 4u) << "the queue filled";
  EXPECT_GT(net.ep(1).counters().rnr_received + net.ep(2).counters().rnr_received, 100u);
  EXPECT_GT(net.ep(0).counters().rnr_sent, 100u);
  Received got;
  ASSERT_TRUE(ReceiveAll(net, 0, {1, 2}, 2 * kCount, kLen, &got));
  EXPECT_EQ(got.wrong, 0);
  EXPECT_EQ(got.seqs[1], Iota(kCount));
  EXPECT_EQ(got.seqs[2], Iota(kCount));
  for (const Flow* f : {&a, &b}) {
    std::vector<Completion> ok;
    std::vector<ErrorCompletion> err;
    ASSERT_TRUE(SendsDone(net, *f, &ok, &err));
    ASSERT_TRUE(err.empty()) << err[0].message;
    for (uint32_t i = 0; i < kCount; ++i) EXPECT_EQ(ok[i].context, &f->contexts[i]) << i;
    EXPECT_EQ(net.ep(f->from).counters().rnr_give_ups, 0u);
    EXPECT_EQ(net.ep(f->from).counters().peer_timeouts, 0u);
  }
}

// A receiver that refuses and then dies: the refused sends fail only after
// the peer timeout of silence, with ETIMEDOUT and each send's own context.
TEST(LateReceiverTest, ASenderRefusedByAReceiverThatDiesGetsTheErrorWithItsContext) {
  NetOptions o = ShortIntervals(2);
  o.configure = [](int node, EndpointConfig* c) {
    if (node == 1) c->max_unexpected_msgs = 1;
  };
  Net net(o);
  Flow f(0, 1);
  StartFlow(net, &f, 3, 64);
  ASSERT_TRUE(net.RunUntil([&] { return net.ep(0).counters().rnr_received >= 20; }, 100'000));
  std::vector<Completion> ok;
  std::vector<ErrorCompletion> err;
  Drain(net.ep(0), &ok, &err);
  ASSERT_EQ(ok.size(), 1u) << "the one the queue took";
  EXPECT_EQ(ok[0].context, &f.contexts[0]);
  ASSERT_TRUE(err.empty()) << err[0].message;
  net.Kill(1);
  const uint64_t died = net.clock().NowNs();
  ASSERT_TRUE(SendsDone(net, f, &ok, &err));
  ASSERT_EQ(err.size(), 2u);
  EXPECT_GE(net.clock().NowNs() - died, o.config.peer_timeout_ns);
  std::vector<const void*> failed;
  for (const ErrorCompletion& e : err) {
    EXPECT_EQ(e.err, ETIMEDOUT) << e.message;
    EXPECT_NE(e.op.context, nullptr) << e.message;
    failed.push_back(e.op.context);
  }
  EXPECT_EQ(failed, (std::vector<const void*>{&f.contexts[1], &f.contexts[2]}));
  EXPECT_EQ(net.ep(0).counters().rnr_give_ups, 0u);
  EXPECT_EQ(net.ep(0).counters().peer_timeouts, 1u);
}

// A receiver that makes no call at all (an MPI rank computing) while a
// send waits for it, for six peer timeouts: its device says its process
// lives (as the intra-host device does), so nothing is given up, and the
// send completes once it progresses again. Then the device says it is gone
// (its lock freed): the next send fails at once with ECONNRESET, long
// before the peer timeout.
TEST(LateReceiverTest, ASilentLiveReceiverIsWaitedForAndADeadOneFailsAtOnce) {
  NetOptions o = ShortIntervals(2);
  Net net(o);
  driver::PeerLiveness says = driver::PeerLiveness::kAlive;
  net.tap(0).set_peer_alive([&](driver::Ipv4Address, uint16_t) { return says; });
  bool silent = true;
  net.tap(1).set_filter([&](const wire::View*) { return !silent; });  // hears nothing
  Flow f(0, 1);
  StartFlow(net, &f, 1, 64);
  const uint64_t start = net.clock().NowNs();
  ASSERT_TRUE(net.RunUntil(
      [&] { return net.clock().NowNs() - start >= 6 * o.config.peer_timeout_ns; }, 1'000'000));
  std::vector<Completion> ok;
  std::vector<ErrorCompletion> err;
  Drain(net.ep(0), &ok, &err);
  EXPECT_TRUE(ok.empty() && err.empty()) << "the send must wait for its receiver";
  EXPECT_EQ(net.ep(0).counters().peer_timeouts, 0u);
  EXPECT_GT(net.ep(0).counters().liveness_checks, 0u);
  silent = false;
  Received got;
  ASSERT_TRUE(ReceiveAll(net, 1, {0}, 1, 64, &got));
  EXPECT_EQ(got.wrong, 0);
  ASSERT_TRUE(SendsDone(net, f, &ok, &err));
  ASSERT_TRUE(err.empty()) << err[0].message;
  EXPECT_EQ(ok[0].context, &f.contexts[0]);

  silent = true;
  says = driver::PeerLiveness::kDead;
  Flow g(0, 1);
  StartFlow(net, &g, 2, 64);
  ok.clear();
  const uint64_t died = net.clock().NowNs();
  ASSERT_TRUE(SendsDone(net, g, &ok, &err));
  ASSERT_EQ(err.size(), 2u);
  EXPECT_LT(net.clock().NowNs() - died, o.config.peer_timeout_ns) << "the death, not the timeout";
  for (const ErrorCompletion& e : err) {
    EXPECT_EQ(e.err, ECONNRESET) << e.message;
    EXPECT_NE(std::string(e.message).find("is gone"), std::string::npos) << e.message;
  }
  EXPECT_EQ(net.ep(0).counters().peers_dead, 1u);
  EXPECT_EQ(net.ep(0).counters().peer_timeouts, 0u);
  PeerFailure pf[2];
  ASSERT_EQ(net.ep(0).PollPeerFailures(pf), 1u);
  EXPECT_EQ(pf[0].err, ECONNRESET);
}

// Two receivers share one unexpected budget (as the endpoints of a fi
// domain do) and two senders flood both: what they buffer never exceeds the
// budget, the rest is refused and comes again, and once the receives come
// every message arrives in order; the budget is whole again.
TEST(UnexpectedPoolTest, EndpointsShareOneBudgetAndAFloodStaysWithinIt) {
  absl::StatusOr<std::unique_ptr<UnexpectedPool>> pool = UnexpectedPool::Create(8192, 256);
  ASSERT_TRUE(pool.ok()) << pool.status();
  UnexpectedPool* shared = pool->get();
  NetOptions o = ShortIntervals(4);
  o.configure = [shared](int node, EndpointConfig* c) {
    if (node < 2) c->unexpected_pool = shared;
  };
  Net net(o);
  constexpr uint32_t kCount = 50;
  constexpr size_t kLen = 300;  // two chunks each: 13 messages fill the budget
  std::vector<Flow> flows;
  for (int s : {2, 3}) {
    for (int r : {0, 1}) flows.push_back(Flow(s, r));
  }
  for (Flow& f : flows) StartFlow(net, &f, kCount, kLen);
  uint64_t over = 0;
  const uint64_t start = net.clock().NowNs();
  ASSERT_TRUE(net.RunUntil(
      [&] {
        if (shared->used_bytes() > shared->capacity_bytes()) ++over;
        return net.clock().NowNs() - start >= 200'000'000;
      },
      100'000));
  EXPECT_EQ(over, 0u);
  EXPECT_EQ(shared->capacity_bytes(), 8192u);
  EXPECT_GE(shared->used_bytes(), 8192u - 512) << "filled but for less than one message";
  EXPECT_EQ(net.ep(0).counters().unexpected_bytes + net.ep(1).counters().unexpected_bytes,
            shared->used_bytes());
  EXPECT_GT(net.ep(0).counters().rnr_sent + net.ep(1).counters().rnr_sent, 0u);
  for (int r : {0, 1}) {
    Received got;
    ASSERT_TRUE(ReceiveAll(net, r, {2, 3}, 2 * kCount, kLen, &got));
    EXPECT_EQ(got.wrong, 0);
    EXPECT_EQ(got.seqs[2], Iota(kCount)) << "at node " << r;
    EXPECT_EQ(got.seqs[3], Iota(kCount)) << "at node " << r;
  }
  EXPECT_LE(shared->peak_bytes(), shared->capacity_bytes());
  EXPECT_EQ(shared->used_bytes(), 0u);
  for (int s : {2, 3}) {
    std::vector<Completion> ok;
    std::vector<ErrorCompletion> err;
    ASSERT_TRUE(net.RunUntil(
        [&] {
          Drain(net.ep(s), &ok, &err);
          return ok.size() + err.size() >= 2 * kCount;
        },
        100'000));
    EXPECT_TRUE(err.empty()) << err[0].message;
    EXPECT_EQ(net.ep(s).counters().rnr_give_ups, 0u);
  }
}

TEST(UnexpectedPoolTest, CreateRejectsBadSizes) {
  EXPECT_EQ(UnexpectedPool::Create(8192, 32).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(UnexpectedPool::Create(100, 256).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(UnexpectedPool::Create(uint64_t{64} << 30, 64).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Eager messages fill the unexpected queue's entries: a rendezvous request
// behind them is still queued (it has entries of its own and holds no
// bytes), not refused.
TEST(UnexpectedPoolTest, RendezvousRequestsAreQueuedWhenEagerMessagesFillTheQueue) {
  NetOptions o = ShortIntervals(2);
  o.config.rendezvous_threshold = 1024;
  o.configure = [](int node, EndpointConfig* c) {
    if (node == 1) c->max_unexpected_msgs = 2;
  };
  Net net(o);
  Flow small(0, 1);
  StartFlow(net, &small, 2, 100);
  Flow large(0, 1);
  large.bufs = {Payload(0, 2, 4096), Payload(0, 3, 4096)};
  large.contexts.resize(2);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(net.ep(0).Send({.dest = net.Peer(0, 1), .buf = large.bufs[i].data(), .len = 4096,
                              .context = &large.contexts[i]}),
              Result::kOk);
  }
  ASSERT_TRUE(net.RunUntil([&] { return net.ep(1).counters().unexpected_depth == 4; }, 20'000));
  EXPECT_EQ(net.ep(1).counters().rnr_sent, 0u);
  std::vector<std::vector<uint8_t>> in(4, std::vector<uint8_t>(4096));
  for (auto& b : in) ASSERT_EQ(net.ep(1).PostRecv({.buf = b.data(), .len = 4096}), Result::kOk);
  std::vector<Completion> ok;
  std::vector<ErrorCompletion> err;
  ASSERT_TRUE(net.RunUntil(
      [&] {
        Drain(net.ep(1), &ok, &err);
        return ok.size() + err.size() >= 4;
      },
      20'000));
  ASSERT_TRUE(err.empty()) << err[0].message;
  EXPECT_EQ(std::memcmp(in[0].data(), small.bufs[0].data(), 100), 0);
  EXPECT_EQ(std::memcmp(in[1].data(), small.bufs[1].data(), 100), 0);
  EXPECT_EQ(in[2], large.bufs[0]);
  EXPECT_EQ(in[3], large.bufs[1]);
}

// A peer removed (fi_av_remove at MPI_Finalize) first gets the ACK we owed
// it: its send completes rather than wait for a peer that forgot it.
TEST(RemovePeerTest, AcknowledgesWhatItConsumedBeforeForgettingThePeer) {
  NetOptions o;
  o.config.ack_delay_ns = 1'000'000'000;  // no delayed ACK within the test
  o.config.ack_every_packets = 1000;
  Net net(o);
  uint64_t in = 0, v = 7;
  int context = 0;
  ASSERT_EQ(net.ep(1).PostRecv({.buf = &in, .len = 8}), Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = net.Peer(0, 1), .buf = &v, .len = 8, .context = &context}),
            Result::kOk);
  std::vector<Completion> ok;
  std::vector<ErrorCompletion> err;
  ASSERT_TRUE(net.RunUntil(
      [&] {
        Drain(net.ep(1), &ok, &err);
        return !ok.empty();
      },
      20'000));
  ASSERT_EQ(in, 7u);
  ok.clear();
  for (int i = 0; i < 100; ++i) net.Step();
  Drain(net.ep(0), &ok, &err);
  ASSERT_TRUE(ok.empty()) << "not acknowledged yet";
  ASSERT_TRUE(net.ep(1).RemovePeer(net.Peer(1, 0)).ok());
  ASSERT_TRUE(net.RunUntil(
      [&] {
        Drain(net.ep(0), &ok, &err);
        return !ok.empty() || !err.empty();
      },
      20'000));
  ASSERT_TRUE(err.empty()) << err[0].message;
  EXPECT_EQ(ok[0].context, &context);
}

}  // namespace
}  // namespace bypass::rdm
