#include "driver/shm/shm_queue.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "driver/clock.h"
#include "driver/host.h"
#include "driver/net_headers.h"

namespace bypass::driver::shm {
namespace {

constexpr uint32_t kEth = sizeof(EthernetHeader);
constexpr uint32_t kDstIpAt = kEth + offsetof(Ipv4Header, dst);
constexpr uint32_t kUdpDstPortAt = kEth + sizeof(Ipv4Header) + offsetof(UdpHeader, dst_port);

uint16_t Load16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
uint32_t Load32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}

uint64_t Mix(uint64_t x) {  // splitmix64's finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9;
  x ^= x >> 27;
  x *= 0x94d049bb133111eb;
  return x ^ (x >> 31);
}

// The area name of an owner word (pid << 32 | nonce).
std::string OwnerArea(uint64_t owner) {
  return AreaName(geteuid(), static_cast<uint32_t>(owner >> 32), static_cast<uint32_t>(owner));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmQueue>> ShmQueue::Create(const OwnArea* area,
                                                           Registry* registry, Ipv4Address ipv4,
                                                           uint32_t max_frame,
                                                           uint32_t pool_buffers, int numa_node) {
  PacketPool::Options po;
  po.max_frame = max_frame;
  po.buffers = pool_buffers;
  po.numa_node = numa_node;
  po.region_name = "bypass-shm";
  absl::StatusOr<std::unique_ptr<PacketPool>> pool = PacketPool::Create(po, "shm queue");
  if (!pool.ok()) return pool.status();
  return std::unique_ptr<ShmQueue>(
      new ShmQueue(area, registry, ipv4, max_frame, *std::move(pool)));
}

ShmQueue::ShmQueue(const OwnArea* area, Registry* registry, Ipv4Address ipv4, uint32_t max_frame,
                   std::unique_ptr<PacketPool> pool)
    : area_(area),
      registry_(registry),
      ipv4_(ipv4),
      max_frame_(max_frame),
      pool_(std::move(pool)),
      cache_(kCacheEntries),
      rx_head_(area->layout().lanes, 0) {}

ShmQueue::~ShmQueue() {
  PublishTouched();
  for (auto& p : peers_) ReleaseLane(*p);
  for (uint16_t port : bound_) registry_->Unbind(ipv4_, port, area_->name());
}

absl::Status ShmQueue::BindUdpPort(uint16_t port) {
  if (absl::Status s = registry_->Bind(ipv4_, port, area_->name()); !s.ok()) return s;
  if (std::find(bound_.begin(), bound_.end(), port) == bound_.end()) bound_.push_back(port);
  return absl::OkStatus();
}

void ShmQueue::UnbindUdpPort(uint16_t port) {
  auto it = std::find(bound_.begin(), bound_.end(), port);
  if (it == bound_.end()) return;
  bound_.erase(it);
  registry_->Unbind(ipv4_, port, area_->name());
}

// --- TX: the destination cache.

void ShmQueue::Revalidate() {
  const uint64_t gen = registry_->generation();
  if (gen == cache_gen_) return;
  // Cold: something was bound, unbound or reclaimed. Forget every lookup,
  // and let go of areas whose file is gone (closed or reclaimed owners).
  std::fill(cache_.begin(), cache_.end(), CacheEntry{});
  cache_used_ = 0;
  cache_gen_ = gen;
  std::erase_if(peers_, [this](std::unique_ptr<Peer>& p) {
    if (p->name != area_->name() && access(AreaPath(p->name).c_str(), F_OK) != 0) {
      ReleaseLane(*p);
      return true;
    }
    return false;
  });
  // A lane may have been freed with the change (a sender closed): the next
  // frame or Reaches to a destination without one tries to claim it.
  for (auto& p : peers_) {
    if (p->lane == nullptr) p->no_lane_count = kLaneRetry - 1;
  }
}

ShmQueue::Peer* ShmQueue::Resolve(uint32_t ip, uint16_t port) {
  const uint64_t key = uint64_t{1} << 48 | uint64_t{ip} << 16 | port;
  const uint32_t mask = kCacheEntries - 1;
  for (uint32_t i = static_cast<uint32_t>(Mix(key)) & mask;; i = (i + 1) & mask) {
    const CacheEntry& e = cache_[i];
    if (e.key == key) return e.peer;
    if (e.key == 0) break;
  }
  return Miss(ip, port);
}

ShmQueue::Peer* ShmQueue::Miss(uint32_t ip, uint16_t port) {
  Peer* peer = nullptr;
  if (std::optional<std::string> name = registry_->Lookup(Ipv4Address{ip}, port)) {
    peer = MapPeer(*name);
  }
  // A cache kept under 3/4 full keeps probes short; it refills on demand.
  if (cache_used_ + 1 > kCacheEntries * 3 / 4) {
    std::fill(cache_.begin(), cache_.end(), CacheEntry{});
    cache_used_ = 0;
  }
  const uint64_t key = uint64_t{1} << 48 | uint64_t{ip} << 16 | port;
  const uint32_t mask = kCacheEntries - 1;
  uint32_t i = static_cast<uint32_t>(Mix(key)) & mask;
  while (cache_[i].key != 0) i = (i + 1) & mask;
  cache_[i] = CacheEntry{key, peer};
  ++cache_used_;
  return peer;
}

ShmQueue::Peer* ShmQueue::MapPeer(const std::string& name) {
  for (auto& p : peers_) {
    if (p->name == name) return p->dead ? nullptr : p.get();
  }
  auto p = std::make_unique<Peer>();
  p->name = name;
  absl::StatusOr<Mapping> m = MapPeerArea(name, &p->layout, &p->file);
  // Gone, not an area, or of another pid namespace: an unknown destination.
  if (!m.ok()) return nullptr;
  p->map = *std::move(m);
  ClaimLane(*p);
  peers_.push_back(std::move(p));
  touched_.reserve(peers_.size());
  return peers_.back().get();
}

void ShmQueue::ClaimLane(Peer& p) {
  p.no_memory = false;
  // The area is sparse: a lane's pages are reserved (fallocate) before we
  // touch any of them, its owner word included. On a full /dev/shm a page
  // faulted in through the mapping is a SIGBUS; a failed reservation is
  // only a lane we do without (the composite routes around us meanwhile).
  const int fd = ReopenPeerArea(p.name, p.file);
  if (fd < 0) return;  // gone or replaced: its owner closed or died
  const uint64_t me = area_->owner_word();
  const uint32_t lanes = p.layout.lanes;
  const uint32_t start = static_cast<uint32_t>(Mix(me) % lanes);
  LaneHeader* got = nullptr;
  uint32_t index = 0;
  bool unreserved = false;
  // A free lane first; then one whose owner is dead (a system call each).
  for (int pass = 0; pass < 2 && got == nullptr; ++pass) {
    for (uint32_t k = 0; k < lanes && got == nullptr; ++k) {
      const uint32_t i = (start + k) % lanes;
      if (ReserveRange(fd, p.layout.lanes_offset + p.layout.lane_stride * i,
                       p.layout.lane_stride) != 0) {
        unreserved = true;
        continue;
      }
      LaneHeader* l = LaneAt(p.map.base(), p.layout, i);
      uint64_t owner = Shared(l->owner).load(std::memory_order_acquire);
      if (pass == 0 && owner != 0) continue;
      if (pass == 1 && (owner == 0 || owner == me || AreaAlive(OwnerArea(owner)))) continue;
      if (!Shared(l->owner).compare_exchange_strong(owner, me, std::memory_order_acq_rel)) {
        continue;
      }
      // Go on from where the previous owner stopped; a lane whose indices
      // are corrupt is given back rather than used.
      const uint32_t tail = Shared(l->tail).load(std::memory_order_acquire);
      const uint32_t head = Shared(l->head).load(std::memory_order_acquire);
      if (tail - head > p.layout.slots) {
        Shared(l->owner).store(0, std::memory_order_release);
        continue;
      }
      got = l;
      index = i;
      p.staged = p.published = tail;
      p.cached_head = head;
    }
  }
  close(fd);
  if (got == nullptr) {
    p.no_memory = unreserved;
    return;
  }
  p.lane = got;
  p.lens = reinterpret_cast<uint32_t*>(reinterpret_cast<uint8_t*>(got) + kLensOffset);
  p.frames = reinterpret_cast<uint8_t*>(got) + p.layout.frames_offset;
  // seq_cst, paired with the receiver's clear-then-recheck of idle lanes.
  Shared(ActiveWords(p.map.base())[index / 64]).fetch_or(uint64_t{1} << (index % 64));
}

bool ShmQueue::HasLane(Peer& p) {
  if (p.lane != nullptr) return true;
  if (++p.no_lane_count % kLaneRetry == 0) ClaimLane(p);
  return p.lane != nullptr;
}

void ShmQueue::ReleaseLane(Peer& p) {
  if (p.lane == nullptr) return;
  uint64_t me = area_->owner_word();
  // Published frames stay readable; the lane is free for the next sender.
  Shared(p.lane->owner).compare_exchange_strong(me, 0, std::memory_order_acq_rel);
  p.lane = nullptr;
}

bool ShmQueue::CanStage(Peer& p, bool* corrupt) {
  const uint32_t slots = p.layout.slots;
  if (p.staged - p.cached_head < slots) return true;
  // Pairs with the receiver's release store of head: the slots it read are
  // free before we overwrite them.
  const uint32_t head = Shared(p.lane->head).load(std::memory_order_acquire);
  if (p.staged - head > slots) {  // a receiver with corrupt indices
    *corrupt = true;
    return false;
  }
  p.cached_head = head;
  return p.staged - head < slots;
}

void ShmQueue::PublishTouched() {
  for (Peer* p : touched_) {
    p->touched = false;
    if (p->staged == p->published) continue;
    p->published = p->staged;
    // Pairs with the receiver's acquire load of tail: the lengths and bytes
    // are visible before the new tail.
    Shared(p->lane->tail).store(p->staged, std::memory_order_release);
  }
  touched_.clear();
}

uint16_t ShmQueue::SendFrames(absl::Span<Packet* const> pkts, bool* unrouted) {
  pkts = pkts.first(std::min<size_t>(pkts.size(), UINT16_MAX));  // the count is 16 bits
  Revalidate();
  size_t done = 0;
  for (; done < pkts.size(); ++done) {
    const Packet& pkt = *pkts[done];
    const uint8_t* f = pkt.data;
    // No route (Reaches' refusals): the drop's counter.
    uint64_t* refused = nullptr;
    Peer* p = nullptr;
    // The frame is the caller's and untrusted: lengths before offsets.
    if (pkt.len < kUdpFrameHeaderBytes || pkt.len > max_frame_ ||
        Load16(f + offsetof(EthernetHeader, ether_type)) != kEtherTypeIpv4 ||
        f[kEth] != 0x45 || f[kEth + offsetof(Ipv4Header, protocol)] != kIpProtoUdp) {
      refused = &counters_.tx_not_udp;
    } else if (p = Resolve(Load32(f + kDstIpAt), Load16(f + kUdpDstPortAt));
               p == nullptr || p->dead) {
      refused = &counters_.tx_unknown_dest;
    } else if (!HasLane(*p)) {
      refused = p->no_memory ? &counters_.tx_no_memory : &counters_.tx_no_lane;
    }
    if (refused != nullptr) {
      if (unrouted != nullptr) {  // the caller's to send another way
        *unrouted = true;
        break;
      }
      ++*refused;
      continue;
    }
    if (pkt.len > p->layout.slot_bytes) {
      ++counters_.tx_too_long;
      continue;
    }
    bool corrupt = false;
    if (!CanStage(*p, &corrupt)) {
      if (corrupt) {
        ++counters_.tx_bad_peer;
        continue;
      }
      // Full. A receiver whose head moves is slow: back-pressure. One whose
      // head stays put for long is tested now and then (a system call): if
      // dead it is reclaimed, if alive it has stopped reading, and its
      // frames are dropped until its head moves (a lossy link, for the
      // engine to retransmit over) rather than holding the caller's TX to
      // every other destination behind it.
      const uint32_t head = p->cached_head;
      if (head != p->stuck_head) {
        p->stuck_head = head;
        p->stuck_count = 0;
        p->stuck = false;
      }
      if (!p->stuck && p->stuck_count++ == 0) p->full_since_ns = SteadyClock::Get().NowNs();
      if (!p->stuck && p->stuck_count >= kStuckProbe &&
          SteadyClock::Get().NowNs() - p->full_since_ns >= kStuckNs) {
        p->stuck_count = 0;
        if (registry_->ReclaimIfDead(p->name)) {
          p->dead = true;
        } else {
          p->stuck = true;
        }
      }
      if (p->dead) {
        ++counters_.tx_dead_peer;
        continue;
      }
      if (p->stuck) {
        ++counters_.tx_lane_stuck;
        continue;
      }
      break;  // back-pressure: the caller keeps this one and the rest
    }
    const uint32_t slot = p->staged & (p->layout.slots - 1);
    Shared(p->lens[slot]).store(pkt.len, std::memory_order_relaxed);
    std::memcpy(p->frames + static_cast<size_t>(slot) * p->layout.slot_bytes, f, pkt.len);
    ++p->staged;
    p->stuck_count = 0;
    p->stuck = false;
    if (!p->touched) {
      p->touched = true;
      touched_.push_back(p);  // never reallocates: reserved to peers_.size()
    }
    ++stats_.tx_packets;
    stats_.tx_bytes += pkt.len;
  }
  PublishTouched();
  if (unrouted == nullptr || !*unrouted) stats_.tx_ring_full += pkts.size() - done;
  return static_cast<uint16_t>(done);
}

uint16_t ShmQueue::TxBurst(absl::Span<Packet* const> pkts) {
  const uint16_t taken = Send(pkts);
  PacketPool::FreeToOwners(pkts.first(taken));
  return taken;
}

PeerLiveness ShmQueue::PeerAlive(Ipv4Address ip, uint16_t udp_port) {
  const std::optional<std::string> area = registry_->Lookup(ip, udp_port);
  if (!area) return PeerLiveness::kUnknown;
  return AreaAlive(*area) ? PeerLiveness::kAlive : PeerLiveness::kDead;
}

bool ShmQueue::Reaches(Ipv4Address ip, uint16_t udp_port) {
  Revalidate();
  Peer* p = Resolve(ip.value, udp_port);
  return p != nullptr && !p->dead && HasLane(*p);
}

// --- RX.

int64_t ShmQueue::ReadPeerMemory(uint32_t pid, uint64_t addr, void* dst, size_t len) {
  // Our senders share our pid namespace (they checked our header) only if
  // we know which it is: unknown, a pid could name another's process.
  if (area_->pid_ns() == 0) return -EPERM;
  return ReadProcessMemory(pid, addr, dst, len);
}

int64_t ShmQueue::ReadPeerMemoryV(uint32_t pid, absl::Span<const PeerRange> ranges) {
  if (area_->pid_ns() == 0) return -EPERM;
  return ReadProcessMemoryV(pid, ranges);
}

uint16_t ShmQueue::RxBurst(absl::Span<Packet*> out) {
  out = out.first(std::min<size_t>(out.size(), UINT16_MAX));  // the count is 16 bits
  const AreaLayout& l = area_->layout();
  uint8_t* base = area_->base();
  uint64_t* active = ActiveWords(base);
  const uint32_t words = (l.lanes + 63) / 64;
  const uint32_t start = rx_next_;
  rx_next_ = rx_next_ + 1 < l.lanes ? rx_next_ + 1 : 0;  // fair: rotate the first lane
  size_t got = 0;
  bool pool_empty = false;
  void* bufs[kChunk];
  // Lanes start..lanes-1, then 0..start-1.
  for (int pass = 0; pass < 2 && got < out.size() && !pool_empty; ++pass) {
    const uint32_t lo = pass == 0 ? start : 0;
    const uint32_t hi = pass == 0 ? l.lanes : start;
    for (uint32_t w = lo / 64; w < words && w * 64 < hi && got < out.size() && !pool_empty; ++w) {
      uint64_t bits = Shared(active[w]).load(std::memory_order_relaxed);
      if (w == lo / 64) bits &= ~uint64_t{0} << (lo % 64);
      while (bits != 0 && got < out.size() && !pool_empty) {
        const uint32_t i = w * 64 + static_cast<uint32_t>(__builtin_ctzll(bits));
        bits &= bits - 1;
        if (i >= hi) break;
        LaneHeader* lane = LaneAt(base, l, i);
        uint32_t head = rx_head_[i];
        // Pairs with the sender's release store: lengths and bytes first.
        const uint32_t tail = Shared(lane->tail).load(std::memory_order_acquire);
        const uint32_t avail = tail - head;
        if (avail == 0) {
          // An idle lane nobody owns leaves the poll set; recheck after the
          // clear, as a sender may have claimed it meanwhile.
          if (Shared(lane->owner).load() == 0) {
            Shared(active[w]).fetch_and(~(uint64_t{1} << (i % 64)));
            if (Shared(lane->owner).load() != 0 ||
                Shared(lane->tail).load() != head) {
              Shared(active[w]).fetch_or(uint64_t{1} << (i % 64));
            }
          }
          continue;
        }
        if (avail > l.slots) {  // a sender wrote nonsense: drop what it claims
          ++counters_.rx_bad_lane;
          rx_head_[i] = tail;
          Shared(lane->head).store(tail, std::memory_order_release);
          continue;
        }
        const uint32_t* lens =
            reinterpret_cast<const uint32_t*>(reinterpret_cast<uint8_t*>(lane) + kLensOffset);
        const uint8_t* frames = reinterpret_cast<uint8_t*>(lane) + l.frames_offset;
        uint32_t want = static_cast<uint32_t>(std::min<size_t>(avail, out.size() - got));
        while (want > 0) {
          const uint32_t n = std::min(want, kChunk);
          const uint32_t have = pool_->GetBurst(absl::MakeSpan(bufs, n));
          uint32_t used = 0;
          for (uint32_t k = 0; k < have; ++k, ++head) {
            const uint32_t slot = head & (l.slots - 1);
            // Read once: the sender may be writing it as we look.
            const uint32_t len = Shared(const_cast<uint32_t&>(lens[slot])).load(
                std::memory_order_relaxed);
            if (len < kEth || len > l.slot_bytes || len > pool_->frame_capacity()) {
              ++counters_.rx_bad_length;
              ++stats_.rx_dropped;
              continue;
            }
            Packet* p = pool_->InitPacket(bufs[used++]);
            p->len = len;
            std::memcpy(p->data, frames + static_cast<size_t>(slot) * l.slot_bytes, len);
            // Only processes of this user on this host write our lanes.
            p->ol_flags = kRxSameHost | kRxIntact;
            stats_.rx_bytes += len;
            out[got++] = p;
          }
          if (used < have) pool_->PutBulk(absl::MakeConstSpan(bufs + used, have - used));
          // Release at once: a lane is never held by the engine's packets.
          rx_head_[i] = head;
          Shared(lane->head).store(head, std::memory_order_release);
          if (have < n) {
            ++counters_.rx_no_buffer;
            pool_empty = true;
            break;
          }
          want -= n;
        }
      }
    }
  }
  stats_.rx_packets += got;
  return static_cast<uint16_t>(got);
}

void ShmQueue::AppendCounters(NamedCounters* out) const {
  const ShmCounters& c = counters_;
  AppendNamed(out, "", {{"tx_unknown_dest", c.tx_unknown_dest},
                        {"tx_not_udp", c.tx_not_udp},
                        {"tx_no_lane", c.tx_no_lane},
                        {"tx_no_memory", c.tx_no_memory},
                        {"tx_lane_stuck", c.tx_lane_stuck},
                        {"tx_too_long", c.tx_too_long},
                        {"tx_dead_peer", c.tx_dead_peer},
                        {"tx_bad_peer", c.tx_bad_peer},
                        {"rx_bad_lane", c.rx_bad_lane},
                        {"rx_bad_length", c.rx_bad_length},
                        {"rx_no_buffer", c.rx_no_buffer}});
}

}  // namespace bypass::driver::shm
