// A lock built from fi_compare_atomic among processes of one host over the
// default domain (nothing configured): a host process registers a region
// with a lock word and a plain counter; four contender processes each take
// the lock (FI_CSWAP 0 -> their id until it fetches 0), read the counter
// with fi_read, write it back plus one with fi_write, and release the lock
// (FI_ATOMIC_WRITE 0), --iters times. The count is exact only if the lock
// excluded: each read-modify-write of the counter is two RMA operations,
// not atomic. Exits 0 when the host finds count == contenders * iters and
// the lock free. Idle processes yield: five share the machine's cores.
//
//   fi_atomic_lock [--procs=4] [--iters=50]
#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

namespace {

constexpr int kMaxProcs = 16;
constexpr size_t kNameMax = 64;

// Shared by every process (MAP_SHARED before fork).
struct Board {
  std::atomic<int> host_ready;  // the host published name, key and address
  std::atomic<int> finished;    // contenders done
  char name[kNameMax];
  size_t namelen;
  uint64_t key;
  uint64_t addr;
};

int g_me = -1;  // 0: the host; 1..: contenders

[[noreturn]] void Die(const char* what, int ret) {
  std::fprintf(stderr, "process %d: %s: %s\n", g_me, what, fi_strerror(-ret));
  std::_Exit(2);
}

#define CHECK_FI(call)                  \
  do {                                  \
    const int ret_ = static_cast<int>(call); \
    if (ret_ != 0) Die(#call, ret_);    \
  } while (0)

struct Node {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_cq* cq = nullptr;
  fid_ep* ep = nullptr;

  void Open() {
    fi_info* hints = fi_allocinfo();
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_MSG | FI_RMA | FI_ATOMIC;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED;
    hints->fabric_attr->prov_name = strdup("bypass");
    CHECK_FI(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info));
    fi_freeinfo(hints);
    CHECK_FI(fi_fabric(info->fabric_attr, &fabric, nullptr));
    CHECK_FI(fi_domain(fabric, info, &domain, nullptr));
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    CHECK_FI(fi_av_open(domain, &av_attr, &av, nullptr));
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_CONTEXT;
    CHECK_FI(fi_cq_open(domain, &cq_attr, &cq, nullptr));
    CHECK_FI(fi_endpoint(domain, info, &ep, nullptr));
    CHECK_FI(fi_ep_bind(ep, &av->fid, 0));
    CHECK_FI(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
    CHECK_FI(fi_enable(ep));
  }
  // One pass of progress; yields when nothing completed.
  bool Poll() {
    fi_cq_entry e;
    const ssize_t n = fi_cq_read(cq, &e, 1);
    if (n == 1) return true;
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(cq, &err, 0);
      std::fprintf(stderr, "process %d: operation failed: %s\n", g_me,
                   fi_strerror(err.err));
      std::_Exit(3);
    }
    if (n != -FI_EAGAIN) Die("fi_cq_read", static_cast<int>(n));
    sched_yield();
    return false;
  }
  void WaitOne() {
    while (!Poll()) {
    }
  }
  void Close() {
    fi_close(&ep->fid);
    fi_close(&cq->fid);
    fi_close(&av->fid);
    fi_close(&domain->fid);
    fi_close(&fabric->fid);
    fi_freeinfo(info);
  }
};

// Retries a post while it answers -FI_EAGAIN, progressing meanwhile.
template <class F>
void Post(Node& n, const char* what, F post) {
  for (;;) {
    const ssize_t ret = post();
    if (ret == 0) return;
    if (ret != -FI_EAGAIN) Die(what, static_cast<int>(ret));
    n.Poll();
  }
}

int Contend(Board* b, int iters) {
  Node n;
  n.Open();
  while (b->host_ready.load() == 0) sched_yield();
  fi_addr_t host = FI_ADDR_NOTAVAIL;
  if (fi_av_insert(n.av, b->name, 1, &host, 0, nullptr) != 1) Die("fi_av_insert", -FI_EINVAL);
  const uint64_t lock = b->addr, counter = b->addr + 8;
  const uint64_t me = static_cast<uint64_t>(g_me), zero = 0;
  uint64_t old = 0, value = 0;
  for (int i = 0; i < iters; ++i) {
    do {  // take the lock: CSWAP 0 -> me, until it was 0
      Post(n, "fi_compare_atomic", [&] {
        return fi_compare_atomic(n.ep, &me, 1, nullptr, &zero, nullptr, &old, nullptr, host,
                                 lock, b->key, FI_UINT64, FI_CSWAP, nullptr);
      });
      n.WaitOne();
    } while (old != 0);
    Post(n, "fi_read", [&] {
      return fi_read(n.ep, &value, sizeof(value), nullptr, host, counter, b->key, nullptr);
    });
    n.WaitOne();
    ++value;
    Post(n, "fi_write", [&] {
      return fi_write(n.ep, &value, sizeof(value), nullptr, host, counter, b->key, nullptr);
    });
    n.WaitOne();  // applied at the host before the lock goes
    Post(n, "fi_atomic", [&] {
      return fi_atomic(n.ep, &zero, 1, nullptr, host, lock, b->key, FI_UINT64, FI_ATOMIC_WRITE,
                       nullptr);
    });
    n.WaitOne();
  }
  b->finished.fetch_add(1);
  n.Close();
  return 0;
}

int Host(Board* b, int procs, int iters) {
  Node n;
  n.Open();
  alignas(16) static uint64_t region[2] = {0, 0};  // lock, counter
  fid_mr* mr = nullptr;
  CHECK_FI(fi_mr_reg(n.domain, region, sizeof(region), FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0,
                     &mr, nullptr));
  b->namelen = sizeof(b->name);
  CHECK_FI(fi_getname(&n.ep->fid, b->name, &b->namelen));
  b->key = fi_mr_key(mr);
  b->addr = reinterpret_cast<uint64_t>(region);
  b->host_ready.store(1);
  // The host's progress executes the contenders' atomics and RMA.
  while (b->finished.load() < procs) n.Poll();
  const uint64_t want = static_cast<uint64_t>(procs) * static_cast<uint64_t>(iters);
  std::printf("counter %llu (want %llu), lock %llu\n", static_cast<unsigned long long>(region[1]),
              static_cast<unsigned long long>(want), static_cast<unsigned long long>(region[0]));
  const bool ok = region[1] == want && region[0] == 0;
  fi_close(&mr->fid);
  n.Close();
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  int procs = 4, iters = 50;
  for (int i = 1; i < argc; ++i) {
    if (std::sscanf(argv[i], "--procs=%d", &procs) == 1) continue;
    if (std::sscanf(argv[i], "--iters=%d", &iters) == 1) continue;
    std::fprintf(stderr, "usage: %s [--procs=N] [--iters=M]\n", argv[0]);
    return 2;
  }
  if (procs < 1 || procs >= kMaxProcs) return 2;
  void* mem = mmap(nullptr, sizeof(Board), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                   -1, 0);
  if (mem == MAP_FAILED) return 2;
  Board* b = new (mem) Board{};
  pid_t kids[kMaxProcs];
  for (int i = 1; i <= procs; ++i) {
    kids[i] = fork();
    if (kids[i] == 0) {
      g_me = i;
      std::_Exit(Contend(b, iters));
    }
  }
  g_me = 0;
  int ret = Host(b, procs, iters);
  for (int i = 1; i <= procs; ++i) {
    int status = 0;
    waitpid(kids[i], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "contender %d failed (status 0x%x)\n", i, status);
      ret = 1;
    }
  }
  return ret;
}
