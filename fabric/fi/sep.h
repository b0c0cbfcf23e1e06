// Scalable endpoints (fi_scalable_ep, fi_endpoint(3) "SCALABLE ENDPOINTS"):
// one address, several transmit and receive contexts that progress
// independently.
//
// Context i (transmit or receive) is a side of slot i, an endpoint (Ep)
// whose engine endpoint has the scalable endpoint's UDP port + i: transmit
// context i sends from it, receive context i receives on it, and a peer
// names it with fi_rx_addr(fi_addr, i, rx_ctx_bits) (the port + i, ep.cc
// FindPeer). Each slot is on a queue of its own where the device has one
// to give (lane.h: a steered hardware queue, or its own instance of a
// device that delivers by port, such as the default domain's), with its
// own port and lock: a call on a context, and a read of a CQ bound to it,
// take that lock and no other. Where the device has none (one queue, or
// all taken) the slot stays on its domain's queue and takes the domain's
// lock (software demultiplexing by UDP port, as for endpoints): contexts
// of one index share a lock anyway, and contexts of different indexes
// then share the domain's. The slots are made at fi_scalable_ep; their
// engine endpoints at the first fi_enable of one of their contexts.
#ifndef BYPASS_FABRIC_FI_SEP_H_
#define BYPASS_FABRIC_FI_SEP_H_

#include <rdma/fabric.h>
#include <rdma/fi_endpoint.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "driver/device.h"
#include "fabric/fi/common.h"

namespace bypass::fi {

struct Domain;
struct Av;
struct Ep;

struct Sep {
  fid_ep fid;
  Obj obj;  // refs: its open contexts
  Domain* domain = nullptr;
  fi_info* info = nullptr;  // a copy, for the contexts' attributes
  size_t tx_cnt = 1;
  size_t rx_cnt = 1;
  uint16_t base_port = 0;  // context i's engine endpoint: base_port + i
  bool port_given = false;
  std::optional<driver::Ipv4Address> loopback_name;
  Av* av = nullptr;  // fi_scalable_ep_bind; the slots are bound to it
  bool enabled = false;
  std::vector<Ep*> slots;  // by context index
};
static_assert(offsetof(Sep, fid) == 0);

inline Sep* AsSep(const void* f) { return As<Sep>(f, FI_CLASS_SEP); }

// fi_scalable_ep (FI_EP_RDM).
int OpenSep(fid_domain* domain, fi_info* info, fid_ep** sep, void* context);

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_SEP_H_
