// One device queue shared by the endpoints bound to it: Poll receives a
// burst and hands each packet to the endpoint owning its UDP destination
// port, so endpoints share a queue where the device cannot steer.
#ifndef BYPASS_FABRIC_RDM_PORT_H_
#define BYPASS_FABRIC_RDM_PORT_H_

#include <algorithm>
#include <bit>
#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "driver/device.h"
#include "driver/packet.h"

namespace bypass::rdm {

// Received packets waiting for their endpoint's next Progress: a fixed ring.
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

// What a Port dropped, plain counters of its thread.
struct PortCounters {
  uint64_t rx_packets = 0;
  uint64_t no_endpoint = 0;  // no endpoint has the packet's UDP port (or not UDP at all)
  uint64_t inbox_full = 0;   // its endpoint had not progressed for too long
};

// The UDP destination port of an unfragmented Ethernet/IPv4/UDP frame; every
// byte is treated as hostile (the endpoint parses the whole frame later).
inline std::optional<uint16_t> PeekUdpDstPort(const uint8_t* f, uint32_t len) {
  constexpr uint32_t kEth = 14;
  if (len < kEth + 20 || f[12] != 0x08 || f[13] != 0x00) return std::nullopt;
  const uint8_t* ip = f + kEth;
  const uint32_t ihl = (ip[0] & 0x0fu) * 4u;
  if ((ip[0] >> 4) != 4 || ihl < 20 || ip[9] != 17) return std::nullopt;
  if (((ip[6] & 0x3fu) | ip[7]) != 0) return std::nullopt;  // a fragment
  if (len < kEth + ihl + 8) return std::nullopt;
  return static_cast<uint16_t>(ip[ihl + 2] << 8 | ip[ihl + 3]);
}

// A device queue and the endpoints on it. QP is driver::QueuePair (a virtual
// call per burst) or a concrete final queue type (none). Single-threaded:
// the port and all its endpoints belong to one thread.
template <class QP = driver::QueuePair>
class Port {
 public:
  static constexpr uint32_t kMaxEndpoints = 64;
  static constexpr uint32_t kMaxBurst = 256;

  // REQUIRES: qp outlives the port; info describes qp's device.
  Port(QP& qp, const driver::DeviceInfo& info) : qp_(qp), info_(info) {}
  Port(const Port&) = delete;
  Port& operator=(const Port&) = delete;
  ~Port() = default;  // REQUIRES: every endpoint detached

  QP& qp() { return qp_; }
  const driver::DeviceInfo& info() const { return info_; }
  const PortCounters& counters() const { return counters_; }
  uint32_t endpoints() const { return count_; }

  // Cold path: packets to udp_port go to inbox from now on.
  absl::Status Attach(uint16_t udp_port, Inbox* inbox) {
    for (uint32_t i = 0; i < count_; ++i) {
      if (ports_[i] == udp_port) {
        return absl::AlreadyExistsError(absl::StrCat("UDP port ", udp_port,
                                                     " already has an endpoint on ", info_.uri,
                                                     "; give each endpoint its own port"));
      }
    }
    if (count_ == kMaxEndpoints) {
      return absl::ResourceExhaustedError(
          absl::StrCat(info_.uri, " already has ", kMaxEndpoints, " endpoints on this queue"));
    }
    ports_[count_] = udp_port;
    inboxes_[count_] = inbox;
    ++count_;
    return absl::OkStatus();
  }

  // Cold path: frees what is still in the inbox.
  void Detach(uint16_t udp_port) {
    for (uint32_t i = 0; i < count_; ++i) {
      if (ports_[i] != udp_port) continue;
      driver::Packet* left[kMaxBurst];
      while (uint32_t n = inboxes_[i]->Pop(left)) qp_.FreeBulk({left, n});
      --count_;
      ports_[i] = ports_[count_];
      inboxes_[i] = inboxes_[count_];
      return;
    }
  }

  // One burst from the queue into the inboxes.
  void Poll(uint16_t burst) {
    driver::Packet* pkts[kMaxBurst];
    const uint16_t n = qp_.RxBurst({pkts, std::min<size_t>(burst, kMaxBurst)});
    if (n == 0) return;
    counters_.rx_packets += n;
    driver::Packet* drop[kMaxBurst];
    uint32_t dropped = 0;
    for (uint16_t i = 0; i < n; ++i) {
      Inbox* in = count_ == 1 ? inboxes_[0] : Find(pkts[i]);
      if (in == nullptr) {
        ++counters_.no_endpoint;
        drop[dropped++] = pkts[i];
      } else if (!in->Push(pkts[i])) {
        ++counters_.inbox_full;
        drop[dropped++] = pkts[i];
      }
    }
    if (dropped > 0) qp_.FreeBulk({drop, dropped});
  }

 private:
  Inbox* Find(const driver::Packet* p) const {
    const std::optional<uint16_t> port = PeekUdpDstPort(p->data, p->len);
    if (!port) return nullptr;
    for (uint32_t i = 0; i < count_; ++i) {
      if (ports_[i] == *port) return inboxes_[i];
    }
    return nullptr;
  }

  QP& qp_;
  const driver::DeviceInfo info_;
  uint16_t ports_[kMaxEndpoints] = {};
  Inbox* inboxes_[kMaxEndpoints] = {};
  uint32_t count_ = 0;
  PortCounters counters_;
};

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_PORT_H_
