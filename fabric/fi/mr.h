// The memory region (fi_mr(3)): a registration with a key; regions open to
// remote access are registered with the engine of each endpoint that may be
// their target.
#ifndef BYPASS_FABRIC_FI_MR_H_
#define BYPASS_FABRIC_FI_MR_H_

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fabric/fi/common.h"

namespace bypass::fi {

struct Cntr;
struct Domain;
struct Ep;

// A registered region of one domain.
struct Mr {
  fid_mr fid;
  Obj obj;
  Domain* domain = nullptr;
  void* addr = nullptr;
  size_t len = 0;
  uint64_t access = 0;
  uint64_t offset = 0;
  Ep* bound = nullptr;  // FI_MR_ENDPOINT: the endpoint it is bound to
  // Disabled (FI_MR_ENDPOINT, or FI_RMA_EVENT under FI_MR_RMA_EVENT) until
  // fi_mr_enable: peers cannot reach it.
  bool enabled = false;
  std::vector<Ep*> registered;  // endpoints whose engine knows the region
  void* context = nullptr;
  // fi_mr_bind to counters: peers' writes into it and reads of it.
  Cntr* remote_write_cntr = nullptr;
  Cntr* remote_read_cntr = nullptr;
};
static_assert(offsetof(Mr, fid) == 0);

inline Mr* AsMr(const void* f) { return As<Mr>(f, FI_CLASS_MR); }

// The domain's registration calls (fi_mr_reg, fi_mr_regv, fi_mr_regattr).
extern fi_ops_mr g_mr_ops;
// fi_mr_regattr on a domain.
int RegMr(fid* domain, const fi_mr_attr* attr, uint64_t flags, fid_mr** mr);
// Registers mr with ep's engine (remote access regions).
int RegisterMrWithEp(Mr* mr, Ep* ep);
void DeregisterMrFromEp(Mr* mr, Ep* ep);
// A peer's access to a region reported by the engine (its region context
// is the Mr): counted on the counters bound to the region; the region's
// own context, or null if it has been closed since.
void* CountMrEvent(void* region_context, bool write);

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_MR_H_
