// Atomics on the engine (Endpoint::Atomic, PROTOCOL.md "Atomics"): each
// executed exactly once at the target under loss, duplication and
// reordering (4 peers adding 1 a thousand times to one counter; fetch-adds
// whose fetched values are all distinct), a lost answer resent from the
// target's copy rather than executed again, a peer's atomics applied in
// the order posted, and the target's refusals completing in error at the
// initiator with nothing touched.
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

constexpr int kInitiators = 4;
constexpr int kPerInitiator = 1000;

class AtomicTest : public ::testing::Test {
 protected:
  // Node 0 is the target with one 64-byte region; nodes 1.. initiate.
  void Make(int nodes, double drop, double dup, uint32_t access) {
    NetOptions o;
    o.nodes = nodes;
    o.config.rma_events = true;
    if (drop > 0 || dup > 0) {
      o.faults.drop = drop;
      o.faults.dup = dup;
      o.faults.reorder = 0.05;
      o.faults.seed = 19;
    }
    net_ = std::make_unique<Net>(o);
    region_.assign(8, 0);
    absl::StatusOr<uint64_t> k = net_->ep(0).RegisterRegion(
        {.addr = region_.data(), .len = region_.size() * 8, .access = access, .context = &region_});
    ASSERT_TRUE(k.ok()) << k.status();
    key_ = *k;
  }

  // Posts n atomics from each initiator (make(i, j) builds the j-th of
  // node i), keeping up to 16 in flight each, until every one completed;
  // the target's completions (events) are counted.
  void RunAll(int n, const std::function<AtomicRequest(int, int)>& make) {
    std::vector<int> posted(net_->options().nodes, 0), done(net_->options().nodes, 0);
    auto all_done = [&] {
      for (int i = 1; i < net_->options().nodes; ++i) {
        if (done[i] < n) return false;
      }
      return true;
    };
    for (uint64_t step = 0; step < 20'000'000 && !all_done(); ++step) {
      for (int i = 1; i < net_->options().nodes; ++i) {
        while (posted[i] < n && posted[i] - done[i] < 16) {
          const Result res = net_->ep(i).Atomic(make(i, posted[i]));
          if (res == Result::kAgain) break;
          ASSERT_EQ(res, Result::kOk);
          ++posted[i];
        }
      }
      net_->Step();
      for (int i = 0; i < net_->options().nodes; ++i) {
        std::vector<Completion> ok;
        std::vector<ErrorCompletion> err;
        Drain(net_->ep(i), &ok, &err);
        ASSERT_TRUE(err.empty()) << err[0].message;
        if (i == 0) {
          for (const Completion& c : ok) {
            EXPECT_EQ(c.context, &region_);
            EXPECT_TRUE(c.flags & kCompAtomic);
            ++events_;
          }
        } else {
          for (const Completion& c : ok) {
            EXPECT_TRUE(c.flags & kCompAtomic);
            EXPECT_EQ(c.len, 8u);
          }
          done[i] += static_cast<int>(ok.size());
        }
      }
    }
    ASSERT_TRUE(all_done()) << "atomics did not complete";
  }

  // The errno of the one atomic r (which must fail), after it completed.
  int FailureOf(const AtomicRequest& r) {
    EXPECT_EQ(net_->ep(1).Atomic(r), Result::kOk);
    int err = 0;
    EXPECT_TRUE(net_->RunUntil(
        [&] {
          std::vector<Completion> ok;
          std::vector<ErrorCompletion> errs;
          Drain(net_->ep(1), &ok, &errs);
          EXPECT_TRUE(ok.empty());
          if (!errs.empty()) err = errs[0].err;
          Drain(net_->ep(0), &ok, &errs);
          return err != 0;
        },
        1'000'000));
    return err;
  }

  std::unique_ptr<Net> net_;
  std::vector<uint64_t> region_;
  uint64_t key_ = 0;
  size_t events_ = 0;
};

const uint64_t kOne = 1;

TEST_F(AtomicTest, FourPeersSumExactlyOnceUnderLossAndDuplication) {
  Make(1 + kInitiators, 0.05, 0.05, kAccessRemoteWrite);
  RunAll(kPerInitiator, [&](int i, int) {
    return AtomicRequest{.dest = net_->Peer(i, 0), .op = AtomicOp::kSum,
                         .type = AtomicType::kUint64, .count = 1, .operand = &kOne,
                         .key = key_};
  });
  EXPECT_EQ(region_[0], uint64_t{kInitiators * kPerInitiator});
  EXPECT_EQ(net_->ep(0).counters().atomic_served, uint64_t{kInitiators * kPerInitiator});
  EXPECT_EQ(events_, size_t{kInitiators * kPerInitiator});  // FI_RMA_EVENT: once each
  uint64_t retransmits = 0;
  for (int i = 0; i <= kInitiators; ++i) {
    retransmits += net_->ep(i).counters().retransmits_fast +
                   net_->ep(i).counters().retransmits_timeout;
  }
  EXPECT_GT(retransmits, 0u);  // the faults did hit
  EXPECT_GT(net_->ep(0).counters().duplicates_dropped, 0u);
}

TEST_F(AtomicTest, FetchAddsUnderLossFetchDistinctValues) {
  Make(1 + kInitiators, 0.05, 0.05, kAccessRemoteRead | kAccessRemoteWrite);
  std::vector<uint64_t> fetched(kInitiators * kPerInitiator, UINT64_MAX);
  RunAll(kPerInitiator, [&](int i, int j) {
    return AtomicRequest{.dest = net_->Peer(i, 0), .op = AtomicOp::kSum,
                         .type = AtomicType::kUint64, .count = 1, .operand = &kOne,
                         .result = &fetched[(i - 1) * kPerInitiator + j], .fetch = true,
                         .key = key_};
  });
  EXPECT_EQ(region_[0], uint64_t{kInitiators * kPerInitiator});
  std::sort(fetched.begin(), fetched.end());
  for (size_t v = 0; v < fetched.size(); ++v) ASSERT_EQ(fetched[v], v);
}

TEST_F(AtomicTest, LostAnswerIsResentNotExecutedAgain) {
  Make(2, 0, 0, kAccessRemoteRead | kAccessRemoteWrite);
  // The first three answers of the target never arrive.
  int dropped = 0;
  net_->tap(1).set_filter([&](const wire::View* v) {
    if (v != nullptr && v->common.type == wire::PacketType::kRma &&
        v->rma.op == wire::RmaOp::kAtomicResp && dropped < 3) {
      ++dropped;
      return false;
    }
    return true;
  });
  uint64_t old = 99;
  const uint64_t five = 5;
  ASSERT_EQ(net_->ep(1).Atomic({.dest = net_->Peer(1, 0), .op = AtomicOp::kSum,
                                .type = AtomicType::kUint64, .count = 1, .operand = &five,
                                .result = &old, .fetch = true, .key = key_}),
            Result::kOk);
  std::vector<Completion> ok;
  std::vector<ErrorCompletion> err;
  ASSERT_TRUE(net_->RunUntil(
      [&] {
        Drain(net_->ep(1), &ok, &err);
        return !ok.empty() || !err.empty();
      },
      1'000'000));
  ASSERT_TRUE(err.empty()) << err[0].message;
  EXPECT_EQ(dropped, 3);
  EXPECT_EQ(old, 0u);  // the value from before the one execution
  EXPECT_EQ(region_[0], 5u);
  EXPECT_EQ(net_->ep(0).counters().atomic_served, 1u);
}

TEST_F(AtomicTest, PeersAtomicsApplyInPostedOrder) {
  // Write, then fetch-add, then compare-swap, then read, posted at once
  // under loss: each sees the one before (ATOMIC_RAW, WAR, WAW, RAR).
  Make(2, 0.1, 0.05, kAccessRemoteRead | kAccessRemoteWrite);
  const uint64_t seven = 7, three = 3, expect10 = 10, hundred = 100;
  uint64_t fetched_add = 0, fetched_cas = 0, read = 0;
  const PeerId to = net_->Peer(1, 0);
  ASSERT_EQ(net_->ep(1).Atomic({.dest = to, .op = AtomicOp::kWrite, .type = AtomicType::kUint64,
                                .count = 1, .operand = &seven, .key = key_}),
            Result::kOk);
  ASSERT_EQ(net_->ep(1).Atomic({.dest = to, .op = AtomicOp::kSum, .type = AtomicType::kUint64,
                                .count = 1, .operand = &three, .result = &fetched_add,
                                .fetch = true, .key = key_}),
            Result::kOk);
  ASSERT_EQ(net_->ep(1).Atomic({.dest = to, .op = AtomicOp::kCswap, .type = AtomicType::kUint64,
                                .count = 1, .operand = &hundred, .compare = &expect10,
                                .result = &fetched_cas, .fetch = true, .key = key_}),
            Result::kOk);
  ASSERT_EQ(net_->ep(1).Atomic({.dest = to, .op = AtomicOp::kRead, .type = AtomicType::kUint64,
                                .count = 1, .result = &read, .fetch = true, .key = key_}),
            Result::kOk);
  size_t done = 0;
  ASSERT_TRUE(net_->RunUntil(
      [&] {
        std::vector<Completion> ok;
        std::vector<ErrorCompletion> err;
        Drain(net_->ep(1), &ok, &err);
        EXPECT_TRUE(err.empty());
        done += ok.size();
        Drain(net_->ep(0), &ok, &err);
        return done == 4;
      },
      2'000'000));
  EXPECT_EQ(fetched_add, 7u);
  EXPECT_EQ(fetched_cas, 10u);
  EXPECT_EQ(read, 100u);
  EXPECT_EQ(region_[0], 100u);
}

TEST_F(AtomicTest, TargetRefusalsFailAtInitiatorAndTouchNothing) {
  Make(2, 0, 0, kAccessRemoteWrite);  // no remote read: fetching atomics are refused
  region_[0] = 42;
  uint64_t old = 0;
  const PeerId to = net_->Peer(1, 0);
  AtomicRequest fetch{.dest = to, .op = AtomicOp::kSum, .type = AtomicType::kUint64, .count = 1,
                      .operand = &kOne, .result = &old, .fetch = true, .key = key_};
  EXPECT_EQ(FailureOf(fetch), EACCES);
  AtomicRequest bad_key{.dest = to, .op = AtomicOp::kSum, .type = AtomicType::kUint64,
                        .count = 1, .operand = &kOne, .key = key_ + 1};
  EXPECT_EQ(FailureOf(bad_key), EKEYREJECTED);
  AtomicRequest out{.dest = to, .op = AtomicOp::kSum, .type = AtomicType::kUint64, .count = 2,
                    .operand = region_.data(), .addr = 7 * 8, .key = key_};
  EXPECT_EQ(FailureOf(out), EFAULT);
  EXPECT_EQ(region_[0], 42u);
  EXPECT_EQ(region_[7], 0u);
  EXPECT_EQ(net_->ep(0).counters().atomic_served, 0u);
}

TEST_F(AtomicTest, PostRefusesWhatNoTargetCouldRun) {
  Make(2, 0, 0, kAccessRemoteWrite);
  const PeerId to = net_->Peer(1, 0);
  const double d = 1;
  uint64_t res = 0;
  // Bitwise on a double: not defined.
  EXPECT_EQ(net_->ep(1).Atomic({.dest = to, .op = AtomicOp::kBor, .type = AtomicType::kDouble,
                                .count = 1, .operand = &d, .key = key_}),
            Result::kInvalid);
  // A base READ, a compare without its compare operand, a fetching inject.
  EXPECT_EQ(net_->ep(1).Atomic({.dest = to, .op = AtomicOp::kRead, .type = AtomicType::kUint64,
                                .count = 1, .key = key_}),
            Result::kInvalid);
  EXPECT_EQ(net_->ep(1).Atomic({.dest = to, .op = AtomicOp::kCswap, .type = AtomicType::kUint64,
                                .count = 1, .operand = &kOne, .result = &res, .fetch = true,
                                .key = key_}),
            Result::kInvalid);
  EXPECT_EQ(net_->ep(1).Atomic({.dest = to, .op = AtomicOp::kSum, .type = AtomicType::kUint64,
                                .count = 1, .operand = &kOne, .result = &res, .fetch = true,
                                .key = key_, .flags = kAtomicInject}),
            Result::kInvalid);
  std::vector<uint64_t> many(kMaxAtomicBytes / 8 + 1);
  EXPECT_EQ(net_->ep(1).Atomic({.dest = to, .op = AtomicOp::kSum, .type = AtomicType::kUint64,
                                .count = static_cast<uint32_t>(many.size()),
                                .operand = many.data(), .key = key_}),
            Result::kTooLong);
}

}  // namespace
}  // namespace bypass::rdm
