// The Reliability stage's own tests: its rules pinned at its API, called
// directly on the stages of a StageRig (no engine, no device), with the
// time set by hand.
#include "fabric/rdm/reliability.h"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "absl/types/span.h"
#include "driver/packet.h"
#include "fabric/rdm/ops.h"
#include "fabric/rdm/stage_rig.h"
#include "fabric/rdm/timer_wheel.h"
#include "fabric/rdm/types.h"
#include "fabric/rdm/wire.h"
#include "gtest/gtest.h"

namespace bypass::rdm {
namespace {

using testing::Bytes;
using testing::RigWithPeer;
using testing::StageRig;

// The peer's initial PSN (StageRig::AddEstablishedPeer).
constexpr uint32_t kPeerIsn = StageRig::kPeerIsn;

// A message op as Messaging::PostSend sets one up (eager: its bytes are the wire's).
uint32_t NewMsg(StageRig& rig, const std::vector<uint8_t>& bytes, uint32_t msg_id,
                void* context = nullptr) {
  EXPECT_TRUE(rig.completions.Reserve());
  const uint32_t o = rig.ops.Alloc(OpKind::kMsg);
  SendOp& op = rig.ops[o];
  op.comp_flags = kCompSend | kCompMsg;
  op.len = bytes.size();
  op.context = context;
  op.type = wire::PacketType::kData;
  op.msg.msg_id = msg_id;
  op.msg.total_length = bytes.size();
  op.src = bytes.data();
  op.wire_len = bytes.size();
  return o;
}

// A rendezvous message's request to send: one DATA packet, no payload.
uint32_t NewRndvRequest(StageRig& rig, const std::vector<uint8_t>& bytes, uint32_t msg_id) {
  EXPECT_TRUE(rig.completions.Reserve());
  const uint32_t o = rig.ops.Alloc(OpKind::kRndvRequest);
  SendOp& op = rig.ops[o];
  op.comp_flags = kCompSend | kCompMsg;
  op.len = bytes.size();
  op.type = wire::PacketType::kData;
  op.msg.msg_id = msg_id;
  op.msg.total_length = bytes.size();
  op.msg.protocol = wire::MsgProtocol::kRendezvous;
  op.src = bytes.data();
  op.wire_len = 0;
  return o;
}

// An RMA write as Rma::PostWrite sets one up.
uint32_t NewWrite(StageRig& rig, const std::vector<uint8_t>& bytes, void* context = nullptr) {
  EXPECT_TRUE(rig.completions.Reserve());
  const uint32_t o = rig.ops.Alloc(OpKind::kWrite);
  SendOp& op = rig.ops[o];
  op.src = bytes.data();
  op.context = context;
  op.comp_flags = kCompRma | kCompWrite;
  op.len = op.wire_len = bytes.size();
  op.type = wire::PacketType::kRma;
  op.rma.op = wire::RmaOp::kWrite;
  op.rma.rma_id = rig.ops.RmaId(o);
  op.rma.key = 0x77;
  op.rma.addr = 0x1000;
  op.rma.total_length = bytes.size();
  return o;
}

// The engine's RESPONSE to a peer's write (an answer: it jumps the queue).
uint32_t NewResponse(StageRig& rig, uint32_t rma_id) {
  const uint32_t o = rig.ops.Alloc(OpKind::kResponse);
  MakeResponse(rig.ops[o], 0, wire::RmaStatus::kOk, rma_id, 0x77, 0x1000, 64);
  return o;
}

// At time `at`, queues message msg_id of `bytes` on pi's stream and builds
// what the stream has into at most n packets: returns how many went.
size_t SendAt(StageRig& rig, uint32_t pi, uint64_t at, const std::vector<uint8_t>& bytes, size_t n,
              uint32_t msg_id = 0) {
  rig.ctx.now = at;
  rig.reliability.Queue(pi, NewMsg(rig, bytes, msg_id));
  return rig.BuildPackets(pi, n).size();
}

// At time `at`, the peer's ACK c arrives (with its SACK bitmap, if any).
void AckAt(StageRig& rig, uint32_t pi, uint64_t at, const wire::Common& c,
           const wire::AckFields* sack = nullptr) {
  rig.ctx.now = at;
  rig.reliability.OnAck(pi, c, sack);
}

// The rig's config without congestion control: the credit window alone.
EndpointConfig CreditOnly() {
  EndpointConfig c = StageRig::DefaultConfig();
  c.congestion_control = false;
  return c;
}

// A SACK bitmap naming PSNs ack + 1 + i for each i.
wire::AckFields Sack(std::initializer_list<uint32_t> bits) {
  wire::AckFields a;
  for (uint32_t i : bits) a.Set(i);
  return a;
}

// A DATA packet of the peer's with PSN psn, parsed from a real frame in a
// packet of the rig's (as the engine hands it to Arrive).
struct PeerPacket {
  wire::View v;
  driver::Packet* pkt = nullptr;
};
PeerPacket PeerData(StageRig& rig, Psn psn, uint16_t flags = 0) {
  PeerPacket p;
  p.pkt = rig.Buffers(1)[0];
  wire::Common c = rig.FromPeer(wire::PacketType::kData, psn).common;
  c.flags = flags;
  wire::MsgFields m;
  m.msg_id = psn.value();
  m.total_length = 8;
  const std::vector<uint8_t> payload = Bytes(8, static_cast<uint8_t>(psn.value()));
  p.pkt->len = static_cast<uint32_t>(wire::BuildData(rig.FromPeer(c.type, psn).flow, c, m, payload,
                                                     {p.pkt->data, p.pkt->capacity}));
  p.v = StageRig::Parse(p.pkt);
  EXPECT_EQ(p.v.common.type, wire::PacketType::kData);
  return p;
}

// Files the peer's packet psn; returns what became of it (and the packet).
Arrival Arrive(StageRig& rig, uint32_t pi, Psn psn, driver::Packet** pkt = nullptr,
               uint16_t flags = 0) {
  const PeerPacket p = PeerData(rig, psn, flags);
  if (pkt != nullptr) *pkt = p.pkt;
  return rig.reliability.Arrive(pi, p.v, p.pkt);
}

// At time `at` the peer's first packet (with header flags) arrives in order
// and is consumed, as the engine does; returns what Arrive made of it.
Arrival ConsumeFirstAt(StageRig& rig, uint32_t pi, uint64_t at, uint16_t flags = 0) {
  rig.ctx.now = at;
  const Arrival arrival = Arrive(rig, pi, Psn(kPeerIsn), nullptr, flags);
  if (arrival != Arrival::kInOrder) return arrival;
  rig.reliability.Consumed(pi);
  rig.reliability.AfterReceive(pi, flags);
  return arrival;
}

bool AckReq(const wire::View& v) { return (v.common.flags & wire::kFlagAckReq) != 0; }
bool Retransmit(const wire::View& v) { return (v.common.flags & wire::kFlagRetransmit) != 0; }

// ---- Queue.

// Ops go on the wire in the order they were queued, each as its bytes.
TEST(ReliabilityQueueTest, OpsAreSentInTheOrderTheyWereQueued) {
  auto [rig, pi] = RigWithPeer();
  const Psn isn = rig.session[pi].tx_isn;
  const std::vector<uint8_t> a = Bytes(100, 1), b = Bytes(50, 2), c = Bytes(70, 3);
  rig.reliability.Queue(pi, NewMsg(rig, a, 0));
  const uint32_t w = NewWrite(rig, b);
  rig.reliability.Queue(pi, w);
  rig.reliability.Queue(pi, NewMsg(rig, c, 1));
  const std::vector<wire::View> sent = rig.BuildPackets(pi, 8);
  ASSERT_EQ(sent.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(sent[i].common.psn.value(), (isn + i).value());
  EXPECT_EQ(sent[0].common.type, wire::PacketType::kData);
  EXPECT_EQ(sent[0].msg.msg_id, 0u);
  EXPECT_EQ(std::vector<uint8_t>(sent[0].payload.begin(), sent[0].payload.end()), a);
  EXPECT_EQ(sent[1].common.type, wire::PacketType::kRma);
  EXPECT_EQ(sent[1].rma.rma_id, rig.ops.RmaId(w));
  EXPECT_EQ(std::vector<uint8_t>(sent[1].payload.begin(), sent[1].payload.end()), b);
  EXPECT_EQ(sent[2].msg.msg_id, 1u);
  EXPECT_EQ(std::vector<uint8_t>(sent[2].payload.begin(), sent[2].payload.end()), c);
}

// An answer (jumps_queue) goes before the user's unstarted ops, never into a started op.
TEST(ReliabilityQueueTest, AnAnswerJumpsTheUsersUnstartedOpsButNotAStartedOne) {
  auto [rig, pi] = RigWithPeer();
  const std::vector<uint8_t> a = Bytes(3 * StageRig::kSeg), b = Bytes(10);
  const uint32_t oa = NewMsg(rig, a, 0);
  rig.reliability.Queue(pi, oa);
  ASSERT_EQ(rig.BuildPackets(pi, 1).size(), 1u) << "A started";
  const uint32_t ob = NewMsg(rig, b, 1);
  rig.reliability.Queue(pi, ob);
  const uint32_t r1 = NewResponse(rig, 11);
  rig.reliability.Queue(pi, r1);
  const uint32_t r2 = NewResponse(rig, 12);
  rig.reliability.Queue(pi, r2);
  // Read afresh: the record is the peer's only while it is busy.
  const auto busy = [&]() -> const TxActive& { return rig.reliability.tx_active(pi); };
  EXPECT_EQ(rig.Queued(pi), (std::vector<uint32_t>{oa, r1, r2, ob}));
  EXPECT_EQ(busy().cursor_op, oa) << "A goes on first";
  const std::vector<wire::View> sent = rig.BuildPackets(pi, 8);
  ASSERT_EQ(sent.size(), 5u);
  EXPECT_EQ(sent[0].msg.offset, StageRig::kSeg);
  EXPECT_EQ(sent[1].msg.offset, 2 * StageRig::kSeg);
  EXPECT_EQ(sent[2].rma.rma_id, 11u);
  EXPECT_EQ(sent[3].rma.rma_id, 12u);
  EXPECT_EQ(sent[4].common.type, wire::PacketType::kData);
  EXPECT_EQ(sent[4].msg.msg_id, 1u);
  // The cursor at a user op not started: the answer goes right there.
  const std::vector<uint8_t> c = Bytes(10);
  const uint32_t oc = NewMsg(rig, c, 2);
  rig.reliability.Queue(pi, oc);
  const uint32_t r3 = NewResponse(rig, 13);
  rig.reliability.Queue(pi, r3);
  EXPECT_EQ(busy().cursor_op, r3);
  EXPECT_EQ(rig.ops[r3].next, oc);
}

// Queueing wants a HELLO while the session is not up, and sends nothing yet.
TEST(ReliabilityQueueTest, QueueingWantsAHelloUntilTheSessionIsUp) {
  StageRig rig;
  const uint32_t pi = rig.AddPeer();
  EXPECT_FALSE(rig.session[pi].hello_wanted);
  const std::vector<uint8_t> a = Bytes(10);
  rig.reliability.Queue(pi, NewMsg(rig, a, 0));
  EXPECT_TRUE(rig.session[pi].hello_wanted);
  EXPECT_EQ(rig.ctx.queued_peers(), 1u);
  EXPECT_FALSE(rig.reliability.HasWork(pi));
  EXPECT_TRUE(rig.BuildPackets(pi, 4).empty()) << "nothing goes before the handshake";

  StageRig up;
  const uint32_t pj = up.AddEstablishedPeer();
  up.reliability.Queue(pj, NewMsg(up, a, 0));
  EXPECT_FALSE(up.session[pj].hello_wanted);
  EXPECT_TRUE(up.reliability.HasWork(pj));
}

// ---- Build.

// An op goes in segments of the peer's max payload (its max_datagram if smaller than ours).
TEST(ReliabilityBuildTest, CutsAnOpIntoSegmentsOfThePeersMaxPayload) {
  auto [rig, pi] = RigWithPeer();
  rig.session[pi].max_datagram = 1000;
  const uint32_t seg = wire::MaxDataPayload(1000), rma_seg = wire::MaxRmaPayload(1000);
  const std::vector<uint8_t> a = Bytes(3 * seg + 228), w = Bytes(rma_seg + 84, 9);
  const uint32_t oa = NewMsg(rig, a, 0);
  rig.reliability.Queue(pi, oa);
  rig.reliability.Queue(pi, NewWrite(rig, w));
  const std::vector<wire::View> sent = rig.BuildPackets(pi, 16);
  ASSERT_EQ(sent.size(), 6u);
  for (uint32_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(sent[i].msg.offset, uint64_t{i} * seg);
    EXPECT_EQ(sent[i].msg.total_length, a.size());
    EXPECT_EQ(sent[i].payload.size(), i < 3 ? seg : 228u);
    EXPECT_EQ(std::memcmp(sent[i].payload.data(), a.data() + i * seg, sent[i].payload.size()), 0);
  }
  EXPECT_EQ(sent[4].rma.offset, 0u);
  EXPECT_EQ(sent[4].payload.size(), rma_seg);
  EXPECT_EQ(sent[5].rma.offset, rma_seg);
  EXPECT_EQ(sent[5].payload.size(), 84u);
  EXPECT_TRUE(rig.ops[oa].all_sent);
  EXPECT_EQ(rig.ops[oa].last_psn.value(), (rig.session[pi].tx_isn + 3).value());
  EXPECT_EQ(rig.reliability.tx_active(pi).cursor_op, kNone);
}

// Build stops at the credit, asks for an ACK on the packet filling it; an ACK moves it on.
TEST(ReliabilityBuildTest, StopsAtTheWindowAndAsksForAnAckOnThePacketThatFillsIt) {
  StageRig rig;
  const uint32_t pi = rig.AddEstablishedPeer(Psn(kPeerIsn), /*credit=*/4);
  const Psn isn = rig.session[pi].tx_isn;
  const std::vector<uint8_t> a = Bytes(10 * StageRig::kSeg);
  rig.reliability.Queue(pi, NewMsg(rig, a, 0));
  std::vector<wire::View> sent = rig.BuildPackets(pi, 16);
  ASSERT_EQ(sent.size(), 4u);
  EXPECT_FALSE(AckReq(sent[0]) || AckReq(sent[1]) || AckReq(sent[2]));
  EXPECT_TRUE(AckReq(sent[3])) << "it fills the window";
  EXPECT_EQ(rig.ctx.counters.window_stalls, 1u);
  EXPECT_FALSE(rig.reliability.HasWork(pi));
  rig.reliability.OnAck(pi, rig.PeerAck(isn + 2, 4), nullptr);
  EXPECT_EQ(rig.reliability.tx(pi).window_end.value(), (isn + 6).value());
  sent = rig.BuildPackets(pi, 16);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].common.psn.value(), (isn + 4).value());
  EXPECT_FALSE(AckReq(sent[0]));
  EXPECT_TRUE(AckReq(sent[1]));
  // More credit without new acknowledgement opens the window too.
  rig.reliability.OnAck(pi, rig.PeerAck(isn + 2, 6), nullptr);
  EXPECT_EQ(rig.BuildPackets(pi, 16).size(), 2u);
}

// Build stops when the packets it was given run out, and goes on from there.
TEST(ReliabilityBuildTest, StopsWhenTheTxBuffersRunOut) {
  auto [rig, pi] = RigWithPeer();
  const std::vector<uint8_t> a = Bytes(5 * StageRig::kSeg);
  rig.reliability.Queue(pi, NewMsg(rig, a, 0));
  std::vector<wire::View> sent = rig.BuildPackets(pi, 2);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_FALSE(AckReq(sent[1])) << "the window is not full";
  EXPECT_TRUE(rig.reliability.HasWork(pi));
  EXPECT_EQ(rig.ctx.counters.window_stalls, 0u);
  sent = rig.BuildPackets(pi, 8);
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(sent[0].msg.offset, 2 * StageRig::kSeg);
}

// Whatever the credit, no more than the TX ring is in flight; the one filling it asks for an ACK.
TEST(ReliabilityBuildTest, StopsAtTheRingOfSentPacketsWhateverTheCredit) {
  auto [rig, pi] = RigWithPeer(CreditOnly());
  const Psn isn = rig.session[pi].tx_isn;
  rig.reliability.OnAck(pi, rig.PeerAck(isn, 1000), nullptr);
  const std::vector<uint8_t> a = Bytes(300 * size_t{StageRig::kSeg});
  rig.reliability.Queue(pi, NewMsg(rig, a, 0));
  const std::vector<wire::View> sent = rig.BuildPackets(pi, 300);
  ASSERT_EQ(sent.size(), StageRig::kRingSize);
  EXPECT_EQ(rig.reliability.tx(pi).inflight(), StageRig::kRingSize);
  for (size_t i = 0; i + 1 < sent.size(); ++i) ASSERT_FALSE(AckReq(sent[i])) << i;
  EXPECT_TRUE(AckReq(sent.back()));
  EXPECT_FALSE(rig.reliability.HasWork(pi));
}

// The last packet of an op posted with ack_now asks for an ACK; others do not.
TEST(ReliabilityBuildTest, TheLastPacketOfAnAckNowOpAsksForAnAck) {
  auto [rig, pi] = RigWithPeer();
  const std::vector<uint8_t> a = Bytes(2 * StageRig::kSeg), b = Bytes(10);
  const uint32_t oa = NewMsg(rig, a, 0);
  rig.ops[oa].ack_now = true;
  rig.reliability.Queue(pi, oa);
  rig.reliability.Queue(pi, NewMsg(rig, b, 1));
  const std::vector<wire::View> sent = rig.BuildPackets(pi, 8);
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_FALSE(AckReq(sent[0]));
  EXPECT_TRUE(AckReq(sent[1])) << "the ack_now op's last packet";
  EXPECT_FALSE(AckReq(sent[2]));
}

// A rendezvous request (holds_stream) holds the user's later ops, not answers, until released.
TEST(ReliabilityBuildTest, ARendezvousRequestHoldsTheUsersLaterOpsUntilReleased) {
  auto [rig, pi] = RigWithPeer();
  const std::vector<uint8_t> big = Bytes(1 << 20), b = Bytes(10);
  rig.reliability.Queue(pi, NewRndvRequest(rig, big, 7));
  rig.reliability.Queue(pi, NewMsg(rig, b, 8));
  std::vector<wire::View> sent = rig.BuildPackets(pi, 8);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].msg.protocol, wire::MsgProtocol::kRendezvous);
  EXPECT_TRUE(sent[0].payload.empty());
  EXPECT_TRUE(rig.reliability.tx(pi).hold);
  EXPECT_FALSE(rig.reliability.HasWork(pi));
  rig.reliability.Queue(pi, NewResponse(rig, 21));
  sent = rig.BuildPackets(pi, 8);
  ASSERT_EQ(sent.size(), 1u) << "an answer is not held";
  EXPECT_EQ(sent[0].rma.rma_id, 21u);
  rig.reliability.ReleaseHold(pi, 8);
  EXPECT_TRUE(rig.BuildPackets(pi, 8).empty()) << "another id releases nothing";
  rig.reliability.ReleaseHold(pi, 7);
  sent = rig.BuildPackets(pi, 8);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].msg.msg_id, 8u);
}

// The header: incarnations, next PSN and, once the peer is known, rcv_nxt with Grant()'s credit.
TEST(ReliabilityBuildTest, TheHeaderCarriesIncarnationsNextPsnAndTheAckOfThePeersStream) {
  StageRig rig;
  const uint32_t pi = rig.AddPeer();
  wire::Common c = rig.reliability.Header(pi, wire::PacketType::kData, wire::kFlagAckReq);
  EXPECT_EQ(c.type, wire::PacketType::kData);
  EXPECT_EQ(c.src_incarnation, StageRig::kOurIncarnation);
  EXPECT_EQ(c.psn.value(), rig.session[pi].tx_isn.value());
  EXPECT_EQ(c.flags, wire::kFlagAckReq) << "no ACK before the peer's direction is known";

  StageRig up;
  const uint32_t pj = up.AddEstablishedPeer();
  const std::vector<uint8_t> a = Bytes(10);
  up.reliability.Queue(pj, NewMsg(up, a, 0));
  ASSERT_EQ(up.BuildPackets(pj, 1).size(), 1u);
  ASSERT_EQ(Arrive(up, pj, Psn(kPeerIsn)), Arrival::kInOrder);
  up.reliability.Consumed(pj);
  c = up.reliability.Header(pj, wire::PacketType::kAck, 0);
  EXPECT_EQ(c.src_incarnation, StageRig::kOurIncarnation);
  EXPECT_EQ(c.dst_incarnation, StageRig::kPeerIncarnation);
  EXPECT_EQ(c.psn.value(), (up.session[pj].tx_isn + 1).value());
  EXPECT_EQ(c.flags, wire::kFlagAckValid);
  EXPECT_EQ(c.ack_psn.value(), kPeerIsn + 1);
  EXPECT_EQ(c.credit, up.reliability.Grant(pj));
  EXPECT_EQ(c.credit, up.config.window_packets) << "the held budget is larger than the window";
}

// ---- Acknowledgements.

// A cumulative ACK ends each op it wholly covers as its traits' after_ack says.
TEST(ReliabilityAckTest, ACumulativeAckCompletesOpsPerTheirTraits) {
  auto [rig, pi] = RigWithPeer();
  const Psn isn = rig.session[pi].tx_isn;
  int msg_context = 0, write_context = 0;
  const std::vector<uint8_t> a = Bytes(StageRig::kSeg + 4), b = Bytes(64);
  const uint32_t om = NewMsg(rig, a, 0, &msg_context);
  const uint32_t ow = NewWrite(rig, b, &write_context);
  rig.reliability.Queue(pi, om);
  rig.reliability.Queue(pi, ow);
  rig.reliability.Queue(pi, NewResponse(rig, 5));
  ASSERT_EQ(rig.BuildPackets(pi, 8).size(), 4u);
  rig.reliability.OnAck(pi, rig.PeerAck(isn + 1, 64), nullptr);
  EXPECT_EQ(rig.completions.ready(), 0u) << "half a message is not done";
  EXPECT_EQ(rig.ops[om].state, OpState::kQueued);

  rig.reliability.OnAck(pi, rig.PeerAck(isn + 4, 64), nullptr);
  Completion done[4];
  ASSERT_EQ(rig.completions.Poll(done), 1u);
  EXPECT_EQ(done[0].context, &msg_context);
  EXPECT_EQ(done[0].flags, kCompSend | kCompMsg);
  EXPECT_EQ(done[0].len, a.size());
  EXPECT_EQ(rig.ops.live(OpKind::kMsg), 0u);
  const TxStream& t = rig.reliability.tx(pi);
  // Read afresh: the record is the peer's only while it is busy.
  const auto busy = [&]() -> const TxActive& { return rig.reliability.tx_active(pi); };
  EXPECT_EQ(busy().waiting.front(), ow) << "a write waits for its RESPONSE";
  EXPECT_EQ(busy().waiting.size(), 1u);
  EXPECT_EQ(rig.ops[ow].state, OpState::kWaiting);
  EXPECT_EQ(rig.ops.live(OpKind::kResponse), 0u) << "an answer is freed";
  EXPECT_TRUE(busy().ops.empty());
  EXPECT_EQ(t.inflight(), 0u);
  EXPECT_EQ(busy().rto_deadline, 0u);
  EXPECT_TRUE(rig.reliability.OnlyWaiting(pi));
}

// An ACK samples the round trip of the newest packet it covers.
TEST(ReliabilityAckTest, AnAckSamplesTheRoundTrip) {
  auto [rig, pi] = RigWithPeer();
  const Psn isn = rig.session[pi].tx_isn;
  const std::vector<uint8_t> a = Bytes(10);
  ASSERT_EQ(SendAt(rig, pi, 1'000, a, 1), 1u);
  AckAt(rig, pi, 41'000, rig.PeerAck(isn + 1, 64));
  const RttEstimator& rtt = rig.reliability.tx(pi).rtt;
  ASSERT_TRUE(rtt.has_sample());
  EXPECT_EQ(rtt.srtt(), 40'000u);
}

// Karn: an ACK of a packet sent more than once gives no RTT sample.
TEST(ReliabilityAckTest, AnAckOfARetransmittedPacketGivesNoRttSample) {
  auto [rig, pi] = RigWithPeer();
  const Psn isn = rig.session[pi].tx_isn;
  const std::vector<uint8_t> a = Bytes(10);
  ASSERT_EQ(SendAt(rig, pi, 1'000, a, 1), 1u);
  rig.ctx.now = 1'000 + rig.config.rto_initial_ns;
  uint64_t next = UINT64_MAX;
  rig.reliability.RunTimers(pi, &next);
  const std::vector<wire::View> sent = rig.BuildPackets(pi, 1);
  ASSERT_EQ(sent.size(), 1u);
  ASSERT_TRUE(Retransmit(sent[0]));
  rig.ctx.now += 10'000;
  rig.reliability.OnAck(pi, rig.PeerAck(isn + 1, 64), nullptr);
  EXPECT_EQ(rig.reliability.tx(pi).inflight(), 0u);
  EXPECT_FALSE(rig.reliability.tx(pi).rtt.has_sample());
}

// An ACK before snd_una, past next_psn or without kFlagAckValid changes nothing.
TEST(ReliabilityAckTest, StaleOrBogusAcksChangeNothing) {
  auto [rig, pi] = RigWithPeer();
  const Psn isn = rig.session[pi].tx_isn;
  const std::vector<uint8_t> a = Bytes(4 * StageRig::kSeg);
  ASSERT_EQ(SendAt(rig, pi, 1'000, a, 8), 4u);
  AckAt(rig, pi, 2'000, rig.PeerAck(isn + 2, 64));
  const TxStream& t = rig.reliability.tx(pi);
  // Read afresh: the record is the peer's only while it is busy.
  const auto busy = [&]() -> const TxActive& { return rig.reliability.tx_active(pi); };
  const Psn una = t.snd_una, end = t.window_end;
  const uint64_t srtt = t.rtt.srtt(), rto = busy().rto_deadline;
  rig.ctx.now = 9'000;
  wire::Common bogus[] = {
      rig.PeerAck(isn + 1, 200),                  // stale
      rig.PeerAck(isn + 1, 200, wire::kFlagRnr),  // stale, refusing
      rig.PeerAck(isn + 5, 200),                  // past next_psn
      rig.PeerAck(isn + 4, 200),                  // ... but no ACK_VALID
  };
  bogus[3].flags = 0;
  for (const wire::Common& c : bogus) {
    rig.reliability.OnAck(pi, c, nullptr);
    EXPECT_EQ(t.snd_una.value(), una.value());
    EXPECT_EQ(t.window_end.value(), end.value());
    EXPECT_EQ(t.rtt.srtt(), srtt);
    EXPECT_EQ(busy().rto_deadline, rto);
    EXPECT_FALSE(busy().rnr.waiting);
  }
  EXPECT_EQ(rig.ctx.counters.rnr_received, 0u);
  EXPECT_EQ(rig.completions.ready(), 0u);
  EXPECT_EQ(busy().ops.size(), 1u);
}

// ---- SACK.

// A hole >= fast_retransmit_threshold below the highest SACKed PSN is resent once, fast.
TEST(ReliabilitySackTest, AHoleIsFastRetransmittedExactlyOnce) {
  auto [rig, pi] = RigWithPeer();
  ASSERT_EQ(rig.config.fast_retransmit_threshold, 3u);
  const Psn isn = rig.session[pi].tx_isn;
  const std::vector<uint8_t> a = Bytes(8 * StageRig::kSeg);
  ASSERT_EQ(SendAt(rig, pi, 1'000, a, 8), 8u);
  // Held: isn+1 and isn+3. Holes: isn (3 below isn+3) and isn+2 (1 below).
  const wire::AckFields sack = Sack({0, 2});
  AckAt(rig, pi, 2'000, rig.PeerAck(isn, 64), &sack);
  EXPECT_EQ(rig.reliability.tx_active(pi).retx_queued, 1u);
  rig.reliability.OnAck(pi, rig.PeerAck(isn, 64), &sack);
  EXPECT_EQ(rig.reliability.tx_active(pi).retx_queued, 1u) << "the same SACK queues nothing more";
  rig.ctx.now = 3'000;
  const std::vector<wire::View> sent = rig.BuildPackets(pi, 8);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].common.psn.value(), isn.value());
  EXPECT_TRUE(Retransmit(sent[0]));
  EXPECT_TRUE(AckReq(sent[0]));
  EXPECT_EQ(sent[0].msg.offset, 0u);
  EXPECT_EQ(sent[0].payload.size(), StageRig::kSeg);
  EXPECT_EQ(rig.ctx.counters.retransmits_fast, 1u);
  EXPECT_EQ(rig.ctx.counters.retransmits_timeout, 0u);
  // Reported again after its retransmission went: still not lost again.
  AckAt(rig, pi, 4'000, rig.PeerAck(isn, 64), &sack);
  EXPECT_EQ(rig.reliability.tx_active(pi).retx_queued, 0u);
  EXPECT_TRUE(rig.BuildPackets(pi, 8).empty());
  EXPECT_EQ(rig.ctx.counters.retransmits_fast, 1u);
}

// A resent hole is lost again only when a packet sent after it is SACKed (as in RACK).
TEST(ReliabilitySackTest, ARetransmittedHoleIsLostAgainOnlyWhenALaterPacketArrives) {
  auto [rig, pi] = RigWithPeer(CreditOnly());  // the loss halves no window that holds isn+8
  const Psn isn = rig.session[pi].tx_isn;
  const std::vector<uint8_t> a = Bytes(8 * StageRig::kSeg), b = Bytes(10);
  ASSERT_EQ(SendAt(rig, pi, 1'000, a, 8), 8u);
  const wire::AckFields held7 = Sack({0, 1, 2, 3, 4, 5, 6});
  AckAt(rig, pi, 2'000, rig.PeerAck(isn, 64), &held7);
  rig.ctx.now = 3'000;
  ASSERT_EQ(rig.BuildPackets(pi, 8).size(), 1u);
  rig.ctx.now = 4'000;
  rig.reliability.Queue(pi, NewMsg(rig, b, 1));
  ASSERT_EQ(rig.BuildPackets(pi, 8).size(), 1u) << "isn+8, sent after the retransmission";
  AckAt(rig, pi, 5'000, rig.PeerAck(isn, 64), &held7);
  EXPECT_EQ(rig.reliability.tx_active(pi).retx_queued, 0u);
  const wire::AckFields held8 = Sack({0, 1, 2, 3, 4, 5, 6, 7});
  rig.reliability.OnAck(pi, rig.PeerAck(isn, 64), &held8);
  EXPECT_EQ(rig.reliability.tx_active(pi).retx_queued, 1u);
  const std::vector<wire::View> sent = rig.BuildPackets(pi, 8);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].common.psn.value(), isn.value());
  EXPECT_EQ(rig.ctx.counters.retransmits_fast, 2u);
}

// Every word of the bitmap counts (bits 64 and up: a window past 64
// packets), and a bit naming a PSN never sent is ignored.
TEST(ReliabilitySackTest, BitsPastTheFirstWordCountAndBitsPastWhatWasSentAreIgnored) {
  auto [rig, pi] = RigWithPeer(CreditOnly());
  const Psn isn = rig.session[pi].tx_isn;
  AckAt(rig, pi, 500, rig.PeerAck(isn, 200));  // credit for 200 packets
  const std::vector<uint8_t> a = Bytes(80 * StageRig::kSeg);
  ASSERT_EQ(SendAt(rig, pi, 1'000, a, 80), 80u);
  // Held: isn+66..isn+69 (bits 65..68, the second word); bit 150 names
  // isn+151, never sent.
  const wire::AckFields sack = Sack({65, 66, 67, 68, 150});
  AckAt(rig, pi, 2'000, rig.PeerAck(isn, 200), &sack);
  // Lost: the holes 3 or more below isn+69, isn..isn+65; not isn+70..79,
  // above every PSN held.
  EXPECT_EQ(rig.reliability.tx_active(pi).retx_queued, 66u);
  rig.ctx.now = 3'000;
  const std::vector<wire::View> sent = rig.BuildPackets(pi, 100);
  ASSERT_EQ(sent.size(), 66u);
  for (uint32_t i = 0; i < sent.size(); ++i) {
    EXPECT_EQ(sent[i].common.psn.value(), (isn + i).value()) << i;
    EXPECT_TRUE(Retransmit(sent[i])) << i;
  }
}

// ---- Timers.

// A flight that starts moves the peer's timer off the probe deadline of the
// last flight, which its ACK made moot (so a ping-pong's timer never fires
// for nothing), but never past a deadline armed elsewhere (the timer's
// floor) or the delayed ACK.
TEST(ReliabilityTimerTest, AStartingFlightMovesTheTimerOffAMootProbe) {
  auto [rig, pi] = RigWithPeer();
  const Psn isn = rig.session[pi].tx_isn;
  const std::vector<uint8_t> a = Bytes(10);
  // Read afresh: the record is the peer's only while it is busy.
  const auto busy = [&]() -> const TxActive& { return rig.reliability.tx_active(pi); };
  const auto tick = [](uint64_t ns) {
    constexpr uint64_t k = uint64_t{1} << TimerWheel::kTickShift;
    return (ns + k - 1) / k * k;
  };
  ASSERT_EQ(SendAt(rig, pi, 1'000, a, 8), 1u);
  AckAt(rig, pi, 11'000, rig.PeerAck(isn + 1, 64));  // an RTT sample; the flight ends
  ASSERT_EQ(SendAt(rig, pi, 11'000, a, 8), 1u);
  const uint64_t moot = busy().tlp_deadline;
  ASSERT_NE(moot, 0u);
  EXPECT_EQ(rig.ctx.timers().at_ns(pi), tick(moot));
  AckAt(rig, pi, 20'000, rig.PeerAck(isn + 2, 64));  // before the probe: moot
  ASSERT_EQ(SendAt(rig, pi, 20'000, a, 8), 1u);
  ASSERT_GT(busy().tlp_deadline, moot);
  EXPECT_EQ(rig.ctx.timers().at_ns(pi), tick(busy().tlp_deadline)) << "moved later";
  EXPECT_EQ(rig.ctx.next_timer_ns, tick(busy().tlp_deadline));
  // A deadline armed elsewhere (a HELLO retry, a liveness probe...) holds it.
  const uint64_t other = busy().tlp_deadline + 1'000;
  rig.ctx.ArmTimer(pi, other);
  AckAt(rig, pi, 30'000, rig.PeerAck(isn + 3, 64));
  ASSERT_EQ(SendAt(rig, pi, 30'000, a, 8), 1u);
  ASSERT_GT(busy().tlp_deadline, other);
  EXPECT_EQ(rig.ctx.timers().at_ns(pi), tick(other)) << "not past the other deadline";
  EXPECT_EQ(rig.ctx.next_timer_ns, tick(other));
}

// With an RTT measured, the tail-loss probe resends the newest packet before the RTO fires.
TEST(ReliabilityTimerTest, TheTailLossProbeGoesBeforeTheRto) {
  auto [rig, pi] = RigWithPeer();
  const Psn isn = rig.session[pi].tx_isn;
  const std::vector<uint8_t> a = Bytes(10), b = Bytes(2 * StageRig::kSeg);
  ASSERT_EQ(SendAt(rig, pi, 1'000, a, 8), 1u);
  // SRTT 10 us, RTTVAR 5 us: the RTO is its 100 us floor.
  AckAt(rig, pi, 11'000, rig.PeerAck(isn + 1, 64));
  ASSERT_EQ(SendAt(rig, pi, 11'000, b, 8, 1), 2u);
  // Read afresh: the record is the peer's only while it is busy.
  const auto busy = [&]() -> const TxActive& { return rig.reliability.tx_active(pi); };
  // The probe: max(2 SRTT, SRTT + 4 RTTVAR) plus the peer's ACK delay.
  const uint64_t tlp = 11'000 + 30'000 + rig.config.ack_delay_ns;
  EXPECT_EQ(busy().tlp_deadline, tlp);
  EXPECT_EQ(busy().rto_deadline, 11'000 + rig.config.rto_min_ns);
  uint64_t next = UINT64_MAX;
  rig.reliability.RunTimers(pi, &next);
  EXPECT_EQ(next, tlp);
  rig.ctx.now = tlp;
  next = UINT64_MAX;
  rig.reliability.RunTimers(pi, &next);
  EXPECT_EQ(rig.ctx.counters.tail_probes, 1u);
  EXPECT_EQ(rig.ctx.counters.rto_expirations, 0u);
  EXPECT_EQ(next, busy().rto_deadline) << "the RTO runs on";
  const std::vector<wire::View> sent = rig.BuildPackets(pi, 8);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].common.psn.value(), (isn + 2).value()) << "the newest";
  EXPECT_TRUE(Retransmit(sent[0]));
  EXPECT_TRUE(AckReq(sent[0]));
  rig.ctx.now = busy().rto_deadline;
  rig.reliability.RunTimers(pi, &next);
  EXPECT_EQ(rig.ctx.counters.rto_expirations, 1u);
  EXPECT_EQ(rig.ctx.counters.tail_probes, 1u) << "one probe per flight";
}

// The RTO resends snd_una (and what waited a whole RTO), counts, and doubles.
TEST(ReliabilityTimerTest, TheRtoResendsTheOldestPacketAndBacksOff) {
  auto [rig, pi] = RigWithPeer();
  const Psn isn = rig.session[pi].tx_isn;
  const uint64_t rto = rig.config.rto_initial_ns;
  const std::vector<uint8_t> a = Bytes(10), b = Bytes(10);
  ASSERT_EQ(SendAt(rig, pi, 1'000, a, 8), 1u);
  ASSERT_EQ(SendAt(rig, pi, 500'000, b, 8, 1), 1u);
  // Read afresh: the record is the peer's only while it is busy.
  const auto busy = [&]() -> const TxActive& { return rig.reliability.tx_active(pi); };
  EXPECT_EQ(busy().tlp_deadline, 0u);
  EXPECT_EQ(busy().rto_deadline, 1'000 + rto);
  rig.ctx.now = 1'000 + rto - 1;
  uint64_t next = UINT64_MAX;
  rig.reliability.RunTimers(pi, &next);
  EXPECT_EQ(rig.ctx.counters.rto_expirations, 0u);
  EXPECT_EQ(next, 1'000 + rto);
  rig.ctx.now = 1'000 + rto;
  rig.reliability.RunTimers(pi, &next);
  EXPECT_EQ(rig.ctx.counters.rto_expirations, 1u);
  EXPECT_EQ(rig.ctx.counters.tail_probes, 0u);
  EXPECT_EQ(busy().backoff, 1u);
  EXPECT_EQ(busy().rto_deadline, rig.ctx.now + 2 * rto);
  std::vector<wire::View> sent = rig.BuildPackets(pi, 8);
  ASSERT_EQ(sent.size(), 1u) << "isn+1 has not waited a whole RTO";
  EXPECT_EQ(sent[0].common.psn.value(), isn.value());
  EXPECT_TRUE(Retransmit(sent[0]));
  EXPECT_EQ(rig.ctx.counters.retransmits_timeout, 1u);
  rig.ctx.now = busy().rto_deadline;
  rig.reliability.RunTimers(pi, &next);
  EXPECT_EQ(rig.ctx.counters.rto_expirations, 2u);
  EXPECT_EQ(busy().backoff, 2u);
  EXPECT_EQ(busy().rto_deadline, rig.ctx.now + 4 * rto);
  sent = rig.BuildPackets(pi, 8);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].common.psn.value(), isn.value());
  // An ACK that advances ends the backoff.
  rig.ctx.now += 1'000;
  rig.reliability.OnAck(pi, rig.PeerAck(isn + 1, 64), nullptr);
  EXPECT_EQ(busy().backoff, 0u);
}

// A packet consumed without ACK_REQ gets a standalone ACK ack_delay_ns later.
TEST(ReliabilityTimerTest, ADelayedAckGoesAfterAckDelay) {
  auto [rig, pi] = RigWithPeer();
  ASSERT_EQ(ConsumeFirstAt(rig, pi, 1'000), Arrival::kInOrder);
  EXPECT_FALSE(rig.reliability.HasWork(pi));
  EXPECT_TRUE(rig.BuildPackets(pi, 4).empty());
  const uint64_t due = 1'000 + rig.config.ack_delay_ns;
  rig.ctx.now = due - 1;
  uint64_t next = UINT64_MAX;
  rig.reliability.RunTimers(pi, &next);
  EXPECT_EQ(next, due);
  EXPECT_TRUE(rig.BuildPackets(pi, 4).empty());
  rig.ctx.now = due;
  rig.reliability.RunTimers(pi, &next);
  const std::vector<wire::View> sent = rig.BuildPackets(pi, 4);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].common.type, wire::PacketType::kAck);
  EXPECT_EQ(sent[0].common.flags, wire::kFlagAckValid);
  EXPECT_EQ(sent[0].common.ack_psn.value(), kPeerIsn + 1);
  EXPECT_EQ(rig.ctx.counters.tx_acks, 1u);
  EXPECT_TRUE(rig.BuildPackets(pi, 4).empty()) << "acknowledged once";
}

// A packet with ACK_REQ is acknowledged at once.
TEST(ReliabilityTimerTest, AnAckRequestIsAnsweredAtOnce) {
  auto [rig, pi] = RigWithPeer();
  ASSERT_EQ(ConsumeFirstAt(rig, pi, 1'000, wire::kFlagAckReq), Arrival::kInOrder);
  EXPECT_TRUE(rig.reliability.HasWork(pi));
  const std::vector<wire::View> sent = rig.BuildPackets(pi, 4);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].common.type, wire::PacketType::kAck);
  EXPECT_EQ(sent[0].common.ack_psn.value(), kPeerIsn + 1);
}

// A packet of ours going back carries the ACK; the delayed one is dropped.
TEST(ReliabilityTimerTest, AReplyCarriesTheDelayedAck) {
  auto [rig, pi] = RigWithPeer();
  ASSERT_EQ(ConsumeFirstAt(rig, pi, 1'000), Arrival::kInOrder);
  const std::vector<uint8_t> a = Bytes(10);
  rig.reliability.Queue(pi, NewMsg(rig, a, 0));
  std::vector<wire::View> sent = rig.BuildPackets(pi, 4);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].common.type, wire::PacketType::kData);
  EXPECT_NE(sent[0].common.flags & wire::kFlagAckValid, 0);
  EXPECT_EQ(sent[0].common.ack_psn.value(), kPeerIsn + 1);
  rig.ctx.now = 1'000 + rig.config.ack_delay_ns;
  uint64_t next = UINT64_MAX;
  rig.reliability.RunTimers(pi, &next);
  EXPECT_TRUE(rig.BuildPackets(pi, 4).empty());
  EXPECT_EQ(rig.ctx.counters.tx_acks, 0u);
}

// ---- Receiving.

// Arrive: rcv_nxt in order, later ones in the window held, earlier ones duplicates, others out.
TEST(ReliabilityReceiveTest, ArriveClassifiesByPsn) {
  auto [rig, pi] = RigWithPeer();
  const uint32_t window = rig.config.window_packets;
  EXPECT_EQ(Arrive(rig, pi, Psn(kPeerIsn)), Arrival::kInOrder);
  EXPECT_EQ(Arrive(rig, pi, Psn(kPeerIsn + 3)), Arrival::kHeld);
  EXPECT_EQ(rig.reliability.rx_active(pi).held_count, 1u);
  EXPECT_EQ(Arrive(rig, pi, Psn(kPeerIsn + window - 1)), Arrival::kHeld);
  EXPECT_EQ(rig.ctx.counters.duplicates_dropped, 0u);
  EXPECT_EQ(rig.BuildPackets(pi, 4).size(), 1u) << "a hole: SACK at once";

  EXPECT_EQ(Arrive(rig, pi, Psn(kPeerIsn - 1)), Arrival::kDropped);
  EXPECT_EQ(rig.ctx.counters.duplicates_dropped, 1u);
  EXPECT_TRUE(rig.reliability.rx(pi).ack_now) << "a duplicate is acknowledged at once";
  EXPECT_EQ(rig.BuildPackets(pi, 4).size(), 1u);
  EXPECT_EQ(Arrive(rig, pi, Psn(kPeerIsn + 3)), Arrival::kDropped);
  EXPECT_EQ(rig.ctx.counters.duplicates_dropped, 2u);
  EXPECT_EQ(rig.BuildPackets(pi, 4).size(), 1u);
  EXPECT_EQ(Arrive(rig, pi, Psn(kPeerIsn + window)), Arrival::kDropped);
  EXPECT_EQ(rig.ctx.counters.out_of_window_dropped, 1u);
  EXPECT_EQ(rig.ctx.counters.duplicates_dropped, 2u);
  EXPECT_EQ(rig.reliability.rx_active(pi).held_count, 2u);
  EXPECT_TRUE(rig.ctx.released().empty()) << "dropped packets are the caller's to free";
}

// Once rcv_nxt arrives, NextHeld and DropHeld give back the held packets in PSN order.
TEST(ReliabilityReceiveTest, HeldPacketsAreReleasedInPsnOrder) {
  auto [rig, pi] = RigWithPeer();
  driver::Packet *p2 = nullptr, *p1 = nullptr, *p4 = nullptr;
  ASSERT_EQ(Arrive(rig, pi, Psn(kPeerIsn + 2), &p2), Arrival::kHeld);
  ASSERT_EQ(Arrive(rig, pi, Psn(kPeerIsn + 1), &p1), Arrival::kHeld);
  ASSERT_EQ(Arrive(rig, pi, Psn(kPeerIsn + 4), &p4), Arrival::kHeld);
  EXPECT_EQ(rig.reliability.NextHeld(pi), nullptr) << "rcv_nxt has not come";
  ASSERT_EQ(Arrive(rig, pi, Psn(kPeerIsn)), Arrival::kInOrder);
  rig.reliability.Consumed(pi);
  std::vector<driver::Packet*> order;
  for (HeldPacket* h = rig.reliability.NextHeld(pi); h != nullptr;
       h = rig.reliability.NextHeld(pi)) {
    EXPECT_EQ(h->type, wire::PacketType::kData);
    EXPECT_EQ(h->msg.msg_id, rig.reliability.rx(pi).rcv_nxt.value());
    const std::vector<uint8_t> want = Bytes(8, static_cast<uint8_t>(h->msg.msg_id));
    EXPECT_EQ(std::vector<uint8_t>(h->payload().begin(), h->payload().end()), want);
    order.push_back(h->pkt);
    rig.reliability.DropHeld(pi, h);
    rig.reliability.Consumed(pi);
  }
  EXPECT_EQ(order, (std::vector<driver::Packet*>{p1, p2}));
  const absl::Span<driver::Packet* const> released = rig.ctx.released();
  EXPECT_EQ(std::vector<driver::Packet*>(released.begin(), released.end()), order);
  EXPECT_EQ(rig.reliability.rx(pi).rcv_nxt.value(), kPeerIsn + 3);
  EXPECT_EQ(rig.reliability.rx_active(pi).held_count, 1u) << "isn+4 waits for isn+3";
}

// A hole: the ACK names rcv_nxt and, in its SACK bitmap, exactly the held PSNs.
TEST(ReliabilityReceiveTest, AHoleMakesAnAckWhoseSackNamesTheHeldPsns) {
  auto [rig, pi] = RigWithPeer();
  ASSERT_EQ(Arrive(rig, pi, Psn(kPeerIsn + 2)), Arrival::kHeld);
  ASSERT_EQ(Arrive(rig, pi, Psn(kPeerIsn + 4)), Arrival::kHeld);
  const std::vector<wire::View> sent = rig.BuildPackets(pi, 4);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].common.type, wire::PacketType::kAck);
  EXPECT_EQ(sent[0].common.ack_psn.value(), kPeerIsn);
  for (uint32_t i = 0; i < wire::kSackBits; ++i) {
    EXPECT_EQ(sent[0].ack.Has(i), i == 1 || i == 3) << "bit " << i;
  }
}

// A refusal owes an RNR ACK at rcv_nxt; RetryRefused then owes one window update.
TEST(ReliabilityReceiveTest, ARefusalOwesAnRnrAckThenAWindowUpdate) {
  auto [rig, pi] = RigWithPeer();
  ASSERT_EQ(Arrive(rig, pi, Psn(kPeerIsn)), Arrival::kInOrder);
  rig.reliability.Refused(pi);
  EXPECT_EQ(rig.ctx.counters.rnr_sent, 1u);
  std::vector<wire::View> sent = rig.BuildPackets(pi, 4);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].common.type, wire::PacketType::kAck);
  EXPECT_NE(sent[0].common.flags & wire::kFlagRnr, 0);
  EXPECT_EQ(sent[0].common.ack_psn.value(), kPeerIsn) << "not consumed";
  EXPECT_TRUE(rig.BuildPackets(pi, 4).empty());
  rig.reliability.RetryRefused();
  sent = rig.BuildPackets(pi, 4);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].common.type, wire::PacketType::kAck);
  EXPECT_EQ(sent[0].common.flags & wire::kFlagRnr, 0);
  EXPECT_EQ(sent[0].common.ack_psn.value(), kPeerIsn);
  rig.reliability.RetryRefused();
  EXPECT_TRUE(rig.BuildPackets(pi, 4).empty()) << "one window update per refusal";
}

// The credit is 1 plus what can still be held: held packets shrink the other peers' grants.
TEST(ReliabilityReceiveTest, TheGrantShrinksAsPacketsAreHeld) {
  StageRig rig(StageRig::DefaultConfig(), /*held_budget=*/4);
  const uint32_t pi = rig.AddEstablishedPeer();
  const uint32_t pj = rig.AddOtherPeer();
  EXPECT_EQ(rig.reliability.Grant(pi), 5u);
  EXPECT_EQ(rig.reliability.Grant(pj), 5u);
  for (uint32_t k = 1; k <= 3; ++k) ASSERT_EQ(Arrive(rig, pi, Psn(kPeerIsn + k)), Arrival::kHeld);
  EXPECT_EQ(rig.reliability.Grant(pi), 5u) << "what it holds stays its own";
  EXPECT_EQ(rig.reliability.Grant(pj), 2u);
  ASSERT_EQ(Arrive(rig, pi, Psn(kPeerIsn + 4)), Arrival::kHeld);
  EXPECT_EQ(rig.reliability.Grant(pj), 1u) << "rcv_nxt is always welcome";
  EXPECT_EQ(Arrive(rig, pi, Psn(kPeerIsn + 5)), Arrival::kDropped);
  EXPECT_EQ(rig.ctx.counters.reorder_buffer_full, 1u);
  rig.reliability.ResetRx(pi);
  EXPECT_EQ(rig.reliability.Grant(pj), 5u);
}

// ---- RNR at the sender.

// An RNR ACK stops the stream (no RTO) until rnr_retry_min_ns, doubling per refusal.
TEST(ReliabilityRnrTest, AnRnrAckBacksOffThenRetries) {
  auto [rig, pi] = RigWithPeer();
  const Psn isn = rig.session[pi].tx_isn;
  const uint64_t retry_min = rig.config.rnr_retry_min_ns;
  const std::vector<uint8_t> a = Bytes(10);
  ASSERT_EQ(SendAt(rig, pi, 1'000, a, 4), 1u);
  AckAt(rig, pi, 2'000, rig.PeerAck(isn, 64, wire::kFlagRnr));
  // Read afresh: the record is the peer's only while it is busy.
  const auto busy = [&]() -> const TxActive& { return rig.reliability.tx_active(pi); };
  EXPECT_TRUE(busy().rnr.waiting);
  EXPECT_EQ(busy().rnr.until, 2'000 + retry_min);
  EXPECT_EQ(busy().rto_deadline, 0u) << "a refusal is not a loss";
  EXPECT_EQ(rig.ctx.counters.rnr_received, 1u);
  EXPECT_FALSE(rig.reliability.HasWork(pi));
  rig.ctx.now = 2'000 + retry_min - 1;
  uint64_t next = UINT64_MAX;
  rig.reliability.RunTimers(pi, &next);
  EXPECT_EQ(next, 2'000 + retry_min);
  EXPECT_TRUE(rig.BuildPackets(pi, 4).empty());
  rig.ctx.now = 2'000 + retry_min;
  rig.reliability.RunTimers(pi, &next);
  std::vector<wire::View> sent = rig.BuildPackets(pi, 4);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].common.psn.value(), isn.value());
  EXPECT_TRUE(Retransmit(sent[0]));
  EXPECT_NE(busy().rto_deadline, 0u) << "the RTO guards the retry";
  rig.ctx.now += 1'000;
  rig.reliability.OnAck(pi, rig.PeerAck(isn, 64, wire::kFlagRnr), nullptr);
  EXPECT_EQ(busy().rnr.delay, 2 * retry_min);
  EXPECT_EQ(busy().rnr.until, rig.ctx.now + 2 * retry_min);
  EXPECT_EQ(busy().rnr.since, 2'000u) << "counted from the first refusal";
  EXPECT_EQ(rig.ctx.counters.rnr_received, 2u);
}

// A window update (an ACK without RNR) ends the RNR wait at once.
TEST(ReliabilityRnrTest, AWindowUpdateRetriesAtOnce) {
  auto [rig, pi] = RigWithPeer();
  const Psn isn = rig.session[pi].tx_isn;
  const std::vector<uint8_t> a = Bytes(10);
  ASSERT_EQ(SendAt(rig, pi, 1'000, a, 4), 1u);
  AckAt(rig, pi, 2'000, rig.PeerAck(isn, 64, wire::kFlagRnr));
  ASSERT_TRUE(rig.reliability.tx_active(pi).rnr.waiting);
  AckAt(rig, pi, 3'000, rig.PeerAck(isn, 64));
  EXPECT_FALSE(rig.reliability.tx_active(pi).rnr.waiting);
  const std::vector<wire::View> sent = rig.BuildPackets(pi, 4);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].common.psn.value(), isn.value());
  EXPECT_TRUE(Retransmit(sent[0]));
}

// With the opt-in rnr_give_up_ns, a message refused that long fails
// (ENOSPC) and goes again abandoned, no payload.
TEST(ReliabilityRnrTest, AMessageRefusedForRnrGiveUpNsIsGivenUp) {
  EndpointConfig c = StageRig::DefaultConfig();
  c.rnr_give_up_ns = 5'000'000'000;
  StageRig rig(c);
  const uint32_t pi = rig.AddEstablishedPeer(Psn(kPeerIsn), /*credit=*/1);
  const Psn isn = rig.session[pi].tx_isn;
  const uint64_t give_up = rig.config.rnr_give_up_ns;
  int context = 0;
  const std::vector<uint8_t> a = Bytes(3 * StageRig::kSeg), b = Bytes(10);
  rig.ctx.now = 1'000;
  const uint32_t oa = NewMsg(rig, a, 4, &context);
  rig.reliability.Queue(pi, oa);
  rig.reliability.Queue(pi, NewMsg(rig, b, 5));
  ASSERT_EQ(rig.BuildPackets(pi, 4).size(), 1u);
  AckAt(rig, pi, 2'000, rig.PeerAck(isn, 1, wire::kFlagRnr));
  // Retried and refused again shortly before the limit: it backs off once more.
  rig.ctx.now = 2'000 + give_up - 100'000;
  uint64_t next = UINT64_MAX;
  rig.reliability.RunTimers(pi, &next);
  ASSERT_EQ(rig.BuildPackets(pi, 4).size(), 1u);
  rig.reliability.OnAck(pi, rig.PeerAck(isn, 1, wire::kFlagRnr), nullptr);
  EXPECT_TRUE(rig.reliability.tx_active(pi).rnr.waiting);
  EXPECT_EQ(rig.completions.errors_ready(), 0u);
  EXPECT_FALSE(rig.ops[oa].abandoned);
  // Retried and refused at the limit: given up.
  rig.ctx.now = 2'000 + give_up;
  rig.reliability.RunTimers(pi, &next);
  ASSERT_EQ(rig.BuildPackets(pi, 4).size(), 1u);
  rig.reliability.OnAck(pi, rig.PeerAck(isn, 1, wire::kFlagRnr), nullptr);
  EXPECT_EQ(rig.ctx.counters.rnr_give_ups, 1u);
  ErrorCompletion err[2];
  ASSERT_EQ(rig.completions.PollErrors(err), 1u);
  EXPECT_EQ(err[0].err, ENOSPC);
  EXPECT_EQ(err[0].op.context, &context);
  EXPECT_NE(std::strstr(err[0].message, "has posted no receive"), nullptr) << err[0].message;
  EXPECT_TRUE(rig.ops[oa].abandoned);
  EXPECT_FALSE(rig.reliability.tx_active(pi).rnr.waiting);
  std::vector<wire::View> sent = rig.BuildPackets(pi, 4);
  ASSERT_EQ(sent.size(), 1u) << "the window holds one packet";
  EXPECT_EQ(sent[0].common.psn.value(), isn.value());
  EXPECT_EQ(sent[0].msg.msg_id, 4u);
  EXPECT_NE(sent[0].msg.msg_flags & wire::kMsgAbandoned, 0);
  EXPECT_TRUE(sent[0].payload.empty());
  EXPECT_EQ(sent[0].msg.offset, 0u);
  EXPECT_EQ(sent[0].msg.total_length, a.size());
  // Its ACK frees it without a completion; the next message goes on.
  rig.ctx.now += 1'000;
  rig.reliability.OnAck(pi, rig.PeerAck(isn + 1, 64), nullptr);
  EXPECT_EQ(rig.completions.ready(), 0u);
  EXPECT_EQ(rig.ops.live(OpKind::kMsg), 1u);
  sent = rig.BuildPackets(pi, 4);
  ASSERT_EQ(sent.size(), 1u) << "A's unsent segments never go";
  EXPECT_EQ(sent[0].common.psn.value(), (isn + 1).value());
  EXPECT_EQ(sent[0].msg.msg_id, 5u);
  EXPECT_FALSE(Retransmit(sent[0]));
}

// By default (rnr_give_up_ns 0) a refused message is retried for as long as
// the receiver answers: refusals for ten minutes (120 times the old 5 s
// give-up), the backoff capped at
// rnr_retry_max_ns, and the message goes through once the receiver takes it.
TEST(ReliabilityRnrTest, ByDefaultARefusedMessageIsRetriedWhileTheReceiverAnswers) {
  StageRig rig;
  ASSERT_EQ(rig.config.rnr_give_up_ns, 0u);
  const uint32_t pi = rig.AddEstablishedPeer(Psn(kPeerIsn), /*credit=*/1);
  const Psn isn = rig.session[pi].tx_isn;
  int context = 0;
  const std::vector<uint8_t> a = Bytes(100);
  rig.ctx.now = 1'000;
  const uint32_t oa = NewMsg(rig, a, 4, &context);
  rig.reliability.Queue(pi, oa);
  ASSERT_EQ(rig.BuildPackets(pi, 4).size(), 1u);
  rig.reliability.OnAck(pi, rig.PeerAck(isn, 1, wire::kFlagRnr), nullptr);
  uint64_t tries = 1, next = UINT64_MAX;
  const uint64_t until = 600'000'000'000;
  while (rig.ctx.now < until) {
    const RnrState& r = rig.reliability.tx_active(pi).rnr;
    ASSERT_TRUE(r.waiting) << rig.ctx.now;
    ASSERT_LE(r.until - rig.ctx.now, rig.config.rnr_retry_max_ns);
    rig.ctx.now = r.until;
    rig.reliability.RunTimers(pi, &next);
    ASSERT_EQ(rig.BuildPackets(pi, 4).size(), 1u) << "retried at " << rig.ctx.now;
    rig.reliability.OnAck(pi, rig.PeerAck(isn, 1, wire::kFlagRnr), nullptr);
    ++tries;
  }
  EXPECT_EQ(rig.ctx.counters.rnr_give_ups, 0u);
  EXPECT_EQ(rig.ctx.counters.rnr_received, tries);
  EXPECT_GE(tries, until / rig.config.rnr_retry_max_ns);
  EXPECT_EQ(rig.completions.errors_ready(), 0u);
  EXPECT_FALSE(rig.ops[oa].abandoned);
  // The receiver takes it at last: it completes, with its context.
  rig.reliability.OnAck(pi, rig.PeerAck(isn + 1, 64), nullptr);
  Completion done[2];
  ASSERT_EQ(rig.completions.Poll(done), 1u);
  EXPECT_EQ(done[0].context, &context);
}

// An op whose traits do not allow it (an RMA write) is never given up, even
// with the opt-in rnr_give_up_ns.
TEST(ReliabilityRnrTest, AWriteIsNeverGivenUp) {
  EndpointConfig c = StageRig::DefaultConfig();
  c.rnr_give_up_ns = 5'000'000'000;
  auto [rig, pi] = RigWithPeer(c);
  const Psn isn = rig.session[pi].tx_isn;
  const std::vector<uint8_t> w = Bytes(64);
  rig.ctx.now = 1'000;
  const uint32_t ow = NewWrite(rig, w);
  rig.reliability.Queue(pi, ow);
  ASSERT_EQ(rig.BuildPackets(pi, 4).size(), 1u);
  uint64_t next = UINT64_MAX;
  for (uint64_t at : {uint64_t{2'000}, 2'000 + rig.config.rnr_give_up_ns,
                      2'000 + 3 * rig.config.rnr_give_up_ns}) {
    rig.ctx.now = at;
    rig.reliability.RunTimers(pi, &next);
    rig.BuildPackets(pi, 4);
    rig.reliability.OnAck(pi, rig.PeerAck(isn, 64, wire::kFlagRnr), nullptr);
    EXPECT_TRUE(rig.reliability.tx_active(pi).rnr.waiting) << at;
  }
  EXPECT_EQ(rig.ctx.counters.rnr_received, 3u);
  EXPECT_EQ(rig.ctx.counters.rnr_give_ups, 0u);
  EXPECT_EQ(rig.completions.errors_ready(), 0u);
  EXPECT_FALSE(rig.ops[ow].abandoned);
  EXPECT_EQ(rig.ops[ow].state, OpState::kQueued);
}

// ---- Sessions.

// RestartTx forgets what was in flight: the queued ops start over at the new initial PSN.
TEST(ReliabilitySessionTest, RestartTxForgetsWhatWasInFlight) {
  StageRig rig;
  const uint32_t pi = rig.AddEstablishedPeer(Psn(kPeerIsn), /*credit=*/1);
  const std::vector<uint8_t> a = Bytes(2 * StageRig::kSeg), b = Bytes(10);
  rig.ctx.now = 1'000;
  const uint32_t oa = NewMsg(rig, a, 0);
  const uint32_t ob = NewMsg(rig, b, 1);
  rig.reliability.Queue(pi, oa);
  rig.reliability.Queue(pi, ob);
  ASSERT_EQ(rig.BuildPackets(pi, 4).size(), 1u) << "half of A";
  rig.ctx.now = 1'000 + rig.config.rto_initial_ns;
  uint64_t next = UINT64_MAX;
  rig.reliability.RunTimers(pi, &next);
  ASSERT_EQ(rig.reliability.tx_active(pi).retx_queued, 1u);
  // As FailPeer: the started op goes, the session ends, the stream restarts.
  rig.reliability.Unqueue(pi, oa);
  rig.ops.Free(oa);
  rig.reliability.ResetRx(pi);
  const Psn old_isn = rig.session[pi].tx_isn;
  rig.session.EndSession(pi, /*more_to_send=*/true);
  rig.reliability.RestartTx(pi);
  const Psn isn = rig.session[pi].tx_isn;
  ASSERT_NE(isn.value(), old_isn.value());
  const TxStream& t = rig.reliability.tx(pi);
  // Read afresh: the record is the peer's only while it is busy.
  const auto busy = [&]() -> const TxActive& { return rig.reliability.tx_active(pi); };
  EXPECT_EQ(t.next_psn.value(), isn.value());
  EXPECT_EQ(t.snd_una.value(), isn.value());
  EXPECT_EQ(t.inflight(), 0u);
  EXPECT_EQ(busy().retx_queued, 0u);
  EXPECT_EQ(busy().rto_deadline, 0u);
  EXPECT_EQ(busy().backoff, 0u);
  EXPECT_EQ(busy().cursor_op, ob);
  EXPECT_FALSE(rig.reliability.HasWork(pi)) << "not before the new handshake";
  // A new handshake: B goes first, at the new initial PSN.
  wire::View hello = rig.FromPeer(wire::PacketType::kHelloAck, Psn(5000));
  hello.hello.max_datagram = 1472;
  ASSERT_TRUE(rig.session.Accept(pi, hello));
  rig.reliability.StartRx(pi, 64);
  rig.reliability.OnAck(pi, rig.PeerAck(isn, 64, 0, wire::PacketType::kHelloAck), nullptr);
  ASSERT_TRUE(rig.session[pi].tx_ready);
  const std::vector<wire::View> sent = rig.BuildPackets(pi, 4);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].common.psn.value(), isn.value());
  EXPECT_FALSE(Retransmit(sent[0]));
  EXPECT_EQ(sent[0].msg.msg_id, 1u);
  EXPECT_EQ(sent[0].common.ack_psn.value(), 5000u);
}

// ResetRx releases what was held and forgets the refusal and the ACKs owed.
TEST(ReliabilitySessionTest, ResetRxReleasesWhatWasHeld) {
  auto [rig, pi] = RigWithPeer();
  const uint16_t grant = rig.reliability.Grant(pi);
  driver::Packet *p2 = nullptr, *p3 = nullptr;
  ASSERT_EQ(Arrive(rig, pi, Psn(kPeerIsn + 2), &p2), Arrival::kHeld);
  ASSERT_EQ(Arrive(rig, pi, Psn(kPeerIsn + 3), &p3), Arrival::kHeld);
  ASSERT_EQ(Arrive(rig, pi, Psn(kPeerIsn)), Arrival::kInOrder);
  rig.reliability.Refused(pi);
  ASSERT_TRUE(rig.reliability.HasWork(pi));
  rig.reliability.ResetRx(pi);
  EXPECT_EQ(rig.reliability.rx_active(pi).held_count, 0u);
  const absl::Span<driver::Packet* const> released = rig.ctx.released();
  EXPECT_EQ(std::vector<driver::Packet*>(released.begin(), released.end()),
            (std::vector<driver::Packet*>{p2, p3}));
  EXPECT_FALSE(rig.reliability.HasWork(pi));
  EXPECT_TRUE(rig.BuildPackets(pi, 4).empty());
  rig.reliability.RetryRefused();
  EXPECT_TRUE(rig.BuildPackets(pi, 4).empty()) << "the refusal was forgotten";
  EXPECT_EQ(rig.reliability.Grant(pi), grant);
  EXPECT_FALSE(rig.reliability.Busy(pi));
}

// ---- Congestion control (congestion.h).

// The peer grants `credit` (its first ACK) and message 0 of `bytes` is queued.
void OpenAndQueue(StageRig& rig, uint32_t pi, uint16_t credit, const std::vector<uint8_t>& bytes) {
  rig.reliability.OnAck(pi, rig.PeerAck(rig.session[pi].tx_isn, credit), nullptr);
  rig.reliability.Queue(pi, NewMsg(rig, bytes, 0));
}

// The first flight is cc_initial_window, whatever the credit; its last
// packet asks for the ACK that lets the sender go on; a full window is
// counted once.
TEST(CongestionTest, FirstFlightIsTheInitialWindow) {
  auto [rig, pi] = RigWithPeer();
  const std::vector<uint8_t> a = Bytes(64 * size_t{StageRig::kSeg});
  OpenAndQueue(rig, pi, 128, a);
  const std::vector<wire::View> sent = rig.BuildPackets(pi, 64);
  ASSERT_EQ(sent.size(), 16u);
  for (size_t i = 0; i + 1 < sent.size(); ++i) ASSERT_FALSE(AckReq(sent[i])) << i;
  EXPECT_TRUE(AckReq(sent.back()));
  EXPECT_EQ(rig.ctx.counters.cwnd_stalls, 1u);
  EXPECT_EQ(rig.ctx.counters.window_stalls, 0u) << "the credit was open";
  EXPECT_FALSE(rig.reliability.HasWork(pi));
  EXPECT_TRUE(rig.BuildPackets(pi, 64).empty());
  EXPECT_EQ(rig.ctx.counters.cwnd_stalls, 1u) << "once per filling";
}

// Off: the credit alone (the same op sends 64 at once); and a peer on this
// host (its frames come through shared memory) never has a window.
TEST(CongestionTest, OffOrOnThisHostTheCreditAlone) {
  for (bool same_host : {false, true}) {
    EndpointConfig c = StageRig::DefaultConfig();
    c.congestion_control = same_host;
    auto [rig, pi] = RigWithPeer(c);
    if (same_host) rig.session.NoteSameHost(pi);
    const std::vector<uint8_t> a = Bytes(64 * size_t{StageRig::kSeg});
    OpenAndQueue(rig, pi, 128, a);
    EXPECT_EQ(rig.BuildPackets(pi, 64).size(), 64u) << same_host;
    EXPECT_EQ(rig.ctx.counters.cwnd_stalls, 0u);
    EXPECT_FALSE(rig.reliability.CcOn(pi));
  }
}

// Slow start doubles the window per round trip while it is in use; a loss
// signal halves it once per round trip however many holes that flight
// shows; an RTO leaves the minimum window.
TEST(CongestionTest, SlowStartHalvingOncePerRoundTripAndRto) {
  auto [rig, pi] = RigWithPeer();
  const Psn isn = rig.session[pi].tx_isn;
  const std::vector<uint8_t> a = Bytes(400 * size_t{StageRig::kSeg});
  OpenAndQueue(rig, pi, 256, a);
  rig.ctx.now = 1'000;
  ASSERT_EQ(rig.BuildPackets(pi, 256).size(), 16u);
  AckAt(rig, pi, 1'001'000, rig.PeerAck(isn + 16, 256));  // a 1 ms round trip
  EXPECT_EQ(rig.reliability.tx(pi).cc.cwnd(), 32u);
  // Pacing: 32 over half the RTT (gain 2), 15.6 us apart: the burst goes,
  // then the rest wait for their time.
  const size_t burst = rig.BuildPackets(pi, 256).size();
  EXPECT_EQ(burst, CongestionWindow::kPacingBurst);
  EXPECT_EQ(rig.ctx.counters.pacing_waits, 1u);
  EXPECT_FALSE(rig.reliability.HasWork(pi)) << "its timer queues it";
  uint64_t next = UINT64_MAX;
  rig.ctx.now = rig.reliability.tx_active(pi).cc.next_send_ns;
  rig.reliability.RunTimers(pi, &next);
  EXPECT_TRUE(rig.reliability.HasWork(pi));
  size_t sent = burst;
  for (int i = 0; i < 100 && sent < 32; ++i) {
    sent += rig.BuildPackets(pi, 256).size();
    rig.ctx.now += 10'000;
  }
  EXPECT_EQ(sent, 32u) << "the window, spread";
  const Psn flight_end = isn + 16 + 32;
  EXPECT_EQ(rig.reliability.tx(pi).next_psn, flight_end);
  // Two holes reported by two ACKs of one flight: one halving.
  const wire::AckFields gap1 = Sack({1, 2, 3});
  AckAt(rig, pi, rig.ctx.now + 1'000, rig.PeerAck(isn + 16, 256), &gap1);
  EXPECT_EQ(rig.reliability.tx(pi).cc.cwnd(), 16u);
  const wire::AckFields gap2 = Sack({0, 1, 2, 3, 5, 6, 7, 8});
  AckAt(rig, pi, rig.ctx.now + 2'000, rig.PeerAck(isn + 16, 256), &gap2);
  EXPECT_EQ(rig.reliability.tx(pi).cc.cwnd(), 16u);
  EXPECT_EQ(rig.ctx.counters.cwnd_reductions, 1u);
  EXPECT_TRUE(rig.reliability.tx_active(pi).cc.in_recovery);
  // The RTO: the minimum window.
  next = UINT64_MAX;
  rig.ctx.now = rig.reliability.tx_active(pi).rto_deadline;
  rig.reliability.RunTimers(pi, &next);
  EXPECT_EQ(rig.reliability.tx(pi).cc.cwnd(), CongestionWindow::kMinWindow);
  EXPECT_EQ(rig.reliability.tx(pi).cc.ssthresh(), 8u);
  EXPECT_EQ(rig.ctx.counters.rto_expirations, 1u);
}

// A peer of this host (its frames came through shared memory) with
// `packets` segments of one message in flight since 1 us.
struct LocalFlight : RigWithPeer {
  explicit LocalFlight(size_t packets) : bytes(Bytes(packets * size_t{StageRig::kSeg})) {
    rig.session.NoteSameHost(pi);
    OpenAndQueue(rig, pi, 256, bytes);
    rig.ctx.now = 1'000;
    EXPECT_EQ(rig.BuildPackets(pi, 256).size(), packets);
  }
  // The RTO fires: what goes.
  std::vector<wire::View> Rto() {
    rig.ctx.now = rig.reliability.tx_active(pi).rto_deadline;
    uint64_t next = UINT64_MAX;
    rig.reliability.RunTimers(pi, &next);
    return rig.BuildPackets(pi, 256);
  }
  void Ack(uint32_t past_isn, const wire::AckFields* sack = nullptr) {
    AckAt(rig, pi, rig.ctx.now + 1'000, rig.PeerAck(isn + past_isn, 256), sack);
  }
  uint32_t Psn(const wire::View& v) const { return v.common.psn.value() - isn.value(); }
  const std::vector<uint8_t> bytes;
  const rdm::Psn isn = rig.session[pi].tx_isn;
};

// Toward a peer of this host, the RTO resends snd_una alone, every time:
// an ACK that stops right after it says nothing (a receiver that
// acknowledges every packet sent it for the original too), and the next
// RTO resends the next packet alone. A drop (a receiver that stopped
// reading for 10 ms) is repaired by SACKs: the peer reports holding a
// later packet, and the holes far enough below it go at once.
TEST(ReliabilityTimerTest, OnThisHostEachRtoResendsTheOldestAlone) {
  LocalFlight f(8);
  std::vector<wire::View> sent = f.Rto();
  ASSERT_EQ(sent.size(), 1u) << "every packet has waited an RTO, but the oldest goes alone";
  EXPECT_EQ(f.Psn(sent[0]), 0u);
  f.Ack(1);
  EXPECT_TRUE(f.rig.BuildPackets(f.pi, 256).empty()) << "one ACK past it says nothing";
  sent = f.Rto();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(f.Psn(sent[0]), 1u);
  // The peer has isn + 7: isn + 2 to isn + 4 are far enough below it.
  const wire::AckFields held = Sack({4});
  f.Ack(2, &held);
  sent = f.rig.BuildPackets(f.pi, 256);
  ASSERT_EQ(sent.size(), 3u);
  for (uint32_t k = 0; k < 3; ++k) {
    EXPECT_EQ(f.Psn(sent[k]), 2 + k);
    EXPECT_TRUE(Retransmit(sent[k])) << k;
  }
  EXPECT_EQ(f.rig.ctx.counters.rto_expirations, 2u);
  EXPECT_EQ(f.rig.ctx.counters.rto_spurious, 0u);
  // The repairs arrive: the ACK passes isn + 2, which arrived resent, so
  // the timeout was needed.
  f.Ack(8);
  EXPECT_EQ(f.rig.reliability.tx(f.pi).snd_una, f.isn + 8);
  EXPECT_EQ(f.rig.ctx.counters.rto_spurious, 0u) << "isn + 2 arrived resent";
}

// Toward a peer of this host that acknowledges every packet as it reads
// it: the RTO's packet answered alone, then the next packet acknowledged
// without being resent: the timeout was spurious, and nothing more goes.
TEST(ReliabilityTimerTest, OnThisHostAPacketByPacketReaderMakesTheRtoSpurious) {
  LocalFlight f(6);
  ASSERT_EQ(f.Rto().size(), 1u);
  for (uint32_t k = 1; k <= 6; ++k) {
    f.Ack(k);
    EXPECT_TRUE(f.rig.BuildPackets(f.pi, 256).empty()) << k;
  }
  EXPECT_EQ(f.rig.ctx.counters.rto_spurious, 1u);
  EXPECT_EQ(f.rig.ctx.counters.retransmits_timeout, 1u);
  EXPECT_EQ(f.rig.reliability.tx(f.pi).snd_una, f.isn + 6);
}

// Toward a peer of this host, an ACK past the packet the RTO resent says
// that the packets sent before it arrived (a receiver descheduled on a
// busy host): the timeout was spurious, and nothing more goes again.
TEST(ReliabilityTimerTest, OnThisHostAnAckPastTheRtosPacketMakesItSpurious) {
  LocalFlight f(40);
  // The peer stops answering for a while: the RTO fires, and fires again.
  for (int k = 0; k < 2; ++k) {
    const std::vector<wire::View> sent = f.Rto();
    ASSERT_EQ(sent.size(), 1u) << k;
    EXPECT_EQ(f.Psn(sent[0]), 0u) << k;
  }
  // It wakes and acknowledges a burst of what it had.
  f.Ack(30);
  EXPECT_EQ(f.rig.ctx.counters.rto_expirations, 2u);
  EXPECT_EQ(f.rig.ctx.counters.rto_spurious, 1u);
  EXPECT_TRUE(f.rig.BuildPackets(f.pi, 256).empty()) << "isn + 30 and after are only late";
  EXPECT_EQ(f.rig.ctx.counters.retransmits_timeout, 2u);
  f.Ack(40);
  EXPECT_EQ(f.rig.reliability.tx(f.pi).snd_una, f.isn + 40);
}

// Toward a peer of this host that had reported holding later packets, the
// ACK that passes the packet the RTO resent says it filled a hole, not
// that the timeout was spurious.
TEST(ReliabilityTimerTest, OnThisHostAnRtoThatFillsAReportedHoleIsNotSpurious) {
  LocalFlight f(5);
  const wire::AckFields held = Sack({0, 1});  // isn + 1 and isn + 2
  f.Ack(0, &held);
  const std::vector<wire::View> sent = f.Rto();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(f.Psn(sent[0]), 0u);
  f.Ack(3);
  EXPECT_EQ(f.rig.ctx.counters.rto_spurious, 0u);
  EXPECT_TRUE(f.rig.BuildPackets(f.pi, 256).empty()) << "isn + 3 and isn + 4 wait for their own ACK";
}

TEST(CongestionTest, WindowArithmetic) {
  CongestionWindow w;
  CcFlight f;
  w.Reset(10, 128);
  EXPECT_EQ(w.cwnd(), 10u);
  CongestionWindow::OnSent(f, Psn(100), 0);  // the flight starts at 100
  w.OnAcked(f, 10, Psn(110), Psn(110));
  EXPECT_EQ(w.cwnd(), 10u) << "not in use: no growth (RFC 7661)";
  CongestionWindow::NoteLimited(f);
  w.OnAcked(f, 5, Psn(115), Psn(125));
  EXPECT_EQ(w.cwnd(), 15u) << "slow start: +1 per packet";
  EXPECT_TRUE(w.OnLoss(f, Psn(115), Psn(130)));
  EXPECT_EQ(w.cwnd(), 7u);
  EXPECT_FALSE(w.OnLoss(f, Psn(120), Psn(131))) << "same flight";
  CongestionWindow::NoteLimited(f);
  w.OnAcked(f, 10, Psn(125), Psn(131));
  EXPECT_EQ(w.cwnd(), 7u) << "no growth in recovery";
  CongestionWindow::NoteLimited(f);
  w.OnAcked(f, 6, Psn(131), Psn(138));
  EXPECT_EQ(w.cwnd(), 7u) << "recovery ends; 6 of 7 acked in avoidance";
  CongestionWindow::NoteLimited(f);
  w.OnAcked(f, 1, Psn(132), Psn(139));
  EXPECT_EQ(w.cwnd(), 8u) << "+1 per window acknowledged";
  EXPECT_TRUE(w.OnLoss(f, Psn(132), Psn(139)));
  EXPECT_EQ(w.cwnd(), 4u);
  EXPECT_TRUE(w.OnLoss(f, Psn(139), Psn(140)));
  EXPECT_EQ(w.cwnd(), CongestionWindow::kMinWindow) << "never below the minimum";
  w.OnRto(f, Psn(140));
  EXPECT_EQ(w.cwnd(), CongestionWindow::kLossWindow);
  w.Reset(1000, 64);
  EXPECT_EQ(w.cwnd(), 64u) << "never above the credit's maximum";
  // Pacing: 64 packets over 640 us at gain 5/4 (not slow start: ssthresh
  // is the maximum): 8 us apart.
  f = CcFlight{};
  w.SetRtt(f, 640'000);
  EXPECT_TRUE(CongestionWindow::PaceAllows(f, 0));
  for (uint32_t i = 0; i < CongestionWindow::kPacingBurst; ++i) {
    ASSERT_TRUE(CongestionWindow::PaceAllows(f, 1'000'000));
    CongestionWindow::OnSent(f, Psn(i), 1'000'000);
  }
  EXPECT_FALSE(CongestionWindow::PaceAllows(f, 1'000'000)) << "the burst is bounded";
  EXPECT_FALSE(CongestionWindow::PaceAllows(f, 1'005'999));
  EXPECT_TRUE(CongestionWindow::PaceAllows(f, 1'006'000)) << "due within the slack";
}

// What persists while a peer is idle is the window; the flight's part
// (recovery, pacing) starts fresh with the next flight, at its first PSN.
TEST(CongestionTest, AFlightAfterIdleKeepsTheWindowAndStartsItsOwnRound) {
  CongestionWindow w;
  CcFlight f;
  w.Reset(16, 256);
  CongestionWindow::OnSent(f, Psn(0xfffffff0), 0);  // near the PSN space's wrap
  CongestionWindow::NoteLimited(f);
  w.OnAcked(f, 16, Psn(0), Psn(0));
  EXPECT_EQ(w.cwnd(), 32u);
  f = CcFlight{};  // idle: the record went back
  CongestionWindow::OnSent(f, Psn(0x7ffffff0), 0);  // half the space away
  EXPECT_EQ(w.cwnd(), 32u) << "the window persists";
  EXPECT_TRUE(w.OnLoss(f, Psn(0x7ffffff0), Psn(0x80000000)))
      << "a fresh flight may be cut whatever its PSNs";
  EXPECT_EQ(w.cwnd(), 16u);
}

}  // namespace
}  // namespace bypass::rdm
