// The ConnectX rings owned by bypass: the send queue (WQE build, selective
// signalling, doorbell), the receive queue (data segments, doorbell record)
// and completion queues (owner-bit polling, 24-bit consumer index, error
// CQEs). Memory and doorbells come through the seam (RingMemory,
// DoorbellWriter), so the same code drives a ConnectX or a fake NIC.
//
// Indices are free-running and masked by the power-of-two ring sizes; the
// send producer index is 16 bits and relies on uint16_t wrap-around, the CQ
// consumer index on uint32_t wrap-around (its low 24 bits go to the device).
#ifndef BYPASS_DRIVER_MLX5_RING_H_
#define BYPASS_DRIVER_MLX5_RING_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "driver/mlx5/doorbell.h"
#include "driver/mlx5/prm.h"

namespace bypass::driver::mlx5 {

// Where a receive queue's entries are: rq.buf, rq.wqe_cnt (power of two),
// rq.stride (16 per scatter entry; a power of two).
struct RqMemory {
  uint8_t* buf = nullptr;
  uint32_t wqe_cnt = 0;
  uint32_t stride = 0;
};

// Where a CQ's entries are: cq.buf, cq.cqe_cnt (power of two) of cqe_size
// bytes, and its doorbell record (cq.dbrec[0], the consumer index).
struct CqMemory {
  uint8_t* buf = nullptr;
  uint32_t cqe_cnt = 0;
  uint32_t cqe_size = 0;
  uint32_t* dbrec = nullptr;
};

// One raw-packet QP's memory, as mlx5dv_init_obj describes it (or a fake
// NIC lays it out): SQ, RQ, a CQ for each, and the QP's doorbell record
// pair (qp_dbrec[kRcvDbr], qp_dbrec[kSndDbr]).
struct RingMemory {
  SqMemory sq;
  RqMemory rq;
  CqMemory send_cq;
  CqMemory recv_cq;
  uint32_t* qp_dbrec = nullptr;
  uint32_t qpn = 0;
};

// Checks sizes and strides against what this code supports: powers of two,
// 64-byte WQEBBs and CQEs, RQ stride a multiple of 16, a CQ per queue at
// least as large as its queue (so a CQ whose consumer index is kept current
// cannot overrun).
absl::Status ValidateRingMemory(const RingMemory& mem);

// One polled CQE, decoded.
struct Completion {
  CqeOpcode opcode = CqeOpcode::kInvalid;
  uint16_t wqe_counter = 0;
  uint32_t byte_cnt = 0;
  uint8_t hds_ip_ext = 0;       // kCqeL3Ok, kCqeL4Ok
  uint8_t syndrome = 0;         // error CQEs
  uint8_t vendor_syndrome = 0;  // error CQEs
  uint32_t qpn = 0;             // low 24 bits of sop_drop_qpn / s_wqe_opcode_qpn
  uint8_t format = 0;           // (op_own >> 2) & 3; only 0 is accepted
};

enum class PollResult : uint8_t {
  kEmpty,      // nothing new (opcode invalid or owner bit of a past pass)
  kOk,         // a REQ or RESP_SEND CQE, consumed
  kError,      // a REQ_ERR or RESP_ERR CQE, consumed; see DescribeError
  kBadFormat,  // a compressed or inline-scatter CQE (format != 0), consumed
};

// "send completion error: local length error (syndrome 0x01, vendor 0x00),
// wqe 7, qpn 0x12": one line for an error CQE.
std::string DescribeError(const Completion& c);
// The syndrome's name ("local protection error", ...), or "syndrome 0xNN".
std::string SyndromeName(uint8_t syndrome);

// A completion queue of 64-byte CQEs. Single consumer.
class CompletionQueue {
 public:
  // `start_ci` is where the consumer index starts (0 for a new CQ).
  CompletionQueue(const CqMemory& mem, DoorbellWriter* db, uint32_t start_ci = 0)
      : mem_(mem), db_(db), ci_(start_ci) {}
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;

  // Looks at the CQE at ci: valid iff its opcode is not INVALID and its owner
  // bit equals !!(ci & cqe_cnt); then (acquire) reads its fields into *out
  // and advances ci. The doorbell record is written by UpdateDbrec.
  PollResult Poll(Completion* out);
  // cq.dbrec[0] = be32(ci & 0xffffff); call after a batch of Polls.
  void UpdateDbrec() { db_->WriteRecord(mem_.dbrec, ci_ & 0xffffff); }
  // After the QP went through RESET: rdma-core's modify to RESET cleans the
  // CQ with its own consumer index (which bypass never advances), rewriting
  // CQEs and the doorbell record. Marks every CQE invalid (op_own 0xf0) and
  // publishes ci again. REQUIRES: the CQ was drained and the device writes
  // nothing to it meanwhile.
  void Rearm();

  uint32_t ci() const { return ci_; }
  uint32_t cqe_cnt() const { return mem_.cqe_cnt; }

 private:
  CqMemory mem_;
  DoorbellWriter* db_;
  uint32_t ci_;
};

// How a send queue signals and inlines.
struct SendOptions {
  uint32_t signal_every = 32;  // a CQE at least every this many WQEs
  uint32_t max_inline = 0;     // frames up to this many bytes go inline (0: never)
};

// One frame to send. REQUIRES: len >= kEthL2InlineHeaderSize.
struct SendRequest {
  const uint8_t* frame = nullptr;  // also read for the inline header
  uint32_t len = 0;
  uint64_t addr = 0;  // device address of frame[0]
  uint32_t lkey = 0;
  uint8_t cs_flags = 0;  // kEthWqeL3Csum | kEthWqeL4Csum
  uint64_t cookie = 0;   // handed back when the WQE retires
};

// A raw-Ethernet send queue. Single producer.
class SendQueue {
 public:
  // `dbrec` is the QP's send doorbell record (qp_dbrec + kSndDbr);
  // `start_pi` is where the 16-bit producer index starts (0 for a new QP).
  SendQueue(const SqMemory& mem, uint32_t* dbrec, uint32_t qpn, DoorbellWriter* db,
            SendOptions opts, uint16_t start_pi = 0);
  SendQueue(const SendQueue&) = delete;
  SendQueue& operator=(const SendQueue&) = delete;

  uint32_t WqeBbsFor(uint32_t len) const {
    return DsToWqeBbs(SendWqeDs(len, len <= opts_.max_inline));
  }
  uint32_t free_wqebbs() const { return mem_.wqe_cnt - static_cast<uint16_t>(pi_ - tail_); }
  // WQEs posted and not yet retired.
  uint32_t outstanding() const { return outstanding_; }

  // Builds the WQE at pi and advances pi by its WQEBBs; it asks for a CQE
  // if `last_in_burst` or signal_every WQEs have gone unsignalled. Nothing
  // reaches the device before Ring(). REQUIRES: free_wqebbs() >=
  // WqeBbsFor(req.len), req.len >= kEthL2InlineHeaderSize.
  void Post(const SendRequest& req, bool last_in_burst);
  // Doorbell record = pi, then the UAR write of the last posted WQE.
  // No-op when nothing was posted since the last Ring.
  void Ring();

  // A REQ CQE for the WQE at `wqe_counter` retires it and every WQE before
  // it: retire(cookie) for each, oldest first. False (and nothing retired)
  // when wqe_counter is not the start of an outstanding WQE.
  template <typename F>
  bool Retire(uint16_t wqe_counter, F&& retire);
  // Hands back every outstanding WQE's cookie and restarts at pi 0 (after
  // the QP went through RESET).
  template <typename F>
  void Reset(F&& retire);

  uint16_t pi() const { return pi_; }
  uint16_t tail() const { return tail_; }

 private:
  void CopyToRing(uint32_t byte_offset, const uint8_t* src, uint32_t n);

  SqMemory mem_;
  uint32_t* dbrec_;
  uint32_t qpn_;
  DoorbellWriter* db_;
  SendOptions opts_;
  uint16_t pi_;    // next WQEBB to write (wraps at 2^16)
  uint16_t tail_;  // oldest unretired WQEBB
  uint16_t last_wqe_ = 0;  // start of the last posted WQE
  uint32_t last_bbs_ = 0;  // its size; 0: nothing to ring
  uint32_t unsignalled_ = 0;
  uint32_t outstanding_ = 0;
  std::unique_ptr<uint64_t[]> cookie_;  // by start WQEBB
  std::unique_ptr<uint8_t[]> bbs_;      // WQEBBs of the WQE starting there
};

// A receive queue of single-entry scatter lists. Single producer.
class RecvQueue {
 public:
  RecvQueue(const RqMemory& mem, uint32_t* dbrec, DoorbellWriter* db);
  RecvQueue(const RecvQueue&) = delete;
  RecvQueue& operator=(const RecvQueue&) = delete;

  uint32_t free_slots() const { return mem_.wqe_cnt - (head_ - tail_); }
  uint32_t posted() const { return head_ - tail_; }
  // Writes the entry at head: {be32 len, be32 lkey, be64 addr}, the rest of
  // the stride terminated by MLX5_INVALID_LKEY. REQUIRES: free_slots() > 0.
  void Post(uint64_t addr, uint32_t lkey, uint32_t len, uint64_t cookie);
  // Doorbell record = head & 0xffff.
  void Ring() { db_->WriteRecord(dbrec_, head_ & 0xffff); }
  // A RESP CQE consumes the oldest entry; false when wqe_counter is not it.
  bool Complete(uint16_t wqe_counter, uint64_t* cookie);
  // Hands back every posted entry's cookie and restarts at 0.
  template <typename F>
  void Reset(F&& drop);

 private:
  RqMemory mem_;
  uint32_t* dbrec_;
  DoorbellWriter* db_;
  uint32_t head_ = 0;
  uint32_t tail_ = 0;
  std::unique_ptr<uint64_t[]> cookie_;
};

template <typename F>
bool SendQueue::Retire(uint16_t wqe_counter, F&& retire) {
  const uint16_t span = static_cast<uint16_t>(pi_ - tail_);
  if (static_cast<uint16_t>(wqe_counter - tail_) >= span) return false;
  // wqe_counter must be a WQE start: walk to it without retiring first.
  uint16_t at = tail_;
  uint32_t n = 1;
  while (at != wqe_counter) {
    at = static_cast<uint16_t>(at + bbs_[at & (mem_.wqe_cnt - 1)]);
    if (static_cast<uint16_t>(at - tail_) > static_cast<uint16_t>(wqe_counter - tail_)) return false;
    ++n;
  }
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t slot = tail_ & (mem_.wqe_cnt - 1);
    retire(cookie_[slot]);
    tail_ = static_cast<uint16_t>(tail_ + bbs_[slot]);
  }
  outstanding_ -= n;
  return true;
}

template <typename F>
void SendQueue::Reset(F&& retire) {
  while (outstanding_ > 0) {
    const uint32_t slot = tail_ & (mem_.wqe_cnt - 1);
    retire(cookie_[slot]);
    tail_ = static_cast<uint16_t>(tail_ + bbs_[slot]);
    --outstanding_;
  }
  pi_ = tail_ = 0;
  last_bbs_ = 0;
  unsignalled_ = 0;
}

template <typename F>
void RecvQueue::Reset(F&& drop) {
  for (; tail_ != head_; ++tail_) drop(cookie_[tail_ & (mem_.wqe_cnt - 1)]);
  head_ = tail_ = 0;
}

}  // namespace bypass::driver::mlx5

#endif  // BYPASS_DRIVER_MLX5_RING_H_
