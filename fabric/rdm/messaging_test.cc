// The Messaging stage's own tests: its calls made directly on the stages the
// engine builds (stage_rig.h), with the peer's messages fed as the engine
// would hand them over in order, and the results read from the completion
// queue and the peer's stream. End to end behaviour is endpoint_test,
// recv_features_test and rendezvous_test.
#include "fabric/rdm/messaging.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "fabric/rdm/stage_rig.h"
#include "gtest/gtest.h"

namespace bypass::rdm {
namespace {

using testing::Bytes;
using testing::RigWithPeer;
using testing::StageRig;

// The header of the peer's message msg_id: eager, untagged unless flags say.
wire::MsgFields Msg(uint32_t msg_id, uint64_t total, uint16_t flags = 0, uint64_t tag = 0,
                    uint64_t data = 0) {
  return {.msg_id = msg_id, .msg_flags = flags, .total_length = total, .tag = tag, .data = data};
}

// The peer's request to send message msg_id of `total` bytes (rendezvous).
wire::MsgFields RequestToSend(uint32_t msg_id, uint64_t total) {
  return {.msg_id = msg_id, .protocol = wire::MsgProtocol::kRendezvous, .total_length = total};
}

// Feeds the peer's message m with `bytes`, in segments as it would send them
// (from segment `from` on); false if a segment was refused.
bool Feed(StageRig& rig, uint32_t pi, wire::MsgFields m, const std::vector<uint8_t>& bytes,
          size_t from = 0) {
  if (bytes.empty()) return rig.messaging.ConsumeData(pi, m, {});
  for (size_t off = from * StageRig::kSeg; off < bytes.size(); off += StageRig::kSeg) {
    m.offset = off;
    const size_t n = std::min<size_t>(StageRig::kSeg, bytes.size() - off);
    if (!rig.messaging.ConsumeData(pi, m, absl::MakeConstSpan(bytes).subspan(off, n))) {
      return false;
    }
  }
  return true;
}

// Segment `index` alone of message m.
bool FeedSegment(StageRig& rig, uint32_t pi, wire::MsgFields m, const std::vector<uint8_t>& bytes,
                 size_t index) {
  m.offset = index * StageRig::kSeg;
  const size_t n = std::min<size_t>(StageRig::kSeg, bytes.size() - m.offset);
  return rig.messaging.ConsumeData(pi, m, absl::MakeConstSpan(bytes).subspan(m.offset, n));
}

// The first op of `kind` on the peer's stream; kNone.
uint32_t QueuedOf(StageRig& rig, uint32_t pi, OpKind kind) {
  for (uint32_t o : rig.Queued(pi)) {
    if (rig.ops[o].kind == kind) return o;
  }
  return kNone;
}

// The RMA header of a rendezvous message's pull (READ_REQ) or its bytes
// (READ_DATA at offset): MESSAGE, the pull's rma_id, the msg_id as key.
wire::RmaFields MsgRma(wire::RmaOp op, uint32_t rma_id, uint64_t msg_id, uint64_t total,
                       uint64_t offset = 0) {
  return {.op = op,
          .flags = wire::kRmaFlagMessage,
          .rma_id = rma_id,
          .key = msg_id,
          .total_length = total,
          .offset = offset};
}

// The READ_DATA header the peer answers pull o with, at offset.
wire::RmaFields PullData(StageRig& rig, uint32_t o, uint64_t offset) {
  return MsgRma(wire::RmaOp::kReadData, rig.ops.RmaId(o), rig.ops[o].rma.key, rig.ops[o].len,
                offset);
}

// The peer answers pull o with `bytes` (at most the pull's length), in segments.
void AnswerPull(StageRig& rig, uint32_t pi, uint32_t o, const std::vector<uint8_t>& bytes) {
  const uint64_t len = rig.ops[o].len;
  if (len == 0) rig.messaging.ConsumePulledData(pi, PullData(rig, o, 0), {});
  for (uint64_t off = 0; off < len; off += StageRig::kRmaSeg) {
    const size_t n = std::min<uint64_t>(StageRig::kRmaSeg, len - off);
    rig.messaging.ConsumePulledData(pi, PullData(rig, o, off),
                                    absl::MakeConstSpan(bytes).subspan(off, n));
  }
}

// A plain receive into buf.
RecvRequest Recv(std::vector<uint8_t>* buf, void* context, PeerId source = kAnyPeer) {
  return RecvRequest{.source = source, .buf = buf->data(), .len = buf->size(), .context = context};
}

// A tagged receive into buf.
RecvRequest TaggedRecv(std::vector<uint8_t>* buf, void* context, uint64_t tag, uint64_t ignore = 0,
                       PeerId source = kAnyPeer) {
  return RecvRequest{.source = source,
                     .buf = buf->data(),
                     .len = buf->size(),
                     .context = context,
                     .tagged = true,
                     .tag = tag,
                     .ignore = ignore};
}

// A peek (kRecvPeek with `also`: kRecvClaim, kRecvDiscard) at any untagged
// message.
RecvRequest Peek(void* context, uint32_t also = 0) {
  return RecvRequest{.context = context, .flags = kRecvPeek | also};
}

// A multi-receive into buf.
RecvRequest MultiRecv(std::vector<uint8_t>* buf, void* context) {
  return RecvRequest{
      .buf = buf->data(), .len = buf->size(), .context = context, .flags = kRecvMulti};
}

// A claim, into buf, of the message a peek with the same context claimed.
RecvRequest ClaimRecv(std::vector<uint8_t>* buf, void* context) {
  return RecvRequest{
      .buf = buf->data(), .len = buf->size(), .context = context, .flags = kRecvClaim};
}

// Posts a send of b to peer pi.
Result Send(StageRig& rig, uint32_t pi, const std::vector<uint8_t>& b, uint32_t flags = 0) {
  return rig.messaging.PostSend(
      {.dest = rig.Id(pi), .buf = b.data(), .len = b.size(), .flags = flags});
}

// The msg_ids of the ops on the peer's stream, oldest first.
std::vector<uint32_t> QueuedMsgIds(StageRig& rig, uint32_t pi) {
  std::vector<uint32_t> ids;
  for (uint32_t o : rig.Queued(pi)) ids.push_back(rig.ops[o].msg.msg_id);
  return ids;
}

// Expects exactly one completion ready: the receive `context` took message
// m whole into buf, which starts with m's bytes (why: the failure's note).
Completion ExpectReceived(StageRig& rig, const void* context, const std::vector<uint8_t>& m,
                          const std::vector<uint8_t>& buf, const char* why = "") {
  const Completion got = rig.ExpectOneCompletion(context, why);
  EXPECT_EQ(got.len, m.size()) << why;
  EXPECT_EQ(got.buf, buf.data()) << why;
  EXPECT_TRUE(buf.size() >= m.size() && std::equal(m.begin(), m.end(), buf.begin()))
      << "the message's bytes are not at the start of the buffer";
  return got;
}

// Two plain receives posted in order: into a (a_len bytes, context &ca),
// then into b (b_len bytes, context &cb).
struct TwoReceives {
  TwoReceives(StageRig& rig, size_t a_len, size_t b_len) : a(a_len), b(b_len) {
    EXPECT_EQ(rig.messaging.PostRecv(Recv(&a, &ca)), Result::kOk);
    EXPECT_EQ(rig.messaging.PostRecv(Recv(&b, &cb)), Result::kOk);
  }
  std::vector<uint8_t> a, b;
  int ca = 0, cb = 0;
};

// The rig's config with room for 3 completion records (max_send_ops 1,
// max_posted_recvs 2).
EndpointConfig RoomForThreeRecords() {
  EndpointConfig c = StageRig::DefaultConfig();
  c.max_send_ops = 1;
  c.max_posted_recvs = 2;
  return c;
}

// The rig's config with rendezvous_threshold 4096: larger sends go rendezvous.
EndpointConfig RendezvousAbove4096() {
  EndpointConfig c = StageRig::DefaultConfig();
  c.rendezvous_threshold = 4096;
  return c;
}

// Feeds n whole messages of len bytes from the peer, msg_ids 0.., the bytes
// of message i Bytes(len, seed + i); returns their bytes.
std::vector<std::vector<uint8_t>> FeedMessages(StageRig& rig, uint32_t pi, uint32_t n, size_t len,
                                               uint8_t seed) {
  std::vector<std::vector<uint8_t>> m;
  for (uint32_t i = 0; i < n; ++i) {
    m.push_back(Bytes(len, static_cast<uint8_t>(seed + i)));
    EXPECT_TRUE(Feed(rig, pi, Msg(i, len), m[i])) << "message " << i;
  }
  return m;
}

// Expects completion c to report message m landed at offset `at` of the
// multi-receive buffer big (why: the failure's note).
void ExpectLandedAt(const Completion& c, const std::vector<uint8_t>& m,
                    const std::vector<uint8_t>& big, size_t at, const char* why = "") {
  EXPECT_EQ(c.buf, big.data() + at) << why;
  EXPECT_TRUE(std::equal(m.begin(), m.end(), big.begin() + at)) << why;
}

// ---- PostSend.

// Sends to no peer, of no bytes, or longer than inject_size (inject, buffered)
// or max_msg_size are refused before anything is queued.
TEST(PostSendTest, RefusesAnUnknownPeerANullBufferAndWhatIsTooLong) {
  EndpointConfig c = StageRig::DefaultConfig();
  c.max_msg_size = 1 << 20;
  auto [rig, pi] = RigWithPeer(c);
  const PeerId peer = rig.Id(pi);
  std::vector<uint8_t> big(c.max_msg_size + 1);
  EXPECT_EQ(rig.messaging.PostSend({.dest = PeerId{}, .buf = big.data(), .len = 10}),
            Result::kInvalid);
  EXPECT_EQ(rig.messaging.PostSend({.dest = PeerId{5}, .buf = big.data(), .len = 10}),
            Result::kInvalid)
      << "a slot with no peer";
  EXPECT_EQ(rig.messaging.PostSend({.dest = peer, .buf = nullptr, .len = 1}), Result::kInvalid);
  EXPECT_EQ(rig.messaging.PostSend(
                {.dest = peer, .buf = big.data(), .len = c.inject_size + 1, .flags = kSendInject}),
            Result::kTooLong);
  EXPECT_EQ(
      rig.messaging.PostSend(
          {.dest = peer, .buf = big.data(), .len = c.inject_size + 1, .flags = kSendBuffered}),
      Result::kTooLong);
  EXPECT_EQ(rig.messaging.PostSend({.dest = peer, .buf = big.data(), .len = big.size()}),
            Result::kTooLong);
  EXPECT_TRUE(rig.reliability.tx_active(pi).ops.empty());
  EXPECT_EQ(rig.ops.user_free(), c.max_send_ops);
  // What is allowed: no bytes from no buffer, and exactly the limits.
  EXPECT_EQ(rig.messaging.PostSend({.dest = peer, .buf = nullptr, .len = 0}), Result::kOk);
  EXPECT_EQ(rig.messaging.PostSend(
                {.dest = peer, .buf = big.data(), .len = c.inject_size, .flags = kSendInject}),
            Result::kOk);
  EXPECT_EQ(rig.messaging.PostSend({.dest = peer, .buf = big.data(), .len = c.max_msg_size}),
            Result::kOk);
  EXPECT_EQ(rig.messaging.PostSend({.dest = PeerId{}, .buf = nullptr, .len = 0}), Result::kInvalid);
}

// Each send takes one of max_send_ops slots until it completes: the next
// send is kAgain, and the slots come back when the sends are acknowledged.
TEST(PostSendTest, ReturnsAgainWhenTheSendSlotsRunOut) {
  EndpointConfig c = StageRig::DefaultConfig();
  c.max_send_ops = 2;
  auto [rig, pi] = RigWithPeer(c);
  const std::vector<uint8_t> b = Bytes(10, 1);
  ASSERT_EQ(Send(rig, pi, b), Result::kOk);
  ASSERT_EQ(Send(rig, pi, b), Result::kOk);
  EXPECT_EQ(Send(rig, pi, b), Result::kAgain);
  EXPECT_EQ(Send(rig, pi, b, kSendInject), Result::kAgain) << "an inject takes a slot too";
  EXPECT_EQ(rig.Queued(pi).size(), 2u);
  ASSERT_EQ(rig.SendAndAcknowledge(pi), 2u);
  EXPECT_EQ(rig.Drain().size(), 2u);
  EXPECT_EQ(Send(rig, pi, b), Result::kOk);
  EXPECT_EQ(QueuedMsgIds(rig, pi), std::vector<uint32_t>{2}) << "the refused sends spent no number";
}

// A send reserves its completion when posted: with the completion queue full
// it is kAgain (an inject, which has none, still goes) and spends nothing.
TEST(PostSendTest, ReturnsAgainWhenTheCompletionQueueIsFullButAnInjectGoes) {
  EndpointConfig c = StageRig::DefaultConfig();
  c.max_send_ops = 4;
  c.max_posted_recvs = 1;  // room for 5 records
  auto [rig, pi] = RigWithPeer(c);
  // Peeks that find nothing fill the queue with unread errors.
  int peek;
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(rig.messaging.PostRecv(Peek(&peek)), Result::kOk);
  }
  const std::vector<uint8_t> b = Bytes(10, 1);
  EXPECT_EQ(Send(rig, pi, b), Result::kAgain);
  EXPECT_EQ(Send(rig, pi, b, kSendBuffered), Result::kAgain)
      << "a buffered send completes at once: it needs the room now";
  EXPECT_EQ(rig.ops.user_free(), 4u);
  EXPECT_EQ(Send(rig, pi, b, kSendInject), Result::kOk);
  ErrorCompletion one[1];
  ASSERT_EQ(rig.completions.PollErrors(one), 1u);
  EXPECT_EQ(Send(rig, pi, b), Result::kOk);
  EXPECT_EQ(QueuedMsgIds(rig, pi), (std::vector<uint32_t>{0, 1}));
}

// Each send queues one eager op on the peer's stream, numbered 0, 1, 2... in
// post order, with the tag only when tagged and the data only with kSendRemoteData.
TEST(PostSendTest, QueuesOneOpPerMessageNumberedInPostOrder) {
  auto [rig, pi] = RigWithPeer();
  const PeerId peer = rig.Id(pi);
  const std::vector<uint8_t> b = Bytes(100, 1);
  const uint8_t* const src = b.data();
  int c0, c1, c2;
  const SendRequest sends[] = {
      {.dest = peer, .buf = src, .len = 100, .context = &c0, .tag = 99, .data = 5},
      {.dest = peer, .buf = src, .len = 50, .context = &c1, .tag = 0x1234, .flags = kSendTagged},
      {.dest = peer, .buf = src, .len = 0, .context = &c2, .data = 77, .flags = kSendRemoteData},
  };
  for (const SendRequest& s : sends) ASSERT_EQ(rig.messaging.PostSend(s), Result::kOk);
  const std::vector<uint32_t> q = rig.Queued(pi);
  ASSERT_EQ(q.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    const SendOp& op = rig.ops[q[i]];
    EXPECT_EQ(op.kind, OpKind::kMsg) << i;
    EXPECT_EQ(op.type, wire::PacketType::kData) << i;
    EXPECT_EQ(op.msg.msg_id, i);
    EXPECT_EQ(op.msg.protocol, wire::MsgProtocol::kEager) << i;
    EXPECT_EQ(op.peer, pi);
  }
  const SendOp& plain = rig.ops[q[0]];
  EXPECT_EQ(plain.context, &c0);
  EXPECT_EQ(plain.msg.msg_flags, 0u);
  EXPECT_EQ(plain.msg.tag, 0u) << "an untagged send carries no tag";
  EXPECT_EQ(plain.msg.data, 0u) << "nor data without kSendRemoteData";
  EXPECT_EQ(plain.msg.total_length, 100u);
  EXPECT_EQ(plain.wire_len, 100u);
  EXPECT_EQ(plain.src, b.data()) << "not copied: the caller keeps the buffer";
  EXPECT_EQ(plain.comp_flags, kCompSend | kCompMsg);
  const SendOp& tagged = rig.ops[q[1]];
  EXPECT_EQ(tagged.msg.msg_flags, wire::kMsgTagged);
  EXPECT_EQ(tagged.msg.tag, 0x1234u);
  EXPECT_EQ(tagged.comp_flags, kCompSend | kCompMsg | kCompTagged);
  const SendOp& with_data = rig.ops[q[2]];
  EXPECT_EQ(with_data.msg.msg_flags, wire::kMsgRemoteData);
  EXPECT_EQ(with_data.msg.data, 77u);
  EXPECT_EQ(with_data.msg.total_length, 0u);
  // The numbers go on the wire in that order.
  const std::vector<wire::View> sent = rig.BuildPackets(pi);
  ASSERT_EQ(sent.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(sent[i].common.type, wire::PacketType::kData);
    EXPECT_EQ(sent[i].msg.msg_id, i);
  }
  EXPECT_EQ(sent[1].msg.tag, 0x1234u);
  EXPECT_EQ(sent[2].msg.data, 77u);
}

// A buffered send (kSendBuffered) completes at once, and what goes on the
// wire is the bytes it had then: the caller may reuse its buffer at once.
TEST(PostSendTest, ABufferedSendCompletesAtOnceAndSendsTheBytesItCopied) {
  auto [rig, pi] = RigWithPeer();
  std::vector<uint8_t> b = Bytes(100, 3);
  const std::vector<uint8_t> original = b;
  int ctx;
  ASSERT_EQ(rig.messaging.PostSend({.dest = rig.Id(pi),
                                    .buf = b.data(),
                                    .len = b.size(),
                                    .context = &ctx,
                                    .flags = kSendBuffered}),
            Result::kOk);
  const Completion done = rig.ExpectOneCompletion(&ctx, "complete before anything is sent");
  EXPECT_EQ(done.flags, kCompSend | kCompMsg);
  EXPECT_EQ(done.len, 100u);
  std::memset(b.data(), 0xee, b.size());
  const std::vector<wire::View> sent = rig.BuildPackets(pi);
  ASSERT_EQ(sent.size(), 1u);
  ASSERT_EQ(sent[0].common.type, wire::PacketType::kData);
  EXPECT_EQ(std::vector<uint8_t>(sent[0].payload.begin(), sent[0].payload.end()), original);
  rig.AckAll(pi);
  EXPECT_EQ(rig.completions.ready(), 0u) << "no second completion when acknowledged";
  EXPECT_TRUE(rig.reliability.tx_active(pi).ops.empty());
  EXPECT_EQ(rig.ops.user_free(), rig.config.max_send_ops);
}

// Above rendezvous_threshold a send is a request to send: one DATA packet,
// protocol RENDEZVOUS, no payload, the message's length; at it, eager.
TEST(PostSendTest, AboveTheRendezvousThresholdItQueuesARequestToSend) {
  auto [rig, pi] = RigWithPeer(RendezvousAbove4096());
  const std::vector<uint8_t> b = Bytes(5000, 4);
  ASSERT_EQ(rig.messaging.PostSend({.dest = rig.Id(pi), .buf = b.data(), .len = 4096}),
            Result::kOk);
  ASSERT_EQ(Send(rig, pi, b), Result::kOk);
  const std::vector<uint32_t> q = rig.Queued(pi);
  ASSERT_EQ(q.size(), 2u);
  EXPECT_EQ(rig.ops[q[0]].kind, OpKind::kMsg) << "at the threshold: eager";
  const SendOp& op = rig.ops[q[1]];
  EXPECT_EQ(op.kind, OpKind::kRndvRequest);
  EXPECT_EQ(op.msg.protocol, wire::MsgProtocol::kRendezvous);
  EXPECT_EQ(op.msg.msg_id, 1u);
  EXPECT_EQ(op.msg.total_length, 5000u);
  EXPECT_EQ(op.wire_len, 0u);
  EXPECT_EQ(op.len, 5000u);
  EXPECT_EQ(rig.ctx.counters.rendezvous_sent, 1u);
  const std::vector<wire::View> sent = rig.BuildPackets(pi);
  ASSERT_EQ(sent.size(), 4u) << "three segments of the eager one, then the request";
  EXPECT_EQ(sent[3].common.type, wire::PacketType::kData);
  EXPECT_EQ(sent[3].msg.protocol, wire::MsgProtocol::kRendezvous);
  EXPECT_EQ(sent[3].msg.total_length, 5000u);
  EXPECT_TRUE(sent[3].payload.empty());
}

// ---- Matching.

// A message takes the first posted receive of its kind whose source is the
// sender or any and whose tag equals its own outside the ignore mask.
TEST(MatchingTest, AMessageTakesTheFirstReceiveBySourceAndTagUnderTheMask) {
  auto [rig, pi] = RigWithPeer();
  const PeerId peer = rig.Id(pi);
  const PeerId other = rig.Id(rig.AddOtherPeer());
  std::vector<uint8_t> b0(100), b1(100), b2(100), b3(100);
  int c0, c1, c2, c3;
  ASSERT_EQ(rig.messaging.PostRecv(TaggedRecv(&b0, &c0, 0x10ab, 0, other)), Result::kOk);
  ASSERT_EQ(rig.messaging.PostRecv(Recv(&b1, &c1)), Result::kOk);
  ASSERT_EQ(rig.messaging.PostRecv(TaggedRecv(&b2, &c2, 0x1000, 0xff)), Result::kOk);
  ASSERT_EQ(rig.messaging.PostRecv(TaggedRecv(&b3, &c3, 0x10ab, 0, peer)), Result::kOk);
  const std::vector<uint8_t> m = Bytes(100, 1);
  ASSERT_TRUE(Feed(rig, pi, Msg(0, 100, wire::kMsgTagged, 0x10ab), m));
  ASSERT_TRUE(Feed(rig, pi, Msg(1, 100, wire::kMsgTagged, 0x10ab), m));
  ASSERT_TRUE(Feed(rig, pi, Msg(2, 100, wire::kMsgTagged, 0x20ab), m));
  ASSERT_TRUE(Feed(rig, pi, Msg(3, 100), m));
  const std::vector<Completion> got = rig.Drain();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].context, &c2) << "the receive directed to another peer is passed over";
  EXPECT_EQ(got[0].tag, 0x10abu);
  EXPECT_EQ(got[0].flags, kCompRecv | kCompMsg | kCompTagged);
  EXPECT_EQ(got[0].source, peer);
  EXPECT_EQ(got[0].buf, b2.data());
  EXPECT_EQ(got[1].context, &c3);
  EXPECT_EQ(got[1].source, peer);
  EXPECT_EQ(got[2].context, &c1) << "an untagged message takes the untagged receive";
  EXPECT_EQ(got[2].flags, kCompRecv | kCompMsg);
  EXPECT_EQ(b1, m);
  EXPECT_EQ(rig.ctx.counters.unexpected_msgs, 1u) << "tag 0x20ab matched nothing";
  EXPECT_TRUE(rig.messaging.CancelRecv(&c0)) << "still waiting for the other peer";
  EXPECT_EQ(rig.DrainErrors().size(), 1u);
}

// Tagged and untagged messages are matched in separate queues: an untagged
// message never takes a tagged receive, even one that ignores every tag bit.
TEST(MatchingTest, AnUntaggedMessageNeverMatchesATaggedReceive) {
  auto [rig, pi] = RigWithPeer();
  std::vector<uint8_t> tb(100), ub(100);
  int tagged_ctx, untagged_ctx;
  ASSERT_EQ(rig.messaging.PostRecv(TaggedRecv(&tb, &tagged_ctx, 0, ~uint64_t{0})), Result::kOk);
  const std::vector<uint8_t> m0 = Bytes(40, 1), m1 = Bytes(60, 2);
  ASSERT_TRUE(Feed(rig, pi, Msg(0, 40), m0));
  EXPECT_EQ(rig.completions.ready(), 0u);
  EXPECT_EQ(rig.ctx.counters.unexpected_msgs, 1u);
  ASSERT_TRUE(Feed(rig, pi, Msg(1, 60, wire::kMsgTagged, 0x55), m1));
  EXPECT_EQ(rig.ExpectOneCompletion(&tagged_ctx, "the tagged message took it").len, 60u);
  ASSERT_EQ(rig.messaging.PostRecv(Recv(&ub, &untagged_ctx)), Result::kOk);
  ExpectReceived(rig, &untagged_ctx, m0, ub);
}

// Segments of one message land one after another in the receive buffer; the
// receive completes with the last.
TEST(MatchingTest, SegmentsReassembleAcrossCallsIntoTheReceiveBuffer) {
  auto [rig, pi] = RigWithPeer();
  std::vector<uint8_t> buf(3000);
  int ctx;
  ASSERT_EQ(rig.messaging.PostRecv(Recv(&buf, &ctx)), Result::kOk);
  const std::vector<uint8_t> m = Bytes(3000, 5);  // three segments
  ASSERT_TRUE(FeedSegment(rig, pi, Msg(0, 3000), m, 0));
  EXPECT_TRUE(rig.messaging.Receiving(pi));
  ASSERT_TRUE(FeedSegment(rig, pi, Msg(0, 3000), m, 1));
  EXPECT_EQ(rig.completions.ready(), 0u) << "not before the last segment";
  ASSERT_TRUE(FeedSegment(rig, pi, Msg(0, 3000), m, 2));
  EXPECT_FALSE(rig.messaging.Receiving(pi));
  ExpectReceived(rig, &ctx, m, buf);
  EXPECT_EQ(rig.messaging.RecvSlotsFree(), rig.config.max_posted_recvs);
}

// A message longer than its receive fills the buffer, writes nothing past
// it, and completes as an EMSGSIZE error with the overflow in olen.
TEST(MatchingTest, AMessageLongerThanTheBufferCompletesTruncated) {
  auto [rig, pi] = RigWithPeer();
  std::vector<uint8_t> buf(3000, 0x5a);
  int ctx;
  ASSERT_EQ(rig.messaging.PostRecv({.buf = buf.data(), .len = 1500, .context = &ctx}), Result::kOk);
  const std::vector<uint8_t> m = Bytes(2500, 6);
  ASSERT_TRUE(Feed(rig, pi, Msg(0, 2500), m));
  EXPECT_EQ(rig.completions.ready(), 0u);
  const ErrorCompletion err = rig.ExpectOneError(EMSGSIZE, &ctx);
  EXPECT_EQ(err.olen, 1000u);
  EXPECT_EQ(err.op.len, 1500u);
  EXPECT_TRUE(std::equal(m.begin(), m.begin() + 1500, buf.begin()));
  for (size_t i = 1500; i < buf.size(); ++i) ASSERT_EQ(buf[i], 0x5a) << "written past the receive";
  EXPECT_EQ(rig.ctx.counters.truncated, 1u);
}

// A message with no receive waits in the unexpected queue; a receive posted
// later takes it at once.
TEST(MatchingTest, AMessageWithNoReceiveWaitsUnexpectedForALaterReceive) {
  auto [rig, pi] = RigWithPeer();
  const std::vector<uint8_t> m = Bytes(2000, 7);
  ASSERT_TRUE(Feed(rig, pi, Msg(0, 2000, wire::kMsgRemoteData, 0, 99), m));
  EXPECT_EQ(rig.ctx.counters.unexpected_msgs, 1u);
  EXPECT_EQ(rig.ctx.counters.unexpected_depth, 1u);
  EXPECT_EQ(rig.ctx.counters.unexpected_bytes, rig.config.unexpected_chunk_bytes);
  EXPECT_EQ(rig.completions.ready(), 0u);
  std::vector<uint8_t> buf(2000);
  int ctx;
  ASSERT_EQ(rig.messaging.PostRecv(Recv(&buf, &ctx)), Result::kOk);
  const Completion got = ExpectReceived(rig, &ctx, m, buf, "at once");
  EXPECT_EQ(got.flags, kCompRecv | kCompMsg | kCompRemoteData);
  EXPECT_EQ(got.data, 99u);
  EXPECT_EQ(got.source, rig.Id(pi));
  EXPECT_EQ(rig.ctx.counters.unexpected_depth, 0u);
  EXPECT_EQ(rig.ctx.counters.unexpected_bytes, 0u);
  EXPECT_EQ(rig.messaging.RecvSlotsFree(), rig.config.max_posted_recvs);
}

// A receive posted while an unexpected message is still arriving takes what
// came so far and the rest lands in its buffer directly.
TEST(MatchingTest, AReceivePostedMidMessageTakesTheRestDirectly) {
  auto [rig, pi] = RigWithPeer();
  const std::vector<uint8_t> m = Bytes(3000, 8);
  ASSERT_TRUE(FeedSegment(rig, pi, Msg(0, 3000), m, 0));
  EXPECT_EQ(rig.ctx.counters.unexpected_depth, 1u);
  std::vector<uint8_t> buf(3000);
  int ctx;
  ASSERT_EQ(rig.messaging.PostRecv(Recv(&buf, &ctx)), Result::kOk);
  EXPECT_EQ(rig.completions.ready(), 0u);
  EXPECT_EQ(rig.ctx.counters.unexpected_depth, 0u) << "it left the unexpected queue";
  ASSERT_TRUE(Feed(rig, pi, Msg(0, 3000), m, /*from=*/1));
  ExpectReceived(rig, &ctx, m, buf);
}

// With the unexpected queue full a message is refused (false: not consumed,
// no number spent) and is taken when it comes again once there is room.
TEST(MatchingTest, AFullUnexpectedQueueRefusesAMessageUntilThereIsRoom) {
  EndpointConfig c = StageRig::DefaultConfig();
  c.max_unexpected_msgs = 2;
  auto [rig, pi] = RigWithPeer(c);
  const std::vector<uint8_t> m0 = Bytes(100, 0), m1 = Bytes(100, 1), m2 = Bytes(100, 2);
  ASSERT_TRUE(Feed(rig, pi, Msg(0, 100), m0));
  ASSERT_TRUE(Feed(rig, pi, Msg(1, 100), m1));
  rig.ctx.TakeFreed();
  EXPECT_FALSE(Feed(rig, pi, Msg(2, 100), m2));
  EXPECT_FALSE(Feed(rig, pi, Msg(2, 100), m2)) << "again: still no room";
  EXPECT_FALSE(rig.messaging.Receiving(pi));
  EXPECT_EQ(rig.ctx.counters.unexpected_msgs, 2u);
  EXPECT_EQ(rig.ctx.counters.unexpected_depth, 2u);
  std::vector<uint8_t> b0(100), b1(100), b2(100);
  int c0, c1, c2;
  ASSERT_EQ(rig.messaging.PostRecv(Recv(&b0, &c0)), Result::kOk);
  EXPECT_TRUE(rig.ctx.TakeFreed()) << "the refused peer may come again";
  EXPECT_TRUE(Feed(rig, pi, Msg(2, 100), m2));
  EXPECT_EQ(rig.ctx.counters.protocol_errors, 0u) << "msg_id 2 was still the next one";
  ASSERT_EQ(rig.messaging.PostRecv(Recv(&b1, &c1)), Result::kOk);
  ASSERT_EQ(rig.messaging.PostRecv(Recv(&b2, &c2)), Result::kOk);
  ASSERT_EQ(rig.Drain().size(), 3u);
  EXPECT_EQ(b0, m0);
  EXPECT_EQ(b1, m1);
  EXPECT_EQ(b2, m2);
}

// ---- Framing.

// A segment of another message while one is in progress aborts it (EPROTO
// for its receive, a protocol error) and is taken as the next message.
TEST(FramingTest, AnotherMessagesSegmentAbortsTheOneInProgressAndStartsTheNext) {
  auto [rig, pi] = RigWithPeer();
  TwoReceives r(rig, 3000, 3000);
  const std::vector<uint8_t> m0 = Bytes(3000, 1), m1 = Bytes(500, 2);
  ASSERT_TRUE(FeedSegment(rig, pi, Msg(0, 3000), m0, 0));
  ASSERT_TRUE(Feed(rig, pi, Msg(1, 500), m1));
  EXPECT_EQ(rig.ExpectOneError(EPROTO, &r.ca).op.len, StageRig::kSeg) << "what had landed";
  EXPECT_EQ(rig.ctx.counters.protocol_errors, 1u);
  ExpectReceived(rig, &r.cb, m1, r.b);
}

// A segment of the message in progress at the wrong offset aborts it; the
// message's number is spent, so the next message is received normally.
TEST(FramingTest, ASegmentAtTheWrongOffsetAbortsTheMessageInProgress) {
  auto [rig, pi] = RigWithPeer();
  TwoReceives r(rig, 5000, 100);
  const std::vector<uint8_t> m0 = Bytes(5000, 1), m1 = Bytes(100, 2);
  ASSERT_TRUE(FeedSegment(rig, pi, Msg(0, 5000), m0, 0));
  ASSERT_TRUE(FeedSegment(rig, pi, Msg(0, 5000), m0, 2)) << "segment 1 skipped";
  EXPECT_FALSE(rig.messaging.Receiving(pi));
  EXPECT_EQ(rig.ExpectOneError(EPROTO, &r.ca).op.len, StageRig::kSeg);
  EXPECT_GE(rig.ctx.counters.protocol_errors, 1u);
  EXPECT_EQ(rig.ctx.counters.ops_failed, 1u);
  ASSERT_TRUE(Feed(rig, pi, Msg(1, 100), m1));
  ExpectReceived(rig, &r.cb, m1, r.b);
}

// An ABANDONED first segment spends its message's number and delivers
// nothing; the rest of that message is dropped quietly, and the next message
// takes the receive. An ABANDONED segment of any other message is a
// protocol error.
TEST(FramingTest, AnAbandonedMessageSpendsItsNumber) {
  auto [rig, pi] = RigWithPeer();
  std::vector<uint8_t> buf(100);
  int ctx;
  ASSERT_EQ(rig.messaging.PostRecv(Recv(&buf, &ctx)), Result::kOk);
  ASSERT_TRUE(rig.messaging.ConsumeData(pi, Msg(0, 5000, wire::kMsgAbandoned), {}));
  wire::MsgFields rest = Msg(0, 5000, wire::kMsgAbandoned);
  rest.offset = StageRig::kSeg;
  ASSERT_TRUE(rig.messaging.ConsumeData(pi, rest, {}));
  rest.msg_flags = 0;
  rest.offset = 2 * StageRig::kSeg;
  const std::vector<uint8_t> seg = Bytes(StageRig::kSeg, 3);
  ASSERT_TRUE(rig.messaging.ConsumeData(pi, rest, seg)) << "a plain segment held before";
  EXPECT_EQ(rig.completions.ready() + rig.completions.errors_ready(), 0u);
  EXPECT_EQ(rig.ctx.counters.unexpected_msgs, 0u);
  EXPECT_EQ(rig.ctx.counters.protocol_errors, 0u);
  const std::vector<uint8_t> m1 = Bytes(100, 4);
  ASSERT_TRUE(Feed(rig, pi, Msg(1, 100), m1));
  ExpectReceived(rig, &ctx, m1, buf);
  ASSERT_TRUE(rig.messaging.ConsumeData(pi, Msg(7, 100, wire::kMsgAbandoned), {}));
  EXPECT_EQ(rig.ctx.counters.protocol_errors, 1u) << "not the next message";
}

// An ABANDONED segment of the message being received ends its receive with
// ECANCELED; the message's other segments are dropped, the next one is received.
TEST(FramingTest, AnAbandonedSegmentOfTheMessageInProgressCancelsItsReceive) {
  auto [rig, pi] = RigWithPeer();
  TwoReceives r(rig, 5000, 100);
  const std::vector<uint8_t> m0 = Bytes(5000, 1), m1 = Bytes(100, 2);
  ASSERT_TRUE(FeedSegment(rig, pi, Msg(0, 5000), m0, 0));
  wire::MsgFields gone = Msg(0, 5000, wire::kMsgAbandoned);
  gone.offset = StageRig::kSeg;
  ASSERT_TRUE(rig.messaging.ConsumeData(pi, gone, {}));
  EXPECT_EQ(rig.ExpectOneError(ECANCELED, &r.ca).op.len, StageRig::kSeg);
  ASSERT_TRUE(FeedSegment(rig, pi, Msg(0, 5000), m0, 2)) << "a copy sent before the give-up";
  ASSERT_TRUE(Feed(rig, pi, Msg(1, 100), m1));
  EXPECT_EQ(rig.ctx.counters.protocol_errors, 0u);
  ExpectReceived(rig, &r.cb, m1, r.b);
}

// ---- Multi-receive.

// Messages land one after another in a multi-receive buffer, each with its
// own completion; the one that leaves less than min_multi_recv carries
// kCompMultiRecv and the buffer takes no more.
TEST(MultiRecvTest, MessagesLandOneAfterAnotherUntilTheBufferIsReleased) {
  auto [rig, pi] = RigWithPeer();
  const uint32_t room = rig.Room();
  ASSERT_EQ(rig.messaging.min_multi_recv(), 1024u);
  std::vector<uint8_t> big(4096);
  int ctx;
  ASSERT_EQ(rig.messaging.PostRecv(MultiRecv(&big, &ctx)), Result::kOk);
  const std::vector<std::vector<uint8_t>> m = FeedMessages(rig, pi, 5, 1000, 0);
  const std::vector<Completion> got = rig.Drain();
  ASSERT_EQ(got.size(), 4u) << "4096 - 4000 is under min_multi_recv";
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(got[i].context, &ctx);
    EXPECT_EQ(got[i].buf, big.data() + 1000 * i);
    EXPECT_EQ(got[i].len, 1000u);
    EXPECT_EQ(got[i].flags, kCompRecv | kCompMsg | (i == 3 ? kCompMultiRecv : 0)) << i;
    EXPECT_TRUE(std::equal(m[i].begin(), m[i].end(), big.begin() + 1000 * i)) << i;
  }
  EXPECT_EQ(rig.ctx.counters.unexpected_depth, 1u) << "the fifth found the buffer released";
  EXPECT_EQ(rig.messaging.RecvSlotsFree(), rig.config.max_posted_recvs);
  EXPECT_FALSE(rig.messaging.CancelRecv(&ctx));
  EXPECT_EQ(rig.Room(), room) << "the buffer's own reservation went with its release";
}

// A multi-receive posted after messages arrived takes those that fit, in
// order, until it is released.
TEST(MultiRecvTest, APostedBufferTakesTheMessagesWaitingUnexpected) {
  auto [rig, pi] = RigWithPeer();
  const std::vector<std::vector<uint8_t>> m = FeedMessages(rig, pi, 3, 1000, 0);
  std::vector<uint8_t> big(2500);
  int ctx;
  ASSERT_EQ(rig.messaging.PostRecv(MultiRecv(&big, &ctx)), Result::kOk);
  const std::vector<Completion> got = rig.Drain();
  ASSERT_EQ(got.size(), 2u);
  ExpectLandedAt(got[0], m[0], big, 0);
  EXPECT_EQ(got[0].flags & kCompMultiRecv, 0u);
  ExpectLandedAt(got[1], m[1], big, 1000);
  EXPECT_EQ(got[1].flags & kCompMultiRecv, kCompMultiRecv) << "500 bytes left";
  EXPECT_EQ(rig.ctx.counters.unexpected_depth, 1u);
}

// A multi-receive posted while a message is still arriving takes it: the
// rest lands in the buffer directly, and the release comes with it.
TEST(MultiRecvTest, APostedBufferTakesAMessageStillArriving) {
  auto [rig, pi] = RigWithPeer();
  const uint32_t room = rig.Room();
  const std::vector<uint8_t> m = Bytes(3000, 1);
  ASSERT_TRUE(FeedSegment(rig, pi, Msg(0, 3000), m, 0));
  std::vector<uint8_t> big(4000);
  int ctx;
  ASSERT_EQ(rig.messaging.PostRecv(MultiRecv(&big, &ctx)), Result::kOk);
  EXPECT_EQ(rig.ctx.counters.unexpected_depth, 0u);
  ASSERT_TRUE(Feed(rig, pi, Msg(0, 3000), m, /*from=*/1));
  EXPECT_EQ(ExpectReceived(rig, &ctx, m, big).flags & kCompMultiRecv, kCompMultiRecv)
      << "1000 bytes left";
  EXPECT_EQ(rig.Room(), room) << "every reservation is given back";
  EXPECT_EQ(rig.messaging.RecvSlotsFree(), rig.config.max_posted_recvs);
}

// Canceling a multi-receive a message is arriving into only stops it taking
// more: no error, and that message's completion releases the buffer.
TEST(MultiRecvTest, CancelWithAMessageArrivingReleasesTheBufferWithIt) {
  auto [rig, pi] = RigWithPeer();
  const uint32_t room = rig.Room();
  std::vector<uint8_t> big(10000);
  int ctx;
  ASSERT_EQ(rig.messaging.PostRecv(MultiRecv(&big, &ctx)), Result::kOk);
  const std::vector<uint8_t> m = Bytes(3000, 1);
  ASSERT_TRUE(FeedSegment(rig, pi, Msg(0, 3000), m, 0));
  ASSERT_TRUE(rig.messaging.CancelRecv(&ctx));
  EXPECT_EQ(rig.completions.ready() + rig.completions.errors_ready(), 0u);
  ASSERT_TRUE(Feed(rig, pi, Msg(0, 3000), m, /*from=*/1));
  EXPECT_EQ(ExpectReceived(rig, &ctx, m, big).flags, kCompRecv | kCompMsg | kCompMultiRecv);
  EXPECT_EQ(rig.Room(), room);
  EXPECT_EQ(rig.messaging.RecvSlotsFree(), rig.config.max_posted_recvs);
  ASSERT_TRUE(Feed(rig, pi, Msg(1, 30), Bytes(30, 2)));
  EXPECT_EQ(rig.ctx.counters.unexpected_depth, 1u) << "the buffer takes no more";
}

// A message a multi-receive would take, arriving while the completion queue
// has no room for its record, is refused (it comes again) rather than queued
// unexpected, so the next message cannot land in that buffer ahead of it.
TEST(MultiRecvTest, MessagesLandInSendOrderWhenTheCompletionQueueWasFull) {
  // Room for 3 records: the buffer's and two messages'.
  auto [rig, pi] = RigWithPeer(RoomForThreeRecords());
  std::vector<uint8_t> big(100000);
  int ctx;
  ASSERT_EQ(rig.messaging.PostRecv(MultiRecv(&big, &ctx)), Result::kOk);
  std::vector<std::vector<uint8_t>> m;
  for (uint32_t i = 0; i < 4; ++i) m.push_back(Bytes(100, static_cast<uint8_t>(i + 1)));
  std::vector<Completion> got;
  ASSERT_TRUE(Feed(rig, pi, Msg(0, 100), m[0]));
  ASSERT_TRUE(Feed(rig, pi, Msg(1, 100), m[1]));
  const bool taken = Feed(rig, pi, Msg(2, 100), m[2]);       // the queue is full of unread records
  for (const Completion& k : rig.Drain()) got.push_back(k);  // the application reads them
  if (!taken) {
    ASSERT_TRUE(Feed(rig, pi, Msg(2, 100), m[2])) << "refused, it comes again";
  }
  ASSERT_TRUE(Feed(rig, pi, Msg(3, 100), m[3]));
  for (const Completion& k : rig.Drain()) got.push_back(k);
  ASSERT_EQ(got.size(), 4u) << "message 2 waits unexpected with its receive posted";
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(got[i].buf, big.data() + 100 * i) << i;
    EXPECT_TRUE(std::equal(m[i].begin(), m[i].end(), big.begin() + 100 * i)) << i;
  }
  EXPECT_EQ(rig.ctx.counters.unexpected_depth, 0u);
}

// A multi-receive posted over waiting messages takes every one it will
// take, or is not posted (kAgain) when the completion queue lacks room for
// them all: none is left waiting for a later message to overtake.
TEST(MultiRecvTest, APostedBufferTakesAllItsWaitingMessagesOrNone) {
  auto [rig, pi] = RigWithPeer(RoomForThreeRecords());
  const std::vector<std::vector<uint8_t>> m = FeedMessages(rig, pi, 3, 100, 1);
  ASSERT_EQ(rig.ctx.counters.unexpected_depth, 3u);
  std::vector<uint8_t> big(100000);
  const RecvRequest multi = MultiRecv(&big, nullptr);
  EXPECT_EQ(rig.messaging.PostRecv(multi), Result::kAgain)
      << "the buffer's record and three messages' do not fit in three";
  EXPECT_EQ(rig.ctx.counters.unexpected_depth, 3u) << "nothing taken";
  EXPECT_EQ(rig.messaging.RecvSlotsFree(), 2u) << "nothing posted";
  // With one message read by a plain receive, the other two fit.
  std::vector<uint8_t> one(100);
  ASSERT_EQ(rig.messaging.PostRecv({.buf = one.data(), .len = one.size()}), Result::kOk);
  ASSERT_EQ(rig.Drain().size(), 1u);
  ASSERT_EQ(rig.messaging.PostRecv(multi), Result::kOk);
  const std::vector<Completion> got = rig.Drain();
  ASSERT_EQ(got.size(), 2u);
  ExpectLandedAt(got[0], m[1], big, 0, "message 1 first");
  ExpectLandedAt(got[1], m[2], big, 100);
  EXPECT_EQ(rig.ctx.counters.unexpected_depth, 0u);
}

// ---- Peek, claim, discard.

// A peek with no matching message completes as an ENOMSG error.
TEST(PeekTest, APeekWithNothingArrivedReportsEnomsg) {
  StageRig rig;
  rig.AddEstablishedPeer();
  int ctx;
  ASSERT_EQ(rig.messaging.PostRecv(Peek(&ctx)), Result::kOk);
  EXPECT_EQ(rig.completions.ready(), 0u);
  rig.ExpectOneError(ENOMSG, &ctx);
}

// A peek describes the first matching unexpected message (length, tag, data,
// source; no buffer) and leaves it for a receive.
TEST(PeekTest, APeekReportsAMessageWithoutTakingIt) {
  auto [rig, pi] = RigWithPeer();
  const std::vector<uint8_t> m = Bytes(120, 1);
  ASSERT_TRUE(Feed(rig, pi, Msg(0, 120, wire::kMsgTagged | wire::kMsgRemoteData, 42, 7), m));
  int peek;
  ASSERT_EQ(
      rig.messaging.PostRecv({.context = &peek, .tagged = true, .tag = 42, .flags = kRecvPeek}),
      Result::kOk);
  const Completion got = rig.ExpectOneCompletion(&peek);
  EXPECT_EQ(got.len, 120u);
  EXPECT_EQ(got.tag, 42u);
  EXPECT_EQ(got.data, 7u);
  EXPECT_EQ(got.source, rig.Id(pi));
  EXPECT_EQ(got.buf, nullptr);
  EXPECT_EQ(got.flags, kCompRecv | kCompMsg | kCompTagged | kCompRemoteData);
  EXPECT_EQ(rig.ctx.counters.unexpected_depth, 1u);
  std::vector<uint8_t> buf(120);
  int ctx;
  ASSERT_EQ(rig.messaging.PostRecv(TaggedRecv(&buf, &ctx, 42)), Result::kOk);
  ExpectReceived(rig, &ctx, m, buf);
}

// A claiming peek reserves the message: receives pass it over, and a claim
// with the same context receives it (source and tag do not apply).
TEST(PeekTest, AClaimingPeekReservesTheMessageForTheClaim) {
  auto [rig, pi] = RigWithPeer();
  const std::vector<uint8_t> m = Bytes(200, 2);
  ASSERT_TRUE(Feed(rig, pi, Msg(0, 200), m));
  int claim;
  ASSERT_EQ(rig.messaging.PostRecv(Peek(&claim, kRecvClaim)), Result::kOk);
  EXPECT_EQ(rig.ExpectOneCompletion(&claim).len, 200u);
  std::vector<uint8_t> other(200), buf(200);
  int other_ctx, nobody;
  ASSERT_EQ(rig.messaging.PostRecv(Recv(&other, &other_ctx)), Result::kOk);
  EXPECT_EQ(rig.completions.ready(), 0u) << "a plain receive does not take a claimed message";
  EXPECT_EQ(rig.messaging.PostRecv(ClaimRecv(&buf, &nobody)), Result::kInvalid)
      << "no peek claimed a message for that context";
  ASSERT_EQ(rig.messaging.PostRecv({.source = PeerId{12345},
                                    .buf = buf.data(),
                                    .len = buf.size(),
                                    .context = &claim,
                                    .tagged = true,
                                    .tag = 9,
                                    .flags = kRecvClaim}),
            Result::kOk);
  EXPECT_EQ(ExpectReceived(rig, &claim, m, buf).flags, kCompRecv | kCompMsg)
      << "the message's kind, not the request's";
  EXPECT_EQ(rig.ctx.counters.unexpected_depth, 0u);
  EXPECT_TRUE(rig.messaging.CancelRecv(&other_ctx)) << "still posted";
}

// A discarding peek, or a discarding claim, drops the message: a completion
// with length 0, and nothing left to receive.
TEST(PeekTest, ADiscardingPeekOrClaimDropsTheMessage) {
  auto [rig, pi] = RigWithPeer();
  ASSERT_TRUE(Feed(rig, pi, Msg(0, 300), Bytes(300, 1)));
  ASSERT_TRUE(Feed(rig, pi, Msg(1, 400), Bytes(400, 2)));
  int drop;
  ASSERT_EQ(rig.messaging.PostRecv(Peek(&drop, kRecvDiscard)), Result::kOk);
  EXPECT_EQ(rig.ExpectOneCompletion(&drop).len, 0u);
  EXPECT_EQ(rig.ctx.counters.unexpected_depth, 1u);
  int claim;
  ASSERT_EQ(rig.messaging.PostRecv(Peek(&claim, kRecvClaim)), Result::kOk);
  EXPECT_EQ(rig.ExpectOneCompletion(&claim).len, 400u) << "the second message: the first is gone";
  ASSERT_EQ(rig.messaging.PostRecv({.context = &claim, .flags = kRecvClaim | kRecvDiscard}),
            Result::kOk);
  EXPECT_EQ(rig.ExpectOneCompletion(&claim).len, 0u);
  EXPECT_EQ(rig.ctx.counters.unexpected_depth, 0u);
  EXPECT_EQ(rig.ctx.counters.unexpected_bytes, 0u);
  int peek;
  ASSERT_EQ(rig.messaging.PostRecv(Peek(&peek)), Result::kOk);
  rig.ExpectOneError(ENOMSG, &peek);
}

// ---- Cancel.

// CancelRecv completes the posted receive with its context as an ECANCELED
// error and frees its slot; with no such receive it returns false.
TEST(CancelRecvTest, CancelCompletesTheReceiveWithEcanceled) {
  auto [rig, pi] = RigWithPeer();
  std::vector<uint8_t> buf(100);
  const uint32_t room = rig.Room();
  int ctx, other;
  ASSERT_EQ(rig.messaging.PostRecv(Recv(&buf, &ctx)), Result::kOk);
  EXPECT_FALSE(rig.messaging.CancelRecv(&other));
  EXPECT_EQ(rig.completions.errors_ready(), 0u);
  ASSERT_TRUE(rig.messaging.CancelRecv(&ctx));
  EXPECT_EQ(rig.ExpectOneError(ECANCELED, &ctx).op.flags & kCompRecv, kCompRecv);
  EXPECT_EQ(rig.messaging.RecvSlotsFree(), rig.config.max_posted_recvs);
  EXPECT_FALSE(rig.messaging.CancelRecv(&ctx)) << "once";
  EXPECT_EQ(rig.Room(), room);
  ASSERT_TRUE(Feed(rig, pi, Msg(0, 100), Bytes(100, 1)));
  EXPECT_EQ(rig.ctx.counters.unexpected_msgs, 1u) << "the canceled receive takes nothing";
}

// ---- Rendezvous, receiving.

// A request to send that finds a receive queues a pull: a READ_REQ with
// MESSAGE, key = the msg_id, of min(message, receive) bytes, named by its rma_id.
TEST(RendezvousTest, ARequestToSendWithAReceivePostedQueuesAPull) {
  auto [rig, pi] = RigWithPeer();
  std::vector<uint8_t> buf(4000);
  int ctx;
  ASSERT_EQ(rig.messaging.PostRecv(Recv(&buf, &ctx)), Result::kOk);
  ASSERT_TRUE(Feed(rig, pi, Msg(0, 50), Bytes(50, 1)));  // an eager one first
  ASSERT_EQ(rig.messaging.PostRecv(Recv(&buf, &ctx)), Result::kOk);
  ASSERT_TRUE(rig.messaging.ConsumeData(pi, RequestToSend(1, 10000), {}));
  EXPECT_FALSE(rig.messaging.Receiving(pi)) << "one packet";
  const std::vector<uint32_t> q = rig.Queued(pi);
  ASSERT_EQ(q.size(), 1u);
  const SendOp& pull = rig.ops[q[0]];
  EXPECT_EQ(pull.kind, OpKind::kPull);
  EXPECT_EQ(pull.type, wire::PacketType::kRma);
  EXPECT_EQ(pull.rma.op, wire::RmaOp::kReadReq);
  EXPECT_EQ(pull.rma.flags, wire::kRmaFlagMessage);
  EXPECT_EQ(pull.rma.key, 1u);
  EXPECT_EQ(pull.rma.total_length, 4000u) << "the receive is shorter";
  EXPECT_EQ(pull.rma.rma_id, rig.ops.RmaId(q[0]));
  EXPECT_EQ(pull.wire_len, 0u);
  EXPECT_EQ(rig.ctx.counters.unexpected_msgs, 0u);
  const std::vector<wire::View> sent = rig.BuildPackets(pi);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].common.type, wire::PacketType::kRma);
  EXPECT_EQ(sent[0].rma.op, wire::RmaOp::kReadReq);
  EXPECT_EQ(sent[0].rma.key, 1u);
  EXPECT_EQ(sent[0].rma.total_length, 4000u);
}

// A request to send with no receive waits unexpected (no bytes) and is
// answered with a RESPONSE MESSAGE status OK naming it; a receive posted
// later starts its pull.
TEST(RendezvousTest, ARequestToSendWithNoReceiveWaitsAndIsAnsweredQueued) {
  auto [rig, pi] = RigWithPeer();
  ASSERT_TRUE(rig.messaging.ConsumeData(pi, RequestToSend(0, 10000), {}));
  EXPECT_EQ(rig.ctx.counters.unexpected_msgs, 1u);
  EXPECT_EQ(rig.ctx.counters.unexpected_depth, 1u);
  EXPECT_EQ(rig.ctx.counters.unexpected_bytes, 0u) << "the sender keeps the bytes";
  const SendOp& queued = rig.ExpectOnlyResponse(pi);
  EXPECT_EQ(queued.rma.flags, wire::kRmaFlagMessage);
  EXPECT_EQ(queued.rma.status, wire::RmaStatus::kOk);
  EXPECT_EQ(queued.rma.key, 0u);
  EXPECT_EQ(queued.rma.total_length, 10000u);
  std::vector<uint8_t> buf(10000);
  int ctx;
  ASSERT_EQ(rig.messaging.PostRecv(Recv(&buf, &ctx)), Result::kOk);
  EXPECT_EQ(rig.completions.ready(), 0u) << "not before its bytes are pulled";
  EXPECT_EQ(rig.ctx.counters.unexpected_depth, 0u);
  const uint32_t pull = QueuedOf(rig, pi, OpKind::kPull);
  ASSERT_NE(pull, kNone);
  EXPECT_EQ(rig.ops[pull].rma.key, 0u);
  EXPECT_EQ(rig.ops[pull].rma.total_length, 10000u);
}

// The pulled READ_DATA land in the receive buffer in order; the last one
// completes the receive (EMSGSIZE if the message is longer) and ends the pull.
TEST(RendezvousTest, PulledDataFillsTheReceiveAndCompletesIt) {
  auto [rig, pi] = RigWithPeer();
  std::vector<uint8_t> buf(4000, 0);
  int ctx;
  ASSERT_EQ(rig.messaging.PostRecv(Recv(&buf, &ctx)), Result::kOk);
  ASSERT_TRUE(rig.messaging.ConsumeData(pi, RequestToSend(0, 10000), {}));
  const uint32_t o = QueuedOf(rig, pi, OpKind::kPull);
  ASSERT_NE(o, kNone);
  ASSERT_EQ(rig.SendAndAcknowledge(pi), 1u);
  ASSERT_EQ(rig.reliability.tx_active(pi).waiting.front(), o) << "it waits for the bytes";
  const std::vector<uint8_t> m = Bytes(4000, 9);
  // A segment at the wrong offset is a protocol error and lands nowhere.
  wire::RmaFields r = MsgRma(wire::RmaOp::kReadData, rig.ops.RmaId(o), 0, 4000, StageRig::kRmaSeg);
  rig.messaging.ConsumePulledData(
      pi, r, absl::MakeConstSpan(m).subspan(StageRig::kRmaSeg, StageRig::kRmaSeg));
  EXPECT_EQ(rig.ctx.counters.protocol_errors, 1u);
  EXPECT_EQ(buf[StageRig::kRmaSeg], 0u);
  for (uint64_t off = 0; off < m.size(); off += StageRig::kRmaSeg) {
    EXPECT_EQ(rig.completions.ready() + rig.completions.errors_ready(), 0u);
    r.offset = off;
    const size_t n = std::min<size_t>(StageRig::kRmaSeg, m.size() - off);
    rig.messaging.ConsumePulledData(pi, r, absl::MakeConstSpan(m).subspan(off, n));
  }
  const ErrorCompletion err = rig.ExpectOneError(EMSGSIZE, &ctx);
  EXPECT_EQ(err.olen, 6000u);
  EXPECT_EQ(err.op.len, 4000u);
  EXPECT_EQ(buf, m);
  EXPECT_EQ(rig.ctx.counters.rendezvous_pulled, 1u);
  EXPECT_EQ(rig.ops.live(OpKind::kPull), 0u);
  EXPECT_TRUE(rig.reliability.tx_active(pi).waiting.empty());
  EXPECT_EQ(rig.messaging.RecvSlotsFree(), rig.config.max_posted_recvs);
  // A pull that ended is not named again.
  rig.messaging.ConsumePulledData(pi, r, {});
  EXPECT_EQ(rig.ctx.counters.protocol_errors, 2u);
}

// A discarding peek of a request to send pulls none of its bytes (so that
// its sender completes): the peek's completion is the only one, and the pull
// ends silently when the empty READ_DATA comes.
TEST(RendezvousTest, ADiscardingPeekOfARequestToSendPullsNothingAndEndsSilently) {
  auto [rig, pi] = RigWithPeer();
  const uint32_t room = rig.Room();
  ASSERT_TRUE(rig.messaging.ConsumeData(pi, RequestToSend(0, 10000), {}));
  int drop;
  ASSERT_EQ(rig.messaging.PostRecv(Peek(&drop, kRecvDiscard)), Result::kOk);
  EXPECT_EQ(rig.ExpectOneCompletion(&drop).len, 0u);
  EXPECT_EQ(rig.ctx.counters.unexpected_depth, 0u);
  const uint32_t o = QueuedOf(rig, pi, OpKind::kPull);
  ASSERT_NE(o, kNone);
  EXPECT_EQ(rig.ops[o].rma.key, 0u);
  EXPECT_EQ(rig.ops[o].rma.total_length, 0u);
  ASSERT_GT(rig.SendAndAcknowledge(pi), 0u);
  AnswerPull(rig, pi, o, {});
  EXPECT_EQ(rig.completions.ready() + rig.completions.errors_ready(), 0u);
  EXPECT_EQ(rig.ops.live(OpKind::kPull), 0u);
  EXPECT_EQ(rig.ctx.counters.protocol_errors, 0u);
  EXPECT_EQ(rig.messaging.RecvSlotsFree(), rig.config.max_posted_recvs);
  EXPECT_EQ(rig.Room(), room);
}

// A claim of a request to send a peek reserved pulls it into the claiming
// receive, which completes with the claim's context.
TEST(RendezvousTest, AClaimOfARequestToSendPullsItIntoTheClaimingReceive) {
  auto [rig, pi] = RigWithPeer();
  const uint32_t room = rig.Room();
  ASSERT_TRUE(rig.messaging.ConsumeData(pi, RequestToSend(0, 3000), {}));
  int claim;
  ASSERT_EQ(rig.messaging.PostRecv(Peek(&claim, kRecvClaim)), Result::kOk);
  ASSERT_EQ(rig.Drain().size(), 1u);
  EXPECT_EQ(QueuedOf(rig, pi, OpKind::kPull), kNone) << "a peek pulls nothing";
  std::vector<uint8_t> buf(3000);
  ASSERT_EQ(rig.messaging.PostRecv(ClaimRecv(&buf, &claim)), Result::kOk);
  const uint32_t o = QueuedOf(rig, pi, OpKind::kPull);
  ASSERT_NE(o, kNone);
  ASSERT_GT(rig.SendAndAcknowledge(pi), 0u);
  const std::vector<uint8_t> m = Bytes(3000, 1);
  AnswerPull(rig, pi, o, m);
  ExpectReceived(rig, &claim, m, buf);
  EXPECT_EQ(rig.Room(), room);
  EXPECT_EQ(rig.messaging.RecvSlotsFree(), rig.config.max_posted_recvs);
}

// ---- Rendezvous, sending.

// A pull naming our request that waits for its answer turns it into the
// message's bytes: READ_DATA with the pull's rma_id, ahead of later sends;
// the send completes when they are acknowledged.
TEST(RendezvousTest, APullOfAWaitingRequestStreamsTheMessageAsReadData) {
  auto [rig, pi] = RigWithPeer(RendezvousAbove4096());
  const PeerId peer = rig.Id(pi);
  const std::vector<uint8_t> m = Bytes(5000, 3);
  int ctx, later;
  ASSERT_EQ(
      rig.messaging.PostSend({.dest = peer, .buf = m.data(), .len = m.size(), .context = &ctx}),
      Result::kOk);
  const uint32_t o = rig.Queued(pi)[0];
  ASSERT_EQ(rig.SendAndAcknowledge(pi), 1u);
  ASSERT_EQ(rig.reliability.tx_active(pi).waiting.front(), o);
  EXPECT_EQ(rig.ops[o].state, OpState::kWaiting);
  EXPECT_TRUE(rig.reliability.tx(pi).hold) << "later sends wait for the answer";
  ASSERT_EQ(rig.messaging.PostSend({.dest = peer, .buf = m.data(), .len = 10, .context = &later}),
            Result::kOk);
  EXPECT_TRUE(rig.BuildPackets(pi).empty()) << "held";
  ASSERT_TRUE(rig.messaging.ConsumePullRequest(pi, MsgRma(wire::RmaOp::kReadReq, 0x77, 0, 5000)));
  EXPECT_TRUE(rig.reliability.tx_active(pi).waiting.empty());
  EXPECT_FALSE(rig.reliability.tx(pi).hold);
  const std::vector<uint32_t> q = rig.Queued(pi);
  ASSERT_EQ(q.size(), 2u);
  EXPECT_EQ(q[0], o) << "ahead of the later send";
  const SendOp& op = rig.ops[o];
  EXPECT_EQ(op.kind, OpKind::kRndvData);
  EXPECT_EQ(op.rma.op, wire::RmaOp::kReadData);
  EXPECT_EQ(op.rma.flags, wire::kRmaFlagMessage);
  EXPECT_EQ(op.rma.rma_id, 0x77u);
  EXPECT_EQ(op.rma.key, 0u);
  EXPECT_EQ(op.rma.total_length, 5000u);
  EXPECT_EQ(op.wire_len, 5000u);
  const std::vector<wire::View> sent = rig.BuildPackets(pi);
  ASSERT_EQ(sent.size(), 5u) << "four READ_DATA, then the later send";
  std::vector<uint8_t> streamed;
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_EQ(sent[i].common.type, wire::PacketType::kRma) << i;
    EXPECT_EQ(sent[i].rma.op, wire::RmaOp::kReadData);
    EXPECT_EQ(sent[i].rma.rma_id, 0x77u);
    EXPECT_EQ(sent[i].rma.offset, streamed.size());
    streamed.insert(streamed.end(), sent[i].payload.begin(), sent[i].payload.end());
  }
  EXPECT_EQ(streamed, m);
  EXPECT_EQ(sent[4].common.type, wire::PacketType::kData);
  EXPECT_EQ(sent[4].msg.msg_id, 1u);
  rig.AckAll(pi);
  const std::vector<Completion> got = rig.Drain();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].context, &ctx);
  EXPECT_EQ(got[0].len, 5000u);
  EXPECT_EQ(got[1].context, &later);
}

// A pull naming no message of ours that waits to be pulled (another msg_id,
// or more bytes than it has) is answered RESPONSE NO_MESSAGE and counted.
TEST(RendezvousTest, APullNamingNoWaitingMessageIsAnsweredNoMessage) {
  auto [rig, pi] = RigWithPeer(RendezvousAbove4096());
  const std::vector<uint8_t> m = Bytes(5000, 3);
  ASSERT_EQ(Send(rig, pi, m), Result::kOk);
  const uint32_t request = rig.Queued(pi)[0];
  ASSERT_EQ(rig.SendAndAcknowledge(pi), 1u);
  wire::RmaFields pull = MsgRma(wire::RmaOp::kReadReq, 0x55, 3, 100);
  ASSERT_TRUE(rig.messaging.ConsumePullRequest(pi, pull));
  EXPECT_EQ(rig.ctx.counters.protocol_errors, 1u);
  const SendOp& answer = rig.ExpectOnlyResponse(pi);
  EXPECT_EQ(answer.rma.flags, wire::kRmaFlagMessage);
  EXPECT_EQ(answer.rma.status, wire::RmaStatus::kNoMessage);
  EXPECT_EQ(answer.rma.rma_id, 0x55u);
  EXPECT_EQ(answer.rma.key, 3u);
  EXPECT_EQ(answer.rma.total_length, 100u);
  pull.key = 0;
  pull.total_length = 5001;
  ASSERT_TRUE(rig.messaging.ConsumePullRequest(pi, pull));
  EXPECT_EQ(rig.ctx.counters.protocol_errors, 2u) << "longer than the message";
  EXPECT_EQ(rig.reliability.tx_active(pi).waiting.front(), request) << "the request still waits";
  EXPECT_EQ(rig.ops[request].kind, OpKind::kRndvRequest);
}

// ---- Sessions and peers.

// When the peer's session ends, the message arriving from it completes in
// error, and its next message is numbered from 0 again.
TEST(EndSessionTest, TheMessageInProgressCompletesInError) {
  auto [rig, pi] = RigWithPeer();
  TwoReceives r(rig, 3000, 100);
  ASSERT_TRUE(Feed(rig, pi, Msg(0, 10), Bytes(10, 0)));  // takes a
  ASSERT_EQ(rig.messaging.PostRecv(Recv(&r.a, &r.ca)), Result::kOk);
  rig.Drain();
  ASSERT_TRUE(FeedSegment(rig, pi, Msg(1, 3000), Bytes(3000, 1), 0));
  rig.messaging.EndSession(pi, ECONNRESET, "restarted; operation aborted");
  EXPECT_FALSE(rig.messaging.Receiving(pi));
  const ErrorCompletion err = rig.ExpectOneError(ECONNRESET, &r.cb, "b was next in line");
  EXPECT_EQ(err.op.len, 100u) << "what had landed, up to the buffer";
  EXPECT_NE(std::string(err.message).find("restarted"), std::string::npos);
  const std::vector<uint8_t> m = Bytes(100, 2);
  ASSERT_TRUE(Feed(rig, pi, Msg(0, 100), m));
  EXPECT_EQ(rig.ctx.counters.protocol_errors, 0u) << "msg_id 0 opens the new session";
  rig.ExpectOneCompletion(&r.ca);
}

// Requests to send from the peer waiting unexpected are dropped with its
// session (rendezvous_lost): no receive takes them; its eager messages stay.
TEST(EndSessionTest, UnexpectedRendezvousRequestsAreLost) {
  auto [rig, pi] = RigWithPeer();
  ASSERT_TRUE(rig.messaging.ConsumeData(pi, RequestToSend(0, 10000), {}));
  const std::vector<uint8_t> m = Bytes(100, 1);
  ASSERT_TRUE(Feed(rig, pi, Msg(1, 100), m));
  ASSERT_EQ(rig.ctx.counters.unexpected_depth, 2u);
  rig.messaging.EndSession(pi, ECONNRESET, "restarted; operation aborted");
  EXPECT_EQ(rig.ctx.counters.rendezvous_lost, 1u);
  EXPECT_EQ(rig.ctx.counters.unexpected_depth, 1u);
  std::vector<uint8_t> buf(10000);
  int ctx;
  ASSERT_EQ(rig.messaging.PostRecv(Recv(&buf, &ctx)), Result::kOk);
  EXPECT_EQ(QueuedOf(rig, pi, OpKind::kPull), kNone) << "nothing is pulled";
  ExpectReceived(rig, &ctx, m, buf, "the eager message, whose bytes are here");
}

// Our messages still queued (none of their packets sent; the engine failed
// the others) open the next session: renumbered from msg_id 0, in order.
TEST(EndSessionTest, QueuedMessagesAreRenumberedFromZero) {
  auto [rig, pi] = RigWithPeer();
  const std::vector<uint8_t> b = Bytes(10, 1);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(Send(rig, pi, b), Result::kOk);
  ASSERT_EQ(rig.BuildPackets(pi, 2).size(), 2u);  // 0 and 1 go out
  // As Engine::FailPeer does: what went out fails.
  for (uint32_t o : rig.Queued(pi)) {
    if (!rig.ops[o].started) continue;
    rig.reliability.Unqueue(pi, o);
    rig.completions.OpFailed(rig.ops[o], ECONNRESET, "restarted");
    rig.ops.Free(o);
  }
  ASSERT_EQ(rig.Queued(pi).size(), 2u);
  rig.messaging.EndSession(pi, ECONNRESET, "restarted; operation aborted");
  ASSERT_EQ(Send(rig, pi, b), Result::kOk);
  EXPECT_EQ(QueuedMsgIds(rig, pi), (std::vector<uint32_t>{0, 1, 2}));
}

// A removed peer's directed receives complete ECANCELED (others stay
// posted), and what it sent that nobody took is dropped.
TEST(RemovePeerTest, DirectedReceivesAreCanceledAndUnexpectedMessagesDropped) {
  auto [rig, pi] = RigWithPeer();
  const PeerId peer = rig.Id(pi);
  const PeerId other = rig.Id(rig.AddOtherPeer());
  ASSERT_TRUE(Feed(rig, pi, Msg(0, 300, wire::kMsgTagged, 1), Bytes(300, 1)));
  ASSERT_TRUE(Feed(rig, pi, Msg(1, 300, wire::kMsgTagged, 2), Bytes(300, 2)));
  int claim;
  ASSERT_EQ(rig.messaging.PostRecv(
                {.context = &claim, .tagged = true, .tag = 2, .flags = kRecvPeek | kRecvClaim}),
            Result::kOk);
  rig.Drain();
  std::vector<uint8_t> b(100);
  int directed, any, elsewhere;
  ASSERT_EQ(rig.messaging.PostRecv(Recv(&b, &directed, peer)), Result::kOk);
  ASSERT_EQ(rig.messaging.PostRecv(Recv(&b, &any)), Result::kOk);
  ASSERT_EQ(rig.messaging.PostRecv(Recv(&b, &elsewhere, other)), Result::kOk);
  rig.messaging.RemovePeer(pi);
  rig.ExpectOneError(ECANCELED, &directed);
  EXPECT_EQ(rig.completions.ready(), 0u);
  EXPECT_EQ(rig.ctx.counters.unexpected_depth, 0u) << "the claimed one too";
  EXPECT_EQ(rig.ctx.counters.unexpected_bytes, 0u);
  EXPECT_FALSE(rig.messaging.CancelRecv(&directed));
  EXPECT_TRUE(rig.messaging.CancelRecv(&any));
  EXPECT_TRUE(rig.messaging.CancelRecv(&elsewhere));
  std::vector<uint8_t> buf(300);
  EXPECT_EQ(rig.messaging.PostRecv(ClaimRecv(&buf, &claim)), Result::kInvalid);
}

}  // namespace
}  // namespace bypass::rdm
