// Sessions: the handshake, auth keys, incarnations, a peer restarting in the
// middle of a transfer (either side), and a peer that vanishes; and the
// attacks of issue 17 (SECURITY.md) by a third node on the segment that
// sends forged frames: HELLOs and RESETs with guessed and observed fields,
// replays, a flood of HELLOs, keys that differ.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "fabric/rdm/rdm.h"
#include "fabric/rdm/test_util.h"
#include "fabric/rdm/wire.h"
#include "gtest/gtest.h"

namespace bypass::rdm {
namespace {

using testing::Drain;
using testing::Net;
using testing::NetOptions;

NetOptions FastTimeouts() {
  NetOptions o;
  o.tick_ns = 10'000;
  o.config.rto_initial_ns = 200'000;
  o.config.rto_min_ns = 50'000;
  o.config.rto_max_ns = 2'000'000;
  o.config.peer_timeout_ns = 20'000'000;
  o.config.max_msg_size = 4u << 20;
  return o;
}

TEST(SessionTest, HandshakeSurvivesLostHellos) {
  Net net(FastTimeouts());
  int hellos_dropped = 0;
  net.tap(1).set_filter([&](const wire::View* v) {
    if (v != nullptr && v->common.type == wire::PacketType::kHello && hellos_dropped < 3) {
      ++hellos_dropped;
      return false;
    }
    return true;
  });
  uint32_t in = 0;
  const uint32_t out = 42;
  ASSERT_EQ(net.ep(1).PostRecv({.buf = &in, .len = 4}), Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = net.Peer(0, 1), .buf = &out, .len = 4}), Result::kOk);
  ASSERT_TRUE(net.RunUntil([&] { return in == 42; }, 10'000));
  EXPECT_EQ(hellos_dropped, 3);
  EXPECT_EQ(net.ep(0).counters().handshakes, 1u);
  EXPECT_EQ(net.ep(1).counters().handshakes, 1u);
}

TEST(SessionTest, WrongAuthKeyIsDroppedCountedAndTimesOut) {
  NetOptions o = FastTimeouts();
  o.configure = [](int node, EndpointConfig* c) { c->auth_key = node == 0 ? 0x1111 : 0x2222; };
  Net net(o);
  uint32_t in = 0;
  const uint32_t out = 42;
  int ctx;
  ASSERT_EQ(net.ep(1).PostRecv({.buf = &in, .len = 4}), Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = net.Peer(0, 1), .buf = &out, .len = 4, .context = &ctx}),
            Result::kOk);
  std::vector<ErrorCompletion> err;
  ASSERT_TRUE(net.RunUntil(
      [&] {
        Drain(net.ep(0), nullptr, &err);
        return !err.empty();
      },
      10'000));
  EXPECT_EQ(in, 0u);
  EXPECT_GT(net.ep(1).counters().auth_dropped, 0u);
  EXPECT_EQ(err[0].err, ETIMEDOUT);
  EXPECT_EQ(err[0].op.context, &ctx);
  EXPECT_NE(std::string(err[0].message).find("did not answer"), std::string::npos)
      << err[0].message;
}

// The receiver restarts while a 2 MiB message is arriving: the sender's
// operation fails with ECONNRESET as soon as the new incarnation answers,
// and the next send to the same PeerId reaches the new one.
TEST(SessionTest, ReceiverRestartsMidTransfer) {
  Net net(FastTimeouts());
  const PeerId to_b = net.Peer(0, 1);
  const uint32_t old_inc = net.ep(1).address().incarnation;
  std::vector<uint8_t> big(2u << 20), in(2u << 20);
  testing::FillPattern(1, absl::MakeSpan(big));
  ASSERT_EQ(net.ep(1).PostRecv({.buf = in.data(), .len = in.size()}), Result::kOk);
  int ctx;
  ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = big.data(), .len = big.size(), .context = &ctx}),
            Result::kOk);
  ASSERT_TRUE(net.RunUntil([&] { return net.ep(1).counters().rx_data_packets > 200; }, 10'000));
  net.Kill(1);
  net.Revive(1);
  EXPECT_NE(net.ep(1).address().incarnation, old_inc);
  std::vector<ErrorCompletion> err;
  ASSERT_TRUE(net.RunUntil(
      [&] {
        Drain(net.ep(0), nullptr, &err);
        return !err.empty();
      },
      1'000));
  EXPECT_EQ(err[0].err, ECONNRESET);
  EXPECT_EQ(err[0].op.context, &ctx);
  EXPECT_NE(std::string(err[0].message).find("restarted"), std::string::npos) << err[0].message;
  EXPECT_EQ(net.ep(0).counters().peer_restarts, 1u);
  EXPECT_GT(net.ep(1).counters().stale_dropped, 0u);
  EXPECT_GT(net.ep(1).counters().resets_sent, 0u);
  EXPECT_LT(net.ep(1).counters().resets_sent, 10u) << "rate limited";
  // The new incarnation is usable at once, through the same PeerId.
  uint32_t v = 0;
  const uint32_t seven = 7;
  ASSERT_EQ(net.ep(1).PostRecv({.buf = &v, .len = 4}), Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = &seven, .len = 4}), Result::kOk);
  ASSERT_TRUE(net.RunUntil([&] { return v == 7; }, 1'000));
  EXPECT_EQ(net.ep(0).peer_stats(to_b)->incarnation, net.ep(1).address().incarnation);
}

// The sender restarts mid-transfer: the receiver's posted receive fails with
// ECONNRESET when the new incarnation says hello; the old incarnation's
// packets still in flight are dropped as stale; new messages flow.
TEST(SessionTest, SenderRestartsMidTransfer) {
  Net net(FastTimeouts());
  std::vector<uint8_t> big(2u << 20), in(2u << 20);
  testing::FillPattern(1, absl::MakeSpan(big));
  int big_ctx, small_ctx;
  uint32_t small = 0;
  ASSERT_EQ(net.ep(1).PostRecv({.buf = in.data(), .len = in.size(), .context = &big_ctx}),
            Result::kOk);
  ASSERT_EQ(net.ep(1).PostRecv({.buf = &small, .len = 4, .context = &small_ctx}), Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = net.Peer(0, 1), .buf = big.data(), .len = big.size()}),
            Result::kOk);
  ASSERT_TRUE(net.RunUntil([&] { return net.ep(1).counters().rx_data_packets > 200; }, 10'000));
  net.Kill(0);
  net.Revive(0);
  const uint32_t nine = 9;
  ASSERT_EQ(net.ep(0).Send({.dest = net.Peer(0, 1), .buf = &nine, .len = 4}), Result::kOk);
  std::vector<Completion> ok;
  std::vector<ErrorCompletion> err;
  ASSERT_TRUE(net.RunUntil(
      [&] {
        Drain(net.ep(1), &ok, &err);
        return !ok.empty() && !err.empty();
      },
      2'000));
  EXPECT_EQ(err[0].err, ECONNRESET);
  EXPECT_EQ(err[0].op.context, &big_ctx);
  EXPECT_GT(err[0].op.len, 0u) << "what had arrived";
  EXPECT_EQ(ok[0].context, &small_ctx);
  EXPECT_EQ(small, 9u);
  EXPECT_EQ(net.ep(1).counters().peer_restarts, 1u);
}

// A peer that vanishes: operations fail with ETIMEDOUT after the peer
// timeout (with the RTO backing off meanwhile), never hang; a receive that
// was part-way fails too. When the peer comes back, traffic resumes.
TEST(SessionTest, VanishedPeerTimesOutThenComesBack) {
  Net net(FastTimeouts());
  const PeerId to_b = net.Peer(0, 1);
  const PeerId to_a = net.Peer(1, 0);
  std::vector<uint8_t> big(1u << 20), in(1u << 20);
  int send_ctx, recv_ctx;
  ASSERT_EQ(net.ep(0).PostRecv({.buf = in.data(), .len = in.size(), .context = &recv_ctx}),
            Result::kOk);
  ASSERT_EQ(net.ep(1).Send({.dest = to_a, .buf = big.data(), .len = big.size()}), Result::kOk);
  ASSERT_TRUE(net.RunUntil([&] { return net.ep(0).counters().rx_data_packets > 100; }, 10'000));
  ASSERT_EQ(
      net.ep(0).Send({.dest = to_b, .buf = big.data(), .len = big.size(), .context = &send_ctx}),
      Result::kOk);
  net.Kill(1);
  const uint64_t killed_at = net.clock().NowNs();
  std::vector<ErrorCompletion> err;
  std::vector<uint64_t> rtos;
  ASSERT_TRUE(net.RunUntil(
      [&] {
        Drain(net.ep(0), nullptr, &err);
        const uint64_t rto = net.ep(0).peer_stats(to_b)->rto_ns;
        if (rtos.empty() || rtos.back() != rto) rtos.push_back(rto);
        return err.size() == 2;
      },
      5'000));
  const uint64_t took = net.clock().NowNs() - killed_at;
  EXPECT_GE(took, net.ep(0).config().peer_timeout_ns);
  EXPECT_LE(took, net.ep(0).config().peer_timeout_ns + 1'000'000);
  for (const ErrorCompletion& e : err) {
    EXPECT_EQ(e.err, ETIMEDOUT) << e.message;
    EXPECT_TRUE(e.op.context == &send_ctx || e.op.context == &recv_ctx);
  }
  EXPECT_EQ(net.ep(0).counters().peer_timeouts, 1u);
  EXPECT_GT(net.ep(0).counters().rto_expirations, 3u);
  ASSERT_GE(rtos.size(), 3u);
  EXPECT_EQ(*std::max_element(rtos.begin(), rtos.end()), net.ep(0).config().rto_max_ns)
      << "backed off to the ceiling";
  EXPECT_EQ(net.ep(0).peer_stats(to_b)->queued_ops, 0u);

  net.Revive(1);
  uint32_t v = 0;
  const uint32_t five = 5;
  ASSERT_EQ(net.ep(1).PostRecv({.buf = &v, .len = 4}), Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = &five, .len = 4}), Result::kOk);
  ASSERT_TRUE(net.RunUntil([&] { return v == 5; }, 1'000));
}

TEST(SessionTest, HelloToNobodyTimesOut) {
  Net net(FastTimeouts());
  Address nowhere = net.ep(1).address();
  nowhere.udp_port = 9999;  // the device is there, no endpoint is
  const PeerId p = *net.ep(0).InsertPeer(nowhere);
  ASSERT_EQ(net.ep(0).Send({.dest = p, .buf = "x", .len = 1}), Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = p, .buf = "y", .len = 1, .flags = kSendInject}), Result::kOk);
  std::vector<ErrorCompletion> err;
  ASSERT_TRUE(net.RunUntil(
      [&] {
        Drain(net.ep(0), nullptr, &err);
        return err.size() == 2;
      },
      5'000));
  EXPECT_EQ(err[0].err, ETIMEDOUT);
  EXPECT_EQ(err[1].err, ETIMEDOUT) << "an inject's failure is reported too";
  // The port's only endpoint sees (and drops) what no endpoint is bound to.
  EXPECT_GT(net.ep(1).counters().not_for_us_dropped, 2u) << "HELLO was retried";
}

// A peer inserted with an incarnation that has since restarted: the first
// HELLO names the old one, the RESET names the new one, and the queued
// (never sent) operation goes to the new incarnation without an error.
TEST(SessionTest, StaleInsertedIncarnationIsCorrectedWithoutLoss) {
  Net net(FastTimeouts());
  const Address old = net.ep(1).address();
  net.Kill(1);
  net.Revive(1);
  const PeerId p = *net.ep(0).InsertPeer(old);
  uint32_t v = 0;
  const uint32_t three = 3;
  ASSERT_EQ(net.ep(1).PostRecv({.buf = &v, .len = 4}), Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = p, .buf = &three, .len = 4}), Result::kOk);
  std::vector<ErrorCompletion> err;
  ASSERT_TRUE(net.RunUntil(
      [&] {
        Drain(net.ep(0), nullptr, &err);
        return v == 3;
      },
      1'000));
  EXPECT_TRUE(err.empty());
  EXPECT_EQ(net.ep(0).counters().peer_restarts, 1u);
  EXPECT_EQ(net.ep(1).counters().stale_dropped, 1u);
}

// ---- Attacks (SECURITY.md). Node 2 is the attacker: it sends raw frames
// from its queue with any source it likes, and (when a test says so) reads
// what is sent to its MAC.

wire::MacKey Key(uint8_t b) {
  wire::MacKey k{};
  k.fill(b);
  return k;
}

// Sends one frame, built by `build` into a buffer of node `from`'s queue.
void Inject(Net& net, int from, const std::function<size_t(absl::Span<uint8_t>)>& build) {
  driver::Packet* p = nullptr;
  ASSERT_TRUE(net.tap(from).AllocBulk({&p, 1}));
  p->len = static_cast<uint32_t>(build({p->data, p->capacity}));
  ASSERT_GT(p->len, 0u);
  ASSERT_EQ(net.tap(from).TxBurst({&p, 1}), 1u);
}

// A frame to `to` that claims to come from `claimed` (its IPv4 and port),
// from MAC src_mac.
driver::UdpFlow Spoofed(const Address& claimed, driver::MacAddress src_mac, const Address& to) {
  return driver::UdpFlow{src_mac, to.mac, claimed.ip, to.ip, claimed.udp_port, to.udp_port, 0};
}

// A HELLO from `flow`'s source: incarnation inc, initial PSN isn, nonce.
size_t ForgedHello(const driver::UdpFlow& flow, uint32_t inc, uint32_t dst_inc, uint32_t isn,
                   uint64_t nonce, const wire::Cookie& cookie, const wire::MacKey* key,
                   absl::Span<uint8_t> frame) {
  wire::Common c;
  c.type = wire::PacketType::kHello;
  c.src_incarnation = inc;
  c.dst_incarnation = dst_inc;
  c.psn = Psn(isn);
  c.credit = 64;
  wire::HelloFields h;
  h.max_datagram = 1472;
  h.nonce = nonce;
  h.cookie = cookie;
  return wire::BuildHello(flow, c, h, key, frame);
}

// A RESET from `flow`'s source.
size_t ForgedReset(const driver::UdpFlow& flow, uint32_t inc, uint32_t dst_inc,
                   wire::ResetReason reason, uint32_t about, uint32_t psn,
                   absl::Span<uint8_t> frame) {
  wire::Common c;
  c.type = wire::PacketType::kReset;
  c.src_incarnation = inc;
  c.dst_incarnation = dst_inc;
  c.psn = Psn(psn);
  wire::ResetFields r;
  r.reason = reason;
  r.incarnation = about;
  return wire::BuildReset(flow, c, r, nullptr, frame);
}

// A message of `len` bytes from ep(0) to ep(1), both posted; Run steps it
// with `each_step` called before every step, and checks it arrived intact
// with no error anywhere.
struct Transfer1 {
  Transfer1(Net& n, size_t len) : net(n), out(len), in(len, 0xee) {
    testing::FillPattern(5, absl::MakeSpan(out));
    to_b = net.Peer(0, 1);
    EXPECT_EQ(net.ep(1).PostRecv({.buf = in.data(), .len = in.size()}), Result::kOk);
    EXPECT_EQ(net.ep(0).Send({.dest = to_b, .buf = out.data(), .len = out.size()}), Result::kOk);
  }
  void Run(const std::function<void(uint64_t step)>& each_step, uint64_t max_steps = 200'000) {
    std::vector<Completion> sent, got;
    uint64_t step = 0;
    ASSERT_TRUE(net.RunUntil(
        [&] {
          each_step(step++);
          Drain(net.ep(0), &sent, &err);
          Drain(net.ep(1), &got, &err);
          return !err.empty() || (sent.size() == 1 && got.size() == 1);
        },
        max_steps));
    for (const ErrorCompletion& e : err) ADD_FAILURE() << "error completion: " << e.message;
    EXPECT_EQ(testing::CheckPattern(5, in), -1) << "damaged";
  }
  Net& net;
  std::vector<uint8_t> out, in;
  std::vector<ErrorCompletion> err;
  PeerId to_b;
};

NetOptions ThreeNodes() {
  NetOptions o = FastTimeouts();
  o.nodes = 3;
  o.config.window_packets = 16;  // a 2 MiB message takes many round trips
  return o;
}

// Off-path forgeries with guessed fields (another incarnation: a "restart";
// the same incarnation with another ISN: a "reset") from the attacker's MAC
// claiming b's address, and RESETs of both kinds: a's session with b goes
// on, a's packets keep going to b's MAC, nothing fails, nothing is lost.
TEST(AttackTest, ForgedHellosAndResetsWithGuessedFieldsChangeNothing) {
  Net net(ThreeNodes());
  const Address a = net.ep(0).address(), b = net.ep(1).address(), x = net.ep(2).address();
  Transfer1 t(net, 2u << 20);
  const uint32_t b_inc = b.incarnation;
  std::mt19937 rng(1);
  t.Run([&](uint64_t step) {
    if (step % 50 != 25 || step > 5000) return;
    const driver::UdpFlow f = Spoofed(b, x.mac, a);
    Inject(net, 2, [&](absl::Span<uint8_t> fr) {  // "b restarted"
      return ForgedHello(f, rng() | 1, 0, rng(), rng() | 1, {}, nullptr, fr);
    });
    Inject(net, 2, [&](absl::Span<uint8_t> fr) {  // "b reset its session"
      return ForgedHello(f, b_inc, a.incarnation, rng(), rng() | 1, {}, nullptr, fr);
    });
    Inject(net, 2, [&](absl::Span<uint8_t> fr) {
      return ForgedReset(f, rng() | 1, a.incarnation, wire::ResetReason::kUnknownIncarnation,
                         b_inc, rng(), fr);
    });
    Inject(net, 2, [&](absl::Span<uint8_t> fr) {
      return ForgedReset(f, b_inc, a.incarnation, wire::ResetReason::kNoSession, a.incarnation,
                         rng(), fr);
    });
  });
  const Counters& n = net.ep(0).counters();
  EXPECT_GT(n.cookies_sent, 0u) << "the forged HELLOs drew COOKIEs (to b, not to the attacker)";
  EXPECT_GT(n.resets_probed, 0u) << "the forged RESETs made a probe, nothing more";
  EXPECT_EQ(n.peer_restarts, 0u);
  EXPECT_EQ(n.peer_resets, 0u);
  EXPECT_EQ(n.ops_failed, 0u);
  EXPECT_EQ(net.ep(0).PeerAddress(t.to_b)->mac, b.mac) << "no redirect";
  EXPECT_EQ(net.ep(0).peer_stats(t.to_b)->incarnation, b_inc);
}

// Forgeries built from observed packets (an on-path reader's: b's real
// incarnation and a PSN a has in flight, a replay of b's own HELLO): still
// no reset, no redirect, no loss, because every change waits for a proof
// (a cookie, or an answer echoing a's nonce) that only b's address gets.
TEST(AttackTest, ForgedFramesWithObservedFieldsAndReplaysChangeNothing) {
  Net net(ThreeNodes());
  const Address a = net.ep(0).address(), b = net.ep(1).address(), x = net.ep(2).address();
  std::vector<uint8_t> b_hello;  // b's first HELLO or HELLO_ACK to a, as seen on the wire
  bool seen_data = false;
  uint64_t resets = 0;
  net.tap(0).set_filter([&](const wire::View* v) {
    if (v != nullptr && v->common.type == wire::PacketType::kHelloAck && b_hello.empty()) {
      b_hello.assign(v->datagram.begin(), v->datagram.end());
    }
    return true;
  });
  // As soon as a DATA of a's is seen, a RESET NO_SESSION naming it (in
  // flight at a: b has not acknowledged it yet) goes to a, now and then.
  net.tap(1).set_filter([&](const wire::View* v) {
    if (v != nullptr && v->common.type == wire::PacketType::kData && (++resets % 50) == 1) {
      seen_data = true;
      Inject(net, 2, [&](absl::Span<uint8_t> fr) {
        return ForgedReset(Spoofed(b, x.mac, a), b.incarnation, a.incarnation,
                           wire::ResetReason::kNoSession, a.incarnation, v->common.psn.value(),
                           fr);
      });
    }
    return true;
  });
  Transfer1 t(net, 2u << 20);
  t.Run([&](uint64_t step) {
    if (!seen_data || step % 40 != 0 || step > 6000) return;
    const driver::UdpFlow f = Spoofed(b, x.mac, a);
    Inject(net, 2, [&](absl::Span<uint8_t> fr) {
      // b's own handshake packet replayed from the attacker's MAC.
      return driver::BuildUdpFrame(f, b_hello, fr, driver::UdpChecksumFill::kNone);
    });
  });
  ASSERT_FALSE(b_hello.empty());
  const Counters& n = net.ep(0).counters();
  EXPECT_GT(n.resets_probed, 0u);
  EXPECT_EQ(n.peer_resets, 0u);
  EXPECT_EQ(n.peer_restarts, 0u);
  EXPECT_EQ(n.ops_failed, 0u);
  EXPECT_EQ(net.ep(0).PeerAddress(t.to_b)->mac, b.mac);
}

// 100,000 HELLOs from random sources (random IPv4, port, MAC, incarnation)
// at b, whose table has room for 4 peers: each costs b a COOKIE at most and
// no state; meanwhile a's transfer to b goes on, and b's application
// inserts a real peer (c) which then exchanges data with it.
TEST(AttackTest, AFloodOfHellosFromRandomSourcesFillsNothing) {
  NetOptions o = ThreeNodes();
  o.nodes = 4;
  o.config.max_peers = 4;
  Net net(o);
  const Address b = net.ep(1).address();
  std::mt19937_64 rng(2);
  // As many as b takes per pass (rx_burst), so that none is lost on the way.
  constexpr int kFloodPerStep = 24;
  Transfer1 t(net, 256u << 10);
  uint64_t sent = 0;
  const auto flood_some = [&] {
    for (int i = 0; i < kFloodPerStep && sent < 100'000; ++i, ++sent) {
      Address from;
      from.ip = driver::Ipv4Address{static_cast<uint32_t>(rng())};
      from.udp_port = static_cast<uint16_t>(rng() | 1);
      const uint64_t r = rng();
      driver::MacAddress mac{{{0x02, 0x66, uint8_t(r), uint8_t(r >> 8), uint8_t(r >> 16), 1}}};
      Inject(net, 3, [&](absl::Span<uint8_t> fr) {
        return ForgedHello(Spoofed(from, mac, b), static_cast<uint32_t>(r >> 32) | 1, 0,
                           static_cast<uint32_t>(r), r | 1, {}, nullptr, fr);
      });
    }
  };
  t.Run([&](uint64_t) { flood_some(); });
  while (sent < 100'000) {  // the rest, if the transfer finished first
    flood_some();
    net.Step();
  }
  const Counters& n = net.ep(1).counters();
  EXPECT_EQ(n.cookies_sent + n.cookies_dropped, 100'001u) << "and one to a's first HELLO";
  EXPECT_EQ(n.handshakes, 1u) << "only a's";
  // c is inserted (the table has room: nothing was learned) and talks to b.
  absl::StatusOr<PeerId> b_to_c = net.ep(1).InsertPeer(net.ep(2).address());
  ASSERT_TRUE(b_to_c.ok()) << b_to_c.status();
  uint32_t got = 0;
  const uint32_t v = 0xc0ffee;
  ASSERT_EQ(net.ep(2).PostRecv({.buf = &got, .len = 4}), Result::kOk);
  ASSERT_EQ(net.ep(1).Send({.dest = *b_to_c, .buf = &v, .len = 4}), Result::kOk);
  ASSERT_TRUE(net.RunUntil([&] { return got == v; }, 10'000));
}

// An on-path attacker that reads the COOKIEs sent to its own MAC can
// complete handshakes from many addresses; such learned peers take at most
// a quarter of the table (the oldest unconfirmed evicted first), and the
// application's inserts always find room by evicting them.
TEST(AttackTest, LearnedPeersAreBoundedAndNeverKeepAnInsertOut) {
  NetOptions o = ThreeNodes();
  o.config.max_peers = 8;
  Net net(o);
  const Address b = net.ep(1).address(), x = net.ep(2).address();
  std::vector<wire::View> cookies;
  net.tap(2).set_filter([&](const wire::View* v) {
    if (v != nullptr && v->common.type == wire::PacketType::kCookie) cookies.push_back(*v);
    return false;  // the attacker's endpoint sees nothing
  });
  for (uint32_t i = 0; i < 20; ++i) {
    Address from;
    from.ip = driver::Ipv4Address{0x0a630000u + i};
    from.udp_port = 7000;
    const driver::UdpFlow f = Spoofed(from, x.mac, b);
    Inject(net, 2, [&](absl::Span<uint8_t> fr) {
      return ForgedHello(f, 100 + i, 0, 1000 + i, 500 + i, {}, nullptr, fr);
    });
    cookies.clear();
    ASSERT_TRUE(net.RunUntil([&] { return !cookies.empty(); }, 100));
    ASSERT_EQ(cookies[0].hello.echo, 500u + i);
    Inject(net, 2, [&](absl::Span<uint8_t> fr) {
      return ForgedHello(f, 100 + i, 0, 1000 + i, 500 + i, cookies[0].hello.cookie, nullptr, fr);
    });
    net.Step();
    net.Step();
  }
  const Counters& n = net.ep(1).counters();
  EXPECT_EQ(n.learned_evicted, 18u) << "2 (a quarter of 8) kept, the oldest unconfirmed evicted";
  // Eight inserts fill the whole table: the two learned peers make room.
  for (uint32_t i = 0; i < 8; ++i) {
    Address peer;
    peer.ip = driver::Ipv4Address{0x0a640000u + i};
    peer.udp_port = 6000;
    absl::StatusOr<PeerId> id = net.ep(1).InsertPeer(peer);
    ASSERT_TRUE(id.ok()) << "insert " << i << ": " << id.status();
  }
  EXPECT_EQ(n.learned_evicted, 20u);
  Address ninth;
  ninth.ip = driver::Ipv4Address{0x0a650000u};
  ninth.udp_port = 6000;
  EXPECT_EQ(net.ep(1).InsertPeer(ninth).status().code(), absl::StatusCode::kResourceExhausted)
      << "only inserted peers left";
}

NetOptions Keyed(std::optional<wire::MacKey> k0, std::optional<wire::MacKey> k1) {
  NetOptions o = FastTimeouts();
  o.configure = [k0, k1](int node, EndpointConfig* c) {
    c->handshake_key = node == 0 ? k0 : k1;
  };
  return o;
}

TEST(AttackTest, AKeyedHandshakeWorks) {
  Net net(Keyed(Key(7), Key(7)));
  ASSERT_GE(testing::TransferAndVerify(net, 0, 1, {100, 70'000}, 100'000), 0);
  EXPECT_EQ(net.ep(0).counters().handshake_auth_failed, 0u);
  EXPECT_EQ(net.ep(1).counters().handshake_auth_failed, 0u);
}

// Different keys, or a key at one end only: no handshake; the failures are
// counted and the send times out.
TEST(AttackTest, AWrongKeyOrAKeyAtOneEndOnlyFailsTheHandshake) {
  for (auto [k0, k1] : {std::pair<std::optional<wire::MacKey>, std::optional<wire::MacKey>>{
                            Key(1), Key(2)},
                        {Key(1), std::nullopt},
                        {std::nullopt, Key(2)}}) {
    Net net(Keyed(k0, k1));
    uint32_t in = 0;
    const uint32_t out = 42;
    ASSERT_EQ(net.ep(1).PostRecv({.buf = &in, .len = 4}), Result::kOk);
    ASSERT_EQ(net.ep(0).Send({.dest = net.Peer(0, 1), .buf = &out, .len = 4}), Result::kOk);
    std::vector<ErrorCompletion> err;
    ASSERT_TRUE(net.RunUntil(
        [&] {
          Drain(net.ep(0), nullptr, &err);
          return !err.empty();
        },
        20'000));
    EXPECT_EQ(err[0].err, ETIMEDOUT);
    EXPECT_EQ(in, 0u);
    EXPECT_GT(net.ep(0).counters().handshake_auth_failed +
                  net.ep(1).counters().handshake_auth_failed,
              0u);
    EXPECT_EQ(net.ep(1).counters().handshakes, 0u);
  }
}

// With a key, b's HELLO captured on the wire and sent again with another
// ISN (as if to reset the session; the CRC made good, the MAC a guess)
// fails its MAC, and a RESET without the
// key is dropped before it can even make a probe. (Replays of a HELLO with
// a fresh cookie spliced in: session_test.)
TEST(AttackTest, WithAKeyForgedHellosAndUnkeyedResetsAreRefused) {
  NetOptions o = Keyed(Key(9), Key(9));
  o.nodes = 3;
  Net net(o);
  const Address a = net.ep(0).address(), b = net.ep(1).address(), x = net.ep(2).address();
  std::optional<wire::View> b_hello;
  net.tap(0).set_filter([&](const wire::View* v) {
    if (v != nullptr && v->common.type == wire::PacketType::kHello &&
        v->flow.src_port == b.udp_port && !b_hello) {
      b_hello = *v;
    }
    return true;
  });
  net.Peer(0, 1);
  ASSERT_GE(testing::TransferAndVerify(net, 1, 0, {100}, 100'000), 0);  // b speaks first
  ASSERT_TRUE(b_hello.has_value());
  const uint64_t handshakes = net.ep(0).counters().handshakes;
  const driver::UdpFlow f = Spoofed(b, x.mac, a);
  const wire::MacKey guess = Key(0x55);
  Inject(net, 2, [&](absl::Span<uint8_t> fr) {
    const wire::Common& c = b_hello->common;  // another ISN: a reset, if it were b's
    return ForgedHello(f, c.src_incarnation, c.dst_incarnation, c.psn.value() ^ 0x80,
                       b_hello->hello.nonce, {}, &guess, fr);
  });
  for (int i = 0; i < 10; ++i) net.Step();
  EXPECT_EQ(net.ep(0).counters().handshake_auth_failed, 1u);
  Inject(net, 2, [&](absl::Span<uint8_t> fr) {
    return ForgedReset(f, b.incarnation, a.incarnation, wire::ResetReason::kNoSession,
                       a.incarnation, 0, fr);
  });
  for (int i = 0; i < 10; ++i) net.Step();
  EXPECT_EQ(net.ep(0).counters().handshake_auth_failed, 2u) << "unkeyed RESET dropped";
  EXPECT_EQ(net.ep(0).counters().resets_probed, 0u);
  EXPECT_EQ(net.ep(0).counters().handshakes, handshakes);
  EXPECT_EQ(net.ep(0).counters().peer_resets + net.ep(0).counters().peer_restarts, 0u);
  ASSERT_GE(testing::TransferAndVerify(net, 0, 1, {100}, 100'000), 0) << "the session lives";
}

}  // namespace
}  // namespace bypass::rdm
