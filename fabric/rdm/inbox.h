// Received packets waiting for their endpoint's next Progress, and the peek
// at a frame's UDP destination port that the Port demultiplexes by.
#ifndef BYPASS_FABRIC_RDM_INBOX_H_
#define BYPASS_FABRIC_RDM_INBOX_H_

#include <algorithm>
#include <bit>
#include <cstdint>
#include <memory>
#include <optional>

#include "absl/types/span.h"
#include "driver/packet.h"

namespace bypass::rdm {

// A fixed ring of packets for one endpoint.
class Inbox {
 public:
  explicit Inbox(uint32_t capacity)
      : slots_(new driver::Packet*[std::bit_ceil(capacity)]), mask_(std::bit_ceil(capacity) - 1) {}
  Inbox(const Inbox&) = delete;
  Inbox& operator=(const Inbox&) = delete;

  bool Push(driver::Packet* p) {
    if (tail_ - head_ > mask_) return false;  // full; indices wrap (unsigned)
    slots_[tail_++ & mask_] = p;
    return true;
  }
  uint32_t Pop(absl::Span<driver::Packet*> out) {
    const uint32_t n = std::min<uint32_t>(static_cast<uint32_t>(out.size()), tail_ - head_);
    for (uint32_t i = 0; i < n; ++i) out[i] = slots_[head_++ & mask_];
    return n;
  }
  uint32_t size() const { return tail_ - head_; }

 private:
  std::unique_ptr<driver::Packet*[]> slots_;
  uint32_t mask_;
  uint32_t head_ = 0;  // free-running
  uint32_t tail_ = 0;
};

// The IPv4 destination (host order) and UDP destination port of an
// unfragmented Ethernet/IPv4/UDP frame; every byte is treated as hostile
// (the endpoint parses the whole frame later).
struct UdpDst {
  uint32_t ip = 0;
  uint16_t port = 0;
};
inline std::optional<UdpDst> PeekUdpDst(const uint8_t* f, uint32_t len) {
  constexpr uint32_t kEth = 14;
  if (len < kEth + 20 || f[12] != 0x08 || f[13] != 0x00) return std::nullopt;
  const uint8_t* ip = f + kEth;
  const uint32_t ihl = (ip[0] & 0x0fu) * 4u;
  if ((ip[0] >> 4) != 4 || ihl < 20 || ip[9] != 17) return std::nullopt;
  if (((ip[6] & 0x3fu) | ip[7]) != 0) return std::nullopt;  // a fragment
  if (len < kEth + ihl + 8) return std::nullopt;
  return UdpDst{uint32_t{ip[16]} << 24 | uint32_t{ip[17]} << 16 | uint32_t{ip[18]} << 8 | ip[19],
                static_cast<uint16_t>(ip[ihl + 2] << 8 | ip[ihl + 3])};
}
inline std::optional<uint16_t> PeekUdpDstPort(const uint8_t* f, uint32_t len) {
  const std::optional<UdpDst> d = PeekUdpDst(f, len);
  if (!d) return std::nullopt;
  return d->port;
}

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_INBOX_H_
