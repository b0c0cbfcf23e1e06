// Receiver resources: a bounded unexpected queue pushes back on senders
// (RNR, no ACK, no credit) without failing them; the window follows what the
// receiver can hold; local send resources run out with kAgain.
#include <cstdint>
#include <vector>

#include "fabric/rdm/rdm.h"
#include "fabric/rdm/test_util.h"
#include "gtest/gtest.h"

namespace bypass::rdm {
namespace {

using testing::Drain;
using testing::Net;
using testing::NetOptions;

NetOptions SmallReceiver() {
  NetOptions o;
  o.tick_ns = 10'000;
  o.config.peer_timeout_ns = 50'000'000;
  o.configure = [](int node, EndpointConfig* c) {
    if (node == 1) {
      c->max_unexpected_msgs = 4;
      c->unexpected_bytes = 64 * 1024;
      c->unexpected_chunk_bytes = 1024;
    }
  };
  return o;
}

TEST(CreditsTest, UnexpectedQueueIsBoundedAndSendersWaitWithoutFailing) {
  Net net(SmallReceiver());
  const PeerId to_b = net.Peer(0, 1);
  constexpr int kMsgs = 20;
  std::vector<uint64_t> out(kMsgs);
  for (int i = 0; i < kMsgs; ++i) {
    out[i] = 1000 + i;
    ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = &out[i], .len = 8}), Result::kOk);
  }
  // Three peer timeouts pass with nothing posted: depth stays at the bound,
  // the sender is refused and backs off, and nothing fails.
  uint64_t max_depth = 0;
  std::vector<ErrorCompletion> err;
  net.RunUntil(
      [&] {
        max_depth = std::max(max_depth, net.ep(1).counters().unexpected_depth);
        Drain(net.ep(0), nullptr, &err);
        return false;
      },
      15'000);
  EXPECT_EQ(max_depth, 4u);
  EXPECT_EQ(net.ep(1).counters().unexpected_depth_max, 4u);
  EXPECT_GT(net.ep(1).counters().rnr_sent, 0u);
  EXPECT_GT(net.ep(0).counters().rnr_received, 0u);
  EXPECT_TRUE(err.empty()) << err[0].message;
  EXPECT_EQ(net.ep(0).counters().peer_timeouts, 0u);
  EXPECT_EQ(net.ep(0).peer_stats(to_b)->queued_ops, static_cast<uint32_t>(kMsgs - 4));
  EXPECT_LT(net.ep(0).counters().tx_data_packets, 200u) << "retries back off";
  // Receives appear: everything arrives once, in order.
  std::vector<uint64_t> in(kMsgs, 0);
  for (int i = 0; i < kMsgs; ++i) {
    ASSERT_EQ(net.ep(1).PostRecv({.buf = &in[i], .len = 8, .context = &in[i]}), Result::kOk);
  }
  std::vector<Completion> got;
  ASSERT_TRUE(net.RunUntil(
      [&] {
        Drain(net.ep(1), &got, &err);
        return got.size() == kMsgs;
      },
      2'000));
  for (int i = 0; i < kMsgs; ++i) {
    EXPECT_EQ(in[i], 1000u + i);
    EXPECT_EQ(got[i].context, &in[i]);
  }
  EXPECT_TRUE(err.empty());
}

TEST(CreditsTest, MessageLargerThanTheUnexpectedBufferWaitsForItsReceive) {
  NetOptions o = SmallReceiver();
  o.config.rendezvous_threshold = UINT64_MAX;  // eager (rendezvous_test has the other way)
  Net net(o);
  const PeerId to_b = net.Peer(0, 1);
  std::vector<uint8_t> big(256 * 1024), in(256 * 1024);
  testing::FillPattern(3, absl::MakeSpan(big));
  int ctx;
  ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = big.data(), .len = big.size(), .context = &ctx}),
            Result::kOk);
  net.RunUntil([] { return false; }, 3'000);
  EXPECT_EQ(net.ep(1).counters().unexpected_depth, 0u);
  EXPECT_EQ(net.ep(1).counters().unexpected_bytes, 0u);
  EXPECT_GT(net.ep(1).counters().rnr_sent, 0u);
  ASSERT_EQ(net.ep(1).PostRecv({.buf = in.data(), .len = in.size()}), Result::kOk);
  std::vector<Completion> sent, got;
  ASSERT_TRUE(net.RunUntil(
      [&] {
        Drain(net.ep(0), &sent, nullptr);
        Drain(net.ep(1), &got, nullptr);
        return !sent.empty() && !got.empty();
      },
      5'000));
  EXPECT_EQ(in, big);
  EXPECT_EQ(sent[0].context, &ctx);
}

TEST(CreditsTest, UnexpectedBytesAreBoundedToo) {
  Net net(SmallReceiver());
  const PeerId to_b = net.Peer(0, 1);
  // Three 30 KiB messages: two fit in 64 KiB, the third waits.
  std::vector<std::vector<uint8_t>> out(3, std::vector<uint8_t>(30 * 1024));
  for (size_t i = 0; i < out.size(); ++i) {
    testing::FillPattern(i, absl::MakeSpan(out[i]));
    ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = out[i].data(), .len = out[i].size()}),
              Result::kOk);
  }
  net.RunUntil([] { return false; }, 3'000);
  EXPECT_EQ(net.ep(1).counters().unexpected_depth, 2u);
  EXPECT_LE(net.ep(1).counters().unexpected_bytes, 64u * 1024);
  std::vector<std::vector<uint8_t>> in(3, std::vector<uint8_t>(30 * 1024));
  for (auto& b : in) ASSERT_EQ(net.ep(1).PostRecv({.buf = b.data(), .len = b.size()}), Result::kOk);
  std::vector<Completion> got;
  ASSERT_TRUE(net.RunUntil(
      [&] {
        Drain(net.ep(1), &got, nullptr);
        return got.size() == 3;
      },
      3'000));
  EXPECT_EQ(in, out);
}

TEST(CreditsTest, SendSlotsRunOutWithEagainAndComeBack) {
  NetOptions o;
  o.config.max_send_ops = 8;
  Net net(o);
  const PeerId to_b = net.Peer(0, 1);
  const uint64_t v = 1;
  int accepted = 0;
  while (net.ep(0).Send({.dest = to_b, .buf = &v, .len = 8, .flags = kSendInject}) == Result::kOk) {
    ++accepted;
  }
  EXPECT_EQ(accepted, 8);
  EXPECT_EQ(net.ep(0).Send({.dest = to_b, .buf = &v, .len = 8}), Result::kAgain);
  std::vector<uint64_t> in(8);
  for (uint64_t& x : in) ASSERT_EQ(net.ep(1).PostRecv({.buf = &x, .len = 8}), Result::kOk);
  ASSERT_TRUE(net.RunUntil(
      [&] { return net.ep(0).Send({.dest = to_b, .buf = &v, .len = 8}) == Result::kOk; }, 1'000));
}

}  // namespace
}  // namespace bypass::rdm
