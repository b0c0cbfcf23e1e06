// Capabilities of fi_getinfo(3) that bypass does not offer, each asked of
// fi_getinfo by itself: the row says `refused` and why (CONFORMANCE.md).
// Where a provider offers one, the entry it returns must carry it.
#include <rdma/fabric.h>

#include "fabric/fi/conformance/conformance.h"

namespace bypass::fi::conformance {
namespace {

void Offered(Ctx& c, uint64_t caps, const char* name) {
  fi_info* info = c.Info(c.Hints(caps));
  CHECK((info->caps & caps) == caps, "fi_getinfo answered an entry without " << name);
}

CONFORMANCE_CASE(caps_rma_pmem, kShm) { Offered(c, FI_RMA | FI_RMA_PMEM, "FI_RMA_PMEM"); }

CONFORMANCE_CASE(caps_variable_msg, kShm) {
  Offered(c, FI_MSG | FI_VARIABLE_MSG, "FI_VARIABLE_MSG");
}

CONFORMANCE_CASE(caps_hmem, kShm) { Offered(c, FI_MSG | FI_HMEM, "FI_HMEM"); }

CONFORMANCE_CASE(caps_peer, kShm) { Offered(c, FI_MSG | FI_PEER, "FI_PEER"); }

}  // namespace
}  // namespace bypass::fi::conformance
