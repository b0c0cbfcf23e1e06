// What every stage of one endpoint's engine shares: the settings, the time
// of the current step, the counters, the earliest timer, the FIFO of peers
// with something to send, and the packets to give back to the device.
#ifndef BYPASS_FABRIC_RDM_CONTEXT_H_
#define BYPASS_FABRIC_RDM_CONTEXT_H_

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <unordered_map>

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

// One peer's counters (PeerCounters), as they are counted.
enum class PeerCount : uint8_t {
  kTxPackets,
  kRxPackets,
  kRetransmits,
  kDuplicates,
  kOutOfOrder,
  kRnrSent,
  kRnrReceived,
  kCreditStalls,
  kHandshakeFailures,
};
inline constexpr size_t kPeerCounts = 9;

// ... as a peer's slot keeps them: 24 B, where PeerCounters takes 48. The
// packet counts in 32 bits, the rare ones in 16; what a count carries out
// of them goes to a table of the few peers whose counts wrapped
// (Context::Carry), so that PeerCounters still reports 64-bit packet
// counts and 32-bit rare ones (PROTOCOL.md, "Memory per peer").
struct PeerCountSlot {
  uint32_t packets[2] = {};  // kTxPackets, kRxPackets
  uint16_t rare[kPeerCounts - 2] = {};  // kRetransmits.. in PeerCount's order
};

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
        peer_counts_(new PeerCountSlot[c.max_peers]),
        timers_(c.max_peers),
        timer_floor_(new uint64_t[c.max_peers]),
        work_(new uint32_t[c.max_peers]),
        queued_(new bool[c.max_peers]()),
        released_(new driver::Packet*[released_capacity]),
        released_capacity_(released_capacity) {
    std::fill(timer_floor_.get(), timer_floor_.get() + c.max_peers, UINT64_MAX);
  }
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
  // Counts n events of kind k for slot pi (REQUIRES: pi < config.max_peers).
  void Count(uint32_t pi, PeerCount k, uint32_t n = 1) {
    PeerCountSlot& s = peer_counts_[pi];
    const size_t i = static_cast<size_t>(k);
    if (i < 2) {
      const uint32_t was = s.packets[i];
      s.packets[i] = was + n;
      if (s.packets[i] < was) [[unlikely]] Carry(pi, i, uint64_t{1} << 32);
    } else {
      const uint32_t sum = uint32_t{s.rare[i - 2]} + n;
      s.rare[i - 2] = static_cast<uint16_t>(sum);
      if (sum >> 16 != 0) [[unlikely]] Carry(pi, i, uint64_t{sum >> 16} << 16);
    }
  }
  // The per-peer counters of slot pi.
  PeerCounters peer_counters(uint32_t pi) const {
    const PeerCountSlot& s = peer_counts_[pi];
    uint64_t v[kPeerCounts];
    for (size_t i = 0; i < 2; ++i) v[i] = s.packets[i];
    for (size_t i = 2; i < kPeerCounts; ++i) v[i] = s.rare[i - 2];
    if (const auto it = carries_.find(pi); it != carries_.end()) {
      for (size_t i = 0; i < kPeerCounts; ++i) v[i] += it->second[i];
    }
    PeerCounters c;
    c.tx_packets = v[0];
    c.rx_packets = v[1];
    c.retransmits = static_cast<uint32_t>(v[2]);  // wrap at 32 bits, as documented
    c.duplicates = static_cast<uint32_t>(v[3]);
    c.out_of_order = static_cast<uint32_t>(v[4]);
    c.rnr_sent = static_cast<uint32_t>(v[5]);
    c.rnr_received = static_cast<uint32_t>(v[6]);
    c.credit_stalls = static_cast<uint32_t>(v[7]);
    c.handshake_failures = static_cast<uint32_t>(v[8]);
    return c;
  }
  // Slot pi's counters start again from 0 (a new peer in it).
  void ResetPeerCounts(uint32_t pi) {
    peer_counts_[pi] = PeerCountSlot{};
    carries_.erase(pi);
  }
  // Peers with a count that wrapped its slot's field (tests).
  size_t carried_peers() const { return carries_.size(); }

  // Initial PSNs: from the kernel's CSPRNG (RandomRegionKey's source), so
  // that PSNs seen do not predict the next session's (an off-path attacker
  // must guess 32 bits); from the seeded PRNG when a test set random_seed.
  uint64_t Random() { return config.random_seed ? SplitMix64(&rng_state_) : RandomRegionKey(); }

  // Timers: one per peer in a wheel (timer_wheel.h), at the earliest of the
  // peer's deadlines; the engine runs a peer's timers when its fires. Every
  // deadline a stage sets is armed here, with the peer it is of.
  //
  // Reliability keeps three of a peer's deadlines exactly (the delayed ACK,
  // the tail-loss probe and the RTO: RxStream::ack_deadline and TxStream's
  // deadlines, 0 when none) and arms them with ArmExactTimer; every other
  // deadline (RNR retry, pacing, HELLO retry, liveness, silence) is armed
  // with ArmTimer, which also lowers the peer's floor: no deadline of those
  // is before it. So when a flight starts, Reliability can move the timer
  // later (MoveTimer), off a probe deadline an ACK made moot, to the
  // earliest of its exact deadlines and the floor, and the moot deadline
  // costs no fire (PROTOCOL.md, "Fourth pass").
  void ArmTimer(uint32_t pi, uint64_t when) {
    if (when < timer_floor_[pi]) timer_floor_[pi] = when;
    ArmExactTimer(pi, when);
  }
  void ArmExactTimer(uint32_t pi, uint64_t when) {
    const uint64_t at = timers_.ArmAtMost(pi, when);
    next_timer_ns = at < next_timer_ns ? at : next_timer_ns;
  }
  // The peer's timer at the earlier of `when` and its floor, later as well
  // as earlier than it is armed. REQUIRES: `when` is at or before each of
  // the peer's exact deadlines (none of them may be lost).
  void MoveTimer(uint32_t pi, uint64_t when) {
    if (timer_floor_[pi] < when) when = timer_floor_[pi];
    const uint64_t was = timers_.armed(pi) ? timers_.at_ns(pi) : UINT64_MAX;
    const uint64_t at = timers_.Move(pi, when);
    if (at <= next_timer_ns) {
      next_timer_ns = at;
    } else if (was == next_timer_ns) {
      // It was the earliest, and moved later: a pass need not look before
      // the new earliest (this timer's, when it is the only one armed).
      next_timer_ns = timers_.armed_count() == 1 ? at : timers_.next_ns();
    }
  }
  // The engine runs the peer's timers (RunPeerTimers): what is armed from
  // now on, and the deadlines it finds ahead (SetTimerFloor), make the floor.
  void ClearTimerFloor(uint32_t pi) { timer_floor_[pi] = UINT64_MAX; }
  void SetTimerFloor(uint32_t pi, uint64_t floor) {
    if (floor < timer_floor_[pi]) timer_floor_[pi] = floor;
  }
  void CancelTimer(uint32_t pi) {
    timers_.Cancel(pi);
    timer_floor_[pi] = UINT64_MAX;
  }
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
  // What slot pi's count i carried out of its field (rare: once per 2^32
  // packets or 2^16 rare events of one peer); kept until the slot's next peer.
  void Carry(uint32_t pi, size_t i, uint64_t amount) { carries_[pi][i] += amount; }

  uint64_t rng_state_;
  std::unique_ptr<PeerCountSlot[]> peer_counts_;
  std::unordered_map<uint32_t, std::array<uint64_t, kPeerCounts>> carries_;
  TimerWheel timers_;
  std::unique_ptr<uint64_t[]> timer_floor_;  // per peer: ArmTimer's deadlines are not before it
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
