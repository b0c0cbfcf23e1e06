// The fabric (fi_fabric(3)): the configured device list and the engine
// settings every domain and endpoint of it starts from.
#ifndef BYPASS_FABRIC_FI_FABRIC_H_
#define BYPASS_FABRIC_FI_FABRIC_H_

#include <rdma/fabric.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fabric/fi/common.h"
#include "fabric/rdm/config.h"

namespace bypass::fi {

// The configured devices and engine knobs (FI_BYPASS_*), read once per fabric.
struct Settings {
  std::vector<std::string> devices;  // URIs; each is a domain
  uint16_t base_port = 0;            // endpoints take base_port, base_port + 1, ...
  std::string auth_key_file;         // FI_BYPASS_AUTH_KEY_FILE (read at fi_domain)
  rdm::EndpointConfig engine;        // sizes and timers every endpoint starts from
  // A closing endpoint keeps answering its peers until none has spoken for
  // this long (their last packets, retransmissions of what our final ACK
  // acknowledged, need an answer; fi_close takes at least this long once
  // an endpoint has had peers).
  uint64_t linger_quiet_ns = 100'000'000;
  // Peers of a passive endpoint's port (FI_EP_MSG): its connections, which
  // share it, and the requests it holds (FI_BYPASS_LISTEN_PEERS; default
  // the engine's max_peers).
  uint32_t listen_peers = 256;
};
Settings ReadSettings();

// A fabric: what fi_fabric opened, with the settings of that moment.
struct Fabric {
  fid_fabric fid;
  Obj obj;
  Settings settings;
  uint32_t api_version = 0;
};
static_assert(offsetof(Fabric, fid) == 0);

inline Fabric* AsFabric(const void* f) { return As<Fabric>(f, FI_CLASS_FABRIC); }

// The provider's fabric entry point (fi_fabric).
int OpenFabric(fi_fabric_attr* attr, fid_fabric** fabric, void* context);

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_FABRIC_H_
