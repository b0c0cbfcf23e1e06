#include "driver/mlx5/doorbell.h"

#include <endian.h>

#include <atomic>
#include <cstdint>
#include <cstring>

#include "driver/mlx5/prm.h"

namespace bypass::driver::mlx5 {
namespace {

// rdma-core's mmio_flush_writes / udma_to_device_barrier for stores to the
// write-combining UAR page: sfence on x86.
inline void WcFence() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_sfence();
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

inline void Store64(uint8_t* dst, const uint8_t* src) {
  uint64_t v;
  std::memcpy(&v, src, sizeof(v));
  // One 64-bit store: the device must see the 8 bytes at once.
  *reinterpret_cast<volatile uint64_t*>(dst) = v;
}

}  // namespace

void UarDoorbellWriter::WriteRecord(uint32_t* record, uint32_t value) {
  // The release store orders the ring stores before it (on x86 a compiler
  // barrier, which is udma_to_device_barrier there).
  StoreRecord(record, htobe32(value));
}

void UarDoorbellWriter::RingSend(const SqMemory& sq, uint16_t pi, uint32_t wqebbs) {
  const uint32_t mask = sq.wqe_cnt - 1;
  uint8_t* dst = reg_ + bf_offset_;
  WcFence();  // the doorbell record reaches memory before the UAR write
  if (bf_size_ != 0 && wqebbs * kWqeBb <= bf_size_) {
    // BlueFlame: the WQE in 64-byte chunks, 8 bytes at a time (never memcpy,
    // whose store widths and order are unspecified), wrapping with the ring.
    for (uint32_t b = 0; b < wqebbs; ++b) {
      const uint8_t* src = sq.buf + ((pi + b) & mask) * kWqeBb;
      for (uint32_t off = 0; off < kWqeBb; off += 8) Store64(dst + b * kWqeBb + off, src + off);
    }
  } else {
    Store64(dst, sq.buf + (pi & mask) * kWqeBb);
  }
  WcFence();  // flush the write-combining buffer before the next doorbell
  bf_offset_ ^= bf_size_;
}

}  // namespace bypass::driver::mlx5
