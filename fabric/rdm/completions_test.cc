// The Completions stage on its own: the record of a finished operation or
// receive, its errors, and the room reserved for them.
#include "fabric/rdm/completions.h"

#include <cerrno>
#include <cstdint>
#include <string>

#include "fabric/rdm/stage_rig.h"
#include "gtest/gtest.h"

namespace bypass::rdm {
namespace {

using testing::RigWithPeer;
using testing::StageRig;

// Room for max_send_ops + max_posted_recvs = 4 records, and max_send_ops = 2
// inject errors beyond them.
EndpointConfig SmallConfig() {
  EndpointConfig c = StageRig::DefaultConfig();
  c.max_send_ops = 2;
  c.max_posted_recvs = 2;
  return c;
}
constexpr uint32_t kCapacity = 4;
constexpr uint32_t kExtraErrors = 2;

// The application's send to peer pi.
SendOp Send(uint32_t pi, void* context, uint64_t len) {
  SendOp op;
  op.kind = OpKind::kMsg;
  op.peer = pi;
  op.context = context;
  op.comp_flags = kCompSend | kCompMsg;
  op.len = len;
  return op;
}

// An inject (no completion, no reservation) to peer pi.
SendOp Inject(uint32_t pi) {
  SendOp op = Send(pi, nullptr, 8);
  op.inject = true;
  return op;
}

// ---- Operations.

// A finished operation reports its context, flags, length and peer.
TEST(CompletionsTest, OpDoneReportsContextFlagsLengthAndSource) {
  auto [rig, pi] = RigWithPeer(SmallConfig());
  int context;
  ASSERT_TRUE(rig.completions.Reserve());
  rig.completions.OpDone(Send(pi, &context, 100));
  EXPECT_EQ(rig.completions.ready(), 1u);
  const Completion c = rig.ExpectOneCompletion(&context);
  EXPECT_EQ(c.flags, kCompSend | kCompMsg);
  EXPECT_EQ(c.len, 100u);
  EXPECT_EQ(c.source, rig.Id(pi));
  EXPECT_EQ(rig.completions.errors_ready(), 0u);
}

// An inject reports nothing when done; neither does an abandoned send,
// which reported its error already.
TEST(CompletionsTest, OpDoneReportsNothingForAnInjectOrAnAbandonedOp) {
  auto [rig, pi] = RigWithPeer(SmallConfig());
  rig.completions.OpDone(Inject(pi));
  int context;
  SendOp abandoned = Send(pi, &context, 10);
  abandoned.abandoned = true;
  rig.completions.OpDone(abandoned);
  EXPECT_EQ(rig.completions.ready(), 0u);
  EXPECT_EQ(rig.completions.errors_ready(), 0u);
  EXPECT_EQ(rig.ReserveAll(), kCapacity) << "no room was used";
}

// A failed operation's error names the peer, its incarnation and why, with
// the op's context and flags and no length; it counts in ops_failed.
TEST(CompletionsTest, OpFailedNamesThePeerAndCountsTheFailure) {
  auto [rig, pi] = RigWithPeer(SmallConfig());
  int context;
  ASSERT_TRUE(rig.completions.Reserve());
  rig.completions.OpFailed(Send(pi, &context, 100), ETIMEDOUT, "did not answer");
  EXPECT_EQ(rig.completions.ready(), 0u);
  const ErrorCompletion e = rig.ExpectOneError(ETIMEDOUT, &context);
  EXPECT_STREQ(e.message, "peer 10.0.0.2:6000 (incarnation 0x00002222) did not answer");
  EXPECT_EQ(e.op.flags, kCompSend | kCompMsg);
  EXPECT_EQ(e.op.len, 0u);
  EXPECT_EQ(e.op.source, rig.Id(pi));
  EXPECT_EQ(rig.ctx.counters.ops_failed, 1u);
}

// OpFailedWith reports the caller's message as it is, and counts too.
TEST(CompletionsTest, OpFailedWithKeepsItsMessage) {
  auto [rig, pi] = RigWithPeer(SmallConfig());
  ASSERT_TRUE(rig.completions.Reserve());
  rig.completions.OpFailedWith(Send(pi, nullptr, 5), EACCES, "refused by someone");
  const ErrorCompletion e = rig.ExpectOneError(EACCES, nullptr);
  EXPECT_STREQ(e.message, "refused by someone");
  EXPECT_EQ(e.op.len, 0u);
  EXPECT_EQ(rig.ctx.counters.ops_failed, 1u);
}

// An inject's error needs no reservation: it goes while there is extra
// room, and is counted as dropped when there is none; polling makes room.
TEST(CompletionsTest, AnInjectErrorGoesWithoutAReservationWhileThereIsExtraRoom) {
  auto [rig, pi] = RigWithPeer(SmallConfig());
  for (uint32_t i = 0; i < kExtraErrors; ++i) {
    rig.completions.OpFailed(Inject(pi), ECONNRESET, "restarted");
  }
  EXPECT_EQ(rig.completions.errors_ready(), kExtraErrors);
  EXPECT_EQ(rig.ctx.counters.inject_errors_dropped, 0u);
  EXPECT_EQ(rig.ReserveAll(), kCapacity) << "inject errors take no reserved room";

  rig.completions.OpFailed(Inject(pi), ECONNRESET, "restarted");
  EXPECT_EQ(rig.completions.errors_ready(), kExtraErrors);
  EXPECT_EQ(rig.ctx.counters.inject_errors_dropped, 1u);
  EXPECT_EQ(rig.ctx.counters.ops_failed, kExtraErrors + 1) << "a dropped error still failed";

  ErrorCompletion e[1];
  ASSERT_EQ(rig.completions.PollErrors(e), 1u);
  EXPECT_EQ(e[0].op.context, nullptr);
  EXPECT_FALSE(rig.completions.Reserve()) << "polling an inject error frees no reservation";
  rig.completions.OpFailed(Inject(pi), ECONNRESET, "restarted");
  EXPECT_EQ(rig.completions.errors_ready(), kExtraErrors);
  EXPECT_EQ(rig.ctx.counters.inject_errors_dropped, 1u) << "polling made room for one";
}

// ---- Receives.

// A message that fits reports receive, tags, remote data and the extra
// flags, its length, buffer, data, tag and source.
TEST(CompletionsTest, ReceivedReportsTheMessage) {
  auto [rig, pi] = RigWithPeer(SmallConfig());
  uint8_t buf[64];
  int context;
  ASSERT_TRUE(rig.completions.Reserve());
  const RecvRequest r{.buf = buf, .len = sizeof(buf), .context = &context, .tagged = true};
  const MessageInfo m{.total = 40, .tag = 0x77, .data = 0x99, .remote_data = true};
  rig.completions.Received(rig.Id(pi), r, m, kCompMultiRecv);
  const Completion c = rig.ExpectOneCompletion(&context);
  EXPECT_EQ(c.flags, kCompRecv | kCompMsg | kCompTagged | kCompRemoteData | kCompMultiRecv);
  EXPECT_EQ(c.len, 40u);
  EXPECT_EQ(c.buf, buf);
  EXPECT_EQ(c.data, 0x99u);
  EXPECT_EQ(c.tag, 0x77u);
  EXPECT_EQ(c.source, rig.Id(pi));
  EXPECT_EQ(rig.ctx.counters.truncated, 0u);
}

// A message longer than the receive is reported truncated: EMSGSIZE, the
// bytes received, and olen the bytes that did not fit.
TEST(CompletionsTest, ReceivedTruncatesALongerMessage) {
  auto [rig, pi] = RigWithPeer(SmallConfig());
  uint8_t buf[10];
  int context;
  ASSERT_TRUE(rig.completions.Reserve());
  const RecvRequest r{.buf = buf, .len = sizeof(buf), .context = &context};
  rig.completions.Received(rig.Id(pi), r, MessageInfo{.total = 25}, 0);
  EXPECT_EQ(rig.completions.ready(), 0u);
  const ErrorCompletion e = rig.ExpectOneError(EMSGSIZE, &context);
  EXPECT_EQ(e.olen, 15u);
  EXPECT_EQ(e.op.len, 10u);
  EXPECT_EQ(e.op.buf, buf);
  EXPECT_EQ(e.op.source, rig.Id(pi));
  EXPECT_NE(std::string(e.message).find("25 bytes"), std::string::npos) << e.message;
  EXPECT_EQ(rig.ctx.counters.truncated, 1u);
  EXPECT_EQ(rig.ctx.counters.ops_failed, 0u) << "a truncation is no failure";
}

// A discarding receive reports nothing and gives its reservation back.
TEST(CompletionsTest, ADiscardingReceiveGivesItsReservationBackAndReportsNothing) {
  auto [rig, pi] = RigWithPeer(SmallConfig());
  ASSERT_EQ(rig.ReserveAll(), kCapacity);
  const RecvRequest r{.context = &rig, .flags = kRecvPeek | kRecvDiscard};
  rig.completions.Received(rig.Id(pi), r, MessageInfo{.total = 1u << 20}, 0);
  EXPECT_EQ(rig.completions.ready(), 0u);
  EXPECT_EQ(rig.completions.errors_ready(), 0u);
  EXPECT_EQ(rig.ctx.counters.truncated, 0u);
  EXPECT_TRUE(rig.completions.Reserve()) << "its reservation is free again";
  EXPECT_FALSE(rig.completions.Reserve());
}

// A failed receive reports the bytes that landed; only a failure (not a
// cancel) counts in ops_failed.
TEST(CompletionsTest, ReceiveFailedCountsOnlyFailures) {
  auto [rig, pi] = RigWithPeer(SmallConfig());
  uint8_t buf[64];
  int context;
  ASSERT_TRUE(rig.completions.Reserve());
  ASSERT_TRUE(rig.completions.Reserve());
  const RecvRequest r{.buf = buf, .len = sizeof(buf), .context = &context, .tagged = true};
  const MessageInfo m{.total = 64, .tag = 3};
  const PeerId src = rig.Id(pi);
  rig.completions.ReceiveFailed(src, r, m, 20, 0, ECONNRESET, "restarted", /*failure=*/true);
  rig.completions.ReceiveFailed(src, r, m, 0, 0, ECANCELED, "canceled", /*failure=*/false);
  ErrorCompletion e[3];
  ASSERT_EQ(rig.completions.PollErrors(e), 2u);
  EXPECT_EQ(e[0].err, ECONNRESET);
  EXPECT_EQ(e[0].op.len, 20u);
  EXPECT_EQ(e[0].op.flags, kCompRecv | kCompMsg | kCompTagged);
  EXPECT_EQ(e[0].op.tag, 3u);
  EXPECT_EQ(e[0].op.context, &context);
  EXPECT_STREQ(e[0].message, "restarted");
  EXPECT_EQ(e[1].err, ECANCELED);
  EXPECT_EQ(rig.ctx.counters.ops_failed, 1u);
}

// ---- Room.

// Reserve fails once capacity records are reserved or unread; polling a
// record (or an error) frees its room.
TEST(CompletionsTest, ReserveFailsAtCapacityAndPollingFreesTheRoom) {
  auto [rig, pi] = RigWithPeer(SmallConfig());
  for (uint32_t i = 0; i < kCapacity; ++i) ASSERT_TRUE(rig.completions.Reserve()) << i;
  EXPECT_FALSE(rig.completions.Reserve());
  rig.completions.OpDone(Send(pi, nullptr, 1));
  rig.completions.OpFailed(Send(pi, nullptr, 1), ECONNRESET, "restarted");
  EXPECT_FALSE(rig.completions.Reserve()) << "an unread record still holds its room";
  ASSERT_EQ(rig.Drain().size(), 1u);
  EXPECT_TRUE(rig.completions.Reserve());
  EXPECT_FALSE(rig.completions.Reserve());
  ASSERT_EQ(rig.DrainErrors().size(), 1u);
  EXPECT_TRUE(rig.completions.Reserve());
  EXPECT_FALSE(rig.completions.Reserve());
  rig.completions.Unreserve();
  EXPECT_TRUE(rig.completions.Reserve()) << "Unreserve gives one back";
}

}  // namespace
}  // namespace bypass::rdm
