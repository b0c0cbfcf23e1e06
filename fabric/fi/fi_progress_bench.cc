// The cost of FI_PROGRESS_AUTO and of sleeping waits, on the default domain
// (no configuration: shm within the host), two endpoints on two domains of
// one process, one thread each. Prints, in one run:
//  - 8 B ping-pong latency with FI_PROGRESS_MANUAL (the baseline: both
//    threads poll fi_cq_read), with FI_PROGRESS_AUTO (the same polling, a
//    progress thread per domain beside it), and with both threads asleep in
//    fi_cq_sread between messages (AUTO and MANUAL), as ratios to the
//    baseline;
//  - the CPU an idle FI_PROGRESS_AUTO endpoint uses over 2 s (goal: under
//    1% of a core), and that of a process whose thread blocks 2 s in
//    fi_cq_sread.
// bazel run -c opt //fabric/fi:fi_progress_bench
//
// With --trigger [ROUNDS] it measures triggered operations instead
// (fi_trigger(3)), one thread, manual progress, alternating in one run:
//  - triggered: a send posted with FI_TRIGGER beforehand, its counter one
//    below the threshold; timed from the fi_cntr_add that reaches the
//    threshold to the message's completion at the receiver;
//  - plain (the baseline): timed from fi_send to the same arrival.
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_trigger.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

#define CHECK_FI(call)                                                                      \
  do {                                                                                      \
    const long ret_ = static_cast<long>(call);                                              \
    if (ret_ < 0) {                                                                         \
      std::fprintf(stderr, "%s failed: %s\n", #call, fi_strerror(static_cast<int>(-ret_))); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

double Seconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// One endpoint on its own domain, its CQ (send and receive) waiting with
// FI_WAIT_UNSPEC so fi_cq_sread may block.
struct Side {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_cq* cq = nullptr;
  fid_av* av = nullptr;
  fid_ep* ep = nullptr;
  fi_addr_t peer = FI_ADDR_UNSPEC;
  char buf[64] = {};

  void Open(fi_progress progress) {
    fi_info* hints = fi_allocinfo();
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_MSG | FI_TRIGGER;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->domain_attr->data_progress = progress;
    hints->domain_attr->control_progress = progress;
    CHECK_FI(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info));
    fi_freeinfo(hints);
    CHECK_FI(fi_fabric(info->fabric_attr, &fabric, nullptr));
    CHECK_FI(fi_domain(fabric, info, &domain, nullptr));
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_CONTEXT;
    cq_attr.wait_obj = FI_WAIT_UNSPEC;
    CHECK_FI(fi_cq_open(domain, &cq_attr, &cq, nullptr));
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    CHECK_FI(fi_av_open(domain, &av_attr, &av, nullptr));
    CHECK_FI(fi_endpoint(domain, info, &ep, nullptr));
    CHECK_FI(fi_ep_bind(ep, &av->fid, 0));
    CHECK_FI(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
    CHECK_FI(fi_enable(ep));
  }

  std::vector<char> Name() {
    std::vector<char> name(256);
    size_t len = name.size();
    CHECK_FI(fi_getname(&ep->fid, name.data(), &len));
    name.resize(len);
    return name;
  }

  void Close() {
    CHECK_FI(fi_close(&ep->fid));
    CHECK_FI(fi_close(&av->fid));
    CHECK_FI(fi_close(&cq->fid));
    CHECK_FI(fi_close(&domain->fid));
    CHECK_FI(fi_close(&fabric->fid));
    fi_freeinfo(info);
  }

  void PostRecv() {
    ssize_t r;
    while ((r = fi_recv(ep, buf, sizeof(buf), nullptr, FI_ADDR_UNSPEC, buf)) == -FI_EAGAIN) {
      fi_cq_read(cq, nullptr, 0);
    }
    CHECK_FI(r);
  }
  void Send() {
    ssize_t r;
    while ((r = fi_inject(ep, "01234567", 8, peer)) == -FI_EAGAIN) fi_cq_read(cq, nullptr, 0);
    CHECK_FI(r);
  }
  // The next receive completion (injects have none).
  void Receive(bool sleep) {
    fi_cq_entry e;
    ssize_t r;
    do {
      r = sleep ? fi_cq_sread(cq, &e, 1, nullptr, 5000) : fi_cq_read(cq, &e, 1);
    } while (r == -FI_EAGAIN);
    CHECK_FI(r);
  }
};

void Connect(Side& a, Side& b) {
  std::vector<char> na = a.Name(), nb = b.Name();
  CHECK_FI(fi_av_insert(a.av, nb.data(), 1, &a.peer, 0, nullptr));
  CHECK_FI(fi_av_insert(b.av, na.data(), 1, &b.peer, 0, nullptr));
}

// Half the median round trip of iters 8 B ping-pongs, in microseconds (the
// median: on a shared 2-core machine a preempted poller adds a whole time
// slice to a few round trips, which a mean would spread over all).
double PingPongUs(fi_progress progress, bool sleep, int iters) {
  Side a, b;
  a.Open(progress);
  b.Open(progress);
  Connect(a, b);
  constexpr int kWarmup = 200;
  std::thread echo([&] {
    for (int i = 0; i < kWarmup + iters; ++i) {
      b.PostRecv();
      b.Receive(sleep);
      b.Send();
    }
  });
  std::vector<double> rtt;
  rtt.reserve(iters);
  for (int i = 0; i < kWarmup + iters; ++i) {
    const double start = Seconds(CLOCK_MONOTONIC);
    a.PostRecv();
    a.Send();
    a.Receive(sleep);
    if (i >= kWarmup) rtt.push_back(Seconds(CLOCK_MONOTONIC) - start);
  }
  std::nth_element(rtt.begin(), rtt.begin() + rtt.size() / 2, rtt.end());
  const double us = rtt[rtt.size() / 2] * 1e6 / 2;
  echo.join();
  a.Close();
  b.Close();
  return us;
}

// A receiver asleep in fi_cq_sread for gap_us before each message: the
// median time from fi_inject to the receiver's return, in microseconds.
// The sleeper wakes only when the domain's progress thread, napping by
// then, delivers the message.
double WakeUs(fi_progress progress, int iters, int gap_us) {
  Side a, b;
  a.Open(progress);
  b.Open(progress);
  Connect(a, b);
  std::atomic<double> sent_at{0};
  std::atomic<int> received{0};
  std::vector<double> lat;
  std::thread receiver([&] {
    for (int i = 0; i < iters; ++i) {
      b.PostRecv();
      fi_cq_entry e;
      ssize_t r;
      while ((r = fi_cq_sread(b.cq, &e, 1, nullptr, 5000)) == -FI_EAGAIN) {
      }
      CHECK_FI(r);
      lat.push_back(Seconds(CLOCK_MONOTONIC) - sent_at.load());
      received.store(i + 1);
    }
  });
  for (int i = 0; i < iters; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(gap_us));
    sent_at.store(Seconds(CLOCK_MONOTONIC));
    a.Send();
    while (received.load() <= i) fi_cq_read(a.cq, nullptr, 0);  // the sender's own progress
  }
  receiver.join();
  a.Close();
  b.Close();
  std::nth_element(lat.begin(), lat.begin() + lat.size() / 2, lat.end());
  return lat[lat.size() / 2] * 1e6;
}

// Polls b's CQ until its receive completes, progressing a meanwhile
// (one thread, manual progress); then a's send completion, untimed.
// Returns the seconds from `start` to the receive.
double ArrivalAfter(Side& a, Side& b, double start) {
  fi_cq_entry e;
  ssize_t r;
  while ((r = fi_cq_read(b.cq, &e, 1)) == -FI_EAGAIN) fi_cq_read(a.cq, nullptr, 0);
  CHECK_FI(r);
  const double s = Seconds(CLOCK_MONOTONIC) - start;
  while ((r = fi_cq_read(a.cq, &e, 1)) == -FI_EAGAIN) fi_cq_read(b.cq, nullptr, 0);
  CHECK_FI(r);
  return s;
}

double Median(std::vector<double>& v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2] * 1e6;
}

// --trigger: the median microseconds from the fi_cntr_add that reaches a
// triggered send's threshold to its arrival (*trig), and from a plain
// fi_send to its arrival (*plain), alternating, 8 B.
void TriggerUs(int iters, double* trig, double* plain) {
  Side a, b;
  a.Open(FI_PROGRESS_MANUAL);
  b.Open(FI_PROGRESS_MANUAL);
  Connect(a, b);
  fi_cntr_attr attr{};
  attr.events = FI_CNTR_EVENTS_COMP;
  fid_cntr* cntr = nullptr;
  CHECK_FI(fi_cntr_open(a.domain, &attr, &cntr, nullptr));
  constexpr int kWarmup = 200;
  std::vector<double> t, p;
  uint64_t value = 0;
  for (int i = 0; i < kWarmup + iters; ++i) {
    b.PostRecv();
    fi_triggered_context ctx{};
    ctx.event_type = FI_TRIGGER_THRESHOLD;
    ctx.trigger.threshold.cntr = cntr;
    ctx.trigger.threshold.threshold = ++value;
    iovec iov{a.buf, 8};
    fi_msg m{&iov, nullptr, 1, a.peer, &ctx, 0};
    CHECK_FI(fi_sendmsg(a.ep, &m, FI_TRIGGER | FI_COMPLETION));
    double start = Seconds(CLOCK_MONOTONIC);
    CHECK_FI(fi_cntr_add(cntr, 1));
    const double ts = ArrivalAfter(a, b, start);
    b.PostRecv();
    start = Seconds(CLOCK_MONOTONIC);
    CHECK_FI(fi_send(a.ep, a.buf, 8, nullptr, a.peer, nullptr));
    const double ps = ArrivalAfter(a, b, start);
    if (i >= kWarmup) {
      t.push_back(ts);
      p.push_back(ps);
    }
  }
  *trig = Median(t);
  *plain = Median(p);
  CHECK_FI(fi_close(&cntr->fid));
  a.Close();
  b.Close();
}

// The process's CPU over `seconds` while the main thread does `idle` (the
// endpoint sides are open meanwhile), as a percentage of one core.
template <class F>
double CpuPercent(double seconds, F idle) {
  const double cpu0 = Seconds(CLOCK_PROCESS_CPUTIME_ID), wall0 = Seconds(CLOCK_MONOTONIC);
  idle(seconds);
  const double cpu = Seconds(CLOCK_PROCESS_CPUTIME_ID) - cpu0,
               wall = Seconds(CLOCK_MONOTONIC) - wall0;
  return 100 * cpu / wall;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--trigger") == 0) {
    const int rounds = argc > 2 ? std::atoi(argv[2]) : 20000;
    double trig = 0, plain = 0;
    TriggerUs(rounds, &trig, &plain);
    std::printf("fi_progress_bench --trigger: default domain, 2 domains in one process, 1 thread, "
                "8 B, %d rounds (medians)\n", rounds);
    std::printf("  %-44s %8.2f us  1.00x (baseline)\n", "fi_send -> arrival", plain);
    std::printf("  %-44s %8.2f us  %.2fx\n", "fi_cntr_add reaching the threshold -> arrival",
                trig, trig / plain);
    return 0;
  }
  const int iters = argc > 1 ? std::atoi(argv[1]) : 20000;
  std::printf(
      "fi_progress_bench: default domain, 2 domains in one process, 1 thread each; %d "
      "round trips per row\n",
      iters);
  const double manual = PingPongUs(FI_PROGRESS_MANUAL, false, iters);
  const double autop = PingPongUs(FI_PROGRESS_AUTO, false, iters);
  const double manual_sleep = PingPongUs(FI_PROGRESS_MANUAL, true, iters / 10);
  const double auto_sleep = PingPongUs(FI_PROGRESS_AUTO, true, iters / 10);
  constexpr int kGapUs = 2000;
  const double wake_manual = WakeUs(FI_PROGRESS_MANUAL, 300, kGapUs);
  const double wake_auto = WakeUs(FI_PROGRESS_AUTO, 300, kGapUs);
  std::printf("8 B one-way latency (half the median round trip):\n");
  std::printf("  %-44s %8.2f us  1.00x (baseline)\n", "MANUAL, fi_cq_read polling", manual);
  std::printf("  %-44s %8.2f us  %.2fx\n", "AUTO, fi_cq_read polling", autop, autop / manual);
  std::printf("  %-44s %8.2f us  %.2fx\n", "MANUAL, asleep in fi_cq_sread", manual_sleep,
              manual_sleep / manual);
  std::printf("  %-44s %8.2f us  %.2fx\n", "AUTO, asleep in fi_cq_sread", auto_sleep,
              auto_sleep / manual);

  std::printf("8 B to a receiver asleep in fi_cq_sread for %d us (median send-to-wake):\n", kGapUs);
  std::printf("  %-44s %8.2f us  %.1fx\n", "MANUAL (progress thread while it sleeps)", wake_manual,
              wake_manual / manual);
  std::printf("  %-44s %8.2f us  %.1fx\n", "AUTO", wake_auto, wake_auto / manual);

  Side idle;
  idle.Open(FI_PROGRESS_AUTO);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // past its busy spell
  const double auto_idle = CpuPercent(
      2.0, [](double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); });
  idle.Close();
  Side blocked;
  blocked.Open(FI_PROGRESS_MANUAL);
  const double sread_idle = CpuPercent(2.0, [&](double s) {
    fi_cq_entry e;
    const ssize_t r = fi_cq_sread(blocked.cq, &e, 1, nullptr, static_cast<int>(s * 1000));
    if (r != -FI_EAGAIN) std::fprintf(stderr, "sread returned %zd\n", r);
  });
  blocked.Close();
  std::printf("CPU of the whole process over 2 s (%% of one core):\n");
  std::printf("  %-44s %8.2f %%  (goal < 1%%)\n", "an idle FI_PROGRESS_AUTO endpoint", auto_idle);
  std::printf("  %-44s %8.2f %%\n", "a thread blocked in fi_cq_sread (MANUAL)", sread_idle);
  return 0;
}
