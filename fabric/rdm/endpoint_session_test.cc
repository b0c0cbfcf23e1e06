// Sessions: the handshake, auth keys, incarnations, a peer restarting in the
// middle of a transfer (either side), and a peer that vanishes.
#include <algorithm>
#include <cerrno>
#include <cstdint>
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

NetOptions FastTimeouts() {
  NetOptions o;
  o.tick_ns = 10'000;
  o.config.rto_initial_ns = 200'000;
  o.config.rto_min_ns = 50'000;
  o.config.rto_max_ns = 2'000'000;
  o.config.peer_timeout_ns = 20'000'000;
  o.config.max_msg_size = 4u << 20;
  return o;
}

TEST(SessionTest, HandshakeSurvivesLostHellos) {
  Net net(FastTimeouts());
  int hellos_dropped = 0;
  net.tap(1).set_filter([&](const wire::View* v) {
    if (v != nullptr && v->common.type == wire::PacketType::kHello && hellos_dropped < 3) {
      ++hellos_dropped;
      return false;
    }
    return true;
  });
  uint32_t in = 0;
  const uint32_t out = 42;
  ASSERT_EQ(net.ep(1).PostRecv({.buf = &in, .len = 4}), Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = net.Peer(0, 1), .buf = &out, .len = 4}), Result::kOk);
  ASSERT_TRUE(net.RunUntil([&] { return in == 42; }, 10'000));
  EXPECT_EQ(hellos_dropped, 3);
  EXPECT_EQ(net.ep(0).counters().handshakes, 1u);
  EXPECT_EQ(net.ep(1).counters().handshakes, 1u);
}

TEST(SessionTest, WrongAuthKeyIsDroppedCountedAndTimesOut) {
  NetOptions o = FastTimeouts();
  o.configure = [](int node, EndpointConfig* c) { c->auth_key = node == 0 ? 0x1111 : 0x2222; };
  Net net(o);
  uint32_t in = 0;
  const uint32_t out = 42;
  int ctx;
  ASSERT_EQ(net.ep(1).PostRecv({.buf = &in, .len = 4}), Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = net.Peer(0, 1), .buf = &out, .len = 4, .context = &ctx}),
            Result::kOk);
  std::vector<ErrorCompletion> err;
  ASSERT_TRUE(net.RunUntil(
      [&] {
        Drain(net.ep(0), nullptr, &err);
        return !err.empty();
      },
      10'000));
  EXPECT_EQ(in, 0u);
  EXPECT_GT(net.ep(1).counters().auth_dropped, 0u);
  EXPECT_EQ(err[0].err, ETIMEDOUT);
  EXPECT_EQ(err[0].op.context, &ctx);
  EXPECT_NE(std::string(err[0].message).find("did not answer"), std::string::npos)
      << err[0].message;
}

// The receiver restarts while a 2 MiB message is arriving: the sender's
// operation fails with ECONNRESET as soon as the new incarnation answers,
// and the next send to the same PeerId reaches the new one.
TEST(SessionTest, ReceiverRestartsMidTransfer) {
  Net net(FastTimeouts());
  const PeerId to_b = net.Peer(0, 1);
  const uint32_t old_inc = net.ep(1).address().incarnation;
  std::vector<uint8_t> big(2u << 20), in(2u << 20);
  testing::FillPattern(1, absl::MakeSpan(big));
  ASSERT_EQ(net.ep(1).PostRecv({.buf = in.data(), .len = in.size()}), Result::kOk);
  int ctx;
  ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = big.data(), .len = big.size(), .context = &ctx}),
            Result::kOk);
  ASSERT_TRUE(net.RunUntil([&] { return net.ep(1).counters().rx_data_packets > 200; }, 10'000));
  net.Kill(1);
  net.Revive(1);
  EXPECT_NE(net.ep(1).address().incarnation, old_inc);
  std::vector<ErrorCompletion> err;
  ASSERT_TRUE(net.RunUntil(
      [&] {
        Drain(net.ep(0), nullptr, &err);
        return !err.empty();
      },
      1'000));
  EXPECT_EQ(err[0].err, ECONNRESET);
  EXPECT_EQ(err[0].op.context, &ctx);
  EXPECT_NE(std::string(err[0].message).find("restarted"), std::string::npos) << err[0].message;
  EXPECT_EQ(net.ep(0).counters().peer_restarts, 1u);
  EXPECT_GT(net.ep(1).counters().stale_dropped, 0u);
  EXPECT_GT(net.ep(1).counters().resets_sent, 0u);
  EXPECT_LT(net.ep(1).counters().resets_sent, 10u) << "rate limited";
  // The new incarnation is usable at once, through the same PeerId.
  uint32_t v = 0;
  const uint32_t seven = 7;
  ASSERT_EQ(net.ep(1).PostRecv({.buf = &v, .len = 4}), Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = &seven, .len = 4}), Result::kOk);
  ASSERT_TRUE(net.RunUntil([&] { return v == 7; }, 1'000));
  EXPECT_EQ(net.ep(0).peer_stats(to_b)->incarnation, net.ep(1).address().incarnation);
}

// The sender restarts mid-transfer: the receiver's posted receive fails with
// ECONNRESET when the new incarnation says hello; the old incarnation's
// packets still in flight are dropped as stale; new messages flow.
TEST(SessionTest, SenderRestartsMidTransfer) {
  Net net(FastTimeouts());
  std::vector<uint8_t> big(2u << 20), in(2u << 20);
  testing::FillPattern(1, absl::MakeSpan(big));
  int big_ctx, small_ctx;
  uint32_t small = 0;
  ASSERT_EQ(net.ep(1).PostRecv({.buf = in.data(), .len = in.size(), .context = &big_ctx}),
            Result::kOk);
  ASSERT_EQ(net.ep(1).PostRecv({.buf = &small, .len = 4, .context = &small_ctx}), Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = net.Peer(0, 1), .buf = big.data(), .len = big.size()}),
            Result::kOk);
  ASSERT_TRUE(net.RunUntil([&] { return net.ep(1).counters().rx_data_packets > 200; }, 10'000));
  net.Kill(0);
  net.Revive(0);
  const uint32_t nine = 9;
  ASSERT_EQ(net.ep(0).Send({.dest = net.Peer(0, 1), .buf = &nine, .len = 4}), Result::kOk);
  std::vector<Completion> ok;
  std::vector<ErrorCompletion> err;
  ASSERT_TRUE(net.RunUntil(
      [&] {
        Drain(net.ep(1), &ok, &err);
        return !ok.empty() && !err.empty();
      },
      2'000));
  EXPECT_EQ(err[0].err, ECONNRESET);
  EXPECT_EQ(err[0].op.context, &big_ctx);
  EXPECT_GT(err[0].op.len, 0u) << "what had arrived";
  EXPECT_EQ(ok[0].context, &small_ctx);
  EXPECT_EQ(small, 9u);
  EXPECT_EQ(net.ep(1).counters().peer_restarts, 1u);
}

// A peer that vanishes: operations fail with ETIMEDOUT after the peer
// timeout (with the RTO backing off meanwhile), never hang; a receive that
// was part-way fails too. When the peer comes back, traffic resumes.
TEST(SessionTest, VanishedPeerTimesOutThenComesBack) {
  Net net(FastTimeouts());
  const PeerId to_b = net.Peer(0, 1);
  const PeerId to_a = net.Peer(1, 0);
  std::vector<uint8_t> big(1u << 20), in(1u << 20);
  int send_ctx, recv_ctx;
  ASSERT_EQ(net.ep(0).PostRecv({.buf = in.data(), .len = in.size(), .context = &recv_ctx}),
            Result::kOk);
  ASSERT_EQ(net.ep(1).Send({.dest = to_a, .buf = big.data(), .len = big.size()}), Result::kOk);
  ASSERT_TRUE(net.RunUntil([&] { return net.ep(0).counters().rx_data_packets > 100; }, 10'000));
  ASSERT_EQ(
      net.ep(0).Send({.dest = to_b, .buf = big.data(), .len = big.size(), .context = &send_ctx}),
      Result::kOk);
  net.Kill(1);
  const uint64_t killed_at = net.clock().NowNs();
  std::vector<ErrorCompletion> err;
  std::vector<uint64_t> rtos;
  ASSERT_TRUE(net.RunUntil(
      [&] {
        Drain(net.ep(0), nullptr, &err);
        const uint64_t rto = net.ep(0).peer_stats(to_b)->rto_ns;
        if (rtos.empty() || rtos.back() != rto) rtos.push_back(rto);
        return err.size() == 2;
      },
      5'000));
  const uint64_t took = net.clock().NowNs() - killed_at;
  EXPECT_GE(took, net.ep(0).config().peer_timeout_ns);
  EXPECT_LE(took, net.ep(0).config().peer_timeout_ns + 1'000'000);
  for (const ErrorCompletion& e : err) {
    EXPECT_EQ(e.err, ETIMEDOUT) << e.message;
    EXPECT_TRUE(e.op.context == &send_ctx || e.op.context == &recv_ctx);
  }
  EXPECT_EQ(net.ep(0).counters().peer_timeouts, 1u);
  EXPECT_GT(net.ep(0).counters().rto_expirations, 3u);
  ASSERT_GE(rtos.size(), 3u);
  EXPECT_EQ(*std::max_element(rtos.begin(), rtos.end()), net.ep(0).config().rto_max_ns)
      << "backed off to the ceiling";
  EXPECT_EQ(net.ep(0).peer_stats(to_b)->queued_ops, 0u);

  net.Revive(1);
  uint32_t v = 0;
  const uint32_t five = 5;
  ASSERT_EQ(net.ep(1).PostRecv({.buf = &v, .len = 4}), Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = &five, .len = 4}), Result::kOk);
  ASSERT_TRUE(net.RunUntil([&] { return v == 5; }, 1'000));
}

TEST(SessionTest, HelloToNobodyTimesOut) {
  Net net(FastTimeouts());
  Address nowhere = net.ep(1).address();
  nowhere.udp_port = 9999;  // the device is there, no endpoint is
  const PeerId p = *net.ep(0).InsertPeer(nowhere);
  ASSERT_EQ(net.ep(0).Send({.dest = p, .buf = "x", .len = 1}), Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = p, .buf = "y", .len = 1, .flags = kSendInject}), Result::kOk);
  std::vector<ErrorCompletion> err;
  ASSERT_TRUE(net.RunUntil(
      [&] {
        Drain(net.ep(0), nullptr, &err);
        return err.size() == 2;
      },
      5'000));
  EXPECT_EQ(err[0].err, ETIMEDOUT);
  EXPECT_EQ(err[1].err, ETIMEDOUT) << "an inject's failure is reported too";
  // The port's only endpoint sees (and drops) what no endpoint is bound to.
  EXPECT_GT(net.ep(1).counters().not_for_us_dropped, 2u) << "HELLO was retried";
}

// A peer inserted with an incarnation that has since restarted: the first
// HELLO names the old one, the RESET names the new one, and the queued
// (never sent) operation goes to the new incarnation without an error.
TEST(SessionTest, StaleInsertedIncarnationIsCorrectedWithoutLoss) {
  Net net(FastTimeouts());
  const Address old = net.ep(1).address();
  net.Kill(1);
  net.Revive(1);
  const PeerId p = *net.ep(0).InsertPeer(old);
  uint32_t v = 0;
  const uint32_t three = 3;
  ASSERT_EQ(net.ep(1).PostRecv({.buf = &v, .len = 4}), Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = p, .buf = &three, .len = 4}), Result::kOk);
  std::vector<ErrorCompletion> err;
  ASSERT_TRUE(net.RunUntil(
      [&] {
        Drain(net.ep(0), nullptr, &err);
        return v == 3;
      },
      1'000));
  EXPECT_TRUE(err.empty());
  EXPECT_EQ(net.ep(0).counters().peer_restarts, 1u);
  EXPECT_EQ(net.ep(1).counters().stale_dropped, 1u);
}

}  // namespace
}  // namespace bypass::rdm
