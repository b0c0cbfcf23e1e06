// Per-peer counters (PeerCounters): with one peer, each is the share of the
// endpoint's totals that concerns it, under loss, duplication and
// reordering; a peer inserted again starts from zero.
#include "fabric/rdm/rdm.h"
#include "fabric/rdm/test_util.h"
#include "gtest/gtest.h"

namespace bypass::rdm {
namespace {

using testing::Net;
using testing::NetOptions;

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
