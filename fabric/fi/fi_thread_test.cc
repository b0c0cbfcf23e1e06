// The threading levels fi_domain(3) defines, each as the application may
// use it: FI_THREAD_SAFE (several threads on one endpoint), FI_THREAD_FID,
// FI_THREAD_ENDPOINT and FI_THREAD_COMPLETION (a thread per endpoint and its
// CQ, the endpoints sharing one domain and so one device queue), and
// FI_THREAD_DOMAIN (a thread per domain). Run under --config=tsan as well.
#include <rdma/fabric.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <array>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "fabric/fi/fi_test_util.h"
#include "gtest/gtest.h"

namespace bypass::fi::testing {
namespace {

constexpr int kSenders = 3;
constexpr int kPerSender = 300;

// more: each sender posts seven of every eight sends with FI_MORE
// (fi_tsendmsg), so the sends of one thread wait for its next (or anyone's
// progress) among the others' sends into the same engine, and a bundle
// may hold several threads' sends: each thread's order is kept, each
// message arrives and completes once.
void ConcurrentSendersAndAReceiver(bool more) {
  Pair p;
  fi_info* hints = RdmHints();
  hints->domain_attr->threading = FI_THREAD_SAFE;
  p.Open(hints);
  fi_freeinfo(hints);
  ASSERT_EQ(p.a.info->domain_attr->threading, FI_THREAD_SAFE);

  std::atomic<int> send_completions{0};
  std::atomic<bool> failed{false};
  std::atomic<bool> receiver_done{false};
  // One buffer per message, alive to the end: each stays untouched until
  // its completion (and its retransmissions) are done.
  std::vector<std::vector<std::array<uint64_t, 2>>> all(
      kSenders, std::vector<std::array<uint64_t, 2>>(kPerSender));
  std::vector<std::thread> threads;
  for (int t = 0; t < kSenders; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::array<uint64_t, 2>>& msgs = all[t];
      for (int i = 0; i < kPerSender && !failed; ++i) {
        uint64_t* payload = msgs[i].data();
        payload[0] = static_cast<uint64_t>(t);
        payload[1] = static_cast<uint64_t>(i);
        for (;;) {
          // Tag = sender, so each sender's messages stay in its order.
          iovec iov{payload, 2 * sizeof(uint64_t)};
          fi_msg_tagged m{};
          m.msg_iov = &iov;
          m.iov_count = 1;
          m.addr = p.a.peer;
          m.tag = static_cast<uint64_t>(t);
          const uint64_t flag = more && i % 8 != 7 && i + 1 < kPerSender ? FI_MORE : 0;
          const ssize_t r = fi_tsendmsg(p.a.ep, &m, FI_COMPLETION | flag);
          if (r == 0) break;
          if (r != -FI_EAGAIN) {
            ADD_FAILURE() << "fi_tsendmsg: " << fi_strerror(static_cast<int>(-r));
            failed = true;
            return;
          }
          fi_cq_tagged_entry e;
          if (fi_cq_read(p.a.txcq, &e, 1) == 1) ++send_completions;
        }
        fi_cq_tagged_entry e;
        if (fi_cq_read(p.a.txcq, &e, 1) == 1) ++send_completions;
      }
    });
  }
  // The receiver: one receive at a time per sender's tag, checking order.
  std::thread receiver([&] {
    std::vector<int> next(kSenders, 0);
    std::vector<std::array<uint64_t, 2>> bufs(kSenders);
    for (int t = 0; t < kSenders; ++t) {
      if (fi_trecv(p.b.ep, bufs[t].data(), 16, nullptr, FI_ADDR_UNSPEC, t, 0,
                   reinterpret_cast<void*>(static_cast<uintptr_t>(t))) != 0) {
        failed = true;
      }
    }
    int received = 0;
    while (received < kSenders * kPerSender && !failed) {
      fi_cq_tagged_entry e;
      const ssize_t n = fi_cq_read(p.b.rxcq, &e, 1);
      if (n == -FI_EAGAIN) continue;
      if (n != 1) {
        fi_cq_err_entry err{};
        fi_cq_readerr(p.b.rxcq, &err, 0);
        ADD_FAILURE() << "fi_cq_read: " << n << " " << err.err << " "
                      << (err.err_data ? static_cast<const char*>(err.err_data) : "");
        failed = true;
        break;
      }
      const int t = static_cast<int>(reinterpret_cast<uintptr_t>(e.op_context));
      if (bufs[t][0] != static_cast<uint64_t>(t) || bufs[t][1] != static_cast<uint64_t>(next[t])) {
        ADD_FAILURE() << "sender " << t << " message " << bufs[t][1] << ", expected " << next[t];
        failed = true;
        break;
      }
      ++next[t];
      ++received;
      if (next[t] < kPerSender &&
          fi_trecv(p.b.ep, bufs[t].data(), 16, nullptr, FI_ADDR_UNSPEC, t, 0, e.op_context) != 0) {
        failed = true;
      }
    }
    receiver_done = true;
  });
  for (std::thread& t : threads) t.join();
  // The senders are done posting; this thread progresses their endpoint
  // (retransmissions, retries) until the receiver has everything, and
  // collects the rest of the send completions.
  fi_cq_tagged_entry e;
  while (!failed && (!receiver_done || send_completions < kSenders * kPerSender)) {
    if (fi_cq_read(p.a.txcq, &e, 1) == 1) {
      ++send_completions;
    } else {
      p.Pump();
    }
  }
  receiver.join();
  ASSERT_FALSE(failed);
  EXPECT_EQ(send_completions, kSenders * kPerSender);
  p.Close();
}

TEST(ThreadSafeTest, ConcurrentSendersAndAReceiver) { ConcurrentSendersAndAReceiver(false); }

TEST(ThreadSafeTest, ConcurrentSendersWithFiMoreAndAReceiver) {
  ConcurrentSendersAndAReceiver(true);
}

// One side of a thread's conversation: an endpoint with its own CQ.
struct Lane {
  fid_cq* cq = nullptr;
  fid_ep* ep = nullptr;
  fi_addr_t peer = FI_ADDR_NOTAVAIL;
};

// A fabric and domain with an AV shared by its lanes.
struct Side {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  std::vector<Lane> lanes;

  void Open(const fi_info* entry, size_t n) {
    info = fi_dupinfo(entry);
    ASSERT_EQ(fi_fabric(info->fabric_attr, &fabric, nullptr), 0);
    ASSERT_EQ(fi_domain(fabric, info, &domain, nullptr), 0);
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    ASSERT_EQ(fi_av_open(domain, &av_attr, &av, nullptr), 0);
    lanes.resize(n);
    for (Lane& l : lanes) {
      fi_cq_attr cq_attr{};
      cq_attr.format = FI_CQ_FORMAT_TAGGED;
      ASSERT_EQ(fi_cq_open(domain, &cq_attr, &l.cq, nullptr), 0);
      ASSERT_EQ(fi_endpoint(domain, info, &l.ep, nullptr), 0);
      ASSERT_EQ(fi_ep_bind(l.ep, &av->fid, 0), 0);
      ASSERT_EQ(fi_ep_bind(l.ep, &l.cq->fid, FI_TRANSMIT | FI_RECV), 0);
      ASSERT_EQ(fi_enable(l.ep), 0);
    }
  }
  std::vector<char> Name(size_t i) const {
    std::vector<char> name(64);
    size_t len = name.size();
    EXPECT_EQ(fi_getname(&lanes[i].ep->fid, name.data(), &len), 0);
    name.resize(len);
    return name;
  }
  void Close() {
    for (Lane& l : lanes) {
      EXPECT_EQ(fi_close(&l.ep->fid), 0);
      EXPECT_EQ(fi_close(&l.cq->fid), 0);
    }
    EXPECT_EQ(fi_close(&av->fid), 0);
    EXPECT_EQ(fi_close(&domain->fid), 0);
    EXPECT_EQ(fi_close(&fabric->fid), 0);
    fi_freeinfo(info);
  }
};

// Lane i of a (domain A) and lane i of b (domain B), peers of each other.
void OpenSides(fi_threading level, size_t lanes, Side* a, Side* b) {
  fi_info* hints = RdmHints();
  hints->domain_attr->threading = level;
  fi_info* list = nullptr;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list), 0);
  fi_freeinfo(hints);
  ASSERT_EQ(ForDomain(list, kDevA)->domain_attr->threading, level);
  a->Open(ForDomain(list, kDevA), lanes);
  b->Open(ForDomain(list, kDevB), lanes);
  fi_freeinfo(list);
  for (size_t i = 0; i < lanes; ++i) {
    ASSERT_EQ(fi_av_insert(a->av, b->Name(i).data(), 1, &a->lanes[i].peer, 0, nullptr), 1);
    ASSERT_EQ(fi_av_insert(b->av, a->Name(i).data(), 1, &b->lanes[i].peer, 0, nullptr), 1);
  }
}

// Waits for one completion on lane l's CQ, progressing `others` (lanes this
// thread may touch) meanwhile; false on an error or none in many passes.
bool WaitOne(Lane& l, const std::vector<Lane*>& others) {
  for (int i = 0; i < 4'000'000; ++i) {
    fi_cq_tagged_entry e;
    const ssize_t n = fi_cq_read(l.cq, &e, 1);
    if (n == 1) return true;
    if (n != -FI_EAGAIN) return false;
    for (Lane* o : others) fi_cq_read(o->cq, nullptr, 0);
  }
  return false;
}

// kRounds ping-pongs from `ping` to `pong`, `drive` being every lane this
// thread drives (its side's lanes only, or both ends).
constexpr int kRounds = 200;
void PingPong(Lane& ping, Lane& pong, bool drive_pong, std::atomic<bool>* failed) {
  uint64_t out = 0, in = 0, back = 0;
  const std::vector<Lane*> ping_others = drive_pong ? std::vector<Lane*>{&pong}
                                                    : std::vector<Lane*>{};
  for (int r = 0; r < kRounds && !*failed; ++r) {
    out = static_cast<uint64_t>(r);
    bool ok = fi_recv(pong.ep, &in, sizeof(in), nullptr, FI_ADDR_UNSPEC, nullptr) == 0 &&
              fi_recv(ping.ep, &back, sizeof(back), nullptr, FI_ADDR_UNSPEC, nullptr) == 0 &&
              fi_send(ping.ep, &out, sizeof(out), nullptr, ping.peer, nullptr) == 0 &&
              WaitOne(ping, ping_others);  // the send
    ok = ok && WaitOne(pong, {&ping}) && in == out &&  // the receive
         fi_send(pong.ep, &in, sizeof(in), nullptr, pong.peer, nullptr) == 0 &&
         WaitOne(pong, {&ping}) && WaitOne(ping, ping_others) && back == out;
    if (!ok) {
      ADD_FAILURE() << "round " << r;
      *failed = true;
    }
  }
}

// FI_THREAD_COMPLETION, FI_THREAD_ENDPOINT, FI_THREAD_FID: each thread owns
// one endpoint and its CQ on each domain, nothing else; every endpoint of a
// domain shares the device queue, which the domain's lock serializes.
class ThreadPerEndpointTest : public ::testing::TestWithParam<fi_threading> {};

TEST_P(ThreadPerEndpointTest, ThreadsOnEndpointsOfOneDomain) {
  constexpr size_t kThreads = 3;
  Side a, b;
  OpenSides(GetParam(), kThreads, &a, &b);
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  for (size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] { PingPong(a.lanes[t], b.lanes[t], true, &failed); });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_FALSE(failed);
  a.Close();
  b.Close();
}

INSTANTIATE_TEST_SUITE_P(Levels, ThreadPerEndpointTest,
                         ::testing::Values(FI_THREAD_COMPLETION, FI_THREAD_ENDPOINT,
                                           FI_THREAD_FID, FI_THREAD_SAFE));

// FI_THREAD_DOMAIN: one thread per domain, each touching its own domain's
// objects only (no lock is taken).
TEST(ThreadDomainTest, ThreadPerDomain) {
  Side a, b;
  OpenSides(FI_THREAD_DOMAIN, 1, &a, &b);
  std::atomic<bool> failed{false};
  uint64_t in = 0;
  // B's thread echoes what it receives; A's thread sends and checks.
  std::thread echo([&] {
    Lane& l = b.lanes[0];
    for (int r = 0; r < kRounds && !failed; ++r) {
      if (fi_recv(l.ep, &in, sizeof(in), nullptr, FI_ADDR_UNSPEC, nullptr) != 0 ||
          !WaitOne(l, {}) || fi_send(l.ep, &in, sizeof(in), nullptr, l.peer, nullptr) != 0 ||
          !WaitOne(l, {})) {
        ADD_FAILURE() << "echo round " << r;
        failed = true;
      }
    }
  });
  Lane& l = a.lanes[0];
  for (int r = 0; r < kRounds && !failed; ++r) {
    uint64_t out = static_cast<uint64_t>(r), back = ~0ull;
    // Both completions (send and receive) in either order.
    if (fi_recv(l.ep, &back, sizeof(back), nullptr, FI_ADDR_UNSPEC, nullptr) != 0 ||
        fi_send(l.ep, &out, sizeof(out), nullptr, l.peer, nullptr) != 0 || !WaitOne(l, {}) ||
        !WaitOne(l, {}) || back != out) {
      ADD_FAILURE() << "round " << r;
      failed = true;
    }
  }
  echo.join();
  EXPECT_FALSE(failed);
  a.Close();
  b.Close();
}

}  // namespace
}  // namespace bypass::fi::testing
