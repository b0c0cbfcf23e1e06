// Helpers for tests and benchmarks of collectives (fi_collective(3)) among
// processes of this host on the default domain (nothing configured): the
// caller forks n members before any fi_* call; each opens an RDM endpoint
// with FI_COLLECTIVE, publishes its name on a shared board, inserts every
// member's name in rank order, makes an AV set of them and joins it
// (FI_JOIN_COMPLETE from the EQ). Over the public libfabric API only.
#ifndef BYPASS_FABRIC_FI_FI_COLL_UTIL_H_
#define BYPASS_FABRIC_FI_FI_COLL_UTIL_H_

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_collective.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <vector>

namespace bypass::fi::coll_testing {

inline constexpr int kMaxMembers = 8;

// Shared by the members (MAP_SHARED before fork).
struct Board {
  std::atomic<int> published;
  char names[kMaxMembers][64];
  size_t lens[kMaxMembers];
};

// How a member waits for completions.
enum class Wait { kPoll, kSread, kAuto };

[[noreturn]] inline void Die(int rank, const char* what, long ret) {
  std::fprintf(stderr, "member %d: %s: %s (%ld)\n", rank, what, fi_strerror(static_cast<int>(-ret)),
               ret);
  std::_Exit(2);
}

#define COLL_CHECK(m, call)                                  \
  do {                                                       \
    const long ret_ = static_cast<long>(call);               \
    if (ret_ != 0) ::bypass::fi::coll_testing::Die((m).rank, #call, ret_); \
  } while (0)

struct Member {
  int rank = 0;
  int n = 0;
  Wait wait = Wait::kPoll;
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_cq* cq = nullptr;
  fid_eq* eq = nullptr;
  fid_ep* ep = nullptr;
  fid_av_set* set = nullptr;
  fid_mc* mc = nullptr;
  fi_addr_t coll = FI_ADDR_NOTAVAIL;
  std::vector<fi_addr_t> addrs;  // by rank

  // Opens the endpoint, meets the others on the board and joins them.
  void Join(Board* b) {
    fi_info* hints = fi_allocinfo();
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_MSG | FI_TAGGED | FI_COLLECTIVE;
    hints->fabric_attr->prov_name = strdup("bypass");
    if (wait == Wait::kAuto) hints->domain_attr->data_progress = FI_PROGRESS_AUTO;
    COLL_CHECK(*this, fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info));
    fi_freeinfo(hints);
    COLL_CHECK(*this, fi_fabric(info->fabric_attr, &fabric, nullptr));
    COLL_CHECK(*this, fi_domain(fabric, info, &domain, nullptr));
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    COLL_CHECK(*this, fi_av_open(domain, &av_attr, &av, nullptr));
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_CONTEXT;
    cq_attr.wait_obj = wait == Wait::kSread ? FI_WAIT_UNSPEC : FI_WAIT_NONE;
    COLL_CHECK(*this, fi_cq_open(domain, &cq_attr, &cq, nullptr));
    fi_eq_attr eq_attr{};
    eq_attr.wait_obj = FI_WAIT_UNSPEC;
    COLL_CHECK(*this, fi_eq_open(fabric, &eq_attr, &eq, nullptr));
    COLL_CHECK(*this, fi_endpoint(domain, info, &ep, nullptr));
    COLL_CHECK(*this, fi_ep_bind(ep, &av->fid, 0));
    COLL_CHECK(*this, fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
    COLL_CHECK(*this, fi_ep_bind(ep, &eq->fid, 0));
    COLL_CHECK(*this, fi_enable(ep));
    b->lens[rank] = sizeof(b->names[rank]);
    COLL_CHECK(*this, fi_getname(&ep->fid, b->names[rank], &b->lens[rank]));
    b->published.fetch_add(1);
    while (b->published.load() < n) usleep(200);
    addrs.resize(n);
    for (int i = 0; i < n; ++i) {
      if (fi_av_insert(av, b->names[i], 1, &addrs[i], 0, nullptr) != 1) Die(rank, "fi_av_insert", -FI_EINVAL);
    }
    fi_av_set_attr set_attr{};
    set_attr.count = n;
    set_attr.start_addr = addrs[0];
    set_attr.end_addr = addrs[n - 1];
    set_attr.stride = 1;
    COLL_CHECK(*this, fi_av_set(av, &set_attr, &set, nullptr));
    fi_addr_t set_addr = FI_ADDR_NOTAVAIL;
    COLL_CHECK(*this, fi_av_set_addr(set, &set_addr));
    int join_ctx = 0;
    COLL_CHECK(*this, fi_join_collective(ep, set_addr, set, 0, &mc, &join_ctx));
    uint32_t event = 0;
    fi_eq_entry entry{};
    const ssize_t got = fi_eq_sread(eq, &event, &entry, sizeof(entry), 20000, 0);
    if (got != static_cast<ssize_t>(sizeof(entry))) Die(rank, "fi_eq_sread (join)", got);
    if (event != FI_JOIN_COMPLETE || entry.fid != &mc->fid || entry.context != &join_ctx) {
      Die(rank, "the join's event", -FI_EOTHER);
    }
    coll = fi_mc_addr(mc);
  }

  // Waits for one completion and returns its context (exits on an error).
  void* WaitOne() {
    fi_cq_entry e{};
    for (;;) {
      const ssize_t got = wait == Wait::kSread ? fi_cq_sread(cq, &e, 1, nullptr, 1000)
                                               : fi_cq_read(cq, &e, 1);
      if (got == 1) return e.op_context;
      if (got == -FI_EAVAIL) {
        fi_cq_err_entry err{};
        fi_cq_readerr(cq, &err, 0);
        std::fprintf(stderr, "member %d: a collective failed: %s (%d)\n", rank,
                     fi_strerror(err.err), err.prov_errno);
        std::_Exit(3);
      }
      if (got != -FI_EAGAIN) Die(rank, "fi_cq_read", got);
      if (wait != Wait::kSread) sched_yield();
    }
  }
  // Posts (retrying -FI_EAGAIN) and waits for the completion of ctx.
  template <class F>
  void Run(const char* what, void* ctx, F post) {
    for (;;) {
      const ssize_t ret = post();
      if (ret == 0) break;
      if (ret != -FI_EAGAIN) Die(rank, what, ret);
      fi_cq_entry e{};
      (void)fi_cq_read(cq, &e, 0);
    }
    if (WaitOne() != ctx) Die(rank, what, -FI_EOTHER);
  }

  void Close() {
    COLL_CHECK(*this, fi_close(&mc->fid));
    COLL_CHECK(*this, fi_close(&set->fid));
    COLL_CHECK(*this, fi_close(&ep->fid));
    COLL_CHECK(*this, fi_close(&eq->fid));
    COLL_CHECK(*this, fi_close(&cq->fid));
    COLL_CHECK(*this, fi_close(&av->fid));
    COLL_CHECK(*this, fi_close(&domain->fid));
    COLL_CHECK(*this, fi_close(&fabric->fid));
    fi_freeinfo(info);
  }
};

// Forks n members, each running body(member) after joining, and waits for
// them. Returns how many failed (a non-zero exit or a signal).
inline int RunMembers(int n, Wait wait, const std::function<int(Member&)>& body) {
  void* mem = mmap(nullptr, sizeof(Board), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return n;
  Board* b = new (mem) Board{};
  std::vector<pid_t> kids(n);
  for (int i = 0; i < n; ++i) {
    kids[i] = fork();
    if (kids[i] == 0) {
      Member m;
      m.rank = i;
      m.n = n;
      m.wait = wait;
      m.Join(b);
      const int ret = body(m);
      m.Close();
      std::fflush(stdout);
      std::_Exit(ret);
    }
  }
  int failed = 0;
  for (int i = 0; i < n; ++i) {
    int status = 0;
    waitpid(kids[i], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "member %d failed (status 0x%x)\n", i, status);
      ++failed;
    }
  }
  munmap(mem, sizeof(Board));
  return failed;
}

}  // namespace bypass::fi::coll_testing

#endif  // BYPASS_FABRIC_FI_FI_COLL_UTIL_H_
