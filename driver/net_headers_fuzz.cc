// Fuzz target: ParseUdpFrame over hostile frames. Each input runs three ways:
// as received; with its IPv4 and UDP checksums repaired, so that mutated
// header fields get past the checksum checks; and with its lengths made
// consistent as well. Whatever parses must stay inside the frame, parse again
// after a rebuild from its flow and payload, rebuild to the same header bytes,
// and survive ReverseUdpFrame with valid checksums.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/types/span.h"
#include "driver/net_headers.h"
#include "test/fuzz/fuzz_check.h"

namespace bypass::driver {
namespace {

using ::bypass::fuzz::Require;
using ::bypass::fuzz::Get16;
using ::bypass::fuzz::Get32;
using ::bypass::fuzz::Put16;

constexpr size_t kIpAt = sizeof(EthernetHeader);

bool SameBytes(absl::Span<const uint8_t> a, absl::Span<const uint8_t> b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}

// The IPv4 header length the frame claims, if its header is in the frame.
std::optional<size_t> ClaimedIhl(const std::vector<uint8_t>& f) {
  if (f.size() < kIpAt + sizeof(Ipv4Header)) return std::nullopt;
  const size_t ihl = (f[kIpAt] & 0x0f) * size_t{4};
  if (ihl < sizeof(Ipv4Header) || kIpAt + ihl + sizeof(UdpHeader) > f.size()) return std::nullopt;
  return ihl;
}

// Sets the IPv4 total length and the UDP length to fit the frame exactly.
void RepairLengths(std::vector<uint8_t>& f) {
  const std::optional<size_t> ihl = ClaimedIhl(f);
  if (!ihl || f.size() - kIpAt > 0xffff) return;
  Put16(&f[kIpAt + 2], static_cast<uint16_t>(f.size() - kIpAt));
  Put16(&f[kIpAt + *ihl + 4], static_cast<uint16_t>(f.size() - kIpAt - *ihl));
}

// Recomputes the UDP checksum (when the frame carries one) and then the
// IPv4 header checksum, over the lengths the frame claims.
void RepairChecksums(std::vector<uint8_t>& f) {
  const std::optional<size_t> ihl = ClaimedIhl(f);
  if (!ihl) return;
  uint8_t* ip = &f[kIpAt];
  const size_t total = Get16(ip + 2);
  uint8_t* udp = ip + *ihl;
  if (Get16(udp + 6) != 0 && total >= *ihl + sizeof(UdpHeader) && kIpAt + total <= f.size()) {
    Put16(udp + 6, UdpChecksum(Ipv4Address{Get32(ip + 12)}, Ipv4Address{Get32(ip + 16)},
                               {udp, total - *ihl}));
  }
  Put16(ip + 10, 0);
  Put16(ip + 10, InternetChecksum({ip, *ihl}));
}

void CheckParsed(const std::vector<uint8_t>& in, const ParsedUdpFrame& p) {
  const size_t ihl = p.ipv4_header_bytes;
  Require(ihl >= 20 && ihl <= 60 && ihl % 4 == 0, "IPv4 header length out of range");
  Require(p.payload.data() == in.data() + kIpAt + ihl + sizeof(UdpHeader),
          "payload does not follow the UDP header");
  Require(kIpAt + ihl + sizeof(UdpHeader) + p.payload.size() <= in.size(),
          "payload runs past the frame");
  Require(p.flow.dscp < 64, "DSCP wider than 6 bits");

  // Rebuild from what was parsed; it must parse to the same thing.
  const UdpChecksumFill fill =
      p.udp_checksum_present ? UdpChecksumFill::kCompute : UdpChecksumFill::kNone;
  std::vector<uint8_t> out(kUdpFrameHeaderBytes + p.payload.size());
  Require(BuildUdpFrame(p.flow, p.payload, absl::MakeSpan(out), fill) == out.size(),
          "a parsed payload does not fit a rebuilt frame");
  const std::optional<ParsedUdpFrame> again = ParseUdpFrame(out);
  Require(again.has_value(), "a rebuilt frame does not parse");
  Require(again->flow == p.flow, "the rebuilt frame's flow differs");
  Require(SameBytes(again->payload, p.payload), "the rebuilt frame's payload differs");
  Require(again->udp_checksum_present == p.udp_checksum_present, "UDP checksum presence differs");

  // Header bytes: those the builder derives from the flow and the payload
  // must match the received ones exactly.
  const uint8_t* ip_in = &in[kIpAt];
  const uint8_t* ip_out = &out[kIpAt];
  Require(std::memcmp(in.data(), out.data(), kIpAt) == 0, "Ethernet header differs");
  Require(ip_in[0] >> 4 == ip_out[0] >> 4, "IP version differs");
  Require((ip_in[1] >> 2) == (ip_out[1] >> 2), "DSCP differs");
  Require(Get16(ip_in + 2) - ihl == Get16(ip_out + 2) - sizeof(Ipv4Header),
          "IPv4 payload length differs");
  Require(ip_in[9] == ip_out[9], "protocol differs");
  Require(std::memcmp(ip_in + 12, ip_out + 12, 8) == 0, "IPv4 addresses differ");
  Require(std::memcmp(ip_in + ihl, ip_out + sizeof(Ipv4Header), sizeof(UdpHeader)) == 0,
          "UDP header differs");
  // A header the builder could have written is rebuilt whole; its checksum
  // may differ only between the two spellings of zero, 0x0000 and 0xffff.
  const bool builder_form = ihl == sizeof(Ipv4Header) && (ip_in[1] & 3) == 0 &&
                            Get16(ip_in + 4) == 0 && Get16(ip_in + 6) == 0x4000 &&
                            ip_in[8] == 64;
  if (builder_form) {
    Require(std::memcmp(ip_in, ip_out, 10) == 0 && std::memcmp(ip_in + 12, ip_out + 12, 8) == 0,
            "IPv4 header differs");
    const uint16_t c_in = Get16(ip_in + 10);
    const uint16_t c_out = Get16(ip_out + 10);
    Require(c_in == c_out || (c_in == 0xffff && c_out == 0), "IPv4 checksum differs");
  }

  // Turned around, it still parses, addressed back; twice is the original.
  std::vector<uint8_t> back = in;
  ReverseUdpFrame(back.data());
  const std::optional<ParsedUdpFrame> r = ParseUdpFrame(back);
  Require(r.has_value(), "a reversed frame does not parse");
  Require(r->flow.src_mac == p.flow.dst_mac && r->flow.dst_mac == p.flow.src_mac &&
              r->flow.src_ip == p.flow.dst_ip && r->flow.dst_ip == p.flow.src_ip &&
              r->flow.src_port == p.flow.dst_port && r->flow.dst_port == p.flow.src_port,
          "a reversed frame is not addressed back");
  ReverseUdpFrame(back.data());
  Require(back == in, "reversing twice changed the frame");
}

void Run(const std::vector<uint8_t>& frame) {
  const std::optional<ParsedUdpFrame> p = ParseUdpFrame(frame);
  if (p.has_value()) CheckParsed(frame, *p);
}

void FuzzOne(const uint8_t* data, size_t size) {
  // An exact-size copy, so a read past the end is still a heap overflow.
  std::vector<uint8_t> frame(data, data + size);
  Run(frame);
  RepairChecksums(frame);
  Run(frame);
  RepairLengths(frame);
  RepairChecksums(frame);
  Run(frame);
}

}  // namespace
}  // namespace bypass::driver

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bypass::driver::FuzzOne(data, size);
  return 0;
}
