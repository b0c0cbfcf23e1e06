// The doorbell seam: how the ring code tells the device (or a fake NIC) that
// WQEs and RQ entries are ready and that CQEs were consumed.
#ifndef BYPASS_DRIVER_MLX5_DOORBELL_H_
#define BYPASS_DRIVER_MLX5_DOORBELL_H_

#include <atomic>
#include <cstdint>

namespace bypass::driver::mlx5 {

// Where a send queue's WQEs are: sq.buf, sq.wqe_cnt (power of two), 64-byte
// WQEBBs (sq.stride).
struct SqMemory {
  uint8_t* buf = nullptr;
  uint32_t wqe_cnt = 0;
  uint32_t stride = 0;
};

// Stores a doorbell record (a big-endian 32-bit word the device reads) with
// release order: every store before it (WQEs, RQ entries, consumed CQEs) is
// visible first. The device side pairs it with an acquire load.
inline void StoreRecord(uint32_t* record, uint32_t value_be) {
  std::atomic_ref<uint32_t>(*record).store(value_be, std::memory_order_release);
}
inline uint32_t LoadRecord(const uint32_t* record) {
  return std::atomic_ref<uint32_t>(*const_cast<uint32_t*>(record))
      .load(std::memory_order_acquire);
}

// Writes doorbell records and rings the send doorbell. The real one stores
// to the UAR page; a fake NIC's or a test's records or acts on the sequence.
class DoorbellWriter {
 public:
  virtual ~DoorbellWriter() = default;
  // Publishes `value` (host order; stored big-endian) to a doorbell record
  // after every earlier store to the rings (udma_to_device_barrier, then the
  // store).
  virtual void WriteRecord(uint32_t* record, uint32_t value) = 0;
  // Rings the send doorbell for the WQE that starts at WQEBB `pi` of `sq`
  // and spans `wqebbs`: fence, the 8-byte store of its control segment's
  // first 8 bytes (or, with BlueFlame, the whole WQE in 64-byte chunks),
  // fence. REQUIRES: the send doorbell record already holds the new pi.
  virtual void RingSend(const SqMemory& sq, uint16_t pi, uint32_t wqebbs) = 0;
};

// The real writer: stores to the device's UAR (mlx5dv_qp::bf.reg), with
// BlueFlame when bf.size != 0, alternating between the two BlueFlame halves
// as rdma-core does. Owned by one queue pair's thread.
class UarDoorbellWriter final : public DoorbellWriter {
 public:
  UarDoorbellWriter(void* bf_reg, uint32_t bf_size) : reg_(static_cast<uint8_t*>(bf_reg)), bf_size_(bf_size) {}
  UarDoorbellWriter(const UarDoorbellWriter&) = delete;
  UarDoorbellWriter& operator=(const UarDoorbellWriter&) = delete;

  void WriteRecord(uint32_t* record, uint32_t value) override;
  void RingSend(const SqMemory& sq, uint16_t pi, uint32_t wqebbs) override;

  uint32_t bf_offset() const { return bf_offset_; }

 private:
  uint8_t* reg_;
  uint32_t bf_size_;
  uint32_t bf_offset_ = 0;
};

}  // namespace bypass::driver::mlx5

#endif  // BYPASS_DRIVER_MLX5_DOORBELL_H_
