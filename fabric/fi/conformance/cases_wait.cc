// Waiting and progress: wait objects (fi_cq(3), fi_cntr(3), fi_eq(3)
// wait_obj, fi_control FI_GETWAIT), fi_trywait with epoll, blocking reads
// that sleep, fi_cq_signal, wait sets and poll sets (fi_poll(3)), and
// FI_PROGRESS_AUTO (fi_domain(3)).
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/poll.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "fabric/fi/conformance/conformance.h"

namespace bypass::fi::conformance {
namespace {

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}
double MonotonicSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// A pair whose CQs use `wait`, FI_THREAD_SAFE (threads block in them).
Pair WaitPair(Ctx& c, fi_wait_obj wait) {
  fi_info* h = c.Hints();
  h->domain_attr->threading = FI_THREAD_SAFE;
  EpOpts o;
  o.wait = wait;
  return c.OpenPair(h, o);
}

// A pair on two domains of one fabric whose receiver b has the counter
// open_cntr makes on its domain bound FI_RECV.
struct CntrPair {
  Ep a, b;
  fid_cntr* cntr = nullptr;
  fi_addr_t to_b = FI_ADDR_NOTAVAIL;
};
CntrPair OpenCntrPair(Ctx& c, fi_info* i, const std::function<fid_cntr*(fid_domain*)>& open_cntr) {
  fid_fabric* f = c.Fabric(i);
  fid_domain* db = c.Domain(f, i);
  CntrPair p;
  p.cntr = open_cntr(db);
  EpOpts ob;
  ob.cntr = p.cntr;
  ob.cntr_flags = FI_RECV;
  p.a = c.OpenEp(c.Domain(f, i), i);
  p.b = c.OpenEp(db, i, ob);
  p.to_b = c.Insert(p.a.av, p.b.name);
  c.Insert(p.b.av, p.a.name);
  return p;
}

// A thread that injects `count` small messages from a to `to`, then keeps
// progressing a (if the provider needs it) until destroyed.
class Sender {
 public:
  Sender(Ctx& c, const Ep& a, fi_addr_t to, int count)
      : thread_([this, &c, &a, to, count] {
          for (int k = 0; k < count; ++k)
            c.Post("fi_inject", [&] { return fi_inject(a.ep, "msg", 4, to); });
          while (!done_.load()) {
            fi_cq_read(a.tx, nullptr, 0);
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
        }) {}
  ~Sender() {
    done_ = true;
    thread_.join();
  }
  Sender(const Sender&) = delete;
  Sender& operator=(const Sender&) = delete;

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// "fi_control ... FI_GETWAIT ... an 'int *' for FI_WAIT_FD": a CQ opened with
// FI_WAIT_FD hands out a file descriptor, and FI_GETWAITOBJ names its kind.
CONFORMANCE_CASE(wait_cq_fd_getwait, kShm) {
  fi_info* i = c.Info(c.Hints());
  fid_cq* cq = c.Cq(c.Domain(c.Fabric(i), i), FI_CQ_FORMAT_CONTEXT, FI_WAIT_FD);
  int fd = -1;
  CHECK_RET(fi_control(&cq->fid, FI_GETWAIT, &fd), 0);
  CHECK(fd >= 0, "FI_GETWAIT gave fd " << fd);
  fi_wait_obj kind = FI_WAIT_NONE;
  CHECK_RET(fi_control(&cq->fid, FI_GETWAITOBJ, &kind), 0);
  CHECK(kind == FI_WAIT_FD, "FI_GETWAITOBJ says " << kind);
}

// FI_WAIT_MUTEX_COND: FI_GETWAIT fills a struct fi_mutex_cond.
CONFORMANCE_CASE(wait_cq_mutex_cond_getwait, kShm) {
  fi_info* i = c.Info(c.Hints());
  fid_cq* cq = c.Cq(c.Domain(c.Fabric(i), i), FI_CQ_FORMAT_CONTEXT, FI_WAIT_MUTEX_COND);
  fi_mutex_cond mc{};
  CHECK_RET(fi_control(&cq->fid, FI_GETWAIT, &mc), 0);
  CHECK(mc.mutex != nullptr && mc.cond != nullptr, "FI_GETWAIT gave a null mutex or cond");
}

// FI_WAIT_POLLFD: a CQ opens with it and FI_GETWAIT fills a struct
// fi_wait_pollfd with its file descriptors.
CONFORMANCE_CASE(wait_cq_pollfd, kShm) {
  fi_info* i = c.Info(c.Hints());
  fid_cq* cq = c.Cq(c.Domain(c.Fabric(i), i), FI_CQ_FORMAT_CONTEXT, FI_WAIT_POLLFD);
  pollfd fds[4] = {};
  fi_wait_pollfd pf{};
  pf.nfds = 4;
  pf.fd = fds;
  CHECK_RET(fi_control(&cq->fid, FI_GETWAIT, &pf), 0);
  CHECK(pf.nfds >= 1, "FI_GETWAIT gave " << pf.nfds << " fds");
}

// fi_poll(3)'s fi_trywait pattern with epoll over two CQs' fds: the
// application blocks only in epoll_wait after fi_trywait returned 0, and
// every message sent from another thread after a pause arrives.
CONFORMANCE_CASE(wait_trywait_epoll_two_cqs, kShm) {
  Pair p = WaitPair(c, FI_WAIT_FD);
  int fds[2] = {-1, -1};
  CHECK_RET(fi_control(&p.a.rx->fid, FI_GETWAIT, &fds[0]), 0);
  CHECK_RET(fi_control(&p.b.rx->fid, FI_GETWAIT, &fds[1]), 0);
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  CHECK(ep >= 0, "epoll_create1 failed");
  for (int fd : fds) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0, "epoll_ctl rejected a CQ fd");
  }
  // fi_trywait's fabric: one of the provider's (the pair's own is not
  // handed out; the fids name the objects).
  fid_fabric* fabric = c.Fabric(p.a.info);
  char abuf[16] = {}, bbuf[16] = {};
  CHECK_RET(fi_recv(p.a.ep, abuf, sizeof abuf, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  CHECK_RET(fi_recv(p.b.ep, bbuf, sizeof bbuf, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  fid* fids[2] = {&p.a.rx->fid, &p.b.rx->fid};
  int got = 0;
  for (int round = 0; round < 4; ++round) {
    const bool to_b = round % 2 == 0;
    std::thread sender([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (to_b) {
        c.Post("fi_inject", [&] { return fi_inject(p.a.ep, "msg", 4, p.a_to_b); });
      } else {
        c.Post("fi_inject", [&] { return fi_inject(p.b.ep, "msg", 4, p.b_to_a); });
      }
    });
    const double deadline = MonotonicSeconds() + kHangSeconds;
    bool arrived = false;
    while (!arrived) {
      CHECK(MonotonicSeconds() < deadline, "hang: message " << round << " never arrived");
      const int tw = fi_trywait(fabric, fids, 2);
      CHECK(tw == 0 || tw == -FI_EAGAIN, "fi_trywait returned " << Err(tw));
      if (tw == 0) {
        epoll_event out[2];
        epoll_wait(ep, out, 2, 1000);
      }
      fid_cq* cq = to_b ? p.b.rx : p.a.rx;
      fi_cq_tagged_entry e;  // the pair's CQs are FI_CQ_FORMAT_TAGGED
      arrived = fi_cq_read(cq, &e, 1) == 1;
    }
    sender.join();
    ++got;
    if (to_b) {
      CHECK_RET(fi_recv(p.b.ep, bbuf, sizeof bbuf, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    } else {
      CHECK_RET(fi_recv(p.a.ep, abuf, sizeof abuf, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    }
  }
  close(ep);
  CHECK(got == 4, "got " << got << " messages");
}

// fi_cq_sread with nothing to read returns -FI_EAGAIN after its timeout and
// the process does not spin meanwhile (under half a CPU-second per second:
// a spin takes about one).
CONFORMANCE_CASE(wait_cq_sread_sleeps, kShm) {
  Pair p = WaitPair(c, FI_WAIT_UNSPEC);
  fi_cq_tagged_entry e;
  const double cpu0 = ProcessCpuSeconds(), wall0 = MonotonicSeconds();
  {
    HangGuard guard(kHangSeconds, "fi_cq_sread with a 500 ms timeout");
    CHECK_RET(fi_cq_sread(p.b.rx, &e, 1, nullptr, 500), -FI_EAGAIN);
  }
  const double cpu = ProcessCpuSeconds() - cpu0, wall = MonotonicSeconds() - wall0;
  CHECK(wall >= 0.45, "returned after " << wall << " s of a 500 ms timeout");
  CHECK(cpu < 0.5 * wall, "used " << cpu << " CPU-seconds in " << wall << " s: it spins");
}

// "fi_cq_signal: Unblock any thread waiting in fi_cq_sread" (with no timeout).
CONFORMANCE_CASE(wait_cq_signal_wakes_sread, kShm) {
  Pair p = WaitPair(c, FI_WAIT_UNSPEC);
  std::atomic<long> r{1};
  std::thread reader([&] {
    fi_cq_tagged_entry e;
    r = fi_cq_sread(p.b.rx, &e, 1, nullptr, -1);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_RET(fi_cq_signal(p.b.rx), 0);
  const double deadline = MonotonicSeconds() + kHangSeconds;
  while (r.load() == 1 && MonotonicSeconds() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (r.load() == 1) {
    reader.detach();
    CHECK(false, "hang: fi_cq_signal did not wake the thread in fi_cq_sread");
  }
  reader.join();
  CHECK(r.load() == -FI_EAGAIN, "the woken sread returned " << Err(r.load()));
}

// fi_cq_sread wakes with a completion a peer thread causes.
CONFORMANCE_CASE(wait_cq_sread_completes, kShm) {
  Pair p = WaitPair(c, FI_WAIT_UNSPEC);
  char buf[16] = {};
  CHECK_RET(fi_recv(p.b.ep, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, buf), 0);
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    c.Post("fi_inject", [&] { return fi_inject(p.a.ep, "sread", 6, p.a_to_b); });
    fi_cq_tagged_entry e;
    fi_cq_sread(p.a.tx, &e, 1, nullptr, 200);  // a's progress, if the provider needs it
  });
  fi_cq_tagged_entry e;
  long r;
  {
    HangGuard guard(kHangSeconds + 5, "fi_cq_sread");
    r = fi_cq_sread(p.b.rx, &e, 1, nullptr, kHangSeconds * 1000);
  }
  sender.join();
  CHECK(r == 1, "fi_cq_sread returned " << Err(r));
  CHECK(e.op_context == buf, "the completion's context is not the receive's");
}

// fi_eq_sread blocks until fi_eq_write adds an event from another thread.
CONFORMANCE_CASE(wait_eq_sread_write, kShm) {
  fi_info* i = c.Info(c.Hints());
  fid_fabric* f = c.Fabric(i);
  fi_eq_attr attr{};
  attr.wait_obj = FI_WAIT_UNSPEC;
  attr.flags = FI_WRITE;
  fid_eq* eq = nullptr;
  CHECK_RET(fi_eq_open(f, &attr, &eq, nullptr), 0);
  c.Own(&eq->fid);
  fi_eq_entry entry{};
  uint32_t event = 0;
  CHECK_RET(fi_eq_sread(eq, &event, &entry, sizeof entry, 20, 0), -FI_EAGAIN);
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    fi_eq_entry w{};
    w.data = 7;
    fi_eq_write(eq, FI_NOTIFY, &w, sizeof w, 0);
  });
  long r;
  {
    HangGuard guard(kHangSeconds + 5, "fi_eq_sread");
    r = fi_eq_sread(eq, &event, &entry, sizeof entry, kHangSeconds * 1000, 0);
  }
  writer.join();
  CHECK(r == static_cast<long>(sizeof entry), "fi_eq_sread returned " << Err(r));
  CHECK(event == FI_NOTIFY && entry.data == 7, "the event read is not the one written");
}

// fi_cntr_wait returns once messages from another thread are counted; the
// waiting thread calls nothing else.
CONFORMANCE_CASE(wait_cntr_wait_traffic, kShm) {
  fi_info* h = c.Hints();
  h->domain_attr->threading = FI_THREAD_SAFE;
  CntrPair p = OpenCntrPair(c, c.Info(h), [&](fid_domain* d) { return c.Cntr(d, FI_WAIT_UNSPEC); });
  char bufs[3][16] = {};
  for (auto& buf : bufs)
    CHECK_RET(fi_recv(p.b.ep, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  int r;
  {
    Sender sender(c, p.a, p.to_b, 3);
    HangGuard guard(kHangSeconds + 5, "fi_cntr_wait");
    r = fi_cntr_wait(p.cntr, 3, kHangSeconds * 1000);
  }
  CHECK(r == 0, "fi_cntr_wait returned " << Err(r));
}

// A wait set: a CQ opened with FI_WAIT_SET on it; fi_wait times out with
// nothing, and returns 0 once a message arrives in the CQ.
CONFORMANCE_CASE(wait_set_fi_wait, kShm) {
  fi_info* h = c.Hints();
  h->domain_attr->threading = FI_THREAD_SAFE;
  fi_info* i = c.Info(h);
  fid_fabric* f = c.Fabric(i);
  fi_wait_attr wa{};
  wa.wait_obj = FI_WAIT_UNSPEC;
  fid_wait* ws = nullptr;
  CHECK_RET(fi_wait_open(f, &wa, &ws), 0);
  c.Own(&ws->fid);
  fid_domain* db = c.Domain(f, i);
  fi_cq_attr ca{};
  ca.format = FI_CQ_FORMAT_CONTEXT;
  ca.wait_obj = FI_WAIT_SET;
  ca.wait_set = ws;
  fid_cq* rx = nullptr;
  CHECK_RET(fi_cq_open(db, &ca, &rx, nullptr), 0);
  c.Own(&rx->fid);
  fid_cq* tx = c.Cq(db, FI_CQ_FORMAT_CONTEXT);
  fid_av* av = c.Av(db, FI_AV_TABLE);
  fid_ep* b = nullptr;
  CHECK_RET(fi_endpoint(db, i, &b, nullptr), 0);
  c.Own(&b->fid);
  CHECK_RET(fi_ep_bind(b, &av->fid, 0), 0);
  CHECK_RET(fi_ep_bind(b, &tx->fid, FI_TRANSMIT), 0);
  CHECK_RET(fi_ep_bind(b, &rx->fid, FI_RECV), 0);
  CHECK_RET(fi_enable(b), 0);
  std::vector<char> bname(256);
  size_t len = bname.size();
  CHECK_RET(fi_getname(&b->fid, bname.data(), &len), 0);
  bname.resize(len);
  Ep a = c.OpenEp(c.Domain(f, i), i);
  const fi_addr_t to_b = c.Insert(a.av, bname);
  {
    HangGuard guard(kHangSeconds, "fi_wait with a 20 ms timeout");
    const int r = fi_wait(ws, 20);
    CHECK(r == -FI_ETIMEDOUT || r == -FI_EAGAIN, "fi_wait with nothing returned " << Err(r));
  }
  char buf[16] = {};
  CHECK_RET(fi_recv(b, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  Sender sender(c, a, to_b, 1);
  const double deadline = MonotonicSeconds() + kHangSeconds;
  bool got = false;
  while (!got && MonotonicSeconds() < deadline) {
    fi_wait(ws, 1000);  // may wake early (fi_poll(3): "events might have occurred")
    fi_cq_entry e;
    got = fi_cq_read(rx, &e, 1) == 1;
  }
  CHECK(got, "hang: the message never arrived through fi_wait");
}

// A poll set with a CQ and a counter: fi_poll returns the context of the CQ
// once it has a completion and of the counter once it changed; nothing
// after the CQ is read and the counter is unchanged.
CONFORMANCE_CASE(poll_set_cq_cntr, kShm) {
  static int cntr_ctx;
  CntrPair p = OpenCntrPair(c, c.Info(c.Hints()), [&](fid_domain* d) {
    fi_cntr_attr cattr{};
    cattr.events = FI_CNTR_EVENTS_COMP;
    fid_cntr* n = nullptr;
    CHECK_RET(fi_cntr_open(d, &cattr, &n, &cntr_ctx), 0);
    c.Own(&n->fid);
    return n;
  });
  const Ep& a = p.a;
  const Ep& b = p.b;
  fid_cntr* n = p.cntr;
  const fi_addr_t to_b = p.to_b;
  fid_domain* db = b.domain;
  fi_poll_attr pa{};
  fid_poll* ps = nullptr;
  CHECK_RET(fi_poll_open(db, &pa, &ps), 0);
  c.Own(&ps->fid);
  CHECK_RET(fi_poll_add(ps, &b.rx->fid, 0), 0);
  CHECK_RET(fi_poll_add(ps, &n->fid, 0), 0);
  void* ctx[4] = {};
  char buf[16] = {};
  CHECK_RET(fi_recv(b.ep, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  c.Post("fi_inject", [&] { return fi_inject(a.ep, "poll", 5, to_b); });
  bool cq_seen = false, cntr_seen = false;
  const double deadline = MonotonicSeconds() + kHangSeconds;
  while (!(cq_seen && cntr_seen)) {
    CHECK(MonotonicSeconds() < deadline,
          "hang: fi_poll never reported " << (cq_seen ? "the counter" : "the CQ"));
    fi_cq_read(a.tx, nullptr, 0);
    const int r = fi_poll(ps, ctx, 4);
    CHECK(r >= 0, "fi_poll returned " << Err(r));
    for (int k = 0; k < r; ++k) {
      cq_seen = cq_seen || ctx[k] == b.rx->fid.context;
      cntr_seen = cntr_seen || ctx[k] == &cntr_ctx;
    }
  }
  fi_cq_tagged_entry e;
  CHECK_RET(fi_cq_read(b.rx, &e, 1), 1);
  const int r = fi_poll(ps, ctx, 4);
  CHECK(r == 0, "fi_poll after the CQ was read and the counter unchanged returned " << Err(r));
  CHECK_RET(fi_poll_del(ps, &b.rx->fid, 0), 0);
  CHECK_RET(fi_poll_del(ps, &n->fid, 0), 0);
}

// fi_getinfo with FI_PROGRESS_AUTO asked for data and control: entries
// report it (fi_domain(3): "all providers are required to support
// FI_PROGRESS_AUTO").
CONFORMANCE_CASE(progress_auto_offered, kShm) {
  fi_info* h = c.Hints();
  h->domain_attr->data_progress = FI_PROGRESS_AUTO;
  h->domain_attr->control_progress = FI_PROGRESS_AUTO;
  fi_info* i = c.Info(h);
  CHECK(i->domain_attr->data_progress == FI_PROGRESS_AUTO,
        "data_progress " << i->domain_attr->data_progress);
  CHECK(i->domain_attr->control_progress == FI_PROGRESS_AUTO,
        "control_progress " << i->domain_attr->control_progress);
}

// FI_PROGRESS_AUTO: messages complete while the receiving application calls
// nothing until the end (one fi_cntr_read): sends of 64 KiB that complete
// only once the receiver has them.
CONFORMANCE_CASE(progress_auto_completes, kShm) {
  fi_info* h = c.Hints();
  h->domain_attr->data_progress = FI_PROGRESS_AUTO;
  h->domain_attr->control_progress = FI_PROGRESS_AUTO;
  h->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
  CntrPair p = OpenCntrPair(c, c.Info(h), [&](fid_domain* d) { return c.Cntr(d); });
  const Ep& a = p.a;
  const Ep& b = p.b;
  fid_cntr* n = p.cntr;
  const fi_addr_t to_b = p.to_b;
  constexpr size_t kLen = 64 * 1024;
  char* rbuf = c.Buf(2 * kLen);
  char* sbuf = c.Buf(kLen, 's');
  CHECK_RET(fi_recv(b.ep, rbuf, kLen, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  CHECK_RET(fi_recv(b.ep, rbuf + kLen, kLen, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  int sent = 0;
  for (int k = 0; k < 2; ++k) {
    c.Post("fi_send", [&] { return fi_send(a.ep, sbuf, kLen, nullptr, to_b, nullptr); });
  }
  const double deadline = MonotonicSeconds() + kHangSeconds;
  while (sent < 2) {
    CHECK(MonotonicSeconds() < deadline, "hang: sends not complete with the receiver idle");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    fi_cq_tagged_entry e[2];
    const ssize_t r = fi_cq_read(a.tx, e, 2);  // a only; b's application stays idle
    if (r > 0) sent += static_cast<int>(r);
  }
  CHECK(fi_cntr_read(n) == 2, "the receiver's counter reads " << fi_cntr_read(n));
  CHECK(rbuf[2 * kLen - 1] == 's', "the second message's last byte did not land");
}

}  // namespace
}  // namespace bypass::fi::conformance
