// The receive-side features beyond a plain receive, and peer management:
// multi-receive buffers, peek / claim / discard, cancel, slot counts, peer
// removal with stale ids, DSCP, giving up on a receiver that never makes
// room, and MAC discovery by a broadcast HELLO.
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#include "driver/device.h"
#include "fabric/rdm/rdm.h"
#include "fabric/rdm/test_util.h"
#include "fabric/rdm/wire.h"
#include "gtest/gtest.h"

namespace bypass::rdm {
namespace {

using testing::Drain;
using testing::Net;
using testing::NetOptions;

constexpr uint64_t kSteps = 20'000;

// Steps until ep(i) has n more completions or errors (appended to the vectors).
bool WaitFor(Net& net, int i, size_t n, std::vector<Completion>* ok,
             std::vector<ErrorCompletion>* err) {
  const size_t had = ok->size() + err->size();
  return net.RunUntil(
      [&] {
        Drain(net.ep(i), ok, err);
        return ok->size() + err->size() >= had + n;
      },
      kSteps);
}

// Sends `len` bytes of pattern `id` from a to b; the buffer must outlive it.
void SendPattern(Net& net, PeerId to, std::vector<uint8_t>* buf, uint64_t id, size_t len,
                 uint32_t flags = 0, uint64_t tag = 0) {
  buf->resize(len);
  testing::FillPattern(id, absl::MakeSpan(*buf));
  ASSERT_EQ(
      net.ep(0).Send({.dest = to, .buf = buf->data(), .len = len, .tag = tag, .flags = flags}),
      Result::kOk);
}

TEST(MultiRecvTest, MessagesLandAtIncreasingOffsetsAndTheLastReleasesTheBuffer) {
  Net net(NetOptions{});
  const PeerId to_b = net.Peer(0, 1);
  EXPECT_EQ(net.ep(1).min_multi_recv(), 1024u) << "the EndpointConfig default";
  std::vector<uint8_t> big(4096, 0);
  int ctx;
  ASSERT_EQ(net.ep(1).PostRecv(
                {.buf = big.data(), .len = big.size(), .context = &ctx, .flags = kRecvMulti}),
            Result::kOk);
  std::vector<std::vector<uint8_t>> out(5);
  for (int i = 0; i < 5; ++i) SendPattern(net, to_b, &out[i], i, 1000);
  std::vector<uint8_t> plain(1000);
  int plain_ctx;
  ASSERT_EQ(net.ep(1).PostRecv({.buf = plain.data(), .len = plain.size(), .context = &plain_ctx}),
            Result::kOk);
  std::vector<Completion> got;
  std::vector<ErrorCompletion> err;
  ASSERT_TRUE(WaitFor(net, 1, 5, &got, &err));
  ASSERT_TRUE(err.empty()) << err[0].message;
  // 0, 1000, 2000, 3000: then 96 bytes are left, under 1024: released.
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(got[i].context, &ctx);
    EXPECT_EQ(got[i].buf, big.data() + 1000 * i);
    EXPECT_EQ(got[i].len, 1000u);
    EXPECT_EQ(got[i].flags & kCompMultiRecv, i == 3 ? kCompMultiRecv : 0u) << i;
    EXPECT_EQ(testing::CheckPattern(i, {big.data() + 1000 * i, 1000}), -1) << i;
  }
  EXPECT_EQ(got[4].context, &plain_ctx) << "the fifth goes to the next receive";
  EXPECT_EQ(testing::CheckPattern(4, plain), -1);
  EXPECT_EQ(net.ep(1).RecvSlotsFree(), net.ep(1).config().max_posted_recvs);
}

TEST(MultiRecvTest, AMessageThatDoesNotFitGoesToTheNextReceiveNotTruncated) {
  Net net(NetOptions{});
  const PeerId to_b = net.Peer(0, 1);
  net.ep(1).SetMinMultiRecv(100);
  EXPECT_EQ(net.ep(1).min_multi_recv(), 100u);
  std::vector<uint8_t> multi(2048), plain(1000);
  int mctx, pctx;
  ASSERT_EQ(net.ep(1).PostRecv(
                {.buf = multi.data(), .len = multi.size(), .context = &mctx, .flags = kRecvMulti}),
            Result::kOk);
  ASSERT_EQ(net.ep(1).PostRecv({.buf = plain.data(), .len = plain.size(), .context = &pctx}),
            Result::kOk);
  std::vector<std::vector<uint8_t>> out(3);
  SendPattern(net, to_b, &out[0], 10, 1500);  // multi at 0; 548 left
  SendPattern(net, to_b, &out[1], 11, 1000);  // does not fit: the plain receive
  SendPattern(net, to_b, &out[2], 12, 500);   // multi at 1500; 48 left: released
  std::vector<Completion> got;
  std::vector<ErrorCompletion> err;
  ASSERT_TRUE(WaitFor(net, 1, 3, &got, &err));
  ASSERT_TRUE(err.empty()) << err[0].message;
  EXPECT_EQ(net.ep(1).counters().truncated, 0u);
  EXPECT_EQ(got[0].context, &mctx);
  EXPECT_EQ(got[0].buf, multi.data());
  EXPECT_EQ(got[0].flags & kCompMultiRecv, 0u);
  EXPECT_EQ(got[1].context, &pctx);
  EXPECT_EQ(got[1].len, 1000u);
  EXPECT_EQ(got[2].context, &mctx);
  EXPECT_EQ(got[2].buf, multi.data() + 1500);
  EXPECT_EQ(got[2].len, 500u);
  EXPECT_NE(got[2].flags & kCompMultiRecv, 0u);
  EXPECT_EQ(testing::CheckPattern(10, {multi.data(), 1500}), -1);
  EXPECT_EQ(testing::CheckPattern(11, plain), -1);
  EXPECT_EQ(testing::CheckPattern(12, {multi.data() + 1500, 500}), -1);
}

TEST(MultiRecvTest, TakesWaitingUnexpectedMessagesIncludingOneStillArriving) {
  NetOptions o;
  o.config.window_packets = 8;  // so that the large one takes several round trips
  Net net(o);
  const PeerId to_b = net.Peer(0, 1);
  net.ep(1).SetMinMultiRecv(0);
  std::vector<std::vector<uint8_t>> out(3);
  SendPattern(net, to_b, &out[0], 20, 300, kSendTagged, 7);
  SendPattern(net, to_b, &out[1], 21, 0, kSendTagged, 7);
  ASSERT_TRUE(net.RunUntil([&] { return net.ep(1).counters().unexpected_depth == 2; }, kSteps));
  for (int i = 0; i < 100; ++i) net.Step();
  // Large (eager): still arriving when the buffer is posted.
  SendPattern(net, to_b, &out[2], 22, 60'000, kSendTagged, 7);
  ASSERT_TRUE(net.RunUntil([&] { return net.ep(1).counters().unexpected_depth == 3; }, kSteps));
  std::vector<uint8_t> big(60'300);
  int ctx;
  ASSERT_EQ(net.ep(1).PostRecv({.buf = big.data(),
                                .len = big.size(),
                                .context = &ctx,
                                .tagged = true,
                                .tag = 7,
                                .flags = kRecvMulti}),
            Result::kOk);
  EXPECT_EQ(net.ep(1).counters().unexpected_depth, 0u);
  std::vector<Completion> got;
  std::vector<ErrorCompletion> err;
  ASSERT_TRUE(WaitFor(net, 1, 3, &got, &err));
  ASSERT_TRUE(err.empty()) << err[0].message;
  EXPECT_EQ(got[0].buf, big.data());
  EXPECT_EQ(got[1].len, 0u);
  EXPECT_EQ(got[2].buf, big.data() + 300);
  EXPECT_EQ(got[2].len, 60'000u);
  EXPECT_EQ(got[2].flags, kCompRecv | kCompMsg | kCompTagged | kCompMultiRecv)
      << "min_multi_recv 0: released when full";
  EXPECT_EQ(testing::CheckPattern(20, {big.data(), 300}), -1);
  EXPECT_EQ(testing::CheckPattern(22, {big.data() + 300, 60'000}), -1);
}

TEST(MultiRecvTest, RendezvousMessagesGoToPlainReceives) {
  Net net(NetOptions{});
  const PeerId to_b = net.Peer(0, 1);
  const uint64_t large = net.ep(1).config().rendezvous_threshold + 1000;
  std::vector<uint8_t> multi(4 * large), plain(large), out;
  int mctx, pctx;
  ASSERT_EQ(net.ep(1).PostRecv(
                {.buf = multi.data(), .len = multi.size(), .context = &mctx, .flags = kRecvMulti}),
            Result::kOk);
  ASSERT_EQ(net.ep(1).PostRecv({.buf = plain.data(), .len = plain.size(), .context = &pctx}),
            Result::kOk);
  SendPattern(net, to_b, &out, 13, large);
  std::vector<Completion> got;
  std::vector<ErrorCompletion> err;
  ASSERT_TRUE(WaitFor(net, 1, 1, &got, &err));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].context, &pctx);
  EXPECT_EQ(testing::CheckPattern(13, plain), -1);
}

TEST(MultiRecvTest, CancelReleasesTheBufferAndBadFlagsAreRejected) {
  Net net(NetOptions{});
  Endpoint& e = net.ep(1);
  std::vector<uint8_t> buf(4096);
  int ctx;
  const uint32_t free_before = e.RecvSlotsFree();
  ASSERT_EQ(net.ep(1).PostRecv(
                {.buf = buf.data(), .len = buf.size(), .context = &ctx, .flags = kRecvMulti}),
            Result::kOk);
  EXPECT_EQ(e.RecvSlotsFree(), free_before - 1);
  EXPECT_EQ(net.ep(1).PostRecv({.buf = buf.data(), .len = 8, .flags = kRecvMulti | kRecvPeek}),
            Result::kInvalid);
  EXPECT_EQ(net.ep(1).PostRecv({.buf = buf.data(), .len = 8, .flags = kRecvDiscard}),
            Result::kInvalid);
  EXPECT_EQ(net.ep(1).PostRecv({.buf = buf.data(), .len = 8, .flags = 1u << 20}), Result::kInvalid);
  EXPECT_TRUE(e.CancelRecv(&ctx));
  EXPECT_FALSE(e.CancelRecv(&ctx)) << "nothing left to cancel";
  EXPECT_EQ(e.RecvSlotsFree(), free_before);
  std::vector<ErrorCompletion> err;
  Drain(net.ep(1), nullptr, &err);
  ASSERT_EQ(err.size(), 1u);
  EXPECT_EQ(err[0].err, ECANCELED);
  EXPECT_EQ(err[0].op.context, &ctx);
  EXPECT_NE(err[0].op.flags & kCompMultiRecv, 0u);
}

TEST(CancelTest, CancelsAQueuedReceiveAndCountsSlots) {
  NetOptions o;
  o.config.max_send_ops = 8;
  o.config.max_posted_recvs = 4;
  Net net(o);
  Endpoint& b = net.ep(1);
  EXPECT_EQ(b.RecvSlotsFree(), 4u);
  EXPECT_EQ(net.ep(0).SendSlotsFree(), 8u);
  uint64_t x = 0, y = 0;
  ASSERT_EQ(net.ep(1).PostRecv({.buf = &x, .len = 8, .context = &x}), Result::kOk);
  ASSERT_EQ(net.ep(1).PostRecv({.buf = &y, .len = 8, .context = &y, .tagged = true}), Result::kOk);
  EXPECT_EQ(b.RecvSlotsFree(), 2u);
  EXPECT_FALSE(b.CancelRecv(nullptr));
  EXPECT_TRUE(b.CancelRecv(&y));
  EXPECT_EQ(b.RecvSlotsFree(), 3u);
  std::vector<ErrorCompletion> err;
  Drain(net.ep(1), nullptr, &err);
  ASSERT_EQ(err.size(), 1u);
  EXPECT_EQ(err[0].err, ECANCELED);
  EXPECT_EQ(err[0].op.context, &y);
  EXPECT_EQ(err[0].op.flags, kCompRecv | kCompMsg | kCompTagged);
  // The other one still receives.
  const PeerId to_b = net.Peer(0, 1);
  const uint64_t v = 42;
  ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = &v, .len = 8}), Result::kOk);
  EXPECT_EQ(net.ep(0).SendSlotsFree(), 7u);
  std::vector<Completion> got;
  err.clear();
  ASSERT_TRUE(WaitFor(net, 1, 1, &got, &err));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].context, &x);
  EXPECT_EQ(x, 42u);
  ASSERT_TRUE(net.RunUntil([&] { return net.ep(0).SendSlotsFree() == 8; }, kSteps));
}

// Two messages waiting unexpected at b: tag 1 (8 bytes) then tag 2.
struct PeekFixture {
  Net net{NetOptions{}};
  PeerId to_b = net.Peer(0, 1);
  uint64_t m1 = 111, m2 = 222;
  void SendBoth() {
    ASSERT_EQ(net.ep(0).Send({.dest = to_b,
                              .buf = &m1,
                              .len = 8,
                              .tag = 1,
                              .data = 9,
                              .flags = kSendTagged | kSendRemoteData}),
              Result::kOk);
    ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = &m2, .len = 8, .tag = 2, .flags = kSendTagged}),
              Result::kOk);
    ASSERT_TRUE(net.RunUntil([&] { return net.ep(1).counters().unexpected_depth == 2; }, kSteps));
  }
  Result Post(uint64_t* buf, void* ctx, uint32_t flags, uint64_t tag = 0, uint64_t ignore = ~0ull) {
    return net.ep(1).PostRecv({.buf = buf,
                               .len = buf ? 8u : 0u,
                               .context = ctx,
                               .tagged = true,
                               .tag = tag,
                               .ignore = ignore,
                               .flags = flags});
  }
  void One(Completion* ok, ErrorCompletion* err) {
    std::vector<Completion> oks;
    std::vector<ErrorCompletion> errs;
    Drain(net.ep(1), &oks, &errs);
    ASSERT_EQ(oks.size() + errs.size(), 1u);
    if (!oks.empty() && ok) *ok = oks[0];
    if (!errs.empty() && err) *err = errs[0];
    if (!oks.empty() && err) err->err = 0;
    if (!errs.empty() && ok) ok->context = nullptr;
  }
};

TEST(PeekTest, PeekWithNothingArrivedIsEnomsg) {
  PeekFixture f;
  int ctx;
  ASSERT_EQ(f.Post(nullptr, &ctx, kRecvPeek), Result::kOk);
  ErrorCompletion e;
  f.One(nullptr, &e);
  EXPECT_EQ(e.err, ENOMSG);
  EXPECT_EQ(e.op.context, &ctx);
}

TEST(PeekTest, PeekDescribesTheMessageAndLeavesIt) {
  PeekFixture f;
  f.SendBoth();
  int ctx;
  ASSERT_EQ(f.Post(nullptr, &ctx, kRecvPeek, 1, 0), Result::kOk);
  Completion c;
  f.One(&c, nullptr);
  EXPECT_EQ(c.context, &ctx);
  EXPECT_EQ(c.len, 8u);
  EXPECT_EQ(c.tag, 1u);
  EXPECT_EQ(c.data, 9u);
  EXPECT_EQ(c.buf, nullptr);
  EXPECT_EQ(c.source, f.net.Peer(1, 0));
  EXPECT_EQ(c.flags, kCompRecv | kCompMsg | kCompTagged | kCompRemoteData);
  EXPECT_EQ(f.net.ep(1).counters().unexpected_depth, 2u);
  uint64_t in = 0;
  ASSERT_EQ(f.Post(&in, &in, 0, 1, 0), Result::kOk);
  f.One(&c, nullptr);
  EXPECT_EQ(in, 111u) << "a peeked message is still received";
}

TEST(PeekTest, ClaimedMessageIsInvisibleToOthersAndReceivedByItsClaim) {
  PeekFixture f;
  f.SendBoth();
  int ctx;
  ASSERT_EQ(f.Post(nullptr, &ctx, kRecvPeek | kRecvClaim), Result::kOk);  // any tag: the first
  Completion c;
  f.One(&c, nullptr);
  EXPECT_EQ(c.tag, 1u);
  // Another receive of any tag passes over the claimed one.
  uint64_t other = 0;
  ASSERT_EQ(f.Post(&other, &other, 0), Result::kOk);
  f.One(&c, nullptr);
  EXPECT_EQ(other, 222u);
  // A claim for a context nothing was claimed for is a bad argument.
  uint64_t in = 0;
  int stranger;
  EXPECT_EQ(f.Post(&in, &stranger, kRecvClaim), Result::kInvalid);
  // The claim: source and tag do not matter.
  ASSERT_EQ(f.Post(&in, &ctx, kRecvClaim, 999, 0), Result::kOk);
  f.One(&c, nullptr);
  EXPECT_EQ(c.context, &ctx);
  EXPECT_EQ(c.tag, 1u);
  EXPECT_EQ(in, 111u);
  EXPECT_EQ(f.net.ep(1).counters().unexpected_depth, 0u);
}

TEST(PeekTest, PeekDiscardAndClaimDiscardDropTheMessage) {
  PeekFixture f;
  f.SendBoth();
  int ctx1, ctx2;
  ASSERT_EQ(f.Post(nullptr, &ctx1, kRecvPeek | kRecvDiscard, 1, 0), Result::kOk);
  Completion c;
  f.One(&c, nullptr);
  EXPECT_EQ(c.context, &ctx1);
  EXPECT_EQ(c.len, 0u);
  EXPECT_EQ(c.tag, 1u);
  EXPECT_EQ(f.net.ep(1).counters().unexpected_depth, 1u);
  ASSERT_EQ(f.Post(nullptr, &ctx2, kRecvPeek | kRecvClaim, 2, 0), Result::kOk);
  f.One(&c, nullptr);
  ASSERT_EQ(f.Post(nullptr, &ctx2, kRecvClaim | kRecvDiscard), Result::kOk);
  f.One(&c, nullptr);
  EXPECT_EQ(c.context, &ctx2);
  EXPECT_EQ(c.len, 0u);
  EXPECT_EQ(f.net.ep(1).counters().unexpected_depth, 0u);
  EXPECT_EQ(f.net.ep(1).counters().unexpected_bytes, 0u);
  // Nothing is left for a peek.
  ASSERT_EQ(f.Post(nullptr, &ctx1, kRecvPeek), Result::kOk);
  ErrorCompletion e;
  f.One(nullptr, &e);
  EXPECT_EQ(e.err, ENOMSG);
}

// Claims and then discards a message of `size` bytes as soon as its first
// segment (eager) or request to send (rendezvous) is there.
void ClaimThenDiscard(const NetOptions& o, size_t size) {
  Net net(o);
  const PeerId to_b = net.Peer(0, 1);
  std::vector<uint8_t> a, b, c;
  SendPattern(net, to_b, &a, 30, size);
  ASSERT_TRUE(net.RunUntil([&] { return net.ep(1).counters().unexpected_depth == 1; }, kSteps));
  int ctx;
  ASSERT_EQ(net.ep(1).PostRecv({.context = &ctx, .flags = kRecvPeek | kRecvClaim}), Result::kOk);
  std::vector<uint8_t> in(size);
  ASSERT_EQ(net.ep(1).PostRecv(
                {.buf = in.data(), .len = in.size(), .context = &ctx, .flags = kRecvClaim}),
            Result::kOk);
  std::vector<Completion> got;
  std::vector<ErrorCompletion> err;
  ASSERT_TRUE(WaitFor(net, 1, 2, &got, &err));
  ASSERT_TRUE(err.empty()) << err[0].message;
  EXPECT_EQ(got[0].len, size) << "the peek";
  EXPECT_EQ(got[1].buf, in.data());
  EXPECT_EQ(testing::CheckPattern(30, in), -1);
  // Discarded before it is all there: the next message is whole, and the
  // sender's operations all complete.
  SendPattern(net, to_b, &b, 31, size);
  ASSERT_TRUE(net.RunUntil([&] { return net.ep(1).counters().unexpected_depth == 1; }, kSteps));
  ASSERT_EQ(net.ep(1).PostRecv({.context = &ctx, .flags = kRecvPeek | kRecvDiscard}), Result::kOk);
  SendPattern(net, to_b, &c, 32, 5000);
  std::vector<uint8_t> next(5000);
  ASSERT_EQ(net.ep(1).PostRecv({.buf = next.data(), .len = next.size()}), Result::kOk);
  got.clear();
  ASSERT_TRUE(WaitFor(net, 1, 2, &got, &err));
  ASSERT_TRUE(err.empty()) << err[0].message;
  EXPECT_EQ(got[0].len, 0u) << "the discarding peek";
  EXPECT_EQ(got[1].len, 5000u);
  EXPECT_EQ(testing::CheckPattern(32, next), -1);
  std::vector<Completion> sent;
  ASSERT_TRUE(WaitFor(net, 0, 3, &sent, &err));
  EXPECT_TRUE(err.empty()) << err[0].message;
  for (int i = 0; i < 100; ++i) net.Step();
  Drain(net.ep(1), &got, &err);
  EXPECT_EQ(got.size(), 2u) << "nothing more for the discarded message";
  EXPECT_TRUE(err.empty());
  EXPECT_EQ(net.ep(1).counters().protocol_errors, 0u);
  EXPECT_EQ(net.ep(1).counters().unexpected_bytes, 0u);
}

TEST(PeekTest, ClaimAndDiscardOfAnEagerMessageStillArriving) {
  NetOptions o;
  o.config.window_packets = 8;
  ClaimThenDiscard(o, 60'000);
}

TEST(PeekTest, ClaimAndDiscardOfARendezvousMessage) {
  NetOptions o;
  ClaimThenDiscard(o, 400'000);
}

TEST(RemovePeerTest, FailsItsOperationsAndItsIdGoesStale) {
  NetOptions o;
  o.nodes = 3;
  Net net(o);
  Endpoint& a = net.ep(0);
  // A peer that never answers: sends wait for its handshake.
  Address ghost = net.ep(1).address();
  ghost.udp_port = 6999;
  absl::StatusOr<PeerId> g = a.InsertPeer(ghost);
  ASSERT_TRUE(g.ok());
  const uint64_t v = 5;
  int s1, s2, r1;
  ASSERT_EQ(net.ep(0).Send({.dest = *g, .buf = &v, .len = 8, .context = &s1}), Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = *g, .buf = &v, .len = 8, .context = &s2}), Result::kOk);
  uint64_t in = 0;
  ASSERT_EQ(net.ep(0).PostRecv({.source = *g, .buf = &in, .len = 8, .context = &r1}), Result::kOk);
  for (int i = 0; i < 50; ++i) net.Step();
  const uint32_t send_free = a.SendSlotsFree();
  ASSERT_TRUE(a.RemovePeer(*g).ok());
  EXPECT_EQ(a.SendSlotsFree(), send_free + 2);
  std::vector<ErrorCompletion> err;
  Drain(net.ep(0), nullptr, &err);
  ASSERT_EQ(err.size(), 3u);
  for (const ErrorCompletion& e : err) {
    EXPECT_EQ(e.err, ECANCELED) << e.message;
    EXPECT_TRUE(e.op.context == &s1 || e.op.context == &s2 || e.op.context == &r1);
  }
  // The stale id names nothing, even once its slot is reused.
  const absl::StatusOr<PeerId> c = a.InsertPeer(net.ep(2).address());
  ASSERT_TRUE(c.ok());
  EXPECT_NE(*c, *g);
  EXPECT_EQ(c->slot(), g->slot()) << "the slot was reused";
  EXPECT_FALSE(a.PeerAddress(*g).has_value());
  EXPECT_FALSE(a.peer_stats(*g).has_value());
  EXPECT_EQ(net.ep(0).Send({.dest = *g, .buf = &v, .len = 8}), Result::kInvalid);
  EXPECT_EQ(net.ep(0).PostRecv({.source = *g, .buf = &in, .len = 8}), Result::kInvalid);
  EXPECT_EQ(a.RemovePeer(*g).code(), absl::StatusCode::kNotFound);
  // The newcomer works.
  ASSERT_EQ(net.ep(2).PostRecv({.buf = &in, .len = 8}), Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = *c, .buf = &v, .len = 8}), Result::kOk);
  std::vector<Completion> got;
  ASSERT_TRUE(WaitFor(net, 2, 1, &got, &err));
  EXPECT_EQ(in, 5u);
}

TEST(RemovePeerTest, ALivePeerCanBeRemovedAndInsertedAgain) {
  Net net(NetOptions{});
  PeerId to_b = net.Peer(0, 1);
  uint64_t in = 0, v = 1;
  ASSERT_EQ(net.ep(1).PostRecv({.buf = &in, .len = 8}), Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = &v, .len = 8}), Result::kOk);
  std::vector<Completion> got;
  std::vector<ErrorCompletion> err;
  ASSERT_TRUE(WaitFor(net, 1, 1, &got, &err));
  ASSERT_TRUE(net.RunUntil([&] { return net.ep(0).peer_stats(to_b)->queued_ops == 0; }, kSteps));
  ASSERT_TRUE(net.ep(0).RemovePeer(to_b).ok());
  const PeerId again = net.Peer(0, 1);
  EXPECT_NE(again, to_b);
  v = 2;
  ASSERT_EQ(net.ep(1).PostRecv({.buf = &in, .len = 8}), Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = again, .buf = &v, .len = 8}), Result::kOk);
  got.clear();
  ASSERT_TRUE(WaitFor(net, 1, 1, &got, &err));
  ASSERT_TRUE(err.empty()) << err[0].message;
  EXPECT_EQ(in, 2u);
  EXPECT_EQ(got[0].source, net.Peer(1, 0)) << "b's id for a is unchanged";
}

TEST(DscpTest, EveryPacketCarriesTheDscpSetAndBadValuesAreRejected) {
  Net net(NetOptions{});
  EXPECT_EQ(net.ep(0).SetDscp(64).code(), absl::StatusCode::kInvalidArgument);
  const PeerId to_b = net.Peer(0, 1);
  ASSERT_TRUE(net.ep(0).SetDscp(46).ok());
  int seen = 0, wrong = 0;
  net.tap(1).set_filter([&](const wire::View* v) {
    if (v != nullptr && v->flow.src_port == 5000) {
      ++seen;
      if (v->flow.dscp != 46) ++wrong;
    }
    return true;
  });
  uint64_t in = 0, v = 3;
  ASSERT_EQ(net.ep(1).PostRecv({.buf = &in, .len = 8}), Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = &v, .len = 8}), Result::kOk);
  std::vector<Completion> got;
  std::vector<ErrorCompletion> err;
  ASSERT_TRUE(WaitFor(net, 1, 1, &got, &err));
  EXPECT_GE(seen, 2) << "HELLO and DATA";
  EXPECT_EQ(wrong, 0);
}

NetOptions NoRoomReceiver() {
  NetOptions o;
  o.tick_ns = 10'000;
  o.config.peer_timeout_ns = 50'000'000;
  o.config.rnr_give_up_ns = 20'000'000;
  o.configure = [](int node, EndpointConfig* c) {
    if (node == 1) {
      c->max_unexpected_msgs = 2;
      c->unexpected_bytes = 8 * 1024;
      c->unexpected_chunk_bytes = 1024;
    }
  };
  return o;
}

TEST(RnrGiveUpTest, ASendTheReceiverNeverMakesRoomForFailsAndTheSessionGoesOn) {
  Net net(NoRoomReceiver());
  const PeerId to_b = net.Peer(0, 1);
  std::vector<std::vector<uint8_t>> out(5);
  SendPattern(net, to_b, &out[0], 40, 100);
  SendPattern(net, to_b, &out[1], 41, 100);
  SendPattern(net, to_b, &out[2], 42, 100);     // no unexpected entry left: refused
  SendPattern(net, to_b, &out[3], 43, 20'000);  // multi-packet, refused too
  std::vector<Completion> ok;
  std::vector<ErrorCompletion> err;
  const uint64_t start = net.clock().NowNs();
  ASSERT_TRUE(net.RunUntil(
      [&] {
        Drain(net.ep(0), &ok, &err);
        return err.size() == 2;
      },
      kSteps));
  EXPECT_GE(net.clock().NowNs() - start, 2 * 20'000'000u) << "each waited the give-up time";
  for (const ErrorCompletion& e : err) {
    EXPECT_EQ(e.err, ENOSPC);
    EXPECT_NE(std::strstr(e.message, "has posted no receive"), nullptr) << e.message;
  }
  EXPECT_EQ(net.ep(0).counters().rnr_give_ups, 2u);
  EXPECT_EQ(net.ep(0).counters().peer_timeouts, 0u);
  EXPECT_EQ(ok.size(), 2u) << "the two that fit the unexpected queue";
  // The session goes on: the two waiting arrive, then a new message.
  std::vector<uint8_t> in[3] = {std::vector<uint8_t>(100), std::vector<uint8_t>(100),
                                std::vector<uint8_t>(100)};
  for (auto& b : in) ASSERT_EQ(net.ep(1).PostRecv({.buf = b.data(), .len = 100}), Result::kOk);
  SendPattern(net, to_b, &out[4], 44, 100);
  std::vector<Completion> got;
  std::vector<ErrorCompletion> rerr;
  ASSERT_TRUE(WaitFor(net, 1, 3, &got, &rerr));
  ASSERT_TRUE(rerr.empty()) << rerr[0].message;
  EXPECT_EQ(testing::CheckPattern(40, in[0]), -1);
  EXPECT_EQ(testing::CheckPattern(41, in[1]), -1);
  EXPECT_EQ(testing::CheckPattern(44, in[2]), -1);
  EXPECT_EQ(net.ep(1).counters().protocol_errors, 0u);
  EXPECT_EQ(net.ep(0).counters().peer_resets + net.ep(1).counters().peer_resets, 0u);
  EXPECT_EQ(net.ep(0).counters().handshakes, 1u);
  ASSERT_TRUE(net.RunUntil([&] { return net.ep(0).peer_stats(to_b)->queued_ops == 0; }, kSteps));
  ok.clear();
  err.clear();
  Drain(net.ep(0), &ok, &err);
  EXPECT_TRUE(err.empty()) << "no second record for a given-up send";
}

TEST(RnrGiveUpTest, ConfigRejectsAGiveUpShorterThanTheFirstRetry) {
  EndpointConfig c;
  c.udp_port = 1;
  c.rnr_give_up_ns = c.rnr_retry_min_ns - 1;
  EXPECT_EQ(ValidateConfig(c).code(), absl::StatusCode::kInvalidArgument);
}

TEST(MacDiscoveryTest, APeerInsertedWithoutAMacIsFoundByABroadcastHello) {
  NetOptions o;
  o.nodes = 3;
  Net net(o);
  Address b = net.ep(1).address();
  b.mac = driver::MacAddress{};
  absl::StatusOr<PeerId> to_b = net.ep(0).InsertPeer(b);
  ASSERT_TRUE(to_b.ok());
  int broadcast_hellos = 0, unicast_after = 0, broadcast_data = 0;
  net.tap(1).set_filter([&](const wire::View* v) {
    if (v == nullptr || v->flow.src_port != 5000) return true;
    if (v->common.type == wire::PacketType::kHello && v->flow.dst_mac == driver::kBroadcastMac) {
      ++broadcast_hellos;
    } else if (v->common.type == wire::PacketType::kData) {
      if (v->flow.dst_mac == net.ep(1).address().mac) ++unicast_after;
      if (v->flow.dst_mac == driver::kBroadcastMac) ++broadcast_data;
    }
    return true;
  });
  uint64_t in = 0, v = 9;
  ASSERT_EQ(net.ep(1).PostRecv({.buf = &in, .len = 8}), Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = *to_b, .buf = &v, .len = 8}), Result::kOk);
  std::vector<Completion> got;
  std::vector<ErrorCompletion> err;
  ASSERT_TRUE(WaitFor(net, 1, 1, &got, &err));
  EXPECT_EQ(in, 9u);
  EXPECT_GE(broadcast_hellos, 1);
  EXPECT_GE(unicast_after, 1);
  EXPECT_EQ(broadcast_data, 0);
  EXPECT_EQ(net.ep(0).PeerAddress(*to_b)->mac, net.ep(1).address().mac) << "learned";
  EXPECT_GE(net.ep(2).counters().not_for_us_dropped, 1u) << "c heard the broadcast and dropped it";
}

TEST(MacDiscoveryTest, APeerThatSpeaksFirstTeachesItsMac) {
  Net net(NetOptions{});
  Address a = net.ep(0).address();
  a.mac = driver::MacAddress{};
  absl::StatusOr<PeerId> to_a = net.ep(1).InsertPeer(a);  // b knows a without its MAC
  ASSERT_TRUE(to_a.ok());
  int broadcast = 0;
  net.tap(0).set_filter([&](const wire::View* v) {
    // b's COOKIE to a's first HELLO goes to a's address as b knows it
    // (broadcast), never to the MAC a frame claiming it came from.
    if (v != nullptr && v->flow.dst_mac == driver::kBroadcastMac &&
        v->common.type != wire::PacketType::kCookie) {
      ++broadcast;
    }
    return true;
  });
  const PeerId to_b = net.Peer(0, 1);
  uint64_t in = 0, v = 4;
  ASSERT_EQ(net.ep(1).PostRecv({.buf = &in, .len = 8}), Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = &v, .len = 8}), Result::kOk);
  std::vector<Completion> got;
  std::vector<ErrorCompletion> err;
  ASSERT_TRUE(WaitFor(net, 1, 1, &got, &err));
  EXPECT_EQ(net.ep(1).PeerAddress(*to_a)->mac, net.ep(0).address().mac) << "from a's HELLO";
  // b answers a unicast.
  ASSERT_EQ(net.ep(0).PostRecv({.buf = &in, .len = 8}), Result::kOk);
  ASSERT_EQ(net.ep(1).Send({.dest = *to_a, .buf = &v, .len = 8}), Result::kOk);
  got.clear();
  ASSERT_TRUE(WaitFor(net, 0, 2, &got, &err));
  EXPECT_TRUE(err.empty());
  EXPECT_EQ(broadcast, 0);
}

TEST(RemovePeerTest, AMessageArrivingFromItFailsItsReceive) {
  NetOptions o;
  o.config.window_packets = 4;  // so that the message takes several round trips
  Net net(o);
  const PeerId to_b = net.Peer(0, 1);
  std::vector<uint8_t> out;
  SendPattern(net, to_b, &out, 50, 50'000);
  std::vector<uint8_t> in(50'000);
  int ctx;
  ASSERT_EQ(net.ep(1).PostRecv({.buf = in.data(), .len = in.size(), .context = &ctx}), Result::kOk);
  ASSERT_TRUE(net.RunUntil([&] { return net.ep(1).counters().rx_data_packets >= 2; }, kSteps));
  const PeerId b_to_a = net.Peer(1, 0);
  ASSERT_TRUE(net.ep(1).RemovePeer(b_to_a).ok());
  std::vector<Completion> got;
  std::vector<ErrorCompletion> err;
  Drain(net.ep(1), &got, &err);
  ASSERT_EQ(err.size(), 1u);
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(err[0].err, ECANCELED);
  EXPECT_EQ(err[0].op.context, &ctx);
  EXPECT_LT(err[0].op.len, in.size());
}

}  // namespace
}  // namespace bypass::rdm
