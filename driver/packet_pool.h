// The packet pool of the copying backends (loopback, shm, kernel UDP): a
// hugepage::BufferPool whose buffers each hold a Packet descriptor and the
// frame it describes.
#ifndef BYPASS_DRIVER_PACKET_POOL_H_
#define BYPASS_DRIVER_PACKET_POOL_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "driver/device.h"
#include "driver/packet.h"
#include "hugepage/pool.h"

namespace bypass::driver {

// Buffer layout: the Packet at offset 0 (padded to a cache line), then 64
// bytes of headroom for headers a layer above prepends, then the frame.
inline constexpr uint32_t kPacketArea = 64;
inline constexpr uint32_t kHeadroom = 64;
inline constexpr uint32_t kDataOffset = kPacketArea + kHeadroom;
static_assert(sizeof(Packet) <= kPacketArea);

// Buffers of a queue's pool when the options name none: the contract's
// default (4 * ring_size), but at most 64 MiB of buffers (at mtu=65000
// the default would prefault 267 MB per process).
uint32_t DefaultPoolBuffers(const DeviceOptions& opts, uint32_t max_frame);

// One queue's pool. Its packets name it in Packet::backend, so that
// FreeToOwners returns each to the pool it came from. Owned by one thread,
// as its queue.
class PacketPool {
 public:
  struct Options {
    uint32_t max_frame = 0;   // frame bytes a buffer holds
    uint32_t buffers = 0;
    int numa_node = -1;
    absl::string_view region_name;  // the region's name ("bypass-loopback")
    uint16_t rx_queue = 0;    // Packet::rx_queue of the packets it hands out
  };
  // `what` prefixes an error ("loopback queue 3").
  static absl::StatusOr<std::unique_ptr<PacketPool>> Create(const Options& opts,
                                                            absl::string_view what);
  PacketPool(const PacketPool&) = delete;
  PacketPool& operator=(const PacketPool&) = delete;

  // A fresh Packet in `buf` (a buffer of this pool): empty, no flags.
  Packet* InitPacket(void* buf);
  // All of out.size() packets or none; none counts one stats->alloc_failures.
  bool AllocBulk(absl::Span<Packet*> out, QueueStats* stats);
  // Returns packets to this pool. REQUIRES: each came from it.
  void FreeBulk(absl::Span<Packet* const> pkts);
  // Returns packets to the pools they came from (Packet::backend).
  static void FreeToOwners(absl::Span<Packet* const> pkts);
  // True for packets this pool handed out.
  bool Owns(const Packet* p) const { return pool_->Owns(p); }

  // Raw buffers, for a burst's RX path (InitPacket makes them packets).
  uint32_t GetBurst(absl::Span<void*> bufs) { return pool_->GetBurst(bufs); }
  void PutBulk(absl::Span<void* const> bufs) { pool_->PutBulk(bufs); }

  uint32_t available() const { return pool_->available(); }
  uint32_t capacity() const { return pool_->capacity(); }
  // Frame bytes a buffer holds from Packet::data.
  uint32_t frame_capacity() const { return frame_capacity_; }

 private:
  static constexpr uint32_t kChunk = 64;

  PacketPool(std::unique_ptr<hugepage::BufferPool> pool, uint16_t rx_queue);

  std::unique_ptr<hugepage::BufferPool> pool_;
  const uint32_t frame_capacity_;
  const uint16_t rx_queue_;
};

}  // namespace bypass::driver

#endif  // BYPASS_DRIVER_PACKET_POOL_H_
