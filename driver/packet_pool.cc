#include "driver/packet_pool.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "hugepage/region.h"
#include "hugepage/units.h"

namespace bypass::driver {

absl::StatusOr<std::unique_ptr<PacketPool>> PacketPool::Create(const Options& opts,
                                                               absl::string_view what) {
  hugepage::PoolOptions po;
  po.buffer_size = hugepage::Bytes(kDataOffset + opts.max_frame);
  po.count = opts.buffers;
  po.align = hugepage::Bytes(64);
  // The CPU (or the kernel) copies into these buffers; no DMA: leave the
  // reserved hugetlb pages to DPDK and need no mlock allowance.
  po.region.best = hugepage::Backing::kTransparent;
  po.region.numa_node = opts.numa_node;
  po.region.lock = false;
  po.region.prefault = true;
  po.region.name = std::string(opts.region_name);
  absl::StatusOr<std::unique_ptr<hugepage::BufferPool>> pool = hugepage::BufferPool::Create(po);
  if (!pool.ok()) {
    return absl::Status(pool.status().code(),
                        absl::StrCat(what, ": ", pool.status().message()));
  }
  return std::unique_ptr<PacketPool>(new PacketPool(*std::move(pool), opts.rx_queue));
}

PacketPool::PacketPool(std::unique_ptr<hugepage::BufferPool> pool, uint16_t rx_queue)
    : pool_(std::move(pool)),
      frame_capacity_(static_cast<uint32_t>(pool_->buffer_size().value()) - kDataOffset),
      rx_queue_(rx_queue) {}

Packet* PacketPool::InitPacket(void* buf) {
  Packet* p = new (buf) Packet;
  p->data = static_cast<uint8_t*>(buf) + kDataOffset;
  p->len = 0;
  p->capacity = frame_capacity_;
  p->backend = reinterpret_cast<uintptr_t>(this);  // the pool that owns it
  p->rx_queue = rx_queue_;
  p->ol_flags = 0;
  p->reserved = 0;
  return p;
}

bool PacketPool::AllocBulk(absl::Span<Packet*> out, QueueStats* stats) {
  if (pool_->available() < out.size()) {
    ++stats->alloc_failures;
    return false;
  }
  void* bufs[kChunk];
  for (size_t done = 0; done < out.size();) {
    const size_t n = std::min<size_t>(kChunk, out.size() - done);
    pool_->GetBulk(absl::MakeSpan(bufs, n));  // cannot fail: checked above
    for (size_t i = 0; i < n; ++i) out[done + i] = InitPacket(bufs[i]);
    done += n;
  }
  return true;
}

void PacketPool::FreeBulk(absl::Span<Packet* const> pkts) {
  void* bufs[kChunk];
  while (!pkts.empty()) {
    const size_t n = std::min<size_t>(kChunk, pkts.size());
    for (size_t i = 0; i < n; ++i) bufs[i] = pkts[i];
    pool_->PutBulk(absl::MakeConstSpan(bufs, n));
    pkts.remove_prefix(n);
  }
}

void PacketPool::FreeToOwners(absl::Span<Packet* const> pkts) {
  void* bufs[kChunk];
  size_t n = 0;
  PacketPool* owner = nullptr;
  for (Packet* p : pkts) {
    PacketPool* o = reinterpret_cast<PacketPool*>(p->backend);
    if (n > 0 && (o != owner || n == kChunk)) {
      owner->pool_->PutBulk(absl::MakeConstSpan(bufs, n));
      n = 0;
    }
    owner = o;
    bufs[n++] = p;
  }
  if (n > 0) owner->pool_->PutBulk(absl::MakeConstSpan(bufs, n));
}

uint32_t DefaultPoolBuffers(const DeviceOptions& opts, uint32_t max_frame) {
  if (opts.pool_buffers != 0) return opts.pool_buffers;
  const uint64_t cap = (uint64_t{64} << 20) / (kDataOffset + max_frame);
  return static_cast<uint32_t>(std::min<uint64_t>(4u * opts.ring_size, std::max<uint64_t>(cap, 64)));
}

}  // namespace bypass::driver
