// A domain's progress thread: FI_PROGRESS_AUTO, and the progress that a
// thread blocked in a wait (fi_cq_sread, fi_cntr_wait, fi_wait, or the
// application's own epoll/select after fi_trywait) needs under
// FI_PROGRESS_MANUAL.
//
// It progresses the domain's endpoints (ProgressDomain, progress.h) while
// the domain is FI_PROGRESS_AUTO or anyone has demand on it (a sleeper, an
// armed wait object), and sleeps otherwise: on a condition variable with no
// demand at all, and with a growing nap (up to kMaxNapNs) once a short
// busy spell after the last activity is over. When the application itself
// progressed the domain since the last look (it is polling), the thread
// stands aside for a nap instead of contending for the domain lock, and
// progresses only the endpoints the application did not (Ep::app_passes).
//
// Once a domain has the thread, every call takes the domain lock, even
// under FI_THREAD_DOMAIN (EnsureProgressThread switches it on).
#ifndef BYPASS_FABRIC_FI_PROGRESS_THREAD_H_
#define BYPASS_FABRIC_FI_PROGRESS_THREAD_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace bypass::fi {

struct Domain;
class WaitObject;

class ProgressThread {
 public:
  // After an activity, progress without sleeping for this long.
  static constexpr uint64_t kBusyNs = 100'000;
  // Then nap, doubling from kMinNapNs up to kMaxNapNs, or kMaxWaitedNapNs
  // while a thread blocks in a wait or an object is armed (there is no
  // interrupt to wake the thread when traffic comes: the nap bounds how
  // late a sleeper learns of it, and costs a pass per nap).
  static constexpr uint64_t kMinNapNs = 20'000;
  static constexpr uint64_t kMaxNapNs = 5'000'000;
  static constexpr uint64_t kMaxWaitedNapNs = 1'000'000;
  // Standing aside while the application polls: its own passes progress
  // the domain, and the thread only looks whether it stopped (the watch,
  // progress.h, runs while an endpoint has anything unfinished). A look
  // wakes the thread on a core a busy-polling process wants, so the nap
  // doubles from kAppNapNs up to kMaxAppNapNs for as long as every look
  // finds the application polling, and starts over at the first look that
  // finds it stopped: 125 wakes a second once the application has polled
  // for 15 ms, where a fixed 1 ms made 1,000, each preempting the polling
  // thread on a machine whose cores all poll (README.md, "Cost of the
  // facade": the p999 round trip went down). An application that stops
  // calling after polling long is looked at within kMaxAppNapNs; a new
  // sleeper kicks the thread at once, whatever the nap.
  static constexpr uint64_t kAppNapNs = 1'000'000;
  static constexpr uint64_t kMaxAppNapNs = 8'000'000;

  // Starts the thread over d (auto_progress: always progressing).
  ProgressThread(Domain* d, bool auto_progress);
  // Stops and joins it.
  ~ProgressThread();
  ProgressThread(const ProgressThread&) = delete;
  ProgressThread& operator=(const ProgressThread&) = delete;

  // A sleeper or armed object wants progress until DropDemand.
  void AddDemand();
  void DropDemand();
  // The domain's watch (progress.h, CallWatch): a demand, without the kick
  // a new sleeper gives (the thread wakes if it slept without demand, and
  // still stands aside while the application polls). The thread drops it
  // itself (Watch).
  void AddWatch();
  // A MUTEX_COND wait object whose signal found the application's mutex
  // busy: retried after every pass until it goes through (wait.h), or
  // forgotten when the object is disarmed.
  void OweNative(WaitObject* w);
  void ForgetNative(WaitObject* w);

  // The application progressed the domain itself (a read or wait pass).
  // REQUIRES: the domain guard is held (one writer at a time).
  void NoteAppPass() {
    app_passes_.store(app_passes_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

 private:
  void Run();
  void RetryNatives();
  // After a pass of the thread's own: takes the domain's watch if an
  // endpoint is unfinished and nobody holds it, drops it if every
  // endpoint finished. True when dropped (the caller passes once more
  // before sleeping).
  bool Watch(bool unfinished);

  Domain* const d_;
  const bool auto_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;    // under mu_
  bool kicked_ = false;  // under mu_: new demand; nap no longer
  std::atomic<int> demand_{0};
  std::atomic<uint64_t> app_passes_{0};
  std::mutex natives_mu_;
  std::vector<WaitObject*> natives_;  // under natives_mu_
  std::atomic<bool> have_natives_{false};
  std::thread thread_;
};

// d's progress thread, started (in demand mode) if it has none; null if a
// thread cannot be started (the caller then waits by polling). Switches
// the domain lock on first. REQUIRES: the caller holds no guard of d.
ProgressThread* EnsureProgressThread(Domain* d);

// Makes every call on the domain's queues take their locks from now on
// (the domain's lane and the lanes of its scalable endpoints' contexts;
// contexts opened later inherit it from the domain's lane): a progress
// thread is about to share them. Under FI_THREAD_DOMAIN the application
// serializes this call with every other, so none holds a guard yet.
void LockEveryQueue(Domain* d);

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_PROGRESS_THREAD_H_
