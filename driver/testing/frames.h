// Building and parsing Ethernet + IPv4 + UDP frames, for tests and the raw
// driver ping-pong.
#ifndef BYPASS_DRIVER_TESTING_FRAMES_H_
#define BYPASS_DRIVER_TESTING_FRAMES_H_

#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/types/span.h"
#include "driver/device.h"

namespace bypass::driver::testing {

inline constexpr size_t kEthHeaderLen = 14;
inline constexpr size_t kIpv4HeaderLen = 20;
inline constexpr size_t kUdpHeaderLen = 8;
inline constexpr size_t kUdpFrameOverhead = kEthHeaderLen + kIpv4HeaderLen + kUdpHeaderLen;

// The addresses of one UDP flow.
struct UdpFlow {
  MacAddress src_mac;
  MacAddress dst_mac;
  Ipv4Address src_ip;
  Ipv4Address dst_ip;
  uint16_t src_port = 0;
  uint16_t dst_port = 0;
};

// Writes an Ethernet + IPv4 (no options, DF set, TTL 64) + UDP frame carrying
// `payload` into `out`, with both checksums filled. Returns the frame length
// (kUdpFrameOverhead + payload.size()), or 0 if `out` is too small or the
// payload too long for one datagram.
size_t BuildUdpFrame(const UdpFlow& flow, absl::Span<const uint8_t> payload,
                     absl::Span<uint8_t> out);

// As BuildUdpFrame, for a payload already in place at out[kUdpFrameOverhead,
// + payload_len): writes the headers and checksums around it.
size_t WriteUdpHeaders(const UdpFlow& flow, size_t payload_len, absl::Span<uint8_t> out);

// A UDP frame taken apart; payload points into the frame.
struct ParsedUdpFrame {
  UdpFlow flow;
  absl::Span<const uint8_t> payload;
};

// Parses an Ethernet + IPv4 + UDP frame. Checks every length against the
// frame, the IPv4 header checksum, and the UDP checksum unless it is zero;
// nothing on a failure. Trailing bytes past the IPv4 total length (Ethernet
// padding) are allowed.
std::optional<ParsedUdpFrame> ParseUdpFrame(absl::Span<const uint8_t> frame);

// The Internet checksum (RFC 1071) of `bytes`, folded and complemented.
uint16_t InternetChecksum(absl::Span<const uint8_t> bytes);

}  // namespace bypass::driver::testing

#endif  // BYPASS_DRIVER_TESTING_FRAMES_H_
