// Test helper: the stages of one endpoint built and wired exactly as the
// Engine wires them, without the Engine, so a stage's unit test calls it
// directly; plus a peer that looks like a remote endpoint (its address and
// the headers its packets would carry), a pool of packets to build into, and
// what the stages' tests share: test bytes, the stream's queue and packets,
// the peer's ACKs, and the completions taken and checked.
#ifndef BYPASS_FABRIC_RDM_STAGE_RIG_H_
#define BYPASS_FABRIC_RDM_STAGE_RIG_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "driver/packet.h"
#include "fabric/rdm/config.h"
#include "fabric/rdm/stages.h"
#include "fabric/rdm/wire.h"
#include "gtest/gtest.h"

namespace bypass::rdm::testing {

// n bytes that differ from one offset to the next, and from seed to seed.
inline std::vector<uint8_t> Bytes(size_t n, uint8_t seed = 1) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed + i * 7);
  return b;
}

// This end: 10.0.0.1:5000, incarnation 0x1111; the peer: 10.0.0.2:6000,
// incarnation 0x2222. The rig's stages are public: tests call them.
struct StageRig {
  static constexpr uint32_t kOurIncarnation = 0x1111;
  static constexpr uint32_t kPeerIncarnation = 0x2222;
  // The peer's initial PSN unless AddEstablishedPeer is told another.
  static constexpr uint32_t kPeerIsn = 1000;
  static constexpr uint32_t kRingSize = 256;
  // The largest datagram either end takes.
  static constexpr uint32_t kMaxDatagram = 1472;
  // The payload of one DATA packet of that size.
  static constexpr uint32_t kSeg = wire::MaxDataPayload(kMaxDatagram);
  // The payload of one RMA packet (WRITE, READ_DATA) of that size.
  static constexpr uint32_t kRmaSeg = wire::MaxRmaPayload(kMaxDatagram);

  static EndpointConfig DefaultConfig() {
    EndpointConfig c;
    c.udp_port = 5000;
    c.random_seed = 7;
    return c;
  }
  static DeviceParams Device() {
    DeviceParams d;
    d.mac = driver::MacAddress{{{2, 0, 0, 0, 0, 1}}};
    d.ip.value = 0x0a000001;
    d.mtu = 1500;
    d.pool_capacity = 1024;
    return d;
  }

  explicit StageRig(const EndpointConfig& c = DefaultConfig(), uint32_t held_budget = 512)
      : config(c), stages(c, Device(), kMaxDatagram, kRingSize, held_budget, 7, kOurIncarnation) {}

  // The peer's address.
  static Address PeerAddress() {
    Address a;
    a.mac = driver::MacAddress{{{2, 0, 0, 0, 0, 2}}};
    a.ip.value = 0x0a000002;
    a.udp_port = 6000;
    return a;
  }
  // A second peer's address: 10.0.0.3:7000.
  static Address OtherPeerAddress() {
    Address a = PeerAddress();
    a.ip.value = 0x0a000003;
    a.udp_port = 7000;
    return a;
  }
  // Inserts the peer and sets every stage up for it (as Engine::InsertPeer).
  uint32_t AddPeer() {
    bool added = false;
    const uint32_t pi = session.Insert(PeerAddress(), &added);
    stages.AddPeer(pi);
    return pi;
  }
  // Inserts a second peer (OtherPeerAddress), which must be new, as AddPeer does.
  uint32_t AddOtherPeer() {
    bool added = false;
    const uint32_t pi = session.Insert(OtherPeerAddress(), &added);
    EXPECT_TRUE(added) << "the other peer is a new one";
    stages.AddPeer(pi);
    return pi;
  }
  // Inserts the peer and completes the handshake both ways: the peer's
  // initial PSN is peer_isn, ours acknowledged with credit.
  uint32_t AddEstablishedPeer(Psn peer_isn = Psn(kPeerIsn), uint16_t credit = 64) {
    const uint32_t pi = AddPeer();
    wire::View hello = FromPeer(wire::PacketType::kHelloAck, peer_isn);
    hello.hello.max_datagram = kMaxDatagram;
    session.Accept(pi, hello);
    reliability.StartRx(pi, credit);
    wire::Common ack = hello.common;
    ack.flags = wire::kFlagAckValid;
    ack.ack_psn = session[pi].tx_isn;
    ack.credit = credit;
    reliability.OnAck(pi, ack, nullptr);
    return pi;
  }
  // A packet of the peer's, as Parse would give it (flow and header).
  wire::View FromPeer(wire::PacketType type, Psn psn) const {
    wire::View v;
    const Address a = PeerAddress();
    v.flow = driver::UdpFlow{a.mac, Device().mac, a.ip, Device().ip, a.udp_port, 5000, 0};
    v.common.type = type;
    v.common.src_incarnation = kPeerIncarnation;
    v.common.dst_incarnation = kOurIncarnation;
    v.common.psn = psn;
    return v;
  }
  // n empty packets of MTU size to build into (owned by the rig).
  std::vector<driver::Packet*> Buffers(size_t n) {
    std::vector<driver::Packet*> out;
    for (size_t i = 0; i < n; ++i) {
      storage_.push_back(std::make_unique<uint8_t[]>(2048));
      packets_.push_back(std::make_unique<driver::Packet>());
      driver::Packet* p = packets_.back().get();
      p->data = storage_.back().get();
      p->capacity = 2048;
      p->len = 0;
      out.push_back(p);
    }
    return out;
  }
  // Parses a built frame.
  static wire::View Parse(const driver::Packet* p) {
    wire::View v;
    const wire::ParseStatus s = wire::Parse({p->data, p->len}, &v, /*intact=*/true);
    if (s != wire::ParseStatus::kOk) v.common.type = static_cast<wire::PacketType>(0);
    return v;
  }

  // Peer pi's id, as the application names it.
  PeerId Id(uint32_t pi) const { return session.peers().Id(pi); }
  // The ops queued on pi's stream, oldest first.
  std::vector<uint32_t> Queued(uint32_t pi) const {
    std::vector<uint32_t> out;
    for (uint32_t o = reliability.tx_active(pi).ops.front(); o != kNone; o = ops[o].next) {
      out.push_back(o);
    }
    return out;
  }
  // Expects one op queued to pi, a RESPONSE, and returns it (a blank op if not).
  const SendOp& ExpectOnlyResponse(uint32_t pi) {
    const std::vector<uint32_t> q = Queued(pi);
    EXPECT_EQ(q.size(), 1u);
    static const SendOp kNothing;
    if (q.size() != 1) return kNothing;
    EXPECT_EQ(ops[q[0]].kind, OpKind::kResponse);
    EXPECT_EQ(ops[q[0]].type, wire::PacketType::kRma);
    EXPECT_EQ(ops[q[0]].rma.op, wire::RmaOp::kResponse);
    return ops[q[0]];
  }
  // What pi's stream builds into at most n packets, parsed (each must parse).
  std::vector<wire::View> BuildPackets(uint32_t pi, size_t n = 16) {
    const std::vector<driver::Packet*> bufs = Buffers(n);
    bool probe = false;
    const size_t built = reliability.Build(pi, &probe, bufs);
    std::vector<wire::View> out;
    for (size_t i = 0; i < built; ++i) {
      out.push_back(Parse(bufs[i]));
      EXPECT_NE(static_cast<int>(out.back().common.type), 0) << "packet " << i << " does not parse";
    }
    return out;
  }
  // The header of a packet from the peer acknowledging our stream up to ack.
  wire::Common PeerAck(Psn ack, uint16_t credit = 64, uint16_t flags = 0,
                       wire::PacketType type = wire::PacketType::kAck) const {
    wire::Common c = FromPeer(type, Psn(kPeerIsn)).common;
    c.flags = static_cast<uint16_t>(wire::kFlagAckValid | flags);
    c.ack_psn = ack;
    c.credit = credit;
    return c;
  }
  // The peer acknowledges everything we sent it.
  void AckAll(uint32_t pi) { reliability.OnAck(pi, PeerAck(reliability.tx(pi).next_psn), nullptr); }
  // Sends what pi's stream has (it must have some), all acknowledged; returns the packets sent.
  size_t SendAndAcknowledge(uint32_t pi) {
    const size_t sent = BuildPackets(pi).size();
    EXPECT_GT(sent, 0u) << "nothing to send";
    AckAll(pi);
    return sent;
  }

  // Every completion ready, oldest first.
  std::vector<Completion> Drain() {
    std::vector<Completion> out(completions.ready());
    out.resize(completions.Poll(absl::MakeSpan(out)));
    return out;
  }
  // Every error completion ready, oldest first.
  std::vector<ErrorCompletion> DrainErrors() {
    std::vector<ErrorCompletion> out(completions.errors_ready());
    out.resize(completions.PollErrors(absl::MakeSpan(out)));
    return out;
  }
  // Expects one completion ready, of context (why: a note), and takes it (blank if not one).
  Completion ExpectOneCompletion(const void* context, const char* why = "") {
    const std::vector<Completion> got = Drain();
    EXPECT_EQ(got.size(), 1u) << why;
    if (got.size() != 1) return Completion{};
    EXPECT_EQ(got[0].context, context) << why;
    return got[0];
  }
  // Expects one error ready, err for the op of context, and takes it (blank if not one).
  ErrorCompletion ExpectOneError(int err, const void* context, const char* why = "") {
    const std::vector<ErrorCompletion> got = DrainErrors();
    EXPECT_EQ(got.size(), 1u) << why;
    if (got.size() != 1) return ErrorCompletion{};
    EXPECT_EQ(got[0].err, err) << why;
    EXPECT_EQ(got[0].op.context, context) << why;
    return got[0];
  }
  // Takes every completion reservation left; returns how many there were.
  uint32_t ReserveAll() {
    uint32_t n = 0;
    while (completions.Reserve()) ++n;
    return n;
  }
  // Free room in the completion queue: what leaks a reservation shows here.
  uint32_t Room() {
    const uint32_t n = ReserveAll();
    for (uint32_t i = 0; i < n; ++i) completions.Unreserve();
    return n;
  }

  EndpointConfig config;
  Stages stages;
  // The stages by name.
  Context& ctx = stages.ctx;
  Session& session = stages.session;
  Completions& completions = stages.completions;
  OpTable& ops = stages.ops;
  Reliability& reliability = stages.reliability;
  Messaging& messaging = stages.messaging;
  Rma& rma = stages.rma;

 private:
  std::vector<std::unique_ptr<uint8_t[]>> storage_;
  std::vector<std::unique_ptr<driver::Packet>> packets_;
};

// A rig with the peer established, for a test to open with `auto [rig, pi] = RigWithPeer();`.
struct RigWithPeer {
  explicit RigWithPeer(const EndpointConfig& c = StageRig::DefaultConfig()) : rig(c) {}
  StageRig rig;
  const uint32_t pi = rig.AddEstablishedPeer();
};

}  // namespace bypass::rdm::testing

#endif  // BYPASS_FABRIC_RDM_STAGE_RIG_H_
