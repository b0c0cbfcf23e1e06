// Shared contexts (fi_endpoint(3), fi_domain(3)): fi_srx_context and
// fi_stx_context, for endpoints opened with ep_attr->rx_ctx_cnt or
// tx_ctx_cnt FI_SHARED_CONTEXT and bound to them with fi_ep_bind.
//
// A shared receive context is an rdm::SharedRecvQueue on the domain's
// port: receives posted to it (fi_recv, fi_trecv and their v/msg forms)
// take messages arriving at any endpoint bound to it, each completing in
// the receive CQ (and FI_RECV counter) of the endpoint its message arrived
// at, with the source that endpoint's AV gives it. A shared transmit
// context is a budget: its tx_attr->size operations may be outstanding
// across the endpoints bound to it; each endpoint still sends through its
// own engine and UDP port (they already share the domain's device queue,
// which is what a transmit context would be on hardware).
#ifndef BYPASS_FABRIC_FI_SHARED_CTX_H_
#define BYPASS_FABRIC_FI_SHARED_CTX_H_

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "fabric/fi/common.h"
#include "fabric/fi/ep.h"
#include "fabric/rdm/rdm.h"

namespace bypass::fi {

struct Domain;

// A shared receive context (fid_ep of class FI_CLASS_SRX_CTX).
struct Srx {
  fid_ep fid;
  Obj obj;  // refs: the endpoints bound to it
  Domain* domain = nullptr;
  uint64_t caps = 0;
  uint64_t op_flags = 0;  // rx_attr->op_flags: what fi_recv and fi_trecv default to
  std::unique_ptr<rdm::SharedRecvQueue> queue;
  std::vector<Ep*> eps;  // bound: their AVs name the sources of directed receives
  // Receives that scatter into several buffers, or that asked for no
  // completion (reported unless the completing endpoint's CQ was bound
  // with FI_SELECTIVE_COMPLETION): progress.cc resolves them.
  OpRecords records;
};
static_assert(offsetof(Srx, fid) == 0);

inline Srx* AsSrx(const void* f) { return As<Srx>(f, FI_CLASS_SRX_CTX); }

// A shared transmit context (fid_stx): the count of operations outstanding
// through its endpoints against its size.
struct Stx {
  fid_stx fid;
  Obj obj;  // refs: the endpoints bound to it
  Domain* domain = nullptr;
  size_t size = 0;
  size_t outstanding = 0;
};
static_assert(offsetof(Stx, fid) == 0);

inline Stx* AsStx(const void* f) { return As<Stx>(f, FI_CLASS_STX_CTX); }

// fi_srx_context, fi_stx_context.
int OpenSrx(fid_domain* domain, fi_rx_attr* attr, fid_ep** rx_ep, void* context);
int OpenStx(fid_domain* domain, fi_tx_attr* attr, fid_stx** stx, void* context);
// fi_ep_bind of an srx or stx (flags 0) to an endpoint opened with
// FI_SHARED_CONTEXT on that side, before fi_enable.
int BindSharedContext(Ep* ep, fid* ctx, uint64_t flags);
// fi_cancel of a receive posted to s (through it or a bound endpoint).
ssize_t CancelSharedRecv(Srx* s, void* context);
// At fi_close of the endpoint: what it still had outstanding on its stx is
// given back, and both contexts lose it.
void UnbindSharedContexts(Ep* ep);

// The stx budget of ep's operations that complete (not injects): room for
// one more (else -FI_EAGAIN), taken when posted, given back at completion.
inline bool StxFull(const Ep* ep) {
  return ep->stx != nullptr && ep->stx->outstanding >= ep->stx->size;
}
inline void StxTake(Ep* ep) {
  if (ep->stx == nullptr) return;
  ++ep->stx->outstanding;
  ++ep->stx_outstanding;
}
inline void StxGive(Ep* ep) {
  if (ep->stx == nullptr || ep->stx_outstanding == 0) return;
  --ep->stx->outstanding;
  --ep->stx_outstanding;
}

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_SHARED_CTX_H_
