#include "driver/mlx5/queue_pair.h"

#include <algorithm>
#include <cstdio>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace bypass::driver::mlx5 {
namespace {

constexpr size_t kChunk = 64;

uint8_t CsFlags(uint16_t ol_flags) {
  uint8_t cs = 0;
  if (ol_flags & kTxIpChecksum) cs |= kEthWqeL3Csum;
  if (ol_flags & kTxUdpChecksum) cs |= kEthWqeL4Csum;
  return cs;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Mlx5QueuePair>> Mlx5QueuePair::Create(QueuePairParts parts) {
  if (absl::Status s = ValidateRingMemory(parts.rings); !s.ok()) return s;
  if (parts.pool == nullptr || parts.writer == nullptr || parts.control == nullptr) {
    return absl::InvalidArgumentError("mlx5 queue pair: missing pool, writer or control");
  }
  if (parts.pool->buffer_size().value() < kDataOffset + parts.max_frame) {
    return absl::InvalidArgumentError("mlx5 queue pair: pool buffers smaller than a frame");
  }
  std::unique_ptr<Mlx5QueuePair> qp(new Mlx5QueuePair(std::move(parts)));
  qp->FillRq();
  return qp;
}

Mlx5QueuePair::Mlx5QueuePair(QueuePairParts parts)
    : id_(parts.id),
      rings_(parts.rings),
      control_(parts.control),
      pool_(std::move(parts.pool)),
      lkey_(parts.lkey),
      max_frame_(parts.max_frame),
      capacity_(static_cast<uint32_t>(pool_->buffer_size().value()) - kDataOffset),
      sq_(rings_.sq, &rings_.qp_dbrec[kSndDbr], rings_.qpn, parts.writer, parts.send),
      rq_(rings_.rq, &rings_.qp_dbrec[kRcvDbr], parts.writer),
      scq_(rings_.send_cq, parts.writer),
      rcq_(rings_.recv_cq, parts.writer) {}

Packet* Mlx5QueuePair::InitPacket(void* buf) {
  Packet* p = new (buf) Packet;
  p->data = static_cast<uint8_t*>(buf) + kDataOffset;
  p->len = 0;
  p->capacity = capacity_;
  p->backend = reinterpret_cast<uintptr_t>(buf);
  p->rx_queue = id_;
  p->ol_flags = 0;
  p->reserved = 0;
  return p;
}

void Mlx5QueuePair::FillRq() {
  bool posted = false;
  while (rq_.free_slots() > 0) {
    void* buf = pool_->Get();
    if (buf == nullptr) break;
    Packet* p = InitPacket(buf);
    rq_.Post(reinterpret_cast<uint64_t>(p->data), lkey_, capacity_, reinterpret_cast<uint64_t>(buf));
    posted = true;
  }
  if (posted) rq_.Ring();
}

void Mlx5QueuePair::OnBadCompletion(const char* queue, PollResult r, const Completion& c) {
  ++errors_;
  if (r == PollResult::kBadFormat) {
    last_error_ = absl::StrFormat(
        "mlx5 queue %u: %s CQE in format %u (%s), which bypass does not read; CQE compression "
        "and scatter-to-CQE must stay off",
        id_, queue, c.format, c.format == 3 ? "compressed" : "inline scatter");
  } else if (r == PollResult::kError) {
    last_error_ = absl::StrCat("mlx5 queue ", id_, ": ", DescribeError(c));
  } else {
    last_error_ = absl::StrFormat(
        "mlx5 queue %u: %s CQE for wqe %u matches no outstanding WQE (lost or duplicated CQEs)",
        id_, queue, c.wqe_counter);
  }
  // Consume what else is there (flush CQEs), return every outstanding buffer,
  // reset the QP and post the RQ again.
  Completion ignored;
  while (scq_.Poll(&ignored) != PollResult::kEmpty) {
  }
  while (rcq_.Poll(&ignored) != PollResult::kEmpty) {
  }
  scq_.UpdateDbrec();
  rcq_.UpdateDbrec();
  sq_.Reset([this](uint64_t cookie) { PutPacket(cookie); });
  rq_.Reset([this](uint64_t cookie) { PutPacket(cookie); });
  if (absl::Status s = control_->Recover(); !s.ok()) {
    healthy_ = false;
    absl::StrAppend(&last_error_, "; recovery failed: ", s.message());
    std::fprintf(stderr, "bypass: %s\n", last_error_.c_str());
    return;
  }
  scq_.Rearm();
  rcq_.Rearm();
  FillRq();
}

void Mlx5QueuePair::ReclaimTx() {
  Completion c;
  bool consumed = false;
  for (;;) {
    const PollResult r = scq_.Poll(&c);
    if (r == PollResult::kEmpty) break;
    consumed = true;
    if (r != PollResult::kOk || c.opcode != CqeOpcode::kReq ||
        !sq_.Retire(c.wqe_counter, [this](uint64_t cookie) { PutPacket(cookie); })) {
      OnBadCompletion("send", r == PollResult::kOk ? PollResult::kEmpty : r, c);
      return;
    }
  }
  // Keep the CQ doorbell record current before more WQEs can produce CQEs.
  if (consumed) scq_.UpdateDbrec();
}

uint16_t Mlx5QueuePair::RxBurst(absl::Span<Packet*> out) {
  if (kick_) kick_();
  if (!healthy_) return 0;
  uint16_t n = 0;
  bool consumed = false;
  Completion c;
  while (n < out.size()) {
    const PollResult r = rcq_.Poll(&c);
    if (r == PollResult::kEmpty) break;
    consumed = true;
    uint64_t cookie;
    if (r != PollResult::kOk || c.opcode != CqeOpcode::kRespSend ||
        !rq_.Complete(c.wqe_counter, &cookie)) {
      OnBadCompletion("receive", r == PollResult::kOk ? PollResult::kEmpty : r, c);
      consumed = false;
      break;
    }
    Packet* p = reinterpret_cast<Packet*>(cookie);
    if (c.byte_cnt > max_frame_) {
      ++stats_.rx_dropped;
      PutPacket(cookie);
      continue;
    }
    p->len = c.byte_cnt;
    p->ol_flags = static_cast<uint16_t>(((c.hds_ip_ext & kCqeL3Ok) ? kRxIpChecksumGood : 0) |
                                        ((c.hds_ip_ext & kCqeL4Ok) ? kRxL4ChecksumGood : 0));
    stats_.rx_bytes += p->len;
    out[n++] = p;
  }
  // The CQ record first: the entries posted next can produce CQEs at once.
  if (consumed) rcq_.UpdateDbrec();
  stats_.rx_packets += n;
  if (healthy_) FillRq();
  return n;
}

uint16_t Mlx5QueuePair::TxBurst(absl::Span<Packet* const> pkts) {
  if (!healthy_) {
    stats_.tx_ring_full += pkts.size();
    return 0;
  }
  ReclaimTx();
  // How many fit, so that the last one can ask for a CQE.
  size_t n = 0;
  uint32_t free = sq_.free_wqebbs();
  while (n < pkts.size()) {
    const uint32_t bbs = sq_.WqeBbsFor(pkts[n]->len);
    if (bbs > free) break;
    free -= bbs;
    ++n;
  }
  // REQUIRES len in [18, max frame]: shorter is no Ethernet frame, longer
  // the device would refuse; such packets are taken and freed unsent.
  auto sendable = [this](const Packet* p) {
    return p->len >= kEthL2InlineHeaderSize && p->len <= max_frame_;
  };
  size_t last = n;  // the last sendable one asks for the burst's CQE
  for (size_t i = n; i > 0; --i) {
    if (sendable(pkts[i - 1])) {
      last = i - 1;
      break;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    Packet* p = pkts[i];
    if (!sendable(p)) {
      PutPacket(p->backend);
      continue;
    }
    SendRequest req;
    req.frame = p->data;
    req.len = p->len;
    req.addr = reinterpret_cast<uint64_t>(p->data);
    req.lkey = lkey_;
    req.cs_flags = CsFlags(p->ol_flags);
    req.cookie = p->backend;
    stats_.tx_bytes += p->len;
    sq_.Post(req, /*last_in_burst=*/i == last);
  }
  sq_.Ring();
  stats_.tx_packets += n;
  stats_.tx_ring_full += pkts.size() - n;
  return static_cast<uint16_t>(n);
}

bool Mlx5QueuePair::AllocBulk(absl::Span<Packet*> out) {
  if (out.size() > pool_->available()) {
    ++stats_.alloc_failures;
    return false;
  }
  void* bufs[kChunk];
  for (size_t done = 0; done < out.size();) {
    const size_t n = std::min(kChunk, out.size() - done);
    pool_->GetBulk(absl::MakeSpan(bufs, n));  // cannot fail: checked above
    for (size_t i = 0; i < n; ++i) out[done + i] = InitPacket(bufs[i]);
    done += n;
  }
  return true;
}

void Mlx5QueuePair::FreeBulk(absl::Span<Packet* const> pkts) {
  void* bufs[kChunk];
  for (size_t done = 0; done < pkts.size();) {
    const size_t n = std::min(kChunk, pkts.size() - done);
    for (size_t i = 0; i < n; ++i) bufs[i] = reinterpret_cast<void*>(pkts[done + i]->backend);
    pool_->PutBulk(absl::MakeConstSpan(bufs, n));  // aborts on a foreign buffer
    done += n;
  }
}

uint32_t Mlx5QueuePair::PoolAvailable() const {
  // Completed TX buffers count as available (the conformance contract):
  // reclaim them here. The queue is single-threaded, so this is safe.
  const_cast<Mlx5QueuePair*>(this)->ReclaimTx();
  return pool_->available();
}

}  // namespace bypass::driver::mlx5
