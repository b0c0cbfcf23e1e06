// Rendezvous: messages above EndpointConfig::rendezvous_threshold go as a
// request to send that the receiver answers by pulling the bytes into its
// receive. At and around the threshold, receive posted before and after,
// tagged, truncated, 1 GiB, and a peer restarting in the middle.
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fabric/rdm/rdm.h"
#include "fabric/rdm/test_util.h"
#include "gtest/gtest.h"

namespace bypass::rdm {
namespace {

using testing::Drain;
using testing::Net;
using testing::NetOptions;
using testing::RunTransfer;
using testing::Transfer;

constexpr uint64_t kThreshold = 16 * 1024;

NetOptions Options() {
  NetOptions o;
  o.config.rendezvous_threshold = kThreshold;
  o.config.peer_timeout_ns = 20'000'000;
  return o;
}

TEST(RendezvousTest, AroundTheThresholdPostedFirst) {
  for (const uint64_t size : {kThreshold - 1, kThreshold, kThreshold + 1, 3 * kThreshold + 7}) {
    Net net(Options());
    const uint64_t before = net.ep(0).counters().rendezvous_sent;
    ASSERT_GT(testing::TransferAndVerify(net, 0, 1, {size}, 200'000), 0) << size;
    const bool rndv = size > kThreshold;
    EXPECT_EQ(net.ep(0).counters().rendezvous_sent - before, rndv ? 1u : 0u) << size;
    EXPECT_EQ(net.ep(1).counters().rendezvous_pulled, rndv ? 1u : 0u) << size;
  }
}

// kSendAckNow on a rendezvous message: the last pulled packet asks for an
// ACK at once, so the sender's completion follows the receiver's by the
// ACK's way back, not by a delayed ACK (a second here) or a tail probe.
TEST(RendezvousTest, AckNowCompletesTheSenderWithoutDelayedAcks) {
  for (const bool ack_now : {false, true}) {
    SCOPED_TRACE(ack_now ? "kSendAckNow" : "no flag");
    NetOptions o = Options();
    o.config.ack_delay_ns = 1'000'000'000;
    o.config.peer_timeout_ns = 4'000'000'000;
    // The packet that fills a congestion window asks for an ACK too
    // (PROTOCOL.md, "Congestion control"), so whether the last one does
    // would depend on the window: the credit alone keeps "no flag" exact.
    o.config.congestion_control = false;
    Net net(o);
    const PeerId to_b = net.Peer(0, 1);
    std::vector<uint8_t> out(3 * kThreshold + 5), in(out.size());
    testing::FillPattern(3, absl::MakeSpan(out));
    ASSERT_EQ(net.ep(1).PostRecv({.buf = in.data(), .len = in.size()}), Result::kOk);
    ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = out.data(), .len = out.size(),
                              .flags = ack_now ? kSendAckNow : 0u}),
              Result::kOk);
    Transfer t;
    ASSERT_TRUE(RunTransfer(net, t, 0, 1));
    EXPECT_EQ(testing::CheckPattern(3, absl::MakeSpan(in)), -1);
    RunTransfer(net, t, 1, 1, 2);  // 2 us more: the ACK's way back, not a probe's round trip
    EXPECT_EQ(t.sent.size(), ack_now ? 1u : 0u);
  }
}

TEST(RendezvousTest, UnexpectedTakesAnEntryAndNoBytes) {
  Net net(Options());
  const PeerId to_b = net.Peer(0, 1);
  std::vector<uint8_t> out(5 * kThreshold + 3), in(out.size(), 0xee);
  testing::FillPattern(9, absl::MakeSpan(out));
  int ctx;
  ASSERT_EQ(net.ep(0).Send({.dest = to_b,
                            .buf = out.data(),
                            .len = out.size(),
                            .context = &ctx,
                            .data = 42,
                            .flags = kSendRemoteData}),
            Result::kOk);
  Transfer t;
  for (int i = 0; i < 20'000; ++i) net.Step();
  Drain(net.ep(0), &t.sent, &t.send_err);
  EXPECT_TRUE(t.sent.empty()) << "the send completes only once pulled";
  EXPECT_EQ(net.ep(1).counters().unexpected_depth, 1u);
  EXPECT_EQ(net.ep(1).counters().unexpected_bytes, 0u) << "no payload held for it";
  // A long wait for the receive: the sender probes and stays alive.
  for (int i = 0; i < 60'000; ++i) net.Step();
  EXPECT_EQ(net.ep(0).counters().peer_timeouts, 0u);
  ASSERT_EQ(net.ep(1).PostRecv({.buf = in.data(), .len = in.size(), .context = &in}), Result::kOk);
  ASSERT_TRUE(RunTransfer(net, t, 1, 1));
  ASSERT_TRUE(t.send_err.empty()) << t.send_err[0].message;
  ASSERT_TRUE(t.recv_err.empty()) << t.recv_err[0].message;
  EXPECT_EQ(t.sent[0].context, &ctx);
  EXPECT_EQ(t.sent[0].len, out.size());
  EXPECT_EQ(t.got[0].len, out.size());
  EXPECT_EQ(t.got[0].data, 42u);
  EXPECT_TRUE(t.got[0].flags & kCompRemoteData);
  EXPECT_EQ(testing::CheckPattern(9, in), -1);
  EXPECT_EQ(net.ep(1).counters().unexpected_depth, 0u);
}

TEST(RendezvousTest, TaggedMatchesByTagInSendOrder) {
  Net net(Options());
  const PeerId to_b = net.Peer(0, 1);
  std::vector<std::vector<uint8_t>> out(3, std::vector<uint8_t>(2 * kThreshold));
  std::vector<std::vector<uint8_t>> in(3, std::vector<uint8_t>(2 * kThreshold, 0xee));
  for (int k = 0; k < 3; ++k) testing::FillPattern(k, absl::MakeSpan(out[k]));
  // Tags 7, 8, 7: the receive for 8 is posted first, then the two for 7.
  const uint64_t tags[3] = {7, 8, 7};
  for (int k = 0; k < 3; ++k) {
    ASSERT_EQ(net.ep(0).Send({.dest = to_b,
                              .buf = out[k].data(),
                              .len = out[k].size(),
                              .tag = tags[k],
                              .flags = kSendTagged}),
              Result::kOk);
  }
  for (int i = 0; i < 5000; ++i) net.Step();
  const int order[3] = {1, 0, 2};
  for (int k : order) {
    ASSERT_EQ(net.ep(1).PostRecv({.buf = in[k].data(),
                                  .len = in[k].size(),
                                  .context = &in[k],
                                  .tagged = true,
                                  .tag = tags[k]}),
              Result::kOk);
  }
  Transfer t;
  ASSERT_TRUE(RunTransfer(net, t, 3, 3));
  ASSERT_TRUE(t.recv_err.empty()) << t.recv_err[0].message;
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(testing::CheckPattern(k, in[k]), -1) << k;
  }
  for (const Completion& c : t.got) {
    EXPECT_TRUE(c.flags & kCompTagged);
    EXPECT_EQ(c.tag, tags[static_cast<std::vector<uint8_t>*>(c.context) - in.data()]);
  }
}

TEST(RendezvousTest, ShorterReceiveTruncates) {
  for (bool posted_first : {true, false}) {
    Net net(Options());
    Transfer t;
    ASSERT_NO_FATAL_FAILURE(
        testing::SendIntoShorterReceive(net, 4 * kThreshold, kThreshold + 100, posted_first, t));
  }
}

TEST(RendezvousTest, ZeroLengthReceiveOfARendezvousMessage) {
  Net net(Options());
  const PeerId to_b = net.Peer(0, 1);
  std::vector<uint8_t> out(2 * kThreshold);
  ASSERT_EQ(net.ep(1).PostRecv({.buf = nullptr, .len = 0}), Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = out.data(), .len = out.size()}), Result::kOk);
  Transfer t;
  ASSERT_TRUE(RunTransfer(net, t, 1, 1));
  EXPECT_EQ(t.sent.size(), 1u);
  ASSERT_EQ(t.recv_err.size(), 1u);
  EXPECT_EQ(t.recv_err[0].err, EMSGSIZE);
  EXPECT_EQ(t.recv_err[0].olen, out.size());
}

// A word pattern cheap enough for 1 GiB in an unoptimized build.
void FillWords(uint8_t* p, uint64_t n) {
  auto* w = reinterpret_cast<uint64_t*>(p);
  for (uint64_t i = 0; i < n / 8; ++i) w[i] = i * 0x9e3779b97f4a7c15ull + 0x5bd1e995;
}
int64_t CheckWords(const uint8_t* p, uint64_t n) {
  const auto* w = reinterpret_cast<const uint64_t*>(p);
  for (uint64_t i = 0; i < n / 8; ++i) {
    if (w[i] != i * 0x9e3779b97f4a7c15ull + 0x5bd1e995) return static_cast<int64_t>(i * 8);
  }
  return -1;
}

uint8_t* MapBytes(uint64_t n) {
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) return nullptr;
  madvise(p, n, MADV_HUGEPAGE);
  return static_cast<uint8_t*>(p);
}

TEST(RendezvousTest, OneGibibyte) {
  constexpr uint64_t kSize = uint64_t{1} << 30;
  NetOptions o = Options();
  o.mtu = 9000;  // the loopback's largest: fewer packets
  o.config.max_msg_size = kSize;
  o.config.window_packets = 256;
  Net net(o);
  const PeerId to_b = net.Peer(0, 1);
  uint8_t* out = MapBytes(kSize);
  uint8_t* in = MapBytes(kSize);
  ASSERT_NE(out, nullptr);
  ASSERT_NE(in, nullptr);
  FillWords(out, kSize);
  ASSERT_EQ(net.ep(1).PostRecv({.buf = in, .len = kSize}), Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = out, .len = kSize}), Result::kOk);
  Transfer t;
  ASSERT_TRUE(RunTransfer(net, t, 1, 1, 2'000'000));
  ASSERT_TRUE(t.send_err.empty()) << t.send_err[0].message;
  ASSERT_TRUE(t.recv_err.empty()) << t.recv_err[0].message;
  EXPECT_EQ(t.got[0].len, kSize);
  EXPECT_EQ(CheckWords(in, kSize), -1);
  EXPECT_EQ(net.ep(1).counters().unexpected_bytes, 0u);
  munmap(out, kSize);
  munmap(in, kSize);
}

// The receiver restarts while it pulls: the send fails (ECONNRESET), nothing hangs.
TEST(RendezvousTest, ReceiverRestartsMidPull) {
  Net net(Options());
  const PeerId to_b = net.Peer(0, 1);
  std::vector<uint8_t> out(4 << 20), in(out.size());
  ASSERT_EQ(net.ep(1).PostRecv({.buf = in.data(), .len = in.size()}), Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = out.data(), .len = out.size()}), Result::kOk);
  ASSERT_TRUE(net.RunUntil([&] { return net.ep(1).counters().rx_data_packets > 100; }, 100'000));
  net.Kill(1);
  net.Revive(1);
  net.Peer(1, 0);  // the new incarnation talks to the sender: it learns of the restart
  ASSERT_EQ(net.ep(1).Send({.dest = net.Peer(1, 0), .buf = "x", .len = 1}), Result::kOk);
  Transfer t;
  ASSERT_TRUE(net.RunUntil(
      [&] {
        Drain(net.ep(0), &t.sent, &t.send_err);
        return !t.sent.empty() || !t.send_err.empty();
      },
      500'000));
  ASSERT_EQ(t.send_err.size(), 1u);
  EXPECT_EQ(t.send_err[0].err, ECONNRESET) << t.send_err[0].message;
}

// The sender restarts while its message is pulled, and while another waits
// unexpected: both receives fail, nothing hangs.
TEST(RendezvousTest, SenderRestartsMidPull) {
  Net net(Options());
  const PeerId to_b = net.Peer(0, 1);
  std::vector<uint8_t> out(4 << 20), in(out.size()), in2(out.size());
  // Tag 1 waits unexpected; tag 2 has its receive and is pulled.
  ASSERT_EQ(net.ep(1).PostRecv(
                {.buf = in.data(), .len = in.size(), .context = &in, .tagged = true, .tag = 2}),
            Result::kOk);
  ASSERT_EQ(net.ep(0).Send(
                {.dest = to_b, .buf = out.data(), .len = out.size(), .tag = 1, .flags = kSendTagged}),
            Result::kOk);
  ASSERT_EQ(net.ep(0).Send(
                {.dest = to_b, .buf = out.data(), .len = out.size(), .tag = 2, .flags = kSendTagged}),
            Result::kOk);
  ASSERT_TRUE(net.RunUntil([&] { return net.ep(1).counters().rx_data_packets > 100; }, 100'000));
  EXPECT_EQ(net.ep(1).counters().unexpected_depth, 1u);
  net.Kill(0);
  net.Revive(0);
  Transfer t;
  // The receiver finds out by its probe (it only waits): ECONNRESET via a
  // RESET from the new incarnation, at worst ETIMEDOUT.
  ASSERT_TRUE(net.RunUntil(
      [&] {
        Drain(net.ep(1), &t.got, &t.recv_err);
        return !t.recv_err.empty();
      },
      500'000));
  EXPECT_TRUE(t.recv_err[0].err == ECONNRESET || t.recv_err[0].err == ETIMEDOUT)
      << t.recv_err[0].message;
  EXPECT_EQ(t.recv_err[0].op.context, &in);
  // The one that waited unexpected belonged to the old session, which has
  // its bytes: it went with it. No peek reports it, no receive takes it.
  EXPECT_EQ(net.ep(1).counters().unexpected_depth, 0u);
  EXPECT_EQ(net.ep(1).counters().rendezvous_lost, 1u);
  int peek;
  ASSERT_EQ(net.ep(1).PostRecv({.context = &peek, .tagged = true, .tag = 1, .flags = kRecvPeek}),
            Result::kOk);
  Drain(net.ep(1), &t.got, &t.recv_err);
  ASSERT_EQ(t.recv_err.size(), 2u);
  EXPECT_EQ(t.recv_err[1].err, ENOMSG) << t.recv_err[1].message;
  EXPECT_EQ(t.recv_err[1].op.context, &peek);
  ASSERT_EQ(net.ep(1).PostRecv(
                {.buf = in2.data(), .len = in2.size(), .context = &in2, .tagged = true, .tag = 1}),
            Result::kOk);
  for (int i = 0; i < 1000; ++i) net.Step();
  Drain(net.ep(1), &t.got, &t.recv_err);
  EXPECT_EQ(t.recv_err.size(), 2u) << "the receive waits for a message of the new session";
  EXPECT_TRUE(t.got.empty());
}

// The receiver vanishes (never comes back) while the sender waits for the pull.
TEST(RendezvousTest, VanishedReceiverTimesOut) {
  Net net(Options());
  const PeerId to_b = net.Peer(0, 1);
  std::vector<uint8_t> out(2 * kThreshold);
  ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = out.data(), .len = out.size()}), Result::kOk);
  ASSERT_TRUE(net.RunUntil([&] { return net.ep(1).counters().unexpected_depth == 1; }, 100'000));
  net.Kill(1);
  Transfer t;
  ASSERT_TRUE(net.RunUntil(
      [&] {
        Drain(net.ep(0), &t.sent, &t.send_err);
        return !t.send_err.empty() || !t.sent.empty();
      },
      500'000));
  ASSERT_EQ(t.send_err.size(), 1u);
  EXPECT_EQ(t.send_err[0].err, ETIMEDOUT) << t.send_err[0].message;
}

// max_rma_ops pulls from S at once must not starve S's own RMA to R: R
// keeps ops for answers, so S's read and write (sent before the pulls were
// asked for, so ahead of the pulled bytes in S's stream) are served, and
// the pulls then finish. Before the reserve, R refused the READ_REQ for
// want of an op while every op waited for bytes queued behind it: a
// deadlock that RNR ACKs kept alive forever.
TEST(RendezvousTest, PullsLeaveOpsForAnswers) {
  NetOptions o = Options();
  o.config.max_rma_ops = 64;
  Net net(o);
  Endpoint& s = net.ep(0);
  Endpoint& r = net.ep(1);
  const PeerId to_r = net.Peer(0, 1);
  constexpr int kMsgs = 64;
  std::vector<std::vector<uint8_t>> out(kMsgs, std::vector<uint8_t>(2 * kThreshold));
  std::vector<std::vector<uint8_t>> in(kMsgs, std::vector<uint8_t>(2 * kThreshold, 0xee));
  for (int k = 0; k < kMsgs; ++k) {
    testing::FillPattern(k, absl::MakeSpan(out[k]));
    ASSERT_EQ(s.Send({.dest = to_r, .buf = out[k].data(), .len = out[k].size(), .context = &out[k]}),
              Result::kOk);
  }
  ASSERT_TRUE(net.RunUntil([&] { return r.counters().unexpected_depth == kMsgs; }, 200'000));
  for (int i = 0; i < 20'000; ++i) net.Step();  // R's "queued" answers acknowledged: ops free
  std::vector<uint8_t> region(8000);
  testing::FillPattern(500, absl::MakeSpan(region));
  absl::StatusOr<uint64_t> key = r.RegisterRegion(
      {.addr = region.data(), .len = region.size(),
       .access = kAccessRemoteRead | kAccessRemoteWrite});
  ASSERT_TRUE(key.ok()) << key.status();
  // S's read and write go on the wire now; R takes all its receives (each
  // starting a pull) before it looks at them.
  std::vector<uint8_t> got(4000, 0), put(3000);
  testing::FillPattern(501, absl::MakeSpan(put));
  int read_ctx, write_ctx;
  ASSERT_EQ(s.Read({.dest = to_r, .buf = got.data(), .len = got.size(), .addr = 0, .key = *key,
                    .context = &read_ctx}),
            Result::kOk);
  ASSERT_EQ(s.Write({.dest = to_r, .buf = put.data(), .len = put.size(), .addr = 4000,
                     .key = *key, .context = &write_ctx}),
            Result::kOk);
  int posted = 0;
  const auto post = [&] {
    while (posted < kMsgs && r.PostRecv({.buf = in[posted].data(), .len = in[posted].size(),
                                         .context = &in[posted]}) == Result::kOk) {
      ++posted;
    }
  };
  post();
  EXPECT_LT(posted, kMsgs) << "some of max_rma_ops are kept for answers";
  EXPECT_GT(posted, kMsgs / 2);
  Transfer t;
  ASSERT_TRUE(net.RunUntil(
      [&] {
        post();
        Drain(s, &t.sent, &t.send_err);
        Drain(r, &t.got, &t.recv_err);
        return t.Done(kMsgs + 2, kMsgs);
      },
      400'000))
      << "sent " << t.sent.size() << " received " << t.got.size() << " posted " << posted;
  ASSERT_TRUE(t.send_err.empty()) << t.send_err[0].message;
  ASSERT_TRUE(t.recv_err.empty()) << t.recv_err[0].message;
  for (int k = 0; k < kMsgs; ++k) EXPECT_EQ(testing::CheckPattern(k, in[k]), -1) << k;
  EXPECT_TRUE(std::equal(got.begin(), got.end(), region.begin()));
  EXPECT_TRUE(std::equal(put.begin(), put.end(), region.begin() + 4000));
}

// The sender holds its next messages until the receiver answers its
// outstanding request to send; a pull of an older message (one that waited
// unexpected, taken by a receive meanwhile) is not that answer. Before, it
// ended the hold: the eager message after the request went out ahead of the
// pulled bytes and completed first, though the request was matched on
// arrival.
TEST(RendezvousTest, APullOfAnOlderMessageKeepsTheHold) {
  Net net(Options());
  Endpoint& s = net.ep(0);
  Endpoint& r = net.ep(1);
  const PeerId to_r = net.Peer(0, 1);
  std::vector<uint8_t> m1(2 * kThreshold), m2(3 * kThreshold), m3(1000);
  std::vector<uint8_t> in1(m1.size(), 0xee), in2(m2.size(), 0xee), in3(m3.size(), 0xee);
  testing::FillPattern(1, absl::MakeSpan(m1));
  testing::FillPattern(2, absl::MakeSpan(m2));
  testing::FillPattern(3, absl::MakeSpan(m3));
  ASSERT_EQ(s.Send({.dest = to_r, .buf = m1.data(), .len = m1.size()}), Result::kOk);
  ASSERT_TRUE(net.RunUntil([&] { return r.counters().unexpected_depth == 1; }, 100'000));
  for (int i = 0; i < 5000; ++i) net.Step();  // its "queued" answer in: S sends on
  // The request for m2 goes to R (m3 waits behind it at S); before R reads
  // it, R takes m1 (its pull goes to S) and posts receives for m2 and m3.
  ASSERT_EQ(s.Send({.dest = to_r, .buf = m2.data(), .len = m2.size()}), Result::kOk);
  ASSERT_EQ(s.Send({.dest = to_r, .buf = m3.data(), .len = m3.size()}), Result::kOk);
  ASSERT_EQ(r.PostRecv({.buf = in1.data(), .len = in1.size(), .context = &in1}), Result::kOk);
  ASSERT_EQ(r.PostRecv({.buf = in2.data(), .len = in2.size(), .context = &in2}), Result::kOk);
  ASSERT_EQ(r.PostRecv({.buf = in3.data(), .len = in3.size(), .context = &in3}), Result::kOk);
  s.Progress();  // S reads m1's pull first
  Transfer t;
  ASSERT_TRUE(RunTransfer(net, t, 3, 3));
  ASSERT_TRUE(t.send_err.empty()) << t.send_err[0].message;
  ASSERT_TRUE(t.recv_err.empty()) << t.recv_err[0].message;
  EXPECT_EQ(testing::CheckPattern(1, in1), -1);
  EXPECT_EQ(testing::CheckPattern(2, in2), -1);
  EXPECT_EQ(testing::CheckPattern(3, in3), -1);
  // m1 waited unexpected, so it may complete anywhere; m2 before m3.
  std::vector<void*> order;
  for (const Completion& c : t.got) {
    if (c.context != &in1) order.push_back(c.context);
  }
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0], &in2) << "m3 completed before m2, which was matched on arrival";
}

// A pull naming no message of the sender's that arrives when the sender has
// no engine op free to refuse it with (both answering reads) is refused
// (RNR) and comes again, then answered NO_MESSAGE: the receive fails. Before,
// it was consumed with no answer and the receive waited forever, kept alive
// by probes.
TEST(RendezvousTest, APullNamingNoMessageIsAnsweredEvenWithNoOpFree) {
  NetOptions o = Options();
  o.configure = [](int node, EndpointConfig* c) {
    if (node == 0) c->max_rma_ops = 2;
  };
  Net net(o);
  Endpoint& s = net.ep(0);
  Endpoint& r = net.ep(1);
  const PeerId to_r = net.Peer(0, 1);
  const PeerId to_s = net.Peer(1, 0);
  std::vector<uint8_t> region(8000);
  testing::FillPattern(7, absl::MakeSpan(region));
  absl::StatusOr<uint64_t> key = s.RegisterRegion(
      {.addr = region.data(), .len = region.size(), .access = kAccessRemoteRead});
  ASSERT_TRUE(key.ok()) << key.status();
  std::vector<uint8_t> m(2 * kThreshold), in(m.size(), 0xee), got1(4000), got2(4000);
  ASSERT_EQ(s.Send({.dest = to_r, .buf = m.data(), .len = m.size()}), Result::kOk);
  ASSERT_TRUE(net.RunUntil([&] { return r.counters().unexpected_depth == 1; }, 100'000));
  for (int i = 0; i < 5000; ++i) net.Step();
  // R's pull of m reaches S naming a message S never sent.
  net.tap(0).set_rewrite([](wire::View* v) {
    if (v->common.type != wire::PacketType::kRma || v->rma.op != wire::RmaOp::kReadReq ||
        (v->rma.flags & wire::kRmaFlagMessage) == 0) {
      return false;
    }
    v->rma.key += 1000;
    return true;
  });
  // Its answer comes back naming what R asked for (R checks the echo).
  net.tap(1).set_rewrite([](wire::View* v) {
    if (v->common.type != wire::PacketType::kRma || v->rma.op != wire::RmaOp::kResponse ||
        v->rma.status != wire::RmaStatus::kNoMessage) {
      return false;
    }
    v->rma.key -= 1000;
    return true;
  });
  // Two reads take both of S's ops (until R acknowledges their data); the
  // pull arrives right behind them.
  ASSERT_EQ(r.Read({.dest = to_s, .buf = got1.data(), .len = got1.size(), .addr = 0, .key = *key}),
            Result::kOk);
  ASSERT_EQ(r.Read({.dest = to_s, .buf = got2.data(), .len = got2.size(), .addr = 4000,
                    .key = *key}),
            Result::kOk);
  ASSERT_EQ(r.PostRecv({.buf = in.data(), .len = in.size(), .context = &in}), Result::kOk);
  Transfer t;
  ASSERT_TRUE(net.RunUntil(
      [&] {
        Drain(s, &t.sent, &t.send_err);
        Drain(r, &t.got, &t.recv_err);
        return t.got.size() == 2 && t.recv_err.size() == 1;
      },
      200'000))
      << "reads " << t.got.size() << " receive errors " << t.recv_err.size();
  EXPECT_GE(s.counters().rma_no_slot, 1u) << "the pull found no op free and was refused";
  EXPECT_EQ(t.recv_err[0].err, EPROTO) << t.recv_err[0].message;
  EXPECT_EQ(t.recv_err[0].op.context, &in);
  EXPECT_TRUE(std::equal(got1.begin(), got1.end(), region.begin()));
  EXPECT_TRUE(std::equal(got2.begin(), got2.end(), region.begin() + 4000));
}

// A pulled message's data at the head of the sender's stream is never
// given up, whatever RNRs name it (the receiver asked for those bytes).
// Here the receiver's ACKs that name its first packet are made RNRs, past
// rnr_give_up_ns; before, the sender gave the message up (ENOSPC) while its
// bytes were being delivered.
TEST(RendezvousTest, PulledDataIsNeverGivenUp) {
  NetOptions o = Options();
  o.config.rnr_give_up_ns = o.config.rnr_retry_min_ns;
  o.config.rnr_retry_max_ns = 1'000'000;
  o.config.rto_max_ns = 2'000'000;
  Net net(o);
  Endpoint& s = net.ep(0);
  Endpoint& r = net.ep(1);
  const PeerId to_r = net.Peer(0, 1);
  std::vector<uint8_t> m(3 * kThreshold), in(m.size(), 0xee);
  testing::FillPattern(4, absl::MakeSpan(m));
  ASSERT_EQ(r.PostRecv({.buf = in.data(), .len = in.size(), .context = &in}), Result::kOk);
  int drops = 0;
  bool have_psn = false;
  uint32_t first_psn = 0;  // of the pulled data's first packet
  net.tap(1).set_filter([&](const wire::View* v) {
    if (v == nullptr || v->common.type != wire::PacketType::kRma ||
        v->rma.op != wire::RmaOp::kReadData || v->rma.offset != 0 || drops >= 5) {
      return true;
    }
    have_psn = true;
    first_psn = v->common.psn.value();
    ++drops;
    return false;
  });
  net.tap(0).set_rewrite([&](wire::View* v) {
    if (v->common.type != wire::PacketType::kAck || !have_psn || drops >= 5 ||
        v->common.ack_psn.value() != first_psn) {
      return false;
    }
    v->common.flags |= wire::kFlagRnr;
    return true;
  });
  ASSERT_EQ(s.Send({.dest = to_r, .buf = m.data(), .len = m.size(), .context = &m}), Result::kOk);
  Transfer t;
  ASSERT_TRUE(RunTransfer(net, t, 1, 1))
      << "drops " << drops << "\n" << s.counters().ToString() << "\n" << r.counters().ToString();
  EXPECT_EQ(drops, 5);
  EXPECT_GT(s.counters().rnr_received, 1u);
  ASSERT_TRUE(t.send_err.empty()) << t.send_err[0].message;
  ASSERT_TRUE(t.recv_err.empty()) << t.recv_err[0].message;
  EXPECT_EQ(s.counters().rnr_give_ups, 0u);
  EXPECT_EQ(testing::CheckPattern(4, in), -1);
}

TEST(RendezvousTest, SurvivesFaults) {
  NetOptions o = Options();
  o.faults.drop = 0.05;
  o.faults.dup = 0.02;
  o.faults.reorder = 0.10;
  o.faults.corrupt = 0.001;
  o.faults.seed = 17;
  o.config.peer_timeout_ns = 2'000'000'000;
  Net net(o);
  std::vector<size_t> sizes;
  for (int k = 0; k < 30; ++k) sizes.push_back(static_cast<size_t>(k) * 7001 % 200'000);
  ASSERT_GT(testing::TransferAndVerify(net, 0, 1, sizes, 2'000'000), 0);
  EXPECT_GT(net.ep(0).counters().rendezvous_sent, 10u);
}

}  // namespace
}  // namespace bypass::rdm
