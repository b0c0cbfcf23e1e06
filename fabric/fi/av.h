// The address vector (fi_av(3)): fi_addr_t -> engine address, shared by the
// endpoints bound to it (an insert reaches every enabled one's engine).
#ifndef BYPASS_FABRIC_FI_AV_H_
#define BYPASS_FABRIC_FI_AV_H_

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include "fabric/fi/common.h"
#include "fabric/rdm/types.h"

namespace bypass::fi {

struct Domain;
struct Ep;
struct Eq;
class SharedAvTable;

// An address vector of one domain (map and table alike: fi_addr is the index).
struct Av {
  fid_av fid;
  Obj obj;
  Domain* domain = nullptr;
  fi_av_type type = FI_AV_TABLE;
  std::vector<std::optional<rdm::Address>> addrs;  // indexed by fi_addr
  std::vector<Ep*> eps;
  Eq* eq = nullptr;  // fi_av_bind: inserts complete as FI_AV_COMPLETE events
  // A named AV (attr->name): its table shared with other processes
  // (av_shared.h); addrs mirrors it, fi_addr i its entry i.
  std::unique_ptr<SharedAvTable> shared;
  // av_attr->rx_ctx_bits: the high bits of an fi_addr that name a receive
  // context (fi_rx_addr), the rest the entry.
  int rx_ctx_bits = 0;
};

// The bits of an fi_addr that name the AV entry under rx_ctx_bits bits.
inline fi_addr_t RxIndexMask(int rx_ctx_bits) {
  return rx_ctx_bits == 0 ? ~fi_addr_t{0} : ~fi_addr_t{0} >> rx_ctx_bits;
}
// The AV entry an fi_addr names (fi_rx_addr's context index stripped):
// what per-address state of an endpoint is kept by. FI_ADDR_NOTAVAIL stays.
inline fi_addr_t AvEntry(const Av* av, fi_addr_t fa) {
  if (av == nullptr || fa == FI_ADDR_NOTAVAIL) return fa;
  return fa & RxIndexMask(av->rx_ctx_bits);
}
static_assert(offsetof(Av, fid) == 0);

inline Av* AsAv(const void* f) { return As<Av>(f, FI_CLASS_AV); }

// fi_av_open.
int OpenAv(fid_domain* domain, fi_av_attr* attr, fid_av** av, void* context);
// ep's engine peer for the AV entry fa (no receive context index: FindPeer
// in ep.h takes those). On a named AV an fa another process inserted since
// this one last looked is found after reading the table (SyncSharedAv).
// REQUIRES: the endpoint's guard.
bool FindEntryPeer(Ep* ep, fi_addr_t fa, rdm::PeerId* out);
// The fi_addr of a peer of ep (FI_ADDR_NOTAVAIL: none), the same way.
fi_addr_t AddrOfPeer(Ep* ep, rdm::PeerId p);
// The address fa names in av (a named AV read again if needed); nullopt:
// none. REQUIRES: the domain guard.
std::optional<rdm::Address> AvAddress(Av* av, fi_addr_t fa);

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_AV_H_
