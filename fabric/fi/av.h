// The address vector (fi_av(3)): fi_addr_t -> engine address, shared by the
// endpoints bound to it (an insert reaches every enabled one's engine).
#ifndef BYPASS_FABRIC_FI_AV_H_
#define BYPASS_FABRIC_FI_AV_H_

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include <cstddef>
#include <optional>
#include <vector>

#include "fabric/fi/common.h"
#include "fabric/rdm/types.h"

namespace bypass::fi {

struct Domain;
struct Ep;
struct Eq;

// An address vector of one domain (map and table alike: fi_addr is the index).
struct Av {
  fid_av fid;
  Obj obj;
  Domain* domain = nullptr;
  fi_av_type type = FI_AV_TABLE;
  std::vector<std::optional<rdm::Address>> addrs;  // indexed by fi_addr
  std::vector<Ep*> eps;
  Eq* eq = nullptr;  // fi_av_bind: inserts complete as FI_AV_COMPLETE events
  // av_attr->rx_ctx_bits: the high bits of an fi_addr that name a receive
  // context (fi_rx_addr), the rest the entry.
  int rx_ctx_bits = 0;
};

// The bits of an fi_addr that name the AV entry under rx_ctx_bits bits.
inline fi_addr_t RxIndexMask(int rx_ctx_bits) {
  return rx_ctx_bits == 0 ? ~fi_addr_t{0} : ~fi_addr_t{0} >> rx_ctx_bits;
}
static_assert(offsetof(Av, fid) == 0);

inline Av* AsAv(const void* f) { return As<Av>(f, FI_CLASS_AV); }

// fi_av_open.
int OpenAv(fid_domain* domain, fi_av_attr* attr, fid_av** av, void* context);

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_AV_H_
