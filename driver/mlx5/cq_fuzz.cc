// Fuzz target: CompletionQueue::Poll and the SQ/RQ bookkeeping a CQE drives
// (SendQueue::Retire, RecvQueue::Complete) over hostile CQ bytes, as a
// misbehaving device could write them. Whatever the bytes, polling stays
// inside the CQ, retires only outstanding WQEs, and the counts add up.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "driver/mlx5/doorbell.h"
#include "driver/mlx5/prm.h"
#include "driver/mlx5/ring.h"
#include "test/fuzz/fuzz_check.h"

namespace bypass::driver::mlx5 {
namespace {

using ::bypass::fuzz::Require;

constexpr uint32_t kCqes = 8;
constexpr uint32_t kWqes = 16;

// Stores records, rings nothing.
class NullWriter final : public DoorbellWriter {
 public:
  void WriteRecord(uint32_t* record, uint32_t value) override { StoreRecord(record, value); }
  void RingSend(const SqMemory&, uint16_t, uint32_t) override {}
};

void FuzzOne(const uint8_t* data, size_t size) {
  std::vector<uint8_t> cq(kCqes * kCqeBytes, 0);
  std::memcpy(cq.data(), data, size < cq.size() ? size : cq.size());
  std::vector<uint8_t> sq_buf(kWqes * kWqeBb), rq_buf(kWqes * kRqEntryBytes);
  uint32_t qp_dbrec[2] = {}, cq_dbrec = 0;
  NullWriter w;
  SendQueue sq({sq_buf.data(), kWqes, kWqeBb}, &qp_dbrec[kSndDbr], 1, &w,
               SendOptions{.signal_every = 4, .max_inline = 64});
  RecvQueue rq({rq_buf.data(), kWqes, kRqEntryBytes}, &qp_dbrec[kRcvDbr], &w);
  CompletionQueue ccq({cq.data(), kCqes, kCqeBytes, &cq_dbrec}, &w);
  uint8_t frame[128] = {};
  // Some WQEs of mixed sizes and some RQ entries outstanding.
  for (uint64_t i = 0; i < 6; ++i) {
    const uint32_t len = i % 2 ? 100 : 40;
    if (sq.free_wqebbs() < sq.WqeBbsFor(len)) break;
    sq.Post({frame, len, 0x1000, 7, 0, i}, i == 5);
  }
  for (uint64_t i = 0; i < 8; ++i) rq.Post(0x2000 + i * 64, 7, 64, 100 + i);
  const uint32_t posted_sq = sq.outstanding();
  uint32_t retired = 0, received = 0;
  for (int i = 0; i < 3 * static_cast<int>(kCqes); ++i) {
    Completion c;
    const PollResult r = ccq.Poll(&c);
    if (r == PollResult::kEmpty) break;
    if (r == PollResult::kError) {
      Require(!DescribeError(c).empty(), "empty error text");
      continue;
    }
    if (r != PollResult::kOk) continue;
    if (c.opcode == CqeOpcode::kReq) {
      sq.Retire(c.wqe_counter, [&](uint64_t) { ++retired; });
    } else {
      uint64_t cookie;
      if (rq.Complete(c.wqe_counter, &cookie)) {
        Require(cookie == 100 + received, "RQ completion out of order");
        ++received;
      }
    }
    ccq.UpdateDbrec();
  }
  Require(retired + sq.outstanding() == posted_sq, "SQ count mismatch");
  Require(received <= 8 && rq.posted() == 8 - received, "RQ count mismatch");
}

}  // namespace
}  // namespace bypass::driver::mlx5

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bypass::driver::mlx5::FuzzOne(data, size);
  return 0;
}
