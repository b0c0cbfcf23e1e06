// The UDP device's own behaviour: opening (targets, errors), port binding
// and its conflicts, what TxBurst drops, large datagrams and DSCP, and the
// UDP segmentation/receive offload (GSO/GRO) paths and their fallback.
#include "driver/udp/udp_device.h"

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "driver/device.h"
#include "driver/host.h"
#include "driver/net_headers.h"
#include "driver/options.h"
#include "driver/testing/conformance.h"
#include "driver/testing/conformance_util.h"
#include "driver/uri.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bypass::driver::udp {
namespace {

using ::bypass::driver::testing::BackendFeatures;
using ::bypass::driver::testing::FlowBetween;
using ::bypass::driver::testing::Pump;
using ::bypass::driver::testing::TestFrameSeq;
using ::bypass::driver::testing::WriteTestFrame;
using ::bypass::driver::testing::LocalIp;
using ::testing::HasSubstr;

std::unique_ptr<Device> MustOpen(const std::string& uri, const DeviceOptions& opts = {}) {
  absl::StatusOr<std::unique_ptr<Device>> dev = OpenDevice(uri, opts);
  EXPECT_TRUE(dev.ok()) << dev.status();
  return dev.ok() ? *std::move(dev) : nullptr;
}

UdpQueue& Q(Device& d) { return static_cast<UdpDevice&>(d).udp_queue(); }

BackendFeatures Budget() {
  BackendFeatures f;
  f.poll_budget = 1'000'000;
  return f;
}

// Without mtu= a device takes its link's MTU up to jumbo frames, never
// below 1500, and a jumbo pool keeps the bytes of a 1500-byte one.
TEST(UdpDevice, LinkMtuAndJumboPool) {
  EXPECT_EQ(LinkMtuFor(0), 1500u);  // unreadable
  EXPECT_EQ(LinkMtuFor(1280), 1500u);
  EXPECT_EQ(LinkMtuFor(1500), 1500u);
  EXPECT_EQ(LinkMtuFor(4000), 4000u);
  EXPECT_EQ(LinkMtuFor(9000), 9000u);
  EXPECT_EQ(LinkMtuFor(65535), 9000u);
  DeviceOptions o;
  EXPECT_EQ(PoolBuffersFor(o, 1514), DefaultPoolBuffers(o, 1514));
  EXPECT_EQ(PoolBuffersFor(o, 9014), kMinJumboPoolBuffers);
  o.ring_size = 8192;  // a pool of 32768 1500-byte frames: 5.9 times as many 9000-byte ones
  EXPECT_EQ(PoolBuffersFor(o, 9014), 32768u * (kDataOffset + 1514) / (kDataOffset + 9014));
  o.pool_buffers = 100;  // named: kept
  EXPECT_EQ(PoolBuffersFor(o, 9014), 100u);
  // lo is no link: 1500 there, and mtu= wins everywhere.
  std::unique_ptr<Device> lo = MustOpen("udp:lo");
  ASSERT_NE(lo, nullptr);
  EXPECT_EQ(lo->info().mtu, 1500u);
  std::unique_ptr<Device> named = MustOpen("udp:lo,mtu=4000");
  ASSERT_NE(named, nullptr);
  EXPECT_EQ(named->info().mtu, 4000u);
}

TEST(UdpDevice, DescribesItselfThroughOpenDevice) {
  std::unique_ptr<Device> dev = MustOpen("udp:lo,ip=" + LocalIp(1));
  ASSERT_NE(dev, nullptr);
  const DeviceInfo& info = dev->info();
  EXPECT_EQ(info.driver, "udp");
  EXPECT_EQ(info.ipv4.ToString(), LocalIp(1));
  EXPECT_EQ(info.mac, MacFromIpv4(info.ipv4)) << "lo has no MAC: one derived from the address";
  EXPECT_EQ(info.mac.bytes[0], 0x02) << "locally administered, unicast";
  EXPECT_EQ(info.num_queues, 1);
  EXPECT_FALSE(info.can_steer);
  EXPECT_TRUE(info.owns_port);
  EXPECT_EQ(info.offloads & (kOffloadRxIpChecksum | kOffloadRxUdpChecksum),
            kOffloadRxIpChecksum | kOffloadRxUdpChecksum);
  EXPECT_EQ(dev->link_state(), LinkState::kUp);
  EXPECT_EQ(dev->SteerUdpPort(5000, 0).code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(dev->SetLinkState(LinkState::kDown).code(), absl::StatusCode::kUnimplemented);
}

TEST(UdpDevice, TargetsResolveToLocalAddresses) {
  std::unique_ptr<Device> primary = MustOpen("udp:");
  ASSERT_NE(primary, nullptr);
  EXPECT_EQ(primary->info().ipv4, PrimaryIpv4());

  std::unique_ptr<Device> lo = MustOpen("udp:lo");
  ASSERT_NE(lo, nullptr);
  EXPECT_EQ(lo->info().ipv4, FindInterface("lo")->ipv4);

  std::unique_ptr<Device> literal = MustOpen("udp:" + LocalIp(3));
  ASSERT_NE(literal, nullptr);
  EXPECT_EQ(literal->info().ipv4.ToString(), LocalIp(3));
}

TEST(UdpDevice, UnknownInterfaceSaysWhatExists) {
  absl::StatusOr<std::unique_ptr<Device>> dev = OpenDevice("udp:nosuch0");
  ASSERT_FALSE(dev.ok());
  EXPECT_EQ(dev.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(dev.status().message(), HasSubstr("nosuch0"));
  EXPECT_THAT(dev.status().message(), HasSubstr("lo"));  // what there is
  EXPECT_THAT(dev.status().message(), HasSubstr("udp:A.B.C.D"));  // what to do
  EXPECT_EQ(std::string(dev.status().message()).find('\n'), std::string::npos);
}

TEST(UdpDevice, NonLocalAddressIsRefused) {
  // 192.0.2.0/24 is TEST-NET-1: no host has it. No packet is sent.
  for (const char* uri : {"udp:192.0.2.7", "udp:lo,ip=192.0.2.7"}) {
    absl::StatusOr<std::unique_ptr<Device>> dev = OpenDevice(uri);
    ASSERT_FALSE(dev.ok()) << uri;
    EXPECT_EQ(dev.status().code(), absl::StatusCode::kInvalidArgument) << uri;
    EXPECT_THAT(dev.status().message(), HasSubstr("not an address of this host")) << uri;
  }
}

TEST(UdpDevice, OneQueueAndMtuUpTo65000) {
  absl::StatusOr<std::unique_ptr<Device>> two = OpenDevice("udp:lo,queues=2");
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(two.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(two.status().message(), HasSubstr("one queue"));

  DeviceOptions small;
  small.pool_buffers = 16;
  std::unique_ptr<Device> big = MustOpen("udp:lo,mtu=65000", small);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->info().mtu, 65000u);
  absl::StatusOr<std::unique_ptr<Device>> too_big = OpenDevice("udp:lo,mtu=65001");
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kInvalidArgument);
  // Other backends keep the NIC ceiling.
  EXPECT_EQ(OpenDevice("loopback:udp_test,mtu=9001").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(UdpDevice, BindConflictsAreAlreadyExistsAndUnbindFreesThePort) {
  const std::string uri = "udp:lo,ip=" + LocalIp(4);
  std::unique_ptr<Device> a = MustOpen(uri);
  std::unique_ptr<Device> b = MustOpen(uri);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  constexpr uint16_t kPort = 43100;
  ASSERT_TRUE(a->queue(0).BindUdpPort(kPort).ok());

  const absl::Status twice = a->queue(0).BindUdpPort(kPort);
  EXPECT_EQ(twice.code(), absl::StatusCode::kAlreadyExists) << twice;

  const absl::Status taken = b->queue(0).BindUdpPort(kPort);
  EXPECT_EQ(taken.code(), absl::StatusCode::kAlreadyExists) << taken;
  EXPECT_THAT(taken.message(), HasSubstr(absl::StrCat(LocalIp(4), ":", kPort)));
  EXPECT_THAT(taken.message(), HasSubstr("another process"));

  a->queue(0).UnbindUdpPort(kPort);
  EXPECT_TRUE(b->queue(0).BindUdpPort(kPort).ok());
}

TEST(UdpDevice, SixtyFourPortsAtMost) {
  std::unique_ptr<Device> a = MustOpen("udp:lo,ip=" + LocalIp(5));
  ASSERT_NE(a, nullptr);
  for (uint16_t i = 0; i < UdpQueue::kMaxBoundPorts; ++i) {
    ASSERT_TRUE(a->queue(0).BindUdpPort(static_cast<uint16_t>(43200 + i)).ok()) << i;
  }
  EXPECT_EQ(a->queue(0).BindUdpPort(43300).code(), absl::StatusCode::kResourceExhausted);
}

// Two devices on lo, A bound to kSrc and B to kDst.
class UdpPairTest : public ::testing::Test {
 protected:
  static constexpr uint16_t kSrc = 43401;
  static constexpr uint16_t kDst = 43400;

  // `suffix` ends both URIs (",gso=0").
  void Open(const DeviceOptions& opts_a, const DeviceOptions& opts_b,
            const std::string& suffix = "") {
    a_ = MustOpen("udp:lo,ip=" + LocalIp(6) + suffix, opts_a);
    b_ = MustOpen("udp:lo,ip=" + LocalIp(7) + suffix, opts_b);
    ASSERT_NE(a_, nullptr);
    ASSERT_NE(b_, nullptr);
    ASSERT_TRUE(a_->queue(0).BindUdpPort(kSrc).ok());
    ASSERT_TRUE(b_->queue(0).BindUdpPort(kDst).ok());
  }
  Packet* Alloc() {
    Packet* p = nullptr;
    EXPECT_TRUE(a_->queue(0).AllocBulk({&p, 1}));
    return p;
  }
  // Polls B a bounded number of times; frees what arrives.
  size_t Arrivals() {
    Pump pump(Budget());
    Packet* scratch[8];
    return pump.PollOurs(b_->queue(0), scratch);
  }

  std::unique_ptr<Device> a_, b_;
};

TEST_F(UdpPairTest, FrameFromAnUnboundSourcePortIsDroppedAndCounted) {
  ASSERT_NO_FATAL_FAILURE(Open({}, {}));
  const uint32_t level = a_->queue(0).PoolAvailable();
  UdpFlow flow = FlowBetween(*a_, *b_, kDst);
  flow.src_port = kSrc + 7;  // not bound on A
  Packet* p = Alloc();
  ASSERT_TRUE(WriteTestFrame(p, flow, 1, 100));
  EXPECT_EQ(a_->queue(0).TxBurst({&p, 1}), 1) << "a dropped frame counts as taken";
  EXPECT_EQ(Q(*a_).counters().tx_unbound_port, 1u);
  EXPECT_EQ(a_->queue(0).stats().tx_packets, 0u);
  EXPECT_EQ(a_->queue(0).PoolAvailable(), level) << "the dropped frame was freed";
  EXPECT_EQ(Arrivals(), 0u);
}

// PeerAlive: a port its host answers with ICMP port unreachable is a peer
// gone (kDead) until a datagram comes from it again; any other address is
// kNoDeathSeen (the device would have seen an exit; it has not).
TEST_F(UdpPairTest, PortUnreachableSaysThePeerIsGoneUntilItIsHeardFrom) {
  ASSERT_NO_FATAL_FAILURE(Open({}, {}));
  const Ipv4Address b_ip = b_->info().ipv4;
  EXPECT_EQ(a_->queue(0).PeerAlive(b_ip, kDst), PeerLiveness::kNoDeathSeen);
  b_->queue(0).UnbindUdpPort(kDst);  // its process is gone: the socket closed
  Packet* p = Alloc();
  ASSERT_TRUE(WriteTestFrame(p, FlowBetween(*a_, *b_, kDst), 1, 100));
  ASSERT_EQ(a_->queue(0).TxBurst({&p, 1}), 1);
  PeerLiveness l = PeerLiveness::kNoDeathSeen;
  for (int i = 0; i < 2000 && l != PeerLiveness::kDead; ++i) {
    Packet* scratch[8];
    a_->queue(0).FreeBulk({scratch, a_->queue(0).RxBurst(scratch)});
    l = a_->queue(0).PeerAlive(b_ip, kDst);
    if (l != PeerLiveness::kDead) usleep(1000);
  }
  EXPECT_EQ(l, PeerLiveness::kDead);
  EXPECT_GE(Q(*a_).counters().rx_port_unreachable, 1u);
  EXPECT_EQ(Q(*a_).counters().rx_errors, 0u) << "an ICMP error is not a receive error";
  EXPECT_EQ(a_->queue(0).PeerAlive(b_ip, kDst + 1), PeerLiveness::kNoDeathSeen);
  // It comes back (a new process on the port) and sends: no longer gone.
  ASSERT_TRUE(b_->queue(0).BindUdpPort(kDst).ok());
  UdpFlow back = FlowBetween(*b_, *a_, kSrc);
  back.src_port = kDst;
  Packet* q = nullptr;
  ASSERT_TRUE(b_->queue(0).AllocBulk({&q, 1}));
  ASSERT_TRUE(WriteTestFrame(q, back, 2, 100));
  ASSERT_EQ(b_->queue(0).TxBurst({&q, 1}), 1);
  Pump pump(Budget());
  std::vector<Packet*> got = pump.Receive(a_->queue(0), 1);
  ASSERT_EQ(got.size(), 1u);
  a_->queue(0).FreeBulk(got);
  EXPECT_EQ(a_->queue(0).PeerAlive(b_ip, kDst), PeerLiveness::kNoDeathSeen);
}

TEST_F(UdpPairTest, NonUdpFramesAreDroppedInOrder) {
  ASSERT_NO_FATAL_FAILURE(Open({}, {}));
  const uint32_t level = a_->queue(0).PoolAvailable();
  const UdpFlow flow = FlowBetween(*a_, *b_, kDst);
  ASSERT_EQ(flow.src_port, kSrc) << "FlowBetween's source port is dst + 1";
  Packet* pkts[4];
  ASSERT_TRUE(a_->queue(0).AllocBulk(pkts));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(WriteTestFrame(pkts[i], flow, i, 64));
  pkts[1]->data[12] = 0x08;  // ARP, not IPv4
  pkts[1]->data[13] = 0x06;
  pkts[2]->len = 20;         // shorter than its headers
  EXPECT_EQ(a_->queue(0).TxBurst(pkts), 4);
  EXPECT_EQ(Q(*a_).counters().tx_not_udp, 2u);
  EXPECT_EQ(a_->queue(0).stats().tx_packets, 2u);
  EXPECT_EQ(a_->queue(0).PoolAvailable(), level);
  Pump pump(Budget());
  std::vector<Packet*> got = pump.Receive(b_->queue(0), 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(TestFrameSeq(got[0]), 0u);
  EXPECT_EQ(TestFrameSeq(got[1]), 3u);
  b_->queue(0).FreeBulk(got);
}

TEST_F(UdpPairTest, ReceivedFramesParseWithTheSendersAddressesAndDscp) {
  ASSERT_NO_FATAL_FAILURE(Open({}, {}));
  UdpFlow flow = FlowBetween(*a_, *b_, kDst);
  flow.dscp = 46;  // EF
  Packet* p = Alloc();
  ASSERT_TRUE(WriteTestFrame(p, flow, 9, 300));
  ASSERT_EQ(a_->queue(0).TxBurst({&p, 1}), 1);
  Pump pump(Budget());
  std::vector<Packet*> got = pump.Receive(b_->queue(0), 1);
  ASSERT_EQ(got.size(), 1u);
  std::optional<ParsedUdpFrame> parsed = ParseUdpFrame({got[0]->data, got[0]->len});
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->flow.src_ip, a_->info().ipv4);
  EXPECT_EQ(parsed->flow.dst_ip, b_->info().ipv4);
  EXPECT_EQ(parsed->flow.src_port, kSrc);
  EXPECT_EQ(parsed->flow.dst_port, kDst);
  EXPECT_EQ(parsed->flow.src_mac, a_->info().mac);
  EXPECT_EQ(parsed->flow.dst_mac, b_->info().mac);
  EXPECT_EQ(parsed->flow.dscp, 46) << "the TOS byte was copied to the socket and back";
  EXPECT_EQ(got[0]->ol_flags & (kRxIpChecksumGood | kRxL4ChecksumGood),
            kRxIpChecksumGood | kRxL4ChecksumGood);
  EXPECT_EQ(TestFrameSeq(got[0]), 9u);
  b_->queue(0).FreeBulk(got);
}

class UdpLargeTest : public UdpPairTest, public ::testing::WithParamInterface<uint32_t> {};

TEST_P(UdpLargeTest, FullSizeDatagramsArriveWhole) {
  DeviceOptions opts;
  opts.mtu = GetParam();
  opts.pool_buffers = 64;
  ASSERT_NO_FATAL_FAILURE(Open(opts, opts));
  const UdpFlow flow = FlowBetween(*a_, *b_, kDst);
  Packet* pkts[4];
  ASSERT_TRUE(a_->queue(0).AllocBulk(pkts));
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(WriteTestFrame(pkts[i], flow, i, GetParam() - 28 - i * 1000));
  }
  ASSERT_TRUE(Pump(Budget()).SendAll(a_->queue(0), pkts));
  Pump pump(Budget());
  std::vector<Packet*> got = pump.Receive(b_->queue(0), 4);
  ASSERT_EQ(got.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(got[i]->len, GetParam() + 14 - i * 1000);
    EXPECT_EQ(TestFrameSeq(got[i]), static_cast<uint64_t>(i));
  }
  b_->queue(0).FreeBulk(got);
}

INSTANTIATE_TEST_SUITE_P(Mtu, UdpLargeTest, ::testing::Values(9000u, 65000u));

TEST_F(UdpPairTest, DatagramLongerThanTheReceiversMtuIsDroppedAndCounted) {
  DeviceOptions big;
  big.mtu = 9000;
  big.pool_buffers = 64;
  ASSERT_NO_FATAL_FAILURE(Open(big, {}));
  const uint32_t level = b_->queue(0).PoolAvailable();
  const UdpFlow flow = FlowBetween(*a_, *b_, kDst);
  Packet* pkts[2];
  ASSERT_TRUE(a_->queue(0).AllocBulk(pkts));
  ASSERT_TRUE(WriteTestFrame(pkts[0], flow, 0, 3000));  // over B's 1500
  ASSERT_TRUE(WriteTestFrame(pkts[1], flow, 1, 1000));
  ASSERT_EQ(a_->queue(0).TxBurst(pkts), 2);
  Pump pump(Budget());
  std::vector<Packet*> got = pump.Receive(b_->queue(0), 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(TestFrameSeq(got[0]), 1u);
  b_->queue(0).FreeBulk(got);
  EXPECT_EQ(Q(*b_).counters().rx_truncated, 1u);
  EXPECT_EQ(b_->queue(0).stats().rx_dropped, 1u);
  EXPECT_EQ(b_->queue(0).PoolAvailable(), level);
}

TEST_F(UdpPairTest, EverySocketIsPolled) {
  ASSERT_NO_FATAL_FAILURE(Open({}, {}));
  // B has three ports; frames to each arrive, whichever socket is busiest.
  ASSERT_TRUE(b_->queue(0).BindUdpPort(kDst + 10).ok());
  ASSERT_TRUE(b_->queue(0).BindUdpPort(kDst + 20).ok());
  std::vector<Packet*> pkts(30);
  ASSERT_TRUE(a_->queue(0).AllocBulk(absl::MakeSpan(pkts)));
  for (size_t i = 0; i < pkts.size(); ++i) {
    UdpFlow flow = FlowBetween(*a_, *b_, static_cast<uint16_t>(kDst + 10 * (i % 3)));
    flow.src_port = kSrc;
    ASSERT_TRUE(WriteTestFrame(pkts[i], flow, i, 64));
  }
  ASSERT_TRUE(Pump(Budget()).SendAll(a_->queue(0), pkts));
  Pump pump(Budget());
  std::vector<Packet*> got = pump.Receive(b_->queue(0), pkts.size());
  ASSERT_EQ(got.size(), pkts.size());
  int per_port[3] = {};
  for (Packet* p : got) {
    std::optional<ParsedUdpFrame> parsed = ParseUdpFrame({p->data, p->len});
    ASSERT_TRUE(parsed.has_value());
    ++per_port[(parsed->flow.dst_port - kDst) / 10];
  }
  EXPECT_EQ(per_port[0], 10);
  EXPECT_EQ(per_port[1], 10);
  EXPECT_EQ(per_port[2], 10);
  b_->queue(0).FreeBulk(got);
}

TEST(UdpDevice, GsoKeyIsZeroOrOne) {
  std::unique_ptr<Device> off = MustOpen("udp:lo,gso=0");
  ASSERT_NE(off, nullptr);
  EXPECT_FALSE(Q(*off).gso());
  EXPECT_FALSE(Q(*off).gro());
  absl::StatusOr<std::unique_ptr<Device>> bad = OpenDevice("udp:lo,gso=yes");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("gso=yes"));
}

// Each case runs with GSO/GRO (the default) and without (gso=0).
class UdpOffloadTest : public UdpPairTest, public ::testing::WithParamInterface<bool> {
 protected:
  void OpenBoth(DeviceOptions a = {}, DeviceOptions b = {}) {
    ASSERT_NO_FATAL_FAILURE(Open(a, b, GetParam() ? "" : ",gso=0"));
    ASSERT_EQ(Q(*a_).gso(), GetParam()) << "this kernel refused UDP_SEGMENT";
    ASSERT_EQ(Q(*b_).gro(), GetParam()) << "this kernel refused UDP_GRO";
  }
  // n frames to kDst from kSrc, seq first_seq..., payload_len(i) bytes each.
  std::vector<Packet*> Frames(size_t n, uint64_t first_seq, size_t (*payload_len)(size_t)) {
    std::vector<Packet*> pkts(n);
    EXPECT_TRUE(a_->queue(0).AllocBulk(absl::MakeSpan(pkts)));
    const UdpFlow flow = FlowBetween(*a_, *b_, kDst);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_TRUE(WriteTestFrame(pkts[i], flow, first_seq + i, payload_len(i)));
    }
    return pkts;
  }
};

TEST_P(UdpOffloadTest, ARunOfSameSizeFramesArrivesAsTheSameFramesInOrder) {
  ASSERT_NO_FATAL_FAILURE(OpenBoth());
  // 100 frames of 1472 bytes: two messages of 44 and one of 12 with GSO.
  std::vector<Packet*> pkts = Frames(100, 0, [](size_t) -> size_t { return 1472; });
  ASSERT_TRUE(Pump(Budget()).SendAll(a_->queue(0), pkts));
  Pump pump(Budget());
  std::vector<Packet*> got = pump.Receive(b_->queue(0), 100);
  ASSERT_EQ(got.size(), 100u);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i]->len, 1514u) << i;
    EXPECT_EQ(TestFrameSeq(got[i]), i) << "intact and in order";
  }
  b_->queue(0).FreeBulk(got);
  EXPECT_EQ(a_->queue(0).stats().tx_packets, 100u) << "counted per frame, not per message";
  if (GetParam()) {
    EXPECT_GE(Q(*a_).counters().tx_gso_messages, 3u);
    EXPECT_GE(Q(*b_).counters().rx_gro_messages, 1u) << "lo hands a GSO message whole";
  } else {
    EXPECT_EQ(Q(*a_).counters().tx_gso_messages, 0u);
    EXPECT_EQ(Q(*b_).counters().rx_gro_messages, 0u);
  }
}

TEST_P(UdpOffloadTest, AShortLastSegmentEndsTheRun) {
  ASSERT_NO_FATAL_FAILURE(OpenBoth());
  // 5 x 1000, then 300 (the short last of that message), then 5 x 1000.
  std::vector<Packet*> pkts =
      Frames(11, 0, [](size_t i) -> size_t { return i == 5 ? 300 : 1000; });
  ASSERT_TRUE(Pump(Budget()).SendAll(a_->queue(0), pkts));
  Pump pump(Budget());
  std::vector<Packet*> got = pump.Receive(b_->queue(0), 11);
  ASSERT_EQ(got.size(), 11u);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i]->len, (i == 5 ? 300u : 1000u) + 42) << i;
    EXPECT_EQ(TestFrameSeq(got[i]), i);
  }
  b_->queue(0).FreeBulk(got);
  if (GetParam()) {
    EXPECT_EQ(Q(*a_).counters().tx_gso_messages, 2u);
  }
}

TEST_P(UdpOffloadTest, MixedDestinationsSizesSourcesAndDscpKeepOrder) {
  ASSERT_NO_FATAL_FAILURE(OpenBoth());
  ASSERT_TRUE(a_->queue(0).BindUdpPort(kSrc + 10).ok());
  ASSERT_TRUE(b_->queue(0).BindUdpPort(kDst + 10).ok());
  // 120 frames in runs of 1-7 that change source port, destination port,
  // size or DSCP; each destination must see its own in order and intact.
  std::vector<Packet*> pkts(120);
  ASSERT_TRUE(a_->queue(0).AllocBulk(absl::MakeSpan(pkts)));
  for (size_t i = 0; i < pkts.size(); ++i) {
    const size_t run = (i * 7 / 23) % 5;
    UdpFlow flow = FlowBetween(*a_, *b_, static_cast<uint16_t>(kDst + (run % 2) * 10));
    flow.src_port = static_cast<uint16_t>(kSrc + ((run / 2) % 2) * 10);
    flow.dscp = run == 4 ? 46 : 0;
    ASSERT_TRUE(WriteTestFrame(pkts[i], flow, i, run == 3 ? 64 : 700 + (i % 3 == 2 ? 0 : 100)));
  }
  ASSERT_TRUE(Pump(Budget()).SendAll(a_->queue(0), pkts));
  Pump pump(Budget());
  std::vector<Packet*> got = pump.Receive(b_->queue(0), pkts.size());
  ASSERT_EQ(got.size(), pkts.size());
  int64_t last[2] = {-1, -1};
  size_t with_ef = 0;
  for (Packet* p : got) {
    std::optional<ParsedUdpFrame> parsed = ParseUdpFrame({p->data, p->len});
    ASSERT_TRUE(parsed.has_value());
    const size_t dst = (parsed->flow.dst_port - kDst) / 10;
    const std::optional<uint64_t> seq = TestFrameSeq(p);
    ASSERT_TRUE(seq.has_value());
    EXPECT_GT(static_cast<int64_t>(*seq), last[dst]) << "in order per destination";
    last[dst] = static_cast<int64_t>(*seq);
    const size_t run = (*seq * 7 / 23) % 5;
    EXPECT_EQ(parsed->flow.src_port, kSrc + ((run / 2) % 2) * 10) << *seq;
    EXPECT_EQ(parsed->flow.dscp, run == 4 ? 46 : 0) << *seq;
    with_ef += parsed->flow.dscp == 46;
  }
  EXPECT_GT(with_ef, 0u);
  b_->queue(0).FreeBulk(got);
}

TEST_P(UdpOffloadTest, ShortPoolMidSplitLosesNothing) {
  DeviceOptions small;
  small.pool_buffers = 16;
  ASSERT_NO_FATAL_FAILURE(OpenBoth({}, small));
  std::vector<Packet*> pkts = Frames(40, 0, [](size_t) -> size_t { return 1000; });
  ASSERT_TRUE(Pump(Budget()).SendAll(a_->queue(0), pkts));
  // Holds what arrives until the pool is empty, then lets it go: 40 frames
  // through a pool of 16.
  std::vector<uint64_t> seqs;
  Packet* scratch[64];
  for (int polls = 0; polls < 1'000'000 && seqs.size() < 40; ++polls) {
    const uint16_t n = b_->queue(0).RxBurst(scratch);
    for (uint16_t k = 0; k < n; ++k) seqs.push_back(TestFrameSeq(scratch[k]).value_or(~0ull));
    if (n > 0) {
      EXPECT_EQ(b_->queue(0).RxBurst(scratch), 0) << "the pool is empty";
      b_->queue(0).FreeBulk({scratch, n});
    }
  }
  ASSERT_EQ(seqs.size(), 40u);
  for (size_t i = 0; i < seqs.size(); ++i) EXPECT_EQ(seqs[i], i);
  EXPECT_EQ(b_->queue(0).stats().rx_dropped, 0u);
  EXPECT_GT(Q(*b_).counters().rx_no_buffer, 0u);
}

// With GRO a poll receives into the bounce buffer and takes pool buffers
// only for what arrived: an empty poll costs the system call alone (the
// default domain polls its kernel UDP device beside shared memory), and
// rx_no_buffer counts only polls where a frame waited for a buffer.
TEST_P(UdpOffloadTest, AnEmptyPollTakesNoBufferAndAFrameWaitsForOne) {
  DeviceOptions small;
  small.pool_buffers = 16;
  ASSERT_NO_FATAL_FAILURE(OpenBoth({}, small));
  QueuePair& rx = b_->queue(0);
  std::vector<Packet*> held(rx.PoolAvailable());
  ASSERT_TRUE(rx.AllocBulk(absl::MakeSpan(held)));
  ASSERT_EQ(rx.PoolAvailable(), 0u);
  Packet* scratch[8];
  EXPECT_EQ(rx.RxBurst(scratch), 0);
  if (GetParam()) {
    EXPECT_EQ(Q(*b_).counters().rx_no_buffer, 0u) << "nothing waited";
  }
  std::vector<Packet*> pkts = Frames(3, 7, [](size_t) -> size_t { return 200; });
  ASSERT_TRUE(Pump(Budget()).SendAll(a_->queue(0), pkts));
  // The frames wait (in the socket, or with GRO in the bounce buffer) for
  // buffers; none is lost.
  for (int polls = 0; polls < 1'000'000 && Q(*b_).counters().rx_no_buffer < 2; ++polls) {
    EXPECT_EQ(rx.RxBurst(scratch), 0) << "the pool is empty";
  }
  EXPECT_GE(Q(*b_).counters().rx_no_buffer, 1u);
  rx.FreeBulk(held);
  std::vector<Packet*> got = Pump(Budget()).Receive(rx, 3);
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(TestFrameSeq(got[i]), 7 + i);
  rx.FreeBulk(got);
  EXPECT_EQ(rx.stats().rx_dropped, 0u);
}

TEST_P(UdpOffloadTest, AShortOutputMidSplitLosesNothing) {
  ASSERT_NO_FATAL_FAILURE(OpenBoth());
  std::vector<Packet*> pkts = Frames(30, 0, [](size_t) -> size_t { return 500; });
  ASSERT_TRUE(Pump(Budget()).SendAll(a_->queue(0), pkts));
  std::vector<uint64_t> seqs;
  Packet* one[3];
  for (int polls = 0; polls < 1'000'000 && seqs.size() < 30; ++polls) {
    const uint16_t n = b_->queue(0).RxBurst(one);  // three at a time
    for (uint16_t k = 0; k < n; ++k) seqs.push_back(TestFrameSeq(one[k]).value_or(~0ull));
    b_->queue(0).FreeBulk({one, n});
  }
  ASSERT_EQ(seqs.size(), 30u);
  for (size_t i = 0; i < seqs.size(); ++i) EXPECT_EQ(seqs[i], i);
}

INSTANTIATE_TEST_SUITE_P(Gso, UdpOffloadTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "On" : "Off";
                         });

}  // namespace
}  // namespace bypass::driver::udp
