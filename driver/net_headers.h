// Ethernet, IPv4 and UDP headers as they are on the wire, and a writer for
// the 42-byte stack bypass frames carry. Big-endian fields, no bitfields.
#ifndef BYPASS_DRIVER_NET_HEADERS_H_
#define BYPASS_DRIVER_NET_HEADERS_H_

#include <arpa/inet.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "driver/device.h"

namespace bypass::driver {

#pragma pack(push, 1)
struct EthernetHeader {
  uint8_t dst[6];
  uint8_t src[6];
  uint16_t ether_type;  // big-endian; 0x0800 IPv4
};
struct Ipv4Header {
  uint8_t version_ihl;   // 0x45
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
inline constexpr size_t kUdpFrameHeaderBytes =
    sizeof(EthernetHeader) + sizeof(Ipv4Header) + sizeof(UdpHeader);

// The one's-complement checksum of an IPv4 header (checksum field zeroed).
inline uint16_t Ipv4Checksum(const Ipv4Header& ip) {
  const auto* w = reinterpret_cast<const uint8_t*>(&ip);
  uint32_t sum = 0;
  for (size_t i = 0; i < sizeof(Ipv4Header); i += 2) sum += (uint32_t{w[i]} << 8) | w[i + 1];
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return htons(static_cast<uint16_t>(~sum));
}

// Where a UDP datagram goes, and from where.
struct UdpFlow {
  MacAddress src_mac, dst_mac;
  Ipv4Address src_ip, dst_ip;
  uint16_t src_port = 0, dst_port = 0;
  uint8_t dscp = 0;
};

// Writes Ethernet + IPv4 + UDP headers for `payload_len` bytes of payload at
// `frame` and returns the frame length. REQUIRES: room for both.
inline size_t WriteUdpHeaders(uint8_t* frame, const UdpFlow& f, size_t payload_len) {
  auto* eth = reinterpret_cast<EthernetHeader*>(frame);
  std::memcpy(eth->dst, f.dst_mac.bytes.data(), 6);
  std::memcpy(eth->src, f.src_mac.bytes.data(), 6);
  eth->ether_type = htons(kEtherTypeIpv4);
  auto* ip = reinterpret_cast<Ipv4Header*>(frame + sizeof(EthernetHeader));
  ip->version_ihl = 0x45;
  ip->dscp_ecn = static_cast<uint8_t>(f.dscp << 2);
  ip->total_length = htons(static_cast<uint16_t>(sizeof(Ipv4Header) + sizeof(UdpHeader) + payload_len));
  ip->id = 0;
  ip->flags_fragment = htons(0x4000);
  ip->ttl = 64;
  ip->protocol = kIpProtoUdp;
  ip->checksum = 0;
  ip->src = htonl(f.src_ip.value);
  ip->dst = htonl(f.dst_ip.value);
  ip->checksum = Ipv4Checksum(*ip);
  auto* udp = reinterpret_cast<UdpHeader*>(frame + sizeof(EthernetHeader) + sizeof(Ipv4Header));
  udp->src_port = htons(f.src_port);
  udp->dst_port = htons(f.dst_port);
  udp->length = htons(static_cast<uint16_t>(sizeof(UdpHeader) + payload_len));
  udp->checksum = 0;
  return kUdpFrameHeaderBytes + payload_len;
}

// Turns a received UDP frame around in place: MACs, IPs and ports swapped.
inline void ReverseUdpFrame(uint8_t* frame) {
  auto* eth = reinterpret_cast<EthernetHeader*>(frame);
  uint8_t mac[6];
  std::memcpy(mac, eth->dst, 6);
  std::memcpy(eth->dst, eth->src, 6);
  std::memcpy(eth->src, mac, 6);
  auto* ip = reinterpret_cast<Ipv4Header*>(frame + sizeof(EthernetHeader));
  const uint32_t a = ip->src;
  ip->src = ip->dst;
  ip->dst = a;
  auto* udp = reinterpret_cast<UdpHeader*>(frame + sizeof(EthernetHeader) + sizeof(Ipv4Header));
  const uint16_t p = udp->src_port;
  udp->src_port = udp->dst_port;
  udp->dst_port = p;
}

}  // namespace bypass::driver

#endif  // BYPASS_DRIVER_NET_HEADERS_H_
