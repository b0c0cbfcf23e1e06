#include "hugepage/pool.h"

#include <bit>
#include <cinttypes>

#include "absl/strings/str_cat.h"
#include "hugepage/check.h"

namespace bypass::hugepage {

absl::StatusOr<std::unique_ptr<BufferPool>> BufferPool::Create(const PoolOptions& opts) {
  if (opts.count == 0 || opts.buffer_size.value() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BufferPool::Create: ", opts.count, " buffers of ", opts.buffer_size.ToString(),
        " is empty: give a non-zero count and buffer_size"));
  }
  if (!std::has_single_bit(opts.align.value())) {
    return absl::InvalidArgumentError(
        absl::StrCat("BufferPool::Create: align ", opts.align.value(), " is not a power of two"));
  }
  const Bytes stride = opts.buffer_size.RoundUpTo(opts.align);
  if (stride.value() > (uint64_t{1} << 40) / opts.count) {
    return absl::InvalidArgumentError(absl::StrCat("BufferPool::Create: ", opts.count,
                                                   " buffers of ", stride.ToString(),
                                                   " exceed 1 TiB: make a smaller pool"));
  }
  RegionOptions region_opts = opts.region;
  region_opts.size = stride * opts.count;
  absl::StatusOr<std::unique_ptr<Region>> region = Region::Create(region_opts);
  if (!region.ok()) {
    return absl::Status(region.status().code(),
                        absl::StrCat("BufferPool::Create: ", region.status().message()));
  }
  if (reinterpret_cast<uintptr_t>((*region)->data()) % opts.align.value() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("BufferPool::Create: align ", opts.align.ToString(),
                     " exceeds the alignment of a ", std::string(BackingName((*region)->backing())),
                     " region: use a smaller align or require ", "a hugetlb backing"));
  }
  auto pool = std::unique_ptr<BufferPool>(new BufferPool());
  pool->region_ = *std::move(region);
  pool->base_ = static_cast<char*>(pool->region_->data());
  pool->stride_ = stride;
  if (std::has_single_bit(stride.value())) pool->stride_shift_ = std::countr_zero(stride.value());
  pool->capacity_ = opts.count;
  pool->free_count_ = opts.count;
  pool->free_ = std::make_unique<uint32_t[]>(opts.count);
  pool->is_free_ = std::make_unique<uint8_t[]>(opts.count);
  for (uint32_t i = 0; i < opts.count; ++i) {
    pool->free_[i] = opts.count - 1 - i;  // buffer 0 on top: handed out first
    pool->is_free_[i] = 1;
  }
  return pool;
}

bool BufferPool::GetBulk(absl::Span<void*> out) {
  if (out.size() > free_count_) return false;
  GetBurst(out);
  return true;
}

uint32_t BufferPool::GetBurst(absl::Span<void*> out) {
  const uint32_t n = out.size() < free_count_ ? static_cast<uint32_t>(out.size()) : free_count_;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t index = free_[--free_count_];
    is_free_[index] = 0;
    out[i] = base_ + uint64_t{index} * stride_.value();
  }
  return n;
}

void BufferPool::PutBulk(absl::Span<void* const> bufs) {
  for (void* buf : bufs) {
    // Unsigned wrap-around makes a pointer below base_ a huge offset, so one
    // comparison rejects both sides of the pool.
    const uintptr_t offset = reinterpret_cast<uintptr_t>(buf) - reinterpret_cast<uintptr_t>(base_);
    BYPASS_HUGEPAGE_CHECK(offset < uint64_t{capacity_} * stride_.value(),
                          "BufferPool::Put: %p is not from this pool [%p, %p): foreign pointer",
                          buf, static_cast<void*>(base_),
                          static_cast<void*>(base_ + uint64_t{capacity_} * stride_.value()));
    const uint64_t index = stride_shift_ >= 0 ? offset >> stride_shift_ : offset / stride_.value();
    const uint64_t into = offset - index * stride_.value();
    BYPASS_HUGEPAGE_CHECK(into == 0,
                          "BufferPool::Put: %p is %" PRIu64 " bytes into buffer %" PRIu64
                          " (stride %" PRIu64 "): not a buffer start",
                          buf, into, index, stride_.value());
    BYPASS_HUGEPAGE_CHECK(!is_free_[index],
                          "BufferPool::Put: buffer %" PRIu64 " (%p) is already free: double put",
                          index, buf);
    is_free_[index] = 1;
    free_[free_count_++] = static_cast<uint32_t>(index);
  }
}

void* BufferPool::Get() {
  void* buf = nullptr;
  GetBurst(absl::Span<void*>(&buf, 1));
  return buf;
}

void BufferPool::Put(void* b) { PutBulk(absl::Span<void* const>(&b, 1)); }

bool BufferPool::Owns(const void* buf) const {
  const uintptr_t offset = reinterpret_cast<uintptr_t>(buf) - reinterpret_cast<uintptr_t>(base_);
  return offset < uint64_t{capacity_} * stride_.value() && offset % stride_.value() == 0;
}

uint32_t BufferPool::IndexOf(const void* buf) const {
  const uintptr_t offset = reinterpret_cast<uintptr_t>(buf) - reinterpret_cast<uintptr_t>(base_);
  return static_cast<uint32_t>(offset / stride_.value());
}

}  // namespace bypass::hugepage
