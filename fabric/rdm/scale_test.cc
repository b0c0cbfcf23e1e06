// Scale (issue 22; PROTOCOL.md, "Memory per peer" and "Timers"): what an
// idle handshaked peer costs its endpoint, measured on the heap, and the
// pool of rings that only peers with packets in flight or held take.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

#include "fabric/rdm/peer_table.h"
#include "fabric/rdm/rdm.h"
#include "fabric/rdm/scale_rig.h"
#include "fabric/rdm/stage_rig.h"
#include "fabric/rdm/stages.h"
#include "fabric/rdm/test_util.h"
#include "fabric/rdm/timer_wheel.h"
#include "gtest/gtest.h"

namespace bypass::rdm {
namespace {

using testing::CheckPattern;
using testing::FillPattern;
using testing::Net;
using testing::NetOptions;
using testing::UniqueSegment;

// What each part of an engine holds on the heap for max_peers = n: the
// parts built alone, in the engine's order (stages.h), each measured by
// malloc as it is made. A part's bytes per peer are its growth from few to
// many peers over the peers added; an idle peer holds nothing beyond what
// its slot was given at creation (AnIdlePeerCostsNoBuffers checks the
// whole endpoint against the sum).
struct Part {
  const char* name;
  int64_t bytes;  // malloc's reuse may leave a part that sizes nothing per peer below 0
};
std::vector<Part> PartBytes(uint32_t n) {
  EndpointConfig c = testing::StageRig::DefaultConfig();
  c.max_peers = n;
  std::vector<Part> out;
  uint64_t at = HeapBytes();
  const auto step = [&](const char* name) {
    const uint64_t now = HeapBytes();
    out.push_back({name, static_cast<int64_t>(now - at)});
    at = now;
  };
  // Alone first, to split them from the Context and the Session that hold one.
  auto wheel = std::make_unique<TimerWheel>(n);
  step("the timer (wheel node)");
  auto table = std::make_unique<PeerTable>(n);
  step("the peer table (address, generation, free list, index)");
  auto ctx = std::make_unique<Context>(c, testing::StageRig::Device(),
                                       testing::StageRig::kMaxDatagram, 1, 7, 1024);
  step("Context: per-peer counters, send FIFO (and a timer)");
  auto session = std::make_unique<Session>(*ctx, n);
  step("Session: flow, handshake, liveness (and a peer table)");
  auto completions = std::make_unique<Completions>(ctx->counters, session->peers(),
                                                   c.max_send_ops + c.max_posted_recvs,
                                                   c.max_send_ops);
  auto ops = std::make_unique<OpTable>(*ctx, c.max_send_ops, c.max_rma_ops, c.inject_size);
  step("completions and ops (not per peer)");
  auto reliability = std::make_unique<Reliability>(*ctx, *session, *ops, *completions,
                                                   testing::StageRig::kRingSize, 512);
  step("Reliability: send and receive streams");
  auto messaging = std::make_unique<Messaging>(*ctx, *session, *ops, *completions, *reliability);
  step("Messaging: message numbers, match source");
  auto rma = std::make_unique<Rma>(*ctx, *session, *ops, *completions, *reliability);
  step("Rma: the write being received");
  // The Context's and the Session's own timer and table are counted apart.
  out[2].bytes -= out[0].bytes;
  out[3].bytes -= out[1].bytes;
  return out;
}

// Prints the bytes per peer slot of each part, between max_peers few and
// many; returns their sum.
double PerPeerParts(uint32_t few, uint32_t many) {
  const std::vector<Part> a = PartBytes(few), b = PartBytes(many);
  double sum = 0;
  std::printf("per peer slot, by part (max_peers %u against %u):\n", many, few);
  for (size_t i = 0; i < a.size(); ++i) {
    const double per = static_cast<double>(b[i].bytes - a[i].bytes) / static_cast<double>(many - few);
    std::printf("  %-58s %6.1f B\n", a[i].name, per);
    sum += per;
  }
  std::printf("  %-58s %6.1f B\n", "sum", sum);
  return sum;
}

// The hub's heap with many idle peers against fewer, per extra peer:
// everything its engine sizes by max_peers or keeps per peer (tables,
// timers, queues), measured by malloc, not sizeof. Both hubs have at least
// max_active_peers (64) peers, so both hold the whole ring pool (an
// endpoint's, not a peer's: PROTOCOL.md, "Memory per peer").
// Issue 22 asks for at most 256 B; measured 23.2 KB before the ring pool,
// about 690 B after it, 473.4 B before Reliability's streams were split
// into an idle part and a pooled active part and 323.7 B after, 250.3 B
// with that idle part at 64 B (fastbuild, 2026-11-27): the bound is the parts' (below) with the slack of their
// match, and catches a peer that keeps a record or a ring while idle.
// Whether malloc's statistics see an allocation (a sanitizer's allocator
// keeps none).
bool MallocCounts() {
  const uint64_t before = HeapBytes();
  auto block = std::make_unique<volatile char[]>(1 << 20);
  block[0] = 1;
  return HeapBytes() > before;
}

// What the parts of a peer's slot add up to at most (APeerSlotsPartsAddUp).
constexpr double kPartsBound = 256.0;  // the goal

TEST(ScaleTest, AnIdlePeerCostsNoBuffers) {
  if (!MallocCounts()) GTEST_SKIP() << "malloc keeps no statistics here (a sanitizer's allocator)";
  constexpr uint32_t kFew = 64, kMany = 576;
  uint64_t few = 0, many = 0;
  {
    ScaleRig rig(UniqueSegment(), kFew);
    few = rig.hub_bytes();
  }
  {
    ScaleRig rig(UniqueSegment(), kMany);
    many = rig.hub_bytes();
    rig.RoundTrip(kMany - 1);  // the hub still talks to the last one
  }
  const double per_peer = static_cast<double>(many - few) / (kMany - kFew);
  std::printf("hub heap: %llu B with %u peers, %llu B with %u: %.1f B per idle peer\n",
              static_cast<unsigned long long>(few), kFew, static_cast<unsigned long long>(many),
              kMany, per_peer);
  const double parts = PerPeerParts(kFew, kMany);
  // The parts account for the whole endpoint: an idle peer holds nothing
  // its slot was not given at creation (no pooled record, no ring). The
  // slack is malloc's rounding of the arrays and of the pools' growth.
  EXPECT_NEAR(per_peer, parts, 16.0);
  EXPECT_LE(per_peer, kPartsBound + 16.0);
}

// The per-peer parts alone (no endpoint to handshake, so it runs in a
// moment where AnIdlePeerCostsNoBuffers takes minutes on a loaded machine):
// 535.7 B per peer slot in the parts' sum before the peer table's 4 B index
// entries, the narrow per-peer counters and SessionPeer packed without its
// flow, 427.9 B after (fastbuild, 2026-11-26); 464.0 B with the timer's
// floor (8 B, Context) merged beside them, where malloc's page rounding of
// the arrays it maps (a part's array for 576 peers is mapped, for 64 it is
// not) moved Reliability by +8 and Messaging by +13 B with no field added.
// 312.0 B after Reliability's split (its part 286.9 B before, 134.4 B
// after: the pooled active part and the RTO's bounds kept once, fastbuild,
// 2026-11-27); 240.0-242.0 B with the idle part at 64 B (Reliability
// 62.4 B). The bound is the goal, 256 B.
TEST(ScaleTest, APeerSlotsPartsAddUp) {
  if (!MallocCounts()) GTEST_SKIP() << "malloc keeps no statistics here (a sanitizer's allocator)";
  EXPECT_LE(PerPeerParts(64, 576), kPartsBound);
}

// One pooled tx ring and one held ring per endpoint, four peers each way on
// a lossy, reordering link: a sender's other peers get rings allocated
// (and freed) around the pooled one, early packets that find no held ring
// are dropped and come again, and every message arrives intact.
TEST(ScaleTest, PeersShareOneRingAndAllMessagesArrive) {
  NetOptions o;
  o.nodes = 5;
  o.faults.drop = 0.05;
  o.faults.reorder = 0.1;
  o.config.max_active_peers = 1;
  o.config.window_packets = 16;
  Net net(o);
  constexpr int kMsgs = 8;
  constexpr size_t kSize = 6000;  // several packets each
  constexpr int kAll = 2 * 4 * kMsgs;
  std::vector<std::vector<uint8_t>> out(kAll, std::vector<uint8_t>(kSize));
  std::vector<std::vector<uint8_t>> in(kAll, std::vector<uint8_t>(kSize));
  // Message k from `from` to `to`, its receive posted first.
  const auto post = [&](int k, int from, int to) {
    FillPattern(k, absl::MakeSpan(out[k]));
    ASSERT_EQ(net.ep(to).PostRecv({.source = net.Peer(to, from), .buf = in[k].data(), .len = kSize}),
              Result::kOk);
    ASSERT_EQ(net.ep(from).Send({.dest = net.Peer(from, to), .buf = out[k].data(), .len = kSize}),
              Result::kOk);
  };
  for (int m = 0; m < kMsgs; ++m) {
    for (int p = 1; p <= 4; ++p) {
      post(((p - 1) * kMsgs + m) * 2, 0, p);
      post(((p - 1) * kMsgs + m) * 2 + 1, p, 0);
    }
  }
  int done = 0;
  ASSERT_TRUE(net.RunUntil(
      [&] {
        for (int i = 0; i < 5; ++i) {
          Completion c[16];
          ErrorCompletion e[4];
          EXPECT_EQ(net.ep(i).PollErrors(e), 0u);
          done += static_cast<int>(net.ep(i).PollCompletions(c));
        }
        return done == 2 * kAll;  // each message's send and receive
      },
      3'000'000));
  for (int k = 0; k < kAll; ++k) EXPECT_EQ(CheckPattern(k, in[k]), -1) << "message " << k;
  EXPECT_GT(net.ep(0).counters().tx_rings_allocated, 0u);
}

// More peers with packets in flight than the sender has pooled rings, and
// the peers that got the first rings stop progressing as soon as their
// message arrives (as fi_msg_test's 200 connections did): they never
// acknowledge, so their rings never come back. The other peers must get
// their messages anyway (rings allocated beyond the pool, freed once their
// peers acknowledge); before, they waited for a ring forever.
TEST(ScaleTest, SilentPeersHoldingEveryRingStallNoOtherPeer) {
  constexpr int kPeers = 8;
  NetOptions o;
  o.nodes = 1 + kPeers;
  o.configure = [](int node, EndpointConfig* c) {
    if (node == 0) c->max_active_peers = 2;
  };
  Net net(o);
  uint64_t out[kPeers], in[kPeers] = {};
  bool got[kPeers] = {};
  for (int p = 0; p < kPeers; ++p) {
    out[p] = 1000 + p;
    ASSERT_EQ(net.ep(1 + p).PostRecv({.buf = &in[p], .len = sizeof(in[p])}), Result::kOk);
    // Buffered (FI_INJECT_COMPLETE): complete at once, the ACK not asked
    // for at once, so it waits for the receiver's next passes.
    ASSERT_EQ(net.ep(0).Send({.dest = net.Peer(0, 1 + p),
                              .buf = &out[p],
                              .len = sizeof(out[p]),
                              .flags = kSendBuffered}),
              Result::kOk);
  }
  int received = 0;
  for (int step = 0; step < 200'000 && received < kPeers; ++step) {
    net.ep(0).Progress();
    Completion c[4];
    net.ep(0).PollCompletions(c);
    for (int p = 0; p < kPeers; ++p) {
      if (got[p]) continue;  // silent from now on
      net.ep(1 + p).Progress();
      if (net.ep(1 + p).PollCompletions(c) > 0) {
        got[p] = true;
        ++received;
      }
    }
    net.clock().Advance(o.tick_ns);
  }
  ASSERT_EQ(received, kPeers);
  for (int p = 0; p < kPeers; ++p) EXPECT_EQ(in[p], out[p]) << "peer " << p;
  // The first two peers took the pool; the rest needed rings of their own.
  EXPECT_GE(net.ep(0).counters().tx_rings_allocated, 1u);
  // Once the peers progress again, everything is acknowledged: nothing is
  // left in flight and every allocated ring is back (asan: no leak).
  ASSERT_TRUE(net.RunUntil(
      [&] {
        for (int p = 0; p < kPeers; ++p) {
          if (net.ep(0).peer_stats(net.Peer(0, 1 + p))->inflight != 0) return false;
        }
        return true;
      },
      100'000));
}

}  // namespace
}  // namespace bypass::rdm
