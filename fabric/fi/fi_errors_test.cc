// fi_* conformance of the data path and the error model, written from the
// man pages (fi_endpoint(3), fi_msg(3), fi_rma(3), fi_cq(3), fi_eq(3),
// fi_av(3)): default op_flags, completion levels, one completion per
// operation, dead peers, readerr's err_data, bad arguments, removal with
// sends in flight, sending to oneself, FI_FENCE, FI_SELECTIVE_COMPLETION.
// Over two loopback domains in one process (fi_test_util.h), with a short
// peer timeout.
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "fabric/fi/fi_test_util.h"
#include "gtest/gtest.h"

namespace bypass::fi::testing {
namespace {

// Set before main, so the first fi_fabric reads it: a dead peer is given
// up after 300 ms of silence (the tests wait for it, never race it).
const bool kShortTimeout = [] {
  setenv("FI_BYPASS_PEER_TIMEOUT_MS", "300", 1);
  return true;
}();

// Progresses both sides until the pair has talked (both know each other);
// the send gets no completion where a selective CQ suppresses it.
void Handshake(Pair& p, bool tx_completes = true) {
  char in[8], out[8] = "hi";
  fi_cq_tagged_entry e{};
  ASSERT_EQ(fi_recv(p.b.ep, in, sizeof(in), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  ASSERT_EQ(fi_send(p.a.ep, out, sizeof(out), nullptr, p.a.peer, nullptr), 0);
  ASSERT_TRUE(p.Wait(p.b.rxcq, &e));
  if (tx_completes) {
    ASSERT_TRUE(p.Wait(p.a.txcq, &e));
  }
}

// Closes b's endpoint (its peer a sees silence from then on).
void KillB(Pair& p) {
  ASSERT_EQ(fi_close(&p.b.ep->fid), 0);
  p.b.ep = nullptr;
}

// A pair whose b has talked to a and died; a has an EQ if asked.
void OpenWithDeadPeer(Pair& p, bool eq, uint64_t tx_op_flags = 0) {
  p.a.want_eq = eq;
  fi_info* hints = RdmHints();
  hints->tx_attr->op_flags = tx_op_flags;
  p.Open(hints);
  fi_freeinfo(hints);
  Handshake(p);
  KillB(p);
}

// Reads the next EQ error of n's EQ, progressing n (its CQ reads run its
// engine); false if none comes within about 5 s (many peer timeouts).
bool WaitEqError(Node& n, fi_eq_err_entry* err) {
  for (int i = 0; i < 50'000'000; ++i) {
    uint32_t event = 0;
    char buf[64];
    const ssize_t r = fi_eq_read(n.eq, &event, buf, sizeof(buf), 0);
    if (r == -FI_EAVAIL) return fi_eq_readerr(n.eq, err, 0) == sizeof(*err);
    if (r != -FI_EAGAIN) return false;
    fi_cq_read(n.txcq, nullptr, 0);
  }
  return false;
}

// --- op_flags from the attributes and from FI_SETOPSFLAG ---

// rx_attr->op_flags = FI_MULTI_RECV: every fi_recv posts a multi-receive
// buffer, released (FI_MULTI_RECV in the last completion) when full.
TEST(OpFlagsTest, MultiRecvFromRxAttr) {
  Pair p;
  fi_info* hints = RdmHints(FI_MSG | FI_MULTI_RECV);
  hints->rx_attr->op_flags = FI_MULTI_RECV;
  p.Open(hints);
  fi_freeinfo(hints);
  size_t min = 0;
  ASSERT_EQ(fi_setopt(&p.b.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof(min)), 0);
  std::vector<char> buf(300);
  int rctx = 0;
  ASSERT_EQ(fi_recv(p.b.ep, buf.data(), buf.size(), nullptr, FI_ADDR_UNSPEC, &rctx), 0);
  char out[100];
  for (int i = 0; i < 3; ++i) {
    std::memset(out, 'a' + i, sizeof(out));
    ASSERT_EQ(fi_send(p.a.ep, out, sizeof(out), nullptr, p.a.peer, nullptr), 0);
    fi_cq_tagged_entry e{};
    ASSERT_TRUE(p.Wait(p.a.txcq, &e));
  }
  for (int i = 0; i < 3; ++i) {
    fi_cq_tagged_entry e{};
    ASSERT_TRUE(p.Wait(p.b.rxcq, &e)) << "message " << i << " never landed";
    EXPECT_EQ(e.op_context, &rctx);
    EXPECT_EQ(e.len, 100u);
    EXPECT_EQ(e.buf, buf.data() + 100 * i) << "one buffer takes all three";
    EXPECT_EQ((e.flags & FI_MULTI_RECV) != 0, i == 2) << "released when full";
  }
  EXPECT_EQ(buf[250], 'c');
  p.Close();
}

// FI_SETOPSFLAG changes the defaults of the calls without a flags
// argument: FI_INJECT_COMPLETE buffers a small send (complete after one
// pass of the sender alone); back to FI_TRANSMIT_COMPLETE it waits for the
// peer. FI_RECV | FI_MULTI_RECV makes fi_recv post multi-receive buffers.
TEST(OpFlagsTest, SetOpsFlag) {
  Pair p;
  fi_info* hints = RdmHints(FI_MSG | FI_MULTI_RECV);
  p.Open(hints);
  fi_freeinfo(hints);
  Handshake(p);
  uint64_t flags = FI_TRANSMIT;
  ASSERT_EQ(fi_control(&p.a.ep->fid, FI_GETOPSFLAG, &flags), 0);
  EXPECT_EQ(flags & (FI_INJECT_COMPLETE | FI_DELIVERY_COMPLETE), 0u);
  char in[64], out[64] = "x";
  fi_cq_tagged_entry e{};
  for (const uint64_t level : {uint64_t{FI_INJECT_COMPLETE}, uint64_t{FI_TRANSMIT_COMPLETE}}) {
    SCOPED_TRACE(level == FI_INJECT_COMPLETE ? "FI_INJECT_COMPLETE" : "FI_TRANSMIT_COMPLETE");
    flags = FI_TRANSMIT | FI_COMPLETION | level;
    ASSERT_EQ(fi_control(&p.a.ep->fid, FI_SETOPSFLAG, &flags), 0);
    ASSERT_EQ(fi_recv(p.b.ep, in, sizeof(in), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    int ctx = 0;
    ASSERT_EQ(fi_send(p.a.ep, out, sizeof(out), nullptr, p.a.peer, &ctx), 0);
    EXPECT_EQ(fi_cq_read(p.a.txcq, &e, 1), level == FI_INJECT_COMPLETE ? 1 : -FI_EAGAIN);
    if (level != FI_INJECT_COMPLETE) {
      ASSERT_TRUE(p.Wait(p.a.txcq, &e));
    }
    EXPECT_EQ(e.op_context, &ctx);
    ASSERT_TRUE(p.Wait(p.b.rxcq, &e));
  }
  flags = FI_RECV | FI_COMPLETION | FI_MULTI_RECV;
  ASSERT_EQ(fi_control(&p.b.ep->fid, FI_SETOPSFLAG, &flags), 0);
  size_t min = 0;
  ASSERT_EQ(fi_setopt(&p.b.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof(min)), 0);
  char multi[128];
  ASSERT_EQ(fi_recv(p.b.ep, multi, sizeof(multi), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  ASSERT_EQ(fi_send(p.a.ep, out, sizeof(out), nullptr, p.a.peer, nullptr), 0);
  ASSERT_EQ(fi_send(p.a.ep, out, sizeof(out), nullptr, p.a.peer, nullptr), 0);
  ASSERT_TRUE(p.Wait(p.b.rxcq, &e));
  EXPECT_EQ(e.buf, multi);
  ASSERT_TRUE(p.Wait(p.b.rxcq, &e));
  EXPECT_EQ(e.buf, multi + 64);
  EXPECT_TRUE(e.flags & FI_MULTI_RECV);
  p.Close();
}

// --- completion levels ---

// FI_DELIVERY_COMPLETE is offered for FI_EP_RDM (not for datagrams, which
// nobody acknowledges), and a send asking for it completes only once its
// bytes are in the receiver's buffer: checked at the moment the sender's
// completion arrives, before the receiver's CQ is read.
TEST(CompletionLevelTest, DeliveryComplete) {
  fi_info* dgram = fi_allocinfo();
  dgram->ep_attr->type = FI_EP_DGRAM;
  dgram->caps = FI_MSG;
  dgram->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
  fi_info* none = nullptr;
  EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, dgram, &none), -FI_ENODATA);
  fi_freeinfo(dgram);

  Pair p;
  fi_info* hints = RdmHints();
  hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
  p.Open(hints);
  fi_freeinfo(hints);
  EXPECT_TRUE(p.a.info->tx_attr->op_flags & FI_DELIVERY_COMPLETE);
  Handshake(p);
  for (const size_t len : {size_t{64}, size_t{100'000}}) {
    SCOPED_TRACE(len);
    std::vector<char> in(len, 0), out(len, 'd');
    ASSERT_EQ(fi_recv(p.b.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    int ctx = 0;
    ASSERT_EQ(fi_send(p.a.ep, out.data(), len, nullptr, p.a.peer, &ctx), 0);
    fi_cq_tagged_entry e{};
    ASSERT_TRUE(p.Wait(p.a.txcq, &e));
    EXPECT_EQ(e.op_context, &ctx);
    EXPECT_EQ(in.front(), 'd');
    EXPECT_EQ(in.back(), 'd') << "completed before the data was placed";
    ASSERT_TRUE(p.Wait(p.b.rxcq, &e));
  }
  p.Close();
}

// --- one completion per operation; failures after completion ---

// A buffered (FI_INJECT_COMPLETE) send completes once, successfully; its
// peer then dies: the failure is an EQ error event naming the peer, never
// a second CQ entry. A transmit-complete send to the dead peer completes
// once, in error, with its op_context and prov_errno.
TEST(ErrorModelTest, OneCompletionPerOperationWhenThePeerDies) {
  Pair p;
  OpenWithDeadPeer(p, /*eq=*/true);
  char out[32] = "lost";
  int buffered_ctx = 0, tx_ctx = 0;
  fi_msg m{};
  iovec iov{out, sizeof(out)};
  m.msg_iov = &iov;
  m.iov_count = 1;
  m.addr = p.a.peer;
  m.context = &buffered_ctx;
  ASSERT_EQ(fi_sendmsg(p.a.ep, &m, FI_COMPLETION | FI_INJECT_COMPLETE), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(fi_cq_read(p.a.txcq, &e, 1), 1);
  EXPECT_EQ(e.op_context, &buffered_ctx);
  ASSERT_EQ(fi_send(p.a.ep, out, sizeof(out), nullptr, p.a.peer, &tx_ctx), 0);

  fi_eq_err_entry eqerr{};
  ASSERT_TRUE(WaitEqError(p.a, &eqerr)) << "no EQ event for the dead peer";
  EXPECT_EQ(eqerr.err, FI_EIO);
  EXPECT_EQ(eqerr.data, p.a.peer);
  EXPECT_EQ(eqerr.fid, &p.a.ep->fid);
  ASSERT_NE(eqerr.err_data, nullptr);
  EXPECT_GT(eqerr.err_data_size, 0u);

  // The transmit-complete send: exactly one completion, an error with its context.
  fi_cq_err_entry err{};
  ASSERT_TRUE(p.WaitError(p.a.txcq, &err));
  EXPECT_EQ(err.op_context, &tx_ctx);
  EXPECT_EQ(err.prov_errno, ETIMEDOUT);
  EXPECT_NE(err.err, 0);
  // Nothing more in the CQ (the buffered send's failure is not there).
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(fi_cq_read(p.a.txcq, &e, 1), -FI_EAGAIN);
  p.Close();
}

// Without an EQ the failure after completion is owed to the next
// operation to that peer: -FI_EIO, once.
TEST(ErrorModelTest, LateFailureWithoutEqFailsTheNextOperation) {
  Pair p;
  OpenWithDeadPeer(p, /*eq=*/false, FI_INJECT_COMPLETE);
  char out[16] = "x";
  ASSERT_EQ(fi_inject(p.a.ep, out, sizeof(out), p.a.peer), 0);
  // Progress for longer than the peer timeout: the engine has given the
  // inject up by then (its timer runs on the first pass after 300 ms).
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (std::chrono::steady_clock::now() < until) {
    fi_cq_tagged_entry e{};
    ASSERT_NE(fi_cq_read(p.a.txcq, &e, 1), -FI_EAVAIL)
        << "an inject's failure must not be a CQ entry";
  }
  ssize_t ret = fi_send(p.a.ep, out, 0, nullptr, p.a.peer, nullptr);
  EXPECT_EQ(ret, -FI_EIO) << "the failure was never reported";
  p.Close();
}

// A dead sender: the receive directed to it (the receiver has nothing else
// pending) completes with -FI_EIO and its context, and the EQ names it.
TEST(ErrorModelTest, DeadPeerFailsDirectedReceives) {
  Pair p;
  p.a.want_eq = true;
  fi_info* hints = RdmHints(FI_MSG | FI_TAGGED | FI_DIRECTED_RECV);
  p.Open(hints);
  fi_freeinfo(hints);
  // b talks first, so a has heard of it.
  char in[8], out[8] = "hi";
  fi_cq_tagged_entry e{};
  ASSERT_EQ(fi_recv(p.a.ep, in, sizeof(in), nullptr, p.a.peer, nullptr), 0);
  ASSERT_EQ(fi_send(p.b.ep, out, sizeof(out), nullptr, p.b.peer, nullptr), 0);
  ASSERT_TRUE(p.Wait(p.a.rxcq, &e));
  ASSERT_TRUE(p.Wait(p.b.txcq, &e));
  int rctx = 0;
  ASSERT_EQ(fi_trecv(p.a.ep, in, sizeof(in), nullptr, p.a.peer, 7, 0, &rctx), 0);
  KillB(p);
  fi_eq_err_entry eqerr{};
  ASSERT_TRUE(WaitEqError(p.a, &eqerr)) << "no EQ event for the dead peer";
  EXPECT_EQ(eqerr.data, p.a.peer);
  fi_cq_err_entry err{};
  ASSERT_TRUE(p.WaitError(p.a.rxcq, &err));
  EXPECT_EQ(err.err, FI_EIO);
  EXPECT_EQ(err.op_context, &rctx);
  p.Close();
}

// --- fi_cq_readerr / fi_eq_readerr: err_data ---

// A truncated receive gives p.b an error to read.
void Truncate(Pair& p, int* ctx) {
  char in[4], out[64] = "a message longer than the buffer";
  ASSERT_EQ(fi_recv(p.b.ep, in, sizeof(in), nullptr, FI_ADDR_UNSPEC, ctx), 0);
  ASSERT_EQ(fi_send(p.a.ep, out, sizeof(out), nullptr, p.a.peer, nullptr), 0);
  fi_cq_tagged_entry e{};
  ASSERT_TRUE(p.Wait(p.a.txcq, &e));
  for (int i = 0; i < 1'000'000 && fi_cq_read(p.b.rxcq, &e, 1) != -FI_EAVAIL; ++i) p.Pump();
}

// API 1.5 and later: err_data_size 0 on input -> provider memory; n > 0 ->
// at most n bytes into the application's buffer, NUL-terminated.
TEST(ReadErrTest, ErrDataSizes) {
  Pair p;
  fi_info* hints = RdmHints();
  p.Open(hints);
  fi_freeinfo(hints);
  for (const size_t size : {size_t{0}, size_t{1}, size_t{5}, size_t{512}}) {
    SCOPED_TRACE(size);
    int ctx = 0;
    Truncate(p, &ctx);
    char guard[600];
    std::memset(guard, 0x5a, sizeof(guard));
    fi_cq_err_entry err{};
    err.err_data = size > 0 ? guard : nullptr;
    err.err_data_size = size;
    ASSERT_EQ(fi_cq_readerr(p.b.rxcq, &err, 0), 1);
    EXPECT_EQ(err.err, FI_ETRUNC);
    EXPECT_EQ(err.op_context, &ctx);
    ASSERT_NE(err.err_data, nullptr);
    if (size == 0) {
      EXPECT_GT(err.err_data_size, 1u);
      EXPECT_EQ(std::strlen(static_cast<char*>(err.err_data)) + 1, err.err_data_size);
    } else {
      EXPECT_EQ(err.err_data, guard);
      EXPECT_LE(err.err_data_size, size);
      EXPECT_EQ(guard[err.err_data_size - 1], '\0');
      for (size_t i = err.err_data_size; i < sizeof(guard); ++i) {
        ASSERT_EQ(guard[i], 0x5a) << "wrote past err_data_size at " << i;
      }
    }
    const char* text = fi_cq_strerror(p.b.rxcq, err.prov_errno, err.err_data, nullptr, 0);
    ASSERT_NE(text, nullptr);
    char small[8];
    EXPECT_EQ(fi_cq_strerror(p.b.rxcq, err.prov_errno, err.err_data, small, sizeof(small)), small);
    EXPECT_LT(std::strlen(small), sizeof(small));
  }
  p.Close();
}

// An application of API 1.4 has a shorter fi_cq_err_entry (no
// err_data_size) and always gets err_data in provider memory: nothing is
// written past the 1.4 struct, and err_data is not taken from it.
TEST(ReadErrTest, Api14GetsProviderErrData) {
  Pair p;
  fi_info* hints = RdmHints();
  hints->domain_attr->mr_mode = FI_MR_UNSPEC;
  p.Open(hints, FI_CQ_FORMAT_TAGGED, 0, FI_VERSION(1, 4));
  fi_freeinfo(hints);
  int ctx = 0;
  Truncate(p, &ctx);
  constexpr size_t k14 = offsetof(fi_cq_err_entry, err_data_size);
  alignas(fi_cq_err_entry) unsigned char raw[sizeof(fi_cq_err_entry)];
  std::memset(raw, 0xa5, sizeof(raw));  // err_data: garbage, as in a 1.4 caller's stack
  auto* err = reinterpret_cast<fi_cq_err_entry*>(raw);
  ASSERT_EQ(fi_cq_readerr(p.b.rxcq, err, 0), 1);
  for (size_t i = k14; i < sizeof(raw); ++i) ASSERT_EQ(raw[i], 0xa5) << "byte " << i;
  EXPECT_EQ(err->op_context, &ctx);
  EXPECT_EQ(err->err, FI_ETRUNC);
  ASSERT_NE(err->err_data, nullptr);
  EXPECT_GT(std::strlen(static_cast<const char*>(err->err_data)), 0u);
  p.Close();
}

// fi_eq_readerr follows the same rule (an EQ error from a dead peer).
TEST(ReadErrTest, EqErrDataSize) {
  Pair p;
  OpenWithDeadPeer(p, /*eq=*/true);
  char out[8] = "x";
  ASSERT_EQ(fi_inject(p.a.ep, out, sizeof(out), p.a.peer), 0);
  char guard[16];
  std::memset(guard, 0x5a, sizeof(guard));
  fi_eq_err_entry err{};
  err.err_data = guard;
  err.err_data_size = 6;
  ASSERT_TRUE(WaitEqError(p.a, &err));
  EXPECT_EQ(err.err_data, guard);
  EXPECT_EQ(err.err_data_size, 6u);
  EXPECT_EQ(guard[5], '\0');
  for (size_t i = 6; i < sizeof(guard); ++i) EXPECT_EQ(guard[i], 0x5a);
  p.Close();
}

// --- bad arguments: a negative errno, never a crash ---

TEST(BadArgsTest, IovOverflowLimitsAndNulls) {
  Pair p;
  fi_info* hints = RdmHints(FI_MSG | FI_TAGGED | FI_RMA);
  p.Open(hints);
  fi_freeinfo(hints);
  const size_t limit = p.a.info->tx_attr->iov_limit;
  ASSERT_GE(limit, 1u);
  EXPECT_EQ(p.a.info->rx_attr->iov_limit, limit);
  static char a[16], b[16];
  const iovec overflow[2] = {{a, SIZE_MAX}, {b, 16}};
  std::vector<iovec> many(limit + 1, iovec{a, 1});
  fi_addr_t peer = p.a.peer;
  EXPECT_EQ(fi_sendv(p.a.ep, overflow, nullptr, 2, peer, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_tsendv(p.a.ep, overflow, nullptr, 2, peer, 1, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_recvv(p.a.ep, overflow, nullptr, 2, FI_ADDR_UNSPEC, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_trecvv(p.a.ep, overflow, nullptr, 2, FI_ADDR_UNSPEC, 0, 0, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_writev(p.a.ep, overflow, nullptr, 2, peer, 0, 0, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_readv(p.a.ep, overflow, nullptr, 2, peer, 0, 0, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_sendv(p.a.ep, many.data(), nullptr, many.size(), peer, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_recvv(p.a.ep, many.data(), nullptr, many.size(), FI_ADDR_UNSPEC, nullptr),
            -FI_EINVAL);
  EXPECT_EQ(fi_writev(p.a.ep, many.data(), nullptr, many.size(), peer, 0, 0, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_sendv(p.a.ep, nullptr, nullptr, 1, peer, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_send(p.a.ep, nullptr, 8, nullptr, peer, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_recv(p.a.ep, nullptr, 8, nullptr, FI_ADDR_UNSPEC, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_sendmsg(p.a.ep, nullptr, 0), -FI_EINVAL);
  EXPECT_EQ(fi_recvmsg(p.a.ep, nullptr, 0), -FI_EINVAL);
  EXPECT_EQ(fi_tsendmsg(p.a.ep, nullptr, 0), -FI_EINVAL);
  EXPECT_EQ(fi_trecvmsg(p.a.ep, nullptr, 0), -FI_EINVAL);
  EXPECT_EQ(fi_writemsg(p.a.ep, nullptr, 0), -FI_EINVAL);
  EXPECT_EQ(fi_readmsg(p.a.ep, nullptr, 0), -FI_EINVAL);
  fi_msg m{};
  m.msg_iov = overflow;
  m.iov_count = 2;
  m.addr = peer;
  EXPECT_EQ(fi_sendmsg(p.a.ep, &m, 0), -FI_EINVAL);
  m.msg_iov = nullptr;
  EXPECT_EQ(fi_sendmsg(p.a.ep, &m, 0), -FI_EINVAL);
  fi_msg_rma rm{};
  const iovec one{a, 8};
  const fi_rma_iov two_rma[2] = {{0, 8, 0}, {0, 8, 0}};
  rm.msg_iov = &one;
  rm.iov_count = 1;
  rm.addr = peer;
  rm.rma_iov = two_rma;
  rm.rma_iov_count = p.a.info->tx_attr->rma_iov_limit + 1;
  EXPECT_EQ(fi_writemsg(p.a.ep, &rm, 0), -FI_EINVAL);
  rm.rma_iov = nullptr;
  rm.rma_iov_count = 1;
  EXPECT_EQ(fi_writemsg(p.a.ep, &rm, 0), -FI_EINVAL);
  // An address never inserted.
  EXPECT_EQ(fi_send(p.a.ep, a, 8, nullptr, 1234, nullptr), -FI_EINVAL);
  p.Close();
}

// --- fi_av_remove with a buffered send in flight ---

// An inject (complete at once, nothing to report) and a buffered send are
// in flight when their address is removed: they finish first, and the
// peer (progressing on its own thread, as another process would) gets both.
TEST(AvRemoveTest, BufferedSendsInFlightFinishFirst) {
  Pair p;
  fi_info* hints = RdmHints();
  hints->tx_attr->op_flags = FI_INJECT_COMPLETE;
  p.Open(hints);
  fi_freeinfo(hints);
  Handshake(p);
  char first[16] = "inject", second[16] = "buffered";
  ASSERT_EQ(fi_inject(p.a.ep, first, sizeof(first), p.a.peer), 0);
  int ctx = 0;
  ASSERT_EQ(fi_send(p.a.ep, second, sizeof(second), nullptr, p.a.peer, &ctx), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(fi_cq_read(p.a.txcq, &e, 1), 1);  // buffered: complete already
  EXPECT_EQ(e.op_context, &ctx);
  // b receives on its own thread from now on (b's domain is b's alone).
  std::atomic<int> got{0};
  char in[2][16] = {};
  std::thread receiver([&] {
    for (char* buf : {in[0], in[1]}) {
      if (fi_recv(p.b.ep, buf, 16, nullptr, FI_ADDR_UNSPEC, nullptr) != 0) return;
    }
    for (int i = 0; i < 50'000'000 && got.load() < 2; ++i) {
      fi_cq_tagged_entry r{};
      if (fi_cq_read(p.b.rxcq, &r, 1) == 1) got.fetch_add(1);
    }
  });
  fi_addr_t peer = p.a.peer;
  EXPECT_EQ(fi_av_remove(p.a.av, &peer, 1, 0), 0);
  receiver.join();
  EXPECT_EQ(got.load(), 2) << "a send in flight vanished with its address";
  EXPECT_STREQ(in[0], "inject");
  EXPECT_STREQ(in[1], "buffered");
  EXPECT_EQ(fi_cq_read(p.a.txcq, &e, 1), -FI_EAGAIN);
  p.Close();
}

// --- sending to oneself ---

TEST(SelfTest, SendToOwnAddress) {
  Pair p;
  fi_info* hints = RdmHints();
  p.Open(hints);
  fi_freeinfo(hints);
  std::vector<char> name = p.a.Name();
  fi_addr_t self = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(fi_av_insert(p.a.av, name.data(), 1, &self, 0, nullptr), 1);
  for (const size_t len : {size_t{32}, size_t{100'000}}) {
    SCOPED_TRACE(len);
    std::vector<char> in(len, 0), out(len, 's');
    int rctx = 0, sctx = 0;
    ASSERT_EQ(fi_trecv(p.a.ep, in.data(), len, nullptr, FI_ADDR_UNSPEC, 5, 0, &rctx), 0);
    ASSERT_EQ(fi_tsend(p.a.ep, out.data(), len, nullptr, self, 5, &sctx), 0);
    fi_cq_tagged_entry e{};
    ASSERT_TRUE(p.Wait(p.a.rxcq, &e)) << "a send to oneself never arrived";
    EXPECT_EQ(e.op_context, &rctx);
    EXPECT_EQ(e.len, len);
    EXPECT_EQ(in.back(), 's');
    ASSERT_TRUE(p.Wait(p.a.txcq, &e));
    EXPECT_EQ(e.op_context, &sctx);
  }
  p.Close();
}

// --- FI_FENCE and FI_SELECTIVE_COMPLETION ---

// post() posts a fenced operation (context fenced) while an earlier one
// (context earlier) is incomplete: -FI_EAGAIN; once the earlier one has
// completed it posts, and completes.
template <class Post>
void ExpectFenceWaits(Pair& p, void* earlier, void* fenced, Post post) {
  EXPECT_EQ(post(), -FI_EAGAIN);
  fi_cq_tagged_entry e{};
  ASSERT_TRUE(p.Wait(p.a.txcq, &e));
  EXPECT_EQ(e.op_context, earlier);
  ASSERT_EQ(post(), 0);
  ASSERT_TRUE(p.Wait(p.a.txcq, &e));
  EXPECT_EQ(e.op_context, fenced);
}

// A fenced send waits (-FI_EAGAIN) while an earlier send to the peer is
// not complete, and goes once it is.
TEST(FenceTest, FencedSendWaitsForEarlierOnes) {
  Pair p;
  fi_info* hints = RdmHints();
  p.Open(hints);
  fi_freeinfo(hints);
  Handshake(p);
  char in[2][16], out[16] = "x";
  ASSERT_EQ(fi_recv(p.b.ep, in[0], 16, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  ASSERT_EQ(fi_recv(p.b.ep, in[1], 16, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  int first = 0, fenced = 0;
  ASSERT_EQ(fi_send(p.a.ep, out, sizeof(out), nullptr, p.a.peer, &first), 0);
  iovec iov{out, sizeof(out)};
  fi_msg m{};
  m.msg_iov = &iov;
  m.iov_count = 1;
  m.addr = p.a.peer;
  m.context = &fenced;
  // b has not run: the first send is not acknowledged.
  ExpectFenceWaits(p, &first, &fenced,
                   [&] { return fi_sendmsg(p.a.ep, &m, FI_COMPLETION | FI_FENCE); });
  fi_cq_tagged_entry e{};
  ASSERT_TRUE(p.Wait(p.b.rxcq, &e));
  ASSERT_TRUE(p.Wait(p.b.rxcq, &e));
  p.Close();
}

// A fenced RMA read after a write to the same place: it waits until the
// write has completed (the target's answer included), then reads what the
// write put there.
TEST(FenceTest, FencedReadAfterWrite) {
  Pair p;
  fi_info* hints = RdmHints(FI_MSG | FI_RMA);
  p.Open(hints);
  fi_freeinfo(hints);
  std::vector<uint8_t> target(256, 0), local(256, 0x77), back(256, 0);
  fid_mr* mr = nullptr;
  ASSERT_EQ(fi_mr_reg(p.b.domain, target.data(), target.size(), FI_REMOTE_WRITE | FI_REMOTE_READ,
                      0, 0, 0, &mr, nullptr),
            0);
  const uint64_t addr = reinterpret_cast<uint64_t>(target.data());  // FI_MR_VIRT_ADDR
  int wctx = 0, rctx = 0;
  ASSERT_EQ(fi_write(p.a.ep, local.data(), local.size(), nullptr, p.a.peer, addr, fi_mr_key(mr),
                     &wctx),
            0);
  iovec iov{back.data(), back.size()};
  fi_rma_iov rma{addr, back.size(), fi_mr_key(mr)};
  fi_msg_rma m{};
  m.msg_iov = &iov;
  m.iov_count = 1;
  m.addr = p.a.peer;
  m.rma_iov = &rma;
  m.rma_iov_count = 1;
  m.context = &rctx;
  ExpectFenceWaits(p, &wctx, &rctx,
                   [&] { return fi_readmsg(p.a.ep, &m, FI_COMPLETION | FI_FENCE); });
  EXPECT_EQ(back, local);
  EXPECT_EQ(fi_close(&mr->fid), 0);
  p.Close();
}

// FI_SELECTIVE_COMPLETION (a bind flag): only operations with
// FI_COMPLETION (on the call, or in op_flags) get an entry; without the
// bind flag every operation gets one, whatever its flags.
TEST(SelectiveTest, OnlyWhatAsksCompletes) {
  for (const bool selective : {true, false}) {
    SCOPED_TRACE(selective ? "FI_SELECTIVE_COMPLETION" : "plain bind");
    Pair p;
    fi_info* hints = RdmHints();
    p.Open(hints, FI_CQ_FORMAT_TAGGED, selective ? FI_SELECTIVE_COMPLETION : 0);
    fi_freeinfo(hints);
    Handshake(p, /*tx_completes=*/!selective);
    char in[16], out[16] = "x";
    int quiet = 0, loud = 0;
    iovec iov{out, sizeof(out)};
    fi_msg m{};
    m.msg_iov = &iov;
    m.iov_count = 1;
    m.addr = p.a.peer;
    fi_cq_tagged_entry e{};
    for (int i = 0; i < 2; ++i) {
      ASSERT_EQ(fi_recv(p.b.ep, in, sizeof(in), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    }
    m.context = &quiet;
    ASSERT_EQ(fi_sendmsg(p.a.ep, &m, 0), 0);
    m.context = &loud;
    ASSERT_EQ(fi_sendmsg(p.a.ep, &m, FI_COMPLETION), 0);
    ASSERT_TRUE(p.Wait(p.b.rxcq, &e));
    ASSERT_TRUE(p.Wait(p.b.rxcq, &e));
    ASSERT_TRUE(p.Wait(p.a.txcq, &e));
    if (!selective) {
      EXPECT_EQ(e.op_context, &quiet);
      ASSERT_TRUE(p.Wait(p.a.txcq, &e));
    }
    EXPECT_EQ(e.op_context, &loud);
    EXPECT_EQ(fi_cq_read(p.a.txcq, &e, 1), -FI_EAGAIN);
    p.Close();
  }
}

}  // namespace
}  // namespace bypass::fi::testing
