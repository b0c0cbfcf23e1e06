// Manual progress and completion delivery: a pass of an endpoint's engine,
// then its completions and errors into the endpoint's CQs (in order, as
// much as they have room for) and counters. fi_cq_read, fi_cq_sread,
// fi_cntr_read and fi_cntr_wait run it for every endpoint bound to them.
#ifndef BYPASS_FABRIC_FI_PROGRESS_H_
#define BYPASS_FABRIC_FI_PROGRESS_H_

#include <cstddef>
#include <vector>

#include "fabric/rdm/rdm.h"
#include "fabric/rdm/types.h"

namespace bypass::fi {

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
// (nothing if it is not enabled). REQUIRES: the domain guard is held.
void ProgressEp(Ep* ep);
// Progresses every enabled endpoint of eps (FI_EP_RDM or FI_EP_DGRAM).
// REQUIRES: the domain guard is held.
void ProgressAll(const std::vector<Ep*>& eps);

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_PROGRESS_H_
