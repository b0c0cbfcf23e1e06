// What every stage of one endpoint's engine shares: the settings, the time
// of the current step, the counters, the earliest timer, the FIFO of peers
// with something to send, and the packets to give back to the device.
#ifndef BYPASS_FABRIC_RDM_CONTEXT_H_
#define BYPASS_FABRIC_RDM_CONTEXT_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "driver/device.h"
#include "driver/packet.h"
#include "fabric/rdm/config.h"
#include "fabric/rdm/index_list.h"
#include "fabric/rdm/timer_wheel.h"
#include "fabric/rdm/types.h"

namespace bypass::rdm {

// What the engine needs to know of the device queue it runs on.
struct DeviceParams {
  driver::MacAddress mac;
  driver::Ipv4Address ip;
  uint32_t mtu = 1500;
  uint32_t frame_capacity = 0;  // bytes a TX buffer holds; 0: mtu + 14
  // DeviceInfo::same_host_mtu: toward peers of this host (ReachesSameHost),
  // when larger than mtu (0: mtu); TX buffers hold its frames.
  uint32_t same_host_mtu = 0;
  uint32_t pool_capacity = 0;   // buffers of the queue's pool (bounds held packets)
  // Reading in place (QueuePair::ReadPeerMemory), when the device can: this
  // process's id, offered in our requests to send (0: none offered), and
  // the one call through which the engine reads a peer process's memory:
  // the bytes copied or a negative errno (null: never read in place).
  uint32_t pid = 0;
  // (QueuePair::ReadPeerMemoryV: ranges in order, one system call).
  int64_t (*read_peer_memory)(void* arg, uint32_t pid, absl::Span<const driver::PeerRange> ranges) =
      nullptr;
  void* read_peer_memory_arg = nullptr;
  // QueuePair::ReachesSameHost: which handshake key a peer's packets take
  // (SECURITY.md); null: none is.
  bool (*reaches_same_host)(void* arg, driver::Ipv4Address ip, uint16_t port) = nullptr;
  void* reaches_same_host_arg = nullptr;
  // QueuePair::PeerAlive: whether a silent peer's process still exists
  // (Engine::CheckSilence); null: kUnknown, the peer timeout decides.
  driver::PeerLiveness (*peer_alive)(void* arg, driver::Ipv4Address ip, uint16_t port) = nullptr;
  void* peer_alive_arg = nullptr;
  // DeviceInfo::integrity: every frame we receive comes through memory
  // only (kRxIntact), so every peer may send us packets without a CRC.
  bool integrity = false;
};

// SplitMix64: the engine's pseudo-random numbers (initial PSNs; region keys
// are RandomRegionKey's, from the kernel's CSPRNG).
inline uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The stages' shared surroundings. Single-threaded, like the engine.
class Context {
 public:
  Context(const EndpointConfig& c, const DeviceParams& d, uint32_t max_datagram_bytes,
          uint32_t own_incarnation, uint64_t seed, uint32_t released_capacity)
      : config(c),
        dev(d),
        max_datagram(max_datagram_bytes),
        same_host_max_datagram(max_datagram_bytes),
        incarnation(own_incarnation),
        rng_state_(seed),
        peer_counters_(new PeerCounters[c.max_peers]),
        timers_(c.max_peers),
        work_(new uint32_t[c.max_peers]),
        queued_(new bool[c.max_peers]()),
        released_(new driver::Packet*[released_capacity]),
        released_capacity_(released_capacity) {}
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const EndpointConfig config;
  const DeviceParams dev;
  const uint32_t max_datagram;  // the largest UDP payload this end sends or takes
  // The same toward peers of this host, >= max_datagram (Engine::Create
  // sets it from DeviceParams::same_host_mtu): announced in the HELLOs to
  // those peers only (Session), the bound of every session's limit.
  uint32_t same_host_max_datagram;
  const uint32_t incarnation;   // this endpoint's
  uint64_t now = 0;             // the time for everything until the next SetNow
  uint8_t dscp = 0;             // of every packet built from now on
  Counters counters;
  // The per-peer counters of slot pi (REQUIRES: pi < config.max_peers).
  PeerCounters& peer_counters(uint32_t pi) { return peer_counters_[pi]; }
  const PeerCounters& peer_counters(uint32_t pi) const { return peer_counters_[pi]; }

  // Initial PSNs: from the kernel's CSPRNG (RandomRegionKey's source), so
  // that PSNs seen do not predict the next session's (an off-path attacker
  // must guess 32 bits); from the seeded PRNG when a test set random_seed.
  uint64_t Random() { return config.random_seed ? SplitMix64(&rng_state_) : RandomRegionKey(); }

  // Timers: one per peer in a wheel (timer_wheel.h), at the earliest of the
  // peer's deadlines; the engine runs a peer's timers when its fires. Every
  // deadline a stage sets is armed here, with the peer it is of.
  void ArmTimer(uint32_t pi, uint64_t when) {
    const uint64_t at = timers_.ArmAtMost(pi, when);
    next_timer_ns = at < next_timer_ns ? at : next_timer_ns;
  }
  void CancelTimer(uint32_t pi) { timers_.Cancel(pi); }
  TimerWheel& timers() { return timers_; }
  // No timer fires before this: a pass finds nothing due in one compare.
  uint64_t next_timer_ns = UINT64_MAX;

  // The FIFO of peers with something to send, each queued once.
  void Enqueue(uint32_t pi) {
    if (queued_[pi]) return;
    queued_[pi] = true;
    const uint32_t tail = work_head_ + work_count_;  // < 2 max_peers: wrap without a divide
    work_[tail >= config.max_peers ? tail - config.max_peers : tail] = pi;
    ++work_count_;
  }
  uint32_t queued_peers() const { return work_count_; }
  // REQUIRES: queued_peers() > 0.
  uint32_t Dequeue() {
    const uint32_t pi = work_[work_head_];
    work_head_ = work_head_ + 1 == config.max_peers ? 0 : work_head_ + 1;
    --work_count_;
    queued_[pi] = false;
    return pi;
  }

  // Packets the engine is done with, for the device's pool.
  void Release(driver::Packet* pkt) {
    if (released_count_ == released_capacity_) {
      std::fprintf(stderr, "rdm engine: more than %u packets released in one step\n",
                   released_capacity_);
      std::abort();
    }
    released_[released_count_++] = pkt;
  }
  absl::Span<driver::Packet* const> released() const { return {released_.get(), released_count_}; }
  void ClearReleased() { released_count_ = 0; }

  // A receive slot, unexpected-queue room or engine op became free: peers
  // refused for lack of one may go on (the engine tells them once per call).
  void NoteFreed() { freed_ = true; }
  bool TakeFreed() {
    const bool f = freed_;
    freed_ = false;
    return f;
  }

 private:
  uint64_t rng_state_;
  std::unique_ptr<PeerCounters[]> peer_counters_;
  TimerWheel timers_;
  std::unique_ptr<uint32_t[]> work_;
  std::unique_ptr<bool[]> queued_;
  uint32_t work_head_ = 0;
  uint32_t work_count_ = 0;
  std::unique_ptr<driver::Packet*[]> released_;
  uint32_t released_capacity_;
  uint32_t released_count_ = 0;
  bool freed_ = false;
};

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_CONTEXT_H_
