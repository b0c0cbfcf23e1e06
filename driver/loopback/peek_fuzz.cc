// Fuzz target: PeekUdpDstPort, which reads the UDP destination port of
// every frame a loopback port sends to a port with several queues, over
// hostile frames. Each input runs as received and with its IPv4 and UDP
// lengths made to fit the frame, so mutated headers get past the length
// checks. Checked:
//   - a port comes back only for the frame's own IPv4 destination, read
//     from inside the frame at the UDP header's destination port;
//   - it peeks exactly what LocateUdpFrame accepts, whatever the checksums;
//   - ParseUdpFrame accepts nothing the peek rejects, and accepts everything
//     it peeks once the checksums are made valid (IPv4 repaired, UDP 0): the
//     peek is ParseUdpFrame without its checksums, and agrees on the port.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <vector>

#include "driver/loopback/loopback_queue.h"
#include "driver/net_headers.h"
#include "test/fuzz/fuzz_check.h"

namespace bypass::driver::loopback {
namespace {

using ::bypass::fuzz::Require;
using ::bypass::fuzz::Get16;
using ::bypass::fuzz::Get32;
using ::bypass::fuzz::Put16;

constexpr size_t kIpAt = sizeof(EthernetHeader);

std::optional<uint16_t> Peek(const std::vector<uint8_t>& f, uint32_t ipv4) {
  return PeekUdpDstPort(f.data(), static_cast<uint32_t>(f.size()), ipv4);
}

// Sets the IPv4 total length and the UDP length to fit the frame exactly,
// when the IPv4 and UDP headers the frame claims are in it.
void RepairLengths(std::vector<uint8_t>& f) {
  if (f.size() < kIpAt + sizeof(Ipv4Header) || f.size() - kIpAt > 0xffff) return;
  const size_t ihl = (f[kIpAt] & 0x0f) * size_t{4};
  if (ihl < sizeof(Ipv4Header) || kIpAt + ihl + sizeof(UdpHeader) > f.size()) return;
  Put16(&f[kIpAt + 2], static_cast<uint16_t>(f.size() - kIpAt));
  Put16(&f[kIpAt + ihl + 4], static_cast<uint16_t>(f.size() - kIpAt - ihl));
}

void Run(const std::vector<uint8_t>& f) {
  const std::optional<UdpFrameLayout> at = LocateUdpFrame(f);
  const std::optional<ParsedUdpFrame> parsed = ParseUdpFrame(f);
  Require(!parsed || at, "ParseUdpFrame accepts a frame LocateUdpFrame rejects");

  // The destination the frame claims, if its IPv4 header is there.
  const bool has_ip = f.size() >= kIpAt + sizeof(Ipv4Header);
  const uint32_t dst = has_ip ? Get32(&f[kIpAt + 16]) : 0x0a000001;
  const std::optional<uint16_t> port = Peek(f, dst);
  Require(Peek(f, dst ^ 1) == std::nullopt, "a port peeked for another IPv4 address");
  Require(port.has_value() == at.has_value(), "the peek and LocateUdpFrame disagree");
  if (!port) return;

  const size_t ihl = at->ipv4_header_bytes;
  Require(ihl >= sizeof(Ipv4Header) && ihl <= 60 && ihl % 4 == 0, "IPv4 header length");
  Require(ihl == (f[kIpAt] & 0x0f) * size_t{4}, "IPv4 header length not the frame's");
  Require(at->udp_bytes >= sizeof(UdpHeader), "UDP datagram shorter than its header");
  Require(kIpAt + ihl + at->udp_bytes <= f.size(), "UDP datagram runs past the frame");
  Require(*port == Get16(&f[kIpAt + ihl + 2]), "the port is not the UDP destination port");
  if (parsed) Require(parsed->flow.dst_port == *port, "ParseUdpFrame reads another port");

  // The checksums do not matter to the peek; once valid, ParseUdpFrame
  // accepts what the peek did.
  std::vector<uint8_t> valid = f;
  uint8_t* ip = &valid[kIpAt];
  Put16(ip + ihl + 6, 0);  // no UDP checksum
  Put16(ip + 10, 0);
  Put16(ip + 10, InternetChecksum({ip, ihl}));
  Require(Peek(valid, dst) == port, "the peek depends on a checksum");
  const std::optional<ParsedUdpFrame> again = ParseUdpFrame(valid);
  Require(again.has_value(), "ParseUdpFrame rejects a peeked frame with valid checksums");
  Require(again->flow.dst_port == *port && again->flow.dst_ip.value == dst,
          "ParseUdpFrame reads another destination");
}

void FuzzOne(const uint8_t* data, size_t size) {
  // An exact-size copy, so a read past the end is still a heap overflow.
  std::vector<uint8_t> frame(data, data + size);
  Run(frame);
  RepairLengths(frame);
  Run(frame);
}

}  // namespace
}  // namespace bypass::driver::loopback

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bypass::driver::loopback::FuzzOne(data, size);
  return 0;
}
