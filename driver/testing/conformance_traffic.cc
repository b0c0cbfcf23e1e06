// The traffic tests of the device conformance suite: buffer accounting over
// a million packets, jumbo frames, steering, link down/up, several queues.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "driver/device.h"
#include "driver/net_headers.h"
#include "driver/packet.h"
#include "driver/testing/conformance.h"
#include "driver/testing/conformance_util.h"
#include "driver/testing/sanitizer.h"
#include "gtest/gtest.h"

namespace bypass::driver::testing {
namespace {

constexpr uint16_t kPort = kSuitePorts[2];  // and kPort + 1

TEST_P(DeviceConformanceTest, NoBufferLeakAfterOneMillionPackets) {
  ASSERT_NO_FATAL_FAILURE(OpenPair({}));
  const std::vector<uint32_t> before = PoolLevels();
  Pump pump(features());
  const UdpFlow flow = FlowBetween(A(), B(), kPort);
  QueuePair& a = A().queue(0);
  QueuePair& b = B().queue(0);
  // A million packets go round each pool (4 * ring_size buffers) hundreds
  // of times. Under ASan/TSan a tenth of them: still about 25 times round a
  // 4096-buffer pool, so a buffer lost or freed twice in any of the paths
  // (alloc, send, receive, reflect, free) still shows in the levels; the
  // million took over 60 s (the small test's timeout) under TSan at load 20.
  constexpr uint64_t kPackets = SanitizerScaled(1'000'000, 10);
  constexpr size_t kBurst = 32;
  Packet* pkts[kBurst];
  uint64_t seq = 0;
  uint64_t echoed = 0;
  uint64_t bad = 0;
  while (seq < kPackets) {
    ASSERT_TRUE(a.AllocBulk(absl::MakeSpan(pkts))) << "A's pool ran dry at packet " << seq;
    for (Packet* p : pkts) ASSERT_TRUE(WriteTestFrame(p, flow, seq++, kMinPayload));
    ASSERT_TRUE(pump.SendAll(a, pkts)) << "A could not send at packet " << seq;
    if (Same()) {
      uint64_t want = seq - kBurst;
      ASSERT_EQ(pump.Consume(a, kBurst, [&](const Packet& p) {
        bad += TestFrameSeq(&p) != want++;
      }), kBurst);
      ASSERT_EQ(bad, 0u) << "damaged or out of order before packet " << seq;
      continue;
    }
    // B reflects what it received straight back: RX buffers go out on TX.
    std::vector<Packet*> got = pump.Receive(b, kBurst);
    ASSERT_EQ(got.size(), kBurst) << "B received too few at packet " << seq;
    for (Packet* p : got) ReverseUdpFrame(p->data);
    ASSERT_TRUE(pump.SendAll(b, got)) << "B could not reflect at packet " << seq;
    ASSERT_EQ(pump.Consume(a, kBurst, [&](const Packet& p) {
      bad += TestFrameSeq(&p) != echoed++;
    }), kBurst) << "A received too few at packet " << seq;
    ASSERT_EQ(bad, 0u) << "damaged or out of order before packet " << seq;
  }
  EXPECT_EQ(PoolLevels(), before) << "buffers leaked or were freed twice";
  EXPECT_GE(a.stats().tx_packets, kPackets);
  EXPECT_GE(a.stats().rx_packets, kPackets);
}

TEST_P(DeviceConformanceTest, JumboFramesArriveWhole) {
  if (!features().jumbo) GTEST_SKIP() << GetParam()->Name() << ": no jumbo frames";
  DeviceOptions opts;
  opts.mtu = 9000;
  ASSERT_NO_FATAL_FAILURE(OpenPair(opts));
  ASSERT_EQ(A().info().mtu, 9000u);
  ASSERT_EQ(B().info().mtu, 9000u);
  const std::vector<uint32_t> before = PoolLevels();
  Pump pump(features());
  const UdpFlow flow = FlowBetween(A(), B(), kPort);
  std::vector<Packet*> pkts(8);
  ASSERT_TRUE(A().queue(0).AllocBulk(absl::MakeSpan(pkts)));
  for (size_t i = 0; i < pkts.size(); ++i) {
    ASSERT_GE(pkts[i]->capacity, 9014u);
    const size_t payload = 9000 - 28 - i * 1000;  // 9014-byte frames down to ~2 KB
    ASSERT_TRUE(WriteTestFrame(pkts[i], flow, i, payload));
  }
  ASSERT_TRUE(pump.SendAll(A().queue(0), pkts));
  std::vector<Packet*> got = pump.Receive(B().queue(0), pkts.size());
  ASSERT_EQ(got.size(), pkts.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i]->len, 9014u - i * 1000);
    EXPECT_EQ(TestFrameSeq(got[i]), i) << "jumbo frame " << i << " damaged or reordered";
  }
  B().queue(0).FreeBulk(got);
  EXPECT_EQ(PoolLevels(), before);
}

TEST_P(DeviceConformanceTest, SteeredUdpPortArrivesOnItsQueueOnly) {
  if (!features().steering || features().max_queues < 2) {
    GTEST_SKIP() << GetParam()->Name() << ": no steering";
  }
  DeviceOptions opts;
  opts.queues = std::min<uint16_t>(features().max_queues, 4);
  ASSERT_NO_FATAL_FAILURE(OpenPair(opts));
  const uint16_t nq = B().info().num_queues;
  ASSERT_EQ(nq, opts.queues);
  for (uint16_t q = 1; q < nq; ++q) ASSERT_TRUE(B().SteerUdpPort(kPort + 2 * q, q).ok());
  const std::vector<uint32_t> before = PoolLevels();
  Pump pump(features());
  // Eight frames per queue, interleaved; port kPort (queue 0) is not steered.
  constexpr int kPerQueue = 8;
  std::vector<Packet*> pkts(kPerQueue * nq);
  ASSERT_TRUE(A().queue(0).AllocBulk(absl::MakeSpan(pkts)));
  for (size_t i = 0; i < pkts.size(); ++i) {
    const uint16_t q = static_cast<uint16_t>(i % nq);
    ASSERT_TRUE(WriteTestFrame(pkts[i], FlowBetween(A(), B(), kPort + 2 * q), i, kMinPayload));
  }
  ASSERT_TRUE(pump.SendAll(A().queue(0), pkts));
  for (uint16_t q = 0; q < nq; ++q) {
    std::vector<Packet*> got = pump.Receive(B().queue(q), kPerQueue);
    EXPECT_EQ(got.size(), static_cast<size_t>(kPerQueue)) << "queue " << q;
    for (Packet* p : got) {
      std::optional<ParsedUdpFrame> parsed = ParseUdpFrame({p->data, p->len});
      ASSERT_TRUE(parsed.has_value());
      EXPECT_EQ(parsed->flow.dst_port, kPort + 2 * q) << "on queue " << q;
      EXPECT_EQ(p->rx_queue, q);
    }
    B().queue(q).FreeBulk(got);
  }
  Packet* extra[8];
  for (uint16_t q = 0; q < nq; ++q) EXPECT_EQ(pump.PollOurs(B().queue(q), extra), 0u);
  EXPECT_EQ(PoolLevels(), before);
}

TEST_P(DeviceConformanceTest, LinkDownDropsAndLinkUpRestores) {
  if (!features().link_toggle) GTEST_SKIP() << GetParam()->Name() << ": no link toggling";
  ASSERT_NO_FATAL_FAILURE(OpenPair({}));
  const std::vector<uint32_t> before = PoolLevels();
  Pump pump(features());
  const UdpFlow flow = FlowBetween(A(), B(), kPort);
  uint64_t seq = 0;
  const auto send = [&](int n) {
    std::vector<Packet*> pkts(n);
    if (!A().queue(0).AllocBulk(absl::MakeSpan(pkts))) return false;
    for (Packet* p : pkts) WriteTestFrame(p, flow, seq++, kMinPayload);
    return pump.SendAll(A().queue(0), pkts);
  };
  Packet* scratch[32];

  ASSERT_TRUE(B().SetLinkState(LinkState::kDown).ok());
  EXPECT_EQ(B().link_state(), LinkState::kDown);
  ASSERT_TRUE(send(16));
  EXPECT_EQ(pump.PollOurs(B().queue(0), scratch), 0u) << "B received while its link was down";
  ASSERT_TRUE(B().SetLinkState(LinkState::kUp).ok());
  EXPECT_EQ(B().link_state(), LinkState::kUp);
  EXPECT_EQ(pump.PollOurs(B().queue(0), scratch), 0u) << "frames sent while down arrived later";
  ASSERT_TRUE(send(16));
  EXPECT_EQ(pump.Consume(B().queue(0), 16, [](const Packet&) {}), 16u);

  ASSERT_TRUE(A().SetLinkState(LinkState::kDown).ok());
  EXPECT_EQ(A().link_state(), LinkState::kDown);
  ASSERT_TRUE(send(16)) << "TxBurst on a down link must still take (and drop) frames";
  EXPECT_EQ(pump.PollOurs(B().queue(0), scratch), 0u) << "A sent while its link was down";
  ASSERT_TRUE(A().SetLinkState(LinkState::kUp).ok());
  ASSERT_TRUE(send(16));
  EXPECT_EQ(pump.Consume(B().queue(0), 16, [](const Packet&) {}), 16u);
  EXPECT_EQ(PoolLevels(), before);
}

TEST_P(DeviceConformanceTest, EveryQueueTransmits) {
  if (features().max_queues < 2) GTEST_SKIP() << GetParam()->Name() << ": one queue";
  DeviceOptions opts;
  opts.queues = 2;
  ASSERT_NO_FATAL_FAILURE(OpenPair(opts));
  const std::vector<uint32_t> before = PoolLevels();
  Pump pump(features());
  const UdpFlow flow = FlowBetween(A(), B(), kPort);
  for (uint16_t q = 0; q < 2; ++q) {
    std::vector<Packet*> pkts(16);
    ASSERT_TRUE(A().queue(q).AllocBulk(absl::MakeSpan(pkts)));
    for (size_t i = 0; i < pkts.size(); ++i) WriteTestFrame(pkts[i], flow, i, kMinPayload);
    ASSERT_TRUE(pump.SendAll(A().queue(q), pkts));
    // Unsteered traffic may land on any queue (RSS); count over all of them.
    size_t got = 0;
    Packet* scratch[32];
    for (uint64_t i = 0; i < features().poll_budget && got < pkts.size(); ++i) {
      got += pump.PollOnce(B().queue(i % 2), scratch);
    }
    EXPECT_EQ(got, pkts.size()) << "from A's queue " << q;
  }
  EXPECT_EQ(PoolLevels(), before);
}

}  // namespace
}  // namespace bypass::driver::testing
