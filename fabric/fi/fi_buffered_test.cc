// Buffered receives (fi_msg(3) "Buffered Receives": FI_BUFFERED_RECV,
// FI_CLAIM, FI_DISCARD, FI_MORE, FI_OPT_BUFFERED_LIMIT/MIN), FI_MSG_PREFIX
// on FI_EP_DGRAM, and fi_hmem_override_ops (fi_domain(3)) with
// FI_HMEM_SYSTEM regions (fi_mr(3)), over the public API on two loopback
// domains (fi_test_util.h).
#include <rdma/fi_ext.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fabric/fi/fi_test_util.h"
#include "gtest/gtest.h"

namespace bypass::fi::testing {
namespace {

fi_info* BufferedHints() {
  fi_info* h = RdmHints(FI_MSG | FI_TAGGED);
  h->mode = FI_BUFFERED_RECV;
  return h;
}

// Opens a and b like Pair::Open, setting b's FI_OPT_BUFFERED_LIMIT (when
// non-zero) between fi_endpoint and fi_enable.
void OpenWithLimit(Pair& p, fi_info* hints, size_t limit) {
  fi_info* list = nullptr;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list), 0);
  fi_info* ia = ForDomain(list, kDevA);
  fi_info* ib = ForDomain(list, kDevB);
  ASSERT_NE(ia, nullptr);
  ASSERT_NE(ib, nullptr);
  p.a.Open(ia, FI_CQ_FORMAT_TAGGED);
  Node& b = p.b;
  b.info = fi_dupinfo(ib);
  fi_freeinfo(list);
  ASSERT_EQ(fi_fabric(b.info->fabric_attr, &b.fabric, nullptr), 0);
  ASSERT_EQ(fi_domain(b.fabric, b.info, &b.domain, nullptr), 0);
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  ASSERT_EQ(fi_av_open(b.domain, &av_attr, &b.av, nullptr), 0);
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_TAGGED;
  ASSERT_EQ(fi_cq_open(b.domain, &cq_attr, &b.txcq, nullptr), 0);
  ASSERT_EQ(fi_cq_open(b.domain, &cq_attr, &b.rxcq, nullptr), 0);
  ASSERT_EQ(fi_endpoint(b.domain, b.info, &b.ep, nullptr), 0);
  ASSERT_EQ(fi_ep_bind(b.ep, &b.av->fid, 0), 0);
  ASSERT_EQ(fi_ep_bind(b.ep, &b.txcq->fid, FI_TRANSMIT), 0);
  ASSERT_EQ(fi_ep_bind(b.ep, &b.rxcq->fid, FI_RECV), 0);
  if (limit != 0) {
    ASSERT_EQ(fi_setopt(&b.ep->fid, FI_OPT_ENDPOINT, FI_OPT_BUFFERED_LIMIT, &limit, sizeof limit),
              0);
  }
  ASSERT_EQ(fi_enable(b.ep), 0);
  std::vector<char> na = p.a.Name(), nb = b.Name();
  ASSERT_EQ(fi_av_insert(p.a.av, nb.data(), 1, &p.a.peer, 0, nullptr), 1);
  ASSERT_EQ(fi_av_insert(b.av, na.data(), 1, &b.peer, 0, nullptr), 1);
}

std::string Pattern(size_t n, char seed) {
  std::string s(n, 0);
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(seed + i % 23);
  return s;
}

// fi_recvmsg (or fi_trecvmsg) of the notification rc with `flags`.
ssize_t PostClaim(fid_ep* ep, fi_recv_context* rc, void* buf, size_t len, uint64_t flags,
                  bool tagged) {
  iovec iov{buf, len};
  if (tagged) {
    fi_msg_tagged m{&iov, nullptr, buf != nullptr ? 1u : 0u, FI_ADDR_UNSPEC, 0, 0, rc, 0};
    return fi_trecvmsg(ep, &m, flags);
  }
  fi_msg m{&iov, nullptr, buf != nullptr ? 1u : 0u, FI_ADDR_UNSPEC, rc, 0};
  return fi_recvmsg(ep, &m, flags);
}

class BufferedTest : public ::testing::Test {
 protected:
  void TearDown() override { p_.Close(); }
  void Open(size_t limit = 0) {
    fi_info* hints = BufferedHints();
    OpenWithLimit(p_, hints, limit);
    fi_freeinfo(hints);
  }
  // Sends `msg` from a (untagged, or tagged with tag) and waits for its
  // completion there.
  void SendFromA(const std::string& msg, bool tagged = false, uint64_t tag = 0) {
    if (tagged) {
      ASSERT_EQ(fi_tsend(p_.a.ep, msg.data(), msg.size(), nullptr, p_.a.peer, tag, nullptr), 0);
    } else {
      ASSERT_EQ(fi_send(p_.a.ep, msg.data(), msg.size(), nullptr, p_.a.peer, nullptr), 0);
    }
    fi_cq_tagged_entry e;
    ASSERT_TRUE(p_.Wait(p_.a.txcq, &e));
  }
  Pair p_;
};

TEST(BufferedInfo, ModeOfferedOnlyWhenAsked) {
  fi_info* hints = RdmHints();
  fi_info* list = nullptr;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list), 0);
  EXPECT_EQ(list->mode & FI_BUFFERED_RECV, 0u);
  fi_freeinfo(list);
  hints->mode = FI_BUFFERED_RECV | FI_CONTEXT;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list), 0);
  for (fi_info* i = list; i != nullptr; i = i->next) {
    EXPECT_EQ(i->mode, static_cast<uint64_t>(FI_BUFFERED_RECV));
    EXPECT_EQ(i->rx_attr->mode, static_cast<uint64_t>(FI_BUFFERED_RECV));
  }
  fi_freeinfo(list);
  fi_freeinfo(hints);
}

TEST_F(BufferedTest, SmallMessageNotifiedThenClaimed) {
  Open();
  size_t limit = 0, min = 0, len = sizeof(size_t);
  ASSERT_EQ(fi_getopt(&p_.b.ep->fid, FI_OPT_ENDPOINT, FI_OPT_BUFFERED_LIMIT, &limit, &len), 0);
  ASSERT_EQ(fi_getopt(&p_.b.ep->fid, FI_OPT_ENDPOINT, FI_OPT_BUFFERED_MIN, &min, &len), 0);
  EXPECT_GT(limit, 0u);
  const std::string msg = "buffered hello";
  SendFromA(msg);
  fi_cq_tagged_entry e{};
  fi_addr_t src = FI_ADDR_NOTAVAIL;
  ASSERT_TRUE(p_.Wait(p_.b.rxcq, &e, &src));
  EXPECT_EQ(e.flags, static_cast<uint64_t>(FI_RECV | FI_MSG));  // no FI_MORE
  EXPECT_EQ(e.len, msg.size());
  EXPECT_EQ(src, p_.b.peer);
  ASSERT_NE(e.buf, nullptr);
  EXPECT_EQ(std::string(static_cast<const char*>(e.buf), e.len), msg);
  auto* rc = static_cast<fi_recv_context*>(e.op_context);
  ASSERT_NE(rc, nullptr);
  EXPECT_EQ(rc->ep, p_.b.ep);
  EXPECT_EQ(rc->context, nullptr);
  int mine = 0;
  rc->context = &mine;  // fi_msg(3): the application may set it before claiming
  std::vector<char> out(64, 0);
  ASSERT_EQ(PostClaim(p_.b.ep, rc, out.data(), out.size(), FI_CLAIM, false), 0);
  ASSERT_TRUE(p_.Wait(p_.b.rxcq, &e));
  EXPECT_EQ(e.op_context, &mine);
  EXPECT_EQ(e.flags, static_cast<uint64_t>(FI_RECV | FI_MSG | FI_CLAIM));
  EXPECT_EQ(e.len, msg.size());
  EXPECT_EQ(std::string(out.data(), msg.size()), msg);
  // Claimed: the notification is gone.
  EXPECT_EQ(PostClaim(p_.b.ep, rc, out.data(), out.size(), FI_CLAIM, false), -FI_EINVAL);
}

TEST_F(BufferedTest, LargerThanTheLimitHasMoreAndClaimsWhole) {
  Open(/*limit=*/1024);
  size_t limit = 0, len = sizeof(size_t);
  ASSERT_EQ(fi_getopt(&p_.b.ep->fid, FI_OPT_ENDPOINT, FI_OPT_BUFFERED_LIMIT, &limit, &len), 0);
  EXPECT_EQ(limit, 1024u);
  // Set before fi_enable only (fi_endpoint(3)).
  EXPECT_EQ(fi_setopt(&p_.b.ep->fid, FI_OPT_ENDPOINT, FI_OPT_BUFFERED_LIMIT, &limit, sizeof limit),
            -FI_EOPBADSTATE);
  const std::string big = Pattern(200'000, 'a');  // past the eager size too: rendezvous
  SendFromA(big, /*tagged=*/true, 0x77);
  fi_cq_tagged_entry e{};
  ASSERT_TRUE(p_.Wait(p_.b.rxcq, &e));
  EXPECT_EQ(e.flags, static_cast<uint64_t>(FI_RECV | FI_TAGGED | FI_MORE));
  EXPECT_EQ(e.len, big.size());
  EXPECT_EQ(e.tag, 0x77u);
  EXPECT_EQ(std::memcmp(e.buf, big.data(), 1024), 0);  // at least FI_OPT_BUFFERED_MIN
  auto* rc = static_cast<fi_recv_context*>(e.op_context);
  std::vector<char> out(big.size());
  ASSERT_EQ(PostClaim(p_.b.ep, rc, out.data(), out.size(), FI_CLAIM, true), 0);
  ASSERT_TRUE(p_.Wait(p_.b.rxcq, &e));
  EXPECT_EQ(e.flags, static_cast<uint64_t>(FI_RECV | FI_TAGGED | FI_CLAIM));
  EXPECT_EQ(e.op_context, nullptr);
  EXPECT_EQ(e.tag, 0x77u);
  EXPECT_EQ(std::string(out.data(), out.size()), big);
}

TEST_F(BufferedTest, DiscardFreesWithoutACompletionAndOrderHolds) {
  Open();
  for (int i = 0; i < 5; ++i) SendFromA("m" + std::to_string(i));
  std::vector<fi_recv_context*> rcs;
  for (int i = 0; i < 5; ++i) {
    fi_cq_tagged_entry e{};
    ASSERT_TRUE(p_.Wait(p_.b.rxcq, &e));
    EXPECT_EQ(std::string(static_cast<const char*>(e.buf), e.len), "m" + std::to_string(i));
    rcs.push_back(static_cast<fi_recv_context*>(e.op_context));
  }
  for (fi_recv_context* rc : rcs) {
    ASSERT_EQ(PostClaim(p_.b.ep, rc, nullptr, 0, FI_DISCARD, false), 0);
  }
  for (int i = 0; i < 200; ++i) p_.Pump();
  fi_cq_tagged_entry e;
  EXPECT_EQ(fi_cq_read(p_.b.rxcq, &e, 1), -FI_EAGAIN);  // a discard completes silently
  EXPECT_EQ(PostClaim(p_.b.ep, rcs[0], nullptr, 0, FI_DISCARD, false), -FI_EINVAL);
  int stranger = 0;
  EXPECT_EQ(PostClaim(p_.b.ep, reinterpret_cast<fi_recv_context*>(&stranger), nullptr, 0,
                      FI_CLAIM, false),
            -FI_EINVAL);
}

TEST_F(BufferedTest, PostedReceivesStillTakeTheirMessagesAndClaimsTruncate) {
  Open();
  std::vector<char> posted(32, 0);
  int ctx = 0;
  ASSERT_EQ(fi_recv(p_.b.ep, posted.data(), posted.size(), nullptr, FI_ADDR_UNSPEC, &ctx), 0);
  SendFromA("to the posted one");
  fi_cq_tagged_entry e{};
  ASSERT_TRUE(p_.Wait(p_.b.rxcq, &e));
  EXPECT_EQ(e.op_context, &ctx);
  EXPECT_EQ(std::string(posted.data(), e.len), "to the posted one");
  SendFromA("longer than the claim buffer");
  ASSERT_TRUE(p_.Wait(p_.b.rxcq, &e));
  auto* rc = static_cast<fi_recv_context*>(e.op_context);
  char small[6];
  ASSERT_EQ(PostClaim(p_.b.ep, rc, small, sizeof small, FI_CLAIM, false), 0);
  fi_cq_err_entry err{};
  ASSERT_TRUE(p_.WaitError(p_.b.rxcq, &err));
  EXPECT_EQ(err.err, FI_ETRUNC);
  EXPECT_EQ(err.len, sizeof small);
  EXPECT_EQ(err.olen, std::strlen("longer than the claim buffer") - sizeof small);
  EXPECT_TRUE(err.flags & FI_CLAIM);
  EXPECT_EQ(std::string(small, sizeof small), "longer");
}

TEST_F(BufferedTest, OptionsAreCheckedAndOnlyOnBufferedEndpoints) {
  Open();
  size_t v = SIZE_MAX;
  // After fi_enable: refused.
  EXPECT_EQ(fi_setopt(&p_.b.ep->fid, FI_OPT_ENDPOINT, FI_OPT_BUFFERED_MIN, &v, sizeof v),
            -FI_EOPBADSTATE);
  // An endpoint without the mode: no such option (fi_endpoint(3)).
  size_t len = sizeof v;
  EXPECT_EQ(fi_getopt(&p_.a.ep->fid, FI_OPT_ENDPOINT, FI_OPT_BUFFERED_LIMIT, &v, &len), 0);
  fi_info* plain = RdmHints();
  fi_info* list = nullptr;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, plain, &list), 0);
  fid_ep* ep = nullptr;
  ASSERT_EQ(fi_endpoint(p_.a.domain, ForDomain(list, kDevA), &ep, nullptr), 0);
  EXPECT_EQ(fi_getopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_BUFFERED_LIMIT, &v, &len),
            -FI_ENOPROTOOPT);
  EXPECT_EQ(fi_close(&ep->fid), 0);
  // Before fi_enable: SIZE_MAX is the largest, above it -FI_EMSGSIZE.
  ASSERT_EQ(fi_endpoint(p_.a.domain, p_.a.info, &ep, nullptr), 0);
  v = SIZE_MAX;
  ASSERT_EQ(fi_setopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_BUFFERED_LIMIT, &v, sizeof v), 0);
  len = sizeof v;
  ASSERT_EQ(fi_getopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_BUFFERED_LIMIT, &v, &len), 0);
  EXPECT_EQ(v, p_.a.info->ep_attr->max_msg_size);
  v += 1;
  EXPECT_EQ(fi_setopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_BUFFERED_LIMIT, &v, sizeof v),
            -FI_EMSGSIZE);
  v = 100;
  EXPECT_EQ(fi_setopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_BUFFERED_MIN, &v, sizeof v), 0);
  EXPECT_EQ(fi_close(&ep->fid), 0);
  fi_freeinfo(list);
  fi_freeinfo(plain);
}

// A sender thread streams messages of many sizes (some past the limit,
// so FI_MORE) while the receiving thread, which progresses its side only
// inside fi_cq_read, claims every other notification and discards the
// rest: each arrives once, in order, intact.
TEST(BufferedThreads, StreamClaimedAndDiscardedWhileSending) {
  fi_info* hints = BufferedHints();
  hints->domain_attr->threading = FI_THREAD_SAFE;
  Pair p;
  OpenWithLimit(p, hints, 2048);
  fi_freeinfo(hints);
  constexpr int kMsgs = 300;
  std::vector<std::string> msgs;
  for (int i = 0; i < kMsgs; ++i) {
    msgs.push_back(Pattern(1 + (i * 37) % 5000, static_cast<char>('A' + i % 50)));
  }
  std::atomic<bool> send_failed{false};
  std::thread sender([&] {
    int done = 0;
    for (int i = 0; i < kMsgs; ++i) {
      ssize_t r;
      while ((r = fi_send(p.a.ep, msgs[i].data(), msgs[i].size(), nullptr, p.a.peer, nullptr)) ==
             -FI_EAGAIN) {
        fi_cq_tagged_entry e;
        if (fi_cq_read(p.a.txcq, &e, 1) == 1) ++done;
      }
      if (r != 0) send_failed = true;
    }
    for (int spins = 0; done < kMsgs && spins < 20'000'000; ++spins) {
      fi_cq_tagged_entry e;
      const ssize_t n = fi_cq_read(p.a.txcq, &e, 1);
      if (n == 1) ++done;
      if (n != 1 && n != -FI_EAGAIN) break;
    }
    if (done != kMsgs) send_failed = true;
  });
  // Notifications and claim completions share the receive CQ: a claim's
  // completion comes after the notifications already queued there.
  int next = 0, claimed = 0;
  std::vector<std::vector<char>> outs(kMsgs, std::vector<char>(5000));
  std::vector<int> ctxs(kMsgs);
  for (int spins = 0; (next < kMsgs || claimed < kMsgs / 2) && spins < 20'000'000; ++spins) {
    fi_cq_tagged_entry e{};
    const ssize_t n = fi_cq_read(p.b.rxcq, &e, 1);
    if (n == -FI_EAGAIN) continue;
    ASSERT_EQ(n, 1) << "an error entry on the receive CQ";
    if (e.flags & FI_CLAIM) {
      const int i = static_cast<int>(static_cast<int*>(e.op_context) - ctxs.data());
      ASSERT_TRUE(i >= 0 && i < kMsgs && i % 2 == 0) << "a claim with a context not posted";
      ASSERT_EQ(std::string(outs[i].data(), e.len), msgs[i]) << "claim of message " << i;
      ++claimed;
      continue;
    }
    ASSERT_LT(next, kMsgs) << "more notifications than messages";
    const std::string& want = msgs[next];
    ASSERT_EQ(e.len, want.size()) << "message " << next;
    EXPECT_EQ((e.flags & FI_MORE) != 0, want.size() > 2048) << "message " << next;
    ASSERT_EQ(std::memcmp(e.buf, want.data(), want.size()), 0) << "message " << next;
    auto* rc = static_cast<fi_recv_context*>(e.op_context);
    if (next % 2 == 0) {
      rc->context = &ctxs[next];
      ASSERT_EQ(PostClaim(p.b.ep, rc, outs[next].data(), outs[next].size(), FI_CLAIM, false), 0);
    } else {
      ASSERT_EQ(PostClaim(p.b.ep, rc, nullptr, 0, FI_DISCARD, false), 0);
    }
    ++next;
  }
  sender.join();
  EXPECT_FALSE(send_failed.load());
  EXPECT_EQ(next, kMsgs);
  EXPECT_EQ(claimed, kMsgs / 2);
  p.Close();
}

// What a buffered receive costs against a posted one, measured in the same
// run (printed, never asserted): n messages of `len` bytes a -> b, each
// sent after the previous one was consumed; posted: b's receive is posted
// first; buffered: b claims the notification.
double NsPerMessage(Pair& p, size_t len, int n, bool buffered) {
  std::string msg(len, 'm');
  std::vector<char> in(len);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    if (!buffered) {
      EXPECT_EQ(fi_recv(p.b.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    }
    EXPECT_EQ(fi_send(p.a.ep, msg.data(), msg.size(), nullptr, p.a.peer, nullptr), 0);
    fi_cq_tagged_entry e{};
    EXPECT_TRUE(p.Wait(p.b.rxcq, &e));
    if (buffered) {
      EXPECT_EQ(PostClaim(p.b.ep, static_cast<fi_recv_context*>(e.op_context), in.data(),
                          in.size(), FI_CLAIM, false),
                0);
      EXPECT_TRUE(p.Wait(p.b.rxcq, &e));
    }
    EXPECT_TRUE(p.Wait(p.a.txcq, &e));
  }
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now() - start).count();
  return static_cast<double>(ns) / n;
}

TEST(BufferedMeasure, BufferedAgainstPostedReceives) {
  fi_info* hints = BufferedHints();
  Pair p;
  OpenWithLimit(p, hints, 0);
  fi_freeinfo(hints);
  for (size_t len : {size_t{64}, size_t{4096}}) {
    NsPerMessage(p, len, 50, false);  // warm up
    const double posted = NsPerMessage(p, len, 500, false);
    const double buffered = NsPerMessage(p, len, 500, true);
    std::printf("buffered receive %zu B: %.0f ns per message, %.2fx of a posted receive (%.0f ns)\n",
                len, buffered, buffered / posted, posted);
  }
  p.Close();
}

// ---- FI_MSG_PREFIX on FI_EP_DGRAM ----

TEST(MsgPrefix, DatagramBuffersCarryThePrefix) {
  fi_info* hints = fi_allocinfo();
  hints->ep_attr->type = FI_EP_DGRAM;
  hints->caps = FI_MSG;
  fi_info* list = nullptr;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list), 0);
  EXPECT_EQ(list->mode & FI_MSG_PREFIX, 0u);  // not asked: not offered
  EXPECT_EQ(list->ep_attr->msg_prefix_size, 0u);
  fi_freeinfo(list);
  hints->mode = FI_MSG_PREFIX;
  Pair p;
  p.Open(hints);
  fi_freeinfo(hints);
  ASSERT_TRUE(p.b.info->mode & FI_MSG_PREFIX);
  const size_t prefix = p.b.info->ep_attr->msg_prefix_size;
  ASSERT_GT(prefix, 0u);
  EXPECT_EQ(prefix % 8, 0u);
  const std::string payload = "after the prefix";
  std::vector<char> in(prefix + 64, 'x');
  ASSERT_EQ(fi_recv(p.b.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  std::string out(prefix, '#');
  out += payload;
  ASSERT_EQ(fi_send(p.a.ep, out.data(), out.size(), nullptr, p.a.peer, nullptr), 0);
  fi_cq_tagged_entry e{};
  ASSERT_TRUE(p.Wait(p.b.rxcq, &e));
  EXPECT_EQ(e.len, prefix + payload.size());  // fi_cq(3): len counts the prefix
  EXPECT_EQ(std::string(in.data() + prefix, payload.size()), payload);
  // The prefix's bytes are not sent: the receiver's stay as they were.
  EXPECT_EQ(std::string(in.data(), prefix), std::string(prefix, 'x'));
  // A first buffer shorter than the prefix: the prefix cannot be split.
  char tiny[4];
  iovec iov[2] = {{tiny, sizeof tiny}, {in.data(), in.size()}};
  EXPECT_EQ(fi_sendv(p.a.ep, iov, nullptr, 2, p.a.peer, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_recvv(p.b.ep, iov, nullptr, 2, FI_ADDR_UNSPEC, nullptr), -FI_EINVAL);
  p.Close();
}

// ---- fi_hmem_override_ops ----

// Copies like memcpy and counts each call and byte (the check that every
// copy the provider makes to or from the application's memory goes through
// them).
std::atomic<size_t> g_from_calls{0}, g_to_calls{0}, g_from_bytes{0}, g_to_bytes{0};
std::atomic<int> g_bad_iface{0};

ssize_t CountingFrom(void* dest, size_t size, fi_hmem_iface iface, uint64_t, const iovec* iov,
                     size_t count, uint64_t offset) {
  if (iface != FI_HMEM_SYSTEM || offset != 0) g_bad_iface.fetch_add(1);
  g_from_calls.fetch_add(1);
  size_t done = 0;
  for (size_t i = 0; i < count && done < size; ++i) {
    const size_t n = std::min(iov[i].iov_len, size - done);
    std::memcpy(static_cast<char*>(dest) + done, iov[i].iov_base, n);
    done += n;
  }
  g_from_bytes.fetch_add(done);
  return static_cast<ssize_t>(done);
}

ssize_t CountingTo(fi_hmem_iface iface, uint64_t, const iovec* iov, size_t count, uint64_t offset,
                   const void* src, size_t size) {
  if (iface != FI_HMEM_SYSTEM || offset != 0) g_bad_iface.fetch_add(1);
  g_to_calls.fetch_add(1);
  size_t done = 0;
  for (size_t i = 0; i < count && done < size; ++i) {
    const size_t n = std::min(iov[i].iov_len, size - done);
    std::memcpy(iov[i].iov_base, static_cast<const char*>(src) + done, n);
    done += n;
  }
  g_to_bytes.fetch_add(done);
  return static_cast<ssize_t>(done);
}

TEST(HmemOverride, EveryCopyGoesThroughTheOverride) {
  fi_info* hints = RdmHints(FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC);
  Pair p;
  p.Open(hints);
  fi_freeinfo(hints);
  fi_hmem_override_ops ops{sizeof(fi_hmem_override_ops), CountingFrom, CountingTo};
  fi_hmem_override_ops bad = ops;
  bad.copy_to_hmem_iov = nullptr;
  EXPECT_EQ(fi_set_ops(&p.a.domain->fid, FI_SET_OPS_HMEM_OVERRIDE, 0, &bad, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_set_ops(&p.a.domain->fid, "no such ops", 0, &ops, nullptr), -FI_ENOSYS);
  ASSERT_EQ(fi_set_ops(&p.a.domain->fid, FI_SET_OPS_HMEM_OVERRIDE, 0, &ops, nullptr), 0);
  ASSERT_EQ(fi_set_ops(&p.b.domain->fid, FI_SET_OPS_HMEM_OVERRIDE, 0, &ops, nullptr), 0);
  g_from_calls = g_to_calls = g_from_bytes = g_to_bytes = 0;

  // Sends and receives of one buffer (which the engine would otherwise
  // read and write in place), small and large, untagged and tagged.
  size_t expect = 0;
  for (size_t n : {size_t{100}, size_t{300'000}}) {
    const std::string msg = Pattern(n, 'k');
    std::vector<char> in(n, 0);
    ASSERT_EQ(fi_trecv(p.b.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, 5, 0, nullptr), 0);
    ASSERT_EQ(fi_tsend(p.a.ep, msg.data(), msg.size(), nullptr, p.a.peer, 5, nullptr), 0);
    fi_cq_tagged_entry e;
    ASSERT_TRUE(p.Wait(p.b.rxcq, &e));
    ASSERT_TRUE(p.Wait(p.a.txcq, &e));
    EXPECT_EQ(std::string(in.data(), in.size()), msg);
    expect += n;
  }
  EXPECT_EQ(g_from_bytes.load(), expect);
  EXPECT_EQ(g_to_bytes.load(), expect);
  EXPECT_EQ(g_from_calls.load(), 2u);
  EXPECT_EQ(g_to_calls.load(), 2u);

  // An inject (gathered at once) into a posted receive.
  const uint64_t one = 1;
  std::vector<char> in(8, 0);
  ASSERT_EQ(fi_recv(p.b.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  ASSERT_EQ(fi_inject(p.a.ep, &one, sizeof one, p.a.peer), 0);
  fi_cq_tagged_entry e;
  ASSERT_TRUE(p.Wait(p.b.rxcq, &e));
  EXPECT_EQ(g_from_bytes.load(), expect + 8);
  EXPECT_EQ(g_to_bytes.load(), expect + 8);

  // Regions: system memory, named or not; device memory refused; remote
  // access refused under an override (peers' RMA would bypass it).
  uint64_t word = 0;
  iovec mem{&word, sizeof word};
  fi_mr_attr attr{};
  attr.mr_iov = &mem;
  attr.iov_count = 1;
  attr.access = FI_SEND | FI_RECV;
  attr.iface = FI_HMEM_SYSTEM;
  fid_mr* mr = nullptr;
  ASSERT_EQ(fi_mr_regattr(p.b.domain, &attr, 0, &mr), 0);
  EXPECT_EQ(fi_close(&mr->fid), 0);
  attr.access = FI_REMOTE_WRITE;
  EXPECT_EQ(fi_mr_regattr(p.b.domain, &attr, 0, &mr), -FI_EOPNOTSUPP);
  for (fi_hmem_iface dev : {FI_HMEM_CUDA, FI_HMEM_ROCR, FI_HMEM_ZE, FI_HMEM_NEURON,
                            FI_HMEM_SYNAPSEAI}) {
    attr.iface = dev;
    attr.access = FI_SEND;
    EXPECT_EQ(fi_mr_regattr(p.b.domain, &attr, 0, &mr), -FI_EOPNOTSUPP) << dev;
  }
  EXPECT_EQ(g_bad_iface.load(), 0);
  p.Close();
}

// The override is used for buffered-receive claims too, and only for the
// domain it was set on.
TEST(HmemOverride, ClaimsCopyThroughItAndOtherDomainsDoNot) {
  fi_info* hints = BufferedHints();
  Pair p;
  OpenWithLimit(p, hints, 0);
  fi_freeinfo(hints);
  fi_hmem_override_ops ops{sizeof(fi_hmem_override_ops), CountingFrom, CountingTo};
  ASSERT_EQ(fi_set_ops(&p.b.domain->fid, FI_SET_OPS_HMEM_OVERRIDE, 0, &ops, nullptr), 0);
  g_from_calls = g_to_calls = g_from_bytes = g_to_bytes = 0;
  const std::string msg = "claimed through the override";
  ASSERT_EQ(fi_send(p.a.ep, msg.data(), msg.size(), nullptr, p.a.peer, nullptr), 0);
  fi_cq_tagged_entry e{};
  ASSERT_TRUE(p.Wait(p.b.rxcq, &e));
  EXPECT_EQ(g_from_calls.load(), 0u);  // a's domain has no override
  EXPECT_EQ(g_to_calls.load(), 0u);    // nothing reached the application yet
  std::vector<char> out(msg.size());
  ASSERT_EQ(PostClaim(p.b.ep, static_cast<fi_recv_context*>(e.op_context), out.data(),
                      out.size(), FI_CLAIM, false),
            0);
  ASSERT_TRUE(p.Wait(p.b.rxcq, &e));
  EXPECT_EQ(std::string(out.data(), out.size()), msg);
  EXPECT_EQ(g_to_calls.load(), 1u);
  EXPECT_EQ(g_to_bytes.load(), msg.size());
  p.Close();
}

}  // namespace
}  // namespace bypass::fi::testing
