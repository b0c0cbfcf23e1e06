// Waiting (fi_cq(3), fi_cntr(3), fi_eq(3), fi_poll(3)): the wait object every
// CQ, counter, EQ and wait set carries, the wait set (fi_wait_open, fi_wait)
// and fi_trywait.
//
// A WaitObject is signaled whenever entries are added to its owner. Nobody
// waiting costs the signaler one load (`interest`). Threads blocked inside
// the provider (fi_cq_sread, fi_cntr_wait, fi_eq_sread, fi_wait) sleep on a
// futex word; the application's native object (an eventfd for FI_WAIT_FD, a
// pthread mutex and cond for FI_WAIT_MUTEX_COND) is signaled only once
// fi_trywait has armed it (fi_poll(3): blocking on a native object without
// fi_trywait is not guaranteed to wake). While anyone sleeps or an object is
// armed, the domain's progress thread (progress_thread.h) progresses the
// endpoints, so the completions they wait for arrive.
#ifndef BYPASS_FABRIC_FI_WAIT_H_
#define BYPASS_FABRIC_FI_WAIT_H_

#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_eq.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "fabric/fi/common.h"

namespace bypass::fi {

struct Fabric;
struct WaitSet;
class ProgressThread;

// One object's wait object (see the file comment).
class WaitObject {
 public:
  WaitObject() = default;
  ~WaitObject();
  WaitObject(const WaitObject&) = delete;
  WaitObject& operator=(const WaitObject&) = delete;

  // kind: the attribute's wait_obj (FI_WAIT_NONE, UNSPEC, FD, POLLFD,
  // MUTEX_COND, YIELD, or SET with `set`, which it then signals too). 0, or
  // -FI_ENOSYS for a kind not supported, -FI_EINVAL for FI_WAIT_SET
  // without a set, a negative errno when the eventfd cannot be made.
  int Init(int kind, WaitSet* set);
  int kind() const { return kind_; }
  WaitSet* set() const { return set_; }
  // An application-visible object fi_trywait can arm (FD, MUTEX_COND).
  bool Native() const {
    return kind_ == FI_WAIT_FD || kind_ == FI_WAIT_POLLFD || kind_ == FI_WAIT_MUTEX_COND;
  }
  // Sleeping waits spin with sched_yield instead (FI_WAIT_YIELD).
  bool Yields() const { return kind_ == FI_WAIT_YIELD; }

  // After entries were added to the owner: wakes sleepers, signals an
  // armed native object and the wait set. One load when nobody waits.
  void Signal();
  // The same without the check (fi_cq_signal).
  void Wake();

  // A sleeping wait: Enter, check the condition, Sleep, Leave. Enter
  // returns the sequence Sleep waits to change; a Signal after Enter is
  // never lost.
  uint32_t Enter();
  // Until woken or deadline_ns (driver::SteadyClock; UINT64_MAX: none).
  void Sleep(uint32_t seq, uint64_t deadline_ns);
  void Leave();

  // fi_trywait: Drain empties the native object (an eventfd read); Arm
  // makes the next Signal mark it, keeping `threads` progressing until
  // then (each one's demand, dropped when the object is signaled or
  // disarmed).
  void Drain();
  void Arm(const std::vector<ProgressThread*>& threads);
  void Disarm();
  // The owner's fi_close: disarms and closes the eventfd now (the owner's
  // shell outlives it, common.h's Retire).
  void Close();

  // fi_control FI_GETWAIT / FI_GETWAITOBJ.
  int Control(int command, void* arg);

  // FI_WAIT_MUTEX_COND: the application may hold its mutex in any call
  // (around fi_trywait, say), so the signal only try-locks it; when that
  // fails it stays pending, and the progress thread retries it outside
  // every lock of the provider (ProgressThread::OweNative). True while
  // still owed.
  bool RetryNative();

 private:
  // Signals the native object and disarms; false when the mutex was busy
  // (then still armed). REQUIRES: arm_mu_ held, armed.
  bool SignalNativeLocked();

  int kind_ = FI_WAIT_NONE;
  WaitSet* set_ = nullptr;
  // FI_WAIT_POLLFD's FI_GETWAIT: the list of one eventfd.
  int PollFds(fi_wait_pollfd* p) const;

  int fd_ = -1;  // FI_WAIT_FD, FI_WAIT_POLLFD: an eventfd
  pthread_mutex_t mutex_ = PTHREAD_MUTEX_INITIALIZER;  // FI_WAIT_MUTEX_COND
  pthread_cond_t cond_ = PTHREAD_COND_INITIALIZER;
  std::atomic<uint32_t> seq_{0};  // the futex word sleepers wait on
  std::atomic<int> interest_{0};  // sleepers, plus one while armed
  std::atomic<int> sleepers_{0};
  std::atomic<bool> armed_{false};
  bool pending_ = false;  // under arm_mu_: a MUTEX_COND signal owed
  std::mutex arm_mu_;     // armed_ transitions, pending_ and armed_for_
  std::vector<ProgressThread*> armed_for_;
};

// A wait set (fi_wait_open): its own wait object, signaled by every CQ,
// counter and EQ opened with FI_WAIT_SET on it.
struct WaitSet {
  fid_wait fid;
  Obj obj;
  Fabric* fabric = nullptr;
  WaitObject wait;
  std::mutex mu;                // members
  std::vector<::fid*> members;  // CQs, counters, EQs
};
static_assert(offsetof(WaitSet, fid) == 0);

inline WaitSet* AsWaitSet(const void* f) { return As<WaitSet>(f, FI_CLASS_WAIT); }

// The wait set of an attribute's (wait_obj, wait_set): null when wait_obj
// is not FI_WAIT_SET; *err -FI_EINVAL when it is and wait_set is not one.
WaitSet* AttrWaitSet(int wait_obj, fid_wait* wait_set, int* err);
// Membership of a CQ, counter or EQ opened on ws (counted in its refs, so
// the set does not close under it).
void JoinWaitSet(WaitSet* ws, fid* member);
void LeaveWaitSet(WaitSet* ws, fid* member);

// A blocking wait on w for its owner (a CQ, counter, EQ or wait set): true
// once done() (which reads, or looks, and may progress: it takes its own
// guards) returns true, false at deadline_ns (driver::SteadyClock;
// UINT64_MAX: none). FI_WAIT_YIELD polls done() with sched_yield between
// passes; every other kind polls for kSpinBeforeSleepNs, then sleeps on w
// while the owner's progress threads (started here) progress its domains.
// REQUIRES: no domain guard held.
inline constexpr uint64_t kSpinBeforeSleepNs = 50'000;
inline constexpr uint64_t kNoThreadNapNs = 1'000'000;  // no thread could start: poll this often
bool SleepUntil(WaitObject* w, fid* owner, uint64_t deadline_ns, const std::function<bool()>& done);
// The deadline of a timeout in milliseconds (negative: UINT64_MAX).
uint64_t DeadlineAfterMs(int timeout_ms);

// fi_wait_open and fi_trywait (the fabric's ops).
int OpenWaitSet(fid_fabric* fabric, fi_wait_attr* attr, fid_wait** waitset);
int TryWait(fid_fabric* fabric, fid** fids, int count);

// Something to read: a CQ with entries or errors, an EQ with events, a
// counter whose value or error count changed since the application last
// read it (fi_cntr_read), or a wait set with such a member. Progresses the
// endpoints bound to CQs and counters first. REQUIRES: no domain guard
// held (it takes them).
bool HasEvents(fid* f);

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_WAIT_H_
