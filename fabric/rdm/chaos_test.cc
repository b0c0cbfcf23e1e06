// The chaos soak: every node sends random messages (0 to 4 MiB, tagged and
// untagged, with remote CQ data, some injected; eager and rendezvous) to
// every other node, and writes and reads every other node's region (RMA,
// some with remote CQ data, some injected), under 5% drop, 2% duplication,
// 10% reordering and 0.1% corruption, with receives posted both before and
// after their messages arrive. Every message must arrive exactly once, in
// order, intact; every write must land intact and every read bring it back.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "driver/fault/prng.h"
#include "fabric/rdm/rdm.h"
#include "fabric/rdm/test_util.h"
#include "gtest/gtest.h"

namespace bypass::rdm {
namespace {

using testing::Net;
using testing::NetOptions;

// One message of the soak, as sent and as received.
struct Msg {
  int src = 0;
  int dst = 0;
  uint64_t index = 0;  // per (src, dst), in send order
  bool tagged = false;
  bool inject = false;
  std::vector<uint8_t> out;
  std::vector<uint8_t> in;
  int completions = 0;
};

struct Soak {
  uint64_t seed;
  int nodes;
  uint32_t mtu;
  int msgs_per_pair;
};

size_t RandomSize(driver::fault::Xoshiro256& rng) {
  const uint32_t r = rng.Below(100);
  if (r < 55) return rng.Below(4097);                     // one or a few packets
  if (r < 85) return 4096 + rng.Below(256 * 1024);        // tens to hundreds
  if (r < 95) return 256 * 1024 + rng.Below(768 * 1024);  // up to 1 MiB
  return (1u << 20) + rng.Below(3u << 20);                // up to 4 MiB
}

uint64_t PatternId(const Msg& m) { return uint64_t(m.src) << 48 | uint64_t(m.dst) << 40 | m.index; }

// One RMA write and the read of the same bytes behind it, src into dst's
// region at `at` (a place of its own).
struct RmaPair {
  int src = 0;
  int dst = 0;
  uint64_t id = 0;
  uint64_t at = 0;
  bool remote_data = false;
  bool inject = false;
  std::vector<uint8_t> out;
  std::vector<uint8_t> back;
  int write_done = 0;
  int read_done = 0;
};
constexpr int kRmaPerPair = 6;
constexpr uint64_t kRmaSlot = 256 * 1024;

class ChaosTest : public ::testing::TestWithParam<Soak> {};

TEST_P(ChaosTest, EveryMessageExactlyOnceInOrderIntact) {
  const Soak soak = GetParam();
  NetOptions o;
  o.nodes = soak.nodes;
  o.mtu = soak.mtu;
  o.tick_ns = 2'000;
  o.faults.drop = 0.05;
  o.faults.dup = 0.02;
  o.faults.reorder = 0.10;
  o.faults.corrupt = 0.001;
  o.faults.seed = soak.seed;
  o.config.max_msg_size = 4u << 20;
  // Exactly once under heavy random loss, with a step budget for a sender
  // limited by credit only: with congestion control a loss-based window
  // stays near its minimum, and this fault device's reordering releases a
  // packet only after later ones pass it, so a small flight waits for RTOs
  // (PROTOCOL.md, "Congestion control"; flood_test runs it under loss).
  o.config.congestion_control = false;
  Net net(o);
  driver::fault::Xoshiro256 rng(soak.seed);

  // The messages, in send order per pair.
  std::vector<Msg> msgs;
  for (int s = 0; s < soak.nodes; ++s) {
    for (int d = 0; d < soak.nodes; ++d) {
      if (s == d) continue;
      for (int k = 0; k < soak.msgs_per_pair; ++k) {
        Msg m;
        m.src = s;
        m.dst = d;
        m.index = static_cast<uint64_t>(k);
        m.tagged = rng.Below(2) == 0;
        const size_t size = RandomSize(rng);
        m.inject = size <= net.ep(0).config().inject_size && rng.Below(2) == 0;
        m.out.resize(size);
        testing::FillPattern(PatternId(m), absl::MakeSpan(m.out));
        m.in.assign(size, 0xee);
        msgs.push_back(std::move(m));
      }
    }
  }
  std::vector<std::vector<PeerId>> peer(soak.nodes, std::vector<PeerId>(soak.nodes));
  for (int s = 0; s < soak.nodes; ++s) {
    for (int d = 0; d < soak.nodes; ++d) peer[s][d] = net.Peer(s, d);
  }
  // Receives are posted in message order per pair, the pairs interleaved at
  // random; half before the run, the rest one at a time whenever every posted
  // one has completed (so the receiver lags and many messages arrive
  // unexpected, some refused for lack of room).
  std::vector<size_t> recv_order;
  {
    std::vector<size_t> next_of_pair;  // index into msgs of each pair's next message
    for (size_t i = 0; i < msgs.size(); i += static_cast<size_t>(soak.msgs_per_pair)) {
      next_of_pair.push_back(i);
    }
    while (recv_order.size() < msgs.size()) {
      const size_t pair = rng.Below(static_cast<uint32_t>(next_of_pair.size()));
      size_t& i = next_of_pair[pair];
      if (i == (pair + 1) * static_cast<size_t>(soak.msgs_per_pair)) continue;  // pair done
      recv_order.push_back(i++);
    }
  }
  // RMA: every node's region has a slot for each op aimed at it.
  std::vector<std::vector<uint8_t>> region(soak.nodes);
  std::vector<uint64_t> key(soak.nodes);
  std::vector<int> remote_done(soak.nodes, 0), remote_expected(soak.nodes, 0);
  for (int n = 0; n < soak.nodes; ++n) {
    region[n].assign(static_cast<size_t>(soak.nodes) * kRmaPerPair * kRmaSlot, 0);
    absl::StatusOr<uint64_t> k = net.ep(n).RegisterRegion(
        {.addr = region[n].data(),
         .len = region[n].size(),
         .access = kAccessRemoteRead | kAccessRemoteWrite,
         .context = &region[n]});
    ASSERT_TRUE(k.ok()) << k.status();
    key[n] = *k;
  }
  std::vector<RmaPair> rma;
  for (int s = 0; s < soak.nodes; ++s) {
    for (int d = 0; d < soak.nodes; ++d) {
      if (s == d) continue;
      for (int k = 0; k < kRmaPerPair; ++k) {
        RmaPair r;
        r.src = s;
        r.dst = d;
        r.id = 0xa000 + rma.size();
        r.at = (static_cast<uint64_t>(s) * kRmaPerPair + k) * kRmaSlot;
        r.inject = k == 0;
        r.remote_data = !r.inject && rng.Below(2) == 0;
        const size_t n = r.inject ? rng.Below(257) : rng.Below(kRmaSlot + 1);
        r.out.resize(n);
        testing::FillPattern(r.id, absl::MakeSpan(r.out));
        r.back.assign(n, 0xee);
        if (r.remote_data) ++remote_expected[d];
        rma.push_back(std::move(r));
      }
    }
  }
  // Posted first: each write, then the read of the same bytes (the stream
  // orders them; nothing else writes there).
  size_t rma_posted = 0;
  auto post_rma = [&] {
    for (; rma_posted < rma.size(); ++rma_posted) {
      RmaPair& r = rma[rma_posted];
      const PeerId to = peer[r.src][r.dst];
      if (net.ep(r.src).SendSlotsFree() < 2) return;
      ASSERT_EQ(net.ep(r.src).Write({.dest = to,
                                     .buf = r.out.data(),
                                     .len = r.out.size(),
                                     .addr = r.at,
                                     .key = key[r.dst],
                                     .context = &r,
                                     .data = r.id,
                                     .flags = (r.remote_data ? kRmaRemoteData : 0u) |
                                              (r.inject ? kRmaInject : 0u)}),
                Result::kOk);
      ASSERT_EQ(net.ep(r.src).Read({.dest = to,
                                    .buf = r.back.data(),
                                    .len = r.back.size(),
                                    .addr = r.at,
                                    .key = key[r.dst],
                                    .context = &r}),
                Result::kOk);
    }
  };
  post_rma();
  size_t rma_done = 0;
  const size_t rma_expected = rma.size() + static_cast<size_t>(std::count_if(
                                               rma.begin(), rma.end(),
                                               [](const RmaPair& r) { return !r.inject; }));

  size_t posted = 0, sent = 0;
  auto post_one = [&]() -> bool {
    Msg& m = msgs[recv_order[posted]];
    RecvRequest r{.source = peer[m.dst][m.src],
                  .buf = m.in.data(),
                  .len = m.in.size(),
                  .context = &m,
                  .tagged = m.tagged,
                  .tag = m.tagged ? (m.index << 8 | static_cast<uint64_t>(m.src)) : 0};
    if (net.ep(m.dst).PostRecv(r) != Result::kOk) return false;
    ++posted;
    return true;
  };
  while (posted < msgs.size() / 2 && post_one()) {
  }

  size_t recv_done = 0, send_done = 0;
  const size_t sends_expected = static_cast<size_t>(
      std::count_if(msgs.begin(), msgs.end(), [](const Msg& m) { return !m.inject; }));
  std::vector<ErrorCompletion> errors;
  uint64_t steps = 0;
  for (; steps < 3'000'000; ++steps) {
    while (sent < msgs.size()) {
      Msg& m = msgs[sent];
      SendRequest r{
          .dest = peer[m.src][m.dst],
          .buf = m.out.data(),
          .len = m.out.size(),
          .context = &m,
          .tag = m.index << 8 | static_cast<uint64_t>(m.src),
          .data = m.index,
          .flags = kSendRemoteData | (m.tagged ? kSendTagged : 0u) | (m.inject ? kSendInject : 0u)};
      if (net.ep(m.src).Send(r) != Result::kOk) break;
      if (m.inject) m.out.assign(m.out.size(), 0xdd);  // inject copied it
      ++sent;
    }
    if (posted < msgs.size() && posted == recv_done) post_one();
    for (int n = 0; n < soak.nodes; ++n) {
      Completion c[64];
      while (size_t got = net.ep(n).PollCompletions(c)) {
        for (size_t i = 0; i < got; ++i) {
          if (c[i].flags & kCompRemoteWrite) {
            EXPECT_EQ(c[i].context, &region[n]);
            ++remote_done[n];
            continue;
          }
          if (c[i].flags & kCompRead) {
            ++rma_done;
            RmaPair& r = *static_cast<RmaPair*>(c[i].context);
            ++r.read_done;
            EXPECT_EQ(c[i].len, r.back.size());
            continue;
          }
          if (c[i].flags & kCompWrite) {
            ++rma_done;
            ++static_cast<RmaPair*>(c[i].context)->write_done;
            continue;
          }
          Msg& m = *static_cast<Msg*>(c[i].context);
          if (c[i].flags & kCompSend) {
            ++send_done;
            continue;
          }
          ++recv_done;
          ++m.completions;
          EXPECT_EQ(c[i].len, m.in.size());
          EXPECT_EQ(c[i].data, m.index);
          EXPECT_EQ(c[i].source, peer[m.dst][m.src]);
        }
      }
      ErrorCompletion e[8];
      while (size_t got = net.ep(n).PollErrors(e)) errors.insert(errors.end(), e, e + got);
    }
    post_rma();
    bool remote_all = true;
    for (int n = 0; n < soak.nodes; ++n) remote_all = remote_all && remote_done[n] == remote_expected[n];
    if (!errors.empty() || (recv_done == msgs.size() && send_done == sends_expected &&
                            rma_posted == rma.size() && rma_done == rma_expected && remote_all)) {
      break;
    }
    net.Step();
  }
  for (const ErrorCompletion& e : errors) ADD_FAILURE() << "error completion: " << e.message;
  EXPECT_EQ(recv_done, msgs.size());
  EXPECT_EQ(send_done, sends_expected);
  EXPECT_EQ(rma_done, rma_expected);
  for (int n = 0; n < soak.nodes; ++n) EXPECT_EQ(remote_done[n], remote_expected[n]) << n;
  for (const RmaPair& r : rma) {
    EXPECT_EQ(r.write_done, r.inject ? 0 : 1) << r.id;
    EXPECT_EQ(r.read_done, 1) << r.id;
    EXPECT_EQ(std::memcmp(region[r.dst].data() + r.at, r.out.data(), r.out.size()), 0)
        << "write " << r.id << " (" << r.out.size() << " bytes)";
    EXPECT_EQ(testing::CheckPattern(r.id, r.back), -1) << "read " << r.id;
  }
  uint64_t bytes = 0;
  for (const Msg& m : msgs) {
    bytes += m.in.size();
    EXPECT_EQ(m.completions, 1) << m.src << "->" << m.dst << " #" << m.index;
    // Out of order would put another message's bytes here.
    EXPECT_EQ(testing::CheckPattern(PatternId(m), m.in), -1)
        << m.src << "->" << m.dst << " #" << m.index << " (" << m.in.size() << " bytes)";
  }
  // The faults happened and the engine saw them.
  Counters sum;
  uint64_t corrupted = 0, dropped = 0, dups = 0;
  for (int n = 0; n < soak.nodes; ++n) {
    const Counters& c = net.ep(n).counters();
    sum.retransmits_fast += c.retransmits_fast;
    sum.retransmits_timeout += c.retransmits_timeout;
    sum.duplicates_dropped += c.duplicates_dropped;
    sum.checksum_dropped += c.checksum_dropped + c.malformed_dropped;
    sum.unexpected_msgs += c.unexpected_msgs;
    sum.tx_data_packets += c.tx_data_packets;
    sum.rendezvous_sent += c.rendezvous_sent;
    sum.rma_served += c.rma_served;
    corrupted += net.device(n).counters().corrupted;
    dropped += net.device(n).counters().dropped;
    dups += net.device(n).counters().duplicated;
  }
  EXPECT_GT(dropped, 0u);
  EXPECT_GT(sum.retransmits_fast, 0u);
  EXPECT_GT(sum.duplicates_dropped, 0u);
  EXPECT_EQ(sum.checksum_dropped, corrupted) << "every corrupted packet detected";
  EXPECT_GT(sum.unexpected_msgs, 0u);
  EXPECT_GT(sum.rendezvous_sent, 0u) << "both protocols ran";
  EXPECT_EQ(sum.rma_served, 2 * rma.size()) << "every write and read applied once";
  std::printf("seed %llu: %llu messages by rendezvous, %zu RMA writes and reads\n",
              static_cast<unsigned long long>(soak.seed),
              static_cast<unsigned long long>(sum.rendezvous_sent), 2 * rma.size());
  std::printf(
      "seed %llu, %d nodes, MTU %u: %zu messages, %.1f MiB in %llu steps (%.1f ms virtual); "
      "%llu data packets, fault drops %llu dups %llu corrupt %llu; retransmits fast %llu "
      "timeout %llu; duplicates dropped %llu; unexpected %llu\n",
      static_cast<unsigned long long>(soak.seed), soak.nodes, soak.mtu, msgs.size(),
      static_cast<double>(bytes) / (1 << 20), static_cast<unsigned long long>(steps),
      static_cast<double>(steps * o.tick_ns) / 1e6,
      static_cast<unsigned long long>(sum.tx_data_packets),
      static_cast<unsigned long long>(dropped), static_cast<unsigned long long>(dups),
      static_cast<unsigned long long>(corrupted),
      static_cast<unsigned long long>(sum.retransmits_fast),
      static_cast<unsigned long long>(sum.retransmits_timeout),
      static_cast<unsigned long long>(sum.duplicates_dropped),
      static_cast<unsigned long long>(sum.unexpected_msgs));
}

// The receiver restarts in the middle of a stream under the same faults.
// Every send completes exactly once, fine or ECONNRESET; every message whose
// send completed fine was delivered exactly once and intact; nothing is ever
// delivered twice or out of order; the new incarnation takes the rest.
TEST(ChaosRestartTest, ReceiverRestartsUnderFaults) {
  for (uint64_t seed : {11, 12}) {
    NetOptions o;
    o.config.rendezvous_threshold = 32 * 1024;  // most of these go by rendezvous
    o.tick_ns = 2'000;
    o.faults.drop = 0.05;
    o.faults.dup = 0.02;
    o.faults.reorder = 0.10;
    o.faults.corrupt = 0.001;
    o.faults.seed = seed;
    // Exactly once under heavy random loss, with a step budget for a sender
    // limited by credit only: with congestion control a loss-based window
    // stays near its minimum, and this fault device's reordering releases a
    // packet only after later ones pass it, so a small flight waits for RTOs
    // (PROTOCOL.md, "Congestion control"; flood_test runs it under loss).
    o.config.congestion_control = false;
    Net net(o);
    driver::fault::Xoshiro256 rng(seed);
    constexpr int kMsgs = 80;
    constexpr size_t kMax = 128 * 1024;
    std::vector<std::vector<uint8_t>> out(kMsgs);
    for (int k = 0; k < kMsgs; ++k) {
      out[k].resize(8 + rng.Below(kMax - 8));
      testing::FillPattern(static_cast<uint64_t>(k), absl::MakeSpan(out[k]));
      std::memcpy(out[k].data(), &k, sizeof(k));  // which message this is
    }
    const PeerId to_b = net.Peer(0, 1);
    std::vector<int> send_ok(kMsgs, 0), send_err(kMsgs, 0), delivered(kMsgs, 0);
    constexpr int kSlots = 8;
    std::vector<std::vector<uint8_t>> slots(kSlots, std::vector<uint8_t>(kMax));
    auto post_all = [&] {
      for (auto& b : slots)
        ASSERT_EQ(net.ep(1).PostRecv({.buf = b.data(), .len = kMax, .context = &b}), Result::kOk);
    };
    post_all();
    int sent = 0, last_delivered = -1, generation_deliveries = 0;
    bool restarted = false;
    for (uint64_t step = 0; step < 2'000'000; ++step) {
      while (sent < kMsgs && net.ep(0).Send({.dest = to_b,
                                             .buf = out[sent].data(),
                                             .len = out[sent].size(),
                                             .context = &out[sent]}) == Result::kOk) {
        ++sent;
      }
      Completion c[16];
      while (size_t n = net.ep(0).PollCompletions(c)) {
        for (size_t i = 0; i < n; ++i) {
          ++send_ok[static_cast<std::vector<uint8_t>*>(c[i].context) - out.data()];
        }
      }
      ErrorCompletion e[16];
      while (size_t n = net.ep(0).PollErrors(e)) {
        for (size_t i = 0; i < n; ++i) {
          EXPECT_EQ(e[i].err, ECONNRESET) << e[i].message;
          ++send_err[static_cast<std::vector<uint8_t>*>(e[i].op.context) - out.data()];
        }
      }
      while (size_t n = net.ep(1).PollCompletions(c)) {
        for (size_t i = 0; i < n; ++i) {
          auto* buf = static_cast<std::vector<uint8_t>*>(c[i].context);
          int k;
          std::memcpy(&k, buf->data(), sizeof(k));
          ASSERT_TRUE(k >= 0 && k < kMsgs);
          ++delivered[k];
          EXPECT_GT(k, last_delivered) << "out of order";
          last_delivered = k;
          ++generation_deliveries;
          ASSERT_EQ(c[i].len, out[k].size());
          EXPECT_EQ(std::memcmp(buf->data(), out[k].data(), c[i].len), 0) << "message " << k;
          ASSERT_EQ(net.ep(1).PostRecv({.buf = buf->data(), .len = kMax, .context = buf}),
                    Result::kOk);
        }
      }
      while (net.ep(1).PollErrors(e) > 0) ADD_FAILURE() << "receiver error: " << e[0].message;
      if (!restarted && generation_deliveries >= kMsgs / 3) {
        net.Kill(1);
        net.Revive(1);
        post_all();
        restarted = true;
        last_delivered = -1;  // order restarts with the new incarnation's stream
      }
      int finished = 0;
      for (int k = 0; k < kMsgs; ++k) finished += send_ok[k] + send_err[k];
      if (restarted && finished == kMsgs) break;
      net.Step();
    }
    ASSERT_TRUE(restarted);
    int errors = 0, after = 0;
    for (int k = 0; k < kMsgs; ++k) {
      EXPECT_EQ(send_ok[k] + send_err[k], 1) << "seed " << seed << " message " << k;
      EXPECT_LE(delivered[k], 1) << "seed " << seed << " message " << k << " delivered twice";
      if (send_ok[k] == 1) {
        EXPECT_EQ(delivered[k], 1)
            << "seed " << seed << " message " << k << " acked, not delivered";
      }
      errors += send_err[k];
      if (k > kMsgs / 2) after += delivered[k];
    }
    EXPECT_GT(errors, 0) << "some operations were in flight to the old incarnation";
    EXPECT_GT(after, 0) << "the new incarnation took later messages";
    EXPECT_EQ(net.ep(0).counters().peer_restarts, 1u);
    std::printf("restart soak seed %llu: %d of %d sends failed with ECONNRESET\n",
                static_cast<unsigned long long>(seed), errors, kMsgs);
  }
}

void GiveUpRace(uint32_t window, bool then_write);

// The give-up race, staged packet by packet: the receiver takes an older
// plain copy of a message's first segment after its sender gave the message
// up (ENOSPC). The rest of it then comes only as ABANDONED copies, which
// must end that receive (ECANCELED) so that the next message arrives; before,
// they were dropped as protocol errors, the receive stayed open forever, and
// the next message broke its framing and was lost though its send succeeded.
// With a window of one packet, nothing more of it was ever sent: the next
// message's first segment breaks its framing, which ends that receive
// (EPROTO), and is then received as the new message it is (before, it was
// dropped: lost, though its send succeeded). The same when the next op is
// an RMA write (before, dropped too: the write never completed).
TEST(GiveUpRaceTest, ACopyTakenAfterTheGiveUpEndsTheReceiveAndTheNextMessageArrives) {
  for (const uint32_t window : {128u, 1u}) {
    for (const bool then_write : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "window " << window << " then_write " << then_write);
      GiveUpRace(window, then_write);
    }
  }
}

void GiveUpRace(uint32_t window, bool then_write) {
  constexpr uint64_t kGiveUp = 2'000'000;
  NetOptions o;
  o.config.peer_timeout_ns = 1'000'000'000;
  o.config.rnr_give_up_ns = kGiveUp;
  o.configure = [window](int node, EndpointConfig* c) {
    if (node == 1) {
      c->max_unexpected_msgs = 1;  // X fills it; A is refused
      c->rx_burst = 1;             // one packet per pass: the stage below needs it
      c->window_packets = window;
    }
  };
  Net net(o);
  Endpoint& s = net.ep(0);
  Endpoint& r = net.ep(1);
  const PeerId to_r = net.Peer(0, 1);
  constexpr uint64_t kTagA = 5;
  std::vector<uint8_t> x(100), a(4000), b(300), x_in(100), a_in(4000, 0xee), b_in(300, 0xee);
  testing::FillPattern(1, absl::MakeSpan(x));
  testing::FillPattern(2, absl::MakeSpan(a));
  testing::FillPattern(3, absl::MakeSpan(b));
  // R sees A's later segments only as ABANDONED copies.
  net.tap(1).set_filter([](const wire::View* v) {
    return v == nullptr || v->common.type != wire::PacketType::kData || v->msg.tag != kTagA ||
           v->msg.offset == 0 || (v->msg.msg_flags & wire::kMsgAbandoned) != 0;
  });
  bool s_deaf = false;  // S hears nothing from R
  net.tap(0).set_filter([&](const wire::View*) { return !s_deaf; });
  ASSERT_EQ(s.Send({.dest = to_r, .buf = x.data(), .len = x.size(), .context = &x}), Result::kOk);
  ASSERT_TRUE(net.RunUntil([&] { return r.counters().unexpected_depth == 1; }, 100'000));
  ASSERT_EQ(s.Send({.dest = to_r, .buf = a.data(), .len = a.size(), .context = &a, .tag = kTagA,
                    .flags = kSendTagged}),
            Result::kOk);
  ASSERT_TRUE(net.RunUntil([&] { return s.counters().rnr_received > 0; }, 100'000));
  // S keeps sending plain copies of A's first segment past its give-up
  // time, hearing no refusal.
  s_deaf = true;
  const uint64_t t0 = net.clock().NowNs();
  ASSERT_TRUE(net.RunUntil([&] { return net.clock().NowNs() >= t0 + kGiveUp + 1'000'000; },
                           1'000'000));
  for (int i = 0; i < 2000; ++i) {  // both rings drained, clock still
    r.Progress();
    s.Progress();
  }
  s_deaf = false;
  ASSERT_EQ(s.counters().rnr_give_ups, 0u);
  // Two more plain copies of it on the way to R (S's timer).
  const auto retransmit = [&] {
    const uint64_t before = s.counters().retransmits_timeout;
    for (int i = 0; i < 1'000'000 && s.counters().retransmits_timeout == before; ++i) {
      net.clock().Advance(1'000);
      s.Progress();
    }
    return s.counters().retransmits_timeout > before;
  };
  ASSERT_TRUE(retransmit());
  ASSERT_TRUE(retransmit());
  // R refuses the first copy: an RNR on its way to S.
  const uint64_t rnr = r.counters().rnr_sent;
  for (int i = 0; i < 100 && r.counters().rnr_sent == rnr; ++i) r.Progress();
  ASSERT_EQ(r.counters().rnr_sent, rnr + 1);
  // Then makes room, and S, reading that refusal, gives A up.
  ASSERT_EQ(r.PostRecv({.buf = a_in.data(),
                        .len = a_in.size(),
                        .context = &a_in,
                        .tagged = true,
                        .tag = kTagA}),
            Result::kOk);
  s.Progress();
  ASSERT_EQ(s.counters().rnr_give_ups, 1u);
  // R takes the second plain copy; the rest of A comes abandoned. Then B.
  ASSERT_EQ(r.PostRecv({.buf = x_in.data(), .len = x_in.size(), .context = &x_in}), Result::kOk);
  if (then_write) {
    absl::StatusOr<uint64_t> key = r.RegisterRegion(
        {.addr = b_in.data(), .len = b_in.size(), .access = kAccessRemoteWrite});
    ASSERT_TRUE(key.ok()) << key.status();
    ASSERT_EQ(s.Write({.dest = to_r, .buf = b.data(), .len = b.size(), .key = *key, .context = &b}),
              Result::kOk);
  } else {
    ASSERT_EQ(r.PostRecv({.buf = b_in.data(), .len = b_in.size(), .context = &b_in}),
              Result::kOk);
    ASSERT_EQ(s.Send({.dest = to_r, .buf = b.data(), .len = b.size(), .context = &b}),
              Result::kOk);
  }
  const size_t receives = then_write ? 2 : 3;
  std::vector<Completion> sent, got;
  std::vector<ErrorCompletion> send_err, recv_err;
  ASSERT_TRUE(net.RunUntil(
      [&] {
        testing::Drain(s, &sent, &send_err);
        testing::Drain(r, &got, &recv_err);
        return sent.size() + send_err.size() == 3 && got.size() + recv_err.size() == receives;
      },
      200'000))
      << "sent " << sent.size() << "+" << send_err.size() << " received " << got.size() << "+"
      << recv_err.size() << " protocol errors " << r.counters().protocol_errors;
  ASSERT_EQ(send_err.size(), 1u);
  EXPECT_EQ(send_err[0].err, ENOSPC) << send_err[0].message;
  EXPECT_EQ(send_err[0].op.context, &a);
  ASSERT_EQ(recv_err.size(), 1u);
  EXPECT_EQ(recv_err[0].err, window > 1 ? ECANCELED : EPROTO) << recv_err[0].message;
  EXPECT_EQ(recv_err[0].op.context, &a_in);
  EXPECT_NE(std::strstr(recv_err[0].message, window > 1 ? "gave the message up" : "framing"),
            nullptr)
      << recv_err[0].message;
  ASSERT_EQ(got.size(), receives - 1);
  EXPECT_EQ(got[0].context, &x_in);
  if (!then_write) {
    EXPECT_EQ(got[1].context, &b_in);
  }
  EXPECT_EQ(sent.back().context, &b);
  EXPECT_EQ(testing::CheckPattern(1, x_in), -1);
  EXPECT_EQ(testing::CheckPattern(3, b_in), -1);
  EXPECT_EQ(r.counters().protocol_errors, window > 1 ? 0u : 1u);
}

INSTANTIATE_TEST_SUITE_P(Seeds, ChaosTest,
                         ::testing::Values(Soak{1, 2, 1500, 40}, Soak{2, 2, 1500, 40},
                                           Soak{3, 3, 1500, 15}, Soak{4, 2, 9000, 40}));

}  // namespace
}  // namespace bypass::rdm
