// The queue pair of an shm device: TX copies each frame into a lane of the
// destination's area (found through the registry, cached per queue), RX
// copies frames out of this device's own lanes into buffers of its own pool.
#ifndef BYPASS_DRIVER_SHM_SHM_QUEUE_H_
#define BYPASS_DRIVER_SHM_SHM_QUEUE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "driver/device.h"
#include "driver/packet.h"
#include "driver/packet_pool.h"
#include "driver/shm/area.h"
#include "driver/shm/registry.h"

namespace bypass::driver::shm {

// Buffers are laid out as driver/packet_pool.h says (kDataOffset).

// Drops beyond QueueStats, plain integers of the owner thread.
struct ShmCounters {
  uint64_t tx_unknown_dest = 0;  // no live binding of the frame's ip:port
  uint64_t tx_not_udp = 0;       // not Ethernet/IPv4 (no options)/UDP, or a bad length
  uint64_t tx_no_lane = 0;       // the destination had no free lane for us
  uint64_t tx_no_memory = 0;     // no lane: /dev/shm could not hold one (fallocate failed)
  uint64_t tx_lane_stuck = 0;    // the live destination stopped reading its full lane
  uint64_t tx_too_long = 0;      // longer than the destination's slots
  uint64_t tx_dead_peer = 0;     // the destination died with its lane full
  uint64_t tx_bad_peer = 0;      // the destination's lane indices are corrupt
  uint64_t rx_bad_lane = 0;      // a lane whose indices are corrupt (its frames dropped)
  uint64_t rx_bad_length = 0;    // a slot length out of range
  uint64_t rx_no_buffer = 0;     // RxBurst calls cut short by an empty pool
};

class ShmQueue final : public QueuePair {
 public:
  // REQUIRES: `area` and `registry` outlive the queue.
  static absl::StatusOr<std::unique_ptr<ShmQueue>> Create(const OwnArea* area,
                                                          Registry* registry, Ipv4Address ipv4,
                                                          uint32_t max_frame,
                                                          uint32_t pool_buffers, int numa_node);
  ShmQueue(const ShmQueue&) = delete;
  ShmQueue& operator=(const ShmQueue&) = delete;
  // Releases the lanes it holds in peers and unbinds its ports.
  ~ShmQueue() override;

  uint16_t RxBurst(absl::Span<Packet*> out) override;
  uint16_t TxBurst(absl::Span<Packet* const> pkts) override;
  bool AllocBulk(absl::Span<Packet*> out) override { return pool_->AllocBulk(out, &stats_); }
  void FreeBulk(absl::Span<Packet* const> pkts) override { PacketPool::FreeToOwners(pkts); }
  uint32_t PoolAvailable() const override { return pool_->available(); }
  uint32_t PoolCapacity() const override { return pool_->capacity(); }
  QueueStats stats() const override { return stats_; }
  void AppendCounters(NamedCounters* out) const override;
  uint16_t id() const override { return 0; }
  absl::Status BindUdpPort(uint16_t port) override;
  void UnbindUdpPort(uint16_t port) override;
  // Received frames carry kRxSameHost: their senders are processes of this
  // user on this host and of this pid namespace (they refuse an area of
  // another), whose memory this reads (process_vm_readv). -EPERM when our
  // pid namespace is unknown (no /proc): a pid could name anyone.
  int64_t ReadPeerMemory(uint32_t pid, uint64_t addr, void* dst, size_t len) override;
  int64_t ReadPeerMemoryV(uint32_t pid, absl::Span<const PeerRange> ranges) override;
  // Every peer of the intra-host device is on this host.
  bool ReachesSameHost(Ipv4Address, uint16_t) override { return true; }
  // The area ip:port is bound to: kAlive while its owner holds its lock,
  // kDead once the lock is free (the owner died; a process that closed its
  // endpoint removed the link); kUnknown with no binding (never bound on
  // this host, or unbound: a composite device asks its remote device then).
  // A readlink, an open and a flock.
  PeerLiveness PeerAlive(Ipv4Address ip, uint16_t udp_port) override;

  // For a composite device that sends some frames here and others to a NIC.
  // Whether a frame to ip:port would be delivered (answered from the cache:
  // no system call while the registry's generation is unchanged). False
  // while we hold no lane in the destination (none free, or /dev/shm full),
  // so the composite sends over its remote device meanwhile; the claim is
  // retried every kLaneRetry calls and frames, and when the generation moves.
  bool Reaches(Ipv4Address ip, uint16_t udp_port);
  // As TxBurst, but copies without taking ownership: the caller frees the
  // packets counted in the result (delivered or dropped), keeps the rest.
  uint16_t Send(absl::Span<Packet* const> pkts) { return SendFrames(pkts, nullptr); }
  // As Send, for a composite device, which sends what this device cannot
  // reach another way: stops at the first frame Reaches would refuse (not
  // an IPv4/UDP frame this device carries, no live binding of its
  // destination, or no lane in it), sets *unrouted and leaves that frame
  // and the rest to the caller. One route lookup per frame, not two
  // (Reaches, then Send's own).
  uint16_t SendRouted(absl::Span<Packet* const> pkts, bool* unrouted) {
    *unrouted = false;
    return SendFrames(pkts, unrouted);
  }
  // True for packets this queue's RxBurst or AllocBulk handed out.
  bool Owns(const Packet* p) const { return pool_->Owns(p); }

  const ShmCounters& counters() const { return counters_; }

 private:
  static constexpr uint32_t kChunk = 64;
  static constexpr uint32_t kCacheEntries = 1024;  // power of two
  // Full-lane retries with an unmoving head, and how long it has not moved,
  // before the receiver's liveness is tested (a system call): a dead
  // receiver is reclaimed, and a live one that stopped reading has its
  // frames dropped until its head moves, so neither holds our TX to
  // everyone else (the engine retransmits). The time, not the count alone:
  // a busy-polling sender makes 256 tries in tens of microseconds, less
  // than a receiver that is only descheduled on a busy host waits for a
  // CPU (a scheduler's time slice is milliseconds), and dropping its
  // window there made every such wait a loss to repair.
  static constexpr uint32_t kStuckProbe = 256;
  static constexpr uint64_t kStuckNs = 10'000'000;
  // Frames dropped (or Reaches calls answered false) for want of a lane
  // before the claim is tried again (a lane's owner may have closed, or
  // /dev/shm been freed, without the generation moving).
  static constexpr uint32_t kLaneRetry = 1024;

  // A peer area we have mapped, and our lane in it.
  struct Peer {
    std::string name;
    Mapping map;
    FileId file;  // reopened to reserve a lane
    AreaLayout layout;
    LaneHeader* lane = nullptr;  // nullptr: no lane was free (or reservable)
    uint32_t* lens = nullptr;
    uint8_t* frames = nullptr;
    uint32_t staged = 0;        // our tail, private
    uint32_t published = 0;
    uint32_t cached_head = 0;
    uint32_t stuck_head = 0;
    uint32_t stuck_count = 0;
    uint64_t full_since_ns = 0;  // the first of the stuck_count tries
    uint32_t no_lane_count = 0;  // drops for want of a lane; a claim is retried now and then
    bool no_memory = false;      // the last claim found no lane it could reserve
    bool stuck = false;          // alive but not reading: drop until its head moves
    bool dead = false;
    bool touched = false;       // staged frames this burst
  };
  struct CacheEntry {
    uint64_t key = 0;  // 0: empty; else 1 << 48 | ip << 16 | port
    Peer* peer = nullptr;  // nullptr: a negative entry
  };

  ShmQueue(const OwnArea* area, Registry* registry, Ipv4Address ipv4, uint32_t max_frame,
           std::unique_ptr<PacketPool> pool);

  // Once per burst: drops the cache (and unmaps gone peers) when the
  // registry's generation has moved.
  void Revalidate();
  Peer* Resolve(uint32_t ip, uint16_t port);
  Peer* Miss(uint32_t ip, uint16_t port);
  Peer* MapPeer(const std::string& name);
  void ClaimLane(Peer& p);
  // Whether p has a lane, retrying the claim now and then while it has none.
  bool HasLane(Peer& p);
  bool CanStage(Peer& p, bool* corrupt);
  // Send, and SendRouted when unrouted is not null.
  uint16_t SendFrames(absl::Span<Packet* const> pkts, bool* unrouted);
  void ReleaseLane(Peer& p);
  void PublishTouched();

  const OwnArea* const area_;
  Registry* const registry_;
  const Ipv4Address ipv4_;
  const uint32_t max_frame_;
  std::unique_ptr<PacketPool> pool_;
  QueueStats stats_;
  ShmCounters counters_;
  std::vector<uint16_t> bound_;  // ports bound, few

  // TX.
  std::vector<std::unique_ptr<Peer>> peers_;
  std::vector<Peer*> touched_;  // reserved to peers_.size()
  std::vector<CacheEntry> cache_;
  uint32_t cache_used_ = 0;
  uint64_t cache_gen_ = ~uint64_t{0};

  // RX: our own lanes; heads are private (only we write them).
  std::vector<uint32_t> rx_head_;
  uint32_t rx_next_ = 0;
};

}  // namespace bypass::driver::shm

#endif  // BYPASS_DRIVER_SHM_SHM_QUEUE_H_
