// Test helper: the stages of one endpoint built and wired exactly as the
// Engine wires them, without the Engine, so a stage's unit test calls it
// directly; plus a peer that looks like a remote endpoint (its address and
// the headers its packets would carry) and a pool of packets to build into.
#ifndef BYPASS_FABRIC_RDM_STAGE_RIG_H_
#define BYPASS_FABRIC_RDM_STAGE_RIG_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "driver/packet.h"
#include "fabric/rdm/config.h"
#include "fabric/rdm/stages.h"
#include "fabric/rdm/wire.h"

namespace bypass::rdm::testing {

// This end: 10.0.0.1:5000, incarnation 0x1111; the peer: 10.0.0.2:6000,
// incarnation 0x2222. The rig's stages are public: tests call them.
struct StageRig {
  static constexpr uint32_t kOurIncarnation = 0x1111;
  static constexpr uint32_t kPeerIncarnation = 0x2222;
  static constexpr uint32_t kRingSize = 256;

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
      : config(c), stages(c, Device(), 1472, kRingSize, held_budget, 7, kOurIncarnation) {}

  // The peer's address.
  static Address PeerAddress() {
    Address a;
    a.mac = driver::MacAddress{{{2, 0, 0, 0, 0, 2}}};
    a.ip.value = 0x0a000002;
    a.udp_port = 6000;
    return a;
  }
  // Inserts the peer and sets every stage up for it (as Engine::InsertPeer).
  uint32_t AddPeer() {
    bool added = false;
    const uint32_t pi = session.Insert(PeerAddress(), &added);
    stages.AddPeer(pi);
    return pi;
  }
  // Inserts the peer and completes the handshake both ways: the peer's
  // initial PSN is peer_isn, ours acknowledged with credit.
  uint32_t AddEstablishedPeer(Psn peer_isn = Psn(1000), uint16_t credit = 64) {
    const uint32_t pi = AddPeer();
    wire::View hello = FromPeer(wire::PacketType::kHelloAck, peer_isn);
    hello.hello.max_datagram = 1472;
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
    const wire::ParseStatus s = wire::Parse({p->data, p->len}, &v);
    if (s != wire::ParseStatus::kOk) v.common.type = static_cast<wire::PacketType>(0);
    return v;
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

}  // namespace bypass::rdm::testing

#endif  // BYPASS_FABRIC_RDM_STAGE_RIG_H_
