// Many processes of one host over the default domain, with no
// configuration: N children (default 64) each open fi_getinfo's first
// FI_EP_RDM entry, publish their fi_getname in shared memory, insert every
// other's, and exchange tagged messages all-to-all; then the parent kills
// them one at a time (SIGKILL), and after each kill the survivors exchange
// a round with their ring neighbours among the living, so a dead process
// must not block the others. Idle processes yield (sched_yield) instead of
// spinning: the machine has fewer cores than processes. Exits 0 when every
// child checked every message it expected.
//
//   fi_many_local [--procs=N] [--msgs=M]
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <new>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int kMaxProcs = 256;
constexpr size_t kNameMax = 64;
constexpr int kNeighbours = 4;   // ring neighbours per round after a kill
constexpr size_t kMsgLen = 256;  // bytes per message, pattern-checked

// Shared between the parent and every child (MAP_SHARED before fork).
struct Board {
  std::atomic<int> ready;             // children that published their name
  std::atomic<int> round;             // the round the parent started; -1: exit
  std::atomic<int> done[kMaxProcs];   // the last round each child finished
  std::atomic<int> alive[kMaxProcs];  // 1 until the parent kills it
  std::atomic<int> failed;            // children that found something wrong
  char name[kMaxProcs][kNameMax];
  size_t namelen[kMaxProcs];
};

int g_me = -1;

[[noreturn]] void Die(const char* what, int ret) {
  std::fprintf(stderr, "child %d: %s: %s\n", g_me, what, fi_strerror(-ret));
  std::_Exit(2);
}

#define CHECK_FI(call)                                \
  do {                                                \
    const int ret_ = static_cast<int>(call);          \
    if (ret_ != 0) Die(#call, ret_);                  \
  } while (0)

uint64_t Tag(int round, int from, int k) {
  return (static_cast<uint64_t>(round) << 32) | (static_cast<uint64_t>(from) << 16) |
         static_cast<uint64_t>(k);
}

void Fill(char* buf, uint64_t tag) {
  for (size_t i = 0; i < kMsgLen; ++i) buf[i] = static_cast<char>((tag * 131 + i * 7) & 0xff);
}

struct Child {
  Board* board = nullptr;
  int n = 0;
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_cq* cq = nullptr;
  fid_av* av = nullptr;
  fid_ep* ep = nullptr;
  std::vector<fi_addr_t> addr;
  int bad = 0;

  void Open() {
    fi_info* hints = fi_allocinfo();
    hints->ep_attr->type = FI_EP_RDM;
    // What Open MPI's OFI MTL asks for.
    hints->caps = FI_TAGGED | FI_LOCAL_COMM | FI_REMOTE_COMM | FI_DIRECTED_RECV;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    CHECK_FI(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info));
    fi_freeinfo(hints);
    CHECK_FI(fi_fabric(info->fabric_attr, &fabric, nullptr));
    CHECK_FI(fi_domain(fabric, info, &domain, nullptr));
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    cq_attr.size = 4096;
    CHECK_FI(fi_cq_open(domain, &cq_attr, &cq, nullptr));
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    CHECK_FI(fi_av_open(domain, &av_attr, &av, nullptr));
    CHECK_FI(fi_endpoint(domain, info, &ep, nullptr));
    CHECK_FI(fi_ep_bind(ep, &av->fid, 0));
    CHECK_FI(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
    CHECK_FI(fi_enable(ep));
    size_t len = kNameMax;
    CHECK_FI(fi_getname(&ep->fid, board->name[g_me], &len));
    board->namelen[g_me] = len;
    board->ready.fetch_add(1);
  }

  void InsertAll() {
    while (board->ready.load() < n) sched_yield();
    addr.assign(n, FI_ADDR_NOTAVAIL);
    for (int i = 0; i < n; ++i) {
      if (i == g_me) continue;
      if (fi_av_insert(av, board->name[i], 1, &addr[i], 0, nullptr) != 1) {
        Die("fi_av_insert", -FI_EINVAL);
      }
    }
  }

  // One round: a message of kMsgLen to each of `to`, one expected from each
  // of `from`; polls until all have completed, yielding when idle.
  void Exchange(int round, const std::vector<int>& to, const std::vector<int>& from) {
    std::vector<std::vector<char>> rx(from.size(), std::vector<char>(kMsgLen));
    std::vector<std::vector<char>> tx(to.size(), std::vector<char>(kMsgLen));
    size_t pending = 0;
    for (size_t i = 0; i < from.size(); ++i) {
      CHECK_FI(fi_trecv(ep, rx[i].data(), kMsgLen, nullptr, addr[from[i]],
                        Tag(round, from[i], 0), 0, &rx[i]));
      ++pending;
    }
    for (size_t i = 0; i < to.size(); ++i) {
      Fill(tx[i].data(), Tag(round, g_me, 0));
      for (;;) {
        const ssize_t r = fi_tsend(ep, tx[i].data(), kMsgLen, nullptr, addr[to[i]],
                                   Tag(round, g_me, 0), &tx[i]);
        if (r == 0) break;
        if (r != -FI_EAGAIN) Die("fi_tsend", static_cast<int>(r));
        pending -= Poll();
      }
      ++pending;
    }
    while (pending > 0) pending -= Poll();
    for (size_t i = 0; i < from.size(); ++i) {
      std::vector<char> want(kMsgLen);
      Fill(want.data(), Tag(round, from[i], 0));
      if (std::memcmp(want.data(), rx[i].data(), kMsgLen) != 0) {
        std::fprintf(stderr, "child %d: round %d: the message from %d is damaged\n", g_me, round,
                     from[i]);
        ++bad;
      }
    }
  }

  // Reads completions; yields when there are none. Returns how many.
  size_t Poll() {
    fi_cq_tagged_entry e[16];
    const ssize_t r = fi_cq_read(cq, e, 16);
    if (r > 0) return static_cast<size_t>(r);
    if (r == -FI_EAGAIN) {
      sched_yield();
      return 0;
    }
    fi_cq_err_entry err{};
    if (r == -FI_EAVAIL && fi_cq_readerr(cq, &err, 0) == 1) {
      std::fprintf(stderr, "child %d: error completion: %s\n", g_me, fi_strerror(err.err));
      std::_Exit(3);
    }
    Die("fi_cq_read", static_cast<int>(r));
  }

  // The living, in index order.
  std::vector<int> Living() const {
    std::vector<int> v;
    for (int i = 0; i < n; ++i) {
      if (board->alive[i].load()) v.push_back(i);
    }
    return v;
  }

  int Run(int msgs) {
    Open();
    InsertAll();
    // Round 0..msgs-1: all-to-all.
    std::vector<int> others;
    for (int i = 0; i < n; ++i) {
      if (i != g_me) others.push_back(i);
    }
    int round = 0;
    for (; round < msgs; ++round) Exchange(round, others, others);
    board->done[g_me].store(round - 1);
    // Then one round per kill, with ring neighbours among the living.
    for (;;) {
      int r;
      while ((r = board->round.load()) < round && r != -1) {
        fi_cq_tagged_entry e;
        (void)fi_cq_read(cq, &e, 0);  // progress (acknowledgements) while waiting
        usleep(200);
      }
      if (r == -1) break;
      const std::vector<int> live = Living();
      std::vector<int> to, from;
      size_t at = 0;
      while (live[at] != g_me) ++at;
      const int k = std::min<int>(kNeighbours, static_cast<int>(live.size()) - 1);
      for (int j = 1; j <= k; ++j) {
        to.push_back(live[(at + j) % live.size()]);
        from.push_back(live[(at + live.size() - j) % live.size()]);
      }
      Exchange(round, to, from);
      board->done[g_me].store(round);
      ++round;
    }
    fi_close(&ep->fid);
    fi_close(&av->fid);
    fi_close(&cq->fid);
    fi_close(&domain->fid);
    fi_close(&fabric->fid);
    fi_freeinfo(info);
    return bad == 0 ? 0 : 1;
  }
};

int Flag(int argc, char** argv, const char* name, int def) {
  const size_t len = std::strlen(name);
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], name, len) == 0 && argv[i][len] == '=') return std::atoi(argv[i] + len + 1);
  }
  return def;
}

// Waits until every living child finished `round`, or one died by itself.
bool WaitRound(Board* b, int n, int round, const std::vector<pid_t>& pids) {
  for (;;) {
    bool all = true;
    for (int i = 0; i < n; ++i) {
      if (!b->alive[i].load()) continue;
      int status;
      if (waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        std::fprintf(stderr, "child %d exited early (status %d) in round %d\n", i, status, round);
        b->alive[i].store(0);
        return false;
      }
      all = all && b->done[i].load() >= round;
    }
    if (all) return true;
    usleep(1000);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int n = Flag(argc, argv, "--procs", 64);
  const int msgs = Flag(argc, argv, "--msgs", 2);
  if (n < 2 || n > kMaxProcs || msgs < 1) {
    std::fprintf(stderr, "fi_many_local: --procs must be 2..%d and --msgs at least 1\n", kMaxProcs);
    return 2;
  }
  void* mem = mmap(nullptr, sizeof(Board), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    std::perror("mmap");
    return 2;
  }
  Board* board = new (mem) Board();
  board->round.store(0);
  for (int i = 0; i < n; ++i) {
    board->done[i].store(-1);
    board->alive[i].store(1);
  }
  std::vector<pid_t> pids(n);
  for (int i = 0; i < n; ++i) {
    pids[i] = fork();
    if (pids[i] == 0) {
      g_me = i;
      Child c;
      c.board = board;
      c.n = n;
      std::_Exit(c.Run(msgs));
    }
  }
  timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  bool ok = WaitRound(board, n, msgs - 1, pids);
  std::printf("%d processes exchanged %d all-to-all rounds (%d messages)\n", n, msgs,
              n * (n - 1) * msgs);
  // Kill them one at a time; the survivors carry on with a round each.
  int round = msgs;
  for (int victim = 0; ok && victim < n - 2; ++victim, ++round) {
    kill(pids[victim], SIGKILL);
    waitpid(pids[victim], nullptr, 0);
    board->alive[victim].store(0);
    board->round.store(round);
    ok = WaitRound(board, n, round, pids);
  }
  board->round.store(-1);
  int failures = 0;
  for (int i = 0; i < n; ++i) {
    if (!board->alive[i].load()) continue;
    int status = 0;
    waitpid(pids[i], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
  }
  timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  const double secs = static_cast<double>(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
  std::printf("killed %d one at a time, a round after each: %s (%d failures) in %.1f s\n", n - 2,
              ok && failures == 0 ? "ok" : "FAILED", failures, secs);
  if (!ok) {
    for (int i = 0; i < n; ++i) {
      if (board->alive[i].load()) kill(pids[i], SIGKILL);
    }
  }
  return ok && failures == 0 ? 0 : 1;
}
