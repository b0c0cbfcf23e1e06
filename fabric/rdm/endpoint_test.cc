// Messages and tagged messages between endpoints on a clean loopback
// segment: matching, queues, completions, inject, truncation, large
// messages, sharing one queue, and the concrete-queue instantiation.
#include "fabric/rdm/rdm.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "driver/loopback/loopback_device.h"
#include "driver/uri.h"
#include "fabric/rdm/test_util.h"
#include "gtest/gtest.h"

namespace bypass::rdm {
namespace {

using testing::Drain;
using testing::Net;
using testing::NetOptions;

constexpr uint64_t kSteps = 20'000;

// Waits until ep(i) has n completions (collected into *out) and no errors.
bool WaitOk(Net& net, int i, size_t n, std::vector<Completion>* out) {
  std::vector<ErrorCompletion> errs;
  const bool done = net.RunUntil(
      [&] {
        Drain(net.ep(i), out, &errs);
        return out->size() >= n || !errs.empty();
      },
      kSteps);
  for (const ErrorCompletion& e : errs) ADD_FAILURE() << "error completion: " << e.message;
  return done && errs.empty();
}

TEST(EndpointTest, SendRecvBothWays) {
  Net net(NetOptions{});
  const PeerId to_b = net.Peer(0, 1);
  const PeerId to_a = net.Peer(1, 0);
  char rbuf_a[64] = {}, rbuf_b[64] = {};
  int ctx_ra, ctx_rb, ctx_sa, ctx_sb;
  ASSERT_EQ(net.ep(1).PostRecv({.buf = rbuf_b, .len = sizeof(rbuf_b), .context = &ctx_rb}),
            Result::kOk);
  ASSERT_EQ(net.ep(0).PostRecv({.buf = rbuf_a, .len = sizeof(rbuf_a), .context = &ctx_ra}),
            Result::kOk);
  const char hello[] = "hello from a";
  const char reply[] = "and back from b";
  ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = hello, .len = sizeof(hello), .context = &ctx_sa}),
            Result::kOk);
  ASSERT_EQ(net.ep(1).Send({.dest = to_a, .buf = reply, .len = sizeof(reply), .context = &ctx_sb}),
            Result::kOk);
  std::vector<Completion> a, b;
  ASSERT_TRUE(WaitOk(net, 0, 2, &a));
  ASSERT_TRUE(WaitOk(net, 1, 2, &b));
  EXPECT_STREQ(rbuf_b, hello);
  EXPECT_STREQ(rbuf_a, reply);
  for (const Completion& c : b) {
    if (c.context == &ctx_rb) {
      EXPECT_EQ(c.flags, kCompRecv | kCompMsg);
      EXPECT_EQ(c.len, sizeof(hello));
      EXPECT_EQ(c.buf, rbuf_b);
      EXPECT_EQ(c.source, to_a) << "the source is b's PeerId for a";
    } else {
      EXPECT_EQ(c.context, &ctx_sb);
      EXPECT_EQ(c.flags, kCompSend | kCompMsg);
      EXPECT_EQ(c.len, sizeof(reply));
    }
  }
  EXPECT_EQ(net.ep(0).counters().handshakes, 1u);
  EXPECT_EQ(net.ep(1).counters().handshakes, 1u);
  EXPECT_TRUE(net.ep(0).peer_stats(to_b)->established);
  EXPECT_EQ(net.ep(0).peer_stats(to_b)->incarnation, net.ep(1).address().incarnation);
}

TEST(EndpointTest, LearnedPeerCanBeAnsweredAndAddressIsReported) {
  Net net(NetOptions{});
  const PeerId to_b = net.Peer(0, 1);
  uint8_t buf[16];
  ASSERT_EQ(net.ep(1).PostRecv({.buf = buf, .len = sizeof(buf)}), Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = "x", .len = 1}), Result::kOk);
  std::vector<Completion> got;
  ASSERT_TRUE(WaitOk(net, 1, 1, &got));
  // b never inserted a; it answers the source its completion names.
  const PeerId a = got[0].source;
  const std::optional<Address> addr = net.ep(1).PeerAddress(a);
  ASSERT_TRUE(addr.has_value());
  EXPECT_EQ(*addr, net.ep(0).address());
  ASSERT_EQ(net.ep(0).PostRecv({.buf = buf, .len = sizeof(buf)}), Result::kOk);
  ASSERT_EQ(net.ep(1).Send({.dest = a, .buf = "y", .len = 1}), Result::kOk);
  std::vector<Completion> back;
  ASSERT_TRUE(WaitOk(net, 0, 2, &back));
}

TEST(EndpointTest, TaggedMatchingWithIgnoreMaskAndDirectedReceive) {
  NetOptions o;
  o.nodes = 3;
  Net net(o);
  const PeerId a_to_c = net.Peer(0, 2);
  const PeerId b_to_c = net.Peer(1, 2);
  const PeerId c_to_a = net.Peer(2, 0);
  const PeerId c_to_b = net.Peer(2, 1);
  uint64_t r1 = 0, r2 = 0, r3 = 0, r4 = 0;
  // r1: only from b, tag 0x100 exactly. r2: any source, tags 0x2?? (low byte ignored).
  // r3: untagged: takes no tagged message. r4: any tag from a.
  ASSERT_EQ(
      net.ep(2).PostRecv(
          {.source = c_to_b, .buf = &r1, .len = 8, .context = &r1, .tagged = true, .tag = 0x100}),
      Result::kOk);
  ASSERT_EQ(
      net.ep(2).PostRecv(
          {.buf = &r2, .len = 8, .context = &r2, .tagged = true, .tag = 0x200, .ignore = 0xff}),
      Result::kOk);
  ASSERT_EQ(net.ep(2).PostRecv({.buf = &r3, .len = 8, .context = &r3}), Result::kOk);
  ASSERT_EQ(net.ep(2).PostRecv({.source = c_to_a,
                                .buf = &r4,
                                .len = 8,
                                .context = &r4,
                                .tagged = true,
                                .ignore = ~uint64_t{0}}),
            Result::kOk);
  const uint64_t m_a100 = 1, m_b2ab = 2, m_b100 = 3, m_a_untagged = 4;
  // a sends tag 0x100 first: r1 wants b only, so it lands in r4 (any tag from a).
  ASSERT_EQ(net.ep(0).Send(
                {.dest = a_to_c, .buf = &m_a100, .len = 8, .tag = 0x100, .flags = kSendTagged}),
            Result::kOk);
  ASSERT_EQ(net.ep(1).Send(
                {.dest = b_to_c, .buf = &m_b2ab, .len = 8, .tag = 0x2ab, .flags = kSendTagged}),
            Result::kOk);
  ASSERT_EQ(net.ep(1).Send(
                {.dest = b_to_c, .buf = &m_b100, .len = 8, .tag = 0x100, .flags = kSendTagged}),
            Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = a_to_c, .buf = &m_a_untagged, .len = 8}), Result::kOk);
  std::vector<Completion> got;
  ASSERT_TRUE(WaitOk(net, 2, 4, &got));
  EXPECT_EQ(r4, m_a100);
  EXPECT_EQ(r2, m_b2ab);
  EXPECT_EQ(r1, m_b100);
  EXPECT_EQ(r3, m_a_untagged);
  for (const Completion& c : got) {
    if (c.context == &r2) {
      EXPECT_EQ(c.tag, 0x2abu) << "the completion carries the message's tag";
      EXPECT_EQ(c.flags, kCompRecv | kCompMsg | kCompTagged);
      EXPECT_EQ(c.source, c_to_b);
    }
    if (c.context == &r3) {
      EXPECT_EQ(c.flags, kCompRecv | kCompMsg);
    }
  }
}

TEST(EndpointTest, RemoteCqDataAndInject) {
  Net net(NetOptions{});
  const PeerId to_b = net.Peer(0, 1);
  char r1[32] = {}, r2[32] = {};
  ASSERT_EQ(net.ep(1).PostRecv({.buf = r1, .len = sizeof(r1), .context = r1}), Result::kOk);
  ASSERT_EQ(net.ep(1).PostRecv({.buf = r2, .len = sizeof(r2), .context = r2}), Result::kOk);
  char msg[32];
  std::strcpy(msg, "injected");
  ASSERT_EQ(net.ep(0).Send({.dest = to_b,
                            .buf = msg,
                            .len = 9,
                            .data = 0xfeedface,
                            .flags = kSendInject | kSendRemoteData}),
            Result::kOk);
  std::strcpy(msg, "clobbered");  // inject copied it: the buffer is free again
  ASSERT_EQ(
      net.ep(0).Send({.dest = to_b, .buf = msg, .len = 10, .data = 7, .flags = kSendRemoteData}),
      Result::kOk);
  std::vector<Completion> got;
  ASSERT_TRUE(WaitOk(net, 1, 2, &got));
  EXPECT_STREQ(r1, "injected");
  EXPECT_STREQ(r2, "clobbered");
  EXPECT_EQ(got[0].flags, kCompRecv | kCompMsg | kCompRemoteData);
  EXPECT_EQ(got[0].data, 0xfeedfaceu);
  EXPECT_EQ(got[1].data, 7u);
  // The sender sees one completion: the inject has none.
  std::vector<Completion> sent;
  ASSERT_TRUE(WaitOk(net, 0, 1, &sent));
  net.RunUntil([] { return false; }, 100);
  Drain(net.ep(0), &sent, nullptr);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].len, 10u);
  EXPECT_EQ(net.ep(0).Send({.dest = to_b,
                            .buf = msg,
                            .len = net.ep(0).config().inject_size + 1,
                            .flags = kSendInject}),
            Result::kTooLong);
}

TEST(EndpointTest, BufferedSendCompletesAtOnceAndArrivesIntact) {
  Net net(NetOptions{});
  const PeerId to_b = net.Peer(0, 1);
  uint8_t msg[200];
  for (size_t i = 0; i < sizeof(msg); ++i) msg[i] = static_cast<uint8_t>(i * 7);
  const std::vector<uint8_t> sent(msg, msg + sizeof(msg));
  int ctx;
  ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = msg, .len = sizeof(msg), .context = &ctx,
                            .tag = 5, .flags = kSendBuffered | kSendTagged}),
            Result::kOk);
  // Its completion is there before any progress, and the buffer is free.
  Completion c;
  ASSERT_EQ(net.ep(0).PollCompletions({&c, 1}), 1u);
  EXPECT_EQ(c.context, &ctx);
  EXPECT_EQ(c.flags, kCompSend | kCompMsg | kCompTagged);
  EXPECT_EQ(c.len, sizeof(msg));
  std::memset(msg, 0xee, sizeof(msg));
  uint8_t rbuf[256] = {};
  ASSERT_EQ(net.ep(1).PostRecv({.buf = rbuf, .len = sizeof(rbuf), .tagged = true, .tag = 5}),
            Result::kOk);
  std::vector<Completion> got;
  ASSERT_TRUE(WaitOk(net, 1, 1, &got));
  EXPECT_EQ(got[0].len, sizeof(msg));
  EXPECT_EQ(std::vector<uint8_t>(rbuf, rbuf + sizeof(msg)), sent);
  // Acknowledged later without a second completion; too long is refused.
  for (int i = 0; i < 100; ++i) net.Step();
  EXPECT_EQ(net.ep(0).PollCompletions({&c, 1}), 0u);
  uint8_t big[300] = {};
  EXPECT_EQ(net.ep(0).Send({.dest = to_b, .buf = big, .len = sizeof(big), .flags = kSendBuffered}),
            Result::kTooLong)
      << "more than inject_size (256) cannot be buffered";
}

// The handshake first, both ways: a message each way with kSendAckNow,
// both received and both sends complete.
bool HandshakeBothWays(Net& net, PeerId to_b, PeerId to_a) {
  static uint8_t buf[8], rbuf[2][64];
  std::vector<Completion> a, b;
  if (net.ep(1).PostRecv({.buf = rbuf[1], .len = sizeof(rbuf[1])}) != Result::kOk ||
      net.ep(0).PostRecv({.buf = rbuf[0], .len = sizeof(rbuf[0])}) != Result::kOk ||
      net.ep(0).Send({.dest = to_b, .buf = buf, .len = 8, .flags = kSendAckNow}) != Result::kOk ||
      net.ep(1).Send({.dest = to_a, .buf = buf, .len = 8, .flags = kSendAckNow}) != Result::kOk) {
    return false;
  }
  return WaitOk(net, 0, 2, &a) && WaitOk(net, 1, 2, &b);
}

// With delayed ACKs that would take a second, a send's completion waits for
// the next packet back; with kSendAckNow the receiver acknowledges in the
// pass that consumed it.
TEST(EndpointTest, AckNowIsAcknowledgedInTheReceivingPass) {
  NetOptions o;
  o.config.ack_delay_ns = 1'000'000'000;
  Net net(o);
  const PeerId to_b = net.Peer(0, 1);
  const PeerId to_a = net.Peer(1, 0);
  uint8_t buf[64] = {}, rbuf[64];
  std::vector<Completion> a, b;
  ASSERT_TRUE(HandshakeBothWays(net, to_b, to_a));

  for (const bool ack_now : {false, true}) {
    SCOPED_TRACE(ack_now ? "kSendAckNow" : "no flag");
    a.clear();
    b.clear();
    ASSERT_EQ(net.ep(1).PostRecv({.buf = rbuf, .len = sizeof(rbuf)}), Result::kOk);
    const uint64_t acks_before = net.ep(1).counters().tx_acks;
    ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = buf, .len = sizeof(buf),
                              .flags = ack_now ? kSendAckNow : 0u}),
              Result::kOk);
    ASSERT_TRUE(WaitOk(net, 1, 1, &b));  // b consumed it in the last step
    EXPECT_EQ(net.ep(1).counters().tx_acks - acks_before, ack_now ? 1u : 0u);
    for (int i = 0; i < 3; ++i) net.Step();
    std::vector<ErrorCompletion> errs;
    testing::Drain(net.ep(0), &a, &errs);
    EXPECT_EQ(a.size(), ack_now ? 1u : 0u) << "the send's completion";
    if (!ack_now) {  // the next packet back carries it
      ASSERT_EQ(net.ep(0).PostRecv({.buf = rbuf, .len = sizeof(rbuf)}), Result::kOk);
      ASSERT_EQ(net.ep(1).Send({.dest = to_a, .buf = buf, .len = 8, .flags = kSendInject}),
                Result::kOk);
      ASSERT_TRUE(WaitOk(net, 0, 2, &a));
      EXPECT_EQ(net.ep(1).counters().tx_acks - acks_before, 0u) << "no standalone ACK";
    }
  }
}

// With defer_requested_acks (the fi facade's setting) the ACK a
// kSendAckNow send waits for is not sent in the pass that consumed the
// message: the receiver's reply carries it (no standalone ACK at all), also
// after a pass in between (fi_pingpong reads its transmit queue, then its
// receive queue, then replies), or, when it does not reply, its first call
// after deferred_ack_hold_ns sends it. Delayed ACKs are off (a second), so
// nothing else could send it.
TEST(EndpointTest, DeferredAckRidesOnTheReplyOrLeavesAtTheNextCall) {
  NetOptions o;
  o.config.ack_delay_ns = 1'000'000'000;
  o.config.defer_requested_acks = true;
  Net net(o);
  const PeerId to_b = net.Peer(0, 1);
  const PeerId to_a = net.Peer(1, 0);
  uint8_t buf[64] = {}, rbuf[64];
  std::vector<Completion> a, b;
  ASSERT_TRUE(HandshakeBothWays(net, to_b, to_a));
  for (int i = 0; i < 3; ++i) net.Step();

  for (const bool reply : {true, false}) {
    SCOPED_TRACE(reply ? "the reply carries it" : "the next call sends it");
    a.clear();
    b.clear();
    ASSERT_EQ(net.ep(1).PostRecv({.buf = rbuf, .len = sizeof(rbuf)}), Result::kOk);
    ASSERT_EQ(net.ep(0).PostRecv({.buf = rbuf, .len = sizeof(rbuf)}), Result::kOk);
    const uint64_t acks_b = net.ep(1).counters().tx_acks;
    ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = buf, .len = 8, .flags = kSendAckNow}),
              Result::kOk);
    ASSERT_TRUE(WaitOk(net, 1, 1, &b));  // b consumed it in the last step
    EXPECT_EQ(net.ep(1).counters().tx_acks - acks_b, 0u) << "not in the receiving pass";
    EXPECT_TRUE(net.ep(1).HasDeferredAcks());
    std::vector<ErrorCompletion> errs;
    net.ep(1).Progress();  // a pass within the hold: a queue read before the reply
    EXPECT_EQ(net.ep(1).counters().tx_acks - acks_b, 0u) << "held for a reply";
    EXPECT_TRUE(net.ep(1).HasDeferredAcks());
    if (reply) {
      ASSERT_EQ(net.ep(1).Send({.dest = to_a, .buf = buf, .len = 8, .flags = kSendAckNow}),
                Result::kOk);
      EXPECT_FALSE(net.ep(1).HasDeferredAcks()) << "the reply carried it";
      ASSERT_TRUE(WaitOk(net, 0, 2, &a)) << "a's send completes with the reply";
      ASSERT_TRUE(WaitOk(net, 1, 1, &b)) << "b's reply completes on a's next call";
      EXPECT_EQ(net.ep(1).counters().tx_acks - acks_b, 0u) << "no standalone ACK from b";
    } else {
      testing::Drain(net.ep(0), &a, &errs);
      EXPECT_TRUE(a.empty()) << "not acknowledged yet";
      net.clock().Advance(o.config.deferred_ack_hold_ns);
      net.ep(1).Progress();  // b's next call after the hold
      EXPECT_EQ(net.ep(1).counters().tx_acks - acks_b, 1u);
      EXPECT_FALSE(net.ep(1).HasDeferredAcks());
      ASSERT_TRUE(WaitOk(net, 0, 1, &a)) << "the send's completion";
    }
  }
}

TEST(EndpointTest, ZeroLengthAndTruncation) {
  Net net(NetOptions{});
  const PeerId to_b = net.Peer(0, 1);
  char small[4];
  int z;
  ASSERT_EQ(net.ep(1).PostRecv({.buf = nullptr, .len = 0, .context = &z}), Result::kOk);
  ASSERT_EQ(net.ep(1).PostRecv({.buf = small, .len = sizeof(small), .context = small}),
            Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = nullptr, .len = 0}), Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = "0123456789", .len = 10}), Result::kOk);
  std::vector<Completion> ok;
  std::vector<ErrorCompletion> err;
  ASSERT_TRUE(net.RunUntil(
      [&] {
        Drain(net.ep(1), &ok, &err);
        return ok.size() + err.size() >= 2;
      },
      kSteps));
  ASSERT_EQ(ok.size(), 1u);
  EXPECT_EQ(ok[0].context, &z);
  EXPECT_EQ(ok[0].len, 0u);
  ASSERT_EQ(err.size(), 1u);
  EXPECT_EQ(err[0].err, EMSGSIZE);
  EXPECT_EQ(err[0].op.context, small);
  EXPECT_EQ(err[0].op.len, 4u);
  EXPECT_EQ(err[0].olen, 6u);
  EXPECT_EQ(std::string(small, 4), "0123");
  EXPECT_NE(std::string(err[0].message).find("truncated"), std::string::npos) << err[0].message;
  EXPECT_EQ(net.ep(1).counters().truncated, 1u);
}

TEST(EndpointTest, MultiMegabyteMessagesInOrder) {
  NetOptions o;
  o.config.max_msg_size = 8u << 20;
  Net net(o);
  const PeerId to_b = net.Peer(0, 1);
  const size_t sizes[] = {3u << 20, 1, 1400, 1u << 20};
  std::vector<std::vector<uint8_t>> out, in;
  in.reserve(std::size(sizes));  // their addresses are the contexts
  for (size_t i = 0; i < std::size(sizes); ++i) {
    out.emplace_back(sizes[i]);
    testing::FillPattern(i, absl::MakeSpan(out.back()));
    in.emplace_back(sizes[i]);
    ASSERT_EQ(net.ep(1).PostRecv({.buf = in[i].data(), .len = in[i].size(), .context = &in[i]}),
              Result::kOk);
  }
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = out[i].data(), .len = out[i].size()}),
              Result::kOk);
  }
  std::vector<Completion> got;
  ASSERT_TRUE(WaitOk(net, 1, out.size(), &got));
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].context, &in[i]) << "send-after-send order";
    EXPECT_EQ(got[i].len, sizes[i]);
    EXPECT_EQ(testing::CheckPattern(i, in[i]), -1) << "message " << i;
  }
  EXPECT_EQ(net.ep(0).counters().retransmits_fast + net.ep(0).counters().retransmits_timeout, 0u);
  EXPECT_GT(net.ep(0).counters().window_stalls + net.ep(0).counters().cwnd_stalls, 0u)
      << "3 MiB is more than one window";
}

TEST(EndpointTest, UnexpectedMessagesCompleteOrPartialAreMatchedLater) {
  NetOptions o;
  Net net(o);
  const PeerId to_b = net.Peer(0, 1);
  std::vector<uint8_t> big(200'000), small(100);
  testing::FillPattern(1, absl::MakeSpan(big));
  testing::FillPattern(2, absl::MakeSpan(small));
  ASSERT_EQ(
      net.ep(0).Send(
          {.dest = to_b, .buf = small.data(), .len = small.size(), .tag = 5, .flags = kSendTagged}),
      Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = big.data(), .len = big.size()}), Result::kOk);
  // The small one arrives whole; the big one is part-way when b posts.
  ASSERT_TRUE(net.RunUntil([&] { return net.ep(1).counters().unexpected_depth == 2; }, kSteps));
  EXPECT_EQ(net.ep(1).counters().unexpected_msgs, 2u);
  std::vector<uint8_t> in_big(big.size()), in_small(small.size());
  ASSERT_EQ(net.ep(1).PostRecv({.buf = in_big.data(), .len = in_big.size(), .context = &in_big}),
            Result::kOk);
  ASSERT_EQ(net.ep(1).PostRecv({.buf = in_small.data(),
                                .len = in_small.size(),
                                .context = &in_small,
                                .tagged = true,
                                .tag = 5}),
            Result::kOk);
  std::vector<Completion> got;
  ASSERT_TRUE(WaitOk(net, 1, 2, &got));
  EXPECT_EQ(in_big, big);
  EXPECT_EQ(in_small, small);
  EXPECT_EQ(net.ep(1).counters().unexpected_depth, 0u);
  EXPECT_EQ(net.ep(1).counters().unexpected_bytes, 0u);
}

TEST(EndpointTest, SendToSelf) {
  Net net(NetOptions{});
  const PeerId self = net.Peer(0, 0);
  uint32_t in = 0;
  const uint32_t out = 0xabcd;
  ASSERT_EQ(net.ep(0).PostRecv({.buf = &in, .len = 4}), Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = self, .buf = &out, .len = 4}), Result::kOk);
  std::vector<Completion> got;
  ASSERT_TRUE(WaitOk(net, 0, 2, &got));
  EXPECT_EQ(in, out);
}

TEST(EndpointTest, BadArgumentsAndFullQueues) {
  NetOptions o;
  o.config.max_send_ops = 2;
  o.config.max_posted_recvs = 2;
  Net net(o);
  const PeerId to_b = net.Peer(0, 1);
  EXPECT_EQ(net.ep(0).Send({.dest = PeerId{77}, .buf = "x", .len = 1}), Result::kInvalid);
  EXPECT_EQ(net.ep(0).Send({.dest = to_b, .buf = nullptr, .len = 1}), Result::kInvalid);
  EXPECT_EQ(net.ep(0).Send(
                {.dest = to_b, .buf = "x", .len = net.ep(0).config().max_msg_size + 1}),
            Result::kTooLong);
  EXPECT_EQ(net.ep(0).PostRecv({.source = PeerId{9}, .buf = nullptr, .len = 0}), Result::kInvalid);
  // Two send slots: the third send finds none until progress frees one.
  EXPECT_EQ(net.ep(0).Send({.dest = to_b, .buf = "a", .len = 1}), Result::kOk);
  EXPECT_EQ(net.ep(0).Send({.dest = to_b, .buf = "b", .len = 1}), Result::kOk);
  EXPECT_EQ(net.ep(0).Send({.dest = to_b, .buf = "c", .len = 1}), Result::kAgain);
  char r[3][4];
  EXPECT_EQ(net.ep(1).PostRecv({.buf = r[0], .len = 4}), Result::kOk);
  EXPECT_EQ(net.ep(1).PostRecv({.buf = r[1], .len = 4}), Result::kOk);
  EXPECT_EQ(net.ep(1).PostRecv({.buf = r[2], .len = 4}), Result::kAgain);
  std::vector<Completion> got;
  ASSERT_TRUE(WaitOk(net, 0, 2, &got));
  EXPECT_EQ(net.ep(0).Send({.dest = to_b, .buf = "c", .len = 1}), Result::kOk);
}

TEST(EndpointTest, CompletionQueueRoomIsReservedAtPost) {
  NetOptions o;
  o.config.max_send_ops = 4;
  o.config.max_posted_recvs = 1;  // completion queue: 5 entries
  Net net(o);
  const PeerId self = net.Peer(0, 0);
  char r;
  ASSERT_EQ(net.ep(0).PostRecv({.buf = &r, .len = 1}), Result::kOk);
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(net.ep(0).Send({.dest = self, .buf = "z", .len = 1}), Result::kOk);
  }
  // Let everything complete without reading: slots free, the queue does not.
  net.RunUntil([] { return false; }, 2000);
  EXPECT_EQ(net.ep(0).Send({.dest = self, .buf = "z", .len = 1}), Result::kAgain)
      << "unread completions hold their entries";
  std::vector<Completion> got;
  Drain(net.ep(0), &got, nullptr);
  EXPECT_EQ(got.size(), 5u);
  EXPECT_EQ(net.ep(0).Send({.dest = self, .buf = "z", .len = 1}), Result::kOk);
}

// Two endpoints on one device queue (software demux) and a third steered to
// a queue of its own, all reached from another device.
TEST(EndpointTest, SharedQueueDemuxAndSteeredQueue) {
  const std::string seg = testing::UniqueSegment();
  driver::DeviceOptions two_queues;
  two_queues.queues = 2;
  auto a = *driver::loopback::Open(*driver::DeviceUri::Parse("loopback:" + seg), {});
  auto b = *driver::loopback::Open(*driver::DeviceUri::Parse("loopback:" + seg), two_queues);
  driver::ManualClock clock;
  Port pa(a->queue(0), a->info());
  Port pb0(b->queue(0), b->info());
  Port pb1(b->queue(1), b->info());
  ASSERT_TRUE(b->SteerUdpPort(7003, 1).ok());
  auto ea = *Endpoint::Create(pa, clock, {.udp_port = 7000});
  auto eb1 = *Endpoint::Create(pb0, clock, {.udp_port = 7001});
  auto eb2 = *Endpoint::Create(pb0, clock, {.udp_port = 7002});
  auto eb3 = *Endpoint::Create(pb1, clock, {.udp_port = 7003});
  EXPECT_FALSE(Endpoint::Create(pb0, clock, {.udp_port = 7001}).ok()) << "port taken";
  EXPECT_EQ(pb0.endpoints(), 2u);
  Endpoint* rx[] = {eb1.get(), eb2.get(), eb3.get()};
  uint32_t got[3] = {};
  const uint32_t sent[3] = {100, 101, 102};  // valid until the sends complete
  for (uint32_t i = 0; i < 3; ++i) {
    ASSERT_EQ(rx[i]->PostRecv({.buf = &got[i], .len = 4}), Result::kOk);
    const PeerId p = *ea->InsertPeer(rx[i]->address());
    ASSERT_EQ(ea->Send({.dest = p, .buf = &sent[i], .len = 4}), Result::kOk);
  }
  for (int s = 0; s < 2000 && (got[0] == 0 || got[1] == 0 || got[2] == 0); ++s) {
    ea->Progress();
    for (Endpoint* e : rx) e->Progress();
    clock.Advance(1000);
  }
  EXPECT_EQ(got[0], 100u);
  EXPECT_EQ(got[1], 101u);
  EXPECT_EQ(got[2], 102u);
  EXPECT_EQ(pb0.counters().no_endpoint, 0u);
  EXPECT_GT(pb1.counters().rx_packets, 0u) << "the steered endpoint's traffic used queue 1";
}

TEST(EndpointTest, BadConfigurationsSayWhatIsWrong) {
  const std::string seg = testing::UniqueSegment();
  driver::DeviceOptions small_mtu;
  small_mtu.mtu = 150;
  auto dev = *driver::loopback::Open(*driver::DeviceUri::Parse("loopback:" + seg), {});
  auto tiny = *driver::loopback::Open(*driver::DeviceUri::Parse("loopback:" + seg), small_mtu);
  driver::ManualClock clock;
  Port port(dev->queue(0), dev->info());
  Port tiny_port(tiny->queue(0), tiny->info());
  const auto error = [&](Port& p, EndpointConfig c) {
    absl::StatusOr<std::unique_ptr<Endpoint>> ep = Endpoint::Create(p, clock, c);
    EXPECT_FALSE(ep.ok());
    return std::string(ep.status().message());
  };
  EXPECT_NE(error(port, {}).find("udp_port"), std::string::npos);
  EXPECT_NE(error(port, {.udp_port = 1, .window_packets = 300}).find("window_packets"),
            std::string::npos);
  EXPECT_NE(error(port, {.udp_port = 1, .rto_min_ns = 10, .rto_max_ns = 5}).find("rto_min_ns"),
            std::string::npos);
  EXPECT_NE(error(port, {.udp_port = 1, .peer_timeout_ns = 1'000'000}).find("rnr_retry_max_ns"),
            std::string::npos);
  EXPECT_NE(error(tiny_port, {.udp_port = 1}).find("MTU 150"), std::string::npos);
  auto ok = Endpoint::Create(port, clock, {.udp_port = 1, .max_peers = 1});
  ASSERT_TRUE(ok.ok()) << ok.status();
  Address other = (*ok)->address();
  other.udp_port = 2;
  EXPECT_TRUE((*ok)->InsertPeer(other).ok());
  other.udp_port = 3;
  const absl::StatusOr<PeerId> full = (*ok)->InsertPeer(other);
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(std::string(full.status().message()).find("max_peers=1"), std::string::npos);
  other.ip = driver::Ipv4Address{0};
  EXPECT_EQ((*ok)->InsertPeer(other).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE((*ok)->address().ToString().find(":1/"), std::string::npos);
}

// Received packets the engine is done with become the endpoint's TX
// buffers: a ping-pong allocates nothing from the pool once warm, and the
// frames built into reused buffers are intact.
TEST(EndpointTest, PingPongReusesReceivedBuffersForSending) {
  Net net(NetOptions{});
  const PeerId to_b = net.Peer(0, 1);
  const PeerId to_a = net.Peer(1, 0);
  uint64_t alloc_a = 0, alloc_b = 0;
  for (uint64_t i = 0; i < 200; ++i) {
    if (i == 20) {
      alloc_a = net.tap(0).alloc_calls();
      alloc_b = net.tap(1).alloc_calls();
    }
    uint64_t ping = i, pong = ~i, got_b = 0, got_a = 0;
    ASSERT_EQ(net.ep(1).PostRecv({.buf = &got_b, .len = 8}), Result::kOk);
    ASSERT_EQ(net.ep(0).PostRecv({.buf = &got_a, .len = 8}), Result::kOk);
    ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = &ping, .len = 8, .flags = kSendInject}),
              Result::kOk);
    std::vector<Completion> b, a;
    ASSERT_TRUE(WaitOk(net, 1, 1, &b));
    ASSERT_EQ(got_b, i);
    ASSERT_EQ(net.ep(1).Send({.dest = to_a, .buf = &pong, .len = 8, .flags = kSendInject}),
              Result::kOk);
    ASSERT_TRUE(WaitOk(net, 0, 1, &a));
    ASSERT_EQ(got_a, ~i);
  }
  EXPECT_EQ(net.tap(0).alloc_calls(), alloc_a);
  EXPECT_EQ(net.tap(1).alloc_calls(), alloc_b);
  EXPECT_EQ(net.ep(0).counters().checksum_dropped + net.ep(1).counters().checksum_dropped, 0u);
}

}  // namespace
}  // namespace bypass::rdm
