// The tests of the device conformance suite (see conformance.h).
#include "driver/testing/conformance.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "driver/device.h"
#include "driver/net_headers.h"
#include "driver/packet.h"
#include "driver/testing/conformance_util.h"
#include "gtest/gtest.h"

namespace bypass::driver::testing {

std::string BackendParamName(const ::testing::TestParamInfo<BackendFactory*>& info) {
  return info.param->Name();
}

void DeviceConformanceTest::OpenPair(const DeviceOptions& opts) {
  absl::StatusOr<EndpointPair> pair = GetParam()->Open(opts);
  ASSERT_TRUE(pair.ok()) << GetParam()->Name() << ": " << pair.status();
  pair_.emplace(*std::move(pair));
  if (!features().binds_udp_ports) return;
  for (Device* d : {&A(), &B()}) {
    for (uint16_t port : kSuitePorts) {
      const absl::Status s = d->queue(0).BindUdpPort(port);
      ASSERT_TRUE(s.ok()) << GetParam()->Name() << ": binding UDP port " << port << ": " << s;
    }
    if (Same()) break;
  }
}

std::vector<uint32_t> DeviceConformanceTest::PoolLevels() {
  std::vector<uint32_t> levels;
  for (Device* d : {&A(), &B()}) {
    for (uint16_t q = 0; q < d->info().num_queues; ++q) {
      levels.push_back(d->queue(q).PoolAvailable());
    }
    if (Same()) break;
  }
  return levels;
}

namespace {

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(DeviceConformanceTest);

constexpr uint16_t kPort = kSuitePorts[0];  // and kPort + 1

TEST_P(DeviceConformanceTest, DescribesItself) {
  DeviceOptions opts;
  ASSERT_NO_FATAL_FAILURE(OpenPair(opts));
  for (Device* d : {&A(), &B()}) {
    const DeviceInfo& info = d->info();
    EXPECT_FALSE(info.mac.IsMulticast()) << info.mac.ToString();
    EXPECT_NE(info.mac, MacAddress{});
    EXPECT_GE(info.num_queues, 1);
    EXPECT_GE(info.mtu, 1500u);
    EXPECT_EQ(info.can_steer, features().steering);
    EXPECT_EQ(d->link_state(), LinkState::kUp);
    for (uint16_t q = 0; q < info.num_queues; ++q) {
      EXPECT_EQ(d->queue(q).id(), q);
      EXPECT_GT(d->queue(q).PoolCapacity(), 0u);
      EXPECT_LE(d->queue(q).PoolAvailable(), d->queue(q).PoolCapacity());
    }
    if (!info.can_steer) {
      EXPECT_EQ(d->SteerUdpPort(kPort, 0).code(), absl::StatusCode::kUnimplemented);
    }
  }
  if (!Same()) {
    EXPECT_NE(A().info().mac, B().info().mac);
  }
}

TEST_P(DeviceConformanceTest, RxBurstOnEmptyReturnsZero) {
  ASSERT_NO_FATAL_FAILURE(OpenPair({}));
  Packet* out[32];
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(A().queue(0).RxBurst(absl::MakeSpan(out)), 0);
    EXPECT_EQ(B().queue(0).RxBurst(absl::MakeSpan(out)), 0);
  }
  EXPECT_EQ(A().queue(0).RxBurst(absl::Span<Packet*>()), 0);
}

TEST_P(DeviceConformanceTest, BurstArrivesInOrderWithIdenticalBytes) {
  ASSERT_NO_FATAL_FAILURE(OpenPair({}));
  const std::vector<uint32_t> before = PoolLevels();
  Pump pump(features());
  for (int direction = 0; direction < (Same() ? 1 : 2); ++direction) {
    Device& from = direction == 0 ? A() : B();
    Device& to = direction == 0 ? B() : A();
    const UdpFlow flow = FlowBetween(from, to, kPort);
    constexpr size_t kBurst = 32;
    std::vector<Packet*> pkts(kBurst);
    ASSERT_TRUE(from.queue(0).AllocBulk(absl::MakeSpan(pkts)));
    std::vector<std::vector<uint8_t>> sent;
    for (size_t i = 0; i < kBurst; ++i) {
      // Lengths from the minimum frame to near the MTU.
      const size_t payload = kMinPayload + i * ((from.info().mtu - 28 - kMinPayload) / kBurst);
      ASSERT_TRUE(WriteTestFrame(pkts[i], flow, i, payload));
      sent.emplace_back(pkts[i]->data, pkts[i]->data + pkts[i]->len);
    }
    ASSERT_TRUE(pump.SendAll(from.queue(0), pkts));
    std::vector<Packet*> got = pump.Receive(to.queue(0), kBurst);
    ASSERT_EQ(got.size(), kBurst);
    for (size_t i = 0; i < kBurst; ++i) {
      ASSERT_EQ(got[i]->len, sent[i].size()) << "frame " << i;
      if (features().rx_udp_checksum_zero) {
        constexpr size_t kAt =
            sizeof(EthernetHeader) + sizeof(Ipv4Header) + offsetof(UdpHeader, checksum);
        sent[i][kAt] = 0;
        sent[i][kAt + 1] = 0;
      }
      EXPECT_EQ(std::memcmp(got[i]->data, sent[i].data(), sent[i].size()), 0) << "frame " << i;
      EXPECT_EQ(got[i]->rx_queue, 0);
      EXPECT_GE(got[i]->capacity, to.info().max_frame());
      std::optional<ParsedUdpFrame> parsed = ParseUdpFrame({got[i]->data, got[i]->len});
      ASSERT_TRUE(parsed.has_value()) << "frame " << i << " is not Ethernet/IPv4/UDP";
      EXPECT_EQ(parsed->flow.src_mac, flow.src_mac);
      EXPECT_EQ(parsed->flow.dst_mac, flow.dst_mac);
      EXPECT_EQ(parsed->flow.dst_ip, flow.dst_ip);
      EXPECT_EQ(parsed->flow.dst_port, kPort);
    }
    to.queue(0).FreeBulk(got);
    Packet* extra[8];
    EXPECT_EQ(pump.PollOurs(to.queue(0), extra), 0u) << "more frames than were sent";
    EXPECT_GE(to.queue(0).stats().rx_packets, kBurst);
    EXPECT_GE(from.queue(0).stats().tx_packets, kBurst);
  }
  EXPECT_EQ(PoolLevels(), before);
}

TEST_P(DeviceConformanceTest, AllocBulkIsAllOrNothing) {
  DeviceOptions opts;
  opts.ring_size = 64;
  opts.pool_buffers = 256;
  ASSERT_NO_FATAL_FAILURE(OpenPair(opts));
  QueuePair& q = A().queue(0);
  const uint32_t start = q.PoolAvailable();
  ASSERT_GE(start, 16u);
  const uint64_t failures = q.stats().alloc_failures;

  std::vector<Packet*> most(start - 3);
  ASSERT_TRUE(q.AllocBulk(absl::MakeSpan(most)));
  for (Packet* p : most) {
    EXPECT_EQ(p->len, 0u);
    EXPECT_GE(p->capacity, A().info().max_frame());
  }
  EXPECT_EQ(q.PoolAvailable(), 3u);
  Packet* five[5] = {};
  EXPECT_FALSE(q.AllocBulk(absl::MakeSpan(five)));
  EXPECT_EQ(q.PoolAvailable(), 3u) << "a failed AllocBulk took buffers";
  EXPECT_EQ(q.stats().alloc_failures, failures + 1);
  Packet* three[3] = {};
  EXPECT_TRUE(q.AllocBulk(absl::MakeSpan(three)));
  EXPECT_EQ(q.PoolAvailable(), 0u);
  Packet* one[1] = {};
  EXPECT_FALSE(q.AllocBulk(absl::MakeSpan(one)));
  EXPECT_EQ(q.stats().alloc_failures, failures + 2);
  q.FreeBulk(three);
  q.FreeBulk(most);
  EXPECT_EQ(q.PoolAvailable(), start);
}

TEST_P(DeviceConformanceTest, TxBurstOnFullRingTakesFewerAndCallerKeepsTheRest) {
  if (!features().tx_backpressure) GTEST_SKIP() << GetParam()->Name() << ": no TX back-pressure";
  DeviceOptions opts;
  opts.ring_size = 64;
  ASSERT_NO_FATAL_FAILURE(OpenPair(opts));
  const std::vector<uint32_t> before = PoolLevels();
  const UdpFlow flow = FlowBetween(A(), B(), kPort);
  QueuePair& tx = A().queue(0);
  uint64_t seq = 0;
  bool pushed_back = false;
  for (int round = 0; round < 1024 && !pushed_back; ++round) {
    std::vector<Packet*> pkts(32);
    ASSERT_TRUE(tx.AllocBulk(absl::MakeSpan(pkts))) << "pool ran out before the ring filled";
    for (Packet* p : pkts) ASSERT_TRUE(WriteTestFrame(p, flow, seq++, kMinPayload));
    const uint64_t full_before = tx.stats().tx_ring_full;
    const uint16_t took = tx.TxBurst(pkts);
    if (took == pkts.size()) continue;
    pushed_back = true;
    EXPECT_EQ(tx.stats().tx_ring_full, full_before + (pkts.size() - took));
    // The rest are still ours, untouched: their bytes are what we wrote.
    for (size_t i = took; i < pkts.size(); ++i) {
      std::optional<uint64_t> s = TestFrameSeq(pkts[i]);
      ASSERT_TRUE(s.has_value());
      EXPECT_EQ(*s, seq - pkts.size() + i);
    }
    tx.FreeBulk(absl::MakeConstSpan(pkts).subspan(took));
    seq -= pkts.size() - took;
  }
  ASSERT_TRUE(pushed_back) << "TxBurst never took fewer with an undrained receiver";
  Pump pump(features());
  uint64_t expected = 0;
  const size_t got = pump.Consume(B().queue(0), seq, [&](const Packet& p) {
    EXPECT_EQ(TestFrameSeq(&p), expected);
    ++expected;
  });
  EXPECT_EQ(got, seq) << "frames TxBurst took were lost";
  EXPECT_EQ(PoolLevels(), before);
}

}  // namespace
}  // namespace bypass::driver::testing
