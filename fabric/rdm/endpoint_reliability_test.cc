// Loss recovery and flow control on chosen and random faults: fast
// retransmit on a SACK gap, the timer for a lost tail, duplicates, corruption,
// the window, the RTT estimate and delayed ACKs.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <vector>

#include "fabric/rdm/rdm.h"
#include "fabric/rdm/test_util.h"
#include "gtest/gtest.h"

namespace bypass::rdm {
namespace {

using testing::Net;
using testing::NetOptions;
using testing::TransferAndVerify;

// A filter that drops the first DATA packet `pick` selects, once.
testing::TapQueue::Filter DropOnce(std::function<bool(const wire::View&)> pick, int* dropped) {
  return [pick, dropped](const wire::View* v) {
    if (*dropped == 0 && v != nullptr && v->common.type == wire::PacketType::kData && pick(*v)) {
      ++*dropped;
      return false;
    }
    return true;
  };
}

TEST(ReliabilityTest, OneLossCostsAboutOneRoundTripNotATimeout) {
  const std::vector<size_t> sizes = {300'000};
  NetOptions o;
  o.config.rendezvous_threshold = UINT64_MAX;  // one eager stream of DATA segments
  int64_t clean_steps;
  {
    Net net(o);
    clean_steps = TransferAndVerify(net, 0, 1, sizes, 100'000);
    ASSERT_GT(clean_steps, 0);
  }
  Net net(o);
  int dropped = 0;
  const uint64_t seg = net.ep(0).max_segment();
  net.tap(1).set_filter(
      DropOnce([&](const wire::View& v) { return v.msg.offset == 50 * seg; }, &dropped));
  const int64_t steps = TransferAndVerify(net, 0, 1, sizes, 100'000);
  ASSERT_GT(steps, 0);
  EXPECT_EQ(dropped, 1);
  const Counters& c = net.ep(0).counters();
  EXPECT_EQ(c.retransmits_fast, 1u);
  EXPECT_EQ(c.retransmits_timeout, 0u);
  EXPECT_EQ(c.rto_expirations, 0u);
  // The RTO floor alone is 100 steps; recovery took a few round trips at most.
  EXPECT_LT(steps, clean_steps + 20) << "clean: " << clean_steps;
}

TEST(ReliabilityTest, LostTailIsRecoveredByTheTimer) {
  Net net(NetOptions{});
  int dropped = 0;
  net.tap(1).set_filter(DropOnce(
      [](const wire::View& v) { return v.msg.offset + v.payload.size() == v.msg.total_length; },
      &dropped));
  ASSERT_GT(TransferAndVerify(net, 0, 1, {20'000}, 100'000), 0);
  EXPECT_EQ(dropped, 1);
  // The tail-loss probe (a timer at about two round trips) resends it, before the RTO.
  EXPECT_EQ(net.ep(0).counters().retransmits_timeout, 1u);
  EXPECT_EQ(net.ep(0).counters().tail_probes, 1u);
  EXPECT_EQ(net.ep(0).counters().rto_expirations, 0u);
  EXPECT_EQ(net.ep(0).counters().retransmits_fast, 0u);
}

TEST(ReliabilityTest, LostLonePacketCostsAboutARoundTripNotTheRtoFloor) {
  // One small message in flight, as in a ping-pong: nothing after it can be
  // SACKed, so only a timer finds the loss.
  Net net(NetOptions{});
  ASSERT_GT(TransferAndVerify(net, 0, 1, std::vector<size_t>(20, 64), 10'000), 0);  // RTT samples
  const int64_t clean_steps = TransferAndVerify(net, 0, 1, {64}, 10'000);
  ASSERT_GT(clean_steps, 0);
  int dropped = 0;
  net.tap(1).set_filter(DropOnce([](const wire::View&) { return true; }, &dropped));
  const int64_t steps = TransferAndVerify(net, 0, 1, {64}, 10'000);
  ASSERT_GT(steps, 0);
  EXPECT_EQ(dropped, 1);
  const Counters& c = net.ep(0).counters();
  EXPECT_EQ(c.tail_probes, 1u);
  EXPECT_EQ(c.retransmits_timeout, 1u);
  EXPECT_EQ(c.rto_expirations, 0u);
  EXPECT_EQ(net.ep(1).counters().duplicates_dropped, 0u);
  // The RTO floor alone is 100 steps; the probe goes after 2 SRTT + the ACK delay.
  const uint64_t srtt_steps = net.ep(0).peer_stats(PeerId{0})->srtt_ns / 1'000;
  EXPECT_LE(steps, clean_steps + static_cast<int64_t>(3 * srtt_steps + 10))
      << "clean " << clean_steps << " srtt " << srtt_steps;
  EXPECT_LT(steps, 60);
}

TEST(ReliabilityTest, LostAcksMeanDuplicatesButExactlyOnceDelivery) {
  NetOptions o;
  o.config.rto_initial_ns = o.config.rto_min_ns;
  o.tick_ns = 10'000;
  Net net(o);
  int acks_dropped = 0;
  net.tap(0).set_filter([&](const wire::View* v) {
    if (v != nullptr && v->common.type == wire::PacketType::kAck && acks_dropped < 20) {
      ++acks_dropped;
      return false;
    }
    return true;
  });
  std::vector<size_t> sizes(40, 3000);
  // Each RTO round gets one ACK back (the duplicates of one pass), so the
  // 20 lost take 20 backed-off RTOs: about 1.1 s of virtual time.
  ASSERT_GT(TransferAndVerify(net, 0, 1, sizes, 300'000), 0);
  EXPECT_EQ(acks_dropped, 20);
  EXPECT_GT(net.ep(1).counters().duplicates_dropped, 0u);
  EXPECT_GT(net.ep(0).counters().retransmits_timeout, 0u);
}

// Over loopback (memory only: DeviceInfo::integrity, kRxIntact) DATA and
// ACKs go without a CRC; a node whose device may corrupt what it receives
// (corrupt > 0) asks for CRCs in its handshake, gets them, and drops every
// damaged packet, while the other direction stays unchecked
// (PROTOCOL.md, "Unchecked packets").
TEST(ReliabilityTest, UncheckedOnlyToAReceiverWhoseFramesComeThroughMemory) {
  NetOptions o;
  o.configure_faults = [](int node, driver::fault::FaultOptions* f) {
    if (node == 1) {
      f->corrupt = 0.2;
      f->seed = 5;
    }
  };
  o.config.congestion_control = false;
  Net net(o);
  std::vector<size_t> sizes;
  for (int i = 0; i < 20; ++i) sizes.push_back(static_cast<size_t>(i) * 997 % 9'000);
  ASSERT_GT(TransferAndVerify(net, 0, 1, sizes, 200'000), 0);
  ASSERT_GT(TransferAndVerify(net, 1, 0, sizes, 200'000), 0);
  const Counters& c0 = net.ep(0).counters();
  const Counters& c1 = net.ep(1).counters();
  // Node 0 receives through memory: node 1 sent it nothing with a CRC
  // after the handshake.
  EXPECT_GT(c0.rx_unchecked, 0u);
  EXPECT_EQ(c0.checksum_dropped, 0u);
  // Node 1 may corrupt: everything it took was checked, and every damaged
  // packet was dropped once.
  EXPECT_EQ(c1.rx_unchecked, 0u);
  const uint64_t corrupted = net.device(1).counters().corrupted;
  EXPECT_GT(corrupted, 0u);
  EXPECT_EQ(c1.checksum_dropped + c1.malformed_dropped, corrupted);
}

TEST(ReliabilityTest, EveryCorruptedPacketIsDetected) {
  NetOptions o;
  o.faults.corrupt = 0.2;
  o.faults.seed = 3;
  // Exactly once under heavy random loss, with a step budget for a sender
  // limited by credit only: with congestion control a loss-based window
  // stays near its minimum, and this fault device's reordering releases a
  // packet only after later ones pass it, so a small flight waits for RTOs
  // (PROTOCOL.md, "Congestion control"; flood_test runs it under loss).
  o.config.congestion_control = false;
  Net net(o);
  std::vector<size_t> sizes;
  for (int i = 0; i < 30; ++i) sizes.push_back(static_cast<size_t>(i) * 997 % 20'000);
  ASSERT_GT(TransferAndVerify(net, 0, 1, sizes, 200'000), 0);
  for (int i = 0; i < 2; ++i) {
    // A damaged IPv4 header fails its checksum (malformed); anything else
    // fails the CRC-32C. Either way, each damaged packet is dropped once.
    const Counters& c = net.ep(i).counters();
    const uint64_t corrupted = net.device(i).counters().corrupted;
    EXPECT_GT(corrupted, 0u);
    EXPECT_EQ(c.checksum_dropped + c.malformed_dropped, corrupted) << "node " << i;
  }
  EXPECT_GT(net.ep(1).counters().checksum_dropped, 0u);
}

TEST(ReliabilityTest, DuplicatesAndReorderingStillExactlyOnceInOrder) {
  NetOptions o;
  o.faults.dup = 0.2;
  o.faults.reorder = 0.3;
  o.faults.seed = 4;
  // Exactly once under heavy random loss, with a step budget for a sender
  // limited by credit only: with congestion control a loss-based window
  // stays near its minimum, and this fault device's reordering releases a
  // packet only after later ones pass it, so a small flight waits for RTOs
  // (PROTOCOL.md, "Congestion control"; flood_test runs it under loss).
  o.config.congestion_control = false;
  Net net(o);
  std::vector<size_t> sizes;
  for (int i = 0; i < 200; ++i) sizes.push_back(static_cast<size_t>(i) * 7919 % 5000);
  ASSERT_GT(TransferAndVerify(net, 0, 1, sizes, 200'000), 0);
  EXPECT_GT(net.ep(1).counters().duplicates_dropped, 0u);
  EXPECT_GT(net.device(1).counters().reordered, 0u);
}

TEST(ReliabilityTest, SenderNeverExceedsTheWindowOrTheHeldBudget) {
  NetOptions o;
  o.faults.drop = 0.05;
  o.faults.seed = 5;
  o.configure = [](int node, EndpointConfig* c) {
    if (node == 1) {
      c->window_packets = 8;
      c->max_held_packets = 5;
    }
  };
  Net net(o);
  const PeerId to_b = net.Peer(0, 1);
  std::vector<uint8_t> out(500'000), in(500'000);
  testing::FillPattern(1, absl::MakeSpan(out));
  ASSERT_EQ(net.ep(1).PostRecv({.buf = in.data(), .len = in.size()}), Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = out.data(), .len = out.size()}), Result::kOk);
  uint32_t max_inflight = 0, max_held = 0;
  Completion c;
  ASSERT_TRUE(net.RunUntil(
      [&] {
        max_inflight = std::max(max_inflight, net.ep(0).peer_stats(to_b)->inflight);
        // b learns a (PeerId 0 of b) from a's first HELLO.
        const std::optional<PeerStats> at_b = net.ep(1).peer_stats(PeerId{0});
        if (at_b) max_held = std::max(max_held, at_b->held_packets);
        return net.ep(1).PollCompletions({&c, 1}) == 1;
      },
      100'000));
  EXPECT_EQ(in, out);
  EXPECT_LE(max_inflight, 8u);
  EXPECT_LE(max_held, 5u);
  EXPECT_GT(max_held, 0u);
  EXPECT_GT(net.ep(0).counters().window_stalls, 0u);
}

TEST(ReliabilityTest, RttEstimateFollowsTheClock) {
  for (uint64_t tick : {1'000u, 8'000u}) {
    NetOptions o;
    o.tick_ns = tick;
    Net net(o);
    std::vector<size_t> sizes(50, 100);
    ASSERT_GT(TransferAndVerify(net, 0, 1, sizes, 10'000), 0);
    const PeerStats s = *net.ep(0).peer_stats(PeerId{0});
    EXPECT_GE(s.srtt_ns, tick) << "tick " << tick;
    EXPECT_LE(s.srtt_ns, 20 * tick) << "tick " << tick;
    EXPECT_GE(s.rto_ns, net.ep(0).config().rto_min_ns);
  }
}

TEST(ReliabilityTest, RetransmitTimerBacksOffExponentially) {
  NetOptions o;
  o.config.rto_initial_ns = 100'000;
  o.config.rto_min_ns = 100'000;
  o.config.rto_max_ns = 3'200'000;
  o.config.peer_timeout_ns = 1'000'000'000;
  o.tick_ns = 10'000;
  Net net(o);
  const PeerId to_b = net.Peer(0, 1);
  ASSERT_GT(TransferAndVerify(net, 0, 1, {10}, 1'000), 0);
  net.tap(1).set_filter([](const wire::View*) { return false; });  // b hears nothing now
  ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = "x", .len = 1}), Result::kOk);
  std::vector<uint64_t> rtos;
  net.RunUntil(
      [&] {
        const uint64_t r = net.ep(0).peer_stats(to_b)->rto_ns;
        if (rtos.empty() || rtos.back() != r) rtos.push_back(r);
        return false;
      },
      2'000);
  ASSERT_GE(rtos.size(), 5u);
  for (size_t i = 1; i < rtos.size(); ++i) {
    EXPECT_EQ(rtos[i], std::min<uint64_t>(2 * rtos[i - 1], o.config.rto_max_ns)) << i;
  }
  EXPECT_EQ(rtos.back(), o.config.rto_max_ns);
}

// A receiver that stops progressing for 20 ms (descheduled on a busy host)
// while a sender's window is in flight: across hosts each RTO resends what
// has waited an RTO (the whole window, then again on backoff); toward a
// process of this host (same_host=1: frames come with kRxSameHost) each
// RTO resends the oldest packet alone, and the ACK after the receiver wakes
// makes the timeout spurious. Both deliver every message once, in order.
TEST(ReliabilityTest, ADescheduledReceiverOfThisHostCostsOnePacketPerRto) {
  for (const bool same_host : {false, true}) {
    NetOptions o;
    if (same_host) o.device_keys = ",same_host=1";
    o.config.congestion_control = false;  // the credit window alone, either way
    o.config.rendezvous_threshold = UINT64_MAX;
    o.config.read_in_place = false;
    Net net(o);
    Endpoint& s = net.ep(0);
    Endpoint& r = net.ep(1);
    const PeerId to_r = net.Peer(0, 1);
    constexpr int kMsgs = 100;
    std::vector<std::vector<uint8_t>> out(kMsgs, std::vector<uint8_t>(1000)), in = out;
    for (int i = 0; i < kMsgs; ++i) {
      testing::FillPattern(i, absl::MakeSpan(out[i]));
      ASSERT_EQ(r.PostRecv({.buf = in[i].data(), .len = in[i].size(), .context = &in[i]}),
                Result::kOk);
    }
    // The handshake and the first message, with both progressing.
    ASSERT_EQ(s.Send({.dest = to_r, .buf = out[0].data(), .len = out[0].size(), .context = &out[0]}),
              Result::kOk);
    std::vector<Completion> sent, got;
    std::vector<ErrorCompletion> errs;
    ASSERT_TRUE(net.RunUntil(
        [&] {
          testing::Drain(s, &sent, &errs);
          testing::Drain(r, &got, &errs);
          return sent.size() == 1 && got.size() == 1;
        },
        100'000));
    for (int i = 1; i < kMsgs; ++i) {
      ASSERT_EQ(s.Send({.dest = to_r, .buf = out[i].data(), .len = out[i].size(), .context = &out[i]}),
                Result::kOk);
    }
    // The receiver sleeps 20 ms; the sender goes on calling.
    for (int step = 0; step < 20'000; ++step) {
      s.Progress();
      net.clock().Advance(o.tick_ns);
    }
    const Counters asleep = s.counters();
    ASSERT_TRUE(net.RunUntil(
        [&] {
          testing::Drain(s, &sent, &errs);
          testing::Drain(r, &got, &errs);
          return sent.size() == kMsgs && got.size() == kMsgs;
        },
        1'000'000))
        << same_host << ": " << sent.size() << " sent, " << got.size() << " received";
    ASSERT_TRUE(errs.empty()) << errs[0].message;
    for (int i = 0; i < kMsgs; ++i) {
      EXPECT_EQ(got[i].context, &in[i]) << i;
      EXPECT_EQ(testing::CheckPattern(i, in[i]), -1) << i;
    }
    const Counters& c = s.counters();
    std::fprintf(stderr,
                 "%s: asleep %llu RTOs, %llu probes, %llu resent; in all %llu resent, %llu "
                 "spurious, %llu duplicates at the receiver\n",
                 same_host ? "same host" : "across hosts",
                 static_cast<unsigned long long>(asleep.rto_expirations),
                 static_cast<unsigned long long>(asleep.tail_probes),
                 static_cast<unsigned long long>(asleep.retransmits_timeout),
                 static_cast<unsigned long long>(c.retransmits_timeout + c.retransmits_fast),
                 static_cast<unsigned long long>(c.rto_spurious),
                 static_cast<unsigned long long>(r.counters().duplicates_dropped));
    ASSERT_GT(asleep.rto_expirations, 2u) << same_host;
    if (same_host) {
      EXPECT_EQ(asleep.retransmits_timeout, asleep.rto_expirations + asleep.tail_probes)
          << "one packet per RTO: " << c.ToString();
      EXPECT_GE(c.rto_spurious, 1u) << c.ToString();
      EXPECT_LE(r.counters().duplicates_dropped, c.retransmits_timeout);
    } else {
      EXPECT_GE(asleep.retransmits_timeout, uint64_t{kMsgs - 1}) << "the window, at least once";
      EXPECT_EQ(c.rto_spurious, 0u);
    }
  }
}

TEST(ReliabilityTest, AcksRideOnRepliesAndAreDelayedOtherwise) {
  Net net(NetOptions{});
  const PeerId to_b = net.Peer(0, 1);
  const PeerId to_a = net.Peer(1, 0);
  // Ping-pong: every reply carries the ACK of its request.
  uint64_t ping = 0, pong = 0;
  for (uint64_t i = 1; i <= 100; ++i) {
    ASSERT_EQ(net.ep(1).PostRecv({.buf = &ping, .len = 8}), Result::kOk);
    ASSERT_EQ(net.ep(0).PostRecv({.buf = &pong, .len = 8}), Result::kOk);
    ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = &i, .len = 8, .flags = kSendInject}),
              Result::kOk);
    Completion c;
    ASSERT_TRUE(net.RunUntil([&] { return net.ep(1).PollCompletions({&c, 1}) == 1; }, 100));
    ASSERT_EQ(net.ep(1).Send({.dest = to_a, .buf = &ping, .len = 8, .flags = kSendInject}),
              Result::kOk);
    ASSERT_TRUE(net.RunUntil([&] { return net.ep(0).PollCompletions({&c, 1}) == 1; }, 100));
    ASSERT_EQ(pong, i);
  }
  EXPECT_LE(net.ep(1).counters().tx_acks, 2u);
  EXPECT_LE(net.ep(0).counters().tx_acks, 2u);
  // One way: an ACK per 16 packets or per pass, not per packet.
  std::vector<size_t> sizes(240, 8);
  const uint64_t acks_before = net.ep(1).counters().tx_acks;
  ASSERT_GT(TransferAndVerify(net, 0, 1, sizes, 10'000), 0);
  EXPECT_LE(net.ep(1).counters().tx_acks - acks_before, 240u / 16 + 4);
}

}  // namespace
}  // namespace bypass::rdm
