// An in-process fake ConnectX for one raw-packet QP, following the hardware
// layout byte for byte: it reads the send doorbell record, walks WQEs
// (checking opcode, index, DS, lkey and bounds), puts frames on a Wire to
// another FakeNic, consumes RQ entries up to the receive doorbell record and
// writes CQEs with the owner bit of their pass, op_own last with a release
// store. It detects CQ overrun from the CQ doorbell record as the device
// does, and can inject error CQEs and compressed-format CQEs. Checksum
// offload as the device's: cs_flags fill the IPv4 and UDP checksums on
// transmit; received IPv4/UDP frames with intact checksums get L3_OK/L4_OK.
//
// Memory contract (the real device's, expressed as C++ atomics): doorbell
// records are loaded with acquire (pairing with StoreRecord's release), and
// op_own is stored with release (pairing with CompletionQueue::Poll's
// acquire). Run it synchronously (Step from the driver's thread, or from its
// doorbell) or on a thread of its own (Start).
#ifndef BYPASS_DRIVER_MLX5_FAKE_NIC_H_
#define BYPASS_DRIVER_MLX5_FAKE_NIC_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "driver/mlx5/doorbell.h"
#include "driver/mlx5/prm.h"
#include "driver/mlx5/ring.h"

namespace bypass::driver::mlx5 {

// A full-duplex cable between port 0 and port 1: frames in flight, in order.
class Wire {
 public:
  void Send(int from_port, std::vector<uint8_t> frame);
  // The oldest frame in flight to `port`, if any.
  bool Receive(int port, std::vector<uint8_t>* frame);
  // Frames in flight to `port`.
  size_t InFlight(int port);

 private:
  std::mutex mu_;
  std::deque<std::vector<uint8_t>> to_[2];
};

// Counters of a fake NIC (read them when it is stopped or from its thread).
struct FakeNicCounters {
  uint64_t tx_frames = 0;
  uint64_t rx_frames = 0;
  uint64_t rx_out_of_buffer = 0;  // frames that found no posted RQ entry
  uint64_t cq_overruns = 0;       // CQEs with no room per the CQ doorbell record
  uint64_t error_cqes = 0;
  uint64_t uar_writes = 0;
};

// One fake device with one QP.
class FakeNic {
 public:
  struct Options {
    uint32_t sq_wqes = 256;
    uint32_t rq_wqes = 256;
    uint32_t rq_stride = kRqEntryBytes;
    uint32_t qpn = 0x100;
    bool step_on_doorbell = true;  // the UAR write runs Step (synchronous mode)
  };

  FakeNic(Wire* wire, int port, Options opts);
  FakeNic(const FakeNic&) = delete;
  FakeNic& operator=(const FakeNic&) = delete;
  ~FakeNic();

  // The rings as mlx5dv_init_obj would describe them; CQEs pre-filled 0xf0.
  const RingMemory& memory() const { return mem_; }
  // The doorbell writer of this device's UAR.
  DoorbellWriter* writer() { return &uar_; }
  // Memory the device may read and write: addresses are virtual (IOVA = VA).
  void RegisterMemory(const void* base, uint64_t len, uint32_t lkey);

  // Processes what the doorbell records show and what is on the wire.
  void Step();
  // Runs Step on a thread of its own until Stop (or destruction).
  void Start();
  void Stop();

  // The QP went RESET -> RTS: indices back to 0 and records zeroed, as
  // rdma-core's modify to RESET does; the CQs keep their indices.
  // REQUIRES: stopped, or called from the thread that calls Step.
  void ResetQp();
  bool in_error() const { return error_.load(std::memory_order_acquire); }
  bool cq_in_error() const { return cq_error_.load(std::memory_order_acquire); }

  // Injection: the next send WQE completes with REQ_ERR and `syndrome`; the
  // next CQE written has format bits `format` (1: inline scatter, 3:
  // compressed).
  void InjectSendError(uint8_t syndrome) { inject_syndrome_.store(syndrome); }
  void InjectCqeFormat(uint8_t format) { inject_format_.store(format); }

  FakeNicCounters counters() const;

  struct FreeRing {
    void operator()(uint8_t* p) const;
  };
  using RingPtr = std::unique_ptr<uint8_t[], FreeRing>;
  // The last 8 bytes written to the UAR.
  uint64_t last_uar() const { return last_uar_.load(std::memory_order_relaxed); }

 private:
  // The UAR page: stores records, latches the 8-byte doorbell.
  class Uar final : public DoorbellWriter {
   public:
    explicit Uar(FakeNic* nic) : nic_(nic) {}
    void WriteRecord(uint32_t* record, uint32_t value) override;
    void RingSend(const SqMemory& sq, uint16_t pi, uint32_t wqebbs) override;

   private:
    FakeNic* nic_;
  };
  struct Cq {
    CqMemory mem;
    uint32_t pi = 0;
  };
  struct Key {
    uintptr_t base;
    uint64_t len;
    uint32_t lkey;
  };

  bool Translate(uint64_t addr, uint32_t lkey, uint64_t len, uint8_t** out) const;
  // Writes one CQE; false on overrun (the CQ is then in error).
  bool WriteCqe(Cq& cq, CqeOpcode op, uint16_t wqe_counter, uint32_t byte_cnt,
                uint8_t syndrome, uint8_t hds_ip_ext = 0);
  void StepSend();
  void StepReceive();
  void SendError(uint16_t wqe_counter, uint8_t syndrome);

  Wire* wire_;
  int port_;
  Options opts_;
  Uar uar_{this};
  RingPtr sq_buf_, rq_buf_, scq_buf_, rcq_buf_;
  alignas(64) uint32_t qp_dbrec_[2] = {};
  alignas(64) uint32_t scq_dbrec_ = 0;
  alignas(64) uint32_t rcq_dbrec_ = 0;
  RingMemory mem_;
  Cq scq_, rcq_;
  uint16_t sq_ci_ = 0;  // next WQEBB the device reads
  uint32_t rq_ci_ = 0;  // next RQ entry the device fills
  std::vector<Key> keys_;
  std::atomic<bool> error_{false};
  std::atomic<bool> cq_error_{false};
  std::atomic<int> inject_syndrome_{-1};
  std::atomic<int> inject_format_{0};
  std::atomic<uint64_t> last_uar_{0};
  mutable std::mutex mu_;  // held by Step, ResetQp, RegisterMemory, counters
  FakeNicCounters counters_;
  std::atomic<uint64_t> uar_writes_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace bypass::driver::mlx5

#endif  // BYPASS_DRIVER_MLX5_FAKE_NIC_H_
