// The rdm ping-pong: the same pings as the raw layer, as messages between two
// RDM endpoints (fabric/rdm), optionally over a fault-injecting device.
#ifndef BYPASS_TOOLS_PINGPONG_RDM_H_
#define BYPASS_TOOLS_PINGPONG_RDM_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "driver/device.h"
#include "tools/latency.h"
#include "tools/pingpong/raw.h"

namespace bypass::tools {

// Faults applied to what this side's device receives (driver/fault).
struct RdmPingOptions {
  double loss = 0;
  double dup = 0;
  double reorder = 0;
  uint64_t fault_seed = 1;
};

// Echoes pings (as messages) until the client's kFin. Takes the device
// (the link is up).
absl::Status RunRdmServer(std::unique_ptr<driver::Device> dev, const PingOptions& opts,
                          const RdmPingOptions& rdm);

// Pings opts.peer_ip (which must be set) at UDP port kPingUdpPort; every
// reply is verified. The result carries the engine's retransmit counters.
absl::StatusOr<RunResult> RunRdmClient(std::unique_ptr<driver::Device> dev,
                                       const PingOptions& opts, const RdmPingOptions& rdm);

}  // namespace bypass::tools

#endif  // BYPASS_TOOLS_PINGPONG_RDM_H_
