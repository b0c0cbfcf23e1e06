// Loopback-specific behaviour: segments of several ports, delivery by MAC,
// drops and their counters, and a two-thread race check. The conformance
// suite runs in loopback_conformance_test.cc.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "driver/device.h"
#include "driver/loopback/loopback_device.h"
#include "driver/net_headers.h"
#include "driver/uri.h"
#include "gtest/gtest.h"

namespace bypass::driver::loopback {
namespace {

std::unique_ptr<LoopbackDevice> MustOpen(const std::string& uri, DeviceOptions opts = {}) {
  absl::StatusOr<std::unique_ptr<LoopbackDevice>> dev = Open(*DeviceUri::Parse(uri), opts);
  EXPECT_TRUE(dev.ok()) << uri << ": " << dev.status();
  return dev.ok() ? *std::move(dev) : nullptr;
}

absl::Status OpenError(const std::string& uri, DeviceOptions opts = {}) {
  return Open(*DeviceUri::Parse(uri), opts).status();
}

UdpFlow Flow(const Device& from, const MacAddress& dst_mac, Ipv4Address dst_ip, uint16_t port) {
  return UdpFlow{from.info().mac, dst_mac, from.info().ipv4, dst_ip, 9, port};
}

// Sends one frame of `payload_len` bytes from queue q of `from`; returns
// what TxBurst took.
uint16_t SendOne(Device& from, const UdpFlow& flow, size_t payload_len = 32, uint16_t q = 0) {
  Packet* p = nullptr;
  EXPECT_TRUE(from.queue(q).AllocBulk({&p, 1}));
  std::vector<uint8_t> payload(payload_len, 0xab);
  p->len = static_cast<uint32_t>(BuildUdpFrame(flow, payload, {p->data, p->capacity},
                                                UdpChecksumFill::kCompute));
  const uint16_t took = from.queue(q).TxBurst({&p, 1});
  if (took == 0) from.queue(q).FreeBulk({&p, 1});
  return took;
}

// Receives and frees everything waiting on queue q; returns how many.
size_t Drain(Device& dev, uint16_t q = 0) {
  size_t total = 0;
  Packet* pkts[32];
  while (uint16_t n = dev.queue(q).RxBurst(pkts)) {
    total += n;
    dev.queue(q).FreeBulk({pkts, n});
  }
  return total;
}

TEST(LoopbackTest, ThreePortsGetDistinctAddresses) {
  auto a = MustOpen("loopback:three");
  auto b = MustOpen("loopback:three");
  auto c = MustOpen("loopback:three");
  EXPECT_EQ(a->port_index(), 0);
  EXPECT_EQ(c->port_index(), 2);
  const uint8_t s = a->info().mac.bytes[4];
  EXPECT_EQ(a->info().mac.ToString().substr(0, 9), "02:00:00:");
  EXPECT_EQ(b->info().mac.bytes[5], 2);
  EXPECT_EQ(c->info().mac.bytes[5], 3);
  EXPECT_EQ(c->info().ipv4.value, (10u << 24) | (77u << 16) | (uint32_t{s} << 8) | 3);
  EXPECT_NE(a->info().mac, b->info().mac);
  EXPECT_NE(b->info().ipv4, c->info().ipv4);
  EXPECT_EQ(a->info().driver, "loopback");
  EXPECT_TRUE(a->info().can_steer);
}

TEST(LoopbackTest, UnicastReachesOnlyTheAddressedPort) {
  auto a = MustOpen("loopback:uni");
  auto b = MustOpen("loopback:uni");
  auto c = MustOpen("loopback:uni");
  ASSERT_EQ(SendOne(*a, Flow(*a, c->info().mac, c->info().ipv4, 7)), 1);
  EXPECT_EQ(Drain(*b), 0u);
  EXPECT_EQ(Drain(*a), 0u);
  Packet* p = nullptr;
  ASSERT_EQ(c->queue(0).RxBurst({&p, 1}), 1);
  std::optional<ParsedUdpFrame> parsed = ParseUdpFrame({p->data, p->len});
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->flow.src_mac, a->info().mac);
  c->queue(0).FreeBulk({&p, 1});
  // To its own MAC, a port receives its own frame.
  ASSERT_EQ(SendOne(*a, Flow(*a, a->info().mac, a->info().ipv4, 7)), 1);
  EXPECT_EQ(Drain(*a), 1u);
}

TEST(LoopbackTest, BroadcastAndMulticastReachEveryOtherPort) {
  auto a = MustOpen("loopback:bcast");
  auto b = MustOpen("loopback:bcast");
  auto c = MustOpen("loopback:bcast");
  ASSERT_EQ(SendOne(*a, Flow(*a, kBroadcastMac, Ipv4Address{0xffffffff}, 7)), 1);
  const MacAddress group{{0x01, 0x00, 0x5e, 0x00, 0x00, 0x07}};
  ASSERT_EQ(SendOne(*a, Flow(*a, group, Ipv4Address{0xe0000007}, 7)), 1);
  EXPECT_EQ(Drain(*a), 0u) << "a sender does not hear its own broadcast";
  EXPECT_EQ(Drain(*b), 2u);
  EXPECT_EQ(Drain(*c), 2u);
  EXPECT_EQ(a->queue(0).stats().tx_packets, 2u);
}

TEST(LoopbackTest, SegmentsAreIsolated) {
  auto a = MustOpen("loopback:iso1");
  auto b = MustOpen("loopback:iso2");
  EXPECT_NE(a->info().mac, b->info().mac);
  ASSERT_EQ(SendOne(*a, Flow(*a, kBroadcastMac, Ipv4Address{0xffffffff}, 7)), 1);
  ASSERT_EQ(SendOne(*a, Flow(*a, b->info().mac, b->info().ipv4, 7)), 1);
  EXPECT_EQ(Drain(*b), 0u);
  EXPECT_EQ(a->counters(0).tx_unknown_unicast, 1u);
}

TEST(LoopbackTest, UnknownUnicastIsDroppedAndCounted) {
  auto a = MustOpen("loopback:unknown");
  auto b = MustOpen("loopback:unknown");
  const uint32_t before = a->queue(0).PoolAvailable();
  const MacAddress nobody{{0x02, 0xde, 0xad, 0xbe, 0xef, 0x01}};
  EXPECT_EQ(SendOne(*a, Flow(*a, nobody, b->info().ipv4, 7)), 1) << "taken, then dropped";
  EXPECT_EQ(a->counters(0).tx_unknown_unicast, 1u);
  EXPECT_EQ(a->queue(0).stats().tx_packets, 0u);
  EXPECT_EQ(a->queue(0).PoolAvailable(), before) << "the dropped buffer was freed";
  EXPECT_EQ(Drain(*b), 0u);
}

TEST(LoopbackTest, LeavingPortBecomesUnknownAndItsIndexIsReused) {
  auto a = MustOpen("loopback:leave");
  auto b = MustOpen("loopback:leave");
  auto c = MustOpen("loopback:leave");
  const MacAddress b_mac = b->info().mac;
  ASSERT_EQ(SendOne(*a, Flow(*a, b_mac, b->info().ipv4, 7)), 1);  // in flight when b goes
  b.reset();
  ASSERT_EQ(SendOne(*a, Flow(*a, b_mac, Ipv4Address{}, 7)), 1);
  EXPECT_EQ(a->counters(0).tx_unknown_unicast, 1u);
  ASSERT_EQ(SendOne(*a, Flow(*a, kBroadcastMac, Ipv4Address{0xffffffff}, 7)), 1);
  EXPECT_EQ(Drain(*c), 1u);
  auto b2 = MustOpen("loopback:leave");
  EXPECT_EQ(b2->port_index(), 1);
  EXPECT_EQ(b2->info().mac, b_mac) << "the same open sequence gives the same addresses";
  EXPECT_EQ(Drain(*b2), 0u) << "frames to the old port are gone";
}

// A port's thread keeps polling while other ports of its segment open and
// close (each rewires its queues): a libfabric domain's progress thread
// does that while the application opens or closes another domain. Before
// the queues took a lock for it, ASan saw a null ring here (the incoming
// list reallocated under RxBurst, fi_errors_test's progress thread).
TEST(LoopbackTest, PortsOpenAndCloseWhileAnotherPortsThreadPolls) {
  auto a = MustOpen("loopback:rewire");
  const uint32_t pool_before = a->queue(0).PoolAvailable();
  const UdpFlow to_self = Flow(*a, a->info().mac, a->info().ipv4, 7);
  std::atomic<bool> stop{false};
  uint64_t sent = 0, received = 0;
  std::thread poller([&] {
    while (!stop.load()) {
      sent += SendOne(*a, to_self);
      received += Drain(*a);
    }
    received += Drain(*a);
  });
  for (int i = 0; i < 200; ++i) {
    auto b = MustOpen("loopback:rewire");
    auto c = MustOpen("loopback:rewire");
    ASSERT_NE(b, nullptr);
    ASSERT_NE(c, nullptr);
    // Traffic toward a from the new ports too: its incoming rings are in use.
    SendOne(*b, Flow(*b, a->info().mac, a->info().ipv4, 7));
    SendOne(*c, Flow(*c, kBroadcastMac, Ipv4Address{0xffffffff}, 7));
  }
  stop.store(true);
  poller.join();
  EXPECT_GT(sent, 0u);
  EXPECT_GE(received, sent) << "a frame a sent itself was lost while the segment was rewired";
  EXPECT_EQ(a->queue(0).PoolAvailable(), pool_before);
}

TEST(LoopbackTest, ExplicitAddressesAndTheirErrors) {
  auto a = MustOpen("loopback:explicit,mac=02:aa:bb:cc:dd:ee,ip=192.168.1.5");
  EXPECT_EQ(a->info().mac.ToString(), "02:aa:bb:cc:dd:ee");
  EXPECT_EQ(a->info().ipv4.ToString(), "192.168.1.5");
  absl::Status dup = OpenError("loopback:explicit,mac=02:aa:bb:cc:dd:ee");
  EXPECT_EQ(dup.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(std::string(dup.message()).find("already used"), std::string::npos) << dup;
  EXPECT_EQ(OpenError("loopback:explicit,mac=01:00:5e:00:00:01").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenError("loopback:explicit,mac=00:00:00:00:00:00").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenError("loopback:explicit,mac=zz").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenError("loopback:").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenError("loopback:x,queues=9").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenError("loopback:x,role=server").code(), absl::StatusCode::kInvalidArgument);
  // A failed open leaves no trace: the next port gets index 1.
  EXPECT_EQ(MustOpen("loopback:explicit")->port_index(), 1);
}

TEST(LoopbackTest, FullRingPushesBackAndBroadcastNeedsRoomEverywhere) {
  DeviceOptions small;
  small.ring_size = 8;
  auto a = MustOpen("loopback:full", small);
  auto b = MustOpen("loopback:full", small);
  auto c = MustOpen("loopback:full", small);
  for (int i = 0; i < 8; ++i) ASSERT_EQ(SendOne(*a, Flow(*a, b->info().mac, b->info().ipv4, 7)), 1);
  EXPECT_EQ(SendOne(*a, Flow(*a, b->info().mac, b->info().ipv4, 7)), 0);
  EXPECT_EQ(SendOne(*a, Flow(*a, kBroadcastMac, Ipv4Address{0xffffffff}, 7)), 0)
      << "b's ring is full, so the broadcast is not taken (c gets nothing either)";
  EXPECT_EQ(a->queue(0).stats().tx_ring_full, 2u);
  EXPECT_EQ(Drain(*c), 0u);
  EXPECT_EQ(Drain(*b), 8u);
  EXPECT_EQ(SendOne(*a, Flow(*a, kBroadcastMac, Ipv4Address{0xffffffff}, 7)), 1);
  EXPECT_EQ(Drain(*b), 1u);
  EXPECT_EQ(Drain(*c), 1u);
}

TEST(LoopbackTest, LinkDownDropsBothWaysAndCounts) {
  auto a = MustOpen("loopback:link");
  auto b = MustOpen("loopback:link");
  const UdpFlow ab = Flow(*a, b->info().mac, b->info().ipv4, 7);
  ASSERT_EQ(SendOne(*a, ab), 1);  // waiting in b's ring when b goes down
  ASSERT_TRUE(b->SetLinkState(LinkState::kDown).ok());
  EXPECT_EQ(b->link_state(), LinkState::kDown);
  ASSERT_EQ(SendOne(*a, ab), 1);
  EXPECT_EQ(a->counters(0).tx_peer_link_down, 1u);
  EXPECT_EQ(Drain(*b), 0u);
  EXPECT_EQ(b->counters(0).rx_link_down, 1u);
  EXPECT_EQ(b->queue(0).stats().rx_dropped, 1u);
  ASSERT_TRUE(b->SetLinkState(LinkState::kUp).ok());
  ASSERT_TRUE(a->SetLinkState(LinkState::kDown).ok());
  ASSERT_EQ(SendOne(*a, ab), 1);
  EXPECT_EQ(a->counters(0).tx_link_down, 1u);
  EXPECT_EQ(Drain(*b), 0u);
  ASSERT_TRUE(a->SetLinkState(LinkState::kUp).ok());
  ASSERT_EQ(SendOne(*a, ab), 1);
  EXPECT_EQ(Drain(*b), 1u);
}

TEST(LoopbackTest, FramesLongerThanTheReceiversMtuAreDropped) {
  DeviceOptions jumbo;
  jumbo.mtu = 9000;
  auto a = MustOpen("loopback:mtu", jumbo);
  auto b = MustOpen("loopback:mtu");
  const UdpFlow ab = Flow(*a, b->info().mac, b->info().ipv4, 7);
  ASSERT_EQ(SendOne(*a, ab, 1500 - 28), 1);
  ASSERT_EQ(SendOne(*a, ab, 1500 - 27), 1);
  EXPECT_EQ(a->counters(0).tx_bad_length, 1u);
  EXPECT_EQ(Drain(*b), 1u);
  Packet* p = nullptr;
  ASSERT_TRUE(b->queue(0).AllocBulk({&p, 1}));
  p->len = 1515;  // over b's own max frame
  EXPECT_EQ(b->queue(0).TxBurst({&p, 1}), 1);
  EXPECT_EQ(b->counters(0).tx_bad_length, 1u);
}

TEST(LoopbackTest, SteeringPicksTheQueueAndChecksIt) {
  DeviceOptions opts;
  opts.queues = 3;
  auto a = MustOpen("loopback:steer", opts);
  auto b = MustOpen("loopback:steer", opts);
  ASSERT_TRUE(b->SteerUdpPort(5000, 2).ok());
  EXPECT_EQ(b->SteerUdpPort(5001, 3).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_EQ(SendOne(*a, Flow(*a, b->info().mac, b->info().ipv4, 5000)), 1);
  ASSERT_EQ(SendOne(*a, Flow(*a, b->info().mac, Ipv4Address{0x01020304}, 5000)), 1);
  ASSERT_EQ(SendOne(*a, Flow(*a, b->info().mac, b->info().ipv4, 5002)), 1);
  EXPECT_EQ(Drain(*b, 2), 1u);
  EXPECT_EQ(Drain(*b, 0), 2u) << "another IP or an unsteered port goes to queue 0";
  EXPECT_EQ(Drain(*b, 1), 0u);
}

TEST(LoopbackTest, PeekUdpDstPortTreatsBytesAsUntrusted) {
  uint8_t f[64] = {};
  const UdpFlow flow{MacAddress{}, MacAddress{}, Ipv4Address{1}, Ipv4Address{2}, 3, 4242};
  const size_t len = BuildUdpFrame(flow, {}, f, UdpChecksumFill::kCompute);
  EXPECT_EQ(PeekUdpDstPort(f, static_cast<uint32_t>(len), 2), 4242);
  EXPECT_EQ(PeekUdpDstPort(f, static_cast<uint32_t>(len), 3), std::nullopt) << "other IP";
  EXPECT_EQ(PeekUdpDstPort(f, static_cast<uint32_t>(len - 1), 2), std::nullopt) << "truncated";
  f[14 + 6] = 0x20;  // MF: a fragment
  EXPECT_EQ(PeekUdpDstPort(f, static_cast<uint32_t>(len), 2), std::nullopt);
  f[14 + 6] = 0x40;
  f[14] = 0x4f;  // IHL 60 bytes: the UDP header would lie past the frame
  EXPECT_EQ(PeekUdpDstPort(f, static_cast<uint32_t>(len), 2), std::nullopt);
  EXPECT_EQ(PeekUdpDstPort(f, 10, 2), std::nullopt);
}

// Two threads, one per port, ping-pong 100,000 packets in bursts of 4: each
// ring has one producer and one consumer thread, and TSan checks the pairing.
TEST(LoopbackTest, TwoThreadsPingPong) {
  auto a = MustOpen("loopback:pingpong");
  auto b = MustOpen("loopback:pingpong");
  const uint32_t a_before = a->queue(0).PoolAvailable();
  const uint32_t b_before = b->queue(0).PoolAvailable();
  constexpr uint64_t kPackets = 100'000;
  constexpr uint16_t kBurst = 4;
  const UdpFlow ab = Flow(*a, b->info().mac, b->info().ipv4, 7);

  std::thread echo([&] {
    QueuePair& q = b->queue(0);
    Packet* pkts[kBurst];
    for (uint64_t n = 0; n < kPackets;) {
      const uint16_t got = q.RxBurst(pkts);
      if (got == 0) {
        std::this_thread::yield();
        continue;
      }
      for (uint16_t i = 0; i < got; ++i) {
        // Swap the MACs and send it back.
        uint8_t tmp[6];
        std::memcpy(tmp, pkts[i]->data, 6);
        std::memcpy(pkts[i]->data, pkts[i]->data + 6, 6);
        std::memcpy(pkts[i]->data + 6, tmp, 6);
      }
      for (uint16_t sent = 0; sent < got;) sent += q.TxBurst({pkts + sent, static_cast<size_t>(got - sent)});
      n += got;
    }
  });

  QueuePair& q = a->queue(0);
  Packet* pkts[kBurst];
  uint64_t next_seq = 0;
  uint64_t bad = 0;
  for (uint64_t seq = 0; seq < kPackets; seq += kBurst) {
    ASSERT_TRUE(q.AllocBulk(pkts));
    for (uint16_t i = 0; i < kBurst; ++i) {
      const uint64_t s = seq + i;
      pkts[i]->len = static_cast<uint32_t>(BuildUdpFrame(
          ab, {reinterpret_cast<const uint8_t*>(&s), 8}, {pkts[i]->data, pkts[i]->capacity},
          UdpChecksumFill::kCompute));
    }
    for (uint16_t sent = 0; sent < kBurst;) sent += q.TxBurst({pkts + sent, static_cast<size_t>(kBurst - sent)});
    for (uint16_t got = 0; got < kBurst;) {
      const uint16_t n = q.RxBurst({pkts, static_cast<size_t>(kBurst - got)});
      if (n == 0) std::this_thread::yield();
      for (uint16_t i = 0; i < n; ++i) {
        std::optional<ParsedUdpFrame> parsed = ParseUdpFrame({pkts[i]->data, pkts[i]->len});
        uint64_t s = ~0ull;
        if (parsed && parsed->payload.size() == 8) std::memcpy(&s, parsed->payload.data(), 8);
        bad += s != next_seq++;
      }
      q.FreeBulk({pkts, n});
      got += n;
    }
  }
  echo.join();
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(q.stats().rx_packets, kPackets);
  EXPECT_EQ(a->queue(0).PoolAvailable(), a_before);
  EXPECT_EQ(b->queue(0).PoolAvailable(), b_before);
}

}  // namespace
}  // namespace bypass::driver::loopback
