// The fault decorator over loopback ports, with a manual clock: every test is
// deterministic (fixed seeds) and asserts no timing.
#include "driver/fault/fault_device.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "driver/clock.h"
#include "driver/device.h"
#include "driver/loopback/loopback_device.h"
#include "driver/net_headers.h"
#include "driver/uri.h"
#include "gtest/gtest.h"

namespace bypass::driver::fault {
namespace {

constexpr size_t kPayload = 32;  // the sequence number, then a pattern

std::unique_ptr<loopback::LoopbackDevice> OpenPort(const std::string& segment) {
  absl::StatusOr<std::unique_ptr<loopback::LoopbackDevice>> dev =
      loopback::Open(*DeviceUri::Parse("loopback:" + segment), DeviceOptions{});
  EXPECT_TRUE(dev.ok()) << dev.status();
  return *std::move(dev);
}

// A sender port and a fault-wrapped receiver port on one segment.
class Harness {
 public:
  Harness(const FaultOptions& opts, const std::string& segment = "fault") {
    sender_ = OpenPort(segment);
    std::unique_ptr<Device> inner = OpenPort(segment);
    inner_ = inner.get();
    absl::StatusOr<std::unique_ptr<FaultDevice>> dev =
        FaultDevice::Create(std::move(inner), opts, clock_);
    EXPECT_TRUE(dev.ok()) << dev.status();
    receiver_ = *std::move(dev);
    flow_ = UdpFlow{sender_->info().mac, receiver_->info().mac, sender_->info().ipv4,
                    receiver_->info().ipv4, 1, 2};
  }

  // The frame for sequence number `seq`, as sent.
  std::vector<uint8_t> Frame(uint64_t seq) const {
    uint8_t payload[kPayload];
    std::memcpy(payload, &seq, 8);
    for (size_t i = 8; i < kPayload; ++i) payload[i] = static_cast<uint8_t>(seq + i);
    std::vector<uint8_t> frame(kUdpFrameHeaderBytes + kPayload);
    BuildUdpFrame(flow_, payload, absl::MakeSpan(frame), UdpChecksumFill::kCompute);
    return frame;
  }

  // Sends sequence numbers [first, first + n).
  void Send(uint64_t first, size_t n) {
    QueuePair& q = sender_->queue(0);
    std::vector<Packet*> pkts(n);
    ASSERT_TRUE(q.AllocBulk(absl::MakeSpan(pkts)));
    for (size_t i = 0; i < n; ++i) {
      const std::vector<uint8_t> f = Frame(first + i);
      std::memcpy(pkts[i]->data, f.data(), f.size());
      pkts[i]->len = static_cast<uint32_t>(f.size());
    }
    ASSERT_EQ(q.TxBurst(pkts), n);
  }

  // One RxBurst of up to `max`; appends the sequence numbers and frees.
  size_t ReceiveOnce(std::vector<uint64_t>* seqs, size_t max = 32) {
    Packet* pkts[64];
    const uint16_t n = receiver_->queue(0).RxBurst({pkts, std::min<size_t>(max, 64)});
    for (uint16_t i = 0; i < n; ++i) {
      uint64_t seq;
      std::memcpy(&seq, pkts[i]->data + kUdpFrameHeaderBytes, 8);
      if (seqs != nullptr) seqs->push_back(seq);
    }
    receiver_->queue(0).FreeBulk({pkts, n});
    return n;
  }

  // Receives until RxBurst returns nothing.
  size_t ReceiveAll(std::vector<uint64_t>* seqs) {
    size_t total = 0;
    while (size_t n = ReceiveOnce(seqs)) total += n;
    return total;
  }

  ManualClock clock_;
  std::unique_ptr<loopback::LoopbackDevice> sender_;
  Device* inner_ = nullptr;
  std::unique_ptr<FaultDevice> receiver_;
  UdpFlow flow_;
};

FaultOptions Everything(uint64_t seed) {
  FaultOptions o;
  o.drop = 0.1;
  o.dup = 0.1;
  o.reorder = 0.2;
  o.reorder_depth = 4;
  o.delay = 0.1;
  o.delay_ns = 1000;
  o.corrupt = 0.1;
  o.seed = seed;
  return o;
}

// What one run did: each delivered frame's bytes hashed, and the counters.
struct Trace {
  std::vector<uint64_t> hashes;
  FaultCounters counters;
};

Trace RunScenario(const FaultOptions& opts) {
  Harness h(opts, "determinism");
  Trace t;
  for (uint64_t seq = 0; seq < 5000; seq += 32) {
    h.Send(seq, 32);
    Packet* pkts[32];
    while (uint16_t n = h.receiver_->queue(0).RxBurst(pkts)) {
      for (uint16_t i = 0; i < n; ++i) {
        uint64_t hash = 1469598103934665603ull;  // FNV-1a
        for (uint32_t k = 0; k < pkts[i]->len; ++k) hash = (hash ^ pkts[i]->data[k]) * 1099511628211ull;
        t.hashes.push_back(hash);
      }
      h.receiver_->queue(0).FreeBulk({pkts, n});
    }
    h.clock_.Advance(300);
  }
  t.counters = h.receiver_->counters();
  return t;
}

TEST(FaultDeviceTest, SameSeedSameActions) {
  const Trace a = RunScenario(Everything(7));
  const Trace b = RunScenario(Everything(7));
  EXPECT_EQ(a.hashes, b.hashes);
  EXPECT_EQ(a.counters, b.counters);
  EXPECT_GT(a.counters.dropped, 0u);
  EXPECT_GT(a.counters.duplicated, 0u);
  EXPECT_GT(a.counters.reordered, 0u);
  EXPECT_GT(a.counters.delayed, 0u);
  EXPECT_GT(a.counters.corrupted, 0u);
  const Trace c = RunScenario(Everything(8));
  EXPECT_NE(a.hashes, c.hashes) << "another seed, other actions";
}

// |count - n p| <= 5 sigma of Binomial(n, p).
void ExpectBinomial(const char* what, uint64_t count, uint64_t n, double p) {
  const double mean = static_cast<double>(n) * p;
  const double sigma = std::sqrt(mean * (1 - p));
  EXPECT_LE(std::abs(static_cast<double>(count) - mean), 5 * sigma)
      << what << ": " << count << " of " << n << ", expected " << mean << " +- 5 * " << sigma;
}

TEST(FaultDeviceTest, CountedRatesMatchConfiguredRates) {
  absl::StatusOr<FaultOptions> opts = ParseFaultSpec(
      "drop=0.05,dup=0.02,reorder=0.1,reorder_depth=8,delay=0.01,delay_ns=50000,"
      "corrupt=0.001,seed=7");
  ASSERT_TRUE(opts.ok());
  Harness h(*opts, "rates");
  constexpr uint64_t kPackets = 200'000;
  uint64_t delivered = 0;
  for (uint64_t seq = 0; seq < kPackets; seq += 32) {
    h.Send(seq, 32);
    delivered += h.ReceiveAll(nullptr);
    h.clock_.Advance(1000);
  }
  const FaultCounters c = h.receiver_->counters();
  ASSERT_EQ(c.seen, kPackets);
  EXPECT_EQ(c.dup_no_buffer, 0u);
  const uint64_t kept = c.seen - c.dropped;  // the other faults apply to these
  ExpectBinomial("dropped", c.dropped, c.seen, opts->drop);
  ExpectBinomial("duplicated", c.duplicated, kept, opts->dup);
  ExpectBinomial("corrupted", c.corrupted, kept, opts->corrupt);
  ExpectBinomial("delayed", c.delayed, kept, opts->delay);
  ExpectBinomial("reordered", c.reordered, kept - c.delayed, opts->reorder);
  // Nothing lost or invented: what came out plus what is held.
  FaultQueue& q = h.receiver_->fault_queue(0);
  EXPECT_EQ(delivered + q.held_delayed() + q.held_reordered(), kept + c.duplicated);
  EXPECT_EQ(h.receiver_->queue(0).stats().rx_packets, delivered);
}

TEST(FaultDeviceTest, DelayReleasesOnlyAfterTheClockPasses) {
  FaultOptions o;
  o.delay = 1.0;
  o.delay_ns = 1000;
  Harness h(o);
  std::vector<uint64_t> got;
  h.Send(0, 5);
  EXPECT_EQ(h.ReceiveAll(&got), 0u);
  h.clock_.Advance(500);
  h.Send(5, 5);
  EXPECT_EQ(h.ReceiveAll(&got), 0u);
  EXPECT_EQ(h.receiver_->fault_queue(0).held_delayed(), 10u);
  h.clock_.Advance(499);  // t = 999: nothing is due
  EXPECT_EQ(h.ReceiveAll(&got), 0u);
  h.clock_.Advance(1);  // t = 1000: the first five
  EXPECT_EQ(h.ReceiveAll(&got), 5u);
  EXPECT_EQ(got, (std::vector<uint64_t>{0, 1, 2, 3, 4}));
  h.clock_.Advance(499);
  EXPECT_EQ(h.ReceiveAll(&got), 0u);
  h.clock_.Advance(1);
  EXPECT_EQ(h.ReceiveAll(&got), 5u);
  EXPECT_EQ(h.receiver_->counters().delayed, 10u);
  EXPECT_EQ(h.receiver_->fault_queue(0).held_delayed(), 0u);
}

TEST(FaultDeviceTest, FullDelayAreaReleasesTheOldestEarly) {
  FaultOptions o;
  o.delay = 1.0;
  o.delay_ns = 1'000'000;
  o.delay_slots = 4;
  Harness h(o);
  std::vector<uint64_t> got;
  h.Send(0, 6);
  EXPECT_EQ(h.ReceiveAll(&got), 2u);
  EXPECT_EQ(got, (std::vector<uint64_t>{0, 1}));
  EXPECT_EQ(h.receiver_->counters().evicted, 2u);
  EXPECT_EQ(h.receiver_->fault_queue(0).held_delayed(), 4u);
}

TEST(FaultDeviceTest, ReorderNeverHoldsMoreThanDepth) {
  FaultOptions o;
  o.reorder = 0.5;
  o.reorder_depth = 4;
  o.seed = 3;
  Harness h(o);
  std::vector<uint64_t> got;
  for (uint64_t seq = 0; seq < 20'000; seq += 16) {
    h.Send(seq, 16);
    while (h.ReceiveOnce(&got, 5) > 0) {
      ASSERT_LE(h.receiver_->fault_queue(0).held_reordered(), 4u);
    }
    ASSERT_LE(h.receiver_->fault_queue(0).held_reordered(), 4u);
  }
  const size_t held = h.receiver_->fault_queue(0).held_reordered();
  EXPECT_EQ(got.size() + held, 20'000u);
  std::vector<uint64_t> sorted = got;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(sorted, got) << "nothing was reordered";
  EXPECT_EQ(std::unique(sorted.begin(), sorted.end()), sorted.end()) << "a packet came twice";
  // At most depth packets are held, so a packet arrives at most depth places
  // early. A held packet waits for at most depth emitted later packets, and at
  // each of those at most depth - 1 other held ones may be released ahead of
  // it: at most depth * depth places late.
  for (size_t i = 0; i < got.size(); ++i) {
    const int64_t early = static_cast<int64_t>(got[i]) - static_cast<int64_t>(i);
    ASSERT_LE(early, 4) << "at " << i;
    ASSERT_LE(-early, 4 * 4) << "at " << i;
  }
}

TEST(FaultDeviceTest, ReorderEverythingDelaysByDepthInOrder) {
  FaultOptions o;
  o.reorder = 1.0;
  o.reorder_depth = 3;
  Harness h(o);
  std::vector<uint64_t> got;
  h.Send(0, 10);
  EXPECT_EQ(h.ReceiveAll(&got), 7u);
  EXPECT_EQ(got, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(h.receiver_->fault_queue(0).held_reordered(), 3u);
}

TEST(FaultDeviceTest, CorruptFlipsBytesPastTheEthernetHeader) {
  FaultOptions o;
  o.corrupt = 1.0;
  o.corrupt_bytes = 3;
  Harness h(o);
  h.Send(0, 500);
  Packet* pkts[32];
  uint64_t seen = 0;
  while (uint16_t n = h.receiver_->queue(0).RxBurst(pkts)) {
    for (uint16_t i = 0; i < n; ++i) {
      const std::vector<uint8_t> sent = h.Frame(seen++);
      ASSERT_EQ(pkts[i]->len, sent.size());
      int diffs = 0;
      for (size_t k = 0; k < sent.size(); ++k) {
        if (pkts[i]->data[k] == sent[k]) continue;
        ++diffs;
        EXPECT_GE(k, 14u) << "the Ethernet header was touched";
      }
      EXPECT_GE(diffs, 1);
      EXPECT_LE(diffs, 3);
      EXPECT_EQ(pkts[i]->ol_flags & (kRxIpChecksumGood | kRxL4ChecksumGood), 0);
    }
    h.receiver_->queue(0).FreeBulk({pkts, n});
  }
  EXPECT_EQ(seen, 500u);
  EXPECT_EQ(h.receiver_->counters().corrupted, 500u);
}

TEST(FaultDeviceTest, DuplicatesAreCopiesInTheirOwnBuffers) {
  FaultOptions o;
  o.dup = 1.0;
  Harness h(o);
  const uint32_t before = h.receiver_->queue(0).PoolAvailable();
  h.Send(0, 20);
  // One packet per call: a duplicate waits for the next call.
  std::vector<Packet*> got;
  for (int i = 0; i < 100 && got.size() < 40; ++i) {
    Packet* p = nullptr;
    if (h.receiver_->queue(0).RxBurst({&p, 1}) == 1) got.push_back(p);
  }
  ASSERT_EQ(got.size(), 40u);
  for (size_t i = 0; i < 40; i += 2) {
    EXPECT_NE(got[i], got[i + 1]);
    EXPECT_NE(got[i]->data, got[i + 1]->data);
    ASSERT_EQ(got[i]->len, got[i + 1]->len);
    EXPECT_EQ(std::memcmp(got[i]->data, got[i + 1]->data, got[i]->len), 0);
    EXPECT_EQ(std::memcmp(got[i]->data, h.Frame(i / 2).data(), got[i]->len), 0);
  }
  h.receiver_->queue(0).FreeBulk(got);
  EXPECT_EQ(h.receiver_->queue(0).PoolAvailable(), before);
  EXPECT_EQ(h.receiver_->counters().duplicated, 20u);
}

TEST(FaultDeviceTest, DropEverythingFreesEverything) {
  FaultOptions o;
  o.drop = 1.0;
  Harness h(o);
  const uint32_t before = h.receiver_->queue(0).PoolAvailable();
  h.Send(0, 300);
  EXPECT_EQ(h.ReceiveAll(nullptr), 0u);
  EXPECT_EQ(h.receiver_->counters().dropped, 300u);
  EXPECT_EQ(h.receiver_->queue(0).PoolAvailable(), before);
}

TEST(FaultDeviceTest, HeldPacketsAreFreedAtDestruction) {
  auto sender = OpenPort("destroy");
  auto inner = OpenPort("destroy");
  const uint32_t before = inner->queue(0).PoolAvailable();
  ManualClock clock;
  const UdpFlow flow{sender->info().mac, inner->info().mac, sender->info().ipv4,
                     inner->info().ipv4, 1, 2};
  for (const char* spec : {"delay=1", "reorder=1,reorder_depth=16", "dup=1,delay=0.5",
                           "rate_pps=1,queue=16"}) {
    {
      FaultQueue q(inner->queue(0), *ParseFaultSpec(spec), 1, clock);
      std::vector<Packet*> pkts(40);
      ASSERT_TRUE(sender->queue(0).AllocBulk(absl::MakeSpan(pkts)));
      for (Packet* p : pkts) {
        p->len = static_cast<uint32_t>(
            BuildUdpFrame(flow, {}, {p->data, p->capacity}, UdpChecksumFill::kCompute));
      }
      ASSERT_EQ(sender->queue(0).TxBurst(pkts), 40);
      Packet* out[4];
      const uint16_t n = q.RxBurst(out);  // some returned, the rest held or ready
      q.FreeBulk({out, n});
      EXPECT_LT(inner->queue(0).PoolAvailable(), before) << spec;
    }
    EXPECT_EQ(inner->queue(0).PoolAvailable(), before) << spec << ": held packets leaked";
  }
  // The same through a whole FaultDevice: BufferPool aborts on a double free,
  // and ASan would see a use after free.
  FaultOptions o;
  o.delay = 1.0;
  Harness h(o, "destroy2");
  h.Send(0, 50);
  EXPECT_EQ(h.ReceiveAll(nullptr), 0u);
  EXPECT_EQ(h.receiver_->fault_queue(0).held_delayed(), 50u);
  h.receiver_.reset();
}

// The bottleneck: 1 packet per 1000 ns, 4 queued; a burst of 10 keeps 4
// and drops 6 at the tail, the 4 leave one per microsecond in order.
TEST(FaultDeviceTest, BottleneckReleasesAtItsRateAndDropsAtTheTail) {
  FaultOptions o;
  o.rate_pps = 1'000'000;
  o.queue = 4;
  Harness h(o);
  std::vector<uint64_t> got;
  h.Send(0, 10);
  EXPECT_EQ(h.ReceiveAll(&got), 1u) << "the first leaves at once";
  EXPECT_EQ(h.receiver_->counters().queue_dropped, 6u);
  EXPECT_EQ(h.receiver_->counters().queue_max, 4u);
  EXPECT_EQ(h.receiver_->fault_queue(0).held_queued(), 3u);
  h.clock_.Advance(999);
  EXPECT_EQ(h.ReceiveAll(&got), 0u);
  h.clock_.Advance(1);
  EXPECT_EQ(h.ReceiveAll(&got), 1u);
  h.clock_.Advance(5000);  // the other two are due; an idle link saves no credit
  EXPECT_EQ(h.ReceiveAll(&got), 2u);
  EXPECT_EQ(got, (std::vector<uint64_t>{0, 1, 2, 3}));
  h.Send(10, 3);
  EXPECT_EQ(h.ReceiveAll(&got), 1u) << "an idle link restarts: one at once, not a burst";
  h.clock_.Advance(2000);
  EXPECT_EQ(h.ReceiveAll(&got), 2u);
  EXPECT_EQ(got, (std::vector<uint64_t>{0, 1, 2, 3, 10, 11, 12}));
  EXPECT_EQ(h.receiver_->counters().seen, 7u) << "only what left the link meets the other faults";
  EXPECT_EQ(h.receiver_->queue(0).stats().rx_packets, 7u);
}

// A steady overload: 3 packets offered per microsecond into a 1 Mpps link
// for 1000 us delivers about 1000, drops the rest at the tail, never queues
// more than `queue`, and holds nothing at the end once drained.
TEST(FaultDeviceTest, BottleneckUnderSteadyOverloadDeliversItsRate) {
  FaultOptions o;
  o.rate_pps = 1'000'000;
  o.queue = 16;
  Harness h(o);
  uint64_t delivered = 0;
  for (uint64_t us = 0; us < 1000; ++us) {
    h.Send(3 * us, 3);
    delivered += h.ReceiveAll(nullptr);
    h.clock_.Advance(1000);
  }
  EXPECT_GE(delivered, 999u);
  EXPECT_LE(delivered, 1001u);
  const FaultCounters c = h.receiver_->counters();
  EXPECT_EQ(c.queue_max, 16u);
  EXPECT_EQ(delivered + c.queue_dropped + h.receiver_->fault_queue(0).held_queued(), 3000u);
  h.clock_.Advance(100'000);
  delivered += h.ReceiveAll(nullptr);
  EXPECT_EQ(h.receiver_->fault_queue(0).held_queued(), 0u);
  EXPECT_EQ(delivered + c.queue_dropped, 3000u);
}

TEST(FaultDeviceTest, CreateRejectsBadOptions) {
  FaultOptions o;
  o.reorder_depth = 0;
  EXPECT_EQ(FaultDevice::Create(OpenPort("bad"), o).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WrapWithFaults(OpenPort("bad"), "drop=2").status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::unique_ptr<Device>> ok = WrapWithFaults(OpenPort("bad"), "drop=0.5");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)->info().driver, "loopback");
}

}  // namespace
}  // namespace bypass::driver::fault
