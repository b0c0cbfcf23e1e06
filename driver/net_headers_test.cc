#include "driver/net_headers.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "gtest/gtest.h"

namespace bypass::driver {
namespace {

constexpr size_t kIpAt = sizeof(EthernetHeader);
constexpr size_t kUdpAt = sizeof(EthernetHeader) + sizeof(Ipv4Header);

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

uint16_t Get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

// Recomputes the IPv4 header checksum of a frame in place.
void FixIpChecksum(std::vector<uint8_t>& f) {
  const size_t ihl = std::min<size_t>((f[kIpAt] & 0x0f) * 4u, f.size() - kIpAt);
  Put16(&f[kIpAt + 10], 0);
  Put16(&f[kIpAt + 10], InternetChecksum({&f[kIpAt], ihl}));
}

// A frame of `payload_len` bytes of payload.
std::vector<uint8_t> GoodFrame(size_t payload_len,
                               UdpChecksumFill fill = UdpChecksumFill::kCompute) {
  std::vector<uint8_t> payload(payload_len);
  for (size_t i = 0; i < payload_len; ++i) payload[i] = static_cast<uint8_t>(i * 7 + 1);
  std::vector<uint8_t> f(kUdpFrameHeaderBytes + payload_len);
  EXPECT_EQ(BuildUdpFrame(TestFlow(), payload, absl::MakeSpan(f), fill), f.size());
  return f;
}

TEST(NetHeadersTest, BuildThenParseRoundTrips) {
  const std::vector<uint8_t> payload = {'h', 'e', 'l', 'l', 'o'};
  uint8_t buf[128];
  const size_t len = BuildUdpFrame(TestFlow(), payload, buf, UdpChecksumFill::kCompute);
  ASSERT_EQ(len, kUdpFrameHeaderBytes + payload.size());
  std::optional<ParsedUdpFrame> p = ParseUdpFrame({buf, len});
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->flow.src_mac, TestFlow().src_mac);
  EXPECT_EQ(p->flow.dst_mac, TestFlow().dst_mac);
  EXPECT_EQ(p->flow.src_ip, TestFlow().src_ip);
  EXPECT_EQ(p->flow.dst_ip, TestFlow().dst_ip);
  EXPECT_EQ(p->flow.src_port, 1234);
  EXPECT_EQ(p->flow.dst_port, 5678);
  EXPECT_EQ(p->flow, TestFlow());
  EXPECT_EQ(std::vector<uint8_t>(p->payload.begin(), p->payload.end()), payload);
  EXPECT_EQ(p->ipv4_header_bytes, 20);
  EXPECT_TRUE(p->udp_checksum_present);
  // The IPv4 header checksum verifies to zero.
  EXPECT_EQ(InternetChecksum({buf + kIpAt, sizeof(Ipv4Header)}), 0);
}

TEST(NetHeadersTest, KnownChecksums) {
  // RFC 1071's example words 0001 f203 f4f5 f6f7 sum to ddf2; complemented 220d.
  const uint8_t words[] = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7};
  EXPECT_EQ(InternetChecksum(words), 0x220d);
  // An odd last byte is the high half of a word.
  const uint8_t odd[] = {0x00, 0x01, 0xf2};
  EXPECT_EQ(InternetChecksum(odd), static_cast<uint16_t>(~0xf201));
}

TEST(NetHeadersTest, HeaderLayoutIsTheWire) {
  UdpFlow flow = TestFlow();
  flow.dscp = 46;  // EF
  uint8_t buf[64] = {};
  ASSERT_EQ(WriteUdpHeaders(flow, 4, buf, UdpChecksumFill::kNone), 46u);
  const uint8_t want[kUdpFrameHeaderBytes] = {
      0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00,  // Ethernet
      0x45, 46 << 2, 0, 32, 0, 0, 0x40, 0, 64, 17, 0, 0,     // IPv4 (checksum below)
      10, 0, 0, 1, 10, 0, 0, 2,                               //
      0x04, 0xd2, 0x16, 0x2e, 0, 12, 0, 0,                    // UDP, no checksum
  };
  for (size_t i = 0; i < kUdpFrameHeaderBytes; ++i) {
    if (i == kIpAt + 10 || i == kIpAt + 11) continue;
    EXPECT_EQ(buf[i], want[i]) << "byte " << i;
  }
  EXPECT_EQ(InternetChecksum({buf + kIpAt, sizeof(Ipv4Header)}), 0);
  std::optional<ParsedUdpFrame> p = ParseUdpFrame({buf, 46});
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->flow, flow);
  EXPECT_FALSE(p->udp_checksum_present);
}

TEST(NetHeadersTest, UdpChecksumFillIsAChoice) {
  const uint8_t payload[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  uint8_t none[64];
  uint8_t filled[64];
  const size_t len = BuildUdpFrame(TestFlow(), payload, none, UdpChecksumFill::kNone);
  ASSERT_EQ(BuildUdpFrame(TestFlow(), payload, filled, UdpChecksumFill::kCompute), len);
  EXPECT_EQ(Get16(none + kUdpAt + 6), 0);
  EXPECT_EQ(Get16(filled + kUdpAt + 6),
            UdpChecksum(TestFlow().src_ip, TestFlow().dst_ip, {filled + kUdpAt, len - kUdpAt}));
  EXPECT_NE(Get16(filled + kUdpAt + 6), 0);
  EXPECT_TRUE(std::equal(none, none + kUdpAt + 6, filled)) << "only the UDP checksum differs";
  EXPECT_TRUE(ParseUdpFrame({none, len}).has_value());
  EXPECT_TRUE(ParseUdpFrame({filled, len}).has_value());
}

TEST(NetHeadersTest, EthernetPaddingIsAllowed) {
  uint8_t buf[128] = {};
  const size_t len = BuildUdpFrame(TestFlow(), {}, buf, UdpChecksumFill::kCompute);
  ASSERT_EQ(len, 42u);
  std::optional<ParsedUdpFrame> p = ParseUdpFrame({buf, 60});
  ASSERT_TRUE(p.has_value());
  EXPECT_TRUE(p->payload.empty());
}

TEST(NetHeadersTest, RejectsDamage) {
  const uint8_t payload[16] = {1, 2, 3};
  uint8_t good[128];
  const size_t len = BuildUdpFrame(TestFlow(), payload, good, UdpChecksumFill::kCompute);
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
  // Every truncation is refused, and so is the empty frame.
  for (size_t n = 0; n < len; ++n) EXPECT_FALSE(ParseUdpFrame({good, n}).has_value()) << n;
}

// LocateUdpFrame is ParseUdpFrame without the checksums.
TEST(NetHeadersTest, LocateChecksLayoutButNotChecksums) {
  std::vector<uint8_t> f = GoodFrame(16);
  std::optional<UdpFrameLayout> at = LocateUdpFrame(f);
  ASSERT_TRUE(at.has_value());
  EXPECT_EQ(at->ipv4_header_bytes, 20);
  EXPECT_EQ(at->udp_bytes, 8 + 16);
  f[kIpAt + 10] ^= 1;   // IPv4 checksum
  f[kUdpAt + 6] ^= 1;   // UDP checksum
  EXPECT_FALSE(ParseUdpFrame(f).has_value());
  EXPECT_TRUE(LocateUdpFrame(f).has_value());
  const std::vector<uint8_t> good = GoodFrame(16);
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(LocateUdpFrame({good.data(), n}).has_value()) << "truncated to " << n;
  }
  f = good;
  Put16(&f[kUdpAt + 4], 8 + 15);  // UDP length short of the IPv4 payload
  EXPECT_FALSE(LocateUdpFrame(f).has_value());
  f = good;
  f[kIpAt + 9] = 6;  // TCP
  EXPECT_FALSE(LocateUdpFrame(f).has_value());
}

TEST(NetHeadersTest, RejectsInconsistentHeadersWithValidChecksums) {
  struct Case {
    const char* what;
    size_t at;
    uint16_t value;
  };
  // No UDP checksum, so that only the rule named can refuse the frame.
  const std::vector<uint8_t> good = GoodFrame(16, UdpChecksumFill::kNone);
  ASSERT_TRUE(ParseUdpFrame(good).has_value());
  const uint16_t total = Get16(&good[kIpAt + 2]);
  for (const Case& c : {
           Case{"VLAN tag instead of IPv4", 12, 0x8100},
           Case{"IPv6 version", kIpAt, 0x6500},
           Case{"IHL 4", kIpAt, 0x4400},
           Case{"IHL past the frame", kIpAt, 0x4f00},
           Case{"more fragments", kIpAt + 6, 0x2000},
           Case{"fragment offset", kIpAt + 6, 0x0001},
           Case{"TCP", kIpAt + 8, 0x4006},
           Case{"total length past the frame", kIpAt + 2, static_cast<uint16_t>(total + 1)},
           Case{"total length shorter than IP + UDP headers", kIpAt + 2, 27},
           Case{"total length short of the UDP length", kIpAt + 2,
                static_cast<uint16_t>(total - 1)},
           Case{"UDP length short of the IP payload", kUdpAt + 4,
                static_cast<uint16_t>(total - 21)},
           Case{"UDP length below its header", kUdpAt + 4, 7},
       }) {
    std::vector<uint8_t> bad = good;
    Put16(&bad[c.at], c.value);
    FixIpChecksum(bad);
    EXPECT_FALSE(ParseUdpFrame(bad).has_value()) << c.what;
  }
  // DF is the sender's business: accepted either way.
  std::vector<uint8_t> df_clear = good;
  Put16(&df_clear[kIpAt + 6], 0);
  FixIpChecksum(df_clear);
  EXPECT_TRUE(ParseUdpFrame(df_clear).has_value());
}

TEST(NetHeadersTest, Ipv4OptionsAreSkipped) {
  const std::vector<uint8_t> plain = GoodFrame(10);
  for (size_t words : {1, 10}) {
    // Insert `words` 32-bit words of options (NOPs, then end of list).
    std::vector<uint8_t> f(plain.begin(), plain.begin() + kUdpAt);
    for (size_t i = 0; i < words * 4; ++i) f.push_back(i + 1 == words * 4 ? 0x00 : 0x01);
    f.insert(f.end(), plain.begin() + kUdpAt, plain.end());
    f[kIpAt] = static_cast<uint8_t>(0x40 | (5 + words));
    Put16(&f[kIpAt + 2], static_cast<uint16_t>(Get16(&f[kIpAt + 2]) + words * 4));
    FixIpChecksum(f);
    std::optional<ParsedUdpFrame> p = ParseUdpFrame(f);
    ASSERT_TRUE(p.has_value()) << words;
    EXPECT_EQ(p->ipv4_header_bytes, 20 + words * 4);
    EXPECT_EQ(p->flow, TestFlow());
    EXPECT_EQ(p->payload.size(), 10u);
    EXPECT_EQ(p->payload.data(), f.data() + kUdpFrameHeaderBytes + words * 4);
    // The options are covered by the header checksum.
    f[kUdpAt] ^= 1;
    EXPECT_FALSE(ParseUdpFrame(f).has_value()) << words;
  }
}

TEST(NetHeadersTest, ReverseKeepsChecksumsValid) {
  std::vector<uint8_t> f = GoodFrame(12);
  ReverseUdpFrame(f.data());
  std::optional<ParsedUdpFrame> p = ParseUdpFrame(f);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->flow.src_mac, TestFlow().dst_mac);
  EXPECT_EQ(p->flow.dst_mac, TestFlow().src_mac);
  EXPECT_EQ(p->flow.src_ip, TestFlow().dst_ip);
  EXPECT_EQ(p->flow.dst_ip, TestFlow().src_ip);
  EXPECT_EQ(p->flow.src_port, TestFlow().dst_port);
  EXPECT_EQ(p->flow.dst_port, TestFlow().src_port);
  ReverseUdpFrame(f.data());
  EXPECT_EQ(f, GoodFrame(12));
}

TEST(NetHeadersTest, TooSmallBufferGivesZero) {
  uint8_t buf[50];
  const uint8_t payload[10] = {};
  EXPECT_EQ(BuildUdpFrame(TestFlow(), payload, buf, UdpChecksumFill::kCompute), 0u);
  EXPECT_EQ(WriteUdpHeaders(TestFlow(), 9, buf, UdpChecksumFill::kNone), 0u);
  EXPECT_EQ(WriteUdpHeaders(TestFlow(), 8, buf, UdpChecksumFill::kNone), 50u);
}

TEST(NetHeadersTest, PayloadTooLongForOneDatagramGivesZero) {
  std::vector<uint8_t> buf(kUdpFrameHeaderBytes + kMaxUdpPayloadBytes + 1);
  EXPECT_EQ(WriteUdpHeaders(TestFlow(), kMaxUdpPayloadBytes + 1, absl::MakeSpan(buf),
                            UdpChecksumFill::kCompute),
            0u);
  ASSERT_EQ(WriteUdpHeaders(TestFlow(), kMaxUdpPayloadBytes, absl::MakeSpan(buf),
                            UdpChecksumFill::kCompute),
            buf.size() - 1);
  std::optional<ParsedUdpFrame> p = ParseUdpFrame(buf);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->payload.size(), kMaxUdpPayloadBytes);
}

}  // namespace
}  // namespace bypass::driver
