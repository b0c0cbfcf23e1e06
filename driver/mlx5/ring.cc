#include "driver/mlx5/ring.h"

#include <endian.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace bypass::driver::mlx5 {
namespace {

bool PowerOfTwo(uint32_t v) { return v != 0 && (v & (v - 1)) == 0; }

}  // namespace

absl::Status ValidateRingMemory(const RingMemory& m) {
  if (m.sq.buf == nullptr || !PowerOfTwo(m.sq.wqe_cnt) || m.sq.stride != kWqeBb ||
      m.sq.wqe_cnt > 0x8000) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mlx5: send queue of ", m.sq.wqe_cnt, " WQEs with stride ", m.sq.stride,
        ": need a power of two up to 32768 with 64-byte WQEBBs"));
  }
  if (m.rq.buf == nullptr || !PowerOfTwo(m.rq.wqe_cnt) || m.rq.wqe_cnt > 0x8000 ||
      !PowerOfTwo(m.rq.stride) || m.rq.stride < kRqEntryBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mlx5: receive queue of ", m.rq.wqe_cnt, " entries with stride ", m.rq.stride,
        ": need powers of two up to 32768 and a stride of at least 16"));
  }
  for (const CqMemory* cq : {&m.send_cq, &m.recv_cq}) {
    const uint32_t need = cq == &m.send_cq ? m.sq.wqe_cnt : m.rq.wqe_cnt;
    if (cq->buf == nullptr || cq->dbrec == nullptr || !PowerOfTwo(cq->cqe_cnt) ||
        cq->cqe_size != kCqeBytes || cq->cqe_cnt < need || cq->cqe_cnt > (1u << 22)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mlx5: ", cq == &m.send_cq ? "send" : "receive", " CQ of ", cq->cqe_cnt, " CQEs of ",
          cq->cqe_size, " bytes: need 64-byte CQEs (unset MLX5_CQE_SIZE) and a power of two of "
          "at least ", need));
    }
  }
  if (m.qp_dbrec == nullptr) return absl::InvalidArgumentError("mlx5: no QP doorbell record");
  return absl::OkStatus();
}

std::string SyndromeName(uint8_t syndrome) {
  switch (static_cast<CqeSyndrome>(syndrome)) {
    case CqeSyndrome::kLocalLengthErr: return "local length error";
    case CqeSyndrome::kLocalQpOpErr: return "local QP operation error";
    case CqeSyndrome::kLocalProtErr: return "local protection error (bad lkey or address)";
    case CqeSyndrome::kWrFlushErr: return "flushed (the QP is in error)";
    case CqeSyndrome::kMwBindErr: return "memory window bind error";
    case CqeSyndrome::kBadRespErr: return "bad response";
    case CqeSyndrome::kLocalAccessErr: return "local access error";
    case CqeSyndrome::kRemoteInvalReqErr: return "remote invalid request";
    case CqeSyndrome::kRemoteAccessErr: return "remote access error";
    case CqeSyndrome::kRemoteOpErr: return "remote operation error";
    case CqeSyndrome::kTransportRetryExcErr: return "transport retry count exceeded";
    case CqeSyndrome::kRnrRetryExcErr: return "RNR retry count exceeded";
    case CqeSyndrome::kRemoteAbortedErr: return "remote aborted";
  }
  return absl::StrFormat("unknown syndrome 0x%02x", syndrome);
}

std::string DescribeError(const Completion& c) {
  const char* what = c.opcode == CqeOpcode::kReqErr    ? "send completion error"
                     : c.opcode == CqeOpcode::kRespErr ? "receive completion error"
                                                       : "completion error";
  return absl::StrFormat("%s: %s (syndrome 0x%02x, vendor syndrome 0x%02x), wqe %u, qpn 0x%x",
                         what, SyndromeName(c.syndrome), c.syndrome, c.vendor_syndrome,
                         c.wqe_counter, c.qpn);
}

PollResult CompletionQueue::Poll(Completion* out) {
  const uint8_t* cqe = mem_.buf + static_cast<size_t>(ci_ & (mem_.cqe_cnt - 1)) * kCqeBytes;
  // Pairs with the device's (fake NIC's) release store of op_own, written
  // after the rest of the CQE; on x86 this acquire is the lfence's job.
  const uint8_t op_own = std::atomic_ref<uint8_t>(*const_cast<uint8_t*>(cqe + CqeOffset::kOpOwn))
                             .load(std::memory_order_acquire);
  const uint8_t opcode = op_own >> 4;
  if (opcode == static_cast<uint8_t>(CqeOpcode::kInvalid) ||
      (op_own & kCqeOwnerMask) != ((ci_ & mem_.cqe_cnt) ? 1 : 0)) {
    return PollResult::kEmpty;
  }
  ++ci_;  // unsigned wrap-around at 2^32 keeps the owner parity (2^32 % (2 * cqe_cnt) == 0)
  out->opcode = static_cast<CqeOpcode>(opcode);
  out->format = (op_own >> 2) & 3;
  out->wqe_counter = Be16At(cqe + CqeOffset::kWqeCounter);
  out->qpn = Be32At(cqe + CqeOffset::kSopDropQpn) & 0xffffff;
  if (out->format != 0) return PollResult::kBadFormat;
  switch (out->opcode) {
    case CqeOpcode::kReq:
    case CqeOpcode::kRespSend:
      out->byte_cnt = Be32At(cqe + CqeOffset::kByteCnt);
      out->hds_ip_ext = cqe[CqeOffset::kHdsIpExt];
      out->syndrome = out->vendor_syndrome = 0;
      return PollResult::kOk;
    case CqeOpcode::kReqErr:
    case CqeOpcode::kRespErr:
      out->byte_cnt = 0;
      out->hds_ip_ext = 0;
      out->syndrome = cqe[CqeOffset::kSyndrome];
      out->vendor_syndrome = cqe[CqeOffset::kVendorErrSynd];
      return PollResult::kError;
    case CqeOpcode::kInvalid:
      break;
  }
  // Opcodes a raw-packet QP never produces (RDMA, atomics, responder
  // variants): reported as an error with no syndrome.
  out->syndrome = out->vendor_syndrome = 0;
  return PollResult::kError;
}

void CompletionQueue::Rearm() {
  for (uint32_t i = 0; i < mem_.cqe_cnt; ++i) {
    std::atomic_ref<uint8_t>(mem_.buf[static_cast<size_t>(i) * kCqeBytes + CqeOffset::kOpOwn])
        .store(0xf0, std::memory_order_relaxed);
  }
  UpdateDbrec();  // release: the invalid op_owns are visible first
}

SendQueue::SendQueue(const SqMemory& mem, uint32_t* dbrec, uint32_t qpn, DoorbellWriter* db,
                     SendOptions opts, uint16_t start_pi)
    : mem_(mem),
      dbrec_(dbrec),
      qpn_(qpn),
      db_(db),
      opts_(opts),
      pi_(start_pi),
      tail_(start_pi),
      cookie_(new uint64_t[mem.wqe_cnt]()),
      bbs_(new uint8_t[mem.wqe_cnt]()) {
  if (opts_.signal_every == 0) opts_.signal_every = 1;
}

void SendQueue::CopyToRing(uint32_t byte_offset, const uint8_t* src, uint32_t n) {
  const uint32_t ring_bytes = mem_.wqe_cnt * kWqeBb;
  byte_offset &= ring_bytes - 1;
  const uint32_t first = n < ring_bytes - byte_offset ? n : ring_bytes - byte_offset;
  std::memcpy(mem_.buf + byte_offset, src, first);
  if (first < n) std::memcpy(mem_.buf, src + first, n - first);  // wraps at the ring end
}

void SendQueue::Post(const SendRequest& req, bool last_in_burst) {
  const bool inline_data = req.len <= opts_.max_inline;
  const uint32_t ds = SendWqeDs(req.len, inline_data);
  const uint32_t bbs = DsToWqeBbs(ds);
  const uint32_t slot = pi_ & (mem_.wqe_cnt - 1);
  uint8_t* wqe = mem_.buf + static_cast<size_t>(slot) * kWqeBb;
  const bool signal = last_in_burst || unsignalled_ + 1 >= opts_.signal_every;

  // Control segment, as mlx5dv_set_ctrl_seg(pi, MLX5_OPCODE_SEND, 0, qpn,
  // fm_ce_se, ds, 0, 0) writes it.
  CtrlSeg ctrl{};
  ctrl.opmod_idx_opcode = htobe32((static_cast<uint32_t>(pi_) << 8) | kOpcodeSend);
  ctrl.qpn_ds = htobe32((qpn_ << 8) | ds);
  ctrl.fm_ce_se = signal ? kWqeCtrlCqUpdate : 0;
  std::memcpy(wqe, &ctrl, sizeof(ctrl));

  // Ethernet segment with the first 18 bytes of the frame inline.
  EthSeg eth{};
  eth.cs_flags = req.cs_flags;
  eth.inline_hdr_sz = htobe16(kEthL2InlineHeaderSize);
  std::memcpy(eth.inline_hdr_start, req.frame, kEthL2InlineHeaderSize);
  std::memcpy(wqe + sizeof(CtrlSeg), &eth, sizeof(eth));

  const uint32_t rest = req.len - kEthL2InlineHeaderSize;
  const uint32_t data_at = static_cast<uint32_t>(slot * kWqeBb + sizeof(CtrlSeg) + sizeof(EthSeg));
  if (rest != 0 && inline_data) {
    const uint32_t hdr = htobe32(rest | kInlineSeg);
    CopyToRing(data_at, reinterpret_cast<const uint8_t*>(&hdr), 4);
    CopyToRing(data_at + 4, req.frame + kEthL2InlineHeaderSize, rest);
  } else if (rest != 0) {
    DataSeg d;
    d.byte_count = htobe32(rest);
    d.lkey = htobe32(req.lkey);
    d.addr = htobe64(req.addr + kEthL2InlineHeaderSize);
    std::memcpy(wqe + sizeof(CtrlSeg) + sizeof(EthSeg), &d, sizeof(d));
  }

  cookie_[slot] = req.cookie;
  bbs_[slot] = static_cast<uint8_t>(bbs);
  last_wqe_ = pi_;
  last_bbs_ = bbs;
  pi_ = static_cast<uint16_t>(pi_ + bbs);  // 16-bit wrap-around
  unsignalled_ = signal ? 0 : unsignalled_ + 1;
  ++outstanding_;
}

void SendQueue::Ring() {
  if (last_bbs_ == 0) return;
  db_->WriteRecord(dbrec_, pi_);  // be32(pi & 0xffff): pi_ is 16 bits
  db_->RingSend(mem_, last_wqe_, last_bbs_);
  last_bbs_ = 0;
}

RecvQueue::RecvQueue(const RqMemory& mem, uint32_t* dbrec, DoorbellWriter* db)
    : mem_(mem), dbrec_(dbrec), db_(db), cookie_(new uint64_t[mem.wqe_cnt]()) {}

void RecvQueue::Post(uint64_t addr, uint32_t lkey, uint32_t len, uint64_t cookie) {
  const uint32_t slot = head_ & (mem_.wqe_cnt - 1);
  uint8_t* entry = mem_.buf + static_cast<size_t>(slot) * mem_.stride;
  DataSeg d;
  d.byte_count = htobe32(len);
  d.lkey = htobe32(lkey);
  d.addr = htobe64(addr);
  std::memcpy(entry, &d, sizeof(d));
  for (uint32_t off = kRqEntryBytes; off < mem_.stride; off += kRqEntryBytes) {
    DataSeg end{};
    end.lkey = htobe32(kInvalidLkey);
    std::memcpy(entry + off, &end, sizeof(end));
  }
  cookie_[slot] = cookie;
  ++head_;
}

bool RecvQueue::Complete(uint16_t wqe_counter, uint64_t* cookie) {
  if (head_ == tail_ || wqe_counter != static_cast<uint16_t>(tail_)) return false;
  *cookie = cookie_[tail_ & (mem_.wqe_cnt - 1)];
  ++tail_;
  return true;
}

}  // namespace bypass::driver::mlx5
