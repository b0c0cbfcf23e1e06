// A queue pair of the mlx5 backend: one raw-packet QP's rings (ring.h) with
// packets in a hugepage buffer pool registered under one lkey.
#ifndef BYPASS_DRIVER_MLX5_QUEUE_PAIR_H_
#define BYPASS_DRIVER_MLX5_QUEUE_PAIR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "driver/device.h"
#include "driver/mlx5/doorbell.h"
#include "driver/mlx5/ring.h"
#include "hugepage/pool.h"

namespace bypass::driver::mlx5 {

// The device side of a queue pair, on cold paths: what a ConnectX does with
// ibv_modify_qp, what a fake NIC does to itself.
class QpControl {
 public:
  virtual ~QpControl() = default;
  // Takes the QP (in error) through RESET, INIT, RTR, RTS; afterwards its
  // send and receive indices start again at 0.
  virtual absl::Status Recover() = 0;
};

// Where a queue pair's pieces come from.
struct QueuePairParts {
  uint16_t id = 0;
  RingMemory rings;
  DoorbellWriter* writer = nullptr;  // outlives the queue pair
  QpControl* control = nullptr;      // outlives the queue pair
  std::unique_ptr<hugepage::BufferPool> pool;  // buffers of kDataOffset + max_frame
  uint32_t lkey = 0;                 // the pool's registration
  uint32_t max_frame = 1514;
  SendOptions send;
};

// One QP behind the driver contract. Packets live in the pool's buffers:
// the Packet at the start, the frame from kDataOffset. TX buffers return to
// the pool when their WQE retires (selective signalling: one CQE every
// SendOptions::signal_every WQEs and at the end of each burst); RX buffers
// are posted to the RQ and handed out by RxBurst. An error CQE (or a CQE
// that does not match the rings) is logged in last_error(), every
// outstanding buffer returns to the pool, the QP is recovered through
// QpControl and the RQ is posted again. Single-threaded.
class Mlx5QueuePair final : public QueuePair {
 public:
  static constexpr uint32_t kDataOffset = 64;

  // Validates the rings and posts the RQ full. REQUIRES: the QP is in RTR
  // or RTS.
  static absl::StatusOr<std::unique_ptr<Mlx5QueuePair>> Create(QueuePairParts parts);
  Mlx5QueuePair(const Mlx5QueuePair&) = delete;
  Mlx5QueuePair& operator=(const Mlx5QueuePair&) = delete;

  uint16_t RxBurst(absl::Span<Packet*> out) override;
  uint16_t TxBurst(absl::Span<Packet* const> pkts) override;
  bool AllocBulk(absl::Span<Packet*> out) override;
  void FreeBulk(absl::Span<Packet* const> pkts) override;
  uint32_t PoolAvailable() const override;
  uint32_t PoolCapacity() const override { return pool_->capacity(); }
  QueueStats stats() const override { return stats_; }
  uint16_t id() const override { return id_; }

  // Called at the start of each RxBurst (a synchronous fake NIC steps here).
  void set_rx_kick(std::function<void()> kick) { kick_ = std::move(kick); }
  // Error CQEs and ring mismatches seen, the last as one line.
  uint64_t errors() const { return errors_; }
  const std::string& last_error() const { return last_error_; }
  // False once a recovery failed: bursts then do nothing.
  bool healthy() const { return healthy_; }

 private:
  explicit Mlx5QueuePair(QueuePairParts parts);

  Packet* InitPacket(void* buf);
  void PutPacket(uint64_t cookie) { pool_->Put(reinterpret_cast<void*>(cookie)); }
  void FillRq();
  void ReclaimTx();
  void OnBadCompletion(const char* queue, PollResult r, const Completion& c);

  uint16_t id_;
  RingMemory rings_;
  QpControl* control_;
  std::unique_ptr<hugepage::BufferPool> pool_;
  uint32_t lkey_;
  uint32_t max_frame_;
  uint32_t capacity_;
  SendQueue sq_;
  RecvQueue rq_;
  CompletionQueue scq_;
  CompletionQueue rcq_;
  std::function<void()> kick_;
  QueueStats stats_;
  uint64_t errors_ = 0;
  std::string last_error_;
  bool healthy_ = true;
};

}  // namespace bypass::driver::mlx5

#endif  // BYPASS_DRIVER_MLX5_QUEUE_PAIR_H_
