// Congestion control against a many-to-one flood: 8 senders, one receiver
// behind a bottleneck link (the fault device's rate_pps and drop-tail
// queue), deterministic on a manual clock. With and without the congestion
// window, everything arrives exactly once; with it, the bottleneck drops
// and the retransmissions per delivered packet are far fewer. The bounds
// are on counters, never on time.
#include <cstdio>

#include "fabric/rdm/flood.h"
#include "gtest/gtest.h"

namespace bypass::rdm::testing {
namespace {

void Print(const char* what, const FloodOptions& o, const FloodResult& r) {
  std::printf(
      "%-8s link utilization %.2f, retransmits per delivered packet %.3f (%llu of %llu), "
      "bottleneck drops %llu (deepest %llu of %u), RTOs %llu, window halvings %llu, "
      "%llu steps\n",
      what, r.link_utilization(o), r.retransmits_per_delivered(),
      static_cast<unsigned long long>(r.retransmits),
      static_cast<unsigned long long>(r.delivered_packets),
      static_cast<unsigned long long>(r.queue_dropped),
      static_cast<unsigned long long>(r.queue_max), o.queue,
      static_cast<unsigned long long>(r.rto_expirations),
      static_cast<unsigned long long>(r.cwnd_reductions),
      static_cast<unsigned long long>(r.steps));
}

TEST(FloodTest, CongestionWindowAvoidsTheRetransmitStorm) {
  FloodOptions o;  // 8 senders x 64 messages of 4 KiB (3 packets) into 2 Mpps, 64 queued
  o.congestion_control = false;
  const FloodResult off = RunFlood(o);
  o.congestion_control = true;
  const FloodResult on = RunFlood(o);
  Print("cc off", o, off);
  Print("cc on", o, on);
  EXPECT_TRUE(off.exactly_once) << off.error;
  EXPECT_TRUE(on.exactly_once) << on.error;
  const uint64_t packets = 8 * 64 * 3;
  EXPECT_EQ(on.delivered_packets, packets);
  EXPECT_EQ(off.delivered_packets, packets);
  // Off: every sender's credit window (128) lands at once in a 64-deep
  // queue, and what is lost is resent into the same queue.
  EXPECT_GT(off.retransmits_per_delivered(), 0.5);
  // On: far fewer, and the bottleneck drops a bounded share.
  EXPECT_LT(on.retransmits_per_delivered() * 5, off.retransmits_per_delivered());
  EXPECT_LT(on.queue_dropped * 5, off.queue_dropped);
  EXPECT_LT(on.queue_dropped, packets / 5);
  EXPECT_GT(on.cwnd_reductions, 0u) << "the flood was a congestion: windows came down";
  EXPECT_EQ(off.cwnd_reductions, 0u);
}

// Random loss on every path besides the bottleneck: congestion control
// still delivers everything exactly once.
TEST(FloodTest, ExactlyOnceUnderRandomLossWithCongestionControl) {
  FloodOptions o;
  o.senders = 4;
  o.messages = 32;
  o.drop = 0.01;
  o.seed = 5;
  const FloodResult r = RunFlood(o);
  Print("cc on, 1% drop", o, r);
  EXPECT_TRUE(r.exactly_once) << r.error;
  EXPECT_GT(r.retransmits, 0u);
}

}  // namespace
}  // namespace bypass::rdm::testing
