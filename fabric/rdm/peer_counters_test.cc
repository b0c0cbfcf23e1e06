// Per-peer counters (PeerCounters): with one peer, each is the share of the
// endpoint's totals that concerns it, under loss, duplication and
// reordering; a peer inserted again starts from zero.
#include <cstdint>

#include "fabric/rdm/context.h"
#include "fabric/rdm/rdm.h"
#include "fabric/rdm/stage_rig.h"
#include "fabric/rdm/test_util.h"
#include "gtest/gtest.h"

namespace bypass::rdm {
namespace {

using testing::Net;
using testing::NetOptions;

// A peer's slot keeps its counts narrower than PeerCounters reports them
// (PeerCountSlot): what wraps a slot's field carries into a table, so the
// counts reported stay whole, and a new peer in the slot starts from 0.
TEST(PeerCountersTest, CountsCarryOutOfTheirSlotsNarrowFields) {
  const EndpointConfig c = testing::StageRig::DefaultConfig();
  Context ctx(c, testing::StageRig::Device(), testing::StageRig::kMaxDatagram, 1, 7, 16);
  for (int i = 0; i < 70'000; ++i) ctx.Count(1, PeerCount::kDuplicates);
  ctx.Count(1, PeerCount::kHandshakeFailures, 65'535);
  ctx.Count(1, PeerCount::kHandshakeFailures, 3);
  ctx.Count(1, PeerCount::kTxPackets, 0xffff'fff0u);
  ctx.Count(1, PeerCount::kTxPackets, 0x20);
  ctx.Count(1, PeerCount::kTxPackets, 0xffff'ffffu);
  ctx.Count(1, PeerCount::kRxPackets, 5);
  ctx.Count(2, PeerCount::kRetransmits);
  const PeerCounters p = ctx.peer_counters(1);
  EXPECT_EQ(p.duplicates, 70'000u);
  EXPECT_EQ(p.handshake_failures, 65'538u);
  EXPECT_EQ(p.tx_packets, 0xffff'fff0ull + 0x20 + 0xffff'ffffull);
  EXPECT_EQ(p.rx_packets, 5u);
  EXPECT_EQ(p.retransmits, 0u);
  EXPECT_EQ(ctx.peer_counters(2).retransmits, 1u);
  EXPECT_EQ(ctx.peer_counters(2).duplicates, 0u);
  EXPECT_EQ(ctx.carried_peers(), 1u) << "only the peer whose counts wrapped";
  ctx.ResetPeerCounts(1);
  EXPECT_EQ(ctx.peer_counters(1).tx_packets, 0u);
  EXPECT_EQ(ctx.peer_counters(1).duplicates, 0u);
  EXPECT_EQ(ctx.carried_peers(), 0u);
}

TEST(PeerCountersTest, OnePeerHoldsTheEndpointsTotals) {
  NetOptions o;
  o.faults.drop = 0.05;
  o.faults.dup = 0.02;
  o.faults.reorder = 0.1;
  o.faults.seed = 7;
  Net net(o);
  std::vector<size_t> sizes;
  for (int i = 0; i < 60; ++i) sizes.push_back(1 + (i * 4099) % 30000);
  ASSERT_GE(testing::TransferAndVerify(net, 0, 1, sizes, 2'000'000), 0);
  for (int e = 0; e < 2; ++e) {
    const Counters& c = net.ep(e).counters();
    const PeerCounters p = *net.ep(e).peer_counters(net.Peer(e, 1 - e));
    EXPECT_EQ(p.retransmits, c.retransmits_fast + c.retransmits_timeout) << e;
    EXPECT_EQ(p.duplicates, c.duplicates_dropped) << e;
    EXPECT_EQ(p.out_of_order, c.out_of_order_held) << e;
    EXPECT_EQ(p.rnr_sent, c.rnr_sent) << e;
    EXPECT_EQ(p.rnr_received, c.rnr_received) << e;
    EXPECT_EQ(p.credit_stalls, c.window_stalls) << e;
    EXPECT_EQ(p.handshake_failures,
              c.handshake_auth_failed + c.handshake_unproven + c.cookie_rejected) << e;
    // DATA and ACKs only: the handshake's frames count in the totals alone.
    EXPECT_EQ(p.tx_packets, c.tx_data_packets + c.tx_acks) << e;
    EXPECT_LE(p.rx_packets, c.rx_packets) << e;
    EXPECT_GT(p.rx_packets, c.rx_data_packets) << e;
  }
  EXPECT_GT(net.ep(0).peer_counters(net.Peer(0, 1))->retransmits, 0u);
  EXPECT_GT(net.ep(1).peer_counters(net.Peer(1, 0))->out_of_order, 0u);
  // A removed peer has none; inserted again, it starts from zero.
  const Address b = *net.ep(0).PeerAddress(net.Peer(0, 1));
  ASSERT_TRUE(net.ep(0).RemovePeer(net.Peer(0, 1)).ok());
  const absl::StatusOr<PeerId> again = net.ep(0).InsertPeer(b);
  ASSERT_TRUE(again.ok());
  const PeerCounters fresh = *net.ep(0).peer_counters(*again);
  EXPECT_EQ(fresh.tx_packets, 0u);
  EXPECT_EQ(fresh.retransmits, 0u);
}

}  // namespace
}  // namespace bypass::rdm
