#include "driver/testing/frames.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace bypass::driver::testing {
namespace {

UdpFlow TestFlow() {
  UdpFlow f;
  f.src_mac = MacAddress{{0x02, 0, 0, 0, 0, 1}};
  f.dst_mac = MacAddress{{0x02, 0, 0, 0, 0, 2}};
  f.src_ip = Ipv4Address{0x0a000001};
  f.dst_ip = Ipv4Address{0x0a000002};
  f.src_port = 1234;
  f.dst_port = 5678;
  return f;
}

TEST(FramesTest, BuildThenParseRoundTrips) {
  const std::vector<uint8_t> payload = {'h', 'e', 'l', 'l', 'o'};
  uint8_t buf[128];
  const size_t len = BuildUdpFrame(TestFlow(), payload, buf);
  ASSERT_EQ(len, kUdpFrameOverhead + payload.size());
  std::optional<ParsedUdpFrame> p = ParseUdpFrame({buf, len});
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->flow.src_mac, TestFlow().src_mac);
  EXPECT_EQ(p->flow.dst_mac, TestFlow().dst_mac);
  EXPECT_EQ(p->flow.src_ip, TestFlow().src_ip);
  EXPECT_EQ(p->flow.dst_ip, TestFlow().dst_ip);
  EXPECT_EQ(p->flow.src_port, 1234);
  EXPECT_EQ(p->flow.dst_port, 5678);
  EXPECT_EQ(std::vector<uint8_t>(p->payload.begin(), p->payload.end()), payload);
  // The IPv4 header checksum verifies to zero.
  EXPECT_EQ(InternetChecksum({buf + kEthHeaderLen, kIpv4HeaderLen}), 0);
}

TEST(FramesTest, KnownChecksums) {
  // RFC 1071's example words 0001 f203 f4f5 f6f7 sum to ddf2; complemented 220d.
  const uint8_t words[] = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7};
  EXPECT_EQ(InternetChecksum(words), 0x220d);
}

TEST(FramesTest, EthernetPaddingIsAllowed) {
  uint8_t buf[128] = {};
  const size_t len = BuildUdpFrame(TestFlow(), {}, buf);
  ASSERT_EQ(len, 42u);
  std::optional<ParsedUdpFrame> p = ParseUdpFrame({buf, 60});
  ASSERT_TRUE(p.has_value());
  EXPECT_TRUE(p->payload.empty());
}

TEST(FramesTest, RejectsDamage) {
  const uint8_t payload[16] = {1, 2, 3};
  uint8_t good[128];
  const size_t len = BuildUdpFrame(TestFlow(), payload, good);
  ASSERT_TRUE(ParseUdpFrame({good, len}).has_value());
  EXPECT_FALSE(ParseUdpFrame({good, len - 1}).has_value()) << "truncated";
  EXPECT_FALSE(ParseUdpFrame({good, 20}).has_value());
  for (size_t at : {size_t{12}, size_t{14}, size_t{16}, size_t{23}, size_t{26}, size_t{40},
                    len - 1}) {
    uint8_t bad[128];
    std::copy(good, good + len, bad);
    bad[at] ^= 0x40;
    EXPECT_FALSE(ParseUdpFrame({bad, len}).has_value()) << "byte " << at;
  }
  // A zero UDP checksum means "none": accepted.
  uint8_t nocsum[128];
  std::copy(good, good + len, nocsum);
  nocsum[40] = nocsum[41] = 0;
  EXPECT_TRUE(ParseUdpFrame({nocsum, len}).has_value());
}

TEST(FramesTest, TooSmallBufferGivesZero) {
  uint8_t buf[50];
  const uint8_t payload[10] = {};
  EXPECT_EQ(BuildUdpFrame(TestFlow(), payload, buf), 0u);
}

}  // namespace
}  // namespace bypass::driver::testing
