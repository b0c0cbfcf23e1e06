// Fixed-size buffer pools on one region: everything is allocated at creation,
// nothing after.
#ifndef BYPASS_HUGEPAGE_POOL_H_
#define BYPASS_HUGEPAGE_POOL_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "hugepage/region.h"
#include "hugepage/units.h"

namespace bypass::hugepage {

// How to make a BufferPool.
struct PoolOptions {
  Bytes buffer_size;       // rounded up to a multiple of `align`
  uint32_t count = 0;      // buffers in the pool
  Bytes align{64};         // power of two; cache-line by default
  RegionOptions region;    // region.size is computed; other fields apply
};

// A LIFO free list of equal buffers on one Region. Single-threaded: one owner
// thread, like the queue pair that uses it.
class BufferPool {
 public:
  static absl::StatusOr<std::unique_ptr<BufferPool>> Create(const PoolOptions& opts);

  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // Bulk: all of out.size() buffers or none; false when fewer are free.
  bool GetBulk(absl::Span<void*> out);
  // Burst: as many as are free, up to out.size(); returns how many.
  uint32_t GetBurst(absl::Span<void*> out);
  // REQUIRES: each buffer came from this pool and is not already free.
  // Violations are detected and abort with a message (never corrupt).
  void PutBulk(absl::Span<void* const> bufs);

  void* Get();        // nullptr when exhausted
  void Put(void* b);  // as PutBulk

  uint32_t available() const { return free_count_; }
  uint32_t capacity() const { return capacity_; }
  Bytes buffer_size() const { return stride_; }
  const Region& region() const { return *region_; }
  uint64_t Iova(const void* buf) const { return region_->Iova(buf); }
  // Index of a buffer in [0, capacity()); REQUIRES: Owns(buf).
  uint32_t IndexOf(const void* buf) const;
  bool Owns(const void* buf) const;

 private:
  BufferPool() = default;

  std::unique_ptr<Region> region_;
  char* base_ = nullptr;
  Bytes stride_;
  int stride_shift_ = -1;  // log2(stride) when a power of two: Put avoids a divide
  uint32_t capacity_ = 0;
  uint32_t free_count_ = 0;
  std::unique_ptr<uint32_t[]> free_;     // stack of free buffer indices
  std::unique_ptr<uint8_t[]> is_free_;   // double-put detection
};

}  // namespace bypass::hugepage

#endif  // BYPASS_HUGEPAGE_POOL_H_
