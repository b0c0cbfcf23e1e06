// A silent peer is not a dead one (fabric/fi/README.md, "Silent and dead
// peers"), between two processes of this host as an MPI job's ranks are:
// on the default domain (shared memory: the device sees the peer's process
// through the lock of its area) and on the kernel UDP device (a dead
// process's port draws ICMP port unreachable from its kernel).
//
// - A peer that makes no libfabric call for three peer timeouts while our
//   sends to it are outstanding (an MPI rank computing) is waited for: the
//   sends complete once it progresses again.
// - A peer that is SIGKILLed fails our sends with FI_ECONNRESET, with the
//   peer timeout at its default of 10 s: an ETIMEDOUT would mean the
//   timeout, not the death, ended them. The time from the kill to the
//   error is printed, never checked.
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace {

constexpr char kDefault[] = "shm:+udp:";
constexpr char kUdp[] = "udp:127.0.0.1";

const bool kEnvironment = [] {
  setenv("FI_BYPASS_DEVICES", (std::string(kDefault) + ";" + kUdp).c_str(), 1);
  // Ports of their own, away from other tests' first ports.
  setenv("FI_BYPASS_PORT", "23400", 1);
  return true;
}();

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// One process's side: an RDM endpoint with its CQs on domain `dev`.
struct Side {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_cq* txcq = nullptr;
  fid_cq* rxcq = nullptr;
  fid_ep* ep = nullptr;
  fi_addr_t peer = FI_ADDR_NOTAVAIL;

  // False (with a message on stderr) on any failure: the child has no gtest.
  bool Open(const char* dev) {
    fi_info* hints = fi_allocinfo();
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_MSG | FI_TAGGED;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED;
    fi_info* list = nullptr;
    int ret = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list);
    fi_freeinfo(hints);
    for (fi_info* i = list; ret == 0 && i != nullptr && info == nullptr; i = i->next) {
      if (std::strcmp(i->domain_attr->name, dev) == 0) info = fi_dupinfo(i);
    }
    fi_freeinfo(list);
    if (info == nullptr) {
      std::fprintf(stderr, "no fi_info for %s (%d)\n", dev, ret);
      return false;
    }
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    const bool ok = fi_fabric(info->fabric_attr, &fabric, nullptr) == 0 &&
                    fi_domain(fabric, info, &domain, nullptr) == 0 &&
                    fi_av_open(domain, &av_attr, &av, nullptr) == 0 &&
                    fi_cq_open(domain, &cq_attr, &txcq, nullptr) == 0 &&
                    fi_cq_open(domain, &cq_attr, &rxcq, nullptr) == 0 &&
                    fi_endpoint(domain, info, &ep, nullptr) == 0 &&
                    fi_ep_bind(ep, &av->fid, 0) == 0 &&
                    fi_ep_bind(ep, &txcq->fid, FI_TRANSMIT) == 0 &&
                    fi_ep_bind(ep, &rxcq->fid, FI_RECV) == 0 && fi_enable(ep) == 0;
    if (!ok) std::fprintf(stderr, "opening an endpoint on %s failed\n", dev);
    return ok;
  }
  // Sends our name on fd `out`, reads the peer's from `in`, inserts it.
  bool Exchange(int out, int in) {
    char name[64];
    size_t len = sizeof(name);
    if (fi_getname(&ep->fid, name, &len) != 0) return false;
    const uint32_t n = static_cast<uint32_t>(len);
    if (write(out, &n, sizeof(n)) != sizeof(n) || write(out, name, len) != static_cast<ssize_t>(len)) {
      return false;
    }
    uint32_t m = 0;
    char theirs[64];
    if (read(in, &m, sizeof(m)) != sizeof(m) || m > sizeof(theirs) ||
        read(in, theirs, m) != static_cast<ssize_t>(m)) {
      return false;
    }
    return fi_av_insert(av, theirs, 1, &peer, 0, nullptr) == 1;
  }
  void Close() {
    if (ep != nullptr) fi_close(&ep->fid);
    if (txcq != nullptr) fi_close(&txcq->fid);
    if (rxcq != nullptr) fi_close(&rxcq->fid);
    if (av != nullptr) fi_close(&av->fid);
    if (domain != nullptr) fi_close(&domain->fid);
    if (fabric != nullptr) fi_close(&fabric->fid);
    fi_freeinfo(info);
    *this = Side();
  }
};

constexpr int kMessages = 64;
constexpr uint64_t kTag = 7;

// The child: opens, exchanges names, receives one message (the session is
// established), says so on `ready`; then does nothing for `sleep_ms` (no
// libfabric call at all) and receives kMessages, progressing until the
// parent closes `done`. sleep_ms < 0: sleeps until killed. Exit 0 when
// every message came with its value.
[[noreturn]] void Child(const char* dev, int sleep_ms, int to_parent, int from_parent, int ready,
                        int done) {
  // Silent means silent: with deferred ACKs the domain's progress thread
  // would answer for the sleeping application (fabric/fi/README.md, "When
  // the peer acknowledges"), and the liveness path would go untested.
  setenv("FI_BYPASS_DEFER_ACKS", "0", 1);
  Side s;
  if (!s.Open(dev) || !s.Exchange(to_parent, from_parent)) _exit(2);
  uint32_t warm = 0;
  fi_cq_tagged_entry e;
  if (fi_trecv(s.ep, &warm, sizeof(warm), nullptr, s.peer, kTag, 0, nullptr) != 0) _exit(3);
  while (fi_cq_read(s.rxcq, &e, 1) != 1) {
  }
  static uint32_t got[kMessages];
  for (int i = 0; i < kMessages; ++i) {
    if (fi_trecv(s.ep, &got[i], sizeof(got[i]), nullptr, s.peer, kTag, 0, nullptr) != 0) _exit(4);
  }
  const char c = 'r';
  if (write(ready, &c, 1) != 1) _exit(5);
  if (sleep_ms < 0) {
    for (;;) pause();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
  int received = 0;
  char buf;
  // Until the parent is done (its sends completed, so ours were acknowledged).
  while (read(done, &buf, 1) != 0) {
    if (fi_cq_read(s.rxcq, &e, 1) == 1) ++received;
  }
  int bad = 0;
  for (int i = 0; i < kMessages; ++i) bad += got[i] != static_cast<uint32_t>(1000 + i);
  s.Close();
  _exit(received == kMessages && bad == 0 ? 0 : 6);
}

struct Job {
  pid_t pid = -1;
  int to_child = -1, from_child = -1, ready = -1, done = -1;
};

// Forks a child on dev; the parent side is opened and named in *s.
Job Start(const char* dev, int sleep_ms, Side* s) {
  int p2c[2], c2p[2], rdy[2], dn[2];
  if (pipe(p2c) != 0 || pipe(c2p) != 0 || pipe(rdy) != 0 || pipe2(dn, O_NONBLOCK) != 0) return {};
  Job j;
  j.pid = fork();
  if (j.pid == 0) {
    close(p2c[1]);
    close(c2p[0]);
    close(rdy[0]);
    close(dn[1]);
    Child(dev, sleep_ms, c2p[1], p2c[0], rdy[1], dn[0]);
  }
  close(p2c[0]);
  close(c2p[1]);
  close(rdy[1]);
  close(dn[0]);
  j.to_child = p2c[1];
  j.from_child = c2p[0];
  j.ready = rdy[0];
  j.done = dn[1];
  EXPECT_TRUE(s->Open(dev));
  EXPECT_TRUE(s->Exchange(j.to_child, j.from_child));
  // The warm-up message.
  uint32_t warm = 1;
  EXPECT_EQ(fi_tsend(s->ep, &warm, sizeof(warm), nullptr, s->peer, kTag, nullptr), 0);
  fi_cq_tagged_entry e;
  for (ssize_t n = 0; n != 1;) {
    n = fi_cq_read(s->txcq, &e, 1);
    if (n == -FI_EAVAIL) break;
  }
  char c;
  EXPECT_EQ(read(j.ready, &c, 1), 1);
  return j;
}

// Posts kMessages sends and reads the TX CQ until each has completed or
// failed; returns the failures, the first one's error in *err.
int SendAll(Side& s, uint32_t* values, fi_cq_err_entry* err) {
  for (int i = 0; i < kMessages; ++i) {
    values[i] = static_cast<uint32_t>(1000 + i);
    ssize_t r;
    while ((r = fi_tsend(s.ep, &values[i], sizeof(values[i]), nullptr, s.peer, kTag, nullptr)) ==
           -FI_EAGAIN) {
      fi_cq_tagged_entry e;
      fi_cq_read(s.txcq, &e, 0);
    }
    EXPECT_EQ(r, 0);
  }
  int ok = 0, failed = 0;
  while (ok + failed < kMessages) {
    fi_cq_tagged_entry e[8];
    const ssize_t n = fi_cq_read(s.txcq, e, 8);
    if (n > 0) ok += static_cast<int>(n);
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry x{};
      if (fi_cq_readerr(s.txcq, &x, 0) == 1) {
        if (failed++ == 0) *err = x;
      }
    }
  }
  return failed;
}

void SilentPeerIsWaitedFor(const char* dev) {
  // A short peer timeout; the child computes for three of them.
  setenv("FI_BYPASS_PEER_TIMEOUT_MS", "300", 1);
  Side s;
  Job j = Start(dev, 900, &s);
  ASSERT_GT(j.pid, 0);
  uint32_t values[kMessages];
  fi_cq_err_entry err{};
  const Clock::time_point t0 = Clock::now();
  const int failed = SendAll(s, values, &err);
  std::printf("%s: %d sends to a peer silent for 0.9 s (3 peer timeouts) completed after %.2f s\n",
              dev, kMessages - failed, SecondsSince(t0));
  EXPECT_EQ(failed, 0) << "first error " << err.err << " (prov_errno " << err.prov_errno << ")";
  close(j.done);
  int status = 0;
  ASSERT_EQ(waitpid(j.pid, &status, 0), j.pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  s.Close();
  unsetenv("FI_BYPASS_PEER_TIMEOUT_MS");
}

void KilledPeerFailsAtOnce(const char* dev) {
  unsetenv("FI_BYPASS_PEER_TIMEOUT_MS");  // 10 s: the death, not the timeout, must end them
  Side s;
  Job j = Start(dev, -1, &s);
  ASSERT_GT(j.pid, 0);
  const Clock::time_point t0 = Clock::now();
  ASSERT_EQ(kill(j.pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(j.pid, &status, 0), j.pid);
  uint32_t values[kMessages];
  fi_cq_err_entry err{};
  const int failed = SendAll(s, values, &err);
  std::printf("%s: sends to a killed peer failed %.3f s after the kill (peer timeout 10 s)\n", dev,
              SecondsSince(t0));
  EXPECT_EQ(failed, kMessages);
  EXPECT_EQ(err.err, FI_ECONNRESET);
  EXPECT_EQ(err.prov_errno, ECONNRESET) << "ETIMEDOUT: the timeout ended them, not the death";
  close(j.done);
  s.Close();
}

TEST(Liveness, SilentPeerIsWaitedForOnSharedMemory) { SilentPeerIsWaitedFor(kDefault); }
TEST(Liveness, SilentPeerIsWaitedForOnKernelUdp) { SilentPeerIsWaitedFor(kUdp); }
TEST(Liveness, KilledPeerFailsAtOnceOnSharedMemory) { KilledPeerFailsAtOnce(kDefault); }
TEST(Liveness, KilledPeerFailsAtOnceOnKernelUdp) { KilledPeerFailsAtOnce(kUdp); }

}  // namespace
