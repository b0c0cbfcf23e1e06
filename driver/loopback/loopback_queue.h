// The queue pair of a loopback port, and what senders read of a receiving
// port.
#ifndef BYPASS_DRIVER_LOOPBACK_LOOPBACK_QUEUE_H_
#define BYPASS_DRIVER_LOOPBACK_LOOPBACK_QUEUE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "driver/device.h"
#include "driver/loopback/spsc_ring.h"
#include "driver/packet.h"
#include "driver/packet_pool.h"

namespace bypass::driver::loopback {

// Buffers are laid out as driver/packet_pool.h says (kDataOffset).

// What senders on other threads read of a receiving port. Fixed when the port
// joins its segment, except link_up and steer, which are atomics read with
// relaxed order: a change takes effect for frames sent after it is seen.
struct PortShared {
  MacAddress mac;
  uint32_t ipv4 = 0;
  uint32_t max_frame = 0;
  uint16_t num_queues = 1;
  uint16_t ring_size = 0;
  std::atomic<bool> link_up{true};
  // same_host=1: received frames say kRxSameHost and ReadPeerMemory reads
  // (process_vm_readv), as the intra-host device between processes; in one
  // process it reads our own memory, which is exactly that code path.
  bool same_host = false;
  // UDP destination port -> queue; 65536 entries when num_queues > 1, else null.
  std::unique_ptr<std::atomic<uint16_t>[]> steer;
};

// Per-queue drop counters beyond QueueStats, plain integers of the owner thread.
struct LoopbackCounters {
  uint64_t tx_unknown_unicast = 0;  // no port on the segment has the destination MAC
  uint64_t tx_link_down = 0;        // sent while this port's link was down
  uint64_t tx_peer_link_down = 0;   // per destination port whose link was down
  uint64_t tx_bad_length = 0;       // under 14 bytes, or over a max frame (per destination)
  uint64_t rx_link_down = 0;        // arrived while this port's link was down
  uint64_t rx_no_buffer = 0;        // RxBurst calls cut short by an empty pool
};

// Returns the UDP destination port of an unfragmented Ethernet/IPv4/UDP
// frame addressed to `ipv4` whose headers and lengths LocateUdpFrame
// (driver/net_headers.h) accepts, or nothing. Treats every byte as
// untrusted; checks no checksum (the receiver's ParseUdpFrame does).
std::optional<uint16_t> PeekUdpDstPort(const uint8_t* frame, uint32_t len, uint32_t ipv4);

// One queue pair of a loopback port: TX copies each frame into the SPSC ring
// towards each destination queue and frees the sender's buffer; RX copies
// frames out of the incoming rings into buffers of this queue's own pool.
class LoopbackQueue final : public QueuePair {
 public:
  // REQUIRES: `self` outlives the queue.
  static absl::StatusOr<std::unique_ptr<LoopbackQueue>> Create(uint16_t id, PortShared* self,
                                                               uint32_t pool_buffers,
                                                               int numa_node);
  LoopbackQueue(const LoopbackQueue&) = delete;
  LoopbackQueue& operator=(const LoopbackQueue&) = delete;

  uint16_t RxBurst(absl::Span<Packet*> out) override;
  uint16_t TxBurst(absl::Span<Packet* const> pkts) override;
  bool AllocBulk(absl::Span<Packet*> out) override { return pool_->AllocBulk(out, &stats_); }
  void FreeBulk(absl::Span<Packet* const> pkts) override { PacketPool::FreeToOwners(pkts); }
  uint32_t PoolAvailable() const override { return pool_->available(); }
  uint32_t PoolCapacity() const override { return pool_->capacity(); }
  QueueStats stats() const override { return stats_; }
  void AppendCounters(NamedCounters* out) const override;
  uint16_t id() const override { return id_; }
  // With same_host=1: process_vm_readv; else -ENOSYS.
  int64_t ReadPeerMemory(uint32_t pid, uint64_t addr, void* dst, size_t len) override;
  int64_t ReadPeerMemoryV(uint32_t pid, absl::Span<const PeerRange> ranges) override;
  // With same_host=1 every peer is "on this host", as frames from it say.
  bool ReachesSameHost(Ipv4Address, uint16_t) override { return self_->same_host; }
  // The segment carries every multicast frame to every other port: nothing
  // to program (the layer above filters by group).
  absl::Status JoinGroup(Ipv4Address, uint16_t) override { return absl::OkStatus(); }

  const LoopbackCounters& counters() const { return counters_; }

  // Wiring, by the segment registry under its lock, while this queue's
  // thread may be inside a burst call (wiring_mu_ keeps them apart).
  // `rings[rq]` carries frames from this queue to queue rq of `dst`.
  void AddRoute(const PortShared* dst, std::vector<SpscRing*> rings);
  void RemoveRoute(const PortShared* dst);
  void AddIncoming(const PortShared* src, std::unique_ptr<SpscRing> ring);
  void RemoveIncoming(const PortShared* src);

 private:
  static constexpr uint32_t kChunk = 64;
  // A destination port and the rings to each of its queues.
  struct Route {
    const PortShared* dst;
    std::vector<SpscRing*> rings;
  };
  // A ring this queue consumes, and the port that fills it.
  struct Incoming {
    const PortShared* src;
    std::unique_ptr<SpscRing> ring;
  };

  LoopbackQueue(uint16_t id, PortShared* self, std::unique_ptr<PacketPool> pool);

  SpscRing* RingFor(const Route& r, const Packet& p) const;
  void DrainWhileDown();

  const uint16_t id_;
  PortShared* const self_;
  std::unique_ptr<PacketPool> pool_;
  std::vector<Route> routes_;
  std::vector<Incoming> incoming_;
  std::vector<SpscRing*> targets_;  // scratch for multicast, sized by AddRoute
  size_t rx_next_ = 0;              // the incoming ring RxBurst starts at
  // Held by every burst call and by the wiring above: a port opened or
  // closed on the segment rewires the queues of its other ports, whose
  // threads may be polling (a libfabric domain's progress thread polls its
  // port while the application opens or closes another domain). Taken by
  // one thread but for a rewiring, so uncontended on the data path.
  std::mutex wiring_mu_;
  QueueStats stats_;
  LoopbackCounters counters_;
};

}  // namespace bypass::driver::loopback

#endif  // BYPASS_DRIVER_LOOPBACK_LOOPBACK_QUEUE_H_
