#include "driver/testing/frames.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>

namespace bypass::driver::testing {
namespace {

constexpr uint16_t kEtherTypeIpv4 = 0x0800;
constexpr uint8_t kProtoUdp = 17;

void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
void Put32(uint8_t* p, uint32_t v) {
  Put16(p, static_cast<uint16_t>(v >> 16));
  Put16(p + 2, static_cast<uint16_t>(v));
}
uint16_t Get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
uint32_t Get32(const uint8_t* p) { return uint32_t{Get16(p)} << 16 | Get16(p + 2); }

// Unfolded one's-complement sum of big-endian 16-bit words.
uint64_t Sum16(const uint8_t* p, size_t n, uint64_t sum) {
  for (; n >= 2; p += 2, n -= 2) sum += Get16(p);
  if (n == 1) sum += uint32_t{p[0]} << 8;
  return sum;
}

uint16_t Fold(uint64_t sum) {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

// UDP checksum over the pseudo header and the datagram (its checksum field
// as stored). A computed 0 is sent as 0xffff (RFC 768).
uint16_t UdpChecksum(uint32_t src, uint32_t dst, const uint8_t* udp, size_t udp_len) {
  uint64_t sum = (src >> 16) + (src & 0xffff) + (dst >> 16) + (dst & 0xffff);
  sum += kProtoUdp;
  sum += udp_len;
  const uint16_t c = Fold(Sum16(udp, udp_len, sum));
  return c == 0 ? 0xffff : c;
}

}  // namespace

uint16_t InternetChecksum(absl::Span<const uint8_t> bytes) {
  return Fold(Sum16(bytes.data(), bytes.size(), 0));
}

size_t BuildUdpFrame(const UdpFlow& flow, absl::Span<const uint8_t> payload,
                     absl::Span<uint8_t> out) {
  if (out.size() < kUdpFrameOverhead + payload.size()) return 0;
  if (!payload.empty()) std::memmove(out.data() + kUdpFrameOverhead, payload.data(), payload.size());
  return WriteUdpHeaders(flow, payload.size(), out);
}

size_t WriteUdpHeaders(const UdpFlow& flow, size_t payload_len, absl::Span<uint8_t> out) {
  const size_t len = kUdpFrameOverhead + payload_len;
  if (out.size() < len || payload_len > 65535 - kIpv4HeaderLen - kUdpHeaderLen) return 0;
  uint8_t* f = out.data();
  std::memcpy(f, flow.dst_mac.bytes.data(), 6);
  std::memcpy(f + 6, flow.src_mac.bytes.data(), 6);
  Put16(f + 12, kEtherTypeIpv4);

  uint8_t* ip = f + kEthHeaderLen;
  ip[0] = 0x45;  // version 4, 5 words
  ip[1] = 0;
  Put16(ip + 2, static_cast<uint16_t>(kIpv4HeaderLen + kUdpHeaderLen + payload_len));
  Put16(ip + 4, 0);       // identification
  Put16(ip + 6, 0x4000);  // DF, offset 0
  ip[8] = 64;
  ip[9] = kProtoUdp;
  Put16(ip + 10, 0);
  Put32(ip + 12, flow.src_ip.value);
  Put32(ip + 16, flow.dst_ip.value);
  Put16(ip + 10, InternetChecksum(absl::MakeConstSpan(ip, kIpv4HeaderLen)));

  uint8_t* udp = ip + kIpv4HeaderLen;
  const size_t udp_len = kUdpHeaderLen + payload_len;
  Put16(udp, flow.src_port);
  Put16(udp + 2, flow.dst_port);
  Put16(udp + 4, static_cast<uint16_t>(udp_len));
  Put16(udp + 6, 0);
  Put16(udp + 6, UdpChecksum(flow.src_ip.value, flow.dst_ip.value, udp, udp_len));
  return len;
}

std::optional<ParsedUdpFrame> ParseUdpFrame(absl::Span<const uint8_t> frame) {
  if (frame.size() < kUdpFrameOverhead) return std::nullopt;
  const uint8_t* f = frame.data();
  if (Get16(f + 12) != kEtherTypeIpv4) return std::nullopt;
  const uint8_t* ip = f + kEthHeaderLen;
  const size_t ihl = (ip[0] & 0x0f) * 4u;
  if ((ip[0] >> 4) != 4 || ihl < kIpv4HeaderLen) return std::nullopt;
  const size_t total = Get16(ip + 2);
  if (total < ihl + kUdpHeaderLen || kEthHeaderLen + total > frame.size()) return std::nullopt;
  if (ip[9] != kProtoUdp || (Get16(ip + 6) & 0x3fff) != 0) return std::nullopt;
  if (InternetChecksum(absl::MakeConstSpan(ip, ihl)) != 0) return std::nullopt;

  const uint8_t* udp = ip + ihl;
  const size_t udp_len = Get16(udp + 4);
  if (udp_len < kUdpHeaderLen || udp_len > total - ihl) return std::nullopt;
  ParsedUdpFrame out;
  std::memcpy(out.flow.dst_mac.bytes.data(), f, 6);
  std::memcpy(out.flow.src_mac.bytes.data(), f + 6, 6);
  out.flow.src_ip.value = Get32(ip + 12);
  out.flow.dst_ip.value = Get32(ip + 16);
  out.flow.src_port = Get16(udp);
  out.flow.dst_port = Get16(udp + 2);
  if (Get16(udp + 6) != 0) {
    // Summing the datagram with its stored checksum gives 0 (or, for a
    // stored 0xffff standing for 0, the computed value is 0xffff).
    const uint16_t c = UdpChecksum(out.flow.src_ip.value, out.flow.dst_ip.value, udp, udp_len);
    if (c != 0xffff) return std::nullopt;
  }
  out.payload = absl::MakeConstSpan(udp + kUdpHeaderLen, udp_len - kUdpHeaderLen);
  return out;
}

}  // namespace bypass::driver::testing
