// Ethernet, IPv4 and UDP as they are on the wire: the header structs, the
// Internet checksum, a builder for the frames bypass sends and a parser for
// the frames it receives. Big-endian fields, no bitfields. This is the one
// place in the tree that knows these layouts.
#ifndef BYPASS_DRIVER_NET_HEADERS_H_
#define BYPASS_DRIVER_NET_HEADERS_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>

#include "absl/types/span.h"
#include "driver/device.h"

namespace bypass::driver {

#pragma pack(push, 1)
struct EthernetHeader {
  uint8_t dst[6];
  uint8_t src[6];
  uint16_t ether_type;  // big-endian; 0x0800 IPv4
};
struct Ipv4Header {
  uint8_t version_ihl;   // version << 4 | header length in 32-bit words; 0x45 without options
  uint8_t dscp_ecn;      // DSCP << 2 | ECN
  uint16_t total_length; // big-endian, IP header + payload
  uint16_t id;
  uint16_t flags_fragment;  // 0x4000: don't fragment
  uint8_t ttl;
  uint8_t protocol;      // 17 UDP
  uint16_t checksum;
  uint32_t src;
  uint32_t dst;
};
struct UdpHeader {
  uint16_t src_port;
  uint16_t dst_port;
  uint16_t length;       // UDP header + payload
  uint16_t checksum;     // 0: none
};
#pragma pack(pop)
static_assert(sizeof(EthernetHeader) == 14);
static_assert(sizeof(Ipv4Header) == 20);
static_assert(sizeof(UdpHeader) == 8);

inline constexpr uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr uint8_t kIpProtoUdp = 17;
// Headers of a frame built here (IPv4 without options): 42 bytes.
inline constexpr size_t kUdpFrameHeaderBytes =
    sizeof(EthernetHeader) + sizeof(Ipv4Header) + sizeof(UdpHeader);
// The most payload one UDP datagram over IPv4 without options can carry.
inline constexpr size_t kMaxUdpPayloadBytes = 65535 - sizeof(Ipv4Header) - sizeof(UdpHeader);

// The addresses of one UDP flow, and the DSCP its packets carry.
struct UdpFlow {
  MacAddress src_mac;
  MacAddress dst_mac;
  Ipv4Address src_ip;
  Ipv4Address dst_ip;
  uint16_t src_port = 0;
  uint16_t dst_port = 0;
  uint8_t dscp = 0;  // 0..63

  friend bool operator==(const UdpFlow&, const UdpFlow&) = default;
};

// The Internet checksum (RFC 1071) of `bytes`: the one's-complement sum of
// big-endian 16-bit words (an odd last byte padded with zero), folded and
// complemented. Over an IPv4 header with its checksum in place it is 0 when
// the header is intact.
uint16_t InternetChecksum(absl::Span<const uint8_t> bytes);

// The value for the checksum field of the UDP datagram `datagram` (header and
// payload) sent from `src` to `dst`, computed over the IPv4 pseudo header and
// the datagram with its checksum field taken as zero. A computed 0 is
// returned as 0xffff (RFC 768), so the result is never 0, which means "no
// checksum".
uint16_t UdpChecksum(Ipv4Address src, Ipv4Address dst, absl::Span<const uint8_t> datagram);

// Whether the builder fills the UDP checksum. IPv4 allows none (0); the hot
// path leaves it so, or to a NIC's offload, since it costs a pass over the
// payload. The IPv4 header checksum is always filled.
enum class UdpChecksumFill : uint8_t {
  kNone,     // checksum field 0
  kCompute,  // computed over pseudo header and payload
};

// Writes Ethernet + IPv4 (no options, DF set, TTL 64, id 0) + UDP headers into
// frame[0, kUdpFrameHeaderBytes) around a payload of `payload_len` bytes
// already in place at frame[kUdpFrameHeaderBytes, + payload_len). Returns the
// frame length, or 0 if `frame` is too small or the payload too long for one
// datagram.
size_t WriteUdpHeaders(const UdpFlow& flow, size_t payload_len, absl::Span<uint8_t> frame,
                       UdpChecksumFill udp_checksum);

// As WriteUdpHeaders, copying `payload` into place first (it may overlap
// `frame`).
size_t BuildUdpFrame(const UdpFlow& flow, absl::Span<const uint8_t> payload,
                     absl::Span<uint8_t> frame, UdpChecksumFill udp_checksum);

// A received UDP frame taken apart; `payload` points into the frame.
struct ParsedUdpFrame {
  UdpFlow flow;
  absl::Span<const uint8_t> payload;
  uint8_t ipv4_header_bytes = 0;  // 20, or up to 60 with options
  bool udp_checksum_present = false;  // false: the sender sent 0 (none)
};

// Parses an Ethernet + IPv4 + UDP frame, treating every byte as hostile.
// Nothing unless all of these hold:
//   - EtherType IPv4 (no VLAN tag), version 4, IHL >= 5; IPv4 options
//     (IHL 6..15) are covered by the header checksum and skipped;
//   - the IPv4 header checksum is intact;
//   - not a fragment (MF clear, offset 0); protocol UDP;
//   - the IPv4 total length covers its header and a UDP header and fits in
//     the frame; bytes past it (Ethernet padding, an FCS) are ignored;
//   - the UDP length equals the IPv4 payload length;
//   - the UDP checksum is intact, unless it is 0 (none).
std::optional<ParsedUdpFrame> ParseUdpFrame(absl::Span<const uint8_t> frame);

// Where the UDP datagram of an Ethernet + IPv4 + UDP frame lies.
struct UdpFrameLayout {
  uint8_t ipv4_header_bytes = 0;  // 20..60: the UDP header is at 14 + this
  uint16_t udp_bytes = 0;         // UDP header + payload, >= 8
};

// The IPv4 flags_fragment bits of a fragment: More Fragments and the offset.
inline constexpr uint16_t kIpv4MoreFragmentsAndOffset = 0x3fff;

// The checks of ParseUdpFrame but its two checksums, treating every byte as
// hostile: what it accepts has every header byte and the whole datagram its
// lengths claim inside `frame`. It reads headers only, no payload, so it is
// cheap enough to steer every frame by (loopback's PeekUdpDstPort); what it
// accepts may still be corrupt, and a receiver that uses it parses it with
// ParseUdpFrame. Inline: it runs once per frame on the raw ping-pong's
// path, where a call and the span's copy were a tenth of the driver's cost.
inline std::optional<UdpFrameLayout> LocateUdpFrame(absl::Span<const uint8_t> frame) {
  // Each check reads only bytes that an earlier check proved present.
  auto get16 = [](const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); };
  constexpr size_t kIpAt = sizeof(EthernetHeader);
  const uint8_t* f = frame.data();
  if (frame.size() < kIpAt + sizeof(Ipv4Header)) return std::nullopt;
  if (get16(f + offsetof(EthernetHeader, ether_type)) != kEtherTypeIpv4) return std::nullopt;

  const uint8_t* ip = f + kIpAt;
  const size_t ip_room = frame.size() - kIpAt;
  const size_t ihl = (ip[0] & 0x0f) * size_t{4};
  if ((ip[0] >> 4) != 4 || ihl < sizeof(Ipv4Header) || ihl > ip_room) return std::nullopt;
  if ((get16(ip + offsetof(Ipv4Header, flags_fragment)) & kIpv4MoreFragmentsAndOffset) != 0) {
    return std::nullopt;
  }
  if (ip[offsetof(Ipv4Header, protocol)] != kIpProtoUdp) return std::nullopt;
  const size_t total = get16(ip + offsetof(Ipv4Header, total_length));
  if (total < ihl + sizeof(UdpHeader) || total > ip_room) return std::nullopt;
  const size_t udp_len = total - ihl;
  if (get16(ip + ihl + offsetof(UdpHeader, length)) != udp_len) return std::nullopt;
  return UdpFrameLayout{static_cast<uint8_t>(ihl), static_cast<uint16_t>(udp_len)};
}

// Turns a received UDP frame around in place: MACs, IPv4 addresses and UDP
// ports swapped; both checksums stay valid. REQUIRES: ParseUdpFrame accepted
// `frame`.
inline void ReverseUdpFrame(uint8_t* frame) {
  auto swap_bytes = [](uint8_t* a, uint8_t* b, size_t n) {
    uint8_t tmp[6];
    std::memcpy(tmp, a, n);
    std::memcpy(a, b, n);
    std::memcpy(b, tmp, n);
  };
  swap_bytes(frame, frame + 6, 6);
  uint8_t* ip = frame + sizeof(EthernetHeader);
  swap_bytes(ip + offsetof(Ipv4Header, src), ip + offsetof(Ipv4Header, dst), 4);
  uint8_t* udp = ip + (ip[0] & 0x0f) * 4u;
  swap_bytes(udp + offsetof(UdpHeader, src_port), udp + offsetof(UdpHeader, dst_port), 2);
}

}  // namespace bypass::driver

#endif  // BYPASS_DRIVER_NET_HEADERS_H_
