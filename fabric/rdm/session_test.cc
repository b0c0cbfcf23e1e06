// The Session stage on its own: the peer table, the handshake (HELLO and
// HELLO_ACK), what a HELLO or RESET means, RESETs owed and their rate limit,
// the HELLO and probe timers, and the end of a session.
#include "fabric/rdm/session.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "fabric/rdm/stage_rig.h"
#include "gtest/gtest.h"

namespace bypass::rdm {
namespace {

using testing::RigWithPeer;
using testing::StageRig;

// A HELLO (or HELLO_ACK) of the peer's session starting at isn.
wire::View Hello(const StageRig& rig, Psn isn, wire::PacketType type = wire::PacketType::kHello) {
  wire::View v = rig.FromPeer(type, isn);
  v.hello.max_datagram = 1472;
  return v;
}

// A RESET from the peer's incarnation src, about our `about` incarnation of it.
wire::View Reset(const StageRig& rig, uint32_t src, wire::ResetReason reason, uint32_t about,
                 Psn psn = Psn(0)) {
  wire::View v = rig.FromPeer(wire::PacketType::kReset, psn);
  v.common.src_incarnation = src;
  v.reset.reason = reason;
  v.reset.incarnation = about;
  return v;
}

// What ClassifyReset makes of a RESET from the peer's incarnation src, for
// reason, about our incarnation `about` (in_session: its PSN is in ours).
SessionEvent ClassifyReset(StageRig& rig, uint32_t pi, uint32_t src, wire::ResetReason reason,
                           uint32_t about, bool in_session) {
  return rig.session.ClassifyReset(pi, Reset(rig, src, reason, about), in_session);
}

// What ClassifyReset makes of a NO_SESSION RESET about our incarnation from
// the peer's incarnation src.
SessionEvent ClassifyNoSession(StageRig& rig, uint32_t pi, uint32_t src, bool in_session) {
  return ClassifyReset(rig, pi, src, wire::ResetReason::kNoSession, StageRig::kOurIncarnation,
                       in_session);
}

// The counts of what HELLOs and RESETs meant (unset: not checked).
struct Verdicts {
  std::optional<uint64_t> stale = std::nullopt;
  std::optional<uint64_t> restarts = std::nullopt;
  std::optional<uint64_t> resets = std::nullopt;
};
// Expects the counters stale_dropped, peer_restarts and peer_resets to be
// as want says.
void ExpectVerdicts(const StageRig& rig, const Verdicts& want) {
  const Counters& n = rig.ctx.counters;
  if (want.stale) {
    EXPECT_EQ(n.stale_dropped, *want.stale);
  }
  if (want.restarts) {
    EXPECT_EQ(n.peer_restarts, *want.restarts);
  }
  if (want.resets) {
    EXPECT_EQ(n.peer_resets, *want.resets);
  }
}

// Inserts the peer without its MAC (all zero), as an application may.
uint32_t InsertWithoutMac(StageRig& rig) {
  Address a = StageRig::PeerAddress();
  a.mac = driver::MacAddress{};
  bool added = false;
  return rig.session.Insert(a, &added);
}

// The handshake packets owed to pi (HELLO, HELLO_ACK) built into at most n
// packets, granting credit and retrying after retry_ns; parsed.
std::vector<wire::View> BuildHandshakes(StageRig& rig, uint32_t pi, size_t n, uint16_t credit = 64,
                                        uint64_t retry_ns = 1000) {
  const std::vector<driver::Packet*> bufs = rig.Buffers(n);
  const wire::Common c = rig.reliability.Header(pi, wire::PacketType::kHello, 0);
  const size_t built = rig.session.BuildHandshake(pi, c, credit, retry_ns, bufs);
  std::vector<wire::View> out;
  for (size_t i = 0; i < built; ++i) out.push_back(StageRig::Parse(bufs[i]));
  return out;
}

// Adds the peer, owed both a HELLO and (as for a HELLO come) a HELLO_ACK.
uint32_t AddPeerOwedHelloAndHelloAck(StageRig& rig) {
  const uint32_t pi = rig.AddPeer();
  rig.session.WantHello(pi);
  rig.session.OweHelloAck(pi, 0x5555);
  return pi;
}

// Empties the FIFO of peers with work (AddEstablishedPeer queues the peer).
void DrainQueue(StageRig& rig) {
  while (rig.ctx.queued_peers() > 0) rig.ctx.Dequeue();
}

// ---- Peers.

// Insert gives a new peer a slot marked inserted, and the same slot again
// for the same IPv4 and port (whatever the MAC), without resetting its session.
TEST(SessionTest, InsertMarksThePeerInsertedAndFindsItAgainByIpAndPort) {
  StageRig rig;
  bool added = false;
  const uint32_t pi = rig.session.Insert(StageRig::PeerAddress(), &added);
  ASSERT_NE(pi, kNone);
  EXPECT_TRUE(added);
  EXPECT_TRUE(rig.session[pi].inserted);
  rig.reliability.AddPeer(pi);
  rig.session.Accept(pi, Hello(rig, Psn(1000)));
  rig.session.TxReady(pi);
  const Psn isn = rig.session[pi].tx_isn;

  Address same = StageRig::PeerAddress();
  same.mac = driver::MacAddress{{{2, 0, 0, 0, 0, 9}}};
  EXPECT_EQ(rig.session.Insert(same, &added), pi);
  EXPECT_FALSE(added);
  EXPECT_TRUE(rig.session[pi].established()) << "inserting it again keeps its session";
  EXPECT_EQ(rig.session[pi].tx_isn.value(), isn.value());
  EXPECT_EQ(rig.session.Flow(pi).dst_mac, StageRig::PeerAddress().mac);

  Address other = StageRig::PeerAddress();
  other.udp_port = 6001;
  const uint32_t pj = rig.session.Insert(other, &added);
  EXPECT_NE(pj, pi);
  EXPECT_TRUE(added);
}

// A peer first learned from its HELLO is not inserted until the application
// inserts it; then it keeps its slot.
TEST(SessionTest, APeerLearnedFromAHelloBecomesInsertedWhenTheApplicationInsertsIt) {
  StageRig rig;
  bool added = false;
  const uint32_t pi = rig.session.AddFromHello(Hello(rig, Psn(1000)), &added);
  ASSERT_NE(pi, kNone);
  EXPECT_TRUE(added);
  EXPECT_FALSE(rig.session[pi].inserted);
  EXPECT_EQ(rig.session.address(pi).ip, StageRig::PeerAddress().ip);
  EXPECT_EQ(rig.session.address(pi).udp_port, 6000);
  EXPECT_EQ(rig.session.address(pi).mac, StageRig::PeerAddress().mac);
  EXPECT_EQ(rig.session.Flow(pi).dst_mac, StageRig::PeerAddress().mac);
  EXPECT_EQ(rig.session.address(pi).incarnation, 0u) << "known once Accept takes it";
  EXPECT_EQ(rig.session.Insert(StageRig::PeerAddress(), &added), pi);
  EXPECT_FALSE(added);
  EXPECT_TRUE(rig.session[pi].inserted);
}

// Inserted without a MAC, a peer is sent to at the broadcast MAC until a
// proven HELLO (or HELLO_ACK) from it teaches its MAC; DATA does not.
TEST(SessionTest, APeerInsertedWithoutAMacIsBroadcastToUntilAHelloTeachesIt) {
  StageRig rig;
  const uint32_t pi = InsertWithoutMac(rig);
  ASSERT_NE(pi, kNone);
  EXPECT_TRUE(rig.session[pi].mac_unknown);
  EXPECT_EQ(rig.session.Flow(pi).dst_mac, driver::kBroadcastMac);

  rig.ctx.now = 10;
  rig.session.Heard(pi, rig.FromPeer(wire::PacketType::kData, Psn(5)));
  EXPECT_EQ(rig.session[pi].activity_ns, 10u) << "DATA counts for liveness";
  EXPECT_EQ(rig.session.Flow(pi).dst_mac, driver::kBroadcastMac) << "but teaches no MAC";
  EXPECT_TRUE(rig.session[pi].mac_unknown);

  rig.ctx.now = 20;
  rig.session.Heard(pi, Hello(rig, Psn(5)));
  EXPECT_TRUE(rig.session[pi].mac_unknown) << "an unproven HELLO teaches nothing";
  rig.session.Proven(pi, Hello(rig, Psn(5)));
  EXPECT_FALSE(rig.session[pi].mac_unknown);
  EXPECT_EQ(rig.session.Flow(pi).dst_mac, StageRig::PeerAddress().mac);
  EXPECT_EQ(rig.session.address(pi).mac, StageRig::PeerAddress().mac);
  EXPECT_EQ(rig.session[pi].activity_ns, 20u);
}

// A HELLO_ACK teaches the MAC as a HELLO does.
TEST(SessionTest, AHelloAckTeachesTheMacToo) {
  StageRig rig;
  const uint32_t pi = InsertWithoutMac(rig);
  rig.session.Proven(pi, Hello(rig, Psn(5), wire::PacketType::kHelloAck));
  EXPECT_EQ(rig.session.Flow(pi).dst_mac, StageRig::PeerAddress().mac);
  // Once: a later proven HELLO from another MAC moves nothing.
  wire::View v = Hello(rig, Psn(5));
  v.flow.src_mac = driver::MacAddress{{{2, 0, 0, 0, 0, 0x66}}};
  rig.session.Proven(pi, v);
  EXPECT_EQ(rig.session.Flow(pi).dst_mac, StageRig::PeerAddress().mac);
}

// A peer inserted with a MAC keeps it whatever MAC its HELLOs come from.
TEST(SessionTest, APeerInsertedWithAMacKeepsIt) {
  StageRig rig;
  const uint32_t pi = rig.AddPeer();
  wire::View v = Hello(rig, Psn(5));
  v.flow.src_mac = driver::MacAddress{{{2, 0, 0, 0, 0, 0x77}}};
  rig.session.Proven(pi, v);
  EXPECT_EQ(rig.session.Flow(pi).dst_mac, StageRig::PeerAddress().mac);
  EXPECT_EQ(rig.session.address(pi).mac, StageRig::PeerAddress().mac);
}

// AddFromHello with every slot taken counts peer_table_full and adds nothing.
TEST(SessionTest, AddFromHelloCountsPeerTableFullWhenTheTableIsFull) {
  EndpointConfig c = StageRig::DefaultConfig();
  c.max_peers = 1;
  StageRig rig(c);
  rig.AddPeer();
  wire::View v = Hello(rig, Psn(5));
  v.flow.src_port = 7000;
  bool added = true;
  EXPECT_EQ(rig.session.AddFromHello(v, &added), kNone);
  EXPECT_FALSE(added);
  EXPECT_EQ(rig.ctx.counters.peer_table_full, 1u);
}

// ---- What a HELLO means.

// A HELLO from a retired incarnation of the peer is stale.
TEST(SessionTest, AHelloFromARetiredIncarnationIsStale) {
  auto [rig, pi] = RigWithPeer();
  rig.session.Retire(pi, 0x3333);
  wire::View v = Hello(rig, Psn(1000));
  v.common.src_incarnation = 0x3333;
  EXPECT_EQ(rig.session.ClassifyHello(pi, v), SessionEvent::kStale);
  ExpectVerdicts(rig, {.stale = 1, .restarts = 0});
}

// A HELLO or HELLO_ACK from another incarnation than the known one is a restart.
TEST(SessionTest, AHelloFromAnotherIncarnationIsARestart) {
  auto [rig, pi] = RigWithPeer();
  wire::View v = Hello(rig, Psn(1000));
  v.common.src_incarnation = 0x4444;
  EXPECT_EQ(rig.session.ClassifyHello(pi, v), SessionEvent::kRestarted);
  v.common.type = wire::PacketType::kHelloAck;
  EXPECT_EQ(rig.session.ClassifyHello(pi, v), SessionEvent::kRestarted);
  ExpectVerdicts(rig, {.stale = 0, .restarts = 2});
}

// A HELLO of the known incarnation with another initial PSN is a reset.
TEST(SessionTest, AHelloWithANewInitialPsnIsAReset) {
  auto [rig, pi] = RigWithPeer();  // the peer's initial PSN: 1000
  EXPECT_EQ(rig.session.ClassifyHello(pi, Hello(rig, Psn(2000))), SessionEvent::kReset);
  ExpectVerdicts(rig, {.restarts = 0, .resets = 1});
}

// A repeated HELLO of the current session, or a first contact, is current.
TEST(SessionTest, AHelloOfTheCurrentSessionOrAFirstContactIsCurrent) {
  auto [rig, pi] = RigWithPeer();  // the peer's initial PSN: 1000
  EXPECT_EQ(rig.session.ClassifyHello(pi, Hello(rig, Psn(1000))), SessionEvent::kCurrent);
  const uint32_t fresh = rig.AddOtherPeer();
  wire::View v = Hello(rig, Psn(77));
  v.common.src_incarnation = 0x9999;
  EXPECT_EQ(rig.session.ClassifyHello(fresh, v), SessionEvent::kCurrent);
  ExpectVerdicts(rig, {.stale = 0, .restarts = 0, .resets = 0});
}

// ---- The handshake.

// Accept takes the peer's incarnation, initial PSN and max_datagram once;
// a second HELLO of another session changes nothing.
TEST(SessionTest, AcceptTakesTheIncarnationAndInitialPsnOnce) {
  StageRig rig;
  const uint32_t pi = rig.AddPeer();
  wire::View v = Hello(rig, Psn(1000));
  v.hello.max_datagram = 1400;
  EXPECT_TRUE(rig.session.Accept(pi, v));
  EXPECT_EQ(rig.session.address(pi).incarnation, StageRig::kPeerIncarnation);
  EXPECT_TRUE(rig.session[pi].rx_known);
  EXPECT_EQ(rig.session[pi].rx_isn.value(), 1000u);
  EXPECT_EQ(rig.session[pi].max_datagram, 1400);

  wire::View again = Hello(rig, Psn(2000));
  again.common.src_incarnation = 0x4444;
  EXPECT_FALSE(rig.session.Accept(pi, again));
  EXPECT_EQ(rig.session.address(pi).incarnation, StageRig::kPeerIncarnation);
  EXPECT_EQ(rig.session[pi].rx_isn.value(), 1000u);
  EXPECT_EQ(rig.session[pi].max_datagram, 1400);
}

// A handshake counts once, when both directions are ready, in either order.
TEST(SessionTest, AHandshakeCountsOnceBothDirectionsAreReady) {
  StageRig rig;
  const uint32_t pi = rig.AddPeer();
  rig.session.Accept(pi, Hello(rig, Psn(1000)));
  EXPECT_FALSE(rig.session[pi].established());
  EXPECT_EQ(rig.ctx.counters.handshakes, 0u) << "only its direction is known";
  rig.session.TxReady(pi);
  EXPECT_TRUE(rig.session[pi].established());
  EXPECT_EQ(rig.ctx.counters.handshakes, 1u);
  rig.session.TxReady(pi);
  EXPECT_EQ(rig.ctx.counters.handshakes, 1u) << "counted once";

  const uint32_t pj = rig.AddOtherPeer();
  rig.session.TxReady(pj);
  EXPECT_EQ(rig.ctx.counters.handshakes, 1u) << "only our direction is ready";
  rig.session.Accept(pj, Hello(rig, Psn(5)));
  EXPECT_EQ(rig.ctx.counters.handshakes, 2u);
}

// WantHello makes a HELLO owed at once; it carries our initial PSN, the
// credit and our max_datagram, to the peer's address.
TEST(SessionTest, WantHelloBuildsAHelloWithOurInitialPsnAndMaxDatagram) {
  StageRig rig;
  const uint32_t pi = rig.AddPeer();
  rig.ctx.now = 100;
  EXPECT_FALSE(rig.session.HandshakeOwed(pi));
  rig.session.WantHello(pi);
  EXPECT_TRUE(rig.session.HandshakeOwed(pi));
  EXPECT_TRUE(rig.session.HasWork(pi));
  const std::vector<wire::View> sent = BuildHandshakes(rig, pi, 2);
  ASSERT_EQ(sent.size(), 1u);
  const wire::View& v = sent[0];
  EXPECT_EQ(v.common.type, wire::PacketType::kHello);
  EXPECT_EQ(v.common.psn.value(), rig.session[pi].tx_isn.value());
  EXPECT_EQ(v.common.credit, 64);
  EXPECT_EQ(v.hello.max_datagram, 1472);
  EXPECT_EQ(v.common.src_incarnation, StageRig::kOurIncarnation);
  EXPECT_EQ(v.common.dst_incarnation, 0u) << "the peer's incarnation is not known yet";
  EXPECT_EQ(v.flow.dst_ip, StageRig::PeerAddress().ip);
  EXPECT_EQ(v.flow.dst_port, 6000);
  EXPECT_EQ(v.flow.src_port, 5000);
  EXPECT_EQ(rig.ctx.counters.tx_packets, 1u);
  EXPECT_EQ(rig.session.hello_tries(pi), 1u);
}

// An unanswered HELLO goes again at its retry time, not before.
TEST(SessionTest, AnUnansweredHelloGoesAgainAtItsRetryTimeNotBefore) {
  StageRig rig;
  const uint32_t pi = rig.AddPeer();
  rig.ctx.now = 100;
  rig.session.WantHello(pi);
  ASSERT_EQ(BuildHandshakes(rig, pi, 2).size(), 1u);
  EXPECT_EQ(rig.session.handshake(pi)->hello_due_ns, 1100u);
  // The retry is the peer's timer, rounded up to the wheel's tick.
  EXPECT_TRUE(rig.ctx.timers().armed(pi));
  EXPECT_GE(rig.ctx.next_timer_ns, 1100u);
  EXPECT_LT(rig.ctx.next_timer_ns, 1100u + (1u << TimerWheel::kTickShift));
  EXPECT_FALSE(rig.session.HandshakeOwed(pi));
  EXPECT_TRUE(BuildHandshakes(rig, pi, 2).empty());
  rig.ctx.now = 1099;
  EXPECT_FALSE(rig.session.HandshakeOwed(pi));
  EXPECT_TRUE(BuildHandshakes(rig, pi, 2).empty());
  rig.ctx.now = 1100;
  EXPECT_TRUE(rig.session.HandshakeOwed(pi));
  const std::vector<wire::View> again = BuildHandshakes(rig, pi, 2, 64, 2000);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].common.type, wire::PacketType::kHello);
  EXPECT_EQ(rig.session.hello_tries(pi), 2u);
  EXPECT_EQ(rig.session.handshake(pi)->hello_due_ns, 3100u);
}

// Once our direction is ready no HELLO is wanted.
TEST(SessionTest, WantHelloDoesNothingOnceOurDirectionIsReady) {
  auto [rig, pi] = RigWithPeer();
  rig.session.WantHello(pi);
  EXPECT_FALSE(rig.session[pi].hello_wanted);
  EXPECT_FALSE(rig.session.HandshakeOwed(pi));
}

// A HELLO_ACK goes when one is owed (a HELLO came), once, with our initial PSN.
TEST(SessionTest, AHelloAckGoesOnceWhenOwed) {
  auto [rig, pi] = RigWithPeer();
  rig.session.OweHelloAck(pi, 0x5555);  // as the engine does for a HELLO
  EXPECT_TRUE(rig.session.HandshakeOwed(pi));
  const std::vector<wire::View> sent = BuildHandshakes(rig, pi, 2, 32);
  ASSERT_EQ(sent.size(), 1u);
  const wire::View& v = sent[0];
  EXPECT_EQ(v.common.type, wire::PacketType::kHelloAck);
  EXPECT_EQ(v.common.psn.value(), rig.session[pi].tx_isn.value());
  EXPECT_EQ(v.common.dst_incarnation, StageRig::kPeerIncarnation);
  EXPECT_EQ(v.hello.max_datagram, 1472);
  EXPECT_FALSE(rig.session[pi].hello_ack_owed);
  EXPECT_FALSE(rig.session.HandshakeOwed(pi));
  EXPECT_TRUE(BuildHandshakes(rig, pi, 2, 32).empty());
}

// A HELLO and a HELLO_ACK both owed go HELLO first; with room for one, the
// HELLO_ACK stays owed.
TEST(SessionTest, AHelloGoesBeforeAHelloAckAndWhatDoesNotFitStaysOwed) {
  StageRig rig;
  const uint32_t pi = AddPeerOwedHelloAndHelloAck(rig);
  std::vector<wire::View> sent = BuildHandshakes(rig, pi, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].common.type, wire::PacketType::kHello);
  EXPECT_TRUE(rig.session[pi].hello_ack_owed);
  sent = BuildHandshakes(rig, pi, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].common.type, wire::PacketType::kHelloAck);

  StageRig rig2;
  const uint32_t p2 = AddPeerOwedHelloAndHelloAck(rig2);
  sent = BuildHandshakes(rig2, p2, 2);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].common.type, wire::PacketType::kHello);
  EXPECT_EQ(sent[1].common.type, wire::PacketType::kHelloAck);
}

// ---- What a RESET means.

// A RESET about a peer whose incarnation we do not know, or from a retired
// incarnation, is stale.
TEST(SessionTest, AResetFromAnUnknownOrRetiredIncarnationIsStale) {
  StageRig rig;
  const uint32_t fresh = rig.AddPeer();
  EXPECT_EQ(ClassifyReset(rig, fresh, 0x5555, wire::ResetReason::kUnknownIncarnation, 0, true),
            SessionEvent::kStale);
  const uint32_t pi = rig.AddOtherPeer();
  rig.session.Accept(pi, Hello(rig, Psn(1000)));
  rig.session.TxReady(pi);
  rig.session.Retire(pi, 0x3333);
  EXPECT_EQ(ClassifyReset(rig, pi, 0x3333, wire::ResetReason::kUnknownIncarnation, 0x2222, true),
            SessionEvent::kStale);
  ExpectVerdicts(rig, {.stale = 2, .restarts = 0});
}

// UNKNOWN_INCARNATION from a new incarnation about the one we believe
// current would be a restart (not counted: the engine only probes, and a
// proven answer counts it).
TEST(SessionTest, AResetUnknownIncarnationAboutTheCurrentIncarnationIsARestart) {
  auto [rig, pi] = RigWithPeer();
  EXPECT_EQ(ClassifyReset(rig, pi, 0x5555, wire::ResetReason::kUnknownIncarnation,
                          StageRig::kPeerIncarnation, false),
            SessionEvent::kRestarted);
  ExpectVerdicts(rig, {.restarts = 0});
}

// UNKNOWN_INCARNATION about another incarnation than the current one, or
// from the current one itself, is stale.
TEST(SessionTest, AResetUnknownIncarnationAboutAnotherIncarnationIsStale) {
  auto [rig, pi] = RigWithPeer();
  EXPECT_EQ(ClassifyReset(rig, pi, 0x5555, wire::ResetReason::kUnknownIncarnation, 0x9999, true),
            SessionEvent::kStale);
  EXPECT_EQ(ClassifyReset(rig, pi, StageRig::kPeerIncarnation,
                          wire::ResetReason::kUnknownIncarnation, StageRig::kPeerIncarnation, true),
            SessionEvent::kStale);
  ExpectVerdicts(rig, {.stale = 2, .restarts = 0});
}

// NO_SESSION from the current incarnation, with our direction ready and a
// PSN inside our session, would be a reset (counted once proven).
TEST(SessionTest, AResetNoSessionInsideOurSessionIsAReset) {
  auto [rig, pi] = RigWithPeer();
  EXPECT_EQ(ClassifyNoSession(rig, pi, StageRig::kPeerIncarnation, /*in_session=*/true),
            SessionEvent::kReset);
  ExpectVerdicts(rig, {.resets = 0});
}

// NO_SESSION with a PSN outside our session is stale.
TEST(SessionTest, AResetNoSessionOutsideOurSessionIsStale) {
  auto [rig, pi] = RigWithPeer();
  EXPECT_EQ(ClassifyNoSession(rig, pi, StageRig::kPeerIncarnation, /*in_session=*/false),
            SessionEvent::kStale);
  ExpectVerdicts(rig, {.stale = 1, .resets = 0});
}

// NO_SESSION before our direction is ready is stale.
TEST(SessionTest, AResetNoSessionBeforeOurDirectionIsReadyIsStale) {
  StageRig rig;
  const uint32_t pi = rig.AddPeer();
  rig.session.Accept(pi, Hello(rig, Psn(1000)));
  ASSERT_FALSE(rig.session[pi].tx_ready);
  EXPECT_EQ(ClassifyNoSession(rig, pi, StageRig::kPeerIncarnation, /*in_session=*/true),
            SessionEvent::kStale);
  ExpectVerdicts(rig, {.resets = 0});
}

// NO_SESSION from another incarnation than the current one is stale.
TEST(SessionTest, AResetNoSessionFromAnotherIncarnationIsStale) {
  auto [rig, pi] = RigWithPeer();
  EXPECT_EQ(ClassifyNoSession(rig, pi, 0x5555, /*in_session=*/true), SessionEvent::kStale);
  ExpectVerdicts(rig, {.resets = 0});
}

// ---- RESETs we owe.

// A RESET is never answered with a RESET.
TEST(SessionTest, QueueResetNeverAnswersAReset) {
  StageRig rig;
  rig.session.QueueReset(
      Reset(rig, StageRig::kPeerIncarnation, wire::ResetReason::kNoSession, 0x9999),
      wire::ResetReason::kUnknownIncarnation);
  EXPECT_FALSE(rig.session.HasResets());
}

// BuildResets builds a parseable RESET back to the source, naming its
// incarnation, the PSN and the incarnation its packet was addressed to.
TEST(SessionTest, BuildResetsBuildsAParseableResetToTheSource) {
  EndpointConfig c = StageRig::DefaultConfig();
  c.auth_key = 0xabcd;
  StageRig rig(c);
  wire::View v = rig.FromPeer(wire::PacketType::kData, Psn(777));
  v.common.dst_incarnation = 0x9999;  // an earlier life of ours
  rig.session.QueueReset(v, wire::ResetReason::kUnknownIncarnation);
  ASSERT_TRUE(rig.session.HasResets());
  const std::vector<driver::Packet*> bufs = rig.Buffers(4);
  ASSERT_EQ(rig.session.BuildResets(bufs), 1u);
  EXPECT_FALSE(rig.session.HasResets());
  const wire::View r = StageRig::Parse(bufs[0]);
  ASSERT_EQ(r.common.type, wire::PacketType::kReset);
  EXPECT_EQ(r.flow.dst_mac, StageRig::PeerAddress().mac);
  EXPECT_EQ(r.flow.dst_ip, StageRig::PeerAddress().ip);
  EXPECT_EQ(r.flow.dst_port, 6000);
  EXPECT_EQ(r.flow.src_ip, StageRig::Device().ip);
  EXPECT_EQ(r.flow.src_port, 5000);
  EXPECT_EQ(r.common.src_incarnation, StageRig::kOurIncarnation);
  EXPECT_EQ(r.common.dst_incarnation, StageRig::kPeerIncarnation);
  EXPECT_EQ(r.common.auth_key, 0xabcdu);
  EXPECT_EQ(r.common.psn.value(), 777u);
  EXPECT_EQ(r.reset.reason, wire::ResetReason::kUnknownIncarnation);
  EXPECT_EQ(r.reset.incarnation, 0x9999u);
  EXPECT_EQ(rig.ctx.counters.resets_sent, 1u);
  EXPECT_EQ(rig.ctx.counters.tx_packets, 1u);
}

// At most one RESET per source per reset_interval_ns; other sources are
// not held back by it.
TEST(SessionTest, ResetsAreRateLimitedPerSource) {
  StageRig rig;
  const uint64_t interval = rig.config.reset_interval_ns;
  const std::vector<driver::Packet*> bufs = rig.Buffers(4);
  const wire::View v = rig.FromPeer(wire::PacketType::kData, Psn(1));
  rig.ctx.now = 1'000'000;
  rig.session.QueueReset(v, wire::ResetReason::kNoSession);
  ASSERT_EQ(rig.session.BuildResets(bufs), 1u);
  rig.ctx.now += interval - 1;
  rig.session.QueueReset(v, wire::ResetReason::kNoSession);
  EXPECT_FALSE(rig.session.HasResets()) << "the same source within the interval";
  wire::View other = v;
  other.flow.src_port = 6001;
  rig.session.QueueReset(other, wire::ResetReason::kNoSession);
  EXPECT_TRUE(rig.session.HasResets()) << "another source";
  ASSERT_EQ(rig.session.BuildResets(bufs), 1u);
  EXPECT_EQ(StageRig::Parse(bufs[0]).flow.dst_port, 6001);
  rig.ctx.now = 1'000'000 + interval;
  rig.session.QueueReset(v, wire::ResetReason::kNoSession);
  EXPECT_TRUE(rig.session.HasResets()) << "the interval has passed";
  EXPECT_EQ(rig.session.BuildResets(bufs), 1u);
  EXPECT_EQ(rig.ctx.counters.resets_sent, 3u);
}

// The limit holds for every source of many: 17 sources whose stale packets
// arrive interleaved within one interval get one RESET each.
TEST(SessionTest, ResetsAreRateLimitedForEverySourceOfMany) {
  StageRig rig;
  const std::vector<driver::Packet*> bufs = rig.Buffers(32);
  wire::View v = rig.FromPeer(wire::PacketType::kData, Psn(1));
  rig.ctx.now = 1'000'000;
  size_t resets = 0;
  for (int round = 0; round < 4; ++round) {
    for (uint16_t i = 0; i < 17; ++i) {
      v.flow.src_port = static_cast<uint16_t>(7000 + i);
      rig.session.QueueReset(v, wire::ResetReason::kNoSession);
      resets += rig.session.BuildResets(bufs);  // as each pass of the engine does
    }
    rig.ctx.now += rig.config.reset_interval_ns / 8;
  }
  EXPECT_EQ(resets, 17u) << "a source got more than one RESET in the interval";
}

// Pending RESETs are bounded; one that found no room can be queued later.
TEST(SessionTest, PendingResetsAreBoundedAndBuiltInOrder) {
  StageRig rig;
  wire::View v = rig.FromPeer(wire::PacketType::kData, Psn(1));
  for (uint16_t i = 0; i < 20; ++i) {
    v.flow.src_port = static_cast<uint16_t>(7000 + i);
    rig.session.QueueReset(v, wire::ResetReason::kNoSession);
  }
  const std::vector<driver::Packet*> bufs = rig.Buffers(32);
  ASSERT_EQ(rig.session.BuildResets(bufs), 16u);
  for (size_t i = 0; i < 16; ++i) EXPECT_EQ(StageRig::Parse(bufs[i]).flow.dst_port, 7000 + i);
  v.flow.src_port = 7019;  // found the queue full: not rate-limited
  rig.session.QueueReset(v, wire::ResetReason::kNoSession);
  EXPECT_TRUE(rig.session.HasResets());
}

// ---- Timers.

// A HELLO that is due enqueues its peer; one not yet due sets the next timer.
TEST(SessionTest, ADueHelloEnqueuesThePeer) {
  StageRig rig;
  const uint32_t pi = rig.AddPeer();
  rig.ctx.now = 500;
  rig.session.WantHello(pi);
  ASSERT_EQ(rig.ctx.queued_peers(), 0u);
  uint64_t next = UINT64_MAX;
  rig.session.RunTimers(pi, false, &next);
  EXPECT_EQ(rig.ctx.queued_peers(), 1u);
  EXPECT_EQ(next, 500u);
  DrainQueue(rig);

  ASSERT_EQ(BuildHandshakes(rig, pi, 1).size(), 1u);
  rig.ctx.now = 1000;
  next = UINT64_MAX;
  rig.session.RunTimers(pi, false, &next);
  EXPECT_EQ(rig.ctx.queued_peers(), 0u) << "the retry is not due";
  EXPECT_EQ(next, 1500u);
  rig.ctx.now = 1500;
  rig.session.RunTimers(pi, false, &next);
  EXPECT_EQ(rig.ctx.queued_peers(), 1u);
}

// Asked for (only waiting), a probe is owed at the last activity plus a
// quarter of peer_timeout, not before; the next one a quarter later.
TEST(SessionTest, AProbeIsOwedAQuarterOfThePeerTimeoutAfterTheLastActivity) {
  EndpointConfig c = StageRig::DefaultConfig();
  c.peer_timeout_ns = 4'000'000;
  StageRig rig(c);
  const uint64_t quarter = 1'000'000;
  const uint32_t pi = rig.AddEstablishedPeer();
  DrainQueue(rig);
  rig.ctx.now = 2000;
  rig.session.Heard(pi, rig.FromPeer(wire::PacketType::kAck, Psn(1000)));

  rig.ctx.now = 2000 + quarter - 1;
  uint64_t next = UINT64_MAX;
  rig.session.RunTimers(pi, /*probe=*/true, &next);
  EXPECT_FALSE(rig.session[pi].probe_owed);
  EXPECT_FALSE(rig.session.HasWork(pi));
  EXPECT_EQ(rig.ctx.queued_peers(), 0u);
  EXPECT_EQ(next, 2000 + quarter);

  rig.ctx.now = 2000 + quarter;
  next = UINT64_MAX;
  rig.session.RunTimers(pi, /*probe=*/true, &next);
  EXPECT_TRUE(rig.session[pi].probe_owed);
  EXPECT_TRUE(rig.session.HasWork(pi));
  EXPECT_EQ(rig.ctx.queued_peers(), 1u);
  EXPECT_EQ(next, rig.ctx.now + quarter);
  DrainQueue(rig);

  rig.session[pi].probe_owed = false;  // sent; the peer stays silent
  rig.ctx.now += quarter - 1;
  rig.session.RunTimers(pi, /*probe=*/true, &next);
  EXPECT_FALSE(rig.session[pi].probe_owed) << "not again before its interval";
  rig.ctx.now += 1;
  rig.session.RunTimers(pi, /*probe=*/true, &next);
  EXPECT_TRUE(rig.session[pi].probe_owed);
}

// Not asked for (something in flight, or nothing waiting), no probe is owed.
TEST(SessionTest, NoProbeIsOwedUnlessAskedFor) {
  auto [rig, pi] = RigWithPeer();
  DrainQueue(rig);
  rig.ctx.now = 10 * rig.config.peer_timeout_ns;
  uint64_t next = UINT64_MAX;
  rig.session.RunTimers(pi, /*probe=*/false, &next);
  EXPECT_FALSE(rig.session[pi].probe_owed);
  EXPECT_EQ(rig.ctx.queued_peers(), 0u);
  EXPECT_EQ(next, UINT64_MAX);
}

// ---- The end of a session.

// EndSession forgets both directions' handshake and draws a new initial
// PSN; the next handshake counts again.
TEST(SessionTest, EndSessionForgetsTheHandshakeAndDrawsANewTxIsn) {
  auto [rig, pi] = RigWithPeer();
  DrainQueue(rig);
  rig.session.OweHelloAck(pi, 0x5555);
  const Psn old_isn = rig.session[pi].tx_isn;
  rig.session.EndSession(pi, /*more_to_send=*/false);
  const SessionPeer& s = rig.session[pi];
  EXPECT_NE(s.tx_isn.value(), old_isn.value());
  EXPECT_FALSE(s.rx_known);
  EXPECT_FALSE(s.tx_ready);
  EXPECT_FALSE(s.established());
  EXPECT_FALSE(s.hello_ack_owed);
  EXPECT_FALSE(s.hello_wanted);
  EXPECT_FALSE(rig.session.HandshakeOwed(pi));
  EXPECT_EQ(rig.ctx.queued_peers(), 0u);

  EXPECT_TRUE(rig.session.Accept(pi, Hello(rig, Psn(5000)))) << "a new session is taken";
  rig.session.TxReady(pi);
  EXPECT_EQ(rig.ctx.counters.handshakes, 2u);
}

// With more to send, the ended session wants a HELLO at once and the
// peer's silence counts from now.
TEST(SessionTest, EndSessionWithMoreToSendWantsAHelloAtOnce) {
  auto [rig, pi] = RigWithPeer();
  DrainQueue(rig);
  rig.ctx.now = 5000;
  rig.session.EndSession(pi, /*more_to_send=*/true);
  EXPECT_TRUE(rig.session[pi].hello_wanted);
  EXPECT_EQ(rig.session.handshake(pi)->hello_due_ns, 5000u);
  EXPECT_EQ(rig.session[pi].activity_ns, 5000u);
  EXPECT_TRUE(rig.session.HandshakeOwed(pi));
  EXPECT_EQ(rig.ctx.queued_peers(), 1u);
}

// ---- Proofs (PROTOCOL.md, "Sessions"; SECURITY.md).

// The peer's HELLO as it would arrive on the wire, built and parsed: with
// `key` MACed, echoing `cookie`.
wire::View WireHello(const StageRig& rig, Psn isn, uint64_t nonce, const wire::Cookie& cookie,
                     const wire::MacKey* key, std::vector<uint8_t>* frame) {
  const wire::View base = rig.FromPeer(wire::PacketType::kHello, isn);
  wire::Common c = base.common;
  c.dst_incarnation = 0;
  wire::HelloFields h;
  h.max_datagram = 1472;
  h.nonce = nonce;
  h.cookie = cookie;
  frame->assign(256, 0);
  const size_t n = wire::BuildHello(base.flow, c, h, key, absl::MakeSpan(*frame));
  frame->resize(n);
  wire::View v;
  EXPECT_EQ(wire::Parse(*frame, &v), wire::ParseStatus::kOk);
  return v;
}

// The COOKIE the rig's Session answers v with, built and parsed.
wire::View CookieFor(StageRig& rig, const wire::View& v) {
  rig.session.QueueCookie(kNone, v, /*same_host=*/false);
  std::vector<driver::Packet*> bufs = rig.Buffers(1);
  EXPECT_EQ(rig.session.BuildResets(bufs), 1u);
  wire::View c;
  EXPECT_EQ(wire::Parse({bufs[0]->data, bufs[0]->len}, &c), wire::ParseStatus::kOk);
  EXPECT_EQ(c.common.type, wire::PacketType::kCookie);
  EXPECT_EQ(c.hello.echo, v.hello.nonce);
  return c;
}

TEST(SessionProofTest, ACookieIsValidForItsHelloOnlyAndForAboutOneToTwoPeriods) {
  StageRig rig;
  rig.ctx.now = 5ull << 30;
  std::vector<uint8_t> f;
  const wire::View hello = WireHello(rig, Psn(1000), 77, {}, nullptr, &f);
  EXPECT_FALSE(rig.session.CookieValid(hello)) << "none echoed";
  const wire::View cookie = CookieFor(rig, hello);
  const wire::View echoed = WireHello(rig, Psn(1000), 77, cookie.hello.cookie, nullptr, &f);
  EXPECT_TRUE(rig.session.CookieValid(echoed));
  // Another ISN, nonce, incarnation or source: the cookie is not theirs.
  EXPECT_FALSE(rig.session.CookieValid(WireHello(rig, Psn(1001), 77, cookie.hello.cookie, nullptr, &f)));
  EXPECT_FALSE(rig.session.CookieValid(WireHello(rig, Psn(1000), 78, cookie.hello.cookie, nullptr, &f)));
  wire::View moved = echoed;
  moved.flow.src_port = 6001;
  EXPECT_FALSE(rig.session.CookieValid(moved));
  wire::View other_inc = echoed;
  other_inc.common.src_incarnation = 0x3333;
  EXPECT_FALSE(rig.session.CookieValid(other_inc));
  EXPECT_EQ(rig.ctx.counters.cookie_rejected, 4u);
  // The next period still takes it; the one after does not (a replay later).
  rig.ctx.now = 6ull << 30;
  EXPECT_TRUE(rig.session.CookieValid(echoed));
  rig.ctx.now = 7ull << 30;
  EXPECT_FALSE(rig.session.CookieValid(echoed));
  // Another endpoint (another secret) never takes it.
  StageRig other;
  other.ctx.now = 5ull << 30;
  EXPECT_FALSE(other.session.CookieValid(echoed));
}

// With a key: a HELLO captured and sent again with a fresh cookie spliced
// in fails its MAC (which covers the cookie), so a replay cannot pass the
// cookie check; only the key holder makes a HELLO that passes both.
TEST(SessionProofTest, WithAKeyACapturedHelloWithAFreshCookieSplicedInFailsItsMac) {
  EndpointConfig c = StageRig::DefaultConfig();
  wire::MacKey key{};
  key.fill(3);
  c.handshake_key = key;
  StageRig rig(c);
  std::vector<uint8_t> f;
  const wire::View captured = WireHello(rig, Psn(1000), 77, {}, &key, &f);
  EXPECT_TRUE(rig.session.Authentic(captured, false));
  const wire::View cookie = CookieFor(rig, captured);
  EXPECT_TRUE(rig.session.Authentic(cookie, false)) << "our COOKIE is MACed too";
  std::vector<uint8_t> spliced = f;
  std::memcpy(&spliced[wire::kExtOffset + offsetof(wire::HelloHeader, cookie)],
              cookie.hello.cookie.data(), 16);
  wire::View v = captured;
  v.datagram = absl::MakeConstSpan(spliced).subspan(wire::kCommonOffset);
  v.hello.cookie = cookie.hello.cookie;
  EXPECT_FALSE(rig.session.Authentic(v, false));
  EXPECT_EQ(rig.ctx.counters.handshake_auth_failed, 1u);
  const wire::View real = WireHello(rig, Psn(1000), 77, cookie.hello.cookie, &key, &f);
  EXPECT_TRUE(rig.session.Authentic(real, false));
  EXPECT_TRUE(rig.session.CookieValid(real));
  EXPECT_FALSE(rig.session.Authentic(WireHello(rig, Psn(1000), 77, {}, nullptr, &f), false))
      << "an unkeyed HELLO";
}

// The intra-host key applies to frames that came with kRxSameHost, the
// general key to others; without a same_host_key, the general one to both.
TEST(SessionProofTest, TheSameHostKeyAppliesToSameHostFramesOnly) {
  EndpointConfig c = StageRig::DefaultConfig();
  wire::MacKey general{}, local{};
  general.fill(1);
  local.fill(2);
  c.handshake_key = general;
  c.same_host_key = local;
  StageRig rig(c);
  EXPECT_EQ(*rig.session.KeyFor(false), general);
  EXPECT_EQ(*rig.session.KeyFor(true), local);
  std::vector<uint8_t> f;
  EXPECT_TRUE(rig.session.Authentic(WireHello(rig, Psn(1), 5, {}, &local, &f), true));
  EXPECT_FALSE(rig.session.Authentic(WireHello(rig, Psn(1), 5, {}, &local, &f), false));
  EXPECT_FALSE(rig.session.Authentic(WireHello(rig, Psn(1), 5, {}, &general, &f), true));
  c.same_host_key = std::nullopt;
  StageRig plain(c);
  EXPECT_EQ(*plain.session.KeyFor(true), general);
  EXPECT_EQ(StageRig().session.KeyFor(true), nullptr);
}

// Only a copy of the current session's HELLO needs no proof.
TEST(SessionProofTest, EveryHelloButACopyOfTheCurrentSessionsNeedsProof) {
  StageRig rig;
  std::vector<uint8_t> f;
  const wire::View v = WireHello(rig, Psn(StageRig::kPeerIsn), 5, {}, nullptr, &f);
  EXPECT_TRUE(rig.session.NeedsProof(kNone, v)) << "unknown source";
  const uint32_t fresh = rig.AddPeer();
  EXPECT_TRUE(rig.session.NeedsProof(fresh, v)) << "no session yet";
  rig.session.Remove(fresh);
  const uint32_t pi = rig.AddEstablishedPeer();
  EXPECT_FALSE(rig.session.NeedsProof(pi, v));
  EXPECT_TRUE(rig.session.NeedsProof(pi, WireHello(rig, Psn(1), 5, {}, nullptr, &f)))
      << "a reset";
  wire::View restart = v;
  restart.common.src_incarnation = 0x9999;
  EXPECT_TRUE(rig.session.NeedsProof(pi, restart));
}

// A HELLO_ACK or COOKIE counts only if it echoes our current nonce; a probe
// draws a new one and keeps it while it lasts (a flood of RESETs cannot
// change it), and the established session's answer ends the probe. An
// established session has no nonce (no handshake record): nothing echoes it.
TEST(SessionProofTest, AnswersMustEchoOurNonceAndAProbeKeepsItsOwn) {
  StageRig rig;
  const uint32_t pi = rig.AddPeer();
  rig.session.WantHello(pi);
  ASSERT_NE(rig.session.handshake(pi), nullptr);
  wire::View ack = Hello(rig, Psn(StageRig::kPeerIsn), wire::PacketType::kHelloAck);
  ack.hello.echo = rig.session.handshake(pi)->nonce;
  EXPECT_TRUE(rig.session.EchoesNonce(pi, ack));
  ack.hello.max_datagram = StageRig::kMaxDatagram;
  rig.session.Accept(pi, ack);
  rig.session.TxReady(pi);
  ASSERT_TRUE(rig.session[pi].established());
  EXPECT_EQ(rig.session.handshake(pi), nullptr) << "an idle established peer holds no record";
  EXPECT_FALSE(rig.session.EchoesNonce(pi, ack)) << "a copy of the handshake's answer";
  EXPECT_EQ(rig.ctx.counters.handshake_unproven, 1u);
  rig.session.Probe(pi);
  const uint64_t probe = rig.session.handshake(pi)->nonce;
  EXPECT_NE(probe, ack.hello.echo);
  EXPECT_FALSE(rig.session.EchoesNonce(pi, ack)) << "an answer to an older HELLO";
  EXPECT_EQ(rig.ctx.counters.handshake_unproven, 2u);
  rig.session.Probe(pi);
  EXPECT_EQ(rig.session.handshake(pi)->nonce, probe);
  EXPECT_TRUE(rig.session.HandshakeOwed(pi));
  const std::vector<wire::View> out = BuildHandshakes(rig, pi, 2);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].common.type, wire::PacketType::kHello);
  EXPECT_EQ(out[0].common.dst_incarnation, 0u) << "a probe names no incarnation";
  EXPECT_EQ(out[0].common.psn, rig.session[pi].tx_isn) << "our session's ISN";
  EXPECT_EQ(out[0].hello.nonce, probe);
  rig.session.Answered(pi);
  EXPECT_FALSE(rig.session[pi].probing);
  EXPECT_FALSE(rig.session.HandshakeOwed(pi));
  EXPECT_TRUE(rig.session[pi].established()) << "nothing ended";
  EXPECT_EQ(rig.session.handshake(pi), nullptr) << "the probe's record went back";
  EXPECT_EQ(rig.session.handshakes_taken(), 0u);
}

// A COOKIE echoing the probe's nonce proves an established session is gone at the
// peer (a reset, or a restart from another incarnation); one during a
// first handshake is taken and the HELLO goes again at once, echoing it.
TEST(SessionProofTest, WhatACookieProves) {
  StageRig rig;
  const uint32_t pi = rig.AddEstablishedPeer();
  wire::View cookie = Hello(rig, Psn(0), wire::PacketType::kCookie);
  cookie.hello.cookie.fill(4);
  EXPECT_EQ(rig.session.ClassifyCookie(pi, cookie), SessionEvent::kCurrent) << "no probe";
  StageRig mid;  // a probe during a handshake: the peer may not have our HELLO yet
  const uint32_t half = mid.AddPeer();
  mid.session.Accept(half, Hello(mid, Psn(StageRig::kPeerIsn)));
  mid.session.Probe(half);
  EXPECT_EQ(mid.session.ClassifyCookie(half, cookie), SessionEvent::kCurrent);
  rig.session.Probe(pi);
  EXPECT_EQ(rig.session.ClassifyCookie(pi, cookie), SessionEvent::kReset);
  cookie.common.src_incarnation = 0x7777;
  EXPECT_EQ(rig.session.ClassifyCookie(pi, cookie), SessionEvent::kRestarted);

  StageRig first;
  const uint32_t fresh = first.AddPeer();
  first.session.WantHello(fresh);
  cookie.common.src_incarnation = StageRig::kPeerIncarnation;
  first.ctx.now = 50;
  const_cast<Handshake*>(first.session.handshake(fresh))->hello_due_ns = 1000;
  EXPECT_EQ(first.session.ClassifyCookie(fresh, cookie), SessionEvent::kCurrent);
  first.session.TakeCookie(fresh, cookie);
  EXPECT_TRUE(first.session.HandshakeOwed(fresh)) << "at once";
  const std::vector<wire::View> out = BuildHandshakes(first, fresh, 1);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hello.cookie, cookie.hello.cookie);
}

// Learned peers (from proven HELLOs) are at most a quarter of max_peers;
// OldestLearned finds the oldest matching one; inserted peers are never
// among them, and an insert of a learned peer makes it inserted.
TEST(SessionProofTest, LearnedPeersAreBounded) {
  EndpointConfig c = StageRig::DefaultConfig();
  c.max_peers = 8;
  StageRig rig(c);
  std::vector<uint32_t> learned;
  for (uint32_t i = 0; i < 2; ++i) {
    wire::View v = Hello(rig, Psn(1));
    v.flow.src_ip.value = 0x0a010000 + i;
    bool added = false;
    learned.push_back(rig.session.AddFromHello(v, &added));
    ASSERT_NE(learned.back(), kNone);
  }
  EXPECT_TRUE(rig.session.LearnedFull());
  wire::View third = Hello(rig, Psn(1));
  third.flow.src_ip.value = 0x0a01ffff;
  bool added = false;
  EXPECT_EQ(rig.session.AddFromHello(third, &added), kNone);
  EXPECT_EQ(rig.ctx.counters.peer_table_full, 1u);
  rig.AddPeer();  // inserted: not learned
  EXPECT_EQ(rig.session.OldestLearned([](uint32_t) { return true; }), learned[0]);
  EXPECT_EQ(rig.session.OldestLearned([&](uint32_t pi) { return pi != learned[0]; }), learned[1]);
  Address a = rig.session.address(learned[0]);
  rig.session.Insert(a, &added);
  EXPECT_FALSE(added);
  EXPECT_FALSE(rig.session.LearnedFull()) << "one learned peer became inserted";
  EXPECT_EQ(rig.session.OldestLearned([](uint32_t) { return true; }), learned[1]);
  rig.session.Remove(learned[1]);
  EXPECT_EQ(rig.session.OldestLearned([](uint32_t) { return true; }), kNone);
}

}  // namespace
}  // namespace bypass::rdm
