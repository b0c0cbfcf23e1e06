// What every fi_* object of the bypass provider shares: each embeds its
// libfabric struct first (checked by static_assert beside it), points at a
// static ops table, carries an Obj after that struct, and counts the objects
// that depend on it so fi_close answers -FI_EBUSY while any do. Also the
// small helpers all objects use. Internal to fabric/fi; applications see only
// the libfabric structs.
#ifndef BYPASS_FABRIC_FI_COMMON_H_
#define BYPASS_FABRIC_FI_COMMON_H_

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "fabric/fi/info/raw_enum.h"

namespace bypass::fi {

// What every object has after its libfabric struct: a liveness mark checked
// on every call (a closed object answers -FI_EBADF instead of crashing: its
// shell stays allocated, see Retire) and its dependents.
struct Obj {
  static constexpr uint32_t kLive = 0xb1fa'b71c;
  static constexpr uint32_t kDead = 0xdead'0b1c;
  uint32_t magic = kLive;
  std::atomic<int> refs{0};  // objects that depend on this one
};

// Keeps the shell of a closed object (marked kDead, its heavy parts freed)
// until the provider is cleaned up (libfabric's fi_fini, before it unloads
// the provider; never with the static library), so a call through a stale
// handle answers -FI_EBADF instead of touching freed memory. A few hundred
// bytes per close.
void RetireShell(void* shell, void (*destroy)(void*));
template <class T>
void Retire(T* shell) {
  RetireShell(shell, [](void* p) { delete static_cast<T*>(p); });
}
// Frees every retired shell (the provider's cleanup: no call can reach one
// again).
void FreeRetiredShells();

// The object behind a fid of class C, or null (null fid, another class, or
// closed: the caller answers -FI_EINVAL or -FI_EBADF, see BadFid).
template <class T>
T* As(const void* fid, size_t fclass) {
  if (fid == nullptr) return nullptr;
  auto* f = static_cast<const ::fid*>(fid);
  if (f->fclass != fclass) return nullptr;
  T* t = const_cast<T*>(reinterpret_cast<const T*>(fid));
  return t->obj.magic == Obj::kLive ? t : nullptr;
}
// -FI_EINVAL for a null or foreign fid, -FI_EBADF for a closed one.
int BadFid(const void* fid, size_t fclass);

// The mutex of a DomainLock, reentrant (a progress pass takes the
// domain's lock, then each endpoint's, which may be the same lane's): the
// owner's nested acquisitions only count depth. Uncontended, taking and
// releasing it is one exchange each (a waiter sleeps on the word, a
// futex), where std::recursive_mutex costs about 50
// instructions a pair in glibc (fabric/fi/README.md, "Cost of the
// facade"): every call takes one once a progress thread (a blocking
// wait's, or the watch) shares the domain.
class DomainMutex {
 public:
  void lock() {
    const uintptr_t me = Self();
    // Only this thread ever stores `me`, and clears it before releasing.
    if (owner_.load(std::memory_order_relaxed) == me) {
      ++depth_;
      return;
    }
    // 0 free, 1 held, 2 held and maybe waited for (Drepper, "Futexes Are
    // Tricky", mutex 2).
    if (state_.exchange(1, std::memory_order_acquire) != 0) {
      waiters_.fetch_add(1, std::memory_order_relaxed);  // the slow path only
      while (state_.exchange(2, std::memory_order_acquire) != 0) Futex(FUTEX_WAIT_PRIVATE, 2);
      waiters_.fetch_sub(1, std::memory_order_relaxed);
    }
    owner_.store(me, std::memory_order_relaxed);
    depth_ = 1;
  }
  bool try_lock() {
    const uintptr_t me = Self();
    if (owner_.load(std::memory_order_relaxed) == me) {
      ++depth_;
      return true;
    }
    uint32_t free = 0;
    if (!state_.compare_exchange_strong(free, 1, std::memory_order_acquire)) return false;
    owner_.store(me, std::memory_order_relaxed);
    depth_ = 1;
    return true;
  }
  // Another thread is waiting for it now (for the owner to ask before it
  // unlocks: ProgressDomain). Not state_ == 2, which the owner also reads
  // when it was the one that waited.
  bool waited_for() const { return waiters_.load(std::memory_order_relaxed) != 0; }
  void unlock() {
    if (--depth_ > 0) return;
    owner_.store(0, std::memory_order_relaxed);
    if (state_.exchange(0, std::memory_order_release) == 2) Futex(FUTEX_WAKE_PRIVATE, 1);
  }

 private:
  // The futex call itself (not std::atomic::wait, whose notify in
  // libstdc++ 12 goes through a shared waiter pool of its own).
  void Futex(int op, uint32_t val) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&state_), op, val, nullptr, nullptr, 0);
  }
  static uintptr_t Self() { return static_cast<uintptr_t>(pthread_self()); }

  std::atomic<uint32_t> state_{0};
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  std::atomic<uintptr_t> owner_{0};
  std::atomic<uint32_t> waiters_{0};  // threads in lock()'s slow path
  uint32_t depth_ = 0;  // the owner's
};

// A domain's lock. FI_THREAD_SAFE (and FID/ENDPOINT) take it in every call
// (DomainGuard); other threading levels take nothing. The lock of one
// device queue (fabric/fi/lane.h): a domain's is its queue's (`shared`,
// which domains sharing one queue share), and a context of a scalable
// endpoint on its own queue has that queue's.
struct DomainLock {
  bool thread_safe = false;
  DomainMutex mu;
  DomainLock* shared = nullptr;  // when set, the lock this one stands for

  // The lock a guard of this one takes.
  DomainLock& Target() { return shared != nullptr ? *shared : *this; }
};

// Takes the lock (or the one it stands for) unless its level takes none.
class DomainGuard {
 public:
  explicit DomainGuard(DomainLock& l) {
    DomainLock& t = l.Target();
    mu_ = t.thread_safe ? &t.mu : nullptr;
    if (mu_ != nullptr) mu_->lock();
  }
  ~DomainGuard() {
    if (mu_ != nullptr) mu_->unlock();
  }
  DomainGuard(const DomainGuard&) = delete;
  DomainGuard& operator=(const DomainGuard&) = delete;

 private:
  DomainMutex* mu_;
};

// A FIFO on a power-of-two ring that grows on demand (callers bound it): an
// O(1) size for the room checks of every progress pass, which std::deque
// computes from its node map.
template <class T>
class Ring {
 public:
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  T& front() { return buf_[head_]; }
  void pop_front() {
    head_ = (head_ + 1) & (buf_.size() - 1);
    --n_;
  }
  void push_back(const T& v) {
    if (n_ == buf_.size()) Grow();
    buf_[(head_ + n_) & (buf_.size() - 1)] = v;
    ++n_;
  }
  void clear() {
    std::vector<T>().swap(buf_);
    head_ = 0;
    n_ = 0;
  }

 private:
  void Grow() {
    std::vector<T> b(buf_.empty() ? 16 : 2 * buf_.size());
    for (size_t i = 0; i < n_; ++i) b[i] = buf_[(head_ + i) & (buf_.size() - 1)];
    buf_.swap(b);
    head_ = 0;
  }
  std::vector<T> buf_;
  size_t head_ = 0;
  size_t n_ = 0;
};

// Removes one x from v (its order is not kept).
template <class T>
void EraseOne(std::vector<T>& v, T x) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == x) {
      v[i] = v.back();
      v.pop_back();
      return;
    }
  }
}

// Engine results and statuses as negative fi_errno values.
int FromStatus(const absl::Status& s);

// Unsupported calls, with the signatures of the ops tables they fill.
int NoSysOpsOpen(fid*, const char*, uint64_t, void**, void*);
int NoSysOpsSet(fid*, const char*, uint64_t, void*, void*);
int NoSysTostr(const fid*, char*, size_t);
int NoSysBind(fid*, fid*, uint64_t);

// What fi_cq_readerr and fi_eq_readerr write into the caller's entry
// (fi_cq(3), fi_eq(3)), err_data being `len` bytes at `data`. An
// application of API 1.4 or older has the struct only up to err_data
// (err_data_size came with 1.5): it gets that much, and err_data in
// provider memory (`ours`, valid until the next readerr). A newer one gets
// err_data in its own buffer, at most err_data_size bytes, or in ours when
// err_data_size is 0 on input. Returns the bytes written; `text` makes the
// last one a NUL when the data is cut.
template <class Entry, size_t N>
size_t CopyErrBytes(uint32_t api_version, const Entry& entry, const void* data, size_t len,
                    char (&ours)[N], Entry* out, bool text = false) {
  char* dst = ours;
  size_t room = N;
  if (FI_VERSION_LT(api_version, FI_VERSION(1, 5))) {
    std::memcpy(out, &entry, offsetof(Entry, err_data_size));
  } else {
    void* user_data = out->err_data;
    const size_t user_size = out->err_data_size;
    *out = entry;
    if (user_size > 0 && user_data != nullptr) {
      dst = static_cast<char*>(user_data);
      room = user_size;
    }
  }
  const size_t n = std::min(len, room);
  if (n > 0) std::memcpy(dst, data, n);
  if (text && n > 0) dst[n - 1] = '\0';
  out->err_data = dst;
  if (!FI_VERSION_LT(api_version, FI_VERSION(1, 5))) out->err_data_size = n;
  return n;
}

// The same for a NUL-terminated message (cut to fit, still terminated).
template <class Entry, size_t N>
void CopyErrData(uint32_t api_version, const Entry& entry, const char* message, char (&ours)[N],
                 Entry* out) {
  CopyErrBytes(api_version, entry, message, std::strlen(message) + 1, ours, out, true);
}

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_COMMON_H_
