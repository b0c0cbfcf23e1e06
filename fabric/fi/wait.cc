// Wait objects, wait sets and fi_trywait (wait.h): a futex word for the
// provider's own sleepers, an eventfd or a pthread cond for the
// application's, and the domains' progress threads kept busy while anyone
// sleeps.
#include "fabric/fi/wait.h"

#include <linux/futex.h>
#include <poll.h>
#include <rdma/fi_errno.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>

#include "driver/clock.h"
#include "fabric/fi/cntr.h"
#include "fabric/fi/cq.h"
#include "fabric/fi/domain.h"
#include "fabric/fi/eq.h"
#include "fabric/fi/fabric.h"
#include "fabric/fi/progress.h"
#include "fabric/fi/progress_thread.h"
#include "fabric/fi/services.h"

namespace bypass::fi {
namespace {

uint32_t* FutexWord(std::atomic<uint32_t>* a) { return reinterpret_cast<uint32_t*>(a); }

}  // namespace

WaitObject::~WaitObject() {
  if (fd_ >= 0) close(fd_);
}

int WaitObject::Init(int kind, WaitSet* set) {
  switch (kind) {
    case FI_WAIT_NONE:
    case FI_WAIT_UNSPEC:
    case FI_WAIT_YIELD:
    case FI_WAIT_MUTEX_COND:
      break;
    case FI_WAIT_FD:
    case FI_WAIT_POLLFD:  // one eventfd too: a list of one that never changes
      fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      if (fd_ < 0) {
        const int err = errno;
        BYPASS_FI_WARN(FI_LOG_CORE, "FI_WAIT_FD/POLLFD: eventfd failed: %s\n", std::strerror(err));
        return err == EMFILE || err == ENFILE ? -FI_EMFILE : -FI_ENOMEM;
      }
      break;
    case FI_WAIT_SET:
      if (set == nullptr) return -FI_EINVAL;
      set_ = set;
      break;
    default:
      BYPASS_FI_WARN(FI_LOG_CORE,
                     "wait object %d is not supported (FI_WAIT_NONE, UNSPEC, SET, FD, "
                     "POLLFD, MUTEX_COND and YIELD are)\n",
                     kind);
      return -FI_ENOSYS;
  }
  kind_ = kind;
  return 0;
}

void WaitObject::Signal() {
  if (interest_.load() != 0 || (set_ != nullptr && set_->wait.interest_.load() != 0)) Wake();
}

void WaitObject::Wake() {
  seq_.fetch_add(1);
  if (sleepers_.load() > 0) {
    syscall(SYS_futex, FutexWord(&seq_), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
  }
  ProgressThread* retry = nullptr;
  if (armed_.load()) {
    std::lock_guard<std::mutex> l(arm_mu_);
    if (armed_.load() && !SignalNativeLocked()) retry = armed_for_.front();
  }
  if (retry != nullptr) retry->OweNative(this);
  if (set_ != nullptr) set_->wait.Wake();
}

bool WaitObject::SignalNativeLocked() {
  if (fd_ >= 0) {
    const uint64_t one = 1;
    // Only EAGAIN can fail it (the counter at its maximum): still readable.
    [[maybe_unused]] const ssize_t n = write(fd_, &one, sizeof(one));
  } else if (kind_ == FI_WAIT_MUTEX_COND) {
    if (pthread_mutex_trylock(&mutex_) != 0) {
      if (!armed_for_.empty()) {
        pending_ = true;
        return false;
      }
      // Nobody to retry (an EQ has no progress thread): signal unlocked.
      pthread_cond_broadcast(&cond_);
    } else {
      pthread_cond_broadcast(&cond_);
      pthread_mutex_unlock(&mutex_);
    }
  }
  pending_ = false;
  armed_.store(false);
  interest_.fetch_sub(1);
  for (ProgressThread* t : armed_for_) t->DropDemand();
  armed_for_.clear();
  return true;
}

bool WaitObject::RetryNative() {
  std::lock_guard<std::mutex> l(arm_mu_);
  return armed_.load() && pending_ && !SignalNativeLocked();
}

uint32_t WaitObject::Enter() {
  sleepers_.fetch_add(1);
  interest_.fetch_add(1);
  return seq_.load();
}

void WaitObject::Sleep(uint32_t seq, uint64_t deadline_ns) {
  timespec ts{};
  timespec* tsp = nullptr;
  if (deadline_ns != UINT64_MAX) {
    const uint64_t now = driver::SteadyClock::Get().NowNs();
    if (now >= deadline_ns) return;
    const uint64_t left = deadline_ns - now;
    ts.tv_sec = static_cast<time_t>(left / 1'000'000'000);
    ts.tv_nsec = static_cast<long>(left % 1'000'000'000);
    tsp = &ts;
  }
  syscall(SYS_futex, FutexWord(&seq_), FUTEX_WAIT_PRIVATE, seq, tsp, nullptr, 0);
}

void WaitObject::Leave() {
  interest_.fetch_sub(1);
  sleepers_.fetch_sub(1);
}

void WaitObject::Drain() {
  if (fd_ < 0) return;
  uint64_t v;
  while (read(fd_, &v, sizeof(v)) > 0) {
  }
}

void WaitObject::Arm(const std::vector<ProgressThread*>& threads) {
  std::lock_guard<std::mutex> l(arm_mu_);
  if (armed_.load()) return;
  for (ProgressThread* t : threads) t->AddDemand();
  armed_for_ = threads;
  interest_.fetch_add(1);
  armed_.store(true);
}

void WaitObject::Disarm() {
  std::vector<ProgressThread*> threads;
  {
    std::lock_guard<std::mutex> l(arm_mu_);
    if (!armed_.load()) return;
    armed_.store(false);
    pending_ = false;
    interest_.fetch_sub(1);
    threads.swap(armed_for_);
  }
  if (!threads.empty()) threads.front()->ForgetNative(this);
  for (ProgressThread* t : threads) t->DropDemand();
}

void WaitObject::Close() {
  Disarm();
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

int WaitObject::Control(int command, void* arg) {
  if (arg == nullptr) return -FI_EINVAL;
  switch (command) {
    case FI_GETWAIT:
      if (kind_ == FI_WAIT_FD) {
        *static_cast<int*>(arg) = fd_;
        return 0;
      }
      if (kind_ == FI_WAIT_POLLFD) return PollFds(static_cast<fi_wait_pollfd*>(arg));
      if (kind_ == FI_WAIT_MUTEX_COND) {
        *static_cast<fi_mutex_cond*>(arg) = fi_mutex_cond{&mutex_, &cond_};
        return 0;
      }
      if (kind_ == FI_WAIT_SET) return set_->wait.Control(command, arg);
      return -FI_ENODATA;  // FI_WAIT_NONE, UNSPEC, YIELD: nothing to hand out
    case FI_GETWAITOBJ:
      *static_cast<fi_wait_obj*>(arg) = static_cast<fi_wait_obj>(kind_);
      return 0;
    default:
      return -FI_ENOSYS;
  }
}

int WaitObject::PollFds(fi_wait_pollfd* p) const {
  // The list is the object's one eventfd for its whole life: its
  // change_index never moves from 1 (fi_poll(3): it counts changes).
  p->change_index = 1;
  const size_t given = p->nfds;
  p->nfds = 1;
  if (given < 1) return -FI_ETOOSMALL;
  if (p->fd == nullptr) return -FI_EINVAL;
  p->fd[0] = pollfd{fd_, POLLIN, 0};
  return 0;
}

namespace {

// The domain whose endpoints fill a CQ or counter (null for others).
Domain* DomainOf(fid* f) {
  if (Cq* cq = AsCq(f)) return cq->domain;
  if (Cntr* c = AsCntr(f)) return c->domain;
  return nullptr;
}

WaitObject* WaitOf(fid* f) {
  if (Cq* cq = AsCq(f)) return &cq->wait;
  if (Cntr* c = AsCntr(f)) return &c->wait;
  if (Eq* eq = AsEq(f)) return &eq->wait;
  if (WaitSet* ws = AsWaitSet(f)) return &ws->wait;
  return nullptr;
}

std::vector<fid*> Members(WaitSet* ws) {
  std::lock_guard<std::mutex> l(ws->mu);
  return ws->members;
}

// The progress threads that fill f (its domain's, or its members' for a
// wait set), started if need be.
std::vector<ProgressThread*> ThreadsFor(fid* f) {
  std::vector<fid*> sources{f};
  if (WaitSet* ws = AsWaitSet(f)) sources = Members(ws);
  std::vector<ProgressThread*> out;
  for (fid* s : sources) {
    Domain* d = DomainOf(s);
    if (d == nullptr) continue;
    ProgressThread* t = EnsureProgressThread(d);
    if (t != nullptr && std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  }
  return out;
}

int WaitSetClose(fid* f) {
  WaitSet* ws = AsWaitSet(f);
  if (ws == nullptr) return BadFid(f, FI_CLASS_WAIT);
  if (ws->obj.refs.load() > 0) return -FI_EBUSY;
  ws->wait.Close();
  ws->fabric->obj.refs.fetch_sub(1);
  ws->obj.magic = Obj::kDead;
  Retire(ws);
  return 0;
}

int WaitSetControl(fid* f, int command, void* arg) {
  WaitSet* ws = AsWaitSet(f);
  if (ws == nullptr) return BadFid(f, FI_CLASS_WAIT);
  return ws->wait.Control(command, arg);
}

fi_ops g_wait_fi_ops = {
    .size = sizeof(fi_ops),
    .close = WaitSetClose,
    .bind = NoSysBind,
    .control = WaitSetControl,
    .ops_open = NoSysOpsOpen,
    .tostr = NoSysTostr,
    .ops_set = NoSysOpsSet,
};

// fi_wait: 0 once a member has something to read, -FI_ETIMEDOUT after
// timeout milliseconds (negative: none).
int WaitSetWait(fid_wait* f, int timeout) {
  WaitSet* ws = AsWaitSet(f);
  if (ws == nullptr) return BadFid(f, FI_CLASS_WAIT);
  const uint64_t deadline = DeadlineAfterMs(timeout);
  return SleepUntil(&ws->wait, &ws->fid.fid, deadline, [&] { return HasEvents(&ws->fid.fid); })
             ? 0
             : -FI_ETIMEDOUT;
}

fi_ops_wait g_wait_ops = {
    .size = sizeof(fi_ops_wait),
    .wait = WaitSetWait,
};

}  // namespace

uint64_t DeadlineAfterMs(int timeout_ms) {
  if (timeout_ms < 0) return UINT64_MAX;
  return driver::SteadyClock::Get().NowNs() + static_cast<uint64_t>(timeout_ms) * 1'000'000;
}

bool SleepUntil(WaitObject* w, fid* owner, uint64_t deadline_ns,
                const std::function<bool()>& done) {
  const driver::Clock& clock = driver::SteadyClock::Get();
  if (w->Yields()) {  // FI_WAIT_YIELD: the caller's own progress, yielding between passes
    for (;;) {
      if (done()) return true;
      if (clock.NowNs() >= deadline_ns) return false;
      sched_yield();
    }
  }
  // A moment of polling first: an answer often comes within a round trip.
  const uint64_t spin_end = std::min(deadline_ns, clock.NowNs() + kSpinBeforeSleepNs);
  for (;;) {
    if (done()) return true;
    if (clock.NowNs() >= spin_end) break;
  }
  if (spin_end == deadline_ns) return false;  // a short timeout: no thread for it
  const std::vector<ProgressThread*> threads = ThreadsFor(owner);
  for (ProgressThread* t : threads) t->AddDemand();
  bool ok = false;
  for (;;) {
    const uint32_t seq = w->Enter();
    ok = done();
    if (ok || clock.NowNs() >= deadline_ns) {
      w->Leave();
      break;
    }
    // Without a progress thread (none could start) nobody else progresses:
    // nap briefly and poll again.
    w->Sleep(seq, threads.empty() && !AsEq(owner)
                      ? std::min(deadline_ns, clock.NowNs() + kNoThreadNapNs)
                      : deadline_ns);
    w->Leave();
  }
  for (ProgressThread* t : threads) t->DropDemand();
  return ok;
}

WaitSet* AttrWaitSet(int wait_obj, fid_wait* wait_set, int* err) {
  *err = 0;
  if (wait_obj != FI_WAIT_SET) return nullptr;
  WaitSet* ws = AsWaitSet(wait_set);
  if (ws == nullptr) {
    BYPASS_FI_WARN(FI_LOG_CORE, "FI_WAIT_SET without an open wait set in attr->wait_set\n");
    *err = -FI_EINVAL;
  }
  return ws;
}

void JoinWaitSet(WaitSet* ws, fid* member) {
  std::lock_guard<std::mutex> l(ws->mu);
  ws->members.push_back(member);
  ws->obj.refs.fetch_add(1);
}

void LeaveWaitSet(WaitSet* ws, fid* member) {
  ws->wait.Disarm();  // its demand may be on the member's domain
  std::lock_guard<std::mutex> l(ws->mu);
  EraseOne(ws->members, member);
  ws->obj.refs.fetch_sub(1);
}

int OpenWaitSet(fid_fabric* fabric, fi_wait_attr* attr, fid_wait** out) {
  Fabric* fab = AsFabric(fabric);
  if (fab == nullptr) return BadFid(fabric, FI_CLASS_FABRIC);
  if (attr == nullptr || out == nullptr) return -FI_EINVAL;
  if (attr->flags != 0) return -FI_EBADFLAGS;
  const int kind = RawEnum(attr->wait_obj);
  if (kind == FI_WAIT_NONE || kind == FI_WAIT_SET) {
    BYPASS_FI_WARN(FI_LOG_CORE,
                   "a wait set's wait_obj is FI_WAIT_UNSPEC, FD, MUTEX_COND or YIELD\n");
    return -FI_EINVAL;
  }
  auto ws = std::make_unique<WaitSet>();
  if (int ret = ws->wait.Init(kind, nullptr); ret != 0) return ret;
  std::memset(&ws->fid, 0, sizeof(ws->fid));
  ws->fid.fid.fclass = FI_CLASS_WAIT;
  ws->fid.fid.ops = &g_wait_fi_ops;
  ws->fid.ops = &g_wait_ops;
  ws->fabric = fab;
  fab->obj.refs.fetch_add(1);
  *out = &ws.release()->fid;
  return 0;
}

bool HasEvents(fid* f) {
  if (Cq* cq = AsCq(f)) {
    DomainGuard g(*cq->lock.load());
    if (cq->entries.empty() && cq->errors.empty()) ProgressAll(cq->eps);
    return !cq->entries.empty() || !cq->errors.empty();
  }
  if (Cntr* c = AsCntr(f)) {
    {
      DomainGuard g(*c->lock.load());
      ProgressAll(c->eps);
    }
    return c->value.load() != c->read_value.load() || c->errors.load() != c->read_errors.load();
  }
  if (Eq* eq = AsEq(f)) {
    std::lock_guard<std::mutex> l(eq->mu);
    return !eq->events.empty();
  }
  if (WaitSet* ws = AsWaitSet(f)) {
    for (fid* m : Members(ws)) {
      if (HasEvents(m)) return true;
    }
  }
  return false;
}

int TryWait(fid_fabric* fabric, fid** fids, int count) {
  if (AsFabric(fabric) == nullptr) return BadFid(fabric, FI_CLASS_FABRIC);
  if (count < 0 || (count > 0 && fids == nullptr)) return -FI_EINVAL;
  for (int i = 0; i < count; ++i) {
    WaitObject* w = WaitOf(fids[i]);
    if (w == nullptr) return -FI_EINVAL;
    if (!w->Native()) {
      BYPASS_FI_WARN(FI_LOG_CORE,
                     "fi_trywait: fid %d has no native wait object (FI_WAIT_FD, POLLFD or "
                     "MUTEX_COND; a wait set member: pass the set)\n",
                     i);
      return -FI_EINVAL;
    }
    const std::vector<ProgressThread*> threads = ThreadsFor(fids[i]);
    w->Drain();
    if (HasEvents(fids[i])) return -FI_EAGAIN;
    w->Arm(threads);
    // What arrived between the look and the arming signaled nothing: look again.
    if (HasEvents(fids[i])) return -FI_EAGAIN;
  }
  return 0;
}

}  // namespace bypass::fi
