// Bundles (PROTOCOL.md, "Bundles"): small whole messages that wait to be
// sent at the same time go in one DATA packet; each arrives once and in
// order when the packet is lost, held out of order, or refused part way.
#include <cerrno>
#include <cstdint>
#include <vector>

#include "fabric/rdm/rdm.h"
#include "fabric/rdm/test_util.h"
#include "fabric/rdm/wire.h"
#include "gtest/gtest.h"

namespace bypass::rdm {
namespace {

using testing::Drain;
using testing::Net;
using testing::NetOptions;

constexpr int kMsgs = 40;

// Message i: 8 * (i % 13) bytes of pattern i, tag 0x100 + i, remote data on
// every third.
struct Traffic {
  std::vector<std::vector<uint8_t>> out, in;
  std::vector<int> ctx;
  explicit Traffic(int n) : out(n), in(n, std::vector<uint8_t>(128)), ctx(n) {
    for (int i = 0; i < n; ++i) {
      out[i].resize(8 * (i % 13));
      testing::FillPattern(i, absl::MakeSpan(out[i]));
    }
  }
  void PostRecvs(Endpoint& ep, int n) {
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(ep.PostRecv({.buf = in[i].data(), .len = in[i].size(), .context = &in[i],
                             .tagged = true, .tag = 0x100u + i}),
                Result::kOk);
    }
  }
  void Send(Endpoint& ep, PeerId to, int n) {
    for (int i = 0; i < n; ++i) {
      const uint32_t flags = kSendTagged | (i % 3 == 0 ? kSendRemoteData : 0);
      ASSERT_EQ(ep.Send({.dest = to, .buf = out[i].data(), .len = out[i].size(),
                         .context = &ctx[i], .tag = 0x100u + i, .data = 0xd000u + i,
                         .flags = flags}),
                Result::kOk);
    }
  }
  // Every receive once, in order, with its bytes, tag and data.
  void Check(const std::vector<Completion>& got) {
    ASSERT_EQ(got.size(), in.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].context, &in[i]) << i;
      EXPECT_EQ(got[i].len, out[i].size()) << i;
      EXPECT_EQ(got[i].tag, 0x100u + i) << i;
      EXPECT_EQ((got[i].flags & kCompRemoteData) != 0, i % 3 == 0) << i;
      if (i % 3 == 0) {
        EXPECT_EQ(got[i].data, 0xd000u + i) << i;
      }
      EXPECT_EQ(testing::CheckPattern(static_cast<int>(i), absl::MakeSpan(in[i]).first(out[i].size())),
                -1)
          << i;
    }
  }
};

// Runs until every send and receive completed, without errors.
void Finish(Net& net, int n, std::vector<Completion>* sent, std::vector<Completion>* got) {
  std::vector<ErrorCompletion> err;
  ASSERT_TRUE(net.RunUntil(
      [&] {
        Drain(net.ep(0), sent, &err);
        Drain(net.ep(1), got, &err);
        return static_cast<int>(sent->size()) == n && static_cast<int>(got->size()) == n;
      },
      200'000))
      << sent->size() << " sent, " << got->size() << " received";
  EXPECT_TRUE(err.empty()) << err[0].message;
}

TEST(BundleTest, SmallMessagesQueuedTogetherGoInBundlesAndArriveInOrder) {
  Net net(NetOptions{});
  Traffic t(kMsgs);
  t.PostRecvs(net.ep(1), kMsgs);
  // Queued behind the handshake: they wait together.
  t.Send(net.ep(0), net.Peer(0, 1), kMsgs);
  std::vector<Completion> sent, got;
  Finish(net, kMsgs, &sent, &got);
  t.Check(got);
  const Counters& c = net.ep(0).counters();
  EXPECT_EQ(c.tx_bundled_msgs, static_cast<uint64_t>(kMsgs));
  // About 1500 / (40 + 48) messages a packet at MTU 1500.
  EXPECT_LE(c.tx_data_packets, 5u);
}

TEST(BundleTest, ALostBundleIsSentAgainAndEachMessageArrivesOnce) {
  Net net(NetOptions{});
  Traffic t(kMsgs);
  t.PostRecvs(net.ep(1), kMsgs);
  int bundles = 0;
  net.tap(1).set_filter([&](const wire::View* v) {
    const bool bundle = v != nullptr && v->common.type == wire::PacketType::kData &&
                        (v->msg.msg_flags & wire::kMsgBundle) != 0;
    return !bundle || ++bundles != 1;  // the first bundle is lost once
  });
  t.Send(net.ep(0), net.Peer(0, 1), kMsgs);
  std::vector<Completion> sent, got;
  Finish(net, kMsgs, &sent, &got);
  t.Check(got);
  EXPECT_GT(bundles, 1);
  const Counters& c = net.ep(0).counters();
  EXPECT_GT(c.retransmits_fast + c.retransmits_timeout, 0u);
}

TEST(BundleTest, ABundleHeldOutOfOrderIsTakenWhenTheGapFills) {
  Net net(NetOptions{});
  Traffic t(kMsgs);
  t.PostRecvs(net.ep(1), kMsgs);
  int data = 0;
  bool held_bundle = false;
  net.tap(1).set_filter([&](const wire::View* v) {
    if (v == nullptr || v->common.type != wire::PacketType::kData) return true;
    ++data;
    if (data > 1 && (v->msg.msg_flags & wire::kMsgBundle) != 0) held_bundle = true;
    return data != 1;  // the first DATA is lost: what follows is held
  });
  t.Send(net.ep(0), net.Peer(0, 1), kMsgs);
  std::vector<Completion> sent, got;
  Finish(net, kMsgs, &sent, &got);
  t.Check(got);
  EXPECT_TRUE(held_bundle);
}

// A net whose receiver (node 1) buffers at most 4 unexpected messages: it
// takes 4 of a bundle and refuses the 5th.
NetOptions RefusesAfterFour() {
  NetOptions o;
  o.tick_ns = 10'000;
  o.config.peer_timeout_ns = 50'000'000;
  o.configure = [](int node, EndpointConfig* c) {
    if (node == 1) c->max_unexpected_msgs = 4;
  };
  return o;
}

// Runs `steps` steps, draining ep(0)'s completions into sent and err.
void DrainSender(Net& net, uint64_t steps, std::vector<Completion>* sent,
                 std::vector<ErrorCompletion>* err) {
  net.RunUntil(
      [&] {
        Drain(net.ep(0), sent, err);
        return false;
      },
      steps);
}

TEST(BundleTest, ARefusedBundleDeliversWhatItTookOnceAndItsSendsCompleteEarly) {
  Net net(RefusesAfterFour());
  Traffic t(12);
  t.Send(net.ep(0), net.Peer(0, 1), 12);
  std::vector<Completion> sent, got;
  std::vector<ErrorCompletion> err;
  DrainSender(net, 3'000, &sent, &err);
  EXPECT_GT(net.ep(0).counters().tx_bundled_msgs, 0u);
  EXPECT_GT(net.ep(1).counters().rnr_sent, 0u);
  EXPECT_EQ(net.ep(1).counters().unexpected_depth, 4u);
  // The four it took completed at the sender on the refusal, in order.
  ASSERT_EQ(sent.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(sent[i].context, &t.ctx[i]);
  EXPECT_EQ(net.ep(0).peer_stats(net.Peer(0, 1))->queued_ops, 8u);
  t.PostRecvs(net.ep(1), 12);
  Finish(net, 12, &sent, &got);
  t.Check(got);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(sent[i].context, &t.ctx[i]) << "each send once";
  EXPECT_TRUE(err.empty());
}

// A receiver that dies while a bundle is refused part way: the messages it
// took completed at their sender on the refusal; the rest (what the
// bundle carried beyond them, and what waited behind it) fail once each,
// ETIMEDOUT, in order, none completed twice; the peer is reported dead.
TEST(BundleTest, ARefusedBundleWhoseReceiverDiesFailsTheRestOnce) {
  Net net(RefusesAfterFour());
  Traffic t(12);
  t.Send(net.ep(0), net.Peer(0, 1), 12);
  std::vector<Completion> sent;
  std::vector<ErrorCompletion> err;
  DrainSender(net, 300, &sent, &err);
  ASSERT_GT(net.ep(0).counters().tx_bundled_msgs, 0u);
  ASSERT_GT(net.ep(1).counters().rnr_sent, 0u);
  ASSERT_EQ(sent.size(), 4u) << "the four it took completed on the refusal";
  net.Kill(1);
  ASSERT_TRUE(net.RunUntil(
      [&] {
        Drain(net.ep(0), &sent, &err);
        return sent.size() + err.size() >= 12;
      },
      100'000))
      << sent.size() << " sent, " << err.size() << " failed: a send waits for ever";
  ASSERT_EQ(sent.size(), 4u);
  ASSERT_EQ(err.size(), 8u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(sent[i].context, &t.ctx[i]);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(err[i].op.context, &t.ctx[4 + i]) << "in order, each once";
    EXPECT_EQ(err[i].err, ETIMEDOUT) << err[i].message;
  }
  DrainSender(net, 2'000, &sent, &err);
  EXPECT_EQ(sent.size() + err.size(), 12u) << "nothing completes twice";
  PeerFailure f[2];
  ASSERT_EQ(net.ep(0).PollPeerFailures(f), 1u);
  EXPECT_EQ(f[0].err, ETIMEDOUT);
}

// The receiver counts a bundle as the messages it carries toward
// ack_every_packets: one packet of 16 messages is acknowledged at once, as
// 16 packets would be, not after the delayed ACK (here far beyond the run),
// so its sender's completions (and its next window) do not wait. Fewer
// messages wait for the delayed ACK as one packet does.
TEST(BundleTest, ABundleOfAckEveryMessagesIsAcknowledgedAtOnce) {
  for (const int n : {16, 15}) {
    SCOPED_TRACE(n);
    NetOptions o;
    o.mtu = 9000;  // one bundle holds them all
    o.config.ack_every_packets = 16;
    o.config.ack_delay_ns = 1'000'000'000;
    o.config.rto_initial_ns = o.config.rto_max_ns = 2'000'000'000;
    Net net(o);
    Traffic t(n);
    t.PostRecvs(net.ep(1), n);
    t.Send(net.ep(0), net.Peer(0, 1), n);
    std::vector<Completion> sent, got;
    std::vector<ErrorCompletion> err;
    const bool done = net.RunUntil(
        [&] {
          Drain(net.ep(0), &sent, &err);
          Drain(net.ep(1), &got, &err);
          return static_cast<int>(sent.size()) == n;
        },
        50'000);  // 50 ms of the test clock
    EXPECT_EQ(static_cast<int>(got.size()), n);
    EXPECT_EQ(net.ep(0).counters().tx_data_packets, 1u);
    EXPECT_EQ(net.ep(0).counters().tx_bundled_msgs, static_cast<uint64_t>(n));
    if (n >= 16) {
      EXPECT_TRUE(done) << sent.size() << " of " << n << " sends completed";
      EXPECT_EQ(net.ep(1).peer_stats(net.Peer(1, 0))->unacked_packets, 0u);
    } else {
      EXPECT_FALSE(done) << "fewer messages than ack_every_packets wait for the delayed ACK";
      EXPECT_EQ(net.ep(1).peer_stats(net.Peer(1, 0))->unacked_packets, static_cast<uint32_t>(n));
    }
    EXPECT_EQ(net.ep(0).counters().retransmits_timeout, 0u);
    EXPECT_TRUE(err.empty());
  }
}

TEST(BundleTest, NoBundlesWhereRefusedSendsMayBeGivenUp) {
  NetOptions o;
  o.config.rnr_give_up_ns = 1'000'000'000;
  Net net(o);
  Traffic t(kMsgs);
  t.PostRecvs(net.ep(1), kMsgs);
  t.Send(net.ep(0), net.Peer(0, 1), kMsgs);
  std::vector<Completion> sent, got;
  Finish(net, kMsgs, &sent, &got);
  t.Check(got);
  EXPECT_EQ(net.ep(0).counters().tx_bundled_msgs, 0u);
  EXPECT_GE(net.ep(0).counters().tx_data_packets, static_cast<uint64_t>(kMsgs));
}

}  // namespace
}  // namespace bypass::rdm
