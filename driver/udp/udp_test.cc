// The UDP device's own behaviour: opening (targets, errors), port binding
// and its conflicts, what TxBurst drops, large datagrams and DSCP.
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

  void Open(const DeviceOptions& opts_a, const DeviceOptions& opts_b) {
    a_ = MustOpen("udp:lo,ip=" + LocalIp(6), opts_a);
    b_ = MustOpen("udp:lo,ip=" + LocalIp(7), opts_b);
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

}  // namespace
}  // namespace bypass::driver::udp
