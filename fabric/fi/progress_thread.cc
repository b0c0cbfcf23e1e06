// The domain's progress thread: progresses while there is demand (or
// always, FI_PROGRESS_AUTO), busy for a moment after each activity, then
// naps with a doubling interval, and sleeps on its condition variable when
// nothing wants progress.
#include "fabric/fi/progress_thread.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <system_error>

#include "driver/clock.h"
#include "fabric/fi/domain.h"
#include "fabric/fi/ep.h"
#include "fabric/fi/progress.h"
#include "fabric/fi/services.h"
#include "fabric/fi/wait.h"

namespace bypass::fi {

ProgressThread::ProgressThread(Domain* d, bool auto_progress) : d_(d), auto_(auto_progress) {
  thread_ = std::thread([this] { Run(); });
  // So that `top -H` and /proc/<pid>/task name it (15 characters at most).
  pthread_setname_np(thread_.native_handle(), "bypass-progress");
}

ProgressThread::~ProgressThread() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void ProgressThread::AddDemand() {
  demand_.fetch_add(1);
  {
    std::lock_guard<std::mutex> l(mu_);
    kicked_ = true;
  }
  cv_.notify_all();
}

void ProgressThread::DropDemand() { demand_.fetch_sub(1); }

void ProgressThread::AddWatch() {
  demand_.fetch_add(1);
  std::lock_guard<std::mutex> l(mu_);  // not a sleeper: no kick, the application may be polling
  cv_.notify_all();
}

void ProgressThread::OweNative(WaitObject* w) {
  std::lock_guard<std::mutex> l(natives_mu_);
  if (std::find(natives_.begin(), natives_.end(), w) == natives_.end()) natives_.push_back(w);
  have_natives_.store(true);
}

void ProgressThread::ForgetNative(WaitObject* w) {
  std::lock_guard<std::mutex> l(natives_mu_);
  natives_.erase(std::remove(natives_.begin(), natives_.end(), w), natives_.end());
  have_natives_.store(!natives_.empty());
}

void ProgressThread::RetryNatives() {
  if (!have_natives_.load()) return;
  std::lock_guard<std::mutex> l(natives_mu_);
  natives_.erase(std::remove_if(natives_.begin(), natives_.end(),
                                [](WaitObject* w) { return !w->RetryNative(); }),
                 natives_.end());
  have_natives_.store(!natives_.empty());
}

void ProgressThread::Run() {
  const driver::Clock& clock = driver::SteadyClock::Get();
  uint64_t seen_app = app_passes_.load(std::memory_order_relaxed);
  uint64_t last_active = clock.NowNs();
  uint64_t nap = 0;
  uint64_t app_nap = kAppNapNs;  // the next stand-aside (see kMaxAppNapNs)
  // The watch was just dropped: one more pass looks again before the
  // thread may sleep without demand (an application call that left work
  // while the watch was still held did not ask for it).
  bool recheck = false;
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    if (!auto_ && demand_.load() == 0 && !recheck) {
      cv_.wait(l, [&] { return stop_ || demand_.load() > 0; });
      kicked_ = false;
      last_active = clock.NowNs();
      nap = 0;
      continue;
    }
    const bool kicked = kicked_;
    if (kicked) {  // a new sleeper: what it waits for may be close
      kicked_ = false;
      last_active = clock.NowNs();
      nap = 0;
    }
    l.unlock();
    // The application polls if it progressed since the last look, unless
    // a thread just went to sleep (its last polls are over).
    const uint64_t app = app_passes_.load(std::memory_order_relaxed);
    const bool app_polls = !kicked && !recheck && app != seen_app;
    seen_app = app;
    if (!app_polls) app_nap = kAppNapNs;
    recheck = false;
    // An application call waited for the domain lock during our pass: the
    // application is calling in, and stands aside as if its pass showed.
    // (The lock's waiter is only woken at our unlock, and this thread,
    // running, took the lock again first, pass after pass while it found
    // work: measured, it did a receiver's in-place copies of 1 MiB
    // messages while the application's one call slept on the lock, 2.9 M
    // passes in 3 s against the application's 220 calls.)
    // While the application polls, the endpoints it did not progress
    // since our last look are still ours: one whose CQ nobody reads may
    // owe its peers ACKs (fi_wait_test, AnEndpointNobodyPolls...). With a
    // single endpoint, that is the one it polls, and the thread stays off
    // the domain lock (a look that takes it may wait for the polling call:
    // one more wake on a core the application wants).
    bool app_waited = false;
    bool unfinished = false;
    const size_t n =
        app_polls && d_->ep_count.load(std::memory_order_relaxed) <= 1
            ? 0
            : ProgressDomain(d_, /*only_unpolled=*/app_polls, &app_waited, &unfinished);
    if (!app_polls) recheck = Watch(unfinished);
    RetryNatives();
    const uint64_t now = clock.NowNs();
    l.lock();
    if (n > 0) {
      last_active = now;
      nap = 0;
      if (!app_waited && !app_polls) continue;
    }
    if (recheck) continue;
    uint64_t sleep_ns;
    if (app_polls) {
      // An unpolled endpoint that had traffic is looked at again soon.
      if (n > 0) app_nap = kAppNapNs;
      sleep_ns = app_nap;
      app_nap = std::min(2 * app_nap, kMaxAppNapNs);
    } else if (app_waited) {
      sleep_ns = kAppNapNs;
    } else if (now - last_active < kBusyNs) {
      continue;
    } else {
      nap = std::clamp(nap * 2, kMinNapNs, demand_.load() > 0 ? kMaxWaitedNapNs : kMaxNapNs);
      sleep_ns = nap;
    }
    cv_.wait_for(l, std::chrono::nanoseconds(sleep_ns), [&] { return stop_ || kicked_; });
  }
}

bool ProgressThread::Watch(bool unfinished) {
  if (unfinished) {
    // Our own pass may be the one that left the work (and the demand that
    // woke us may go with the signal): watch from now on.
    if (!d_->watched.load(std::memory_order_relaxed) && !d_->watched.exchange(true)) {
      demand_.fetch_add(1);
    }
    return false;
  }
  if (!d_->watched.load()) return false;
  // Every endpoint finished: the watch goes. A call that left work after
  // our look saw it still held and asked for nothing: the next pass (which
  // the caller makes before sleeping) looks again, under the locks that
  // call held, and takes the watch back if so.
  d_->watch_wanted.store(false);
  d_->watched.store(false);
  demand_.fetch_sub(1);
  return true;
}

void CallWatch::Start() {
  if (d_->watched.exchange(true)) return;
  // Dropped by the thread once a pass of its own finds every endpoint
  // finished (ProgressThread::Watch); naps of up to kMaxWaitedNapNs
  // meanwhile, standing aside while the application polls.
  if (ProgressThread* t = EnsureProgressThread(d_)) {
    t->AddWatch();
  } else {
    d_->watched.store(false);  // no thread: waits poll (wait.h), and so does nothing else
  }
}

void LockEveryQueue(Domain* d) {
  // Written only while false: once a thread runs (an earlier wait, or the
  // watch) it reads these, and a second write would race with it.
  const auto on = [](DomainLock& l) {
    if (!l.Target().thread_safe) l.Target().thread_safe = true;
  };
  on(d->lock);
  for (Ep* ep : d->eps) on(*ep->lock);
}

ProgressThread* EnsureProgressThread(Domain* d) {
  // FI_THREAD_DOMAIN: the application serializes every call of the
  // domain, this one included, and no guard of it is held: from here on
  // every call takes the lock, and the thread below shares it.
  LockEveryQueue(d);
  DomainGuard g(d->lock);
  if (d->progress == nullptr) {
    try {
      d->progress = std::make_unique<ProgressThread>(d, false);
      d->progress_running.store(d->progress.get(), std::memory_order_release);
    } catch (const std::system_error& e) {
      BYPASS_FI_WARN(FI_LOG_DOMAIN, "cannot start a progress thread (%s): waits poll instead\n",
                     e.what());
      return nullptr;
    }
  }
  return d->progress.get();
}

}  // namespace bypass::fi
