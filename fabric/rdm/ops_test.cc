#include "fabric/rdm/ops.h"

#include <cstdint>

#include "fabric/rdm/stage_rig.h"
#include "gtest/gtest.h"

namespace bypass::rdm {
namespace {

// The table says what every kind does; these are the rules the stages rely on.
TEST(OpTraitsTest, TheTableIsConsistent) {
  for (size_t k = 0; k < kOpKinds; ++k) {
    const OpTraits& t = kOpTraits[k];
    SCOPED_TRACE(t.name);
    // Only the application's ops report to it; only its messages are given up.
    EXPECT_EQ(t.on_fail == OnFail::kReport, t.user);
    EXPECT_TRUE(!t.may_give_up || t.user);
    // What jumps the queue is never held behind a rendezvous request.
    EXPECT_FALSE(t.jumps_queue && t.holds_stream);
    // The engine's answers end once acknowledged; its pulls wait for data.
    EXPECT_TRUE(t.user || t.after_ack != AfterAck::kComplete);
  }
  EXPECT_TRUE(Traits(OpKind::kRndvRequest).holds_stream);
  EXPECT_TRUE(Traits(OpKind::kRndvData).jumps_queue);
  EXPECT_EQ(Traits(OpKind::kPull).on_fail, OnFail::kFailReceive);
}

TEST(OpTableTest, SlotsGenerationsRefsAndCounts) {
  EndpointConfig c = testing::StageRig::DefaultConfig();
  c.max_send_ops = 2;
  c.max_rma_ops = 2;
  Context ctx(c, testing::StageRig::Device(), 1472, 1, 1, 16);
  OpTable t(ctx, 2, 2, 64);
  const uint32_t a = t.Alloc(OpKind::kMsg);
  const uint32_t b = t.Alloc(OpKind::kWrite);
  EXPECT_TRUE(t.IsUser(a));
  EXPECT_TRUE(t.IsUser(b));
  EXPECT_EQ(t.Alloc(OpKind::kRead), kNone) << "the user's slots are taken";
  EXPECT_EQ(t.user_free(), 0u);
  const uint32_t e = t.Alloc(OpKind::kPull);
  ASSERT_NE(e, kNone) << "the engine's slots are its own";
  EXPECT_FALSE(t.IsUser(e));
  EXPECT_EQ(t.live(OpKind::kPull), 1u);
  // An answer names an op by slot and generation; once the op ends, the
  // name is stale even when the slot is reused.
  const uint32_t id = t.RmaId(e);
  EXPECT_EQ(t.FromRmaId(id), e);
  uint32_t reads = 1;
  t[e].ref = &reads;
  EXPECT_FALSE(ctx.TakeFreed());
  t.Free(e);
  EXPECT_EQ(reads, 0u) << "the ref it held is released";
  EXPECT_TRUE(ctx.TakeFreed()) << "a freed engine op lets refused peers retry";
  EXPECT_EQ(t.live(OpKind::kPull), 0u);
  EXPECT_EQ(t.FromRmaId(id), kNone);
  const uint32_t again = t.Alloc(OpKind::kResponse);
  EXPECT_EQ(again, e);
  EXPECT_EQ(t.FromRmaId(id), kNone) << "the reused slot has a new generation";
  EXPECT_EQ(t[again].state, OpState::kIdle);
  EXPECT_EQ(t[again].ref, nullptr) << "a fresh op";
  t.SetKind(a, OpKind::kRndvData);
  EXPECT_EQ(t.live(OpKind::kMsg), 0u);
  EXPECT_EQ(t.live(OpKind::kRndvData), 1u);
  EXPECT_EQ(t.FromRmaId(0xffffffffu), kNone);
}

}  // namespace
}  // namespace bypass::rdm
