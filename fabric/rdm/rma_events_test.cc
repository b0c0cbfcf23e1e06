// Target-side RMA events (EndpointConfig::rma_events, libfabric's
// FI_RMA_EVENT): every peer's write applied to a region here and every read
// of one answered is one completion at the target, with the region's
// context, exactly once, also when packets are lost, duplicated and
// reordered; refused accesses are no event; without the setting only writes
// carrying CQ data complete at the target.
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

struct Events {
  size_t writes = 0, reads = 0, with_data = 0;
};

class RmaEventsTest : public ::testing::Test {
 protected:
  void Make(bool events, double loss) {
    NetOptions o;
    o.config.rma_events = events;
    if (loss > 0) {
      o.faults.drop = loss;
      o.faults.dup = 0.02;
      o.faults.reorder = 0.10;
      o.faults.seed = 18;
    }
    net_ = std::make_unique<Net>(o);
    to_target_ = net_->Peer(0, 1);
    region_.assign(256 * 1024, 0);
    absl::StatusOr<uint64_t> k = net_->ep(1).RegisterRegion(
        {.addr = region_.data(),
         .len = region_.size(),
         .access = kAccessRemoteRead | kAccessRemoteWrite,
         .context = &region_});
    ASSERT_TRUE(k.ok()) << k.status();
    key_ = *k;
  }

  // Posts `writes` writes (every third with CQ data) and `reads` reads of
  // `len` bytes, retrying on kAgain, and runs until all completed at the
  // initiator; the target's completions are tallied in events_.
  void Run(int writes, int reads, size_t len) {
    std::vector<uint8_t> src(len), dst(len);
    int posted = 0;
    const int total = writes + reads;
    size_t done = 0;
    auto pump = [&] {
      std::vector<Completion> ok, tok;
      std::vector<ErrorCompletion> err, terr;
      Drain(net_->ep(0), &ok, &err);
      Drain(net_->ep(1), &tok, &terr);
      ASSERT_TRUE(err.empty()) << err[0].message;
      ASSERT_TRUE(terr.empty()) << terr[0].message;
      done += ok.size();
      for (const Completion& c : tok) {
        EXPECT_EQ(c.context, &region_);
        EXPECT_TRUE(c.flags & kCompRma);
        EXPECT_EQ(c.len, len);
        EXPECT_EQ(c.source, net_->Peer(1, 0));
        if (c.flags & kCompRemoteWrite) ++events_.writes;
        if (c.flags & kCompRemoteRead) ++events_.reads;
        if (c.flags & kCompRemoteData) {
          ++events_.with_data;
          EXPECT_EQ(c.data, 0xda7au);
        }
      }
    };
    while (posted < total) {
      const bool write = posted < writes;
      RmaRequest r{.dest = to_target_,
                   .buf = write ? src.data() : dst.data(),
                   .len = len,
                   .addr = static_cast<uint64_t>(posted % 8) * len,
                   .key = key_};
      if (write && posted % 3 == 0) {
        r.flags = kRmaRemoteData;
        r.data = 0xda7a;
      }
      const Result res = write ? net_->ep(0).Write(r) : net_->ep(0).Read(r);
      if (res == Result::kOk) {
        ++posted;
      } else {
        ASSERT_EQ(res, Result::kAgain);
        net_->Step();
        pump();
      }
    }
    ASSERT_TRUE(net_->RunUntil(
        [&] {
          pump();
          return done >= static_cast<size_t>(total);
        },
        2'000'000));
    // Anything late (a duplicate, a retransmission) lands now, or never.
    for (int i = 0; i < 5000; ++i) {
      net_->Step();
      pump();
    }
  }

  std::unique_ptr<Net> net_;
  PeerId to_target_;
  std::vector<uint8_t> region_;
  uint64_t key_ = 0;
  Events events_;
};

TEST_F(RmaEventsTest, EveryWriteAndReadIsOneTargetEvent) {
  Make(true, 0);
  Run(9, 7, 3000);
  EXPECT_EQ(events_.writes, 9u);
  EXPECT_EQ(events_.reads, 7u);
  EXPECT_EQ(events_.with_data, 3u);
}

TEST_F(RmaEventsTest, ExactlyOnceUnderLossDuplicationAndReordering) {
  Make(true, 0.05);
  Run(60, 40, 5000);  // four segments each at MTU 1500
  EXPECT_EQ(events_.writes, 60u);
  EXPECT_EQ(events_.reads, 40u);
  EXPECT_EQ(events_.with_data, 20u);
  EXPECT_GT(net_->ep(0).counters().retransmits_fast + net_->ep(0).counters().retransmits_timeout +
                net_->ep(1).counters().retransmits_fast +
                net_->ep(1).counters().retransmits_timeout,
            0u)
      << "the faults dropped nothing: the test proves less than it says";
}

TEST_F(RmaEventsTest, WithoutTheSettingOnlyWritesWithDataComplete) {
  Make(false, 0);
  Run(9, 7, 3000);
  EXPECT_EQ(events_.writes, 3u);
  EXPECT_EQ(events_.with_data, 3u);
  EXPECT_EQ(events_.reads, 0u);
}

TEST_F(RmaEventsTest, RefusedAccessesAreNoEvent) {
  Make(true, 0);
  std::vector<uint8_t> buf(64);
  int ctx;
  ASSERT_EQ(net_->ep(0).Write({.dest = to_target_,
                               .buf = buf.data(),
                               .len = buf.size(),
                               .addr = region_.size(),  // past the end
                               .key = key_,
                               .context = &ctx}),
            Result::kOk);
  ASSERT_EQ(net_->ep(0).Read({.dest = to_target_,
                              .buf = buf.data(),
                              .len = buf.size(),
                              .addr = 0,
                              .key = key_ + 1,  // no such region
                              .context = &ctx}),
            Result::kOk);
  std::vector<Completion> ok, tok;
  std::vector<ErrorCompletion> err, terr;
  ASSERT_TRUE(net_->RunUntil(
      [&] {
        Drain(net_->ep(0), &ok, &err);
        Drain(net_->ep(1), &tok, &terr);
        return err.size() == 2;
      },
      200'000));
  for (int i = 0; i < 2000; ++i) net_->Step();
  Drain(net_->ep(1), &tok, &terr);
  EXPECT_TRUE(tok.empty());
  EXPECT_TRUE(terr.empty());
}

}  // namespace
}  // namespace bypass::rdm
