#include "driver/net_headers.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>

namespace bypass::driver {
namespace {

constexpr size_t kIpAt = sizeof(EthernetHeader);
constexpr size_t kUdpAt = sizeof(EthernetHeader) + sizeof(Ipv4Header);  // without options
constexpr uint16_t kIpv4DontFragment = 0x4000;
constexpr uint8_t kDefaultTtl = 64;

// Big-endian loads and stores at any alignment (one load or store and a byte
// swap each; the compiler sees through the memcpy).
uint16_t Get16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return ntohs(v);
}
uint32_t Get32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return ntohl(v);
}
void Put16(uint8_t* p, uint16_t v) {
  v = htons(v);
  std::memcpy(p, &v, sizeof(v));
}
void Put32(uint8_t* p, uint32_t v) {
  v = htonl(v);
  std::memcpy(p, &v, sizeof(v));
}

// Unfolded one's-complement sum of the big-endian 16-bit words of p[0, n),
// an odd last byte being the high half of a word. It adds 32-bit words,
// which folds to the same value since 2^16 = 1 (mod 0xffff); 64 bits cannot
// overflow for any frame.
uint64_t Sum16(const uint8_t* p, size_t n, uint64_t sum) {
  for (; n >= 4; p += 4, n -= 4) sum += Get32(p);
  if (n >= 2) {
    sum += Get16(p);
    p += 2;
    n -= 2;
  }
  if (n == 1) sum += uint32_t{p[0]} << 8;
  return sum;
}

uint16_t FoldComplement(uint64_t sum) {
  // Two folds leave at most 17 bits of a sum below 2^48 (every sum here:
  // at most 2^16 words); the loop ends what they leave.
  sum = (sum & 0xffffffff) + (sum >> 32);
  sum = (sum & 0xffff) + (sum >> 16);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

}  // namespace

uint16_t InternetChecksum(absl::Span<const uint8_t> bytes) {
  return FoldComplement(Sum16(bytes.data(), bytes.size(), 0));
}

uint16_t UdpChecksum(Ipv4Address src, Ipv4Address dst, absl::Span<const uint8_t> datagram) {
  uint64_t sum = (src.value >> 16) + (src.value & 0xffff) + (dst.value >> 16) +
                 (dst.value & 0xffff) + kIpProtoUdp + datagram.size();
  // The checksum field (bytes 6 and 7) counts as zero.
  constexpr size_t kField = offsetof(UdpHeader, checksum);
  sum = Sum16(datagram.data(), std::min(datagram.size(), kField), sum);
  if (datagram.size() > kField + 2) {
    sum = Sum16(datagram.data() + kField + 2, datagram.size() - kField - 2, sum);
  }
  const uint16_t c = FoldComplement(sum);
  return c == 0 ? 0xffff : c;
}

size_t WriteUdpHeaders(const UdpFlow& flow, size_t payload_len, absl::Span<uint8_t> frame,
                       UdpChecksumFill udp_checksum) {
  if (payload_len > kMaxUdpPayloadBytes || frame.size() < kUdpFrameHeaderBytes + payload_len) {
    return 0;
  }
  uint8_t* f = frame.data();
  std::memcpy(f + offsetof(EthernetHeader, dst), flow.dst_mac.bytes.data(), 6);
  std::memcpy(f + offsetof(EthernetHeader, src), flow.src_mac.bytes.data(), 6);
  Put16(f + offsetof(EthernetHeader, ether_type), kEtherTypeIpv4);

  // The IPv4 header, and its checksum summed from the values rather than
  // read back from memory.
  const uint16_t version_tos = static_cast<uint16_t>(0x4500 | (flow.dscp & 0x3f) << 2);
  const size_t udp_len = sizeof(UdpHeader) + payload_len;
  const uint16_t total = static_cast<uint16_t>(sizeof(Ipv4Header) + udp_len);
  const uint16_t ttl_protocol = kDefaultTtl << 8 | kIpProtoUdp;
  const uint32_t src = flow.src_ip.value;
  const uint32_t dst = flow.dst_ip.value;
  uint8_t* ip = f + kIpAt;
  Put16(ip, version_tos);
  Put16(ip + offsetof(Ipv4Header, total_length), total);
  Put16(ip + offsetof(Ipv4Header, id), 0);
  Put16(ip + offsetof(Ipv4Header, flags_fragment), kIpv4DontFragment);
  Put16(ip + offsetof(Ipv4Header, ttl), ttl_protocol);
  Put32(ip + offsetof(Ipv4Header, src), src);
  Put32(ip + offsetof(Ipv4Header, dst), dst);
  Put16(ip + offsetof(Ipv4Header, checksum),
        FoldComplement(uint64_t{version_tos} + total + kIpv4DontFragment + ttl_protocol +
                       (src >> 16) + (src & 0xffff) + (dst >> 16) + (dst & 0xffff)));

  uint8_t* udp = f + kUdpAt;
  Put16(udp + offsetof(UdpHeader, src_port), flow.src_port);
  Put16(udp + offsetof(UdpHeader, dst_port), flow.dst_port);
  Put16(udp + offsetof(UdpHeader, length), static_cast<uint16_t>(udp_len));
  Put16(udp + offsetof(UdpHeader, checksum), 0);
  switch (udp_checksum) {
    case UdpChecksumFill::kNone:
      break;
    case UdpChecksumFill::kCompute:
      Put16(udp + offsetof(UdpHeader, checksum),
            UdpChecksum(flow.src_ip, flow.dst_ip, {udp, udp_len}));
      break;
  }
  return kUdpFrameHeaderBytes + payload_len;
}

size_t BuildUdpFrame(const UdpFlow& flow, absl::Span<const uint8_t> payload,
                     absl::Span<uint8_t> frame, UdpChecksumFill udp_checksum) {
  if (payload.size() > kMaxUdpPayloadBytes ||
      frame.size() < kUdpFrameHeaderBytes + payload.size()) {
    return 0;
  }
  if (!payload.empty()) {
    std::memmove(frame.data() + kUdpFrameHeaderBytes, payload.data(), payload.size());
  }
  return WriteUdpHeaders(flow, payload.size(), frame, udp_checksum);
}

std::optional<ParsedUdpFrame> ParseUdpFrame(absl::Span<const uint8_t> frame) {
  // Every return hands back `parsed`, so it is built in the caller's slot
  // (NRVO) rather than copied there. LocateUdpFrame proved the headers and
  // the datagram present; the checksums are checked here.
  std::optional<ParsedUdpFrame> parsed;
  const std::optional<UdpFrameLayout> at = LocateUdpFrame(frame);
  if (!at) return parsed;
  const uint8_t* f = frame.data();
  const uint8_t* ip = f + kIpAt;
  const size_t ihl = at->ipv4_header_bytes;
  // The usual header without options: its five words summed straight.
  const uint64_t ip_sum = ihl == sizeof(Ipv4Header)
                              ? uint64_t{Get32(ip)} + Get32(ip + 4) + Get32(ip + 8) +
                                    Get32(ip + 12) + Get32(ip + 16)
                              : Sum16(ip, ihl, 0);
  if (FoldComplement(ip_sum) != 0) return parsed;

  const uint8_t* udp = ip + ihl;
  const size_t udp_len = at->udp_bytes;
  const Ipv4Address src{Get32(ip + offsetof(Ipv4Header, src))};
  const Ipv4Address dst{Get32(ip + offsetof(Ipv4Header, dst))};
  const uint16_t udp_checksum = Get16(udp + offsetof(UdpHeader, checksum));
  if (udp_checksum != 0 && UdpChecksum(src, dst, {udp, udp_len}) != udp_checksum) return parsed;

  ParsedUdpFrame& p = parsed.emplace();
  std::memcpy(p.flow.dst_mac.bytes.data(), f + offsetof(EthernetHeader, dst), 6);
  std::memcpy(p.flow.src_mac.bytes.data(), f + offsetof(EthernetHeader, src), 6);
  p.flow.src_ip = src;
  p.flow.dst_ip = dst;
  p.flow.src_port = Get16(udp + offsetof(UdpHeader, src_port));
  p.flow.dst_port = Get16(udp + offsetof(UdpHeader, dst_port));
  p.flow.dscp = static_cast<uint8_t>(ip[offsetof(Ipv4Header, dscp_ecn)] >> 2);
  p.payload = absl::MakeConstSpan(udp + sizeof(UdpHeader), udp_len - sizeof(UdpHeader));
  p.ipv4_header_bytes = static_cast<uint8_t>(ihl);
  p.udp_checksum_present = udp_checksum != 0;
  return parsed;
}

}  // namespace bypass::driver
