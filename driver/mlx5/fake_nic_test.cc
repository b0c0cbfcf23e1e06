// The fake NIC against the ring code and the queue pair: frames cross the
// wire byte for byte, the doorbell the NIC latched is the last WQE's control
// segment, and the injected faults (error CQEs, compressed CQEs, CQ overrun,
// bad lkeys) are reported and recovered from. One test runs both NICs on
// threads of their own, so TSan checks the doorbell-record and op_own
// ordering.
#include "driver/mlx5/fake_nic.h"

#include <endian.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "absl/types/span.h"
#include "driver/device.h"
#include "driver/net_headers.h"
#include "driver/mlx5/fake_device.h"
#include "driver/mlx5/prm.h"
#include "driver/mlx5/ring.h"
#include "gtest/gtest.h"

namespace bypass::driver::mlx5 {
namespace {

// Two fake devices on one wire.
struct Pair {
  explicit Pair(bool threaded = false, uint16_t ring = 256) {
    DeviceOptions opts;
    opts.ring_size = ring;
    FakeNic::Options nic;
    nic.step_on_doorbell = !threaded;
    a = *FakeMlx5Device::Open(wire, 0, opts, nic);
    b = *FakeMlx5Device::Open(wire, 1, opts, nic);
  }
  std::shared_ptr<Wire> wire = std::make_shared<Wire>();
  std::unique_ptr<FakeMlx5Device> a, b;
};

// Fills `p` with a frame of `len` bytes whose payload carries `seq`.
void WriteFrame(Packet* p, uint32_t len, uint64_t seq) {
  p->len = len;
  for (uint32_t i = 0; i < len; ++i) p->data[i] = static_cast<uint8_t>(seq * 31 + i);
  std::memcpy(p->data + 20, &seq, sizeof(seq));
}
uint64_t SeqOf(const Packet* p) {
  uint64_t seq;
  std::memcpy(&seq, p->data + 20, sizeof(seq));
  return seq;
}

// Sends `n` frames from `from` and receives them at `to`, checking bytes.
void Exchange(FakeMlx5Device& from, FakeMlx5Device& to, uint32_t n, uint32_t len,
              uint64_t first_seq = 0) {
  std::vector<Packet*> pkts(n);
  ASSERT_TRUE(from.queue(0).AllocBulk(absl::MakeSpan(pkts)));
  for (uint32_t i = 0; i < n; ++i) WriteFrame(pkts[i], len, first_seq + i);
  ASSERT_EQ(from.queue(0).TxBurst(pkts), n);
  Packet* got[64];
  uint32_t received = 0;
  for (int tries = 0; tries < 1000 && received < n; ++tries) {
    const uint16_t k = to.queue(0).RxBurst(absl::MakeSpan(got));
    for (uint16_t i = 0; i < k; ++i) {
      EXPECT_EQ(got[i]->len, len);
      EXPECT_EQ(SeqOf(got[i]), first_seq + received + i);
      for (uint32_t j = 0; j < len; ++j) {
        if (j >= 20 && j < 28) continue;
        ASSERT_EQ(got[i]->data[j], static_cast<uint8_t>((first_seq + received + i) * 31 + j));
      }
    }
    to.queue(0).FreeBulk(absl::MakeConstSpan(got, k));
    received += k;
  }
  EXPECT_EQ(received, n);
}

TEST(FakeNicTest, FramesCrossTheWireInlineAndByPointer) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(Exchange(*p.a, *p.b, 16, 60));     // inline, 2 WQEBBs each
  ASSERT_NO_FATAL_FAILURE(Exchange(*p.a, *p.b, 16, 1514));   // gather from the buffer
  ASSERT_NO_FATAL_FAILURE(Exchange(*p.b, *p.a, 16, 129));    // just over max_inline
  EXPECT_EQ(p.a->nic().counters().tx_frames, 32u);
  EXPECT_EQ(p.b->nic().counters().rx_frames, 32u);
  EXPECT_EQ(p.a->nic().counters().error_cqes, 0u);
  EXPECT_EQ(p.a->qp().errors(), 0u) << p.a->qp().last_error();
  // The UAR saw the first 8 bytes of the last WQE's control segment.
  const RingMemory& m = p.b->nic().memory();
  const uint16_t last_pi = static_cast<uint16_t>(be32toh(m.qp_dbrec[kSndDbr]) - 1);
  uint64_t ctrl8;
  std::memcpy(&ctrl8, m.sq.buf + (last_pi & (m.sq.wqe_cnt - 1)) * kWqeBb, 8);
  EXPECT_EQ(p.b->nic().last_uar(), ctrl8);
}

TEST(FakeNicTest, ChecksumOffloadFillsOnSendAndReportsOnReceive) {
  Pair p;
  const uint32_t all = kOffloadRxIpChecksum | kOffloadRxUdpChecksum | kOffloadTxIpChecksum |
                       kOffloadTxUdpChecksum;
  EXPECT_EQ(p.a->info().offloads, all);
  UdpFlow flow;
  flow.src_mac = p.a->info().mac;
  flow.dst_mac = p.b->info().mac;
  flow.src_ip = p.a->info().ipv4;
  flow.dst_ip = p.b->info().ipv4;
  flow.src_port = 1000;
  flow.dst_port = 2000;
  Packet* pkts[3];
  ASSERT_TRUE(p.a->queue(0).AllocBulk(absl::MakeSpan(pkts)));
  const std::vector<uint8_t> payload(300, 0x5a);
  for (Packet* pkt : pkts) {
    pkt->len = static_cast<uint32_t>(BuildUdpFrame(flow, payload, {pkt->data, pkt->capacity},
                                                   UdpChecksumFill::kNone));
    ASSERT_GT(pkt->len, 0u);
  }
  // 0: both checksums zeroed and offloaded; 1: as built (UDP none, IP
  // intact); 2: IP checksum broken, no offload.
  pkts[0]->data[14 + 10] = 0;  // the IPv4 header checksum
  pkts[0]->data[14 + 11] = 0;
  pkts[0]->ol_flags = kTxIpChecksum | kTxUdpChecksum;
  pkts[2]->data[14 + 10] ^= 0xff;
  ASSERT_EQ(p.a->queue(0).TxBurst(pkts), 3u);
  Packet* got[4];
  ASSERT_EQ(p.b->queue(0).RxBurst(absl::MakeSpan(got)), 3u);
  std::optional<ParsedUdpFrame> parsed = ParseUdpFrame({got[0]->data, got[0]->len});
  ASSERT_TRUE(parsed.has_value()) << "offloaded checksums are wrong";
  EXPECT_TRUE(parsed->udp_checksum_present);
  EXPECT_EQ(got[0]->ol_flags, kRxIpChecksumGood | kRxL4ChecksumGood);
  EXPECT_EQ(got[1]->ol_flags, kRxIpChecksumGood | kRxL4ChecksumGood);
  EXPECT_EQ(got[2]->ol_flags, 0);
  p.b->queue(0).FreeBulk(absl::MakeConstSpan(got, 3));
}

TEST(FakeNicTest, NoRqEntryDropsTheFrame) {
  Pair p(false, 64);
  // B never polls: its 64 RQ entries fill, the rest are dropped by its NIC.
  for (uint64_t round = 0; round < 4; ++round) {
    std::vector<Packet*> pkts(32);
    ASSERT_TRUE(p.a->queue(0).AllocBulk(absl::MakeSpan(pkts)));
    // 200 bytes: not inline, one WQEBB each, so 32 fit the 64-WQEBB SQ.
    for (uint32_t i = 0; i < 32; ++i) WriteFrame(pkts[i], 200, round * 32 + i);
    ASSERT_EQ(p.a->queue(0).TxBurst(pkts), 32u);
  }
  p.b->nic().Step();
  EXPECT_EQ(p.b->nic().counters().rx_frames, 64u);
  EXPECT_EQ(p.b->nic().counters().rx_out_of_buffer, 64u);
  EXPECT_EQ(p.b->nic().counters().cq_overruns, 0u);
}

TEST(FakeNicTest, SendErrorCqeIsReportedAndTheQpRecovers) {
  Pair p;
  const uint32_t before = p.a->queue(0).PoolAvailable();
  p.a->nic().InjectSendError(static_cast<uint8_t>(CqeSyndrome::kLocalProtErr));
  std::vector<Packet*> pkts(8);
  ASSERT_TRUE(p.a->queue(0).AllocBulk(absl::MakeSpan(pkts)));
  for (uint32_t i = 0; i < 8; ++i) WriteFrame(pkts[i], 200, i);
  ASSERT_EQ(p.a->queue(0).TxBurst(pkts), 8u);
  EXPECT_TRUE(p.a->nic().in_error());
  // The next look at the send CQ finds the error, recovers, and every buffer
  // of the failed burst is back in the pool.
  EXPECT_EQ(p.a->queue(0).PoolAvailable(), before);
  EXPECT_EQ(p.a->qp().errors(), 1u);
  EXPECT_EQ(p.a->qp().last_error(),
            "mlx5 queue 0: send completion error: local protection error (bad lkey or address) "
            "(syndrome 0x04, vendor syndrome 0x00), wqe 0, qpn 0x100");
  EXPECT_TRUE(p.a->qp().healthy());
  EXPECT_FALSE(p.a->nic().in_error());
  ASSERT_NO_FATAL_FAILURE(Exchange(*p.a, *p.b, 16, 300, 100));
}

TEST(FakeNicTest, CompressedCqeIsRejectedAndTheQpRecovers) {
  Pair p;
  p.b->nic().InjectCqeFormat(3);
  std::vector<Packet*> pkts(4);
  ASSERT_TRUE(p.a->queue(0).AllocBulk(absl::MakeSpan(pkts)));
  for (uint32_t i = 0; i < 4; ++i) WriteFrame(pkts[i], 100, i);
  ASSERT_EQ(p.a->queue(0).TxBurst(pkts), 4u);
  Packet* got[8];
  EXPECT_EQ(p.b->queue(0).RxBurst(absl::MakeSpan(got)), 0);
  EXPECT_EQ(p.b->qp().errors(), 1u);
  EXPECT_NE(p.b->qp().last_error().find("receive CQE in format 3 (compressed)"),
            std::string::npos)
      << p.b->qp().last_error();
  ASSERT_NO_FATAL_FAILURE(Exchange(*p.a, *p.b, 8, 100, 50));
}

// The ring code straight on a NIC's memory, for what the queue pair never
// does: a consumer that does not publish its CQ index, and a bad lkey.
struct Rings {
  Rings() : nic(&wire, 0, Opts()) {
    const RingMemory& m = nic.memory();
    sq = std::make_unique<SendQueue>(m.sq, &m.qp_dbrec[kSndDbr], m.qpn, nic.writer(),
                                     SendOptions{.signal_every = 1, .max_inline = 0});
    scq = std::make_unique<CompletionQueue>(m.send_cq, nic.writer());
    nic.RegisterMemory(buf, sizeof(buf), 7);
  }
  static FakeNic::Options Opts() {
    FakeNic::Options o;
    o.sq_wqes = 8;
    o.rq_wqes = 8;
    return o;
  }
  Wire wire;
  FakeNic nic;
  uint8_t buf[256] = {};
  std::unique_ptr<SendQueue> sq;
  std::unique_ptr<CompletionQueue> scq;
};

TEST(FakeNicTest, CqOverrunIsDetectedFromTheCqDoorbellRecord) {
  Rings r;
  Completion c;
  for (uint64_t i = 0; i < 8; ++i) {
    r.sq->Post({r.buf, 100, reinterpret_cast<uint64_t>(r.buf), 7, 0, i}, true);
    r.sq->Ring();
    ASSERT_EQ(r.scq->Poll(&c), PollResult::kOk) << i;
    ASSERT_TRUE(r.sq->Retire(c.wqe_counter, [](uint64_t) {}));
    // No UpdateDbrec: the device still sees ci = 0.
  }
  EXPECT_EQ(r.nic.counters().cq_overruns, 0u);
  r.sq->Post({r.buf, 100, reinterpret_cast<uint64_t>(r.buf), 7, 0, 8}, true);
  r.sq->Ring();
  EXPECT_EQ(r.nic.counters().cq_overruns, 1u);
  EXPECT_TRUE(r.nic.cq_in_error());
  EXPECT_EQ(r.scq->Poll(&c), PollResult::kEmpty) << "nothing written past the consumer";
}

TEST(FakeNicTest, BadLkeyCompletesWithLocalProtectionError) {
  Rings r;
  r.sq->Post({r.buf, 100, reinterpret_cast<uint64_t>(r.buf), 8, 0, 1}, true);
  r.sq->Ring();
  Completion c;
  ASSERT_EQ(r.scq->Poll(&c), PollResult::kError);
  EXPECT_EQ(c.opcode, CqeOpcode::kReqErr);
  EXPECT_EQ(c.syndrome, static_cast<uint8_t>(CqeSyndrome::kLocalProtErr));
  EXPECT_EQ(r.nic.counters().tx_frames, 0u);
}

TEST(FakeNicTest, BothNicsOnThreadsOfTheirOwn) {
  Pair p(/*threaded=*/true, 256);
  p.a->nic().Start();
  p.b->nic().Start();
  QueuePair& tx = p.a->queue(0);
  QueuePair& rx = p.b->queue(0);
  constexpr uint64_t kFrames = 50'000;
  uint64_t sent = 0, received = 0, delivered = 0;
  std::vector<Packet*> pending;
  Packet* got[64];
  for (uint64_t spins = 0; spins < 100'000'000; ++spins) {
    if (sent < kFrames && pending.empty()) {
      const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(32, kFrames - sent));
      pending.resize(n);
      if (tx.AllocBulk(absl::MakeSpan(pending))) {
        for (uint32_t i = 0; i < n; ++i) WriteFrame(pending[i], 64 + (sent + i) % 200, sent + i);
      } else {
        pending.clear();
      }
    }
    if (!pending.empty()) {
      const uint16_t took = tx.TxBurst(pending);
      sent += took;
      pending.erase(pending.begin(), pending.begin() + took);
    }
    const uint16_t k = rx.RxBurst(absl::MakeSpan(got));
    for (uint16_t i = 0; i < k; ++i) {
      // The receiver's NIC drops when its RQ runs dry; order is kept.
      EXPECT_GE(SeqOf(got[i]), received);
      received = SeqOf(got[i]) + 1;
    }
    delivered += k;
    rx.FreeBulk(absl::MakeConstSpan(got, k));
    if (sent == kFrames && k == 0) {
      const FakeNicCounters b = p.b->nic().counters();
      if (b.rx_frames + b.rx_out_of_buffer == kFrames && delivered == b.rx_frames) break;
    }
  }
  p.a->nic().Stop();
  p.b->nic().Stop();
  const FakeNicCounters b = p.b->nic().counters();
  EXPECT_EQ(p.a->nic().counters().tx_frames, kFrames);
  EXPECT_EQ(b.rx_frames + b.rx_out_of_buffer, kFrames);
  // How many the receiver's NIC dropped for want of RQ entries depends on
  // the threads' timing; every frame is accounted for either way.
  EXPECT_GT(b.rx_frames, 0u);
  EXPECT_EQ(delivered, b.rx_frames);
  EXPECT_EQ(p.a->qp().errors(), 0u) << p.a->qp().last_error();
  EXPECT_EQ(p.b->qp().errors(), 0u) << p.b->qp().last_error();
}

}  // namespace
}  // namespace bypass::driver::mlx5
