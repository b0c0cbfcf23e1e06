// Waiting and progress, as fi_cq(3), fi_cntr(3), fi_eq(3), fi_poll(3) and
// fi_domain(3) describe them: wait objects handed to epoll after
// fi_trywait, blocking reads that sleep (the process's CPU time while a
// thread blocks), fi_cq_signal, wait sets, poll sets and FI_PROGRESS_AUTO,
// over two loopback domains in one process (fi_test_util.h).
#include <pthread.h>
#include <rdma/fi_eq.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/poll.h>
#include <sys/resource.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

#include "fabric/fi/fi_test_util.h"
#include "gtest/gtest.h"

namespace bypass::fi::testing {
namespace {

constexpr auto kHang = std::chrono::seconds(20);  // a hang, never a measure of speed

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}
double WallSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// What one side's objects wait with.
struct Waits {
  fi_wait_obj cq = FI_WAIT_NONE;
  fid_wait* set = nullptr;  // with FI_WAIT_SET
  bool cntr = false;        // a counter bound FI_RECV, waiting like the CQs
  fi_progress progress = FI_PROGRESS_UNSPEC;
  fi_threading threading = FI_THREAD_SAFE;
};

// One side: fabric, domain, AV, CQs (and a counter) with the given waits.
struct Side {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_cq* tx = nullptr;
  fid_cq* rx = nullptr;
  fid_cntr* cntr = nullptr;
  fid_ep* ep = nullptr;
  fi_addr_t peer = FI_ADDR_NOTAVAIL;

  // Both sides' domains open before either endpoint (OpenEp): the loopback
  // device rewires its segment when a port opens, which REQUIRES no other
  // port in a burst (driver/loopback/loopback_device.h), and an
  // FI_PROGRESS_AUTO domain progresses its endpoints from the start.
  void OpenDomain(const fi_info* entry, fid_fabric* shared_fabric) {
    info = fi_dupinfo(entry);
    ASSERT_NE(info, nullptr);
    if (shared_fabric != nullptr) {
      fabric = shared_fabric;
    } else {
      ASSERT_EQ(fi_fabric(info->fabric_attr, &fabric, nullptr), 0);
    }
    ASSERT_EQ(fi_domain(fabric, info, &domain, nullptr), 0);
  }
  void OpenEp(const Waits& w) {
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    ASSERT_EQ(fi_av_open(domain, &av_attr, &av, nullptr), 0);
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    cq_attr.wait_obj = w.cq;
    cq_attr.wait_set = w.set;
    ASSERT_EQ(fi_cq_open(domain, &cq_attr, &tx, &tx), 0);
    ASSERT_EQ(fi_cq_open(domain, &cq_attr, &rx, &rx), 0);
    ASSERT_EQ(fi_endpoint(domain, info, &ep, nullptr), 0);
    ASSERT_EQ(fi_ep_bind(ep, &av->fid, 0), 0);
    ASSERT_EQ(fi_ep_bind(ep, &tx->fid, FI_TRANSMIT), 0);
    ASSERT_EQ(fi_ep_bind(ep, &rx->fid, FI_RECV), 0);
    if (w.cntr) {
      fi_cntr_attr ca{};
      ca.events = FI_CNTR_EVENTS_COMP;
      ca.wait_obj = w.cq == FI_WAIT_NONE ? FI_WAIT_UNSPEC : w.cq;
      ca.wait_set = w.set;
      ASSERT_EQ(fi_cntr_open(domain, &ca, &cntr, &cntr), 0);
      ASSERT_EQ(fi_ep_bind(ep, &cntr->fid, FI_RECV), 0);
    }
    ASSERT_EQ(fi_enable(ep), 0);
  }

  std::vector<char> Name() const { return NameOf(&ep->fid); }

  // The endpoint first, on both sides (CloseEp), then the rest: the
  // loopback device rewires its segment when a port closes, which REQUIRES
  // no other port in a burst (driver/loopback/loopback_device.h), and a
  // progress thread polls only while its domain has endpoints.
  void CloseEp() {
    EXPECT_EQ(fi_close(&ep->fid), 0);
    ep = nullptr;
  }
  void Close(bool close_fabric = true) {
    for (fid* f : {&tx->fid, &rx->fid}) EXPECT_EQ(fi_close(f), 0);
    if (cntr != nullptr) {
      EXPECT_EQ(fi_close(&cntr->fid), 0);
    }
    EXPECT_EQ(fi_close(&av->fid), 0);
    EXPECT_EQ(fi_close(&domain->fid), 0);
    if (close_fabric) {
      EXPECT_EQ(fi_close(&fabric->fid), 0);
    }
    fi_freeinfo(info);
  }
};

// Two sides on the two loopback domains, one fabric, each knowing the other.
class WaitTest : public ::testing::Test {
 protected:
  void Open(const Waits& wa, const Waits& wb) {
    fi_info* hints = RdmHints();
    hints->domain_attr->threading = wa.threading;
    hints->domain_attr->data_progress = wa.progress;
    hints->domain_attr->control_progress = wa.progress;
    fi_info* list = nullptr;
    ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list), 0);
    fi_freeinfo(hints);
    ASSERT_NE(ForDomain(list, kDevA), nullptr);
    ASSERT_NE(ForDomain(list, kDevB), nullptr);
    if (wa.progress == FI_PROGRESS_AUTO) {
      EXPECT_EQ(list->domain_attr->data_progress, FI_PROGRESS_AUTO);
    }
    a_.OpenDomain(ForDomain(list, kDevA), fabric_);
    if (fabric_ == nullptr) fabric_ = a_.fabric;
    fi_info* ib = ForDomain(list, kDevB);
    ib->domain_attr->threading = wb.threading;
    ib->domain_attr->data_progress =
        wb.progress == FI_PROGRESS_UNSPEC ? FI_PROGRESS_MANUAL : wb.progress;
    b_.OpenDomain(ib, fabric_);
    fi_freeinfo(list);
    a_.OpenEp(wa);
    b_.OpenEp(wb);
    std::vector<char> na = a_.Name(), nb = b_.Name();
    ASSERT_EQ(fi_av_insert(a_.av, nb.data(), 1, &a_.peer, 0, nullptr), 1);
    ASSERT_EQ(fi_av_insert(b_.av, na.data(), 1, &b_.peer, 0, nullptr), 1);
  }
  // Opens the fabric first (for wait sets, which belong to it).
  void OpenFabric() {
    fi_info* hints = RdmHints();
    fi_info* list = nullptr;
    ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list), 0);
    fi_freeinfo(hints);
    ASSERT_EQ(fi_fabric(list->fabric_attr, &fabric_, nullptr), 0);
    fi_freeinfo(list);
  }
  void TearDown() override {
    if (a_.ep != nullptr) a_.CloseEp();
    if (b_.ep != nullptr) b_.CloseEp();
    if (a_.domain != nullptr) a_.Close(false);
    if (b_.domain != nullptr) b_.Close(false);
    if (ws_ != nullptr) {
      EXPECT_EQ(fi_close(&ws_->fid), 0);
    }
    if (fabric_ != nullptr) {
      EXPECT_EQ(fi_close(&fabric_->fid), 0);
    }
  }

  fid_fabric* fabric_ = nullptr;
  fid_wait* ws_ = nullptr;
  Side a_, b_;
  char abuf_[64] = "ping";
  char bbuf_[64] = {};
};

// fi_poll(3)'s pattern across two CQs' FD wait objects: the application
// sleeps only in epoll_wait, after fi_trywait returned 0, and reads after
// every wakeup; a and b ping-pong a fixed number of rounds. (Whether it
// ever sleeps there is the scheduler's: a message between two domains of
// one process may be in the peer's queue before the next fi_trywait,
// which then returns -FI_EAGAIN every round; the later phases make it
// sleep.)
TEST_F(WaitTest, EpollOnTwoCqFdsAfterTrywait) {
  Open({.cq = FI_WAIT_FD}, {.cq = FI_WAIT_FD});
  int fd_a = -1, fd_b = -1;
  ASSERT_EQ(fi_control(&a_.rx->fid, FI_GETWAIT, &fd_a), 0);
  ASSERT_EQ(fi_control(&b_.rx->fid, FI_GETWAIT, &fd_b), 0);
  ASSERT_GE(fd_a, 0);
  ASSERT_GE(fd_b, 0);
  fi_wait_obj kind = FI_WAIT_NONE;
  ASSERT_EQ(fi_control(&a_.rx->fid, FI_GETWAITOBJ, &kind), 0);
  EXPECT_EQ(kind, FI_WAIT_FD);
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  ASSERT_GE(ep, 0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = a_.rx;
  ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, fd_a, &ev), 0);
  ev.data.ptr = b_.rx;
  ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, fd_b, &ev), 0);

  constexpr int kRounds = 50;
  char abuf[16] = {}, bbuf[16] = {};
  ASSERT_EQ(fi_recv(a_.ep, abuf, sizeof(abuf), nullptr, FI_ADDR_UNSPEC, abuf), 0);
  ASSERT_EQ(fi_recv(b_.ep, bbuf, sizeof(bbuf), nullptr, FI_ADDR_UNSPEC, bbuf), 0);
  ASSERT_EQ(fi_inject(a_.ep, "ping", 5, a_.peer), 0);
  int a_got = 0, b_got = 0, sleeps = 0;
  fid* fids[2] = {&a_.rx->fid, &b_.rx->fid};
  while (a_got < kRounds) {
    const int tw = fi_trywait(fabric_, fids, 2);
    if (tw == 0) {
      epoll_event out[2];
      const int n = epoll_wait(ep, out, 2, std::chrono::milliseconds(kHang).count());
      ASSERT_GT(n, 0) << "hang: no CQ fd became readable after fi_trywait";
      ++sleeps;
    } else {
      ASSERT_EQ(tw, -FI_EAGAIN);
    }
    fi_cq_tagged_entry e;
    while (fi_cq_read(b_.rx, &e, 1) == 1) {  // b answers every ping
      ++b_got;
      ASSERT_EQ(fi_recv(b_.ep, bbuf, sizeof(bbuf), nullptr, FI_ADDR_UNSPEC, bbuf), 0);
      ASSERT_EQ(fi_inject(b_.ep, "pong", 5, b_.peer), 0);
    }
    while (fi_cq_read(a_.rx, &e, 1) == 1) {
      ++a_got;
      ASSERT_EQ(fi_recv(a_.ep, abuf, sizeof(abuf), nullptr, FI_ADDR_UNSPEC, abuf), 0);
      if (a_got < kRounds) {
        ASSERT_EQ(fi_inject(a_.ep, "ping", 5, a_.peer), 0);
      }
    }
  }
  EXPECT_EQ(a_got, kRounds);
  EXPECT_EQ(b_got, kRounds);
  std::printf("epoll ping-pong: %d rounds, %d sleeps in epoll_wait\n", kRounds, sleeps);

  // Messages from another thread after a pause, b to a: the application
  // sleeps in epoll_wait on both fds each time, and wakes on a's.
  int woken_a = 0;
  for (int i = 0; i < 3; ++i) {
    auto late = std::async(std::launch::async, [&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return fi_inject(b_.ep, "back", 5, b_.peer) == 0;
    });
    fi_cq_tagged_entry e;
    for (;;) {
      if (fi_trywait(fabric_, fids, 2) == 0) {
        epoll_event out[2];
        ASSERT_GT(epoll_wait(ep, out, 2, std::chrono::milliseconds(kHang).count()), 0) << "hang";
        ++woken_a;
      }
      if (fi_cq_read(a_.rx, &e, 1) == 1) break;
    }
    ASSERT_TRUE(late.get());
    ASSERT_EQ(fi_recv(a_.ep, abuf, sizeof(abuf), nullptr, FI_ADDR_UNSPEC, abuf), 0);
  }
  EXPECT_GE(woken_a, 3);
  close(ep);

  // Messages from another thread after a pause: b sleeps in poll(2) on its
  // fd each time, and only the progress threads can deliver meanwhile
  // (the sender's too: nobody calls on a after its fi_inject, and what it
  // sent earlier may hold its congestion window until a's pass takes the
  // ACKs: Domain::watched).
  int woken = 0;
  for (int i = 0; i < 5; ++i) {
    auto late = std::async(std::launch::async, [&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return fi_inject(a_.ep, "late", 5, a_.peer) == 0;
    });
    fid* f = &b_.rx->fid;
    fi_cq_tagged_entry e;
    for (;;) {
      if (fi_trywait(fabric_, &f, 1) == 0) {
        pollfd p{fd_b, POLLIN, 0};
        ASSERT_EQ(poll(&p, 1, std::chrono::milliseconds(kHang).count()), 1) << "hang";
        ++woken;
      }
      if (fi_cq_read(b_.rx, &e, 1) == 1) break;
    }
    ASSERT_TRUE(late.get());
    ASSERT_EQ(fi_recv(b_.ep, bbuf, sizeof(bbuf), nullptr, FI_ADDR_UNSPEC, bbuf), 0);
  }
  EXPECT_GE(woken, 5);
}

// A thread injects four congestion windows' worth of messages to a fresh
// peer and never calls again; the application only sleeps on the
// receiver's fd. Most of them can leave only once a pass of the sender's
// takes the handshake's answer and the ACKs of the first window, which
// nobody's call makes: the sender's progress thread watches while its
// endpoint has anything unfinished (Domain::watched), and every message
// arrives. (Under FI_PROGRESS_MANUAL fi_domain(3) lets a provider need the
// sender's calls; libfabric's shm sends an inject at once, and a thread
// that injects and then waits elsewhere is how applications use it.)
TEST_F(WaitTest, InjectsPastTheWindowArriveWhileTheSenderStopsCalling) {
  Open({.cq = FI_WAIT_FD}, {.cq = FI_WAIT_FD});
  int fd_b = -1;
  ASSERT_EQ(fi_control(&b_.rx->fid, FI_GETWAIT, &fd_b), 0);
  constexpr int kMessages = 64;  // cc_initial_window is 16 packets
  static char bufs[kMessages][16];
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_EQ(fi_recv(b_.ep, bufs[i], sizeof(bufs[i]), nullptr, FI_ADDR_UNSPEC, bufs[i]), 0);
  }
  auto sender = std::async(std::launch::async, [&] {
    int sent = 0;
    for (int i = 0; i < kMessages; ++i) {
      ssize_t ret;
      while ((ret = fi_inject(a_.ep, "many", 5, a_.peer)) == -FI_EAGAIN) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      if (ret == 0) ++sent;
    }
    return sent;  // and a is never called again
  });
  ASSERT_EQ(sender.get(), kMessages);
  int got = 0;
  fid* f = &b_.rx->fid;
  fi_cq_tagged_entry e;
  while (got < kMessages) {
    if (fi_trywait(fabric_, &f, 1) == 0) {
      pollfd p{fd_b, POLLIN, 0};
      ASSERT_EQ(poll(&p, 1, std::chrono::milliseconds(kHang).count()), 1)
          << "hang: " << got << " of " << kMessages << " messages arrived";
    }
    while (fi_cq_read(b_.rx, &e, 1) == 1) ++got;
  }
  EXPECT_EQ(got, kMessages);
}

// This process's progress threads (named "bypass-progress"): how many,
// and their voluntary context switches (how often they slept and woke),
// from /proc/self/task.
struct ProgressThreads {
  int threads = 0;
  uint64_t wakes = 0;
};
ProgressThreads CountProgressThreads() {
  ProgressThreads out;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return out;
  while (dirent* t = readdir(dir)) {
    if (t->d_name[0] == '.') continue;
    const std::string task = std::string("/proc/self/task/") + t->d_name;
    char comm[32] = {};
    FILE* f = std::fopen((task + "/comm").c_str(), "r");
    if (f == nullptr) continue;
    const bool named = std::fgets(comm, sizeof(comm), f) != nullptr &&
                       std::strcmp(comm, "bypass-progress\n") == 0;
    std::fclose(f);
    if (!named || (f = std::fopen((task + "/status").c_str(), "r")) == nullptr) continue;
    ++out.threads;
    char line[256];
    unsigned long long n = 0;
    while (std::fgets(line, sizeof(line), f) != nullptr) {
      if (std::sscanf(line, "voluntary_ctxt_switches: %llu", &n) == 1) out.wakes += n;
    }
    std::fclose(f);
  }
  closedir(dir);
  return out;
}

// While the application polls, a domain's progress thread (the watch of
// unfinished work) stands aside and only looks now and then whether the
// application stopped; each look wakes a thread on a core the polling
// process wants, so the interval doubles from 1 ms to 8 ms while the
// application keeps polling (ProgressThread::kMaxAppNapNs). 400 ms of
// polling wake the threads fewer than once per 2 ms each (a fixed 1 ms
// made about one wake per millisecond each), and an application that then
// stops calling is still watched: b takes a message in one read and stops,
// and a's send completes on the ACK b's thread sends for it.
TEST_F(WaitTest, APollingApplicationWakesTheWatchRarelyAndIsWatchedWhenItStops) {
  Open({}, {});
  char rbuf[16] = {}, sbuf[16] = "polled";
  fi_cq_tagged_entry e;
  const auto deadline = std::chrono::steady_clock::now() + kHang;
  // One exchange leaves work in both domains (a's send awaits its ACK, b
  // owes it), which starts their watch.
  ASSERT_EQ(fi_recv(b_.ep, rbuf, sizeof(rbuf), nullptr, FI_ADDR_UNSPEC, rbuf), 0);
  ASSERT_EQ(fi_send(a_.ep, sbuf, sizeof(sbuf), nullptr, a_.peer, sbuf), 0);
  int done = 0;
  while (done < 2 && std::chrono::steady_clock::now() < deadline) {
    if (fi_cq_read(b_.rx, &e, 1) == 1) ++done;
    if (fi_cq_read(a_.tx, &e, 1) == 1) ++done;
  }
  ASSERT_EQ(done, 2) << "hang: the first exchange did not complete";
  const ProgressThreads before = CountProgressThreads();
  ASSERT_GE(before.threads, 1) << "no progress thread named bypass-progress started";
  constexpr auto kPolling = std::chrono::milliseconds(400);
  const auto end = std::chrono::steady_clock::now() + kPolling;
  while (std::chrono::steady_clock::now() < end) {
    EXPECT_EQ(fi_cq_read(a_.rx, &e, 1), -FI_EAGAIN);
    EXPECT_EQ(fi_cq_read(b_.rx, &e, 1), -FI_EAGAIN);
  }
  const ProgressThreads after = CountProgressThreads();
  const uint64_t wakes = after.wakes - before.wakes;
  std::printf("%d progress threads woke %llu times in %lld ms of polling\n", after.threads,
              static_cast<unsigned long long>(wakes), static_cast<long long>(kPolling.count()));
  EXPECT_LT(wakes, static_cast<uint64_t>(after.threads) * kPolling.count() / 2);

  ASSERT_EQ(fi_recv(b_.ep, rbuf, sizeof(rbuf), nullptr, FI_ADDR_UNSPEC, rbuf), 0);
  ASSERT_EQ(fi_send(a_.ep, sbuf, sizeof(sbuf), nullptr, a_.peer, sbuf), 0);
  while (fi_cq_read(b_.rx, &e, 1) != 1) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "hang: the message did not arrive";
  }
  EXPECT_STREQ(rbuf, "polled");
  // b is never called again: its thread sends the ACK it deferred.
  const auto stopped = std::chrono::steady_clock::now();
  while (fi_cq_read(a_.tx, &e, 1) != 1) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline)
        << "hang: a's send was not acknowledged after b stopped calling";
  }
  EXPECT_EQ(e.op_context, sbuf);
  std::printf("a's send completed %.1f ms after b stopped calling\n",
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - stopped)
                  .count());
}

// Two endpoints of one domain, and an application that polls one of them:
// the other still answers its peers. p's endpoint a2 takes q's message m1
// (and owes the ACK that completes q's send), then p polls only a's CQ for
// m2, which q sends once m1's send completed (an application that waits for
// each send's completion before the next). Under FI_PROGRESS_MANUAL
// fi_domain(3) lets a provider progress only what the application calls
// on; a provider that does so here never completes q's send, and both sides
// wait forever (libfabric's shm completes an inject at once, and its tcp
// provider a send once written to the socket). The domain's progress thread
// progresses a2, whose unfinished work nobody polls.
TEST_F(WaitTest, AnEndpointNobodyPollsStillAnswersWhileAnotherOfItsDomainIsPolled) {
  Open({}, {});
  // a2: a second endpoint of a's domain, with CQs of its own.
  fid_cq *a2_tx = nullptr, *a2_rx = nullptr;
  fid_ep* a2 = nullptr;
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_TAGGED;
  ASSERT_EQ(fi_cq_open(a_.domain, &cq_attr, &a2_tx, nullptr), 0);
  ASSERT_EQ(fi_cq_open(a_.domain, &cq_attr, &a2_rx, nullptr), 0);
  ASSERT_EQ(fi_endpoint(a_.domain, a_.info, &a2, nullptr), 0);
  ASSERT_EQ(fi_ep_bind(a2, &a_.av->fid, 0), 0);
  ASSERT_EQ(fi_ep_bind(a2, &a2_tx->fid, FI_TRANSMIT), 0);
  ASSERT_EQ(fi_ep_bind(a2, &a2_rx->fid, FI_RECV), 0);
  ASSERT_EQ(fi_enable(a2), 0);
  std::vector<char> n2 = NameOf(&a2->fid);
  fi_addr_t to_a2 = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(fi_av_insert(b_.av, n2.data(), 1, &to_a2, 0, nullptr), 1);
  char m1[16] = {}, m2[16] = {};
  ASSERT_EQ(fi_recv(a2, m1, sizeof(m1), nullptr, FI_ADDR_UNSPEC, m1), 0);
  ASSERT_EQ(fi_recv(a_.ep, m2, sizeof(m2), nullptr, FI_ADDR_UNSPEC, m2), 0);
  const auto posted = std::chrono::steady_clock::now();
  const auto deadline = posted + kHang;
  std::atomic<bool> stop{false};
  // q: m1 to a2, its completion, then m2 to a.
  auto q = std::async(std::launch::async, [&]() -> std::string {
    fi_cq_tagged_entry e;
    static char s1[] = "to a2", s2[] = "to a";
    if (fi_send(b_.ep, s1, sizeof(s1), nullptr, to_a2, s1) != 0) return "fi_send m1 failed";
    ssize_t n;
    while ((n = fi_cq_read(b_.tx, &e, 1)) != 1) {
      if (n != -FI_EAGAIN) return "m1's send failed";
      if (stop.load() || std::chrono::steady_clock::now() > deadline) {
        return "m1's send never completed (a2 never acknowledged it)";
      }
    }
    std::printf("m1's send completed %.2f ms after it was posted\n",
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - posted)
                    .count());
    if (fi_send(b_.ep, s2, sizeof(s2), nullptr, b_.peer, s2) != 0) return "fi_send m2 failed";
    // p stops calling once m2 is in: a's thread acknowledges it.
    while ((n = fi_cq_read(b_.tx, &e, 1)) != 1) {
      if (n != -FI_EAGAIN) return "m2's send failed";
      if (std::chrono::steady_clock::now() > deadline) return "m2's send never completed";
    }
    return "";
  });
  fi_cq_tagged_entry e;
  bool got_m1 = false, got_m2 = false;
  while (!got_m1 && std::chrono::steady_clock::now() < deadline) got_m1 = fi_cq_read(a2_rx, &e, 1) == 1;
  // From here on p calls only on a.
  while (got_m1 && !got_m2 && std::chrono::steady_clock::now() < deadline) {
    got_m2 = fi_cq_read(a_.rx, &e, 1) == 1;
  }
  stop.store(true);
  const std::string q_error = q.get();
  EXPECT_TRUE(got_m1) << "a2 never received m1";
  EXPECT_TRUE(got_m2) << "hang: " << q_error;
  EXPECT_EQ(q_error, "");
  EXPECT_STREQ(m1, "to a2");
  EXPECT_STREQ(m2, "to a");
  EXPECT_EQ(fi_close(&a2->fid), 0);
  EXPECT_EQ(fi_close(&a2_tx->fid), 0);
  EXPECT_EQ(fi_close(&a2_rx->fid), 0);
}

// fi_cq_sread with a timeout and nothing to read: -FI_EAGAIN after about
// the timeout, and the process sleeps meanwhile (a spin would take about
// one CPU-second per second).
TEST_F(WaitTest, SreadTimeoutSleeps) {
  Open({.cq = FI_WAIT_UNSPEC}, {.cq = FI_WAIT_UNSPEC});
  fi_cq_tagged_entry e;
  const double cpu0 = ProcessCpuSeconds(), wall0 = WallSeconds();
  EXPECT_EQ(fi_cq_sread(b_.rx, &e, 1, nullptr, 1000), -FI_EAGAIN);
  const double cpu = ProcessCpuSeconds() - cpu0, wall = WallSeconds() - wall0;
  std::printf("sread(1000 ms): %.3f s wall, %.4f s CPU (%.2f%% of a core)\n", wall, cpu,
              100 * cpu / wall);
  EXPECT_GE(wall, 0.99);
  EXPECT_LT(cpu, 0.5 * wall) << "fi_cq_sread spins instead of sleeping";
  // A FI_WAIT_YIELD CQ spins by definition, and times out the same way.
  fi_cq_attr attr{};
  attr.format = FI_CQ_FORMAT_TAGGED;
  attr.wait_obj = FI_WAIT_YIELD;
  fid_cq* y = nullptr;
  ASSERT_EQ(fi_cq_open(b_.domain, &attr, &y, nullptr), 0);
  EXPECT_EQ(fi_cq_sread(y, &e, 1, nullptr, 10), -FI_EAGAIN);
  EXPECT_EQ(fi_control(&y->fid, FI_GETWAIT, &e), -FI_ENODATA);
  EXPECT_EQ(fi_close(&y->fid), 0);
}

// A message sent while the receiver sleeps in fi_cq_sread (FI_THREAD_DOMAIN,
// manual progress): the progress thread the sread started delivers it.
TEST_F(WaitTest, SreadWakesOnCompletionUnderThreadDomain) {
  Open({.cq = FI_WAIT_UNSPEC, .threading = FI_THREAD_DOMAIN},
       {.cq = FI_WAIT_UNSPEC, .threading = FI_THREAD_DOMAIN});
  char buf[16] = {};
  ASSERT_EQ(fi_recv(b_.ep, buf, sizeof(buf), nullptr, FI_ADDR_UNSPEC, buf), 0);
  // b's thread (its domain is its own under FI_THREAD_DOMAIN) sleeps first.
  auto receiver = std::async(std::launch::async, [&] {
    fi_cq_tagged_entry e;
    return fi_cq_sread(b_.rx, &e, 1, nullptr, 20'000) == 1 && e.op_context == buf;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(fi_send(a_.ep, abuf_, 5, nullptr, a_.peer, abuf_), 0);
  fi_cq_tagged_entry e;
  ASSERT_EQ(fi_cq_sread(a_.tx, &e, 1, nullptr, 20'000), 1);
  ASSERT_EQ(receiver.wait_for(kHang), std::future_status::ready);
  EXPECT_TRUE(receiver.get());
  EXPECT_STREQ(buf, "ping");
}

// fi_cq_signal wakes a thread blocked in fi_cq_sread with no timeout: it
// returns -FI_EAGAIN (fi_cq(3)).
TEST_F(WaitTest, CqSignalWakesBlockedSread) {
  Open({.cq = FI_WAIT_UNSPEC}, {.cq = FI_WAIT_UNSPEC});
  std::atomic<bool> entered{false};
  auto reader = std::async(std::launch::async, [&] {
    fi_cq_tagged_entry e;
    entered = true;
    return fi_cq_sread(b_.rx, &e, 1, nullptr, -1);
  });
  while (!entered) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let it block
  ASSERT_EQ(fi_cq_signal(b_.rx), 0);
  ASSERT_EQ(reader.wait_for(kHang), std::future_status::ready)
      << "hang: fi_cq_signal did not wake sread";
  EXPECT_EQ(reader.get(), -FI_EAGAIN);
}

// fi_cntr_wait: -FI_ETIMEDOUT with nothing coming; 0 once messages sent
// from another thread (which waits for its own sends in fi_cq_sread) are
// counted, the receiver never reading a CQ.
TEST_F(WaitTest, CntrWaitTimeoutThenThreshold) {
  Open({.cq = FI_WAIT_UNSPEC}, {.cq = FI_WAIT_UNSPEC, .cntr = true});
  EXPECT_EQ(fi_cntr_wait(b_.cntr, 1, 20), -FI_ETIMEDOUT);
  constexpr int kMsgs = 3;
  char bufs[kMsgs][16] = {};
  for (auto& buf : bufs)
    ASSERT_EQ(fi_recv(b_.ep, buf, sizeof(buf), nullptr, FI_ADDR_UNSPEC, buf), 0);
  auto sender = std::async(std::launch::async, [&] {
    for (int i = 0; i < kMsgs; ++i) {
      if (fi_send(a_.ep, abuf_, 5, nullptr, a_.peer, nullptr) != 0) return false;
      fi_cq_tagged_entry e;
      if (fi_cq_sread(a_.tx, &e, 1, nullptr, 20'000) != 1) return false;
    }
    return true;
  });
  EXPECT_EQ(fi_cntr_wait(b_.cntr, kMsgs, 20'000), 0);
  EXPECT_EQ(fi_cntr_read(b_.cntr), static_cast<uint64_t>(kMsgs));
  EXPECT_TRUE(sender.get());
}

// A counter's FD (fi_cntr(3) wait_obj FI_WAIT_FD): after fi_trywait it
// becomes readable when a receive is counted; fi_trywait answers
// -FI_EAGAIN until the application has read the new value.
TEST_F(WaitTest, CounterFdAfterTrywait) {
  Open({.cq = FI_WAIT_UNSPEC}, {.cq = FI_WAIT_FD, .cntr = true});
  int fd = -1;
  ASSERT_EQ(fi_control(&b_.cntr->fid, FI_GETWAIT, &fd), 0);
  ASSERT_GE(fd, 0);
  char buf[16] = {};
  ASSERT_EQ(fi_recv(b_.ep, buf, sizeof(buf), nullptr, FI_ADDR_UNSPEC, buf), 0);
  fid* f = &b_.cntr->fid;
  ASSERT_EQ(fi_trywait(fabric_, &f, 1), 0);
  auto sender = std::async(std::launch::async, [&] {
    fi_cq_tagged_entry e;
    return fi_send(a_.ep, abuf_, 5, nullptr, a_.peer, nullptr) == 0 &&
           fi_cq_sread(a_.tx, &e, 1, nullptr, 20'000) == 1;
  });
  pollfd p{fd, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, std::chrono::milliseconds(kHang).count()), 1) << "hang";
  EXPECT_TRUE(sender.get());
  EXPECT_EQ(fi_trywait(fabric_, &f, 1), -FI_EAGAIN);
  EXPECT_EQ(fi_cntr_read(b_.cntr), 1u);
  EXPECT_EQ(fi_trywait(fabric_, &f, 1), 0);
}

// fi_eq_sread: -FI_EAGAIN after its timeout; a thread blocked in it wakes
// with the event fi_eq_write adds.
TEST_F(WaitTest, EqSreadWokenByWrite) {
  OpenFabric();
  fi_eq_attr attr{};
  attr.wait_obj = FI_WAIT_FD;
  fid_eq* eq = nullptr;
  ASSERT_EQ(fi_eq_open(fabric_, &attr, &eq, nullptr), 0);
  uint32_t event = 0;
  fi_eq_entry entry{};
  EXPECT_EQ(fi_eq_sread(eq, &event, &entry, sizeof(entry), 10, 0), -FI_EAGAIN);
  auto reader = std::async(std::launch::async, [&] {
    uint32_t ev = 0;
    fi_eq_entry got{};
    const ssize_t n = fi_eq_sread(eq, &ev, &got, sizeof(got), -1, 0);
    return n == static_cast<ssize_t>(sizeof(got)) && ev == FI_NOTIFY && got.data == 42;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  entry.data = 42;
  ASSERT_EQ(fi_eq_write(eq, FI_NOTIFY, &entry, sizeof(entry), 0),
            static_cast<ssize_t>(sizeof(entry)));
  ASSERT_EQ(reader.wait_for(kHang), std::future_status::ready);
  EXPECT_TRUE(reader.get());
  // The FD after fi_trywait: readable once an event is written.
  int fd = -1;
  ASSERT_EQ(fi_control(&eq->fid, FI_GETWAIT, &fd), 0);
  fid* f = &eq->fid;
  ASSERT_EQ(fi_trywait(fabric_, &f, 1), 0);
  pollfd p{fd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 0), 0);
  ASSERT_EQ(fi_eq_write(eq, FI_NOTIFY, &entry, sizeof(entry), 0),
            static_cast<ssize_t>(sizeof(entry)));
  EXPECT_EQ(poll(&p, 1, std::chrono::milliseconds(kHang).count()), 1);
  EXPECT_EQ(fi_trywait(fabric_, &f, 1), -FI_EAGAIN);  // the event is still there
  EXPECT_EQ(fi_eq_read(eq, &event, &entry, sizeof(entry), 0), static_cast<ssize_t>(sizeof(entry)));
  EXPECT_EQ(fi_trywait(fabric_, &f, 1), 0);
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

// A wait set (FI_WAIT_FD) with b's CQs and counter: fi_wait times out with
// nothing, and wakes when a message arrives; its fd, after fi_trywait on
// the set, becomes readable the same way. Members keep the set open.
TEST_F(WaitTest, WaitSetWakesOnAnyMember) {
  OpenFabric();
  fi_wait_attr wa{};
  wa.wait_obj = FI_WAIT_FD;
  ASSERT_EQ(fi_wait_open(fabric_, &wa, &ws_), 0);
  Open({.cq = FI_WAIT_UNSPEC}, {.cq = FI_WAIT_SET, .set = ws_, .cntr = true});
  EXPECT_EQ(fi_close(&ws_->fid), -FI_EBUSY);
  EXPECT_EQ(fi_wait(ws_, 10), -FI_ETIMEDOUT);
  char buf[2][16] = {};
  ASSERT_EQ(fi_recv(b_.ep, buf[0], sizeof(buf[0]), nullptr, FI_ADDR_UNSPEC, buf[0]), 0);
  ASSERT_EQ(fi_recv(b_.ep, buf[1], sizeof(buf[1]), nullptr, FI_ADDR_UNSPEC, buf[1]), 0);
  auto send = [&] {
    return std::async(std::launch::async, [&] {
      fi_cq_tagged_entry e;
      return fi_send(a_.ep, abuf_, 5, nullptr, a_.peer, nullptr) == 0 &&
             fi_cq_sread(a_.tx, &e, 1, nullptr, 20'000) == 1;
    });
  };
  auto s1 = send();
  EXPECT_EQ(fi_wait(ws_, 20'000), 0);
  EXPECT_TRUE(s1.get());
  fi_cq_tagged_entry e;
  // The CQ may be the member that woke it, or the counter just before it
  // (a wait set member takes no sread, fi_cq(3): wait on the set).
  ssize_t got = fi_cq_read(b_.rx, &e, 1);
  for (int i = 0; i < 100 && got == -FI_EAGAIN; ++i) {
    EXPECT_EQ(fi_wait(ws_, 200), 0);
    got = fi_cq_read(b_.rx, &e, 1);
  }
  ASSERT_EQ(got, 1);
  EXPECT_EQ(fi_cq_sread(b_.rx, &e, 1, nullptr, 0), -FI_EINVAL);
  EXPECT_EQ(fi_cntr_read(b_.cntr), 1u);
  // The set's fd.
  int fd = -1;
  ASSERT_EQ(fi_control(&ws_->fid, FI_GETWAIT, &fd), 0);
  fid* f = &ws_->fid;
  ASSERT_EQ(fi_trywait(fabric_, &f, 1), 0);
  auto s2 = send();
  pollfd p{fd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, std::chrono::milliseconds(kHang).count()), 1);
  EXPECT_TRUE(s2.get());
  EXPECT_EQ(fi_trywait(fabric_, &f, 1), -FI_EAGAIN);
  // A member of a set passes the set to fi_trywait, not itself.
  fid* member = &b_.rx->fid;
  EXPECT_EQ(fi_trywait(fabric_, &member, 1), -FI_EINVAL);
  ASSERT_EQ(fi_cq_read(b_.rx, &e, 1), 1);
}

// A poll set with two CQs and a counter: fi_poll returns the contexts of the
// non-empty CQs and of the counter that changed, and nothing once they are
// read; members cannot close while in the set, nor the set while it has any.
TEST_F(WaitTest, PollSetReportsCqsAndCounters) {
  Open({.cq = FI_WAIT_NONE}, {.cq = FI_WAIT_NONE, .cntr = true});
  fi_poll_attr pa{};
  fid_poll* ps = nullptr;
  ASSERT_EQ(fi_poll_open(b_.domain, &pa, &ps), 0);
  ASSERT_EQ(fi_poll_add(ps, &b_.rx->fid, 0), 0);
  ASSERT_EQ(fi_poll_add(ps, &b_.tx->fid, 0), 0);
  ASSERT_EQ(fi_poll_add(ps, &b_.cntr->fid, 0), 0);
  EXPECT_EQ(fi_poll_add(ps, &b_.av->fid, 0), -FI_EINVAL);
  EXPECT_EQ(fi_close(&b_.rx->fid), -FI_EBUSY);
  EXPECT_EQ(fi_close(&ps->fid), -FI_EBUSY);
  void* ctx[4] = {};
  EXPECT_EQ(fi_poll(ps, ctx, 4), 0);
  char buf[16] = {};
  ASSERT_EQ(fi_recv(b_.ep, buf, sizeof(buf), nullptr, FI_ADDR_UNSPEC, buf), 0);
  ASSERT_EQ(fi_send(a_.ep, abuf_, 5, nullptr, a_.peer, nullptr), 0);
  int n = 0;
  bool rx = false, cntr = false;
  for (int i = 0; i < 2'000'000 && !(rx && cntr); ++i) {
    fi_cq_read(a_.tx, nullptr, 0);  // a's progress
    n = fi_poll(ps, ctx, 4);
    ASSERT_GE(n, 0);
    for (int k = 0; k < n; ++k) {
      rx = rx || ctx[k] == &b_.rx;
      cntr = cntr || ctx[k] == &b_.cntr;
      EXPECT_NE(ctx[k], &b_.tx);  // nothing sent from b
    }
  }
  ASSERT_TRUE(rx && cntr) << "fi_poll never reported the receive CQ and the counter";
  fi_cq_tagged_entry e;
  ASSERT_EQ(fi_cq_read(b_.rx, &e, 1), 1);
  EXPECT_EQ(fi_poll(ps, ctx, 4), 0);  // CQ read, counter unchanged since the last fi_poll
  ASSERT_EQ(fi_cntr_add(b_.cntr, 5), 0);
  EXPECT_EQ(fi_poll(ps, ctx, 4), 0);  // fi_cntr_add is not an event (fi_poll(3))
  EXPECT_EQ(fi_poll_del(ps, &b_.av->fid, 0), -FI_ENOENT);
  for (fid* f : {&b_.rx->fid, &b_.tx->fid, &b_.cntr->fid}) ASSERT_EQ(fi_poll_del(ps, f, 0), 0);
  EXPECT_EQ(fi_close(&ps->fid), 0);
}

// FI_WAIT_MUTEX_COND: FI_GETWAIT hands out the mutex and cond; the
// application holds the mutex around fi_trywait and waits on the cond,
// which the provider signals when a completion arrives.
TEST_F(WaitTest, MutexCondAfterTrywait) {
  Open({.cq = FI_WAIT_UNSPEC}, {.cq = FI_WAIT_MUTEX_COND});
  fi_mutex_cond mc{};
  ASSERT_EQ(fi_control(&b_.rx->fid, FI_GETWAIT, &mc), 0);
  ASSERT_NE(mc.mutex, nullptr);
  ASSERT_NE(mc.cond, nullptr);
  char buf[16] = {};
  ASSERT_EQ(fi_recv(b_.ep, buf, sizeof(buf), nullptr, FI_ADDR_UNSPEC, buf), 0);
  fid* f = &b_.rx->fid;
  pthread_mutex_lock(mc.mutex);
  ASSERT_EQ(fi_trywait(fabric_, &f, 1), 0);
  auto sender = std::async(std::launch::async, [&] {
    fi_cq_tagged_entry e;
    return fi_send(a_.ep, abuf_, 5, nullptr, a_.peer, nullptr) == 0 &&
           fi_cq_sread(a_.tx, &e, 1, nullptr, 20'000) == 1;
  });
  timespec deadline{};
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += std::chrono::seconds(kHang).count();
  EXPECT_EQ(pthread_cond_timedwait(mc.cond, mc.mutex, &deadline), 0) << "hang: cond never signaled";
  pthread_mutex_unlock(mc.mutex);
  EXPECT_TRUE(sender.get());
  fi_cq_tagged_entry e;
  ASSERT_EQ(fi_cq_sread(b_.rx, &e, 1, nullptr, 20'000), 1);
  EXPECT_STREQ(buf, "ping");
}

// FI_PROGRESS_AUTO: messages complete while the receiving application never
// calls a progress-driving function. Sends of 64 KiB complete only once the
// receiver acknowledges them, and b's application does nothing until the
// end (one fi_cntr_read and one fi_cq_read): b's progress thread does it.
TEST_F(WaitTest, AutoProgressCompletesWithoutTheApplication) {
  Open({.cq = FI_WAIT_NONE, .progress = FI_PROGRESS_AUTO},
       {.cq = FI_WAIT_NONE, .cntr = true, .progress = FI_PROGRESS_AUTO});
  constexpr int kMsgs = 4;
  constexpr size_t kLen = 64 * 1024;
  std::vector<std::vector<char>> rbufs(kMsgs, std::vector<char>(kLen));
  std::vector<char> sbuf(kLen, 's');
  for (auto& buf : rbufs) {
    ASSERT_EQ(fi_recv(b_.ep, buf.data(), kLen, nullptr, FI_ADDR_UNSPEC, buf.data()), 0);
  }
  for (int i = 0; i < kMsgs; ++i) {
    ASSERT_EQ(fi_send(a_.ep, sbuf.data(), kLen, nullptr, a_.peer, nullptr), 0);
  }
  int sent = 0;
  const auto deadline = std::chrono::steady_clock::now() + kHang;
  fi_cq_tagged_entry e[kMsgs];
  while (sent < kMsgs && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const ssize_t n = fi_cq_read(a_.tx, e, kMsgs);  // a only: b's side is b's thread
    if (n > 0) sent += static_cast<int>(n);
  }
  ASSERT_EQ(sent, kMsgs) << "hang: sends not acknowledged without b's application progressing";
  EXPECT_EQ(fi_cntr_read(b_.cntr), static_cast<uint64_t>(kMsgs));
  EXPECT_EQ(fi_cq_read(b_.rx, e, kMsgs), kMsgs);
  EXPECT_EQ(rbufs[kMsgs - 1][kLen - 1], 's');
}

// fi_close releases a wait object's file descriptor at once (the closed
// object's shell is kept, its eventfd is not).
TEST_F(WaitTest, CloseReleasesTheFd) {
  Open({.cq = FI_WAIT_NONE}, {.cq = FI_WAIT_NONE});
  fi_cq_attr attr{};
  attr.wait_obj = FI_WAIT_FD;
  fid_cq* cq = nullptr;
  ASSERT_EQ(fi_cq_open(a_.domain, &attr, &cq, nullptr), 0);
  int fd = -1;
  ASSERT_EQ(fi_control(&cq->fid, FI_GETWAIT, &fd), 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(fi_close(&cq->fid), 0);
  EXPECT_EQ(fcntl(fd, F_GETFD), -1) << "fd " << fd << " still open after fi_close";
}

// Bad input: a wait set needs a real wait object; FI_WAIT_SET needs a set;
// fi_trywait refuses objects without a native wait object.
TEST_F(WaitTest, BadArguments) {
  OpenFabric();
  fi_wait_attr wa{};
  fid_wait* ws = nullptr;
  wa.wait_obj = FI_WAIT_NONE;
  EXPECT_EQ(fi_wait_open(fabric_, &wa, &ws), -FI_EINVAL);
  wa.wait_obj = FI_WAIT_UNSPEC;
  wa.flags = 1;
  EXPECT_EQ(fi_wait_open(fabric_, &wa, &ws), -FI_EBADFLAGS);
  Open({.cq = FI_WAIT_UNSPEC}, {.cq = FI_WAIT_NONE});
  fi_cq_attr attr{};
  attr.wait_obj = FI_WAIT_SET;
  fid_cq* cq = nullptr;
  EXPECT_EQ(fi_cq_open(a_.domain, &attr, &cq, nullptr), -FI_EINVAL);
  fid* f = &a_.rx->fid;  // FI_WAIT_UNSPEC: nothing native to block on
  EXPECT_EQ(fi_trywait(fabric_, &f, 1), -FI_EINVAL);
  int fd;
  EXPECT_EQ(fi_control(&a_.rx->fid, FI_GETWAIT, &fd), -FI_ENODATA);
  EXPECT_EQ(fi_control(&a_.rx->fid, FI_GETWAIT, nullptr), -FI_EINVAL);
  // fi_cq(3): sread is invalid on a CQ with FI_WAIT_NONE.
  fi_cq_tagged_entry e;
  EXPECT_EQ(fi_cq_sread(b_.rx, &e, 1, nullptr, 0), -FI_EINVAL);
}

// FI_WAIT_POLLFD (fi_poll(3) NOTES): FI_GETWAIT fills a struct
// fi_wait_pollfd: nfds 0 asks the size (-FI_ETOOSMALL) and the
// change_index; the list, in poll(2) after fi_trywait, wakes on a message.
TEST_F(WaitTest, PollFdListAfterTrywait) {
  Open({.cq = FI_WAIT_NONE}, {.cq = FI_WAIT_POLLFD});
  fi_wait_pollfd list{};
  ASSERT_EQ(fi_control(&b_.rx->fid, FI_GETWAIT, &list), -FI_ETOOSMALL);
  ASSERT_EQ(list.nfds, 1u);
  const uint64_t change = list.change_index;
  std::vector<pollfd> fds(list.nfds);
  list.fd = fds.data();
  ASSERT_EQ(fi_control(&b_.rx->fid, FI_GETWAIT, &list), 0);
  EXPECT_EQ(list.change_index, change);
  ASSERT_GE(fds[0].fd, 0);
  EXPECT_EQ(fds[0].events, POLLIN);
  fi_wait_obj kind{};
  ASSERT_EQ(fi_control(&b_.rx->fid, FI_GETWAITOBJ, &kind), 0);
  EXPECT_EQ(kind, FI_WAIT_POLLFD);
  char buf[16] = {};
  ASSERT_EQ(fi_recv(b_.ep, buf, sizeof(buf), nullptr, FI_ADDR_UNSPEC, buf), 0);
  fid* f = &b_.rx->fid;
  ASSERT_EQ(fi_trywait(fabric_, &f, 1), 0);
  EXPECT_EQ(poll(fds.data(), fds.size(), 0), 0) << "readable before anything happened";
  // The sender progresses its side (the handshake, the send's completion)
  // in a thread of its own; b's side only through the armed list.
  auto sender = std::async(std::launch::async, [&] {
    if (fi_send(a_.ep, abuf_, 5, nullptr, a_.peer, abuf_) != 0) return false;
    fi_cq_tagged_entry t;
    for (int spins = 0; spins < 50'000'000; ++spins) {
      if (fi_cq_read(a_.tx, &t, 1) == 1) return true;
    }
    return false;
  });
  ASSERT_EQ(poll(fds.data(), fds.size(), 20'000), 1) << "the message did not wake the list";
  fi_cq_tagged_entry e;
  ssize_t n = -FI_EAGAIN;
  for (int i = 0; i < 1'000'000 && n == -FI_EAGAIN; ++i) n = fi_cq_read(b_.rx, &e, 1);
  ASSERT_EQ(n, 1);
  EXPECT_STREQ(buf, "ping");
  EXPECT_TRUE(sender.get());
}

// FI_CQ_COND_THRESHOLD: fi_cq_sread waits for `cond` entries (a value, as
// providers read it), at most count; a timeout returns what there is.
TEST_F(WaitTest, SreadThreshold) {
  Open({.cq = FI_WAIT_UNSPEC}, {.cq = FI_WAIT_UNSPEC});
  fi_cq_attr attr{};
  attr.format = FI_CQ_FORMAT_TAGGED;
  attr.wait_obj = FI_WAIT_UNSPEC;
  attr.wait_cond = FI_CQ_COND_THRESHOLD;
  fid_cq* cq = nullptr;
  ASSERT_EQ(fi_cq_open(b_.domain, &attr, &cq, nullptr), 0);
  fid_ep* ep = nullptr;
  ASSERT_EQ(fi_endpoint(b_.domain, b_.info, &ep, nullptr), 0);
  ASSERT_EQ(fi_ep_bind(ep, &b_.av->fid, 0), 0);
  ASSERT_EQ(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
  ASSERT_EQ(fi_enable(ep), 0);
  const std::vector<char> name = NameOf(&ep->fid);
  fi_addr_t to = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(fi_av_insert(a_.av, name.data(), 1, &to, 0, nullptr), 1);
  constexpr int kMessages = 3;
  char bufs[kMessages][16] = {};
  for (auto& b : bufs) {
    ASSERT_EQ(fi_recv(ep, b, sizeof(b), nullptr, FI_ADDR_UNSPEC, b), 0);
  }
  // The sender (its own thread, progressing its side) sends one message,
  // then two more once told.
  std::atomic<bool> more{false};
  auto sender = std::async(std::launch::async, [&] {
    int done = 0;
    auto send_and_complete = [&](int n) {
      if (fi_send(a_.ep, abuf_, 5, nullptr, to, nullptr) != 0) return false;
      for (int spins = 0; done < n && spins < 50'000'000; ++spins) {
        fi_cq_tagged_entry t;
        if (fi_cq_read(a_.tx, &t, 1) == 1) ++done;
      }
      return done == n;
    };
    if (!send_and_complete(1)) return false;
    while (!more.load()) std::this_thread::yield();
    if (fi_send(a_.ep, abuf_, 5, nullptr, to, nullptr) != 0) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    return send_and_complete(3);
  });
  // One message, a threshold of 2: each timeout returns what there is
  // (nothing until the message lands, then the one).
  fi_cq_tagged_entry e[kMessages];
  const auto two = reinterpret_cast<const void*>(uintptr_t{2});
  ssize_t n = -FI_EAGAIN;
  for (int i = 0; i < 100 && n == -FI_EAGAIN; ++i) n = fi_cq_sread(cq, e, kMessages, two, 200);
  EXPECT_EQ(n, 1);
  // Two more, 30 ms apart: the sread waits for both and returns them at once.
  more.store(true);
  EXPECT_EQ(fi_cq_sread(cq, e, kMessages, two, 20'000), 2);
  EXPECT_TRUE(sender.get());
  EXPECT_EQ(fi_close(&ep->fid), 0);
  EXPECT_EQ(fi_close(&cq->fid), 0);
}

}  // namespace
}  // namespace bypass::fi::testing
