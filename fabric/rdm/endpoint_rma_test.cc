// RMA reads and writes between two endpoints on loopback: data lands where
// asked, writedata completes at the target, inject writes complete nowhere,
// and every refused access fails at the initiator with its errno while the
// target's memory stays byte-identical.
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fabric/rdm/rdm.h"
#include "fabric/rdm/engine.h"
#include "fabric/rdm/test_util.h"
#include "gtest/gtest.h"

namespace bypass::rdm {
namespace {

using testing::Drain;
using testing::Net;
using testing::NetOptions;

// Node 0 initiates, node 1 is the target with one region.
class RmaTest : public ::testing::Test {
 protected:
  void SetUp() override { Make(NetOptions{}); }

  void Make(NetOptions o) {
    net_ = std::make_unique<Net>(o);
    to_target_ = net_->Peer(0, 1);
    to_init_ = net_->Peer(1, 0);
    region_.assign(64 * 1024, 0);
    testing::FillPattern(77, absl::MakeSpan(region_));
  }

  Endpoint& init() { return net_->ep(0); }
  Endpoint& target() { return net_->ep(1); }

  uint64_t Register(uint32_t access, uint64_t base = 0, std::optional<uint64_t> key = {}) {
    absl::StatusOr<uint64_t> k = target().RegisterRegion(
        {.addr = region_.data(),
         .len = region_.size(),
         .access = access,
         .base = base,
         .key = key,
         .context = &region_});
    EXPECT_TRUE(k.ok()) << k.status();
    return k.ok() ? *k : 0;
  }

  // Steps until the initiator has one completion or error (and the target
  // `target_ok` completions); returns false if it never came.
  bool RunOne(size_t target_ok = 0) {
    return net_->RunUntil(
        [&] {
          Drain(init(), &ok_, &err_);
          Drain(target(), &tok_, &terr_);
          return ok_.size() + err_.size() >= 1 && tok_.size() >= target_ok;
        },
        200'000);
  }

  // The initiator's one error, with the target's memory untouched.
  void ExpectRefused(int err, const std::string& words) {
    const std::vector<uint8_t> before = region_;
    ASSERT_TRUE(RunOne());
    EXPECT_TRUE(ok_.empty());
    ASSERT_EQ(err_.size(), 1u);
    EXPECT_EQ(err_[0].err, err) << err_[0].message;
    EXPECT_NE(std::string(err_[0].message).find(words), std::string::npos) << err_[0].message;
    EXPECT_NE(std::string(err_[0].message).find("key 0x"), std::string::npos) << err_[0].message;
    EXPECT_TRUE(err_[0].op.flags & kCompRma);
    // Let anything late land, then compare every byte.
    for (int i = 0; i < 2000; ++i) net_->Step();
    EXPECT_TRUE(region_ == before) << "the target's memory changed";
    EXPECT_TRUE(tok_.empty());
    EXPECT_GE(target().counters().rma_refused, 1u);
    EXPECT_EQ(init().counters().rma_errors, 1u);
  }

  std::unique_ptr<Net> net_;
  PeerId to_target_, to_init_;
  std::vector<uint8_t> region_;
  std::vector<Completion> ok_, tok_;
  std::vector<ErrorCompletion> err_, terr_;
};

TEST_F(RmaTest, WriteLandsAndCompletesAfterTheTargetApplied) {
  const uint64_t key = Register(kAccessRemoteWrite);
  std::vector<uint8_t> src(20'000);
  testing::FillPattern(5, absl::MakeSpan(src));
  int ctx;
  ASSERT_EQ(init().Write({.dest = to_target_,
                          .buf = src.data(),
                          .len = src.size(),
                          .addr = 1000,
                          .key = key,
                          .context = &ctx}),
            Result::kOk);
  ASSERT_TRUE(RunOne());
  ASSERT_TRUE(err_.empty()) << err_[0].message;
  ASSERT_EQ(ok_.size(), 1u);
  EXPECT_EQ(ok_[0].context, &ctx);
  EXPECT_EQ(ok_[0].flags, kCompRma | kCompWrite);
  EXPECT_EQ(ok_[0].len, src.size());
  // By the time the initiator knows, the bytes are there.
  EXPECT_EQ(std::memcmp(region_.data() + 1000, src.data(), src.size()), 0);
  std::vector<uint8_t> rest(region_.size());
  testing::FillPattern(77, absl::MakeSpan(rest));
  EXPECT_EQ(std::memcmp(region_.data(), rest.data(), 1000), 0);
  EXPECT_EQ(std::memcmp(region_.data() + 21'000, rest.data() + 21'000, region_.size() - 21'000),
            0);
  EXPECT_TRUE(tok_.empty()) << "no target completion without remote data";
  EXPECT_EQ(target().counters().rma_served, 1u);
}

// An answer names its op by slot and the slot's generation, and echoes the
// op's key and length: one that names an op that has ended (its slot reused
// by another) or echoes another key or length is dropped as a protocol
// error, not taken for the op now in the slot. Before, rma_id was the bare
// slot and the echo was not checked.
TEST_F(RmaTest, AnAnswerToAnEndedOpOrAnotherKeyIsNotTaken) {
  const uint64_t key = Register(kAccessRemoteWrite);
  std::vector<uint8_t> src(3000);
  testing::FillPattern(5, absl::MakeSpan(src));
  std::vector<uint32_t> ids;  // the WRITEs' rma_id, as the target sees them
  net_->tap(1).set_filter([&](const wire::View* v) {
    if (v != nullptr && v->common.type == wire::PacketType::kRma && v->rma.offset == 0 &&
        v->rma.op == wire::RmaOp::kWrite) {
      ids.push_back(v->rma.rma_id);
    }
    return true;
  });
  int ctx1, ctx2, ctx3;
  const auto write = [&](void* ctx) {
    return init().Write({.dest = to_target_,
                         .buf = src.data(),
                         .len = src.size(),
                         .addr = 100,
                         .key = key,
                         .context = ctx});
  };
  ASSERT_EQ(write(&ctx1), Result::kOk);
  ASSERT_TRUE(RunOne());
  ASSERT_EQ(ok_.size(), 1u);
  ASSERT_EQ(ids.size(), 1u);
  // The next write takes the same slot; its answer comes back under the
  // first one's name.
  const uint32_t stale = ids[0];
  net_->tap(0).set_rewrite([&](wire::View* v) {
    if (v->common.type != wire::PacketType::kRma || v->rma.op != wire::RmaOp::kResponse) {
      return false;
    }
    v->rma.rma_id = stale;
    return true;
  });
  ASSERT_EQ(write(&ctx2), Result::kOk);
  for (int i = 0; i < 20'000; ++i) net_->Step();
  Drain(init(), &ok_, &err_);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[1] & ((1u << 21) - 1), ids[0] & ((1u << 21) - 1)) << "the slot is reused";
  EXPECT_EQ(ok_.size(), 1u) << "the second write completed on the first one's answer";
  EXPECT_TRUE(err_.empty());
  EXPECT_GE(init().counters().protocol_errors, 1u);
  // A third write (another slot) whose answer echoes another key.
  net_->tap(0).set_rewrite([&](wire::View* v) {
    if (v->common.type != wire::PacketType::kRma || v->rma.op != wire::RmaOp::kResponse) {
      return false;
    }
    v->rma.key ^= 1;
    return true;
  });
  const uint64_t errors = init().counters().protocol_errors;
  ASSERT_EQ(write(&ctx3), Result::kOk);
  for (int i = 0; i < 20'000; ++i) net_->Step();
  Drain(init(), &ok_, &err_);
  EXPECT_EQ(ok_.size(), 1u) << "the third write completed on an answer about another key";
  EXPECT_GT(init().counters().protocol_errors, errors);
}

TEST_F(RmaTest, ReadStreamsTheRegionBack) {
  const uint64_t base = 0x7f0000001000;  // virtual addresses (FI_MR_VIRT_ADDR)
  const uint64_t key = Register(kAccessRemoteRead, base);
  std::vector<uint8_t> dst(30'000, 0xee);
  int ctx;
  ASSERT_EQ(init().Read({.dest = to_target_,
                         .buf = dst.data(),
                         .len = dst.size(),
                         .addr = base + 333,
                         .key = key,
                         .context = &ctx}),
            Result::kOk);
  ASSERT_TRUE(RunOne());
  ASSERT_TRUE(err_.empty()) << err_[0].message;
  ASSERT_EQ(ok_.size(), 1u);
  EXPECT_EQ(ok_[0].flags, kCompRma | kCompRead);
  EXPECT_EQ(ok_[0].len, dst.size());
  EXPECT_EQ(std::memcmp(dst.data(), region_.data() + 333, dst.size()), 0);
  // The region is free to go once the answer is acknowledged.
  ASSERT_TRUE(net_->RunUntil([&] { return target().DeregisterRegion(key).ok(); }, 10'000));
}

TEST_F(RmaTest, WriteDataCompletesAtTheTargetToo) {
  const uint64_t key = Register(kAccessRemoteWrite | kAccessRemoteRead);
  const char msg[] = "remote write with data";
  ASSERT_EQ(init().Write({.dest = to_target_,
                          .buf = const_cast<char*>(msg),
                          .len = sizeof(msg),
                          .addr = 64,
                          .key = key,
                          .data = 0xfeedface,
                          .flags = kRmaRemoteData}),
            Result::kOk);
  ASSERT_TRUE(RunOne(1));
  ASSERT_EQ(ok_.size(), 1u);
  ASSERT_EQ(tok_.size(), 1u);
  EXPECT_EQ(tok_[0].flags, kCompRma | kCompRemoteWrite | kCompRemoteData);
  EXPECT_EQ(tok_[0].data, 0xfeedfaceu);
  EXPECT_EQ(tok_[0].len, sizeof(msg));
  EXPECT_EQ(tok_[0].context, &region_);
  EXPECT_EQ(tok_[0].buf, region_.data() + 64);
  EXPECT_EQ(tok_[0].source, to_init_);
  EXPECT_EQ(std::memcmp(region_.data() + 64, msg, sizeof(msg)), 0);
}

TEST_F(RmaTest, InjectWriteCopiesAtOnceAndCompletesNowhere) {
  const uint64_t key = Register(kAccessRemoteWrite);
  uint8_t src[100];
  std::memset(src, 0x5a, sizeof(src));
  ASSERT_EQ(init().Write({.dest = to_target_,
                          .buf = src,
                          .len = sizeof(src),
                          .addr = 0,
                          .key = key,
                          .flags = kRmaInject}),
            Result::kOk);
  std::memset(src, 0, sizeof(src));  // copied already
  ASSERT_TRUE(net_->RunUntil([&] { return region_[99] == 0x5a; }, 100'000));
  for (int i = 0; i < 1000; ++i) net_->Step();
  Drain(init(), &ok_, &err_);
  EXPECT_TRUE(ok_.empty());
  EXPECT_TRUE(err_.empty());
  for (int i = 0; i < 100; ++i) EXPECT_EQ(region_[i], 0x5a) << i;
  // Longer than inject_size: refused at post.
  std::vector<uint8_t> big(init().config().inject_size + 1);
  EXPECT_EQ(init().Write({.dest = to_target_,
                          .buf = big.data(),
                          .len = big.size(),
                          .key = key,
                          .flags = kRmaInject}),
            Result::kTooLong);
}

TEST_F(RmaTest, InjectWriteErrorGoesToTheErrorQueue) {
  const uint64_t key = Register(kAccessRemoteRead);
  uint8_t src[16] = {1};
  ASSERT_EQ(init().Write({.dest = to_target_,
                          .buf = src,
                          .len = sizeof(src),
                          .key = key,
                          .flags = kRmaInject}),
            Result::kOk);
  ExpectRefused(EACCES, "does not grant");
}

TEST_F(RmaTest, ZeroLengthWriteAndRead) {
  const uint64_t key = Register(kAccessRemoteWrite | kAccessRemoteRead);
  const std::vector<uint8_t> before = region_;
  ASSERT_EQ(init().Write({.dest = to_target_, .len = 0, .addr = region_.size(), .key = key}),
            Result::kOk);
  ASSERT_TRUE(RunOne());
  ASSERT_EQ(ok_.size(), 1u);
  EXPECT_EQ(ok_[0].len, 0u);
  ok_.clear();
  ASSERT_EQ(init().Read({.dest = to_target_, .len = 0, .addr = 5, .key = key}), Result::kOk);
  ASSERT_TRUE(RunOne());
  ASSERT_EQ(ok_.size(), 1u);
  EXPECT_EQ(ok_[0].flags, kCompRma | kCompRead);
  EXPECT_TRUE(region_ == before);
}

TEST_F(RmaTest, BadKey) {
  const uint64_t key = Register(kAccessRemoteWrite);
  std::vector<uint8_t> src(5000, 1);
  ASSERT_EQ(init().Write({.dest = to_target_, .buf = src.data(), .len = src.size(), .key = key ^ 1}),
            Result::kOk);
  ExpectRefused(EKEYREJECTED, "no region with this key");
}

TEST_F(RmaTest, OutOfRangePastTheEnd) {
  const uint64_t key = Register(kAccessRemoteWrite);
  // The first 3000 bytes would fit; the last 1 does not: nothing is written.
  std::vector<uint8_t> src(4000, 1);
  ASSERT_EQ(init().Write({.dest = to_target_,
                          .buf = src.data(),
                          .len = src.size(),
                          .addr = region_.size() - 3999,
                          .key = key}),
            Result::kOk);
  ExpectRefused(EFAULT, "outside the region");
}

TEST_F(RmaTest, OutOfRangeBeforeTheStart) {
  const uint64_t key = Register(kAccessRemoteRead | kAccessRemoteWrite, /*base=*/0x10000);
  std::vector<uint8_t> src(100, 1);
  ASSERT_EQ(init().Write({.dest = to_target_,
                          .buf = src.data(),
                          .len = src.size(),
                          .addr = 0x10000 - 1,
                          .key = key}),
            Result::kOk);
  ExpectRefused(EFAULT, "outside the region");
}

TEST_F(RmaTest, ReadOutOfRangeAndHugeLength) {
  const uint64_t key = Register(kAccessRemoteRead);
  std::vector<uint8_t> dst(100, 0xee);
  // addr + len wraps around 2^64 if computed naively.
  ASSERT_EQ(init().Read({.dest = to_target_,
                         .buf = dst.data(),
                         .len = dst.size(),
                         .addr = UINT64_MAX - 10,
                         .key = key}),
            Result::kOk);
  ExpectRefused(EFAULT, "outside the region");
  for (uint8_t b : dst) ASSERT_EQ(b, 0xee);
}

TEST_F(RmaTest, MissingReadRight) {
  const uint64_t key = Register(kAccessRemoteWrite);
  std::vector<uint8_t> dst(100, 0xee);
  ASSERT_EQ(init().Read({.dest = to_target_, .buf = dst.data(), .len = dst.size(), .key = key}),
            Result::kOk);
  ExpectRefused(EACCES, "does not grant");
  EXPECT_EQ(err_[0].op.flags, kCompRma | kCompRead);
  for (uint8_t b : dst) ASSERT_EQ(b, 0xee);
}

TEST_F(RmaTest, MissingWriteRight) {
  const uint64_t key = Register(kAccessRemoteRead);
  std::vector<uint8_t> src(3000, 1);
  ASSERT_EQ(init().Write({.dest = to_target_,
                          .buf = src.data(),
                          .len = src.size(),
                          .key = key,
                          .data = 9,
                          .flags = kRmaRemoteData}),
            Result::kOk);
  ExpectRefused(EACCES, "does not grant");
  EXPECT_EQ(err_[0].op.flags, kCompRma | kCompWrite);
}

TEST_F(RmaTest, DeregisteredKey) {
  const uint64_t key = Register(kAccessRemoteWrite | kAccessRemoteRead);
  ASSERT_TRUE(target().DeregisterRegion(key).ok());
  EXPECT_EQ(target().DeregisterRegion(key).code(), absl::StatusCode::kNotFound);
  std::vector<uint8_t> src(3000, 1);
  ASSERT_EQ(init().Write({.dest = to_target_, .buf = src.data(), .len = src.size(), .key = key}),
            Result::kOk);
  ExpectRefused(EKEYREJECTED, "deregistered");
}

TEST_F(RmaTest, RequestedKeyAndDuplicate) {
  const uint64_t key = Register(kAccessRemoteRead, 0, 0x1234);
  EXPECT_EQ(key, 0x1234u);
  absl::StatusOr<uint64_t> dup = target().RegisterRegion(
      {.addr = region_.data(), .len = 10, .access = kAccessRemoteRead, .key = 0x1234});
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists) << dup.status();
  // Random keys are distinct and not the requested one.
  absl::StatusOr<uint64_t> a = target().RegisterRegion(
      {.addr = region_.data(), .len = 10, .access = kAccessRemoteRead});
  absl::StatusOr<uint64_t> b = target().RegisterRegion(
      {.addr = region_.data(), .len = 10, .access = kAccessRemoteRead});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  EXPECT_NE(*a, 0x1234u);
  std::vector<uint8_t> dst(16);
  ASSERT_EQ(init().Read({.dest = to_target_, .buf = dst.data(), .len = 16, .key = 0x1234}),
            Result::kOk);
  ASSERT_TRUE(RunOne());
  ASSERT_EQ(ok_.size(), 1u);
  EXPECT_EQ(std::memcmp(dst.data(), region_.data(), 16), 0);
}

TEST_F(RmaTest, BadArgumentsAndTableFull) {
  EXPECT_EQ(target().RegisterRegion({.addr = nullptr, .len = 8}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      target().RegisterRegion({.addr = region_.data(), .len = 8, .access = 8}).status().code(),
      absl::StatusCode::kInvalidArgument);
  for (uint32_t i = 0; i < target().config().max_regions; ++i) {
    ASSERT_TRUE(target().RegisterRegion({.addr = region_.data(), .len = 8}).ok());
  }
  absl::Status full = target().RegisterRegion({.addr = region_.data(), .len = 8}).status();
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("max_regions"), std::string::npos) << full;
  EXPECT_EQ(init().Write({.dest = PeerId{12345}, .len = 0}), Result::kInvalid);
  EXPECT_EQ(init().Read({.dest = to_target_, .buf = nullptr, .len = 5}), Result::kInvalid);
  EXPECT_EQ(init().Read({.dest = to_target_, .len = 0, .flags = kRmaInject}), Result::kInvalid);
}

// The key -> region table under churn: a full table of consecutive keys,
// half of them deregistered in an order that leaves holes in the probe
// chains, others registered in their place; every key is then found (or
// not) exactly as registered, and a peer's access reaches the right region.
TEST_F(RmaTest, RegionTableFindsEveryKeyUnderChurn) {
  Endpoint& e = target();
  const uint32_t n = e.config().max_regions;
  // Region k is k bytes long, so a write of k bytes fits only its own region.
  const auto reg = [&](uint64_t key, uint64_t len) {
    return e.RegisterRegion(
        {.addr = region_.data(), .len = len, .access = kAccessRemoteWrite, .key = key});
  };
  for (uint64_t k = 1; k <= n; ++k) ASSERT_TRUE(reg(k, k).ok()) << k;
  for (uint64_t k = 1; k <= n; k += 2) ASSERT_TRUE(e.DeregisterRegion(n + 1 - k).ok()) << k;
  for (uint64_t k = 1; k <= n; k += 2) ASSERT_TRUE(reg(1000 + k, k).ok()) << k;
  // Keys n, n-2, ... are gone; n-1, n-3, ... and 1000+1, 1000+3, ... remain.
  for (uint64_t j = 1; j <= n; ++j) {
    if ((n - j) % 2 == 0) {
      EXPECT_EQ(e.DeregisterRegion(j).code(), absl::StatusCode::kNotFound) << j;
    } else {
      EXPECT_EQ(reg(j, 1).status().code(), absl::StatusCode::kAlreadyExists) << j;
    }
  }
  for (uint64_t k = 1; k <= n; k += 2) {
    EXPECT_EQ(reg(1000 + k, 1).status().code(), absl::StatusCode::kAlreadyExists) << k;
  }
  ASSERT_GE(n, 4u);
  std::vector<uint8_t> src(n);
  const uint64_t keys[4][2] = {{n - 1, n - 1}, {n - 3, n - 3}, {1001, 1}, {1003, 3}};
  for (const auto& [key, len] : keys) {
    ok_.clear();
    err_.clear();
    ASSERT_EQ(init().Write({.dest = to_target_, .buf = src.data(), .len = len, .key = key}),
              Result::kOk);
    ASSERT_TRUE(RunOne());
    EXPECT_TRUE(err_.empty()) << key << ": " << err_[0].message;
    ok_.clear();
    err_.clear();
    ASSERT_EQ(init().Write({.dest = to_target_, .buf = src.data(), .len = len + 1, .key = key}),
              Result::kOk);
    ASSERT_TRUE(RunOne());
    ASSERT_EQ(err_.size(), 1u) << key;
    EXPECT_EQ(err_[0].err, EFAULT) << err_[0].message;
  }
  // Random keys from a small pool (so that they collide and repeat),
  // registered and deregistered at random, against a model.
  std::set<uint64_t> model;
  for (uint64_t j = 1; j <= n; ++j) {
    if ((n - j) % 2 == 1) model.insert(j);
  }
  for (uint64_t k = 1; k <= n; k += 2) model.insert(1000 + k);
  uint64_t x = 12345;
  for (int step = 0; step < 5000; ++step) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const uint64_t key = 1 + (x >> 33) % (3 * n);
    if ((x >> 20) & 1) {
      const absl::Status st = e.DeregisterRegion(key);
      ASSERT_EQ(st.ok(), model.erase(key) == 1) << step << " " << key << " " << st;
    } else {
      const absl::StatusCode want = model.count(key)          ? absl::StatusCode::kAlreadyExists
                                    : model.size() == size_t{n} ? absl::StatusCode::kResourceExhausted
                                                                : absl::StatusCode::kOk;
      ASSERT_EQ(reg(key, 1).status().code(), want) << step << " " << key;
      if (want == absl::StatusCode::kOk) model.insert(key);
    }
  }
}

// The target restarts in the middle of a long write: it fails at the
// initiator (ECONNRESET), nothing hangs. The read queued behind it had not
// started, so it goes to the new incarnation, which has no such region yet
// (EKEYREJECTED); once it registers one, reads work.
TEST_F(RmaTest, TargetRestartsMidWriteAndRead) {
  NetOptions o;
  o.config.peer_timeout_ns = 20'000'000;
  Make(o);
  region_.assign(8 << 20, 0);
  const uint64_t key = Register(kAccessRemoteRead | kAccessRemoteWrite, 0, 0x77);
  std::vector<uint8_t> src(4 << 20, 1), dst(4 << 20);
  int w, r;
  ASSERT_EQ(init().Write(
                {.dest = to_target_, .buf = src.data(), .len = src.size(), .key = key, .context = &w}),
            Result::kOk);
  ASSERT_EQ(init().Read(
                {.dest = to_target_, .buf = dst.data(), .len = dst.size(), .key = key, .context = &r}),
            Result::kOk);
  ASSERT_TRUE(net_->RunUntil([&] { return target().counters().rx_data_packets > 200; }, 100'000));
  net_->Kill(1);
  net_->Revive(1);
  const PeerId back = net_->Peer(1, 0);
  ASSERT_EQ(target().Send({.dest = back, .buf = "x", .len = 1}), Result::kOk);  // it says hello
  ASSERT_TRUE(net_->RunUntil(
      [&] {
        Drain(init(), &ok_, &err_);
        return err_.size() + ok_.size() >= 2;
      },
      500'000));
  ASSERT_EQ(err_.size(), 2u);
  EXPECT_EQ(err_[0].op.context, &w);
  EXPECT_EQ(err_[0].err, ECONNRESET) << err_[0].message;
  EXPECT_EQ(err_[1].op.context, &r);
  EXPECT_EQ(err_[1].err, EKEYREJECTED) << err_[1].message;
  EXPECT_TRUE(ok_.empty());
  // The new incarnation has its own region under the same key.
  ASSERT_TRUE(target()
                  .RegisterRegion({.addr = region_.data(),
                                   .len = region_.size(),
                                   .access = kAccessRemoteRead,
                                   .key = 0x77})
                  .ok());
  err_.clear();
  ASSERT_EQ(init().Read({.dest = to_target_, .buf = dst.data(), .len = 100, .key = 0x77}),
            Result::kOk);
  ASSERT_TRUE(RunOne());
  EXPECT_EQ(ok_.size(), 1u);
}

// The target vanishes while a read waits for its answer: ETIMEDOUT.
TEST_F(RmaTest, VanishedTargetTimesOut) {
  NetOptions o;
  o.config.peer_timeout_ns = 20'000'000;
  Make(o);
  const uint64_t key = Register(kAccessRemoteRead);
  std::vector<uint8_t> dst(1000);
  ASSERT_TRUE(net_->RunUntil([&] { return init().peer_stats(to_target_).has_value(); }, 10));
  net_->Kill(1);
  ASSERT_EQ(init().Read({.dest = to_target_, .buf = dst.data(), .len = dst.size(), .key = key}),
            Result::kOk);
  ASSERT_TRUE(net_->RunUntil(
      [&] {
        Drain(init(), &ok_, &err_);
        return !err_.empty() || !ok_.empty();
      },
      500'000));
  ASSERT_EQ(err_.size(), 1u);
  EXPECT_EQ(err_[0].err, ETIMEDOUT) << err_[0].message;
  EXPECT_EQ(err_[0].op.flags, kCompRma | kCompRead);
}

TEST(RmaConfigTest, BadSizesSayWhichField) {
  DeviceParams dev;
  dev.ip.value = 0x0a000001;
  EndpointConfig c;
  c.udp_port = 1;
  c.max_regions = 0;
  absl::Status s = Engine::Create(dev, c).status();
  EXPECT_NE(s.message().find("max_regions"), std::string::npos) << s;
  c.max_regions = 4;
  c.max_rma_ops = 0;
  s = Engine::Create(dev, c).status();
  EXPECT_NE(s.message().find("max_rma_ops"), std::string::npos) << s;
}

// Loss, duplication, reordering and corruption: many writes and reads, all
// checked byte for byte.
TEST_F(RmaTest, SurvivesFaults) {
  NetOptions o;
  o.faults.drop = 0.05;
  o.faults.dup = 0.02;
  o.faults.reorder = 0.10;
  o.faults.corrupt = 0.001;
  o.faults.seed = 31;
  Make(o);
  region_.assign(8 << 20, 0);
  const uint64_t key = Register(kAccessRemoteRead | kAccessRemoteWrite);
  constexpr int kOps = 24;
  std::vector<std::vector<uint8_t>> src(kOps), dst(kOps);
  for (int k = 0; k < kOps; ++k) {
    const size_t n = 1000 + static_cast<size_t>(k) * 9000;
    src[k].resize(n);
    testing::FillPattern(100 + k, absl::MakeSpan(src[k]));
    dst[k].assign(n, 0);
    // Disjoint places: a read's answer is taken from the region as its
    // packets are built, so a later write to the same bytes could show
    // (no write-after-read ordering; PROTOCOL.md).
    const uint64_t at = static_cast<uint64_t>(k) * (256 << 10);
    ASSERT_EQ(init().Write({.dest = to_target_,
                            .buf = src[k].data(),
                            .len = n,
                            .addr = at,
                            .key = key,
                            .context = &src[k]}),
              Result::kOk);
    // Ordered in the stream: the read sees this write.
    ASSERT_EQ(init().Read({.dest = to_target_,
                           .buf = dst[k].data(),
                           .len = n,
                           .addr = at,
                           .key = key,
                           .context = &dst[k]}),
              Result::kOk);
  }
  ASSERT_TRUE(net_->RunUntil(
      [&] {
        Drain(init(), &ok_, &err_);
        return ok_.size() + err_.size() == 2 * kOps;
      },
      3'000'000));
  for (const ErrorCompletion& e : err_) ADD_FAILURE() << e.message;
  for (int k = 0; k < kOps; ++k) {
    EXPECT_EQ(testing::CheckPattern(100 + k, dst[k]), -1) << "read " << k;
  }
  EXPECT_GT(net_->device(0).counters().dropped + net_->device(1).counters().dropped, 0u);
}

}  // namespace
}  // namespace bypass::rdm
