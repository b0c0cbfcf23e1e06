// The wire format: byte layout, round trips of every packet type, and a
// parser that rejects every truncation, every damaged byte and every field
// out of range. Also CRC-32C and PSN arithmetic.
#include "fabric/rdm/wire.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fabric/rdm/crc32c.h"
#include "fabric/rdm/psn.h"
#include "gtest/gtest.h"

namespace bypass::rdm::wire {
namespace {

driver::UdpFlow TestFlow() {
  driver::UdpFlow f;
  f.src_mac = {{0x02, 0, 0, 0, 0, 1}};
  f.dst_mac = {{0x02, 0, 0, 0, 0, 2}};
  f.src_ip = {0x0a000001};
  f.dst_ip = {0x0a000002};
  f.src_port = 5000;
  f.dst_port = 6000;
  return f;
}

Common TestCommon(PacketType type) {
  Common c;
  c.type = type;
  c.flags = kFlagAckValid;
  c.credit = 128;
  c.src_incarnation = 0x11223344;
  c.dst_incarnation = 0x55667788;
  c.auth_key = 0x99aabbcc;
  c.psn = Psn(0xfffffffe);
  c.ack_psn = Psn(7);
  return c;
}

std::vector<uint8_t> DataFrame(size_t payload_len = 100) {
  std::vector<uint8_t> payload(payload_len);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7);
  MsgFields m;
  m.msg_id = 3;
  m.msg_flags = kMsgTagged | kMsgRemoteData;
  m.total_length = 1000;
  m.offset = 900 - payload_len + 100;
  m.tag = 0x0102030405060708;
  m.data = 0xa1a2a3a4a5a6a7a8;
  std::vector<uint8_t> frame(2048);
  const size_t n =
      BuildData(TestFlow(), TestCommon(PacketType::kData), m, payload, absl::MakeSpan(frame));
  frame.resize(n);
  return frame;
}

TEST(CrcTest, KnownValuesAndBothImplementationsAgree) {
  const uint8_t check[] = {'1', '2', '3', '4', '5', '6', '7', '8', '9'};
  EXPECT_EQ(Crc32c(check, sizeof(check)), 0xe3069283u);
  EXPECT_EQ(Crc32c(nullptr, 0), 0u);
  std::vector<uint8_t> zeros(32, 0);
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8a9136aau);  // RFC 3720 B.4
  std::vector<uint8_t> data(12 + 6000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 31 + 7);
  for (size_t len : {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 13, 14, 15, 63, 64, 1000}) {
    for (size_t off : {0, 1, 3}) {
      EXPECT_EQ(Crc32cExtend(kCrc32cInit, data.data() + off, len),
                internal::Crc32cExtendPortable(kCrc32cInit, data.data() + off, len))
          << len << " at " << off;
    }
  }
  // Extending piecewise equals one pass.
  const uint32_t whole = Crc32c(data.data(), data.size());
  uint32_t s = Crc32cExtend(kCrc32cInit, data.data(), 333);
  s = Crc32cExtend(s, data.data() + 333, data.size() - 333);
  EXPECT_EQ(Crc32cFinish(s), whole);
  // The one-call packet CRC equals the piecewise one (pseudo header, data
  // with a zeroed field), for every length and field position tried.
  // (Lengths on both sides of the parallel-stream threshold, an MTU-sized
  // packet, and one past the streams' cap, whose excess goes serially.)
  for (size_t n : {4, 5, 36, 37, 40, 67, 68, 69, 104, 141, 990, 1436, 6000}) {
    for (size_t zero_at : {0, 1, 32, 33}) {
      if (zero_at + 4 > n) continue;
      std::vector<uint8_t> copy(data.begin() + 12, data.begin() + 12 + n);
      std::fill(copy.begin() + zero_at, copy.begin() + zero_at + 4, 0);
      uint32_t want = Crc32cExtend(kCrc32cInit, data.data(), 12);
      want = internal::Crc32cExtendPortable(want, copy.data(), n);
      EXPECT_EQ(Crc32cPacket(data.data(), data.data() + 12, n, zero_at), want) << n << " " << zero_at;
    }
  }
}

TEST(PsnTest, ComparisonsWrapAround) {
  const Psn a(0xfffffff0);
  const Psn b = a + 0x20;  // wrapped past zero
  EXPECT_EQ(b.value(), 0x10u);
  EXPECT_TRUE(a.Before(b));
  EXPECT_TRUE(b.After(a));
  EXPECT_EQ(b - a, 0x20);
  EXPECT_EQ(a - b, -0x20);
  Psn c(0xffffffff);
  ++c;
  EXPECT_EQ(c, Psn(0));
  EXPECT_FALSE(a.Before(a));
}

TEST(WireTest, HeaderLayoutIsBigEndianAtFixedOffsets) {
  const std::vector<uint8_t> f = DataFrame();
  const uint8_t* b = f.data() + kCommonOffset;
  EXPECT_EQ(b[0], 0x42);  // 'B'
  EXPECT_EQ(b[1], 0x59);  // 'Y'
  EXPECT_EQ(b[2], kVersion);
  EXPECT_EQ(b[3], static_cast<uint8_t>(PacketType::kData));
  EXPECT_EQ(b[5], kFlagAckValid);
  EXPECT_EQ(b[6] << 8 | b[7], 128);
  EXPECT_EQ(std::vector<uint8_t>(b + 8, b + 12), (std::vector<uint8_t>{0x11, 0x22, 0x33, 0x44}));
  EXPECT_EQ(std::vector<uint8_t>(b + 20, b + 24), (std::vector<uint8_t>{0xff, 0xff, 0xff, 0xfe}));
  EXPECT_EQ(b[28] << 8 | b[29], static_cast<int>(sizeof(MsgHeader) + 100));
  const uint8_t* m = f.data() + kExtOffset;
  EXPECT_EQ(m[3], 3);                          // msg_id
  EXPECT_EQ(m[16 + 6] << 8 | m[16 + 7], 900);  // offset
  EXPECT_EQ(m[24], 0x01);                      // tag, high byte
  EXPECT_EQ(f.size(), kDataHeadersBytes + 100);
}

TEST(WireTest, EveryTypeRoundTrips) {
  std::vector<uint8_t> frame(512);
  View v;

  HelloFields h;
  h.max_datagram = 1472;
  h.nonce = 0x0123456789abcdefull;
  h.cookie[0] = 0xc0;
  h.cookie[15] = 0x0c;
  size_t n =
      BuildHello(TestFlow(), TestCommon(PacketType::kHello), h, nullptr, absl::MakeSpan(frame));
  ASSERT_GT(n, 0u);
  ASSERT_EQ(Parse({frame.data(), n}, &v), ParseStatus::kOk);
  EXPECT_EQ(v.common.type, PacketType::kHello);
  EXPECT_EQ(v.hello.max_datagram, 1472);
  EXPECT_EQ(v.hello.nonce, 0x0123456789abcdefull);
  EXPECT_EQ(v.hello.cookie, h.cookie);
  EXPECT_TRUE(VerifyMac(v, nullptr)) << "no key: the MAC is all zero";
  EXPECT_EQ(v.common.psn, Psn(0xfffffffe));
  EXPECT_EQ(v.common.auth_key, 0x99aabbccu);
  EXPECT_EQ(v.flow, TestFlow());

  h.echo = 0xfeedull;
  h.cookie = {};
  n = BuildHello(TestFlow(), TestCommon(PacketType::kHelloAck), h, nullptr, absl::MakeSpan(frame));
  ASSERT_EQ(Parse({frame.data(), n}, &v), ParseStatus::kOk);
  EXPECT_EQ(v.common.type, PacketType::kHelloAck);
  EXPECT_EQ(v.hello.echo, 0xfeedull);

  h.nonce = 0;  // a COOKIE has none
  h.cookie[3] = 0x33;
  n = BuildHello(TestFlow(), TestCommon(PacketType::kCookie), h, nullptr, absl::MakeSpan(frame));
  ASSERT_EQ(Parse({frame.data(), n}, &v), ParseStatus::kOk);
  EXPECT_EQ(v.common.type, PacketType::kCookie);
  EXPECT_EQ(v.hello.echo, 0xfeedull);
  EXPECT_EQ(v.hello.cookie, h.cookie);

  ResetFields r;
  r.reason = ResetReason::kUnknownIncarnation;
  r.incarnation = 0xdeadbeef;
  n = BuildReset(TestFlow(), TestCommon(PacketType::kReset), r, nullptr, absl::MakeSpan(frame));
  ASSERT_EQ(Parse({frame.data(), n}, &v), ParseStatus::kOk);
  EXPECT_EQ(v.reset.reason, ResetReason::kUnknownIncarnation);
  EXPECT_EQ(v.reset.incarnation, 0xdeadbeefu);

  AckFields a;
  a.Set(0);
  a.Set(63);
  a.Set(64);
  a.Set(255);
  n = BuildAck(TestFlow(), TestCommon(PacketType::kAck), a, absl::MakeSpan(frame));
  ASSERT_EQ(Parse({frame.data(), n}, &v), ParseStatus::kOk);
  EXPECT_EQ(v.ack.sack, a.sack);
  EXPECT_TRUE(v.ack.Has(255));
  EXPECT_FALSE(v.ack.Has(254));
  EXPECT_EQ(v.common.ack_psn, Psn(7));
  EXPECT_EQ(v.common.credit, 128);

  const std::vector<uint8_t> d = DataFrame();
  ASSERT_EQ(Parse(d, &v), ParseStatus::kOk);
  EXPECT_EQ(v.msg.msg_id, 3u);
  EXPECT_EQ(v.msg.msg_flags, kMsgTagged | kMsgRemoteData);
  EXPECT_EQ(v.msg.total_length, 1000u);
  EXPECT_EQ(v.msg.offset, 900u);
  EXPECT_EQ(v.msg.tag, 0x0102030405060708u);
  EXPECT_EQ(v.msg.data, 0xa1a2a3a4a5a6a7a8u);
  ASSERT_EQ(v.payload.size(), 100u);
  EXPECT_EQ(v.payload[3], 21);
  EXPECT_NE(ToString(v).find("DATA"), std::string::npos);
  EXPECT_NE(ToString(v).find("msg=3"), std::string::npos);
}

TEST(WireTest, EveryTruncationIsRejected) {
  const std::vector<uint8_t> f = DataFrame();
  View v;
  for (size_t len = 0; len < f.size(); ++len) {
    // Exact-size copies, so a read past the end is caught by ASan.
    std::vector<uint8_t> cut(f.begin(), f.begin() + static_cast<ptrdiff_t>(len));
    EXPECT_NE(Parse(cut, &v), ParseStatus::kOk) << len;
  }
}

TEST(WireTest, EveryDamagedByteAfterEthernetIsRejected) {
  const std::vector<uint8_t> f = DataFrame(40);
  View v;
  for (size_t i = 14; i < f.size(); ++i) {
    for (uint8_t x : {0x01, 0x80, 0xff}) {
      std::vector<uint8_t> bad = f;
      bad[i] ^= x;
      EXPECT_NE(Parse(bad, &v), ParseStatus::kOk) << "byte " << i << " ^ " << int{x};
    }
  }
}

// Rewrites a field and fixes the CRC, so only the field check can reject it.
std::vector<uint8_t> WithField(std::vector<uint8_t> f, size_t at, std::vector<uint8_t> bytes) {
  std::memcpy(f.data() + at, bytes.data(), bytes.size());
  uint8_t* b = f.data() + kCommonOffset;
  const size_t len = f.size() - kCommonOffset;
  std::memset(b + offsetof(CommonHeader, crc), 0, 4);
  uint8_t pseudo[12] = {10, 0, 0, 1, 10, 0, 0, 2, 5000 >> 8, 5000 & 0xff, 6000 >> 8, 6000 & 0xff};
  uint32_t s = Crc32cExtend(kCrc32cInit, pseudo, sizeof(pseudo));
  s = Crc32cExtend(s, b, len);
  const uint32_t crc = Crc32cFinish(s);
  b[32] = static_cast<uint8_t>(crc >> 24);
  b[33] = static_cast<uint8_t>(crc >> 16);
  b[34] = static_cast<uint8_t>(crc >> 8);
  b[35] = static_cast<uint8_t>(crc);
  return f;
}

TEST(WireTest, FieldsOutOfRangeAreRejectedEvenWithAGoodChecksum) {
  const std::vector<uint8_t> f = DataFrame(100);
  View v;
  ASSERT_EQ(Parse(WithField(f, kCommonOffset + 3, {5}), &v), ParseStatus::kOk)
      << "the re-checksum helper itself";
  const size_t c = kCommonOffset;
  const size_t m = kExtOffset;
  EXPECT_EQ(Parse(WithField(f, c, {0x42, 0x5a}), &v), ParseStatus::kBadMagic);
  EXPECT_EQ(Parse(WithField(f, c + 2, {1}), &v), ParseStatus::kBadVersion);
  EXPECT_EQ(Parse(WithField(f, c + 2, {kVersion + 1}), &v), ParseStatus::kBadVersion);
  EXPECT_EQ(Parse(WithField(f, c + 3, {0}), &v), ParseStatus::kBadType);
  EXPECT_EQ(Parse(WithField(f, c + 3, {8}), &v), ParseStatus::kBadType);
  EXPECT_EQ(Parse(WithField(f, c + 3, {1}), &v), ParseStatus::kBadLength) << "HELLO has no payload";
  EXPECT_EQ(Parse(WithField(f, c + 4, {0x80, 0}), &v), ParseStatus::kBadField) << "unknown flag";
  EXPECT_EQ(Parse(WithField(f, c + 8, {0, 0, 0, 0}), &v), ParseStatus::kBadField)
      << "source incarnation 0";
  EXPECT_EQ(Parse(WithField(f, c + 28, {0, 139}), &v), ParseStatus::kBadLength);
  EXPECT_EQ(Parse(WithField(f, c + 28, {0, 141}), &v), ParseStatus::kBadLength);
  EXPECT_EQ(Parse(WithField(f, c + 30, {0, 1}), &v), ParseStatus::kBadField) << "reserved";
  EXPECT_EQ(Parse(WithField(f, m + 4, {0, 0x10}), &v), ParseStatus::kBadField) << "msg flag";
  EXPECT_EQ(Parse(WithField(f, m + 4, {0, 8}), &v), ParseStatus::kBadField)
      << "BUNDLE on a segment (offset 900) is not a bundle";
  EXPECT_EQ(Parse(WithField(f, m + 6, {2}), &v), ParseStatus::kBadField) << "protocol";
  EXPECT_EQ(Parse(WithField(f, m + 6, {1}), &v), ParseStatus::kBadField)
      << "a rendezvous request carries no payload but an InPlaceOffer";
  // offset + payload past total_length, including offsets that would wrap.
  EXPECT_EQ(Parse(WithField(f, m + 16, {0, 0, 0, 0, 0, 0, 0x03, 0x85}), &v),
            ParseStatus::kBadField);
  EXPECT_EQ(Parse(WithField(f, m + 16, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xf0}), &v),
            ParseStatus::kBadField);
  EXPECT_EQ(Parse(WithField(f, m + 8, {0, 0, 0, 0, 0, 0, 0, 99}), &v), ParseStatus::kBadField);
}

// A packet flagged UNCHECKED has crc 0 and is taken only from a frame that
// came through memory only (intact); a receiver that checks rejects it.
TEST(WireTest, UncheckedPacketsAreTakenOnlyThroughMemory) {
  std::vector<uint8_t> payload(64, 0x5a);
  Common c = TestCommon(PacketType::kData);
  c.flags |= kFlagUnchecked;
  MsgFields m;
  m.total_length = payload.size();
  std::vector<uint8_t> frame(512);
  const size_t n = BuildData(TestFlow(), c, m, payload, absl::MakeSpan(frame));
  ASSERT_GT(n, 0u);
  frame.resize(n);
  EXPECT_EQ(frame[kCommonOffset + 5] & 0x10, 0x10) << "flag bit 4";
  for (size_t i = 32; i < 36; ++i) EXPECT_EQ(frame[kCommonOffset + i], 0) << "crc is 0";
  View v;
  ASSERT_EQ(Parse(frame, &v, /*intact=*/true), ParseStatus::kOk);
  EXPECT_EQ(v.common.flags & kFlagUnchecked, kFlagUnchecked);
  EXPECT_EQ(v.payload.size(), payload.size());
  EXPECT_EQ(Parse(frame, &v, /*intact=*/false), ParseStatus::kUnchecked);

  // A damaged byte of a checked packet that sets the flag is caught too:
  // not through memory, it is refused; the CRC it carries is not 0.
  const std::vector<uint8_t> checked = DataFrame(40);
  std::vector<uint8_t> flipped = checked;
  flipped[kCommonOffset + 5] ^= 0x10;
  EXPECT_EQ(Parse(flipped, &v, false), ParseStatus::kBadField);
  EXPECT_EQ(Parse(flipped, &v, true), ParseStatus::kBadField);
  // And a checked packet is checked even through memory.
  std::vector<uint8_t> damaged = checked;
  damaged.back() ^= 1;
  EXPECT_EQ(Parse(damaged, &v, true), ParseStatus::kBadChecksum);

  // ACK and RMA may go unchecked; the handshake and RESET never.
  std::vector<uint8_t> f(512);
  Common ca = TestCommon(PacketType::kAck);
  ca.flags |= kFlagUnchecked;
  size_t k = BuildAck(TestFlow(), ca, AckFields{}, absl::MakeSpan(f));
  EXPECT_EQ(Parse({f.data(), k}, &v, true), ParseStatus::kOk);
  EXPECT_EQ(Parse({f.data(), k}, &v, false), ParseStatus::kUnchecked);
  Common cr = TestCommon(PacketType::kRma);
  cr.flags |= kFlagUnchecked;
  RmaFields r;
  r.op = RmaOp::kReadReq;
  r.total_length = 10;
  k = BuildRma(TestFlow(), cr, r, {}, absl::MakeSpan(f));
  EXPECT_EQ(Parse({f.data(), k}, &v, true), ParseStatus::kOk);
  Common ch = TestCommon(PacketType::kHello);
  ch.flags |= kFlagUnchecked;
  HelloFields h;
  h.max_datagram = 1472;
  h.nonce = 1;
  k = BuildHello(TestFlow(), ch, h, nullptr, absl::MakeSpan(f));
  EXPECT_EQ(Parse({f.data(), k}, &v, true), ParseStatus::kBadField);
  Common cs = TestCommon(PacketType::kReset);
  cs.flags |= kFlagUnchecked;
  k = BuildReset(TestFlow(), cs, ResetFields{}, nullptr, absl::MakeSpan(f));
  EXPECT_EQ(Parse({f.data(), k}, &v, true), ParseStatus::kBadField);
}

// HELLO and HELLO_ACK carry the capability; unknown bits, or any in a
// COOKIE, are malformed.
TEST(WireTest, HelloCapabilities) {
  std::vector<uint8_t> f(512);
  View v;
  HelloFields h;
  h.max_datagram = 1472;
  h.nonce = 9;
  h.capabilities = kCapUnchecked;
  for (PacketType t : {PacketType::kHello, PacketType::kHelloAck}) {
    if (t == PacketType::kHelloAck) h.echo = 3;
    const size_t k = BuildHello(TestFlow(), TestCommon(t), h, nullptr, absl::MakeSpan(f));
    ASSERT_EQ(Parse({f.data(), k}, &v), ParseStatus::kOk);
    EXPECT_EQ(v.hello.capabilities, kCapUnchecked);
    EXPECT_EQ(f[kExtOffset + 7], 1) << "capabilities at offset 4, big-endian";
  }
  h.capabilities = kCapUnchecked | kCapBundle;
  size_t k = BuildHello(TestFlow(), TestCommon(PacketType::kHelloAck), h, nullptr,
                        absl::MakeSpan(f));
  ASSERT_EQ(Parse({f.data(), k}, &v), ParseStatus::kOk);
  EXPECT_EQ(v.hello.capabilities, kCapUnchecked | kCapBundle);
  EXPECT_EQ(f[kExtOffset + 7], 3) << "BUNDLE is bit 1";
  h.capabilities = 4;
  k = BuildHello(TestFlow(), TestCommon(PacketType::kHello), h, nullptr,
                        absl::MakeSpan(f));
  EXPECT_EQ(Parse({f.data(), k}, &v), ParseStatus::kBadField) << "unknown capability";
  h.capabilities = kCapUnchecked;
  h.nonce = 0;
  k = BuildHello(TestFlow(), TestCommon(PacketType::kCookie), h, nullptr, absl::MakeSpan(f));
  EXPECT_EQ(Parse({f.data(), k}, &v), ParseStatus::kBadField) << "a COOKIE has none";
}

// Three whole messages in one DATA packet: tagged with remote data, empty,
// and abandoned (no bytes); then what the parser refuses of a bundle.
std::vector<BundledMsg> TestBundle(std::vector<std::vector<uint8_t>>* bytes) {
  *bytes = {std::vector<uint8_t>(64), {}, {}};
  for (size_t i = 0; i < 64; ++i) (*bytes)[0][i] = static_cast<uint8_t>(i * 3);
  std::vector<BundledMsg> msgs(3);
  msgs[0].m.msg_id = 0xffffffff;  // the ids wrap
  msgs[0].m.msg_flags = kMsgTagged | kMsgRemoteData;
  msgs[0].m.total_length = 64;
  msgs[0].m.tag = 0x77;
  msgs[0].m.data = 0x88;
  msgs[0].bytes = (*bytes)[0];
  msgs[1].m.msg_id = 0;
  msgs[2].m.msg_id = 1;
  msgs[2].m.msg_flags = kMsgAbandoned;
  msgs[2].m.total_length = 5000;  // abandoned: none of its bytes go
  return msgs;
}

TEST(WireTest, BundleRoundTripsEveryMessage) {
  std::vector<std::vector<uint8_t>> bytes;
  const std::vector<BundledMsg> msgs = TestBundle(&bytes);
  std::vector<uint8_t> f(2048);
  const size_t n = BuildBundle(TestFlow(), TestCommon(PacketType::kData), msgs, absl::MakeSpan(f));
  ASSERT_EQ(n, kDataHeadersBytes + 64 + 2 * sizeof(MsgHeader));
  View v;
  ASSERT_EQ(Parse({f.data(), n}, &v), ParseStatus::kOk);
  EXPECT_EQ(v.msg.msg_id, 0xffffffffu);
  EXPECT_EQ(v.msg.msg_flags, kMsgTagged | kMsgRemoteData | kMsgBundle);
  EXPECT_EQ(v.payload.size(), 64 + 2 * sizeof(MsgHeader));
  EXPECT_EQ(v.msg.messages, 3u) << "the receiver's ACK counts a bundle as its messages";
  BundleReader r(v.msg, v.payload);
  MsgFields m;
  absl::Span<const uint8_t> b;
  for (size_t i = 0; i < msgs.size(); ++i) {
    ASSERT_TRUE(r.Next(&m, &b)) << i;
    EXPECT_EQ(m.msg_id, msgs[i].m.msg_id) << i;
    EXPECT_EQ(m.msg_flags, msgs[i].m.msg_flags) << i << ": BUNDLE is the packet's, not the message's";
    EXPECT_EQ(m.total_length, msgs[i].m.total_length) << i;
    EXPECT_EQ(m.tag, msgs[i].m.tag) << i;
    EXPECT_EQ(m.data, msgs[i].m.data) << i;
    EXPECT_EQ(m.offset, 0u) << i;
    EXPECT_EQ(m.messages, 1u) << i;
    EXPECT_EQ(std::vector<uint8_t>(b.begin(), b.end()), bytes[i]) << i;
  }
  EXPECT_FALSE(r.Next(&m, &b));
  EXPECT_NE(ToString(v).find("bundle=3 msgs (to msg=1)"), std::string::npos) << ToString(v);
  // One message is no bundle; nor is a bundle larger than the frame.
  EXPECT_EQ(BuildBundle(TestFlow(), TestCommon(PacketType::kData), {msgs.data(), 1},
                        absl::MakeSpan(f)),
            0u);
  EXPECT_EQ(BuildBundle(TestFlow(), TestCommon(PacketType::kData), msgs,
                        absl::MakeSpan(f).first(n - 1)),
            0u);
}

TEST(WireTest, BundlesOutOfShapeAreRejected) {
  std::vector<std::vector<uint8_t>> bytes;
  const std::vector<BundledMsg> good = TestBundle(&bytes);
  std::vector<uint8_t> f(2048);
  const size_t n = BuildBundle(TestFlow(), TestCommon(PacketType::kData), good, absl::MakeSpan(f));
  f.resize(n);
  View v;
  ASSERT_EQ(Parse(f, &v), ParseStatus::kOk);
  const size_t second = kDataHeadersBytes + 64;        // the second message's header
  const size_t third = second + sizeof(MsgHeader);     // ... the third's (no bytes before it)
  EXPECT_EQ(Parse(WithField(f, second + 3, {2}), &v), ParseStatus::kBadField)
      << "msg_ids not consecutive";
  EXPECT_EQ(Parse(WithField(f, second + 6, {1}), &v), ParseStatus::kBadField)
      << "a request to send in a bundle";
  EXPECT_EQ(Parse(WithField(f, second + 23, {1}), &v), ParseStatus::kBadField)
      << "a segment (offset 1) in a bundle";
  EXPECT_EQ(Parse(WithField(f, second + 15, {1}), &v), ParseStatus::kBadField)
      << "its bytes run past the packet";
  EXPECT_EQ(Parse(WithField(f, third + 5, {kMsgAbandoned | kMsgBundle}), &v),
            ParseStatus::kBadField)
      << "the last message says another follows";
  EXPECT_EQ(Parse(WithField(f, second + 5, {0}), &v), ParseStatus::kBadField)
      << "bytes after the last message";
  EXPECT_EQ(Parse(WithField(f, third + 7, {1}), &v), ParseStatus::kBadField) << "reserved";
  EXPECT_EQ(Parse(WithField(f, kExtOffset + 15, {65}), &v), ParseStatus::kBadField)
      << "the first message's bytes overlap the next header";
  EXPECT_EQ(Parse(WithField(f, kExtOffset + 6, {1}), &v), ParseStatus::kBadField)
      << "a bundle that starts with a request to send";
  // Cut anywhere inside (a well-formed packet otherwise): refused.
  ASSERT_EQ(Parse(f, &v), ParseStatus::kOk);
  const MsgFields first = v.msg;
  const std::vector<uint8_t> payload(v.payload.begin(), v.payload.end());
  std::vector<uint8_t> g(2048);
  for (size_t cut = 0; cut < payload.size(); ++cut) {
    const size_t k = BuildData(TestFlow(), TestCommon(PacketType::kData), first,
                               absl::MakeConstSpan(payload).first(cut), absl::MakeSpan(g));
    ASSERT_GT(k, 0u);
    const ParseStatus st = Parse({g.data(), k}, &v);
    EXPECT_EQ(st, ParseStatus::kBadField) << "cut at " << cut << ": " << ParseStatusName(st);
  }
}

TEST(WireTest, RnrAckNamesTheNextMessageTaken) {
  std::vector<uint8_t> f(512);
  View v;
  Common c = TestCommon(PacketType::kAck);
  c.flags |= kFlagRnr;
  AckFields a;
  a.next_msg_id = 0x01020304;
  size_t n = BuildAck(TestFlow(), c, a, absl::MakeSpan(f));
  ASSERT_EQ(n, kExtOffset + sizeof(AckHeader));
  ASSERT_EQ(Parse({f.data(), n}, &v), ParseStatus::kOk);
  EXPECT_EQ(v.ack.next_msg_id, 0x01020304u);
  EXPECT_EQ(f[kExtOffset + 32], 1) << "after the SACK words, big-endian";
  // Without RNR the field is 0, and a packet that says otherwise is malformed.
  c.flags &= static_cast<uint16_t>(~kFlagRnr);
  n = BuildAck(TestFlow(), c, a, absl::MakeSpan(f));
  ASSERT_EQ(Parse({f.data(), n}, &v), ParseStatus::kOk);
  EXPECT_EQ(v.ack.next_msg_id, 0u);
  f.resize(n);
  EXPECT_EQ(Parse(WithField(f, kExtOffset + 35, {1}), &v), ParseStatus::kBadField);
  EXPECT_EQ(Parse(WithField(f, kExtOffset + 39, {1}), &v), ParseStatus::kBadField) << "reserved";
}

TEST(WireTest, OtherFramesAreNotBypass) {
  std::vector<uint8_t> frame(200);
  const uint8_t payload[40] = {1, 2, 3};
  const size_t n = driver::BuildUdpFrame(TestFlow(), absl::MakeConstSpan(payload),
                                         absl::MakeSpan(frame), driver::UdpChecksumFill::kNone);
  View v;
  EXPECT_EQ(Parse({frame.data(), n}, &v), ParseStatus::kBadMagic);
  EXPECT_EQ(Parse({frame.data(), 30}, &v), ParseStatus::kNotUdp);
  const size_t tiny = driver::BuildUdpFrame(TestFlow(), {payload, 10}, absl::MakeSpan(frame),
                                            driver::UdpChecksumFill::kNone);
  EXPECT_EQ(Parse({frame.data(), tiny}, &v), ParseStatus::kTooShort);
}

TEST(WireTest, DescribeTypeKnowsEachTypeOnce) {
  int known = 0;
  for (int t = 0; t < 256; ++t) {
    if (DescribeType(static_cast<uint8_t>(t))) ++known;
  }
  EXPECT_EQ(known, 7);
  EXPECT_STREQ(DescribeType(7)->name, "COOKIE");
  EXPECT_TRUE(DescribeType(5)->sequenced);
  EXPECT_TRUE(DescribeType(6)->sequenced);
  EXPECT_FALSE(DescribeType(4)->sequenced);
  EXPECT_STREQ(DescribeType(2)->name, "HELLO_ACK");
  EXPECT_EQ(MaxDataPayload(1472), 1472u - 76u);
  EXPECT_EQ(MaxDataPayload(76), 0u);
  EXPECT_EQ(MaxRmaPayload(1472), 1472u - 84u);
}

std::vector<uint8_t> RmaFrame(const RmaFields& r, size_t payload_len) {
  std::vector<uint8_t> payload(payload_len, 0x5a), frame(2048);
  const size_t n =
      BuildRma(TestFlow(), TestCommon(PacketType::kRma), r, payload, absl::MakeSpan(frame));
  frame.resize(n);
  return frame;
}

TEST(WireTest, RmaRoundTripsEveryField) {
  RmaFields r;
  r.op = RmaOp::kWrite;
  r.flags = kRmaFlagRemoteData;
  r.rma_id = 0x01020304;
  r.key = 0x1122334455667788;
  r.addr = 0x7f0000001000;
  r.total_length = 1000;
  r.offset = 900;
  r.data = 0xdeadbeef;
  const std::vector<uint8_t> f = RmaFrame(r, 100);
  ASSERT_EQ(f.size(), kExtOffset + sizeof(RmaHeader) + 100);
  View v;
  ASSERT_EQ(Parse(f, &v), ParseStatus::kOk);
  EXPECT_EQ(v.common.type, PacketType::kRma);
  EXPECT_EQ(v.rma.op, RmaOp::kWrite);
  EXPECT_EQ(v.rma.flags, kRmaFlagRemoteData);
  EXPECT_EQ(v.rma.rma_id, 0x01020304u);
  EXPECT_EQ(v.rma.key, 0x1122334455667788u);
  EXPECT_EQ(v.rma.addr, 0x7f0000001000u);
  EXPECT_EQ(v.rma.total_length, 1000u);
  EXPECT_EQ(v.rma.offset, 900u);
  EXPECT_EQ(v.rma.data, 0xdeadbeefu);
  EXPECT_EQ(v.payload.size(), 100u);
  EXPECT_NE(ToString(v).find("key=0x1122334455667788"), std::string::npos) << ToString(v);
  RmaFields resp;
  resp.op = RmaOp::kResponse;
  resp.status = RmaStatus::kOutOfRange;
  ASSERT_EQ(Parse(RmaFrame(resp, 0), &v), ParseStatus::kOk);
  EXPECT_EQ(v.rma.status, RmaStatus::kOutOfRange);
}

TEST(WireTest, RmaFieldsOutOfRangeAreRejected) {
  RmaFields w;
  w.op = RmaOp::kWrite;
  w.total_length = 100;
  const std::vector<uint8_t> f = RmaFrame(w, 100);
  View v;
  ASSERT_EQ(Parse(f, &v), ParseStatus::kOk);
  const size_t e = kExtOffset;
  EXPECT_EQ(Parse(WithField(f, e, {0}), &v), ParseStatus::kBadField) << "op 0";
  EXPECT_EQ(Parse(WithField(f, e, {7}), &v), ParseStatus::kBadField) << "op 7";
  EXPECT_EQ(Parse(WithField(f, e + 1, {8}), &v), ParseStatus::kBadField) << "unknown flag";
  EXPECT_EQ(Parse(WithField(f, e + 1, {kRmaFlagCopied}), &v), ParseStatus::kBadField)
      << "COPIED only on a pull's READ_REQ";
  EXPECT_EQ(Parse(WithField(f, e + 1, {kRmaFlagMessage}), &v), ParseStatus::kBadField)
      << "a write is no pull";
  EXPECT_EQ(Parse(WithField(f, e + 2, {1}), &v), ParseStatus::kBadField) << "status off RESPONSE";
  EXPECT_EQ(Parse(WithField(f, e + 3, {1}), &v), ParseStatus::kBadField) << "reserved";
  EXPECT_EQ(Parse(WithField(f, e, {2}), &v), ParseStatus::kBadField) << "READ_REQ has no payload";
  EXPECT_EQ(Parse(WithField(f, e, {4}), &v), ParseStatus::kBadField) << "RESPONSE has no payload";
  EXPECT_EQ(Parse(WithField(f, e, {3}), &v), ParseStatus::kOk) << "READ_DATA has";
  EXPECT_EQ(Parse(WithField(f, e + 1, {kRmaFlagRemoteData}), &v), ParseStatus::kOk);
  // offset + payload past total_length, including offsets that would wrap.
  EXPECT_EQ(Parse(WithField(f, e + 32, {0, 0, 0, 0, 0, 0, 0, 1}), &v), ParseStatus::kBadField);
  EXPECT_EQ(Parse(WithField(f, e + 32, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xf0}), &v),
            ParseStatus::kBadField);
  EXPECT_EQ(Parse(WithField(f, e + 24, {0, 0, 0, 0, 0, 0, 0, 99}), &v), ParseStatus::kBadField);
  RmaFields resp;
  resp.op = RmaOp::kResponse;
  const std::vector<uint8_t> g = RmaFrame(resp, 0);
  EXPECT_EQ(Parse(WithField(g, e + 2, {kMaxRmaStatus + 1}), &v), ParseStatus::kBadField);
  EXPECT_EQ(Parse(WithField(g, e + 2, {kMaxRmaStatus}), &v), ParseStatus::kOk);
}

// ATOMIC and ATOMIC_RESP: op, datatype and count packed in data, one packet
// whose payload is exactly the operands (and compare operands), or the
// fetched values of a successful fetching answer.
TEST(WireTest, AtomicFieldsRoundTripAndAreChecked) {
  RmaFields a;
  a.op = RmaOp::kAtomic;
  a.flags = kRmaFlagFetch;
  a.rma_id = 3;
  a.key = 0x42;
  a.total_length = 16;
  a.atomic = {.op = AtomicOp::kCswap, .type = AtomicType::kUint32, .count = 4};
  View v;
  ASSERT_EQ(Parse(RmaFrame(a, 32), &v), ParseStatus::kOk);  // operands and compare operands
  EXPECT_EQ(v.rma.atomic.op, AtomicOp::kCswap);
  EXPECT_EQ(v.rma.atomic.type, AtomicType::kUint32);
  EXPECT_EQ(v.rma.atomic.count, 4u);
  EXPECT_EQ(Parse(RmaFrame(a, 16), &v), ParseStatus::kBadField) << "compare operands missing";
  a.flags = 0;
  EXPECT_EQ(Parse(RmaFrame(a, 32), &v), ParseStatus::kBadField) << "a compare always fetches";
  a.atomic = {.op = AtomicOp::kSum, .type = AtomicType::kUint32, .count = 5};
  EXPECT_EQ(Parse(RmaFrame(a, 16), &v), ParseStatus::kBadField) << "count disagrees with length";
  a.atomic = {.op = AtomicOp::kRead, .type = AtomicType::kUint64, .count = 2};
  a.flags = kRmaFlagFetch;
  EXPECT_EQ(Parse(RmaFrame(a, 0), &v), ParseStatus::kOk) << "READ has no operands";
  a.total_length = 512;
  a.atomic = {.op = AtomicOp::kSum, .type = AtomicType::kUint64, .count = 64};
  EXPECT_EQ(Parse(RmaFrame(a, 512), &v), ParseStatus::kBadField) << "above kMaxAtomicBytes";
  const std::vector<uint8_t> f = [&] {
    RmaFields b = a;
    b.total_length = 8;
    b.atomic.count = 1;
    return RmaFrame(b, 8);
  }();
  ASSERT_EQ(Parse(f, &v), ParseStatus::kOk);
  const size_t data = kExtOffset + 40;
  EXPECT_EQ(Parse(WithField(f, data, {0, 0, 0, 1}), &v), ParseStatus::kBadField) << "high bits";
  EXPECT_EQ(Parse(WithField(f, data + 7, {19}), &v), ParseStatus::kBadField) << "op 19";
  EXPECT_EQ(Parse(WithField(f, data + 6, {16}), &v), ParseStatus::kBadField) << "type 16";
  EXPECT_EQ(Parse(WithField(f, data + 4, {0, 0}), &v), ParseStatus::kBadField) << "count 0";
  RmaFields r;
  r.op = RmaOp::kAtomicResp;
  r.flags = kRmaFlagFetch;
  r.total_length = 8;
  r.atomic = {.op = AtomicOp::kSum, .type = AtomicType::kInt64, .count = 1};
  EXPECT_EQ(Parse(RmaFrame(r, 8), &v), ParseStatus::kOk) << "fetched values";
  EXPECT_EQ(Parse(RmaFrame(r, 4), &v), ParseStatus::kBadField) << "part of them";
  r.status = RmaStatus::kNoAtomic;
  EXPECT_EQ(Parse(RmaFrame(r, 0), &v), ParseStatus::kOk) << "a refusal";
  EXPECT_EQ(Parse(RmaFrame(r, 8), &v), ParseStatus::kBadField) << "a refusal fetches nothing";
}

// A request to send with an InPlaceOffer: 40 bytes after the header that
// are not the message's (whatever its length), decoded, checked.
TEST(WireTest, InPlaceOfferRoundTripsAndIsChecked) {
  MsgFields m;
  m.msg_id = 9;
  m.protocol = MsgProtocol::kRendezvous;
  m.total_length = 5;  // shorter than the offer: it is no payload
  m.offer_pid = 0x01020304;
  m.offer_addr = 0x00007f0011223344;
  m.offer_guard_addr = 0x00007f0055667788;
  m.offer_guard = 0x1122334455667788;
  std::vector<uint8_t> f(2048);
  f.resize(BuildData(TestFlow(), TestCommon(PacketType::kData), m, {}, absl::MakeSpan(f)));
  ASSERT_EQ(f.size(), kDataHeadersBytes + sizeof(InPlaceOfferWire));
  View v;
  ASSERT_EQ(Parse(f, &v), ParseStatus::kOk);
  EXPECT_EQ(v.msg.offer_pid, 0x01020304u);
  EXPECT_EQ(v.msg.offer_addr, 0x00007f0011223344u);
  EXPECT_EQ(v.msg.offer_guard_addr, 0x00007f0055667788u);
  EXPECT_EQ(v.msg.offer_guard, 0x1122334455667788u);
  EXPECT_TRUE(v.payload.empty());
  EXPECT_NE(ToString(v).find("offer=16909060@0x7f0011223344"), std::string::npos) << ToString(v);
  const size_t o = kDataHeadersBytes;
  EXPECT_EQ(Parse(WithField(f, o, {0, 0, 0, 0}), &v), ParseStatus::kBadField) << "pid 0";
  EXPECT_EQ(Parse(WithField(f, o + 4, {0, 0, 0, 1}), &v), ParseStatus::kBadField) << "reserved";
  EXPECT_EQ(Parse(WithField(f, o + 23, {6}), &v), ParseStatus::kBadField)
      << "length must be total_length";
  EXPECT_EQ(Parse(WithField(f, o + 24, {0, 0, 0, 0, 0, 0, 0, 0}), &v), ParseStatus::kBadField)
      << "a guard value with no word";
  EXPECT_EQ(Parse(WithField(f, o + 32, {0, 0, 0, 0, 0, 0, 0, 0}), &v), ParseStatus::kBadField)
      << "a guard word with no value";
  EXPECT_EQ(Parse(WithField(WithField(f, o + 24, {0, 0, 0, 0, 0, 0, 0, 0}), o + 32,
                            {0, 0, 0, 0, 0, 0, 0, 0}),
                  &v),
            ParseStatus::kOk)
      << "no guard";
  EXPECT_EQ(v.msg.offer_guard, 0u);
  // Without an offer: no payload, as in version 2.
  m.offer_pid = 0;
  std::vector<uint8_t> g(2048);
  g.resize(BuildData(TestFlow(), TestCommon(PacketType::kData), m, {}, absl::MakeSpan(g)));
  ASSERT_EQ(g.size(), kDataHeadersBytes);
  ASSERT_EQ(Parse(g, &v), ParseStatus::kOk);
  EXPECT_EQ(v.msg.offer_pid, 0u);
  // The offer belongs to a request to send only.
  m.protocol = MsgProtocol::kEager;
  m.offer_pid = 7;
  std::vector<uint8_t> h(2048);
  h.resize(BuildData(TestFlow(), TestCommon(PacketType::kData), m, {}, absl::MakeSpan(h)));
  ASSERT_EQ(Parse(h, &v), ParseStatus::kOk);
  EXPECT_EQ(v.msg.offer_pid, 0u);
}

TEST(WireTest, CopiedOnlyOnAPullRequest) {
  RmaFields r;
  r.op = RmaOp::kReadReq;
  r.flags = kRmaFlagMessage | kRmaFlagCopied;
  r.total_length = 100;
  View v;
  ASSERT_EQ(Parse(RmaFrame(r, 0), &v), ParseStatus::kOk);
  EXPECT_EQ(v.rma.flags, kRmaFlagMessage | kRmaFlagCopied);
  r.flags = kRmaFlagMessage | kRmaFlagCopied | kRmaFlagVouched;
  EXPECT_EQ(Parse(RmaFrame(r, 0), &v), ParseStatus::kOk);
  r.flags = kRmaFlagMessage | kRmaFlagVouched;
  EXPECT_EQ(Parse(RmaFrame(r, 0), &v), ParseStatus::kBadField) << "vouched but not copied";
  r.flags = kRmaFlagCopied;
  EXPECT_EQ(Parse(RmaFrame(r, 0), &v), ParseStatus::kBadField) << "a read of a region";
  r.flags = kRmaFlagMessage | kRmaFlagCopied;
  r.op = RmaOp::kResponse;
  EXPECT_EQ(Parse(RmaFrame(r, 0), &v), ParseStatus::kBadField);
}

// Version 4's handshake fields: the MAC under a key covers every byte of
// the packet and both addresses, is all zero without a key, and a
// HELLO/HELLO_ACK without a nonce (or a COOKIE with one) is malformed.
TEST(WireTest, HandshakeMacCoversThePacketAndTheAddresses) {
  MacKey key{};
  key[0] = 1;
  MacKey other = key;
  other[31] = 2;
  HelloFields h;
  h.max_datagram = 1472;
  h.nonce = 77;
  std::vector<uint8_t> frame(512);
  const size_t n =
      BuildHello(TestFlow(), TestCommon(PacketType::kHello), h, &key, absl::MakeSpan(frame));
  View v;
  ASSERT_EQ(Parse({frame.data(), n}, &v), ParseStatus::kOk);
  EXPECT_TRUE(VerifyMac(v, &key));
  EXPECT_FALSE(VerifyMac(v, &other)) << "wrong key";
  EXPECT_FALSE(VerifyMac(v, nullptr)) << "a keyed HELLO to an endpoint without a key";
  // A forger changing a field fixes the CRC but cannot fix the MAC.
  View moved = v;
  moved.flow.src_port = static_cast<uint16_t>(moved.flow.src_port + 1);
  EXPECT_FALSE(VerifyMac(moved, &key)) << "another source address";
  View changed = v;
  std::vector<uint8_t> bytes(v.datagram.begin(), v.datagram.end());
  bytes[sizeof(CommonHeader) + offsetof(HelloHeader, nonce) + 7] ^= 1;  // another nonce
  changed.datagram = bytes;
  EXPECT_FALSE(VerifyMac(changed, &key));
  // Unkeyed: a non-zero MAC is refused.
  View unkeyed = v;
  unkeyed.hello.mac = {};
  EXPECT_TRUE(VerifyMac(unkeyed, nullptr));

  ResetFields r;
  r.incarnation = 5;
  const size_t rn =
      BuildReset(TestFlow(), TestCommon(PacketType::kReset), r, &key, absl::MakeSpan(frame));
  ASSERT_EQ(Parse({frame.data(), rn}, &v), ParseStatus::kOk);
  EXPECT_TRUE(VerifyMac(v, &key));
  EXPECT_FALSE(VerifyMac(v, &other));
}

TEST(WireTest, HelloNoncesAreRequiredWhereTheyProveSomething) {
  std::vector<uint8_t> frame(512);
  View v;
  HelloFields h;
  h.max_datagram = 1472;
  for (PacketType t : {PacketType::kHello, PacketType::kHelloAck}) {
    size_t n = BuildHello(TestFlow(), TestCommon(t), h, nullptr, absl::MakeSpan(frame));
    EXPECT_EQ(Parse({frame.data(), n}, &v), ParseStatus::kBadField) << "no nonce";
  }
  h.nonce = 1;
  size_t n =
      BuildHello(TestFlow(), TestCommon(PacketType::kCookie), h, nullptr, absl::MakeSpan(frame));
  EXPECT_EQ(Parse({frame.data(), n}, &v), ParseStatus::kBadField) << "a COOKIE with a nonce";
  h.echo = 9;
  n = BuildHello(TestFlow(), TestCommon(PacketType::kHello), h, nullptr, absl::MakeSpan(frame));
  EXPECT_EQ(Parse({frame.data(), n}, &v), ParseStatus::kBadField) << "a HELLO echoing";
}

}  // namespace
}  // namespace bypass::rdm::wire
