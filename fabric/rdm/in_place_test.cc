// Reading in place: a rendezvous message between processes of one host is
// copied once, the receiver reading the sender's buffer (PROTOCOL.md,
// "Reading in place"). Over loopback with same_host=1 (kRxSameHost on
// every frame, ReadPeerMemory by process_vm_readv of our own process):
// 1 and 16 MiB, truncated, unexpected, failing reads that fall back to the
// pull, frames without kRxSameHost, the switch off, the sender restarting,
// the sender's guard word (the receive completes at the read, or on the
// RESPONSE when the guard no longer holds), and faults.
#include <sys/uio.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
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
using testing::RunTransfer;
using testing::Transfer;

constexpr uint64_t kThreshold = 16 * 1024;
// Reads of the sender's memory per message read in place: the bytes, then
// (on x86, where the guard vouches) the guard word.
#if defined(__x86_64__)
constexpr uint64_t kReadsPerMessage = 2;
constexpr bool kVouches = true;
#else
constexpr uint64_t kReadsPerMessage = 1;
constexpr bool kVouches = false;
#endif

// Fills `out` with pattern `seed`, posts `in` at ep(1) (context rctx) and
// sends `out` from ep(0) to to_b (context sctx).
void PostPatterned(Net& net, PeerId to_b, int seed, std::vector<uint8_t>& out,
                   std::vector<uint8_t>& in, int* sctx, int* rctx) {
  testing::FillPattern(seed, absl::MakeSpan(out));
  ASSERT_EQ(net.ep(1).PostRecv({.buf = in.data(), .len = in.size(), .context = rctx}),
            Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = out.data(), .len = out.size(), .context = sctx}),
            Result::kOk);
}

// Every RESPONSE to ep(1) is lost while *drop holds.
void DropResponsesWhile(Net& net, const bool* drop) {
  net.tap(1).set_filter([drop](const wire::View* v) {
    return !(*drop && v != nullptr && v->common.type == wire::PacketType::kRma &&
             v->rma.op == wire::RmaOp::kResponse);
  });
}

// A read of peer memory that finds every guard word cleared (the offer no
// longer standing), and reads the message itself.
int64_t ReadWithGuardsCleared(uint32_t pid, uint64_t addr, void* dst, size_t len) {
  if (len == sizeof(uint64_t)) {  // the guard word (messages here are longer)
    std::memset(dst, 0, len);
    return static_cast<int64_t>(len);
  }
  const iovec local{dst, len};
  const iovec remote{reinterpret_cast<void*>(addr), len};
  const ssize_t n = process_vm_readv(static_cast<pid_t>(pid), &local, 1, &remote, 1, 0);
  return n < 0 ? -errno : n;
}

NetOptions SameHost() {
  NetOptions o;
  o.device_keys = ",same_host=1";
  o.config.rendezvous_threshold = kThreshold;
  o.config.peer_timeout_ns = 20'000'000;
  return o;
}

// What ep(1) receives: READ_DATA packets, and whether requests to send
// carried an offer.
struct Watch {
  uint64_t read_data = 0;
  uint64_t offers = 0;
  uint64_t requests = 0;
};

void WatchReceiver(Net& net, Watch* w) {
  net.tap(1).set_filter([w](const wire::View* v) {
    if (v == nullptr) return true;
    if (v->common.type == wire::PacketType::kRma && v->rma.op == wire::RmaOp::kReadData) {
      ++w->read_data;
    }
    if (v->common.type == wire::PacketType::kData &&
        v->msg.protocol == wire::MsgProtocol::kRendezvous) {
      ++w->requests;
      if (v->msg.offer_pid != 0) ++w->offers;
    }
    return true;
  });
}

// The counters of one rendezvous message from ep(0) to ep(1): read in place,
// or (in_place false) a failed read and the pull instead.
void ExpectOneRendezvous(Net& net, bool in_place) {
  const Counters& r = net.ep(1).counters();
  EXPECT_EQ(r.rendezvous_copied_in_place, in_place ? 1u : 0u);
  EXPECT_EQ(r.rendezvous_in_place_vouched, in_place && kVouches ? 1u : 0u);
  EXPECT_EQ(r.rendezvous_in_place_failed, in_place ? 0u : 1u);
  EXPECT_EQ(r.rendezvous_pulled, in_place ? 0u : 1u);
  EXPECT_EQ(net.ep(0).counters().rendezvous_read_by_peer, in_place ? 1u : 0u);
}

TEST(InPlaceTest, OneAndSixteenMebibytesCopiedOnce) {
  for (const uint64_t size : {uint64_t{1} << 20, uint64_t{16} << 20}) {
    SCOPED_TRACE(size);
    Net net(SameHost());
    Watch w;
    WatchReceiver(net, &w);
    const PeerId to_b = net.Peer(0, 1);
    std::vector<uint8_t> out(size), in(size, 0xee);
    int sctx, rctx;
    ASSERT_NO_FATAL_FAILURE(PostPatterned(net, to_b, 5, out, in, &sctx, &rctx));
    Transfer t;
    ASSERT_TRUE(RunTransfer(net, t, 1, 1));
    ASSERT_TRUE(t.send_err.empty()) << t.send_err[0].message;
    ASSERT_TRUE(t.recv_err.empty()) << t.recv_err[0].message;
    EXPECT_EQ(t.sent[0].context, &sctx);
    EXPECT_EQ(t.sent[0].len, size);
    EXPECT_EQ(t.got[0].context, &rctx);
    EXPECT_EQ(t.got[0].len, size);
    EXPECT_EQ(testing::CheckPattern(5, in), -1);
    ExpectOneRendezvous(net, /*in_place=*/true);
    EXPECT_EQ(w.requests, 1u);
    EXPECT_EQ(w.offers, 1u);
    EXPECT_EQ(w.read_data, 0u) << "no byte of the message went through packets";
    EXPECT_LT(net.ep(1).counters().rx_data_packets, 10u);
  }
}

// Above in_place_threshold (below rendezvous_threshold) a message goes in
// place once the sender has heard from its peer through memory of this
// host; before that, and when the peer's frames do not say so, eager.
TEST(InPlaceTest, SameHostPeersGoInPlaceAboveTheLowerThreshold) {
  for (const bool strip : {false, true}) {
    SCOPED_TRACE(strip ? "peer's frames without kRxSameHost" : "same host");
    NetOptions o = SameHost();
    o.config.rendezvous_threshold = 128 * 1024;
    o.config.in_place_threshold = 4096;
    Net net(o);
    if (strip) net.tap(0).set_strip_same_host(true);
    const PeerId to_b = net.Peer(0, 1);
    std::vector<uint8_t> out(8192), in(8192);
    for (int m = 0; m < 2; ++m) {
      testing::FillPattern(m, absl::MakeSpan(out));
      ASSERT_EQ(net.ep(1).PostRecv({.buf = in.data(), .len = in.size()}), Result::kOk);
      ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = out.data(), .len = out.size()}), Result::kOk);
      Transfer t;
      ASSERT_TRUE(RunTransfer(net, t, 1, 1));
      ASSERT_EQ(t.got.size(), 1u);
      EXPECT_EQ(testing::CheckPattern(m, in), -1);
    }
    // The first went before anything came back from the peer: eager.
    EXPECT_EQ(net.ep(0).counters().rendezvous_sent, strip ? 0u : 1u);
    EXPECT_EQ(net.ep(1).counters().rendezvous_copied_in_place, strip ? 0u : 1u);
  }
}

// A peer that cannot read us (its read fails, so it pulls) is not sent
// medium messages by rendezvous again: an extra round trip for nothing.
TEST(InPlaceTest, APeerThatCannotReadGetsEagerAgain) {
  NetOptions o = SameHost();
  o.config.rendezvous_threshold = 128 * 1024;
  o.config.in_place_threshold = 4096;
  Net net(o);
  net.tap(1).set_read_peer_memory([](uint32_t, uint64_t, void*, size_t) { return int64_t{-EPERM}; });
  const PeerId to_b = net.Peer(0, 1);
  std::vector<uint8_t> out(8192), in(8192);
  for (int m = 0; m < 4; ++m) {
    testing::FillPattern(m, absl::MakeSpan(out));
    ASSERT_EQ(net.ep(1).PostRecv({.buf = in.data(), .len = in.size()}), Result::kOk);
    ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = out.data(), .len = out.size()}), Result::kOk);
    Transfer t;
    ASSERT_TRUE(RunTransfer(net, t, 1, 1));
    ASSERT_EQ(t.got.size(), 1u);
    EXPECT_EQ(testing::CheckPattern(m, in), -1);
  }
  // The first eager (nothing heard yet), the second offered and pulled,
  // the rest eager.
  EXPECT_EQ(net.ep(0).counters().rendezvous_sent, 1u);
  EXPECT_EQ(net.ep(1).counters().rendezvous_in_place_failed, 1u);
  EXPECT_EQ(net.ep(1).counters().rendezvous_pulled, 1u);
}

TEST(InPlaceTest, ShorterReceiveTruncates) {
  for (const bool posted_first : {true, false}) {
    SCOPED_TRACE(posted_first ? "posted first" : "unexpected");
    Net net(SameHost());
    Transfer t;
    ASSERT_NO_FATAL_FAILURE(
        testing::SendIntoShorterReceive(net, 4 * kThreshold, kThreshold + 100, posted_first, t));
    EXPECT_EQ(t.sent[0].len, 4 * kThreshold);
    EXPECT_EQ(net.ep(1).counters().rendezvous_copied_in_place, 1u);
    EXPECT_EQ(net.ep(1).counters().rendezvous_pulled, 0u);
  }
}

TEST(InPlaceTest, UnexpectedThenReceive) {
  Net net(SameHost());
  Watch w;
  WatchReceiver(net, &w);
  const PeerId to_b = net.Peer(0, 1);
  std::vector<uint8_t> out(1 << 20), in(out.size(), 0xee);
  testing::FillPattern(9, absl::MakeSpan(out));
  ASSERT_EQ(net.ep(0).Send({.dest = to_b,
                            .buf = out.data(),
                            .len = out.size(),
                            .tag = 77,
                            .data = 42,
                            .flags = kSendTagged | kSendRemoteData}),
            Result::kOk);
  for (int i = 0; i < 5000; ++i) net.Step();
  EXPECT_EQ(net.ep(1).counters().unexpected_depth, 1u);
  EXPECT_EQ(net.ep(1).counters().unexpected_bytes, 0u);
  ASSERT_EQ(net.ep(1).PostRecv(
                {.buf = in.data(), .len = in.size(), .context = &in, .tagged = true, .tag = 77}),
            Result::kOk);
  Transfer t;
  ASSERT_TRUE(RunTransfer(net, t, 1, 1));
  ASSERT_TRUE(t.recv_err.empty()) << t.recv_err[0].message;
  ASSERT_EQ(t.sent.size(), 1u);
  EXPECT_EQ(t.got[0].len, out.size());
  EXPECT_EQ(t.got[0].tag, 77u);
  EXPECT_EQ(t.got[0].data, 42u);
  EXPECT_TRUE(t.got[0].flags & kCompRemoteData);
  EXPECT_EQ(testing::CheckPattern(9, in), -1);
  EXPECT_EQ(net.ep(1).counters().rendezvous_copied_in_place, 1u);
  EXPECT_EQ(w.read_data, 0u);
}

// Messages after an in-place one still complete after it, in order.
TEST(InPlaceTest, MixedWithEagerInSendOrder) {
  Net net(SameHost());
  std::vector<size_t> sizes;
  for (int k = 0; k < 12; ++k) sizes.push_back(k % 3 == 0 ? (1 << 20) + k : 100 + k);
  ASSERT_GT(testing::TransferAndVerify(net, 0, 1, sizes, 1'000'000), 0);
  EXPECT_EQ(net.ep(1).counters().rendezvous_copied_in_place, 4u);
  EXPECT_EQ(net.ep(1).counters().rendezvous_pulled, 0u);
}

// A request to send holds the sender's later messages until its receiver
// answers, so that pulled bytes never wait behind a refused message
// (PROTOCOL.md, Rendezvous). Once the peer has read one of our offers in
// place and vouched for it, nothing will be pulled: the requests of a
// window go together, not one per round trip.
TEST(InPlaceTest, AReaderThatVouchedIsNotWaitedFor) {
  Net net(SameHost());
  Watch w;
  WatchReceiver(net, &w);
  // How many requests ep(1) had seen when ep(0) got the first READ_REQ of
  // a batch (the first answer to any of its requests).
  uint64_t seen_at_first_answer = 0;
  bool answered = false;
  net.tap(0).set_filter([&](const wire::View* v) {
    if (v != nullptr && v->common.type == wire::PacketType::kRma &&
        v->rma.op == wire::RmaOp::kReadReq && !answered) {
      answered = true;
      seen_at_first_answer = w.requests;
    }
    return true;
  });
  const PeerId to_b = net.Peer(0, 1);
  constexpr int kBatch = 3;
  constexpr size_t kSize = 64 * 1024;  // above in_place_threshold, below kThreshold too
  uint64_t expect_copied = 0;
  for (int batch = 0; batch < 2; ++batch) {
    SCOPED_TRACE(batch);
    std::vector<std::vector<uint8_t>> out(kBatch, std::vector<uint8_t>(kSize)),
        in(kBatch, std::vector<uint8_t>(kSize, 0xee));
    int sctx[kBatch], rctx[kBatch];
    const uint64_t before = w.requests;
    answered = false;
    for (int k = 0; k < kBatch; ++k) {
      testing::FillPattern(10 * batch + k, absl::MakeSpan(out[k]));
      ASSERT_EQ(net.ep(1).PostRecv({.buf = in[k].data(), .len = kSize, .context = &rctx[k]}),
                Result::kOk);
    }
    for (int k = 0; k < kBatch; ++k) {
      ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = out[k].data(), .len = kSize,
                                .context = &sctx[k]}),
                Result::kOk);
    }
    Transfer t;
    ASSERT_TRUE(RunTransfer(net, t, kBatch, kBatch));
    ASSERT_TRUE(t.send_err.empty()) << t.send_err[0].message;
    ASSERT_TRUE(t.recv_err.empty()) << t.recv_err[0].message;
    for (int k = 0; k < kBatch; ++k) {
      EXPECT_EQ(t.got[k].context, &rctx[k]) << "in send order";
      EXPECT_EQ(testing::CheckPattern(10 * batch + k, in[k]), -1) << k;
    }
    EXPECT_EQ(w.requests - before, uint64_t{kBatch});
    // The first batch: one request at a time until the peer vouched (and
    // where the guard does not vouch, always).
    const uint64_t together = batch == 1 && kVouches ? kBatch : 1;
    EXPECT_EQ(seen_at_first_answer - before, together);
    expect_copied += w.offers > 0 ? kBatch : 0;
  }
  EXPECT_EQ(w.read_data, 0u) << "nothing pulled";
  EXPECT_EQ(net.ep(1).counters().rendezvous_copied_in_place, expect_copied);
  EXPECT_EQ(w.offers, uint64_t{2 * kBatch});
}

// Sends `sizes` from ep(0) to receives posted at ep(1) first, all posted
// before a step, and checks that every message arrives whole, its receive
// completing in send order if `in_order`; seed + k patterns message k.
void SendWindow(Net& net, PeerId to_b, int seed, const std::vector<size_t>& sizes,
                bool in_order = true) {
  const size_t n = sizes.size();
  std::vector<std::vector<uint8_t>> out(n), in(n);
  std::vector<int> sctx(n), rctx(n);
  for (size_t k = 0; k < n; ++k) {
    out[k].resize(sizes[k]);
    in[k].assign(sizes[k], 0xee);
    testing::FillPattern(seed + static_cast<int>(k), absl::MakeSpan(out[k]));
    ASSERT_EQ(net.ep(1).PostRecv({.buf = in[k].data(), .len = sizes[k], .context = &rctx[k]}),
              Result::kOk);
  }
  for (size_t k = 0; k < n; ++k) {
    ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = out[k].data(), .len = sizes[k],
                              .context = &sctx[k]}),
              Result::kOk);
  }
  Transfer t;
  ASSERT_TRUE(RunTransfer(net, t, n, n));
  ASSERT_TRUE(t.send_err.empty()) << t.send_err[0].message;
  ASSERT_TRUE(t.recv_err.empty()) << t.recv_err[0].message;
  for (size_t k = 0; k < n; ++k) {
    if (in_order) {
      EXPECT_EQ(t.got[k].context, &rctx[k]) << k << ": in send order";
      EXPECT_EQ(t.got[k].len, sizes[k]) << k;
    }
    EXPECT_EQ(testing::CheckPattern(seed + static_cast<int>(k), in[k]), -1) << k;
  }
}

// The requests to send that arrive in one burst from one process are read
// by one system call (its fixed cost, some 2 us on this project's VM, is
// most of a 64 KiB read's), and complete in the order they were sent; an
// eager message between them completes after the ones before it, before
// the ones after it (PROTOCOL.md, "Reading in place").
TEST(InPlaceTest, RequestsOfOneBurstAreReadByOneCall) {
  Net net(SameHost());
  const PeerId to_b = net.Peer(0, 1);
  constexpr size_t kBig = 64 * 1024, kSmall = 100;
  // The first request is answered before the next go (the peer has not
  // vouched yet), then the rest of the window together.
  ASSERT_NO_FATAL_FAILURE(SendWindow(net, to_b, 0, {kBig, kBig}));
  const Counters& r = net.ep(1).counters();
  uint64_t calls = r.rendezvous_in_place_reads;
  ASSERT_NO_FATAL_FAILURE(SendWindow(net, to_b, 10, std::vector<size_t>(8, kBig)));
  EXPECT_EQ(r.rendezvous_in_place_reads - calls, 1u) << "eight messages, one call";
  calls = r.rendezvous_in_place_reads;
  ASSERT_NO_FATAL_FAILURE(SendWindow(net, to_b, 20, {kBig, kBig, kSmall, kBig, kBig}));
  EXPECT_EQ(r.rendezvous_in_place_reads - calls, 2u) << "the two before the eager one, then two";
  // A call reads at most about a mebibyte (Messaging::kMaxBatchedReadBytes):
  // a message of 1 MiB has one to itself.
  calls = r.rendezvous_in_place_reads;
  ASSERT_NO_FATAL_FAILURE(SendWindow(net, to_b, 30, {1 << 20, 1 << 20, kBig, kBig}));
  EXPECT_EQ(r.rendezvous_in_place_reads - calls, 3u);
  EXPECT_EQ(r.rendezvous_copied_in_place, 2u + 8u + 4u + 4u);
  EXPECT_EQ(r.rendezvous_in_place_failed, 0u);
  EXPECT_EQ(r.rendezvous_pulled, 0u);
}

// A read that fails inside a call's batch fails that message only: it is
// pulled, the ones before it were read, and those after it are read by
// another call.
TEST(InPlaceTest, AFailedReadInABatchIsPulledAndTheRestRead) {
  Net net(SameHost());
  const PeerId to_b = net.Peer(0, 1);
  constexpr size_t kBig = 64 * 1024;
  ASSERT_NO_FATAL_FAILURE(SendWindow(net, to_b, 0, {kBig}));
  // The sender's buffers of the next window are made by SendWindow; the
  // read of the one holding pattern 12 fails.
  net.tap(1).set_read_peer_memory([](uint32_t pid, uint64_t addr, void* dst, size_t len) {
    if (len == kBig) {
      uint8_t head[64];
      const iovec l{head, sizeof(head)};
      const iovec rm{reinterpret_cast<void*>(addr), sizeof(head)};
      uint8_t expect[sizeof(head)];
      testing::FillPattern(12, absl::MakeSpan(expect));
      if (process_vm_readv(static_cast<pid_t>(pid), &l, 1, &rm, 1, 0) == sizeof(head) &&
          std::memcmp(head, expect, sizeof(head)) == 0) {
        return int64_t{-EFAULT};
      }
    }
    const iovec local{dst, len};
    const iovec remote{reinterpret_cast<void*>(addr), len};
    const ssize_t n = process_vm_readv(static_cast<pid_t>(pid), &local, 1, &remote, 1, 0);
    return n < 0 ? int64_t{-errno} : int64_t{n};
  });
  const Counters& r = net.ep(1).counters();
  const uint64_t calls = r.rendezvous_in_place_reads;
  // The pulled one completes after the one read behind it.
  ASSERT_NO_FATAL_FAILURE(SendWindow(net, to_b, 10, std::vector<size_t>(4, kBig), false));
  EXPECT_EQ(r.rendezvous_in_place_failed, 1u);
  EXPECT_EQ(r.rendezvous_pulled, 1u);
  EXPECT_EQ(r.rendezvous_copied_in_place, 1u + 3u);
  EXPECT_EQ(r.rendezvous_in_place_reads - calls, 2u) << "10, 11 and the failure; then 13";
}

// A read that fails, whatever the reason, falls back to the pull silently.
TEST(InPlaceTest, FailedReadFallsBackToThePull) {
  for (const int64_t result : {int64_t{-EPERM}, int64_t{-ESRCH}, int64_t{-EFAULT},
                               int64_t{-ENOSYS}, int64_t{4096}}) {
    SCOPED_TRACE(result);
    Net net(SameHost());
    Watch w;
    WatchReceiver(net, &w);
    net.tap(1).set_read_peer_memory(
        [result](uint32_t, uint64_t, void*, size_t) { return result; });
    const PeerId to_b = net.Peer(0, 1);
    std::vector<uint8_t> out(1 << 20), in(out.size(), 0xee);
    testing::FillPattern(2, absl::MakeSpan(out));
    ASSERT_EQ(net.ep(1).PostRecv({.buf = in.data(), .len = in.size()}), Result::kOk);
    ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = out.data(), .len = out.size()}), Result::kOk);
    Transfer t;
    ASSERT_TRUE(RunTransfer(net, t, 1, 1));
    ASSERT_TRUE(t.recv_err.empty()) << t.recv_err[0].message;
    ASSERT_TRUE(t.send_err.empty()) << t.send_err[0].message;
    EXPECT_EQ(testing::CheckPattern(2, in), -1);
    ExpectOneRendezvous(net, /*in_place=*/false);
    EXPECT_GT(w.read_data, 700u);
  }
}

// Only kRxSameHost frames are acted on: an offer that came any other way
// (as from the network) never makes the receiver read memory.
TEST(InPlaceTest, FramesWithoutSameHostNeverRead) {
  Net net(SameHost());
  Watch w;
  WatchReceiver(net, &w);
  net.tap(1).set_strip_same_host(true);
  const uint64_t probes = net.tap(1).read_calls();  // the endpoint's probe at creation
  const PeerId to_b = net.Peer(0, 1);
  std::vector<uint8_t> out(1 << 20), in(out.size(), 0xee);
  testing::FillPattern(4, absl::MakeSpan(out));
  ASSERT_EQ(net.ep(1).PostRecv({.buf = in.data(), .len = in.size()}), Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = out.data(), .len = out.size()}), Result::kOk);
  std::vector<uint8_t> out2(1 << 20), in2(out2.size(), 0xee);  // and one unexpected
  testing::FillPattern(6, absl::MakeSpan(out2));
  ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = out2.data(), .len = out2.size()}), Result::kOk);
  for (int i = 0; i < 5000; ++i) net.Step();
  ASSERT_EQ(net.ep(1).PostRecv({.buf = in2.data(), .len = in2.size()}), Result::kOk);
  Transfer t;
  ASSERT_TRUE(RunTransfer(net, t, 2, 2));
  ASSERT_TRUE(t.recv_err.empty()) << t.recv_err[0].message;
  EXPECT_EQ(testing::CheckPattern(4, in), -1);
  EXPECT_EQ(testing::CheckPattern(6, in2), -1);
  // The sender offered the first; the receiver pulled it, so the sender
  // stopped offering (in_place_refused) and the second went without.
  EXPECT_EQ(w.offers, 1u) << "the sender offered once";
  EXPECT_EQ(net.tap(1).read_calls(), probes) << "the receiver never read";
  EXPECT_EQ(net.ep(1).counters().rendezvous_in_place_failed, 0u);
  EXPECT_EQ(net.ep(1).counters().rendezvous_pulled, 2u);
}

TEST(InPlaceTest, SwitchedOffNothingIsOfferedOrRead) {
  NetOptions o = SameHost();
  o.config.read_in_place = false;
  Net net(o);
  Watch w;
  WatchReceiver(net, &w);
  EXPECT_EQ(net.tap(1).read_calls(), 0u) << "not even probed";
  ASSERT_GT(testing::TransferAndVerify(net, 0, 1, {1 << 20}, 500'000), 0);
  EXPECT_EQ(w.requests, 1u);
  EXPECT_EQ(w.offers, 0u);
  EXPECT_EQ(net.tap(1).read_calls(), 0u);
  EXPECT_EQ(net.ep(1).counters().rendezvous_pulled, 1u);
}

// Without same_host the device cannot read: no offer goes out.
TEST(InPlaceTest, PlainLoopbackOffersNothing) {
  NetOptions o = SameHost();
  o.device_keys.clear();
  Net net(o);
  Watch w;
  WatchReceiver(net, &w);
  ASSERT_GT(testing::TransferAndVerify(net, 0, 1, {1 << 20}, 500'000), 0);
  EXPECT_EQ(w.requests, 1u);
  EXPECT_EQ(w.offers, 0u);
  EXPECT_EQ(net.ep(1).counters().rendezvous_pulled, 1u);
}

// Steps until ep(1) completes or fails a receive, and checks that it failed
// as a receive from a sender that restarted does (reset or timed out).
void ExpectReceiveFailsAsReset(Net& net, Transfer& t) {
  ASSERT_TRUE(net.RunUntil(
      [&] {
        Drain(net.ep(1), &t.got, &t.recv_err);
        return !t.got.empty() || !t.recv_err.empty();
      },
      500'000));
  EXPECT_TRUE(t.got.empty());
  ASSERT_EQ(t.recv_err.size(), 1u);
  EXPECT_TRUE(t.recv_err[0].err == ECONNRESET || t.recv_err[0].err == ETIMEDOUT)
      << t.recv_err[0].message;
}

// The sender restarts (same process: its old buffer still readable) after
// its request waited unexpected: the receiver reads in place, but the
// COPIED READ_REQ goes to a dead session; the receive fails as a pull's
// would, never completing with bytes the sender no longer vouches for.
TEST(InPlaceTest, SenderRestartsBeforeTheReceive) {
  Net net(SameHost());
  const PeerId to_b = net.Peer(0, 1);
  std::vector<uint8_t> out(1 << 20), in(out.size(), 0xee);
  testing::FillPattern(8, absl::MakeSpan(out));
  ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = out.data(), .len = out.size()}), Result::kOk);
  ASSERT_TRUE(net.RunUntil([&] { return net.ep(1).counters().unexpected_depth == 1; }, 100'000));
  for (int i = 0; i < 100; ++i) net.Step();
  net.Kill(0);
  net.Revive(0);
  const uint64_t reads = net.tap(1).read_calls();
  ASSERT_EQ(net.ep(1).PostRecv({.buf = in.data(), .len = in.size(), .context = &in}), Result::kOk);
  EXPECT_EQ(net.tap(1).read_calls(), reads + kReadsPerMessage)
      << "it read the old buffer, which is still there";
  Transfer t;
  ASSERT_NO_FATAL_FAILURE(ExpectReceiveFailsAsReset(net, t));
  EXPECT_EQ(t.recv_err[0].op.context, &in);
  EXPECT_EQ(net.ep(1).counters().rendezvous_copied_in_place, 0u);
  EXPECT_EQ(net.ep(1).counters().rendezvous_in_place_vouched, 0u)
      << "the old endpoint cleared its guard words as it closed";
}

// The sender restarts between the COPIED READ_REQ and its RESPONSE (every
// RESPONSE to the receiver is lost until then): the receive fails, unless
// the guard word vouched for the bytes at the read (then it completed
// there, before the restart, with the message).
void SenderRestartsBeforeItsAnswerCase(bool guard);

TEST(InPlaceTest, SenderRestartsBeforeItsAnswer) {
  for (const bool guard : {false, true}) {
    SCOPED_TRACE(guard ? "guard held at the read" : "guard cleared");
    SenderRestartsBeforeItsAnswerCase(guard);
  }
}

// The sender's guard word vouches for the bytes: the receive completes at
// the read, and the send on the VOUCHED READ_REQ, while every RESPONSE to
// the receiver is lost. A guard found cleared makes the receive wait for
// the RESPONSE.
TEST(InPlaceTest, GuardCompletesTheReceiveAtTheRead) {
  if (!kVouches) GTEST_SKIP() << "guards vouch on x86 only";
  for (const bool cleared : {false, true}) {
    SCOPED_TRACE(cleared ? "guard cleared" : "guard held");
    Net net(SameHost());
    if (cleared) net.tap(1).set_read_peer_memory(ReadWithGuardsCleared);
    bool drop = true;
    DropResponsesWhile(net, &drop);
    const PeerId to_b = net.Peer(0, 1);
    std::vector<uint8_t> out(1 << 20), in(out.size(), 0xee);
    int sctx, rctx;
    ASSERT_NO_FATAL_FAILURE(PostPatterned(net, to_b, 4, out, in, &sctx, &rctx));
    Transfer t;
    const bool got = net.RunUntil(
        [&] {
          Drain(net.ep(1), &t.got, &t.recv_err);
          return !t.got.empty() || !t.recv_err.empty();
        },
        cleared ? 20'000 : 500'000);
    if (cleared) {
      EXPECT_FALSE(got) << "completed without the sender's word";
      EXPECT_EQ(net.ep(1).counters().rendezvous_in_place_vouched, 0u);
    } else {
      ASSERT_TRUE(got);
      ASSERT_TRUE(t.recv_err.empty()) << t.recv_err[0].message;
      EXPECT_EQ(t.got[0].context, &rctx);
      EXPECT_EQ(t.got[0].len, out.size());
      EXPECT_EQ(testing::CheckPattern(4, in), -1);
      EXPECT_EQ(net.ep(1).counters().rendezvous_in_place_vouched, 1u);
      // The READ_REQ said VOUCHED: the send completes on it, with no
      // RESPONSE (all of which are still lost here).
      ASSERT_TRUE(net.RunUntil(
          [&] {
            Drain(net.ep(0), &t.sent, &t.send_err);
            return !t.sent.empty() || !t.send_err.empty();
          },
          500'000));
    }
    drop = false;
    ASSERT_TRUE(RunTransfer(net, t, 1, 1));
    ASSERT_TRUE(t.send_err.empty()) << t.send_err[0].message;
    ASSERT_TRUE(t.recv_err.empty()) << t.recv_err[0].message;
    EXPECT_EQ(t.sent[0].context, &sctx);
    EXPECT_EQ(testing::CheckPattern(4, in), -1);
    EXPECT_EQ(net.ep(1).counters().rendezvous_copied_in_place, 1u);
    EXPECT_EQ(net.ep(0).counters().rendezvous_read_by_peer, 1u);
  }
}

void SenderRestartsBeforeItsAnswerCase(bool guard) {
  Net net(SameHost());
  if (!guard) net.tap(1).set_read_peer_memory(ReadWithGuardsCleared);
  bool drop = true;
  DropResponsesWhile(net, &drop);
  const PeerId to_b = net.Peer(0, 1);
  std::vector<uint8_t> out(1 << 20), in(out.size(), 0xee);
  ASSERT_EQ(net.ep(1).PostRecv({.buf = in.data(), .len = in.size(), .context = &in}), Result::kOk);
  ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = out.data(), .len = out.size()}), Result::kOk);
  ASSERT_TRUE(
      net.RunUntil([&] { return net.ep(0).counters().rendezvous_read_by_peer == 1; }, 100'000));
  for (int i = 0; i < 200; ++i) net.Step();
  net.Kill(0);
  drop = false;
  net.Revive(0);
  Transfer t;
  if (guard && kVouches) {
    Drain(net.ep(1), &t.got, &t.recv_err);
    ASSERT_EQ(t.got.size(), 1u);
    EXPECT_EQ(t.got[0].context, &in);
    EXPECT_EQ(net.ep(1).counters().rendezvous_copied_in_place, 1u);
    return;
  }
  ASSERT_NO_FATAL_FAILURE(ExpectReceiveFailsAsReset(net, t));
  EXPECT_EQ(net.ep(1).counters().rendezvous_copied_in_place, 0u);
}

TEST(InPlaceTest, SurvivesFaultsExactlyOnce) {
  NetOptions o = SameHost();
  o.faults.drop = 0.05;
  o.faults.dup = 0.05;
  o.faults.reorder = 0.10;
  o.faults.seed = 23;
  o.config.peer_timeout_ns = 2'000'000'000;
  Net net(o);
  std::vector<size_t> sizes;
  for (int k = 0; k < 30; ++k) sizes.push_back(static_cast<size_t>(k) * 7001 % 200'000);
  ASSERT_GT(testing::TransferAndVerify(net, 0, 1, sizes, 2'000'000), 0);
  const Counters& r = net.ep(1).counters();
  EXPECT_EQ(r.rendezvous_copied_in_place, net.ep(0).counters().rendezvous_sent);
  EXPECT_GT(r.rendezvous_copied_in_place, 10u);
  EXPECT_EQ(r.rendezvous_pulled, 0u);
}

}  // namespace
}  // namespace bypass::rdm
