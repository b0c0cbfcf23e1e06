#include "driver/loopback/loopback_queue.h"


#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "driver/host.h"
#include "driver/net_headers.h"

namespace bypass::driver::loopback {
namespace {

constexpr uint32_t kEthHeader = sizeof(EthernetHeader);

uint16_t Load16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
uint32_t Load32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}

}  // namespace

// The structural checks are net_headers' (LocateUdpFrame); the checksums,
// which cost a pass over the payload, are left to the receiver's
// ParseUdpFrame as before: a corrupt frame at worst lands on another queue.
std::optional<uint16_t> PeekUdpDstPort(const uint8_t* frame, uint32_t len, uint32_t ipv4) {
  const std::optional<UdpFrameLayout> at = LocateUdpFrame({frame, len});
  if (!at) return std::nullopt;
  const uint8_t* ip = frame + kEthHeader;
  if (Load32(ip + offsetof(Ipv4Header, dst)) != ipv4) return std::nullopt;
  return Load16(ip + at->ipv4_header_bytes + offsetof(UdpHeader, dst_port));
}

absl::StatusOr<std::unique_ptr<LoopbackQueue>> LoopbackQueue::Create(uint16_t id,
                                                                     PortShared* self,
                                                                     uint32_t pool_buffers,
                                                                     int numa_node) {
  PacketPool::Options po;
  po.max_frame = self->max_frame;
  po.buffers = pool_buffers;
  po.numa_node = numa_node;
  po.region_name = "bypass-loopback";
  po.rx_queue = id;
  absl::StatusOr<std::unique_ptr<PacketPool>> pool =
      PacketPool::Create(po, absl::StrCat("loopback queue ", id));
  if (!pool.ok()) return pool.status();
  return std::unique_ptr<LoopbackQueue>(new LoopbackQueue(id, self, *std::move(pool)));
}

LoopbackQueue::LoopbackQueue(uint16_t id, PortShared* self, std::unique_ptr<PacketPool> pool)
    : id_(id), self_(self), pool_(std::move(pool)) {}

SpscRing* LoopbackQueue::RingFor(const Route& r, const Packet& p) const {
  if (r.dst->num_queues == 1) return r.rings[0];
  const std::optional<uint16_t> port = PeekUdpDstPort(p.data, p.len, r.dst->ipv4);
  if (!port) return r.rings[0];
  // Relaxed: steering is configuration; SteerUdpPort's store is seen by
  // frames sent after it, with no other data depending on it.
  return r.rings[r.dst->steer[*port].load(std::memory_order_relaxed)];
}

uint16_t LoopbackQueue::TxBurst(absl::Span<Packet* const> pkts) {
  pkts = pkts.first(std::min<size_t>(pkts.size(), UINT16_MAX));  // the count is 16 bits
  std::lock_guard<std::mutex> wiring(wiring_mu_);
  const bool up = self_->link_up.load(std::memory_order_relaxed);
  size_t taken = 0;
  for (; taken < pkts.size(); ++taken) {
    const Packet& p = *pkts[taken];
    if (!up) {
      ++counters_.tx_link_down;
      continue;
    }
    if (p.len < kEthHeader || p.len > self_->max_frame) {
      ++counters_.tx_bad_length;
      continue;
    }
    size_t n_targets = 0;
    uint32_t peer_down = 0;
    uint32_t too_long = 0;
    if ((p.data[0] & 1) != 0) {  // broadcast or multicast: every other port
      for (const Route& r : routes_) {
        if (r.dst == self_) continue;
        if (!r.dst->link_up.load(std::memory_order_relaxed)) {
          ++peer_down;
        } else if (p.len > r.dst->max_frame) {
          ++too_long;
        } else {
          targets_[n_targets++] = RingFor(r, p);
        }
      }
    } else {
      const Route* route = nullptr;
      for (const Route& r : routes_) {
        if (std::memcmp(r.dst->mac.bytes.data(), p.data, 6) == 0) {
          route = &r;
          break;
        }
      }
      if (route == nullptr) {
        ++counters_.tx_unknown_unicast;
        continue;
      }
      if (!route->dst->link_up.load(std::memory_order_relaxed)) {
        ++counters_.tx_peer_link_down;
        continue;
      }
      if (p.len > route->dst->max_frame) {
        ++counters_.tx_bad_length;
        continue;
      }
      targets_[n_targets++] = RingFor(*route, p);
    }
    // A frame is taken only if every destination ring has room; otherwise
    // the caller keeps it and the rest (back-pressure).
    bool room = true;
    for (size_t i = 0; i < n_targets && room; ++i) room = targets_[i]->CanStage();
    if (!room) break;
    counters_.tx_peer_link_down += peer_down;
    counters_.tx_bad_length += too_long;
    for (size_t i = 0; i < n_targets; ++i) targets_[i]->Stage(p.data, p.len);
    if (n_targets > 0) {
      ++stats_.tx_packets;
      stats_.tx_bytes += p.len;
    }
  }
  for (Route& r : routes_) {
    for (SpscRing* ring : r.rings) ring->Publish();
  }
  stats_.tx_ring_full += pkts.size() - taken;
  PacketPool::FreeToOwners(pkts.first(taken));
  return static_cast<uint16_t>(taken);
}

void LoopbackQueue::DrainWhileDown() {
  for (Incoming& in : incoming_) {
    const uint32_t n = in.ring->Readable();
    in.ring->Release(n);
    counters_.rx_link_down += n;
    stats_.rx_dropped += n;
  }
}

uint16_t LoopbackQueue::RxBurst(absl::Span<Packet*> out) {
  out = out.first(std::min<size_t>(out.size(), UINT16_MAX));  // the count is 16 bits
  std::lock_guard<std::mutex> wiring(wiring_mu_);
  if (!self_->link_up.load(std::memory_order_relaxed)) {
    DrainWhileDown();
    return 0;
  }
  const size_t n_rings = incoming_.size();
  size_t got = 0;
  bool pool_empty = false;
  void* bufs[kChunk];
  for (size_t k = 0; k < n_rings && got < out.size() && !pool_empty; ++k) {
    SpscRing& ring = *incoming_[(rx_next_ + k) % n_rings].ring;
    uint32_t want = static_cast<uint32_t>(std::min<size_t>(ring.Readable(), out.size() - got));
    while (want > 0) {
      const uint32_t n = std::min(want, kChunk);
      const uint32_t have = pool_->GetBurst(absl::MakeSpan(bufs, n));
      for (uint32_t i = 0; i < have; ++i) {
        Packet* p = pool_->InitPacket(bufs[i]);
        p->ol_flags = self_->same_host ? kRxSameHost | kRxIntact : kRxIntact;
        const uint8_t* frame = ring.Frame(i, &p->len);
        std::memcpy(p->data, frame, p->len);
        stats_.rx_bytes += p->len;
        out[got++] = p;
      }
      ring.Release(have);
      if (have < n) {
        ++counters_.rx_no_buffer;
        pool_empty = true;
        break;
      }
      want -= n;
    }
  }
  // Start at the next ring next time, so no sender is starved.
  if (n_rings > 0) rx_next_ = (rx_next_ + 1) % n_rings;
  stats_.rx_packets += got;
  return static_cast<uint16_t>(got);
}

int64_t LoopbackQueue::ReadPeerMemory(uint32_t pid, uint64_t addr, void* dst, size_t len) {
  if (!self_->same_host) return -ENOSYS;
  return ReadProcessMemory(pid, addr, dst, len);
}

int64_t LoopbackQueue::ReadPeerMemoryV(uint32_t pid, absl::Span<const PeerRange> ranges) {
  if (!self_->same_host) return -ENOSYS;
  return ReadProcessMemoryV(pid, ranges);
}

void LoopbackQueue::AddRoute(const PortShared* dst, std::vector<SpscRing*> rings) {
  std::lock_guard<std::mutex> wiring(wiring_mu_);
  routes_.push_back(Route{dst, std::move(rings)});
  targets_.resize(routes_.size());
}

void LoopbackQueue::RemoveRoute(const PortShared* dst) {
  std::lock_guard<std::mutex> wiring(wiring_mu_);
  std::erase_if(routes_, [dst](const Route& r) { return r.dst == dst; });
}

void LoopbackQueue::AddIncoming(const PortShared* src, std::unique_ptr<SpscRing> ring) {
  std::lock_guard<std::mutex> wiring(wiring_mu_);
  incoming_.push_back(Incoming{src, std::move(ring)});
}

void LoopbackQueue::RemoveIncoming(const PortShared* src) {
  std::lock_guard<std::mutex> wiring(wiring_mu_);
  std::erase_if(incoming_, [src](const Incoming& in) { return in.src == src; });
  rx_next_ = 0;
}

void LoopbackQueue::AppendCounters(NamedCounters* out) const {
  const LoopbackCounters& c = counters_;
  AppendNamed(out, "", {{"tx_unknown_unicast", c.tx_unknown_unicast},
                        {"tx_link_down", c.tx_link_down},
                        {"tx_peer_link_down", c.tx_peer_link_down},
                        {"tx_bad_length", c.tx_bad_length},
                        {"rx_link_down", c.rx_link_down},
                        {"rx_no_buffer", c.rx_no_buffer}});
}

}  // namespace bypass::driver::loopback
