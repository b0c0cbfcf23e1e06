// Manual progress and completion delivery: a pass of an endpoint's engine,
// then its completions and errors into the endpoint's CQs (in order, as
// much as they have room for) and counters. fi_cq_read, fi_cq_sread,
// fi_cntr_read and fi_cntr_wait run it for every endpoint bound to them;
// the domain's progress thread (progress_thread.h) for the whole domain.
#ifndef BYPASS_FABRIC_FI_PROGRESS_H_
#define BYPASS_FABRIC_FI_PROGRESS_H_

#include <cstddef>
#include <vector>

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
// Declared before a read's DomainGuard, so that it ends after it: when a
// pass of the call deferred an ACK to the application's next call
// (rdm::EndpointConfig::defer_requested_acks, set on FI_EP_RDM endpoints)
// and the domain's progress thread does not watch yet, starts it and
// keeps it in demand until the domain closes: should the application not
// call again (fi_pingpong's TCP handshake between sizes), the thread's next
// pass sends the ACK its peer's transmit completion waits for.
class AckWatch {
 public:
  // Notes the call as the application's (ProgressThread::NoteAppPass),
  // whether or not it goes on to progress: a read that finds completions
  // waiting returns them without a pass, and a thread that took such an
  // application for gone made the completions itself, pass after pass.
  explicit AckWatch(Domain* d);
  ~AckWatch();
  AckWatch(const AckWatch&) = delete;
  AckWatch& operator=(const AckWatch&) = delete;

 private:
  Domain* const d_;
};

// The domain-wide pass of the progress thread (progress_thread.h): takes
// the domain lock and progresses every endpoint of d. Returns what
// ProgressEp returned, summed; *waited: another thread waited for the
// domain lock during the pass (an application call).
size_t ProgressDomain(Domain* d, bool* waited);

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_PROGRESS_H_
