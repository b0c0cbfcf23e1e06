#include "driver/mlx5/fake_nic.h"

#include <endian.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <optional>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/types/span.h"
#include "driver/net_headers.h"

namespace bypass::driver::mlx5 {

void FakeNic::FreeRing::operator()(uint8_t* p) const { std::free(p); }

namespace {

FakeNic::RingPtr RingBuffer(size_t bytes) {
  // 64-byte aligned, as the device's rings are (bytes is a multiple of 64).
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, bytes));
  std::memset(p, 0, bytes);
  return FakeNic::RingPtr(p);
}

constexpr uint32_t kMaxFrame = 16384;
constexpr size_t kEth = sizeof(EthernetHeader);

// IPv4 header bytes of an Ethernet frame carrying IPv4, or 0.
size_t Ipv4HeaderBytes(const std::vector<uint8_t>& f) {
  if (f.size() < kEth + sizeof(Ipv4Header)) return 0;
  if (f[12] != 0x08 || f[13] != 0x00 || (f[kEth] >> 4) != 4) return 0;
  const size_t ihl = (f[kEth] & 0x0f) * 4u;
  return ihl >= sizeof(Ipv4Header) && f.size() >= kEth + ihl ? ihl : 0;
}

// What the device's checksum offload does on transmit (cs_flags).
void FillChecksums(std::vector<uint8_t>& f, uint8_t cs_flags) {
  const size_t ihl = Ipv4HeaderBytes(f);
  if (ihl == 0) return;
  uint8_t* ip = f.data() + kEth;
  if (cs_flags & kEthWqeL4Csum) {
    if (std::optional<UdpFrameLayout> at = LocateUdpFrame(f)) {
      uint8_t* udp = ip + at->ipv4_header_bytes;
      udp[6] = udp[7] = 0;
      Ipv4Address src{static_cast<uint32_t>(ip[12] << 24 | ip[13] << 16 | ip[14] << 8 | ip[15])};
      Ipv4Address dst{static_cast<uint32_t>(ip[16] << 24 | ip[17] << 16 | ip[18] << 8 | ip[19])};
      const uint16_t sum = UdpChecksum(src, dst, absl::MakeConstSpan(udp, at->udp_bytes));
      udp[6] = static_cast<uint8_t>(sum >> 8);
      udp[7] = static_cast<uint8_t>(sum);
    }
  }
  if (cs_flags & kEthWqeL3Csum) {
    ip[10] = ip[11] = 0;
    const uint16_t sum = InternetChecksum(absl::MakeConstSpan(ip, ihl));
    ip[10] = static_cast<uint8_t>(sum >> 8);
    ip[11] = static_cast<uint8_t>(sum);
  }
}

// What the device reports on receive (mlx5_cqe64::hds_ip_ext).
uint8_t VerifyChecksums(const std::vector<uint8_t>& f) {
  const size_t ihl = Ipv4HeaderBytes(f);
  if (ihl == 0 || InternetChecksum(absl::MakeConstSpan(f.data() + kEth, ihl)) != 0) return 0;
  uint8_t flags = kCqeL3Ok;
  // ParseUdpFrame checks the UDP checksum (or its absence).
  if (ParseUdpFrame(f).has_value()) flags |= kCqeL4Ok;
  return flags;
}

}  // namespace

void Wire::Send(int from_port, std::vector<uint8_t> frame) {
  std::lock_guard<std::mutex> lock(mu_);
  to_[1 - from_port].push_back(std::move(frame));
}

bool Wire::Receive(int port, std::vector<uint8_t>* frame) {
  std::lock_guard<std::mutex> lock(mu_);
  if (to_[port].empty()) return false;
  *frame = std::move(to_[port].front());
  to_[port].pop_front();
  return true;
}

size_t Wire::InFlight(int port) {
  std::lock_guard<std::mutex> lock(mu_);
  return to_[port].size();
}

FakeNic::FakeNic(Wire* wire, int port, Options opts) : wire_(wire), port_(port), opts_(opts) {
  sq_buf_ = RingBuffer(opts.sq_wqes * kWqeBb);
  rq_buf_ = RingBuffer(opts.rq_wqes * opts.rq_stride);
  // Each CQ as large as its queue: the least ValidateRingMemory accepts.
  scq_buf_ = RingBuffer(opts.sq_wqes * kCqeBytes);
  rcq_buf_ = RingBuffer(opts.rq_wqes * kCqeBytes);
  for (uint32_t i = 0; i < opts.sq_wqes; ++i) scq_buf_[i * kCqeBytes + CqeOffset::kOpOwn] = 0xf0;
  for (uint32_t i = 0; i < opts.rq_wqes; ++i) rcq_buf_[i * kCqeBytes + CqeOffset::kOpOwn] = 0xf0;
  mem_.sq = {sq_buf_.get(), opts.sq_wqes, kWqeBb};
  mem_.rq = {rq_buf_.get(), opts.rq_wqes, opts.rq_stride};
  mem_.send_cq = {scq_buf_.get(), opts.sq_wqes, kCqeBytes, &scq_dbrec_};
  mem_.recv_cq = {rcq_buf_.get(), opts.rq_wqes, kCqeBytes, &rcq_dbrec_};
  mem_.qp_dbrec = qp_dbrec_;
  mem_.qpn = opts.qpn;
  scq_.mem = mem_.send_cq;
  rcq_.mem = mem_.recv_cq;
}

FakeNic::~FakeNic() { Stop(); }

void FakeNic::RegisterMemory(const void* base, uint64_t len, uint32_t lkey) {
  std::lock_guard<std::mutex> lock(mu_);
  keys_.push_back(Key{reinterpret_cast<uintptr_t>(base), len, lkey});
}

bool FakeNic::Translate(uint64_t addr, uint32_t lkey, uint64_t len, uint8_t** out) const {
  for (const Key& k : keys_) {
    if (k.lkey != lkey) continue;
    if (addr < k.base || addr + len > k.base + k.len || addr + len < addr) return false;
    *out = reinterpret_cast<uint8_t*>(addr);
    return true;
  }
  return false;
}

void FakeNic::Uar::WriteRecord(uint32_t* record, uint32_t value) {
  StoreRecord(record, htobe32(value));
}

void FakeNic::Uar::RingSend(const SqMemory& sq, uint16_t pi, uint32_t /*wqebbs*/) {
  uint64_t v;
  std::memcpy(&v, sq.buf + (pi & (sq.wqe_cnt - 1)) * kWqeBb, 8);
  nic_->last_uar_.store(v, std::memory_order_relaxed);
  nic_->uar_writes_.fetch_add(1, std::memory_order_relaxed);
  if (nic_->opts_.step_on_doorbell) nic_->Step();
}

bool FakeNic::WriteCqe(Cq& cq, CqeOpcode op, uint16_t wqe_counter, uint32_t byte_cnt,
                       uint8_t syndrome, uint8_t hds_ip_ext) {
  // The device's overrun check: no room past the consumer index the driver
  // last published (24 bits).
  const uint32_t ci = be32toh(LoadRecord(cq.mem.dbrec)) & 0xffffff;
  if (((cq.pi - ci) & 0xffffff) >= cq.mem.cqe_cnt) {
    ++counters_.cq_overruns;
    cq_error_.store(true, std::memory_order_release);
    error_.store(true, std::memory_order_release);
    return false;
  }
  uint8_t* cqe = cq.mem.buf + (cq.pi & (cq.mem.cqe_cnt - 1)) * kCqeBytes;
  std::memset(cqe, 0, kCqeBytes - 1);
  const uint32_t bc = htobe32(byte_cnt);
  std::memcpy(cqe + CqeOffset::kByteCnt, &bc, 4);
  const uint32_t qpn = htobe32(opts_.qpn);
  std::memcpy(cqe + CqeOffset::kSopDropQpn, &qpn, 4);
  const uint16_t wc = htobe16(wqe_counter);
  std::memcpy(cqe + CqeOffset::kWqeCounter, &wc, 2);
  cqe[CqeOffset::kSyndrome] = syndrome;
  cqe[CqeOffset::kHdsIpExt] = hds_ip_ext;
  const int format = inject_format_.exchange(0);
  const uint8_t op_own = static_cast<uint8_t>((static_cast<uint8_t>(op) << 4) | (format << 2) |
                                              ((cq.pi & cq.mem.cqe_cnt) ? 1 : 0));
  // Written last, releasing the fields above to the driver's acquire.
  std::atomic_ref<uint8_t>(cqe[CqeOffset::kOpOwn]).store(op_own, std::memory_order_release);
  ++cq.pi;
  if (op == CqeOpcode::kReqErr || op == CqeOpcode::kRespErr) ++counters_.error_cqes;
  return true;
}

void FakeNic::SendError(uint16_t wqe_counter, uint8_t syndrome) {
  WriteCqe(scq_, CqeOpcode::kReqErr, wqe_counter, 0, syndrome);
  error_.store(true, std::memory_order_release);
}

void FakeNic::Step() {
  std::lock_guard<std::mutex> lock(mu_);
  StepSend();
  StepReceive();
}

void FakeNic::StepSend() {
  const uint32_t mask = opts_.sq_wqes - 1;
  const uint32_t ring_bytes = opts_.sq_wqes * kWqeBb;
  auto read_ring = [&](uint32_t off, uint8_t* dst, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) dst[i] = sq_buf_[(off + i) & (ring_bytes - 1)];
  };
  // Pairs with the driver's release store of the record: WQEs up to pi are
  // complete.
  const uint16_t pi = static_cast<uint16_t>(be32toh(LoadRecord(&qp_dbrec_[kSndDbr])));
  while (sq_ci_ != pi && !error_.load(std::memory_order_relaxed)) {
    const uint32_t start = (sq_ci_ & mask) * kWqeBb;
    const uint8_t* wqe = sq_buf_.get() + start;
    const uint32_t opmod_idx_opcode = Be32At(wqe);
    const uint32_t qpn_ds = Be32At(wqe + 4);
    const uint32_t ds = qpn_ds & 0x3f;
    const uint8_t fm_ce_se = wqe[11];
    if ((opmod_idx_opcode & 0xff) != kOpcodeSend || (opmod_idx_opcode >> 24) != 0 ||
        ((opmod_idx_opcode >> 8) & 0xffff) != sq_ci_ || (qpn_ds >> 8) != opts_.qpn || ds < 3 ||
        ds * kDsBytes > ring_bytes) {
      SendError(sq_ci_, static_cast<uint8_t>(CqeSyndrome::kLocalQpOpErr));
      return;
    }
    const int injected = inject_syndrome_.exchange(-1);
    if (injected >= 0) {
      SendError(sq_ci_, static_cast<uint8_t>(injected));
      return;
    }
    EthSeg eth;
    std::memcpy(&eth, wqe + sizeof(CtrlSeg), sizeof(eth));
    const uint32_t hdr = be16toh(eth.inline_hdr_sz);
    if (hdr > kEthL2InlineHeaderSize) {
      SendError(sq_ci_, static_cast<uint8_t>(CqeSyndrome::kLocalLengthErr));
      return;
    }
    std::vector<uint8_t> frame(eth.inline_hdr_start, eth.inline_hdr_start + hdr);
    uint32_t at = start + 48;
    const uint32_t end = start + ds * kDsBytes;
    bool ok = true;
    while (ok && at < end) {
      uint8_t seg[16];
      read_ring(at, seg, 16);
      const uint32_t bc = Be32At(seg);
      if (bc & kInlineSeg) {
        const uint32_t n = bc & ~kInlineSeg;
        if (at + (n + 4 + kDsBytes - 1) / kDsBytes * kDsBytes != end || n > kMaxFrame) {
          ok = false;
          break;
        }
        const size_t old = frame.size();
        frame.resize(old + n);
        read_ring(at + 4, frame.data() + old, n);
        at = end;
      } else {
        uint8_t* src;
        if (!Translate(Be64At(seg + 8), Be32At(seg + 4), bc, &src)) {
          SendError(sq_ci_, static_cast<uint8_t>(CqeSyndrome::kLocalProtErr));
          return;
        }
        frame.insert(frame.end(), src, src + bc);
        at += kDsBytes;
      }
    }
    if (!ok || frame.size() > kMaxFrame) {
      SendError(sq_ci_, static_cast<uint8_t>(CqeSyndrome::kLocalLengthErr));
      return;
    }
    if (eth.cs_flags != 0) FillChecksums(frame, eth.cs_flags);
    wire_->Send(port_, std::move(frame));
    ++counters_.tx_frames;
    if ((fm_ce_se & kWqeCtrlCqUpdate) && !WriteCqe(scq_, CqeOpcode::kReq, sq_ci_, 0, 0)) return;
    sq_ci_ = static_cast<uint16_t>(sq_ci_ + DsToWqeBbs(ds));
  }
}

void FakeNic::StepReceive() {
  std::vector<uint8_t> frame;
  while (!error_.load(std::memory_order_relaxed) && wire_->Receive(port_, &frame)) {
    // Pairs with the driver's release store: entries up to head are written.
    const uint16_t head = static_cast<uint16_t>(be32toh(LoadRecord(&qp_dbrec_[kRcvDbr])));
    if (head == static_cast<uint16_t>(rq_ci_)) {
      ++counters_.rx_out_of_buffer;
      continue;
    }
    const uint8_t* entry = rq_buf_.get() + (rq_ci_ & (opts_.rq_wqes - 1)) * opts_.rq_stride;
    uint32_t done = 0;
    bool ok = true;
    for (uint32_t off = 0; off < opts_.rq_stride && done < frame.size(); off += kRqEntryBytes) {
      const uint32_t lkey = Be32At(entry + off + 4);
      if (lkey == kInvalidLkey) break;
      const uint32_t len = Be32At(entry + off);
      const uint32_t n = std::min<uint32_t>(len, static_cast<uint32_t>(frame.size()) - done);
      uint8_t* dst;
      if (!Translate(Be64At(entry + off + 8), lkey, len, &dst)) {
        ok = false;
        break;
      }
      std::memcpy(dst, frame.data() + done, n);
      done += n;
    }
    const uint16_t index = static_cast<uint16_t>(rq_ci_);
    ++rq_ci_;
    if (!ok || done != frame.size()) {
      WriteCqe(rcq_, CqeOpcode::kRespErr, index, 0,
               static_cast<uint8_t>(ok ? CqeSyndrome::kLocalLengthErr
                                       : CqeSyndrome::kLocalProtErr));
      error_.store(true, std::memory_order_release);
      return;
    }
    if (!WriteCqe(rcq_, CqeOpcode::kRespSend, index, done, 0, VerifyChecksums(frame))) return;
    ++counters_.rx_frames;
  }
}

void FakeNic::ResetQp() {
  std::lock_guard<std::mutex> lock(mu_);
  sq_ci_ = 0;
  rq_ci_ = 0;
  StoreRecord(&qp_dbrec_[kRcvDbr], 0);
  StoreRecord(&qp_dbrec_[kSndDbr], 0);
  error_.store(cq_error_.load(std::memory_order_relaxed), std::memory_order_release);
}

void FakeNic::Start() {
  stop_.store(false);
  thread_ = std::thread([this] {
    while (!stop_.load(std::memory_order_acquire)) {
      Step();
      std::this_thread::yield();
    }
  });
}

void FakeNic::Stop() {
  stop_.store(true, std::memory_order_release);
  if (thread_.joinable()) thread_.join();
}

FakeNicCounters FakeNic::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  FakeNicCounters c = counters_;
  c.uar_writes = uar_writes_.load(std::memory_order_relaxed);
  return c;
}

}  // namespace bypass::driver::mlx5
