// Manual progress and completion delivery: a pass of an endpoint's engine,
// then its completions and errors into the endpoint's CQs (in order, as
// much as they have room for) and counters. fi_cq_read, fi_cq_sread,
// fi_cntr_read and fi_cntr_wait run it for every endpoint bound to them;
// the domain's progress thread (progress_thread.h) for the whole domain.
#ifndef BYPASS_FABRIC_FI_PROGRESS_H_
#define BYPASS_FABRIC_FI_PROGRESS_H_

#include <cstddef>
#include <vector>

#include "fabric/fi/domain.h"
#include "fabric/fi/progress_thread.h"
#include "fabric/rdm/rdm.h"
#include "fabric/rdm/types.h"

namespace bypass::fi {

struct Domain;
struct Ep;

// ProgressEp's buffers for draining an endpoint's engine, allocated with
// the engine endpoint (fi_enable): on ProgressEp's stack they would be
// zero-initialised on every pass (about 2 KiB per fi_cq_read).
struct DrainBuffers {
  static constexpr size_t kBurst = 32;
  rdm::Completion completions[kBurst];
  rdm::ErrorCompletion error;
};

// One engine pass of ep, then its completions into its CQs and counters
// (nothing if it is not enabled). Returns the packets received and the
// completions delivered (0: nothing happened). REQUIRES: the domain guard
// is held.
size_t ProgressEp(Ep* ep);
// Progresses every enabled endpoint of eps (FI_EP_RDM or FI_EP_DGRAM) for
// the application (a read or a wait: the progress thread stands aside).
// REQUIRES: the domain guard is held.
void ProgressAll(const std::vector<Ep*>& eps);
// Declared before a call's DomainGuard, so that it ends after it: when the
// call (a read, a wait, a send, an RMA or atomic) left an endpoint with
// something only a later pass finishes (Domain::watch_wanted: a deferred
// ACK, packets in flight, data queued behind the congestion window) and
// the domain's progress thread does not watch yet, starts it and puts it
// in demand until a pass of its own finds the domain's endpoints finished:
// should the application not call again (fi_pingpong's TCP handshake
// between sizes; a thread that injects and then waits on another
// endpoint's fd), the thread's passes send the ACK its peer's transmit
// completion waits for, take the ACKs of what was sent and send what the
// window held back.
// Provider calls this thread is inside (CallWatch, and trigger.h's issue
// of a triggered operation from within a pass): the watch starts only when
// the outermost one ends, as starting the thread takes the domain's lock
// and, under FI_THREAD_DOMAIN, switches locking on, which must not happen
// under a guard taken without it. Initial-exec: one load off %fs, no call.
inline thread_local int tls_call_depth __attribute__((tls_model("initial-exec"))) = 0;
// Marks a scope as inside a provider call (see tls_call_depth).
class NestedCall {
 public:
  NestedCall() { ++tls_call_depth; }
  ~NestedCall() { --tls_call_depth; }
  NestedCall(const NestedCall&) = delete;
  NestedCall& operator=(const NestedCall&) = delete;
};

class CallWatch {
 public:
  // app_pass: notes the call as the application's progress
  // (ProgressThread::NoteAppPass), whether or not it goes on to progress:
  // a read that finds completions waiting returns them without a pass, and
  // a thread that took such an application for gone made the completions
  // itself, pass after pass. Not for posting calls: an application that
  // only posts (fi_inject after fi_inject) progresses nothing, and the
  // thread must not stand aside for it.
  explicit CallWatch(Domain* d, bool app_pass = true) : d_(d) {
    ++tls_call_depth;
    if (!app_pass) return;
    if (ProgressThread* t = d->progress_running.load(std::memory_order_acquire)) t->NoteAppPass();
  }
  // A nested call leaves the start to the outermost (tls_call_depth): a
  // triggered send issued by a read's pass is watched when the read ends.
  ~CallWatch() {
    if (--tls_call_depth == 0 && d_->watch_wanted.load(std::memory_order_relaxed) &&
        !d_->watched.load(std::memory_order_relaxed)) {
      Start();
    }
  }
  CallWatch(const CallWatch&) = delete;
  CallWatch& operator=(const CallWatch&) = delete;

 private:
  void Start();
  Domain* const d_;
};

// A call or pass left e, an endpoint of d, with something only a later
// pass finishes: the watch is wanted (CallWatch). One load while the
// thread watches (an application that keeps calling). REQUIRES: the
// endpoint's guard is held.
inline void NoteUnfinished(Domain* d, const rdm::Endpoint* e) {
  if (d->watched.load(std::memory_order_relaxed) ||
      d->watch_wanted.load(std::memory_order_relaxed) || e == nullptr || !e->Unfinished()) {
    return;
  }
  d->watch_wanted.store(true, std::memory_order_relaxed);
}

// The domain-wide pass of the progress thread (progress_thread.h): takes
// the domain lock and progresses every endpoint of d, or with
// only_unpolled those the application did not progress since the
// thread's last look (Ep::app_passes: while it polls some, the others
// still answer their peers). Returns what ProgressEp returned, summed;
// *waited: another thread waited for the domain lock during the pass (an
// application call); *unfinished: an endpoint has something only a later
// pass finishes (rdm::Endpoint::Unfinished; assumed of an endpoint passed
// over).
size_t ProgressDomain(Domain* d, bool only_unpolled, bool* waited, bool* unfinished);

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_PROGRESS_H_
