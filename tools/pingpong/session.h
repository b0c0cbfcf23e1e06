// One side of a ping-pong or rate run on any layer, for the tools that
// share the layers (pingpong, bw): the peer from --connect, opening the
// device, the server and client loops, and --local's server process.
#ifndef BYPASS_TOOLS_PINGPONG_SESSION_H_
#define BYPASS_TOOLS_PINGPONG_SESSION_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/latency.h"
#include "tools/pingpong/fi.h"
#include "tools/pingpong/raw.h"
#include "tools/pingpong/rdm.h"

namespace bypass::tools {

// What a side needs beyond PingOptions.
struct LayerOptions {
  std::string layer = "raw";  // raw, rdm or fi
  std::string device;         // raw, rdm: the device URI
  std::string ip;             // raw, rdm: this side's IPv4 for devices with none
  uint32_t link_timeout_ms = 10000;
  RdmPingOptions rdm;
  FiPingOptions fi;
};

// "raw", "rdm" or "fi", else an error naming them.
absl::Status CheckLayer(const std::string& layer);

// Points l and o at the server `connect` (--connect) names: for fi
// HOST[:PORT] of its address exchange, for raw and rdm MAC[/IPv4]; and gives
// the fi layer this side's --device and --link_timeout_ms. REQUIRES: l's
// layer, device and link_timeout_ms are set.
absl::Status SetPeer(const std::string& connect, LayerOptions* l, PingOptions* o);

// Serves until the client's kFin.
absl::Status RunServerSide(const LayerOptions& l, const PingOptions& o);

// Runs the client and returns what it measured.
absl::StatusOr<RunResult> RunClientSide(const LayerOptions& l, const PingOptions& o);

// --local: starts this binary (`tool`) again as the server of the same
// layer, sizes and window, on a fresh memif socket (raw, rdm, fi over
// bypass) or address file (fi), runs the client against it, and waits up to
// 2 s for the server to exit (it does on the client's kFin) before killing
// it. Tools that run it take --sizes, --window, --layer, --server, --device,
// --ip, --link_timeout_ms, the fi flags and, for rdm with faults, --loss,
// --dup, --reorder and --fault_seed.
absl::StatusOr<RunResult> RunLocalClient(const std::string& tool, LayerOptions l, PingOptions o);

}  // namespace bypass::tools

#endif  // BYPASS_TOOLS_PINGPONG_SESSION_H_
