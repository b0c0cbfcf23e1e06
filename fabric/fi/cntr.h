// The counter (fi_cntr(3)): completions and errors counted by the progress
// path (progress.h) and the operations that have no completion; reading or waiting progresses
// every endpoint bound to it.
#ifndef BYPASS_FABRIC_FI_CNTR_H_
#define BYPASS_FABRIC_FI_CNTR_H_

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fabric/fi/common.h"
#include "fabric/fi/wait.h"

namespace bypass::fi {

struct Domain;
struct Ep;

// A counter of one domain.
struct Cntr {
  fid_cntr fid;
  Obj obj;
  Domain* domain = nullptr;
  std::atomic<uint64_t> value{0};
  std::atomic<uint64_t> errors{0};
  std::vector<Ep*> eps;  // progressed by every read and wait
  WaitObject wait;       // signaled by every change (wait.h)
  // What the application last saw: fi_cntr_read / readerr (fi_trywait and
  // fi_wait wait for a change from it), and fi_poll, fi_cntr_set and
  // fi_cntr_add (fi_poll reports a change from it, fi_poll(3)).
  std::atomic<uint64_t> read_value{0};
  std::atomic<uint64_t> read_errors{0};
  std::atomic<uint64_t> poll_value{0};
  std::atomic<uint64_t> poll_errors{0};
  // The lock of the endpoints it serves (as Cq::lock).
  std::atomic<DomainLock*> lock{nullptr};
};
static_assert(offsetof(Cntr, fid) == 0);

inline Cntr* AsCntr(const void* f) { return As<Cntr>(f, FI_CLASS_CNTR); }

// One event, or one error, on c (none bound: nothing).
inline void CountEvent(Cntr* c) {
  if (c == nullptr) return;
  c->value.fetch_add(1);
  c->wait.Signal();
}
inline void CountErrorEvent(Cntr* c) {
  if (c == nullptr) return;
  c->errors.fetch_add(1);
  c->wait.Signal();
}

// fi_cntr_open.
int OpenCntr(fid_domain* domain, fi_cntr_attr* attr, fid_cntr** cntr, void* context);

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_CNTR_H_
