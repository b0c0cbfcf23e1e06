// The endpoint (fi_endpoint(3)): an rdm::Endpoint with its own UDP port on
// its domain's queue (FI_EP_RDM), or plain datagrams on that port
// (FI_EP_DGRAM, dgram.h); the CQs, counters, AV and EQ bound to it; and
// aliases (fi_ep_alias) that share it with other default flags. Control
// calls, enable and close are in ep.cc; the data calls in ep_ops.cc.
#ifndef BYPASS_FABRIC_FI_EP_H_
#define BYPASS_FABRIC_FI_EP_H_

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_collective.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "fabric/fi/common.h"
#include "fabric/rdm/config.h"
#include "fabric/rdm/rdm.h"
#include "fabric/rdm/types.h"

namespace bypass::fi {

struct Domain;
struct Cq;
struct Cntr;
struct Av;
struct Eq;
struct Mr;
struct DgramState;

// A send or receive that needs more than the application's context: an
// operation without a CQ entry under FI_SELECTIVE_COMPLETION, or an iov
// of several buffers (gathered into, or scattered from, `bounce`: a copy).
struct OpRecord {
  void* user_context = nullptr;
  bool suppress = false;  // no CQ entry (counters still count it)
  std::vector<uint8_t> bounce;
  std::vector<iovec> scatter;  // receive: where the bounce goes on completion
  uint32_t next_free = UINT32_MAX;
};

// An endpoint, or an alias of one (`base` says which).
struct Ep {
  fid_ep fid;
  Obj obj;
  Ep* base = this;  // an alias (fi_ep_alias) points at the endpoint it aliases
  uint64_t tx_op_flags = 0;
  uint64_t rx_op_flags = 0;
  // Everything below lives in the base endpoint only.
  Domain* domain = nullptr;
  fi_ep_type type = FI_EP_RDM;
  uint64_t caps = 0;
  uint16_t udp_port = 0;
  bool port_reserved = false;
  std::optional<uint8_t> dscp;
  size_t min_multi_recv = 0;
  bool min_multi_recv_set = false;
  rdm::EndpointConfig config;
  std::unique_ptr<rdm::Endpoint> rdm;  // after fi_enable (FI_EP_RDM)
  // ProgressEp's buffers for draining the engine, allocated with rdm: on
  // ProgressEp's stack they would be zero-initialised on every pass (about
  // 2 KiB per fi_cq_read).
  static constexpr size_t kDrainBurst = 32;
  std::unique_ptr<rdm::Completion[]> drain;
  std::unique_ptr<rdm::ErrorCompletion> drain_error;
  std::unique_ptr<DgramState> dgram;     // after fi_enable (FI_EP_DGRAM)
  Cq* tx_cq = nullptr;
  Cq* rx_cq = nullptr;
  bool tx_selective = false;
  bool rx_selective = false;
  Cntr* send_cntr = nullptr;
  Cntr* recv_cntr = nullptr;
  Cntr* read_cntr = nullptr;
  Cntr* write_cntr = nullptr;
  Cntr* rem_read_cntr = nullptr;
  Cntr* rem_write_cntr = nullptr;
  Av* av = nullptr;
  Eq* eq = nullptr;
  std::vector<rdm::PeerId> peer_of;  // by fi_addr
  std::vector<fi_addr_t> addr_of;    // by PeerId.slot()
  std::vector<OpRecord> records;
  uint32_t free_record = UINT32_MAX;
  std::vector<Mr*> mrs;  // FI_MR_ENDPOINT regions bound here
};
static_assert(offsetof(Ep, fid) == 0);

inline Ep* AsEp(const void* f) { return As<Ep>(f, FI_CLASS_EP); }

inline bool Enabled(const Ep* ep) { return ep->rdm != nullptr || ep->dgram != nullptr; }

// Returns a record to its endpoint's free list.
inline void FreeRecord(Ep* ep, OpRecord* r) {
  r->bounce.clear();
  r->scatter.clear();
  r->user_context = nullptr;
  r->suppress = false;
  r->next_free = ep->free_record;
  ep->free_record = static_cast<uint32_t>(r - ep->records.data());
}

// fi_endpoint (FI_EP_RDM or FI_EP_DGRAM).
int OpenEp(fid_domain* domain, fi_info* info, fid_ep** ep, void* context);
// Wires an AV entry into an enabled endpoint's engine.
int AddPeerToEp(Ep* ep, fi_addr_t fa, const rdm::Address& a);

// The data-path tables every endpoint points at (ep_ops.cc).
extern fi_ops_msg g_msg_ops;
extern fi_ops_tagged g_tagged_ops;
extern fi_ops_rma g_rma_ops;
extern fi_ops_atomic g_atomic_ops;
extern fi_ops_collective g_collective_ops;

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_EP_H_
