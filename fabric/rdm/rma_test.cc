// The Rma stage on its own: registering regions, a peer's writes and reads
// checked and applied (or refused with a RESPONSE), and our own writes and
// reads posted, answered and completed.
#include "fabric/rdm/rma.h"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "fabric/rdm/stage_rig.h"
#include "gtest/gtest.h"

namespace bypass::rdm {
namespace {

using testing::Bytes;
using testing::RigWithPeer;
using testing::StageRig;

constexpr uint64_t kBase = 0x10000;  // where the peer addresses our region

// A segment of the peer's write (its rma_id 7) of `total` bytes at addr.
wire::RmaFields Write(uint64_t key, uint64_t addr, uint64_t total, uint64_t offset = 0,
                      uint8_t flags = 0, uint64_t data = 0) {
  return {.op = wire::RmaOp::kWrite,
          .flags = flags,
          .rma_id = 7,
          .key = key,
          .addr = addr,
          .total_length = total,
          .offset = offset,
          .data = data};
}

// The peer's read request (its rma_id 9).
wire::RmaFields ReadRequest(uint64_t key, uint64_t addr, uint64_t total) {
  return {
      .op = wire::RmaOp::kReadReq, .rma_id = 9, .key = key, .addr = addr, .total_length = total};
}

// The peer's answer to our op o: READ_DATA at offset, or a RESPONSE.
wire::RmaFields Answer(StageRig& rig, uint32_t o, wire::RmaOp op, uint64_t offset = 0,
                       wire::RmaStatus status = wire::RmaStatus::kOk) {
  const wire::RmaFields& ours = rig.ops[o].rma;
  return {.op = op,
          .status = status,
          .rma_id = rig.ops.RmaId(o),
          .key = ours.key,
          .addr = ours.addr,
          .total_length = ours.total_length,
          .offset = offset};
}

// Expects op o, posted by the application, to be of `kind` with the RMA
// template of wire op `op` naming it (its rma_id) for len bytes at addr
// under key, and the caller's context and completion flags; returns it.
const SendOp& ExpectPosted(StageRig& rig, uint32_t o, OpKind kind, wire::RmaOp op, uint64_t key,
                           uint64_t addr, uint64_t len, const void* context, uint64_t comp_flags) {
  const SendOp& s = rig.ops[o];
  EXPECT_EQ(s.kind, kind);
  EXPECT_EQ(s.type, wire::PacketType::kRma);
  EXPECT_EQ(s.rma.op, op);
  EXPECT_EQ(s.rma.rma_id, rig.ops.RmaId(o));
  EXPECT_EQ(s.rma.key, key);
  EXPECT_EQ(s.rma.addr, addr);
  EXPECT_EQ(s.rma.total_length, len);
  EXPECT_EQ(s.len, len);
  EXPECT_EQ(s.context, context);
  EXPECT_EQ(s.comp_flags, comp_flags);
  return s;
}

// Rma::PostWrite or Rma::PostRead.
using Post = Result (Rma::*)(const RmaRequest&);

// The application posts req to peer pi (post: PostWrite or PostRead); the
// op is sent and acknowledged, and waits for its answer. Returns it (kNone
// if it was not posted).
uint32_t PostAndSend(StageRig& rig, uint32_t pi, Post post, const RmaRequest& req) {
  EXPECT_EQ((rig.rma.*post)(req), Result::kOk);
  const std::vector<uint32_t> q = rig.Queued(pi);
  if (q.empty()) return kNone;
  rig.SendAndAcknowledge(pi);
  return q.back();
}

// The argument errors PostWrite and PostRead share, with max_msg_size
// 1024: no peer or no buffer is kInvalid, more than 1024 bytes kTooLong.
void ExpectSharedArgumentErrors(StageRig& rig, uint32_t pi, Post post) {
  std::vector<uint8_t> buf(2048);
  EXPECT_EQ((rig.rma.*post)({.dest = PeerId{}, .buf = buf.data(), .len = 8}), Result::kInvalid);
  EXPECT_EQ((rig.rma.*post)({.dest = rig.Id(pi), .buf = nullptr, .len = 8}), Result::kInvalid);
  EXPECT_EQ((rig.rma.*post)({.dest = rig.Id(pi), .buf = buf.data(), .len = 1025}),
            Result::kTooLong);
}

// A rig with an established peer and a 4 KiB region at kBase.
class RmaTest : public ::testing::Test {
 protected:
  RmaTest() {
    pi_ = rig_.AddEstablishedPeer();
    region_.assign(4096, 0xee);
  }

  uint64_t Register(uint32_t access) {
    const absl::StatusOr<uint64_t> k = rig_.rma.RegisterRegion({.addr = region_.data(),
                                                                .len = region_.size(),
                                                                .access = access,
                                                                .base = kBase,
                                                                .context = &region_});
    EXPECT_TRUE(k.ok()) << k.status();
    return k.ok() ? *k : 0;
  }
  PeerId peer() const { return rig_.Id(pi_); }
  bool Untouched() const {
    for (uint8_t b : region_) {
      if (b != 0xee) return false;
    }
    return true;
  }
  // The one op queued to the peer, which must be a RESPONSE.
  const SendOp& OnlyResponse() { return rig_.ExpectOnlyResponse(pi_); }
  // Expects the peer's write or read refused: our region untouched, the
  // answer a RESPONSE with status. Returns the RESPONSE.
  const SendOp& ExpectRefused(wire::RmaStatus status) {
    EXPECT_TRUE(Untouched());
    const SendOp& resp = OnlyResponse();
    EXPECT_EQ(resp.rma.status, status);
    return resp;
  }
  // Expects the peer's write segments dropped as protocol errors (errors so
  // far): nothing written at the region's byte 8, nothing answered.
  void ExpectSegmentsDropped(uint64_t errors) {
    EXPECT_EQ(rig_.ctx.counters.protocol_errors, errors);
    EXPECT_EQ(region_[8], 0xee);
    EXPECT_TRUE(rig_.Queued(pi_).empty());
  }
  // Takes every engine op (as RESPONSEs); returns them.
  std::vector<uint32_t> TakeEveryEngineOp() {
    std::vector<uint32_t> taken;
    for (uint32_t o = rig_.ops.Alloc(OpKind::kResponse); o != kNone;
         o = rig_.ops.Alloc(OpKind::kResponse)) {
      taken.push_back(o);
    }
    return taken;
  }

  StageRig rig_;
  uint32_t pi_ = kNone;
  std::vector<uint8_t> region_;
};

// ---- Regions.

// Without a requested key each region gets a random key, non-zero and
// distinct from every other.
TEST_F(RmaTest, RegisterRegionGivesDistinctRandomNonZeroKeys) {
  std::set<uint64_t> keys;
  for (uint32_t i = 0; i < rig_.config.max_regions; ++i) {
    const absl::StatusOr<uint64_t> k =
        rig_.rma.RegisterRegion({.addr = region_.data(), .len = 16, .access = kAccessRemoteRead});
    ASSERT_TRUE(k.ok()) << k.status();
    EXPECT_NE(*k, 0u);
    keys.insert(*k);
  }
  EXPECT_EQ(keys.size(), rig_.config.max_regions);
}

// A requested key is the region's key; asking for one in use is refused.
TEST_F(RmaTest, RegisterRegionHonoursARequestedKeyAndRefusesATakenOne) {
  const absl::StatusOr<uint64_t> k = rig_.rma.RegisterRegion(
      {.addr = region_.data(), .len = 16, .access = kAccessRemoteRead, .key = 42});
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(*k, 42u);
  const absl::StatusOr<uint64_t> again = rig_.rma.RegisterRegion(
      {.addr = region_.data(), .len = 16, .access = kAccessRemoteWrite, .key = 42});
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists) << again.status();
  const absl::StatusOr<uint64_t> random =
      rig_.rma.RegisterRegion({.addr = region_.data(), .len = 16, .access = kAccessRemoteRead});
  ASSERT_TRUE(random.ok());
  const absl::StatusOr<uint64_t> taken = rig_.rma.RegisterRegion(
      {.addr = region_.data(), .len = 16, .access = kAccessRemoteRead, .key = *random});
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kAlreadyExists);
}

// Unknown access bits, a null address and a range wrapping 2^64 are refused.
TEST_F(RmaTest, RegisterRegionRefusesBadArguments) {
  const RegionRequest bad[] = {
      {.addr = region_.data(), .len = 16, .access = 1u << 5},
      {.addr = nullptr, .len = 16, .access = kAccessRemoteRead},
      {.addr = region_.data(), .len = 100, .access = kAccessRemoteRead, .base = UINT64_MAX - 10},
  };
  for (size_t i = 0; i < std::size(bad); ++i) {
    EXPECT_EQ(rig_.rma.RegisterRegion(bad[i]).status().code(), absl::StatusCode::kInvalidArgument)
        << "request " << i;
  }
  // Up to the last address exactly is no wrap.
  EXPECT_TRUE(rig_.rma
                  .RegisterRegion({.addr = region_.data(),
                                   .len = 100,
                                   .access = kAccessRemoteRead,
                                   .base = UINT64_MAX - 100})
                  .ok());
  EXPECT_TRUE(rig_.rma.RegisterRegion({.addr = nullptr, .len = 0, .access = 0}).ok())
      << "an empty region needs no memory";
}

// No more than max_regions at once; deregistering one makes room.
TEST(RmaRegionTest, RegisterRegionRefusesMoreThanMaxRegions) {
  EndpointConfig c = StageRig::DefaultConfig();
  c.max_regions = 4;
  StageRig rig(c);
  uint8_t mem[16];
  std::vector<uint64_t> keys;
  for (int i = 0; i < 4; ++i) {
    const absl::StatusOr<uint64_t> k =
        rig.rma.RegisterRegion({.addr = mem, .len = 16, .access = kAccessRemoteRead});
    ASSERT_TRUE(k.ok()) << k.status();
    keys.push_back(*k);
  }
  const absl::StatusOr<uint64_t> full =
      rig.rma.RegisterRegion({.addr = mem, .len = 16, .access = kAccessRemoteRead, .key = 5});
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted) << full.status();
  ASSERT_TRUE(rig.rma.DeregisterRegion(keys[1]).ok());
  EXPECT_TRUE(rig.rma.RegisterRegion({.addr = mem, .len = 16, .access = kAccessRemoteRead}).ok());
}

// Deregistering an unknown key (or one already deregistered) is NotFound.
TEST_F(RmaTest, DeregisterRegionOfAnUnknownKeyIsNotFound) {
  EXPECT_EQ(rig_.rma.DeregisterRegion(12345).code(), absl::StatusCode::kNotFound);
  const uint64_t key = Register(kAccessRemoteWrite);
  EXPECT_TRUE(rig_.rma.DeregisterRegion(key).ok());
  EXPECT_EQ(rig_.rma.DeregisterRegion(key).code(), absl::StatusCode::kNotFound);
}

// Keys stay findable whatever is deregistered around them (small,
// consecutive keys share probe sequences in the key index).
TEST(RmaRegionTest, DeregisteringKeepsEveryOtherKeyFindable) {
  StageRig rig;
  uint8_t mem[16];
  const uint32_t n = rig.config.max_regions;
  for (uint64_t k = 1; k <= n; ++k) {
    ASSERT_TRUE(
        rig.rma.RegisterRegion({.addr = mem, .len = 16, .access = kAccessRemoteRead, .key = k})
            .ok());
  }
  for (uint64_t k = 1; k <= n; k += 3) ASSERT_TRUE(rig.rma.DeregisterRegion(k).ok()) << k;
  for (uint64_t k = 1; k <= n; ++k) {
    const absl::Status s = rig.rma.DeregisterRegion(k);
    if ((k - 1) % 3 == 0) {
      EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << k;
    } else {
      EXPECT_TRUE(s.ok()) << k << ": " << s;
    }
  }
}

// ---- Target: a peer's writes.

// A write with a key no region has writes nothing and is answered BAD_KEY.
TEST_F(RmaTest, AWriteWithABadKeyWritesNothingAndIsAnsweredBadKey) {
  const uint64_t key = Register(kAccessRemoteWrite);
  const std::vector<uint8_t> payload = Bytes(8, 1);
  EXPECT_TRUE(rig_.rma.ConsumeWrite(pi_, Write(key + 1, kBase, 8, 0, wire::kRmaFlagRemoteData, 5),
                                    payload));
  const SendOp& resp = ExpectRefused(wire::RmaStatus::kBadKey);
  EXPECT_EQ(resp.rma.rma_id, 7u);
  EXPECT_EQ(resp.rma.key, key + 1);
  EXPECT_EQ(resp.rma.addr, kBase);
  EXPECT_EQ(resp.rma.total_length, 8u);
  EXPECT_EQ(rig_.ctx.counters.rma_refused, 1u);
  EXPECT_EQ(rig_.ctx.counters.rma_served, 0u);
  EXPECT_EQ(rig_.completions.ready(), 0u) << "a refused write completes nowhere here";
  EXPECT_FALSE(rig_.rma.Receiving(pi_));
}

// A write to a region without REMOTE_WRITE writes nothing: NO_ACCESS.
TEST_F(RmaTest, AWriteWithoutTheRightWritesNothingAndIsAnsweredNoAccess) {
  const uint64_t key = Register(kAccessRemoteRead);
  const std::vector<uint8_t> payload = Bytes(8, 1);
  EXPECT_TRUE(rig_.rma.ConsumeWrite(pi_, Write(key, kBase, 8), payload));
  ExpectRefused(wire::RmaStatus::kNoAccess);
  EXPECT_EQ(rig_.ctx.counters.rma_refused, 1u);
}

// A write reaching past the region (or starting before it) writes nothing,
// not even its first segment: OUT_OF_RANGE.
TEST_F(RmaTest, AWriteOutOfRangeWritesNothingAndIsAnsweredOutOfRange) {
  const uint64_t key = Register(kAccessRemoteWrite);
  const std::vector<uint8_t> payload = Bytes(8, 1);
  // 16 bytes from 8 before the end: its first 8 would fit.
  EXPECT_TRUE(rig_.rma.ConsumeWrite(pi_, Write(key, kBase + 4096 - 8, 16), payload));
  EXPECT_TRUE(rig_.rma.ConsumeWrite(pi_, Write(key, kBase + 4096 - 8, 16, 8), payload));
  ExpectRefused(wire::RmaStatus::kOutOfRange);
  rig_.reliability.Unqueue(pi_, rig_.Queued(pi_)[0]);
  EXPECT_TRUE(rig_.rma.ConsumeWrite(pi_, Write(key, kBase - 1, 8), payload));
  ExpectRefused(wire::RmaStatus::kOutOfRange);
  EXPECT_EQ(rig_.ctx.counters.rma_refused, 2u);
}

// A good write in several segments lands at base-relative addresses; the
// OK RESPONSE is queued after its last segment only.
TEST_F(RmaTest, AGoodWriteInSegmentsLandsAtItsAddressAndIsAnsweredOk) {
  const uint64_t key = Register(kAccessRemoteWrite);
  const std::vector<uint8_t> data = Bytes(24, 3);
  const absl::Span<const uint8_t> all(data);
  for (uint64_t off = 0; off < 24; off += 8) {
    EXPECT_TRUE(rig_.rma.ConsumeWrite(pi_, Write(key, kBase + 100, 24, off), all.subspan(off, 8)));
    if (off < 16) {
      EXPECT_TRUE(rig_.rma.Receiving(pi_));
      EXPECT_TRUE(rig_.Queued(pi_).empty()) << "no answer before the last segment";
    }
  }
  EXPECT_FALSE(rig_.rma.Receiving(pi_));
  EXPECT_EQ(std::memcmp(region_.data() + 100, data.data(), 24), 0);
  EXPECT_EQ(region_[99], 0xee);
  EXPECT_EQ(region_[124], 0xee);
  const SendOp& resp = OnlyResponse();
  EXPECT_EQ(resp.rma.status, wire::RmaStatus::kOk);
  EXPECT_EQ(resp.rma.rma_id, 7u);
  EXPECT_EQ(resp.rma.total_length, 24u);
  EXPECT_EQ(rig_.ctx.counters.rma_served, 1u);
  EXPECT_EQ(rig_.ctx.counters.rma_refused, 0u);
  EXPECT_EQ(rig_.completions.ready(), 0u) << "without remote data nothing completes here";
}

// A write with remote CQ data also completes here: remote write + remote
// data, the region's context, where it landed, the data and the source.
TEST_F(RmaTest, AWriteWithRemoteDataCompletesAtTheTarget) {
  const uint64_t key = Register(kAccessRemoteWrite);
  const std::vector<uint8_t> data = Bytes(16, 5);
  const absl::Span<const uint8_t> all(data);
  EXPECT_TRUE(rig_.rma.ConsumeWrite(
      pi_, Write(key, kBase + 8, 16, 0, wire::kRmaFlagRemoteData, 0xfeed), all.subspan(0, 8)));
  EXPECT_EQ(rig_.completions.ready(), 0u);
  EXPECT_TRUE(rig_.rma.ConsumeWrite(
      pi_, Write(key, kBase + 8, 16, 8, wire::kRmaFlagRemoteData, 0xfeed), all.subspan(8, 8)));
  Completion c[2];
  ASSERT_EQ(rig_.completions.Poll(c), 1u);
  EXPECT_EQ(c[0].context, &region_);
  EXPECT_EQ(c[0].flags, kCompRma | kCompRemoteWrite | kCompRemoteData);
  EXPECT_EQ(c[0].len, 16u);
  EXPECT_EQ(c[0].buf, region_.data() + 8);
  EXPECT_EQ(c[0].data, 0xfeedu);
  EXPECT_EQ(c[0].source, peer());
  EXPECT_EQ(OnlyResponse().rma.status, wire::RmaStatus::kOk);
}

// A region deregistered while a write arrives stops it there: the rest is
// not written and the answer is BAD_KEY.
TEST_F(RmaTest, ARegionDeregisteredMidWriteTurnsTheVerdictToBadKey) {
  const uint64_t key = Register(kAccessRemoteWrite);
  const std::vector<uint8_t> data = Bytes(16, 9);
  const absl::Span<const uint8_t> all(data);
  EXPECT_TRUE(rig_.rma.ConsumeWrite(pi_, Write(key, kBase, 16), all.subspan(0, 8)));
  EXPECT_EQ(region_[0], data[0]) << "the first segment landed";
  ASSERT_TRUE(rig_.rma.DeregisterRegion(key).ok());
  EXPECT_TRUE(rig_.rma.ConsumeWrite(pi_, Write(key, kBase, 16, 8), all.subspan(8, 8)));
  EXPECT_EQ(region_[8], 0xee) << "nothing after the deregistration";
  EXPECT_EQ(OnlyResponse().rma.status, wire::RmaStatus::kBadKey);
  EXPECT_EQ(rig_.ctx.counters.rma_refused, 1u);
  EXPECT_EQ(rig_.ctx.counters.rma_served, 0u);
}

// ... even when a region with the same key was registered in between: the
// write was checked against the old one.
TEST_F(RmaTest, ARegionReRegisteredMidWriteUnderTheSameKeyIsNotWrittenEither) {
  const uint64_t key = Register(kAccessRemoteWrite);
  const std::vector<uint8_t> data = Bytes(16, 9);
  const absl::Span<const uint8_t> all(data);
  EXPECT_TRUE(rig_.rma.ConsumeWrite(pi_, Write(key, kBase, 16), all.subspan(0, 8)));
  ASSERT_TRUE(rig_.rma.DeregisterRegion(key).ok());
  std::vector<uint8_t> other(4096, 0xee);
  ASSERT_TRUE(rig_.rma
                  .RegisterRegion({.addr = other.data(),
                                   .len = other.size(),
                                   .access = kAccessRemoteWrite,
                                   .base = kBase,
                                   .key = key})
                  .ok());
  EXPECT_TRUE(rig_.rma.ConsumeWrite(pi_, Write(key, kBase, 16, 8), all.subspan(8, 8)));
  EXPECT_EQ(other[8], 0xee);
  EXPECT_EQ(region_[8], 0xee);
  EXPECT_EQ(OnlyResponse().rma.status, wire::RmaStatus::kBadKey);
}

// With no engine op free for the RESPONSE, the last segment is refused
// (false, rma_no_slot) and nothing of it applied; once one is free it is
// taken.
TEST_F(RmaTest, WithNoEngineOpFreeTheLastSegmentIsRefusedAndNothingOfItApplied) {
  const uint64_t key = Register(kAccessRemoteWrite);
  const std::vector<uint32_t> taken = TakeEveryEngineOp();
  const std::vector<uint8_t> data = Bytes(16, 11);
  const absl::Span<const uint8_t> all(data);
  EXPECT_TRUE(rig_.rma.ConsumeWrite(pi_, Write(key, kBase, 16), all.subspan(0, 8)));
  EXPECT_FALSE(rig_.rma.ConsumeWrite(pi_, Write(key, kBase, 16, 8), all.subspan(8, 8)));
  EXPECT_EQ(rig_.ctx.counters.rma_no_slot, 1u);
  EXPECT_EQ(region_[0], data[0]);
  EXPECT_EQ(region_[8], 0xee) << "the refused segment is not applied";
  EXPECT_TRUE(rig_.rma.Receiving(pi_)) << "the write waits for that segment again";
  EXPECT_TRUE(rig_.Queued(pi_).empty());

  rig_.ops.Free(taken.back());
  EXPECT_TRUE(rig_.rma.ConsumeWrite(pi_, Write(key, kBase, 16, 8), all.subspan(8, 8)));
  EXPECT_EQ(std::memcmp(region_.data(), data.data(), 16), 0);
  EXPECT_EQ(OnlyResponse().rma.status, wire::RmaStatus::kOk);
  EXPECT_EQ(rig_.ctx.counters.rma_served, 1u);
}

// A one-segment write refused for lack of an engine op leaves no write
// half-received.
TEST_F(RmaTest, AOneSegmentWriteRefusedForLackOfAnEngineOpIsForgotten) {
  const uint64_t key = Register(kAccessRemoteWrite);
  TakeEveryEngineOp();
  const std::vector<uint8_t> data = Bytes(8, 1);
  EXPECT_FALSE(rig_.rma.ConsumeWrite(pi_, Write(key, kBase, 8), data));
  EXPECT_FALSE(rig_.rma.Receiving(pi_));
  EXPECT_TRUE(Untouched());
  EXPECT_EQ(rig_.ctx.counters.rma_no_slot, 1u);
}

// With remote data and no completion room, the last segment is refused too,
// and the RESPONSE op it took is given back.
TEST_F(RmaTest, WithRemoteDataAndNoCompletionRoomTheLastSegmentIsRefused) {
  const uint64_t key = Register(kAccessRemoteWrite);
  rig_.ReserveAll();
  const std::vector<uint8_t> data = Bytes(8, 1);
  EXPECT_FALSE(
      rig_.rma.ConsumeWrite(pi_, Write(key, kBase, 8, 0, wire::kRmaFlagRemoteData, 1), data));
  EXPECT_TRUE(Untouched());
  EXPECT_EQ(rig_.ctx.counters.rma_no_slot, 1u);
  EXPECT_EQ(rig_.ops.live(OpKind::kResponse), 0u) << "the RESPONSE op was given back";
  rig_.completions.Unreserve();
  EXPECT_TRUE(
      rig_.rma.ConsumeWrite(pi_, Write(key, kBase, 8, 0, wire::kRmaFlagRemoteData, 1), data));
  EXPECT_EQ(region_[0], data[0]);
}

// A segment that does not continue the write being received is a protocol
// error, acknowledged and dropped.
TEST_F(RmaTest, ASegmentThatDoesNotContinueTheWriteIsAProtocolError) {
  const uint64_t key = Register(kAccessRemoteWrite);
  const std::vector<uint8_t> data = Bytes(16, 1);
  const absl::Span<const uint8_t> all(data);
  EXPECT_TRUE(rig_.rma.ConsumeWrite(pi_, Write(key, kBase, 8, 8), all.subspan(8, 8)))
      << "no write started";
  EXPECT_EQ(rig_.ctx.counters.protocol_errors, 1u);
  EXPECT_TRUE(Untouched());
  EXPECT_TRUE(rig_.rma.ConsumeWrite(pi_, Write(key, kBase, 16), all.subspan(0, 8)));
  wire::RmaFields wrong = Write(key, kBase, 16, 8);
  wrong.rma_id = 8;
  EXPECT_TRUE(rig_.rma.ConsumeWrite(pi_, wrong, all.subspan(8, 8)));
  EXPECT_TRUE(rig_.rma.ConsumeWrite(pi_, Write(key, kBase + 1, 16, 8), all.subspan(8, 8)));
  ExpectSegmentsDropped(3);
}

// A peer's session ending forgets the write it was applying: its next
// segment continues nothing.
TEST_F(RmaTest, EndSessionForgetsAHalfReceivedWrite) {
  const uint64_t key = Register(kAccessRemoteWrite);
  const std::vector<uint8_t> data = Bytes(16, 1);
  const absl::Span<const uint8_t> all(data);
  EXPECT_TRUE(rig_.rma.ConsumeWrite(pi_, Write(key, kBase, 16), all.subspan(0, 8)));
  ASSERT_TRUE(rig_.rma.Receiving(pi_));
  rig_.rma.EndSession(pi_);
  EXPECT_FALSE(rig_.rma.Receiving(pi_));
  EXPECT_TRUE(rig_.rma.ConsumeWrite(pi_, Write(key, kBase, 16, 8), all.subspan(8, 8)));
  ExpectSegmentsDropped(1);
}

// ---- Target: a peer's reads.

// A good read request queues a READ_DATA op streaming from the region.
TEST_F(RmaTest, AReadRequestQueuesReadDataStreamingFromTheRegion) {
  const uint64_t key = Register(kAccessRemoteRead);
  const std::vector<uint8_t> data = Bytes(3000, 13);
  std::memcpy(region_.data() + 64, data.data(), data.size());
  ASSERT_TRUE(rig_.rma.ConsumeReadRequest(pi_, ReadRequest(key, kBase + 64, 3000)));
  const std::vector<uint32_t> q = rig_.Queued(pi_);
  ASSERT_EQ(q.size(), 1u);
  const SendOp& op = rig_.ops[q[0]];
  EXPECT_EQ(op.kind, OpKind::kReadData);
  EXPECT_EQ(op.rma.op, wire::RmaOp::kReadData);
  EXPECT_EQ(op.rma.rma_id, 9u);
  EXPECT_EQ(op.src, region_.data() + 64);
  EXPECT_EQ(op.wire_len, 3000u);
  EXPECT_EQ(rig_.ctx.counters.rma_served, 1u);

  bool probe = false;
  const std::vector<driver::Packet*> bufs = rig_.Buffers(8);
  const size_t n = rig_.reliability.Build(pi_, &probe, bufs);
  ASSERT_GE(n, 3u) << "3000 bytes take three packets";
  std::vector<uint8_t> got;
  for (size_t i = 0; i < n; ++i) {
    const wire::View v = StageRig::Parse(bufs[i]);
    ASSERT_EQ(v.common.type, wire::PacketType::kRma);
    EXPECT_EQ(v.rma.op, wire::RmaOp::kReadData);
    EXPECT_EQ(v.rma.rma_id, 9u);
    EXPECT_EQ(v.rma.offset, got.size());
    got.insert(got.end(), v.payload.begin(), v.payload.end());
  }
  EXPECT_EQ(got, data);
}

// A region being read cannot be deregistered until every READ_DATA op
// streaming from it has ended.
TEST_F(RmaTest, AReadHoldsItsRegionUntilItsOpIsFreed) {
  const uint64_t key = Register(kAccessRemoteRead);
  ASSERT_TRUE(rig_.rma.ConsumeReadRequest(pi_, ReadRequest(key, kBase, 100)));
  ASSERT_TRUE(rig_.rma.ConsumeReadRequest(pi_, ReadRequest(key, kBase + 100, 100)));
  const std::vector<uint32_t> q = rig_.Queued(pi_);
  ASSERT_EQ(q.size(), 2u);
  EXPECT_EQ(rig_.rma.DeregisterRegion(key).code(), absl::StatusCode::kFailedPrecondition);
  rig_.reliability.Unqueue(pi_, q[0]);
  rig_.ops.Free(q[0]);
  EXPECT_EQ(rig_.rma.DeregisterRegion(key).code(), absl::StatusCode::kFailedPrecondition)
      << "one read still streams from it";
  rig_.reliability.Unqueue(pi_, q[1]);
  rig_.ops.Free(q[1]);
  EXPECT_TRUE(rig_.rma.DeregisterRegion(key).ok());
}

// A refused read is answered with a RESPONSE and holds nothing.
TEST_F(RmaTest, ARefusedReadIsAnsweredWithAResponseAndHoldsNothing) {
  const uint64_t key = Register(kAccessRemoteWrite);
  ASSERT_TRUE(rig_.rma.ConsumeReadRequest(pi_, ReadRequest(key, kBase, 100)));
  const SendOp& resp = OnlyResponse();
  EXPECT_EQ(resp.rma.status, wire::RmaStatus::kNoAccess);
  EXPECT_EQ(resp.rma.rma_id, 9u);
  EXPECT_EQ(resp.rma.total_length, 100u);
  EXPECT_EQ(rig_.ctx.counters.rma_refused, 1u);
  EXPECT_TRUE(rig_.rma.DeregisterRegion(key).ok());
}

// A read request that finds no engine op free is refused and comes again.
TEST_F(RmaTest, AReadRequestWithNoEngineOpFreeIsRefused) {
  const uint64_t key = Register(kAccessRemoteRead);
  TakeEveryEngineOp();
  EXPECT_FALSE(rig_.rma.ConsumeReadRequest(pi_, ReadRequest(key, kBase, 100)));
  EXPECT_EQ(rig_.ctx.counters.rma_no_slot, 1u);
  EXPECT_TRUE(rig_.Queued(pi_).empty());
  EXPECT_TRUE(rig_.rma.DeregisterRegion(key).ok()) << "a refused read holds nothing";
}

// ---- Initiator: posting.

// Argument errors of PostWrite: unknown peer, null buffer, unknown flags
// (kInvalid); longer than max_msg_size or inject_size (kTooLong).
TEST(RmaPostTest, PostWriteArgumentErrors) {
  EndpointConfig c = StageRig::DefaultConfig();
  c.max_msg_size = 1024;
  c.inject_size = 64;
  auto [rig, pi] = RigWithPeer(c);
  ExpectSharedArgumentErrors(rig, pi, &Rma::PostWrite);
  const PeerId dest = rig.Id(pi);
  std::vector<uint8_t> buf(2048);
  EXPECT_EQ(rig.rma.PostWrite({.dest = dest, .buf = buf.data(), .len = 8, .flags = 1u << 7}),
            Result::kInvalid);
  EXPECT_EQ(rig.rma.PostWrite({.dest = dest, .buf = buf.data(), .len = 65, .flags = kRmaInject}),
            Result::kTooLong);
  EXPECT_EQ(rig.ops.user_free(), c.max_send_ops) << "nothing taken";
  EXPECT_TRUE(rig.Queued(pi).empty());
  EXPECT_EQ(rig.ctx.counters.rma_ops, 0u);
}

// Argument errors of PostRead: unknown peer, null buffer, any flag
// (kInvalid); longer than max_msg_size (kTooLong).
TEST(RmaPostTest, PostReadArgumentErrors) {
  EndpointConfig c = StageRig::DefaultConfig();
  c.max_msg_size = 1024;
  auto [rig, pi] = RigWithPeer(c);
  ExpectSharedArgumentErrors(rig, pi, &Rma::PostRead);
  std::vector<uint8_t> buf(2048);
  EXPECT_EQ(
      rig.rma.PostRead({.dest = rig.Id(pi), .buf = buf.data(), .len = 8, .flags = kRmaRemoteData}),
      Result::kInvalid);
  EXPECT_TRUE(rig.Queued(pi).empty());
}

// With no send op free, or no completion room, posting is kAgain and takes
// nothing; an inject write needs no completion room.
TEST(RmaPostTest, PostingWithoutRoomIsAgain) {
  EndpointConfig c = StageRig::DefaultConfig();
  c.max_send_ops = 2;
  auto [rig, pi] = RigWithPeer(c);
  const PeerId dest = rig.Id(pi);
  uint8_t buf[8] = {};
  rig.ReserveAll();
  EXPECT_EQ(rig.rma.PostWrite({.dest = dest, .buf = buf, .len = 8}), Result::kAgain);
  EXPECT_EQ(rig.rma.PostRead({.dest = dest, .buf = buf, .len = 8}), Result::kAgain);
  EXPECT_EQ(rig.ops.user_free(), 2u) << "no op taken";
  EXPECT_EQ(rig.rma.PostWrite({.dest = dest, .buf = buf, .len = 8, .flags = kRmaInject}),
            Result::kOk);
  rig.completions.Unreserve();
  EXPECT_EQ(rig.rma.PostRead({.dest = dest, .buf = buf, .len = 8}), Result::kOk);
  rig.completions.Unreserve();
  EXPECT_EQ(rig.ops.user_free(), 0u);
  EXPECT_EQ(rig.rma.PostWrite({.dest = dest, .buf = buf, .len = 8}), Result::kAgain);
  EXPECT_EQ(rig.rma.PostRead({.dest = dest, .buf = buf, .len = 8}), Result::kAgain);
  EXPECT_TRUE(rig.completions.Reserve()) << "kAgain for a send op took no completion room";
  EXPECT_EQ(rig.Queued(pi).size(), 2u);
}

// A posted write is queued as a WRITE naming the op (RmaId), the key, the
// address and the length, with its remote data only when asked.
TEST(RmaPostTest, APostedWriteIsQueuedWithItsRmaTemplate) {
  auto [rig, pi] = RigWithPeer();
  const PeerId dest = rig.Id(pi);
  uint8_t buf[100] = {};
  int context;
  ASSERT_EQ(rig.rma.PostWrite({.dest = dest,
                               .buf = buf,
                               .len = 100,
                               .addr = 0x5000,
                               .key = 0xabc,
                               .context = &context,
                               .data = 0x77,
                               .flags = kRmaRemoteData}),
            Result::kOk);
  ASSERT_EQ(rig.rma.PostWrite({.dest = dest, .buf = buf, .len = 10, .key = 1, .data = 0x88}),
            Result::kOk);
  const std::vector<uint32_t> q = rig.Queued(pi);
  ASSERT_EQ(q.size(), 2u);
  const SendOp& op = ExpectPosted(rig, q[0], OpKind::kWrite, wire::RmaOp::kWrite, 0xabc, 0x5000,
                                  100, &context, kCompRma | kCompWrite);
  EXPECT_EQ(op.rma.flags, wire::kRmaFlagRemoteData);
  EXPECT_EQ(op.rma.data, 0x77u);
  EXPECT_EQ(op.src, buf);
  EXPECT_EQ(op.wire_len, 100u);
  EXPECT_FALSE(op.inject);
  EXPECT_EQ(rig.ops[q[1]].rma.flags, 0);
  EXPECT_EQ(rig.ops[q[1]].rma.data, 0u) << "data without kRmaRemoteData does not go";
  EXPECT_EQ(rig.ctx.counters.rma_ops, 2u);
}

// An inject write copies the caller's bytes at once.
TEST(RmaPostTest, AnInjectWriteCopiesItsBytesAtOnce) {
  auto [rig, pi] = RigWithPeer();
  std::vector<uint8_t> buf = Bytes(32, 1);
  const std::vector<uint8_t> sent = buf;
  ASSERT_EQ(rig.rma.PostWrite(
                {.dest = rig.Id(pi), .buf = buf.data(), .len = 32, .key = 1, .flags = kRmaInject}),
            Result::kOk);
  std::fill(buf.begin(), buf.end(), 0);
  const SendOp& op = rig.ops[rig.Queued(pi)[0]];
  EXPECT_TRUE(op.inject);
  EXPECT_NE(op.src, buf.data());
  EXPECT_EQ(std::memcmp(op.src, sent.data(), 32), 0);
}

// A posted read is queued as a one-packet READ_REQ naming the op, the key,
// the address and the length; its answer goes to the caller's buffer.
TEST(RmaPostTest, APostedReadIsQueuedWithItsRmaTemplate) {
  auto [rig, pi] = RigWithPeer();
  uint8_t buf[300];
  int context;
  ASSERT_EQ(rig.rma.PostRead({.dest = rig.Id(pi),
                              .buf = buf,
                              .len = 300,
                              .addr = 0x6000,
                              .key = 0xdef,
                              .context = &context}),
            Result::kOk);
  const std::vector<uint32_t> q = rig.Queued(pi);
  ASSERT_EQ(q.size(), 1u);
  const SendOp& op = ExpectPosted(rig, q[0], OpKind::kRead, wire::RmaOp::kReadReq, 0xdef, 0x6000,
                                  300, &context, kCompRma | kCompRead);
  EXPECT_EQ(op.wire_len, 0u) << "the request carries no bytes";
  EXPECT_EQ(op.dst, buf);
  EXPECT_EQ(rig.ctx.counters.rma_ops, 1u);
}

// ---- Initiator: answers.

// READ_DATA fills the read's buffer segment by segment and completes it
// with the last one; the op ends.
TEST(RmaAnswerTest, ReadDataFillsTheBufferAndCompletesTheRead) {
  auto [rig, pi] = RigWithPeer();
  std::vector<uint8_t> buf(3000, 0);
  int context;
  const uint32_t o = PostAndSend(rig, pi, &Rma::PostRead,
                                 {.dest = rig.Id(pi),
                                  .buf = buf.data(),
                                  .len = 3000,
                                  .addr = 0x6000,
                                  .key = 0xdef,
                                  .context = &context});
  ASSERT_NE(o, kNone);
  const uint32_t id = rig.ops.RmaId(o);
  ASSERT_EQ(rig.ops[o].state, OpState::kWaiting);
  ASSERT_EQ(rig.reliability.tx_active(pi).waiting.front(), o);

  const std::vector<uint8_t> data = Bytes(3000, 21);
  const absl::Span<const uint8_t> all(data);
  rig.rma.ConsumeReadData(pi, Answer(rig, o, wire::RmaOp::kReadData, 0), all.subspan(0, 1000));
  rig.rma.ConsumeReadData(pi, Answer(rig, o, wire::RmaOp::kReadData, 1000),
                          all.subspan(1000, 1000));
  EXPECT_EQ(rig.completions.ready(), 0u) << "not before the last byte";
  rig.rma.ConsumeReadData(pi, Answer(rig, o, wire::RmaOp::kReadData, 2000),
                          all.subspan(2000, 1000));
  EXPECT_EQ(buf, data);
  const Completion c = rig.ExpectOneCompletion(&context);
  EXPECT_EQ(c.flags, kCompRma | kCompRead);
  EXPECT_EQ(c.len, 3000u);
  EXPECT_EQ(c.source, rig.Id(pi));
  EXPECT_TRUE(rig.reliability.tx_active(pi).waiting.empty());
  EXPECT_EQ(rig.ops.FromRmaId(id), kNone) << "the op ended";
  EXPECT_EQ(rig.ctx.counters.protocol_errors, 0u);
}

// An OK RESPONSE completes a write.
TEST(RmaAnswerTest, AnOkResponseCompletesAWrite) {
  auto [rig, pi] = RigWithPeer();
  uint8_t buf[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  int context;
  const uint32_t o = PostAndSend(
      rig, pi, &Rma::PostWrite,
      {.dest = rig.Id(pi), .buf = buf, .len = 8, .addr = 0x10, .key = 0x1234, .context = &context});
  ASSERT_NE(o, kNone);
  ASSERT_EQ(rig.ops[o].state, OpState::kWaiting);
  EXPECT_EQ(rig.completions.ready(), 0u) << "acknowledged is not applied";
  rig.rma.ConsumeResponse(pi, Answer(rig, o, wire::RmaOp::kResponse));
  const Completion c = rig.ExpectOneCompletion(&context);
  EXPECT_EQ(c.flags, kCompRma | kCompWrite);
  EXPECT_EQ(c.len, 8u);
  EXPECT_TRUE(rig.reliability.tx_active(pi).waiting.empty());
  EXPECT_EQ(rig.ops.user_free(), rig.config.max_send_ops);
}

// A refusal completes the write in error: EKEYREJECTED, EACCES or EFAULT by
// status, with a message naming the key and the peer.
TEST(RmaAnswerTest, ARefusedWriteCompletesInErrorWithTheStatusErrno) {
  struct Case {
    wire::RmaStatus status;
    int err;
    const char* words;
  };
  const Case cases[] = {
      {wire::RmaStatus::kBadKey, EKEYREJECTED, "no region with this key"},
      {wire::RmaStatus::kNoAccess, EACCES, "does not grant this access"},
      {wire::RmaStatus::kOutOfRange, EFAULT, "outside the region"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.words);
    auto [rig, pi] = RigWithPeer();
    uint8_t buf[8] = {};
    int context;
    const uint32_t o = PostAndSend(rig, pi, &Rma::PostWrite,
                                   {.dest = rig.Id(pi),
                                    .buf = buf,
                                    .len = 8,
                                    .addr = 0x10,
                                    .key = 0x1234,
                                    .context = &context});
    ASSERT_NE(o, kNone);
    rig.rma.ConsumeResponse(pi, Answer(rig, o, wire::RmaOp::kResponse, 0, k.status));
    EXPECT_EQ(rig.completions.ready(), 0u);
    const ErrorCompletion e = rig.ExpectOneError(k.err, &context);
    EXPECT_EQ(e.op.flags, kCompRma | kCompWrite);
    const std::string m = e.message;
    EXPECT_NE(m.find("RMA write key 0x0000000000001234"), std::string::npos) << m;
    EXPECT_NE(m.find("10.0.0.2:6000"), std::string::npos) << m;
    EXPECT_NE(m.find(k.words), std::string::npos) << m;
    EXPECT_EQ(rig.ctx.counters.rma_errors, 1u);
    EXPECT_EQ(rig.ctx.counters.ops_failed, 1u);
    EXPECT_TRUE(rig.reliability.tx_active(pi).waiting.empty());
  }
}

// An inject write completes nowhere when applied; refused, its error goes
// to the error queue without a reservation.
TEST(RmaAnswerTest, AnInjectWriteCompletesNowhereAndItsRefusalIsStillReported) {
  auto [rig, pi] = RigWithPeer();
  const PeerId dest = rig.Id(pi);
  uint8_t buf[8] = {};
  ASSERT_EQ(rig.rma.PostWrite({.dest = dest, .buf = buf, .len = 8, .key = 3, .flags = kRmaInject}),
            Result::kOk);
  ASSERT_EQ(rig.rma.PostWrite({.dest = dest, .buf = buf, .len = 8, .key = 4, .flags = kRmaInject}),
            Result::kOk);
  const std::vector<uint32_t> q = rig.Queued(pi);
  ASSERT_EQ(q.size(), 2u);
  rig.SendAndAcknowledge(pi);
  rig.rma.ConsumeResponse(pi, Answer(rig, q[0], wire::RmaOp::kResponse));
  EXPECT_EQ(rig.completions.ready(), 0u);
  rig.rma.ConsumeResponse(pi,
                          Answer(rig, q[1], wire::RmaOp::kResponse, 0, wire::RmaStatus::kBadKey));
  rig.ExpectOneError(EKEYREJECTED, nullptr);
  EXPECT_EQ(rig.ctx.counters.rma_errors, 1u);
  EXPECT_TRUE(rig.reliability.tx_active(pi).waiting.empty());
  EXPECT_EQ(rig.ops.user_free(), rig.config.max_send_ops);
}

// A refused read completes in error the same way.
TEST(RmaAnswerTest, ARefusedReadCompletesInError) {
  auto [rig, pi] = RigWithPeer();
  uint8_t buf[8] = {};
  const uint32_t o =
      PostAndSend(rig, pi, &Rma::PostRead, {.dest = rig.Id(pi), .buf = buf, .len = 8, .key = 0x99});
  ASSERT_NE(o, kNone);
  rig.rma.ConsumeResponse(pi,
                          Answer(rig, o, wire::RmaOp::kResponse, 0, wire::RmaStatus::kOutOfRange));
  const ErrorCompletion e = rig.ExpectOneError(EFAULT, nullptr);
  EXPECT_EQ(e.op.flags, kCompRma | kCompRead);
  EXPECT_NE(std::string(e.message).find("RMA read key 0x0000000000000099"), std::string::npos)
      << e.message;
  EXPECT_EQ(rig.ctx.counters.rma_errors, 1u);
}

// READ_DATA naming a stale op, another key, another length or the wrong
// offset, or coming from another peer, is a protocol error: nothing lands,
// nothing completes, the read still waits.
TEST(RmaAnswerTest, ReadDataThatDoesNotMatchItsReadIsAProtocolError) {
  auto [rig, pi] = RigWithPeer();
  const uint32_t pj = rig.AddOtherPeer();
  std::vector<uint8_t> buf(16, 0);
  ASSERT_EQ(rig.rma.PostRead({.dest = rig.Id(pi), .buf = buf.data(), .len = 16, .key = 5}),
            Result::kOk);
  const uint32_t o = rig.Queued(pi)[0];
  const std::vector<uint8_t> data = Bytes(16, 1);
  const absl::Span<const uint8_t> all(data);
  rig.rma.ConsumeReadData(pi, Answer(rig, o, wire::RmaOp::kReadData), all);
  EXPECT_EQ(rig.ctx.counters.protocol_errors, 1u) << "not yet waiting for its data";
  rig.SendAndAcknowledge(pi);

  wire::RmaFields stale = Answer(rig, o, wire::RmaOp::kReadData);
  stale.rma_id += 1u << OpTable::kRmaIdSlotBits;  // the slot's previous or next op
  rig.rma.ConsumeReadData(pi, stale, all);
  wire::RmaFields key = Answer(rig, o, wire::RmaOp::kReadData);
  key.key = 6;
  rig.rma.ConsumeReadData(pi, key, all);
  wire::RmaFields length = Answer(rig, o, wire::RmaOp::kReadData);
  length.total_length = 8;
  rig.rma.ConsumeReadData(pi, length, all.subspan(0, 8));
  rig.rma.ConsumeReadData(pi, Answer(rig, o, wire::RmaOp::kReadData, 8), all.subspan(8, 8));
  rig.rma.ConsumeReadData(pj, Answer(rig, o, wire::RmaOp::kReadData), all);
  EXPECT_EQ(rig.ctx.counters.protocol_errors, 6u);
  EXPECT_EQ(buf, std::vector<uint8_t>(16, 0));
  EXPECT_EQ(rig.completions.ready() + rig.completions.errors_ready(), 0u);
  EXPECT_EQ(rig.ops[o].state, OpState::kWaiting);
  EXPECT_EQ(rig.reliability.tx_active(pi).waiting.front(), o);
}

// A RESPONSE naming a stale op, another key or another length, an OK one
// for a read, or one for a write still in flight, is a protocol error and
// completes nothing.
TEST(RmaAnswerTest, AResponseThatDoesNotMatchItsOpIsAProtocolError) {
  auto [rig, pi] = RigWithPeer();
  const PeerId dest = rig.Id(pi);
  uint8_t buf[8] = {};
  ASSERT_EQ(rig.rma.PostWrite({.dest = dest, .buf = buf, .len = 8, .key = 5}), Result::kOk);
  const uint32_t w = rig.Queued(pi)[0];
  rig.rma.ConsumeResponse(pi, Answer(rig, w, wire::RmaOp::kResponse));
  EXPECT_EQ(rig.ctx.counters.protocol_errors, 1u) << "the write is not yet acknowledged";
  ASSERT_EQ(rig.rma.PostRead({.dest = dest, .buf = buf, .len = 8, .key = 5}), Result::kOk);
  const uint32_t r = rig.Queued(pi)[1];
  rig.SendAndAcknowledge(pi);
  ASSERT_EQ(rig.ops[w].state, OpState::kWaiting);
  ASSERT_EQ(rig.ops[r].state, OpState::kWaiting);

  wire::RmaFields stale = Answer(rig, w, wire::RmaOp::kResponse);
  stale.rma_id += 1u << OpTable::kRmaIdSlotBits;
  rig.rma.ConsumeResponse(pi, stale);
  wire::RmaFields key = Answer(rig, w, wire::RmaOp::kResponse);
  key.key = 6;
  rig.rma.ConsumeResponse(pi, key);
  wire::RmaFields length = Answer(rig, w, wire::RmaOp::kResponse);
  length.total_length = 9;
  rig.rma.ConsumeResponse(pi, length);
  rig.rma.ConsumeResponse(pi, Answer(rig, r, wire::RmaOp::kResponse));  // OK: not a read's answer
  EXPECT_EQ(rig.ctx.counters.protocol_errors, 5u);
  EXPECT_EQ(rig.completions.ready() + rig.completions.errors_ready(), 0u);
  EXPECT_EQ(rig.ctx.counters.rma_errors, 0u);
  EXPECT_EQ(rig.reliability.tx_active(pi).waiting.size(), 2u);
}

}  // namespace
}  // namespace bypass::rdm
