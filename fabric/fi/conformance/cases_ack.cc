// fi_cq(3)'s FI_TRANSMIT_COMPLETE (the default completion level of a send)
// with a receiver that stops calling into the provider once it has its
// message, as Debian's fi_pingpong does before its TCP handshake between
// sizes (issue 22): the sender's completion still comes, however the
// provider acknowledges (bypass: the receiver's reply, its next call, or
// its domain's progress thread; fabric/fi/README.md, "Completions and
// errors").
#include <chrono>
#include <cstdint>
#include <cstring>

#include "fabric/fi/conformance/conformance.h"

namespace bypass::fi::conformance {
namespace {

constexpr size_t kLen = 64;

bool Expired(std::chrono::steady_clock::time_point start) {
  return std::chrono::steady_clock::now() - start > std::chrono::seconds(kHangSeconds);
}

// One send with FI_TRANSMIT_COMPLETE from p.a to p.b, which polls only its
// receive CQ until the message is there, then (repost: after posting its
// next receive, as fi_pingpong does) calls nothing more: p.a polls only its
// transmit CQ until the send completes.
void SendThenReceiverStops(Ctx& c, Pair& p, bool repost, const char* what) {
  char* out = c.Buf(kLen, 'a');
  char* in = c.Buf(kLen, 0);
  static fi_context2 rctx, sctx, next_ctx;
  CHECK_RET(fi_recv(p.b.ep, in, kLen, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
  iovec iov{out, kLen};
  fi_msg m{};
  m.msg_iov = &iov;
  m.iov_count = 1;
  m.addr = p.a_to_b;
  m.context = &sctx;
  c.Post(what, [&] { return fi_sendmsg(p.a.ep, &m, FI_TRANSMIT_COMPLETE | FI_COMPLETION); });
  bool sent = false, received = false;
  fi_cq_tagged_entry e;
  const auto start = std::chrono::steady_clock::now();
  while (!received) {
    CHECK(!Expired(start), "hang: " << what << ": the message never arrived");
    ssize_t n = fi_cq_read(p.b.rx, &e, 1);
    CHECK(n == 1 || n == -FI_EAGAIN, what << ": fi_cq_read (receiver) answered " << Err(n));
    if (n == 1) {
      CHECK(e.op_context == &rctx, what << ": the receive's op_context");
      CHECK(std::memcmp(in, out, kLen) == 0, what << ": the bytes");
      received = true;
    }
    n = fi_cq_read(p.a.tx, &e, 1);  // the sender progresses (a handshake, ...)
    CHECK(n == 1 || n == -FI_EAGAIN, what << ": fi_cq_read (sender) answered " << Err(n));
    if (n == 1) {
      CHECK(e.op_context == &sctx, what << ": the send's op_context");
      sent = true;
    }
  }
  if (repost) CHECK_RET(fi_recv(p.b.ep, in, kLen, nullptr, FI_ADDR_UNSPEC, &next_ctx), 0);
  // The receiver calls nothing from here on.
  while (!sent) {
    CHECK(!Expired(start), "hang: " << what << ": the send never completed while its receiver "
                                   << "had stopped calling");
    const ssize_t n = fi_cq_read(p.a.tx, &e, 1);
    CHECK(n == 1 || n == -FI_EAGAIN, what << ": fi_cq_read (sender) answered " << Err(n));
    if (n == 1) {
      CHECK(e.op_context == &sctx, what << ": the send's op_context");
      sent = true;
    }
  }
}

}  // namespace

// A send with FI_TRANSMIT_COMPLETE to a receiver that calls nothing once
// its fi_cq_read returned the message: the send completes (bounded by
// kHangSeconds, never timed). Three times: the first message (the session
// is new), then one, then one after which the receiver posts its next
// receive before stopping (fi_pingpong's pp_rx).
CONFORMANCE_CASE(ack_receiver_stops_after_its_message, kShm) {
  Pair p = c.OpenPair(c.Hints(FI_MSG));
  SendThenReceiverStops(c, p, false, "the first send");
  SendThenReceiverStops(c, p, false, "the second send");
  SendThenReceiverStops(c, p, true, "a send whose receiver posts its next receive");
}

// 200 round trips of FI_TRANSMIT_COMPLETE sends each way, each side
// waiting for its own completions only (its send's, then the reply's
// receive), as a ping-pong does: every send and receive completes once,
// with its context and bytes.
CONFORMANCE_CASE(ack_pingpong_transmit_complete, kShm) {
  Pair p = c.OpenPair(c.Hints(FI_MSG));
  char* ping = c.Buf(kLen, 'p');
  char* pong = c.Buf(kLen, 'q');
  char* a_in = c.Buf(kLen, 0);
  char* b_in = c.Buf(kLen, 0);
  static fi_context2 ctx[4];
  for (int i = 0; i < 200; ++i) {
    ping[0] = static_cast<char>(i);
    CHECK_RET(fi_recv(p.b.ep, b_in, kLen, nullptr, FI_ADDR_UNSPEC, &ctx[0]), 0);
    CHECK_RET(fi_recv(p.a.ep, a_in, kLen, nullptr, FI_ADDR_UNSPEC, &ctx[1]), 0);
    c.Post("ping", [&] { return fi_send(p.a.ep, ping, kLen, nullptr, p.a_to_b, &ctx[2]); });
    Completion got = c.Wait(p.b.rx, "the ping");
    CHECK(!got.error && got.entry.op_context == &ctx[0], "round trip " << i << ": the ping");
    CHECK(std::memcmp(b_in, ping, kLen) == 0, "round trip " << i << ": the ping's bytes");
    c.Post("pong", [&] { return fi_send(p.b.ep, pong, kLen, nullptr, p.b_to_a, &ctx[3]); });
    got = c.Wait(p.a.tx, "the ping's send");
    CHECK(!got.error && got.entry.op_context == &ctx[2], "round trip " << i << ": the ping's send");
    got = c.Wait(p.a.rx, "the pong");
    CHECK(!got.error && got.entry.op_context == &ctx[1], "round trip " << i << ": the pong");
    got = c.Wait(p.b.tx, "the pong's send");
    CHECK(!got.error && got.entry.op_context == &ctx[3], "round trip " << i << ": the pong's send");
  }
  Completion extra;
  CHECK(!c.Poll(p.a.tx, &extra, 100) && !c.Poll(p.b.tx, &extra, 100), "a send completed twice");
}

// Two endpoints of one domain, a and a2, and an application that polls
// one of them: a2 takes b's message (FI_TRANSMIT_COMPLETE), then the
// application reads only a's receive CQ and b's transmit CQ (as one that
// waits on a for what b sends once its send to a2 completed): b's send
// completes (bounded by kHangSeconds, never timed). A provider that
// progresses only what the application reads leaves a2's acknowledgement
// unsent and both sides waiting.
CONFORMANCE_CASE(ack_unpolled_endpoint_of_a_polled_domain, kShm) {
  Pair p = c.OpenPair(c.Hints(FI_MSG));
  EpOpts o;
  o.av = p.a.av;
  Ep a2 = c.OpenEp(p.a.domain, p.a.info, o);
  const fi_addr_t b_to_a2 = c.Insert(p.b.av, a2.name);
  char* out = c.Buf(kLen, 'm');
  char* in = c.Buf(kLen, 0);
  char* a_in = c.Buf(kLen, 0);
  static fi_context2 rctx, a_ctx, sctx;
  CHECK_RET(fi_recv(a2.ep, in, kLen, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
  CHECK_RET(fi_recv(p.a.ep, a_in, kLen, nullptr, FI_ADDR_UNSPEC, &a_ctx), 0);
  iovec iov{out, kLen};
  fi_msg m{};
  m.msg_iov = &iov;
  m.iov_count = 1;
  m.addr = b_to_a2;
  m.context = &sctx;
  c.Post("the send to a2",
         [&] { return fi_sendmsg(p.b.ep, &m, FI_TRANSMIT_COMPLETE | FI_COMPLETION); });
  bool sent = false, received = false;
  fi_cq_tagged_entry e;
  const auto start = std::chrono::steady_clock::now();
  while (!received) {
    CHECK(!Expired(start), "hang: the message to a2 never arrived");
    ssize_t n = fi_cq_read(a2.rx, &e, 1);
    CHECK(n == 1 || n == -FI_EAGAIN, "fi_cq_read (a2) answered " << Err(n));
    if (n == 1) {
      CHECK(e.op_context == &rctx && std::memcmp(in, out, kLen) == 0, "a2's receive");
      received = true;
    }
    n = fi_cq_read(p.b.tx, &e, 1);
    CHECK(n == 1 || n == -FI_EAGAIN, "fi_cq_read (b) answered " << Err(n));
    if (n == 1) sent = true;
  }
  // a2 is never called again; a is polled.
  while (!sent) {
    CHECK(!Expired(start), "hang: the send to a2 never completed while the application polled "
                           "only a, an endpoint of a2's domain");
    ssize_t n = fi_cq_read(p.a.rx, &e, 1);
    CHECK(n == -FI_EAGAIN, "fi_cq_read (a) answered " << Err(n));
    n = fi_cq_read(p.b.tx, &e, 1);
    CHECK(n == 1 || n == -FI_EAGAIN, "fi_cq_read (b) answered " << Err(n));
    if (n == 1) {
      CHECK(e.op_context == &sctx, "the send's op_context");
      sent = true;
    }
  }
}

// fi_tsendmsg with FI_MORE (fi_msg(3): the application posts more requests
// at once): 16 small tagged sends, all but the last with FI_MORE, each
// received once, in order, with its bytes and tag, and each send completed
// once; then 4 sends all with FI_MORE and nothing after them: they arrive
// once the sender reads its CQ (a provider may wait for the next request,
// never for ever).
CONFORMANCE_CASE(send_more_batches_in_order, kShm) {
  Pair p = c.OpenPair(c.Hints(FI_TAGGED));
  constexpr int kMsgs = 16;
  static fi_context2 rctx[kMsgs], sctx[kMsgs];
  char* out = c.Buf(kMsgs * kLen);
  char* in = c.Buf(kMsgs * kLen, 0);
  for (int i = 0; i < kMsgs * static_cast<int>(kLen); ++i) out[i] = static_cast<char>(i * 7 + 1);
  const auto post = [&](int first, int n, bool last_more) {
    for (int i = first; i < first + n; ++i) {
      CHECK_RET(fi_trecv(p.b.ep, in + i * kLen, kLen, nullptr, FI_ADDR_UNSPEC, 0x500 + i, 0,
                         &rctx[i]),
                0);
    }
    for (int i = first; i < first + n; ++i) {
      iovec iov{out + i * kLen, static_cast<size_t>(8 + i)};
      fi_msg_tagged m{};
      m.msg_iov = &iov;
      m.iov_count = 1;
      m.addr = p.a_to_b;
      m.tag = 0x500 + i;
      m.context = &sctx[i];
      const uint64_t more = (i + 1 < first + n || last_more) ? FI_MORE : 0;
      c.Post("fi_tsendmsg", [&] { return fi_tsendmsg(p.a.ep, &m, FI_COMPLETION | more); });
    }
  };
  const auto check = [&](int first, int n, const char* what) {
    for (int i = first; i < first + n; ++i) {
      Completion r = c.Wait(p.b.rx, what);
      CHECK(!r.error && r.entry.op_context == &rctx[i] && r.entry.len == static_cast<size_t>(8 + i) &&
                r.entry.tag == static_cast<uint64_t>(0x500 + i),
            what << ": receive " << i << " is not the message sent " << i << "th");
      CHECK(std::memcmp(in + i * kLen, out + i * kLen, 8 + i) == 0, what << ": the bytes of " << i);
    }
    for (int i = first; i < first + n; ++i) {
      Completion s = c.Wait(p.a.tx, what);
      CHECK(!s.error && s.entry.op_context == &sctx[i], what << ": the send " << i);
    }
  };
  post(0, 12, false);
  check(0, 12, "FI_MORE then a last send");
  post(12, 4, true);
  check(12, 4, "FI_MORE with no request after it");
  Completion extra;
  CHECK(!c.Poll(p.a.tx, &extra, 100) && !c.Poll(p.b.rx, &extra, 100), "a completion came twice");
}

}  // namespace bypass::fi::conformance
