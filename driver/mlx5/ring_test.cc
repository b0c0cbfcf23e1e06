// The ring code's index arithmetic, signalling, doorbell order and CQE
// decoding, on plain memory with a recording doorbell writer.
#include "driver/mlx5/ring.h"

#include <endian.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "driver/mlx5/doorbell.h"
#include "driver/mlx5/prm.h"
#include "driver/mlx5/recording_writer.h"
#include "gtest/gtest.h"

namespace bypass::driver::mlx5 {
namespace {

using Event = RecordingDoorbellWriter::Event;

std::vector<uint8_t> Frame(uint32_t len, uint8_t seed) {
  std::vector<uint8_t> f(len);
  for (uint32_t i = 0; i < len; ++i) f[i] = static_cast<uint8_t>(seed + i * 13);
  return f;
}

// A send queue on plain memory.
struct Sq {
  Sq(uint32_t n, uint16_t start_pi, SendOptions opts)
      : buf(n * kWqeBb, 0),
        writer(&dbrec[kSndDbr], SqMemory{buf.data(), n, kWqeBb}),
        sq({buf.data(), n, kWqeBb}, &dbrec[kSndDbr], 7, &writer, opts, start_pi) {}
  uint16_t CtrlIndex(uint16_t pi) const {
    uint32_t v;
    std::memcpy(&v, buf.data() + (pi & (buf.size() / kWqeBb - 1)) * kWqeBb, 4);
    return static_cast<uint16_t>(be32toh(v) >> 8);
  }
  uint8_t FmCeSe(uint16_t pi) const {
    return buf[(pi & (buf.size() / kWqeBb - 1)) * kWqeBb + 11];
  }
  std::vector<uint8_t> buf;
  uint32_t dbrec[2] = {};
  RecordingDoorbellWriter writer;
  SendQueue sq;
};

SendRequest Req(const std::vector<uint8_t>& f, uint64_t cookie) {
  return SendRequest{f.data(), static_cast<uint32_t>(f.size()), 0x10000, 5, 0, cookie};
}

TEST(SendQueueTest, ProducerIndexWrapsAt16Bits) {
  Sq s(64, 0xfff0, {.signal_every = 1000, .max_inline = 0});
  const std::vector<uint8_t> f = Frame(128, 1);
  std::vector<uint64_t> retired;
  for (uint64_t i = 0; i < 40; ++i) {
    const uint16_t pi = s.sq.pi();
    s.sq.Post(Req(f, i), /*last_in_burst=*/false);
    EXPECT_EQ(s.CtrlIndex(pi), pi) << "WQE " << i;
    s.sq.Ring();
    EXPECT_EQ(be32toh(s.dbrec[kSndDbr]), static_cast<uint16_t>(pi + 1));
  }
  EXPECT_EQ(s.sq.pi(), static_cast<uint16_t>(0xfff0 + 40));  // 0x0018
  EXPECT_EQ(s.sq.outstanding(), 40u);
  // One CQE for WQE 0x0005 (after the wrap) retires all of them up to it.
  ASSERT_TRUE(s.sq.Retire(0x0005, [&](uint64_t c) { retired.push_back(c); }));
  ASSERT_EQ(retired.size(), 0x10u + 6u);
  for (size_t i = 0; i < retired.size(); ++i) EXPECT_EQ(retired[i], i);
  EXPECT_FALSE(s.sq.Retire(0x0005, [](uint64_t) {})) << "already retired";
  EXPECT_FALSE(s.sq.Retire(0x0100, [](uint64_t) {})) << "never posted";
}

TEST(SendQueueTest, MultiWqebbWqeWrapsAtTheRingEnd) {
  // 8 WQEBBs; start at 6 so a 5-WQEBB inline WQE covers 6, 7, 0, 1, 2.
  Sq s(8, 6, {.signal_every = 1, .max_inline = 256});
  const std::vector<uint8_t> f = Frame(256, 3);
  ASSERT_EQ(s.sq.WqeBbsFor(256), 5u);  // 3 + ceil((238 + 4) / 16) = 19 DS
  s.sq.Post(Req(f, 42), true);
  EXPECT_EQ(s.sq.pi(), 11);
  EXPECT_EQ(s.sq.free_wqebbs(), 3u);
  // Inline bytes: 12 in WQEBB 6 (after the 4-byte header at 48), 64 in 7,
  // the remaining 162 from the start of the ring.
  const uint8_t* wqe = s.buf.data() + 6 * kWqeBb;
  uint32_t qpn_ds;
  std::memcpy(&qpn_ds, wqe + 4, 4);
  EXPECT_EQ(be32toh(qpn_ds), (7u << 8) | 19u);
  EXPECT_EQ(std::memcmp(wqe + 52, f.data() + 18, 12), 0);
  EXPECT_EQ(std::memcmp(s.buf.data() + 7 * kWqeBb, f.data() + 30, 64), 0);
  EXPECT_EQ(std::memcmp(s.buf.data(), f.data() + 94, 256 - 94), 0);
  // A second one does not fit until the first retires.
  EXPECT_LT(s.sq.free_wqebbs(), s.sq.WqeBbsFor(256));
  uint64_t got = 0;
  ASSERT_TRUE(s.sq.Retire(6, [&](uint64_t c) { got = c; }));
  EXPECT_EQ(got, 42u);
  EXPECT_EQ(s.sq.free_wqebbs(), 8u);
}

TEST(SendQueueTest, SelectiveSignallingAsksForACqeEveryNAndAtBurstEnd) {
  Sq s(64, 0, {.signal_every = 4, .max_inline = 0});
  const std::vector<uint8_t> f = Frame(100, 5);
  for (uint64_t i = 0; i < 10; ++i) s.sq.Post(Req(f, i), /*last_in_burst=*/i == 9);
  for (uint16_t pi = 0; pi < 10; ++pi) {
    const bool want = pi == 3 || pi == 7 || pi == 9;
    EXPECT_EQ(s.FmCeSe(pi), want ? kWqeCtrlCqUpdate : 0) << "WQE " << pi;
  }
  std::vector<uint64_t> retired;
  ASSERT_TRUE(s.sq.Retire(3, [&](uint64_t c) { retired.push_back(c); }));
  EXPECT_EQ(retired, (std::vector<uint64_t>{0, 1, 2, 3}));
  ASSERT_TRUE(s.sq.Retire(9, [&](uint64_t c) { retired.push_back(c); }));
  EXPECT_EQ(retired.size(), 10u);
  EXPECT_EQ(s.sq.outstanding(), 0u);
}

TEST(SendQueueTest, DoorbellOrderIsWqeThenRecordThenUar) {
  Sq s(16, 0xfffe, {.signal_every = 4, .max_inline = 64});
  const std::vector<uint8_t> small = Frame(60, 7);
  const std::vector<uint8_t> big = Frame(1000, 9);
  s.sq.Post(Req(big, 1), false);
  s.sq.Post(Req(small, 2), true);  // inline, 2 WQEBBs, wraps pi past 0xffff
  s.sq.Ring();
  s.sq.Ring();  // nothing new: no doorbell
  const std::vector<Event>& ev = s.writer.events();
  ASSERT_EQ(ev.size(), 2u);
  ASSERT_EQ(ev[0].kind, Event::kRecord);
  EXPECT_EQ(ev[0].record, &s.dbrec[kSndDbr]);
  EXPECT_EQ(ev[0].value, 0x0001u);  // 0xfffe + 1 + 2, 16 bits
  // Both WQEs were complete when the record was written.
  EXPECT_EQ(ev[0].sq_at_record, s.buf);
  ASSERT_EQ(ev[1].kind, Event::kUar);
  EXPECT_EQ(ev[1].record_at_uar, 0x0001u);
  EXPECT_EQ(ev[1].pi, 0xffff);  // the last WQE posted
  EXPECT_EQ(ev[1].wqebbs, 2u);
  uint64_t ctrl8;
  std::memcpy(&ctrl8, s.buf.data() + 15 * kWqeBb, 8);
  EXPECT_EQ(ev[1].uar, ctrl8);
}

TEST(UarDoorbellWriterTest, EightByteStoreAndBlueFlameHalves) {
  std::vector<uint8_t> ring(4 * kWqeBb);
  for (size_t i = 0; i < ring.size(); ++i) ring[i] = static_cast<uint8_t>(i);
  const SqMemory sq{ring.data(), 4, kWqeBb};
  alignas(64) uint8_t uar[512] = {};
  UarDoorbellWriter plain(uar, 0);
  plain.RingSend(sq, 2, 1);
  EXPECT_EQ(std::memcmp(uar, ring.data() + 2 * kWqeBb, 8), 0);
  EXPECT_EQ(uar[8], 0) << "only 8 bytes without BlueFlame";
  EXPECT_EQ(plain.bf_offset(), 0u);

  std::memset(uar, 0, sizeof(uar));
  UarDoorbellWriter bf(uar, 256);
  bf.RingSend(sq, 3, 2);  // WQEBBs 3 and 0: the copy wraps with the ring
  EXPECT_EQ(std::memcmp(uar, ring.data() + 3 * kWqeBb, 64), 0);
  EXPECT_EQ(std::memcmp(uar + 64, ring.data(), 64), 0);
  EXPECT_EQ(bf.bf_offset(), 256u);
  bf.RingSend(sq, 1, 1);
  EXPECT_EQ(std::memcmp(uar + 256, ring.data() + kWqeBb, 64), 0);
  EXPECT_EQ(bf.bf_offset(), 0u);
  uint32_t rec = 0;
  bf.WriteRecord(&rec, 0x1234);
  EXPECT_EQ(be32toh(rec), 0x1234u);
}

// A CQ on plain memory, pre-filled as rdma-core does (op_own 0xf0).
struct Cq {
  explicit Cq(uint32_t n, uint32_t start_ci = 0)
      : buf(n * kCqeBytes, 0), cq({buf.data(), n, kCqeBytes, &dbrec}, &writer, start_ci) {
    for (uint32_t i = 0; i < n; ++i) buf[i * kCqeBytes + CqeOffset::kOpOwn] = 0xf0;
  }
  // Writes the CQE the device writes at producer index `index`.
  void Produce(uint32_t index, CqeOpcode op, uint16_t wqe_counter, uint8_t format = 0,
               uint8_t syndrome = 0) {
    const uint32_t n = static_cast<uint32_t>(buf.size() / kCqeBytes);
    uint8_t* cqe = buf.data() + (index & (n - 1)) * kCqeBytes;
    const uint16_t wc = htobe16(wqe_counter);
    std::memcpy(cqe + CqeOffset::kWqeCounter, &wc, 2);
    const uint32_t bc = htobe32(index);
    std::memcpy(cqe + CqeOffset::kByteCnt, &bc, 4);
    cqe[CqeOffset::kSyndrome] = syndrome;
    cqe[CqeOffset::kOpOwn] = static_cast<uint8_t>((static_cast<uint8_t>(op) << 4) |
                                                  (format << 2) | ((index & n) ? 1 : 0));
  }
  std::vector<uint8_t> buf;
  uint32_t dbrec = 0;
  RecordingDoorbellWriter writer;
  CompletionQueue cq;
};

TEST(CompletionQueueTest, OwnerParityOverFourWraps) {
  Cq c(8);
  Completion got;
  EXPECT_EQ(c.cq.Poll(&got), PollResult::kEmpty) << "pre-filled CQEs are invalid";
  for (uint32_t i = 0; i < 8 * 4 + 3; ++i) {
    c.Produce(i, CqeOpcode::kRespSend, static_cast<uint16_t>(i));
    ASSERT_EQ(c.cq.Poll(&got), PollResult::kOk) << "CQE " << i;
    EXPECT_EQ(got.wqe_counter, static_cast<uint16_t>(i));
    EXPECT_EQ(got.byte_cnt, i);
    // The slot's previous pass (owner of the last wrap) is not new.
    EXPECT_EQ(c.cq.Poll(&got), PollResult::kEmpty) << "after CQE " << i;
    c.cq.UpdateDbrec();
    EXPECT_EQ(be32toh(c.dbrec), i + 1);
  }
}

TEST(CompletionQueueTest, ConsumerIndexIs24BitsOnTheDoorbellRecord) {
  Cq c(16, 0xfffff0);
  Completion got;
  for (uint32_t i = 0xfffff0; i < 0x1000008; ++i) {
    c.Produce(i, CqeOpcode::kReq, 0);
    ASSERT_EQ(c.cq.Poll(&got), PollResult::kOk) << std::hex << i;
  }
  c.cq.UpdateDbrec();
  EXPECT_EQ(c.cq.ci(), 0x1000008u);
  EXPECT_EQ(be32toh(c.dbrec), 0x000008u);
}

TEST(CompletionQueueTest, ErrorCqeIsDecodedIntoOneLine) {
  Cq c(4);
  c.Produce(0, CqeOpcode::kReqErr, 17, 0, static_cast<uint8_t>(CqeSyndrome::kLocalProtErr));
  Completion got;
  ASSERT_EQ(c.cq.Poll(&got), PollResult::kError);
  EXPECT_EQ(got.syndrome, 0x04);
  EXPECT_EQ(got.wqe_counter, 17);
  EXPECT_EQ(DescribeError(got),
            "send completion error: local protection error (bad lkey or address) (syndrome "
            "0x04, vendor syndrome 0x00), wqe 17, qpn 0x0");
  c.Produce(1, CqeOpcode::kRespErr, 3, 0, 0x01);
  ASSERT_EQ(c.cq.Poll(&got), PollResult::kError);
  EXPECT_NE(DescribeError(got).find("receive completion error: local length error"),
            std::string::npos);
  EXPECT_EQ(SyndromeName(0x99), "unknown syndrome 0x99");
}

TEST(CompletionQueueTest, RearmInvalidatesEveryCqeAndRepublishesCi) {
  Cq c(4);
  Completion got;
  for (uint32_t i = 0; i < 6; ++i) {
    c.Produce(i, CqeOpcode::kReq, static_cast<uint16_t>(i));
    ASSERT_EQ(c.cq.Poll(&got), PollResult::kOk);
  }
  // What rdma-core's CQ clean could leave: a CQE that looks new at ci, and
  // a stale doorbell record.
  c.Produce(6, CqeOpcode::kReq, 99);
  c.dbrec = 0;
  c.cq.Rearm();
  EXPECT_EQ(c.cq.Poll(&got), PollResult::kEmpty);
  EXPECT_EQ(be32toh(c.dbrec), 6u);
  c.Produce(6, CqeOpcode::kReq, 7);
  ASSERT_EQ(c.cq.Poll(&got), PollResult::kOk);
  EXPECT_EQ(got.wqe_counter, 7);
}

TEST(CompletionQueueTest, CompressedAndInlineScatterFormatsAreRejected) {
  Cq c(4);
  Completion got;
  for (uint8_t format = 1; format <= 3; ++format) {
    c.Produce(format - 1, CqeOpcode::kRespSend, 0, format);
    ASSERT_EQ(c.cq.Poll(&got), PollResult::kBadFormat) << "format " << int{format};
    EXPECT_EQ(got.format, format);
  }
}

TEST(RecvQueueTest, CompletionsMustComeInPostedOrder) {
  std::vector<uint8_t> buf(4 * kRqEntryBytes);
  uint32_t dbrec[2] = {};
  RecordingDoorbellWriter writer;
  RecvQueue rq({buf.data(), 4, kRqEntryBytes}, &dbrec[kRcvDbr], &writer);
  for (uint64_t i = 0; i < 4; ++i) rq.Post(0x1000 * i, 3, 2048, 100 + i);
  EXPECT_EQ(rq.free_slots(), 0u);
  rq.Ring();
  EXPECT_EQ(be32toh(dbrec[kRcvDbr]), 4u);
  uint64_t cookie = 0;
  EXPECT_FALSE(rq.Complete(1, &cookie)) << "out of order";
  ASSERT_TRUE(rq.Complete(0, &cookie));
  EXPECT_EQ(cookie, 100u);
  std::vector<uint64_t> dropped;
  rq.Reset([&](uint64_t c) { dropped.push_back(c); });
  EXPECT_EQ(dropped, (std::vector<uint64_t>{101, 102, 103}));
  EXPECT_EQ(rq.free_slots(), 4u);
}

}  // namespace
}  // namespace bypass::driver::mlx5
