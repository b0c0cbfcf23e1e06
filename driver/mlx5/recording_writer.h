// A DoorbellWriter for tests: performs the record stores (so a fake NIC sees
// them) and records every doorbell step with what the rings held at the time.
#ifndef BYPASS_DRIVER_MLX5_RECORDING_WRITER_H_
#define BYPASS_DRIVER_MLX5_RECORDING_WRITER_H_

#include <endian.h>

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "driver/mlx5/doorbell.h"
#include "driver/mlx5/prm.h"

namespace bypass::driver::mlx5 {

// Records doorbell steps in order.
class RecordingDoorbellWriter final : public DoorbellWriter {
 public:
  struct Event {
    enum Kind { kRecord, kUar } kind = kRecord;
    const uint32_t* record = nullptr;  // kRecord: which one
    uint32_t value = 0;                // kRecord: host order
    uint64_t uar = 0;                  // kUar: the 8 bytes the UAR store carries
    uint16_t pi = 0;                   // kUar: the WQE rung
    uint32_t wqebbs = 0;               // kUar
    uint32_t record_at_uar = 0;        // kUar: the send record (host order) when rung
    std::vector<uint8_t> sq_at_record;  // kRecord of the send record: the SQ then
  };

  // `send_record` is the QP's send doorbell record, read back at each UAR write.
  // With `sq`, each send-record write also snapshots the SQ as it was just
  // before the store.
  explicit RecordingDoorbellWriter(const uint32_t* send_record = nullptr, SqMemory sq = {})
      : send_record_(send_record), sq_(sq) {}

  void WriteRecord(uint32_t* record, uint32_t value) override {
    Event e;
    e.kind = Event::kRecord;
    e.record = record;
    e.value = value;
    if (record == send_record_ && sq_.buf != nullptr) {
      e.sq_at_record.assign(sq_.buf, sq_.buf + sq_.wqe_cnt * kWqeBb);
    }
    StoreRecord(record, htobe32(value));
    events_.push_back(std::move(e));
  }
  void RingSend(const SqMemory& sq, uint16_t pi, uint32_t wqebbs) override {
    Event e;
    e.kind = Event::kUar;
    std::memcpy(&e.uar, sq.buf + (pi & (sq.wqe_cnt - 1)) * kWqeBb, 8);
    e.pi = pi;
    e.wqebbs = wqebbs;
    if (send_record_ != nullptr) e.record_at_uar = be32toh(LoadRecord(send_record_));
    events_.push_back(e);
  }

  std::vector<Event>& events() { return events_; }

 private:
  const uint32_t* send_record_;
  SqMemory sq_;
  std::vector<Event> events_;
};

}  // namespace bypass::driver::mlx5

#endif  // BYPASS_DRIVER_MLX5_RECORDING_WRITER_H_
