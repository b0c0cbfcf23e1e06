// One side of a ping-pong or rate run on any layer, for the tools that
// share the layers (pingpong, bw): opening the device, the server and client
// loops, and --local's server process.
#ifndef BYPASS_TOOLS_PINGPONG_SESSION_H_
#define BYPASS_TOOLS_PINGPONG_SESSION_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

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

// Serves until the client's kFin.
absl::Status RunServerSide(const LayerOptions& l, const PingOptions& o);

// Runs the client and returns what it measured.
absl::StatusOr<RunResult> RunClientSide(const LayerOptions& l, const PingOptions& o);

// --local: the addresses and rendezvous both sides use on this host.
struct LocalPlan {
  std::string server_device;  // raw, rdm: memif, server role
  std::string client_device;
  std::string addr_file;      // fi: the server's address
  std::string cleanup[3];     // files to remove afterwards
};
inline constexpr char kLocalServerIp[] = "10.79.255.1";
inline constexpr char kLocalClientIp[] = "10.79.255.2";
LocalPlan MakeLocalPlan(const std::string& tool);

// Starts this binary again as the server with args (argv[1..]); it dies
// with this process.
absl::StatusOr<pid_t> StartServerProcess(const std::vector<std::string>& args);

// --local: starts this binary again as the server of the same layer, sizes
// and window (tools that run it take --sizes, --window, --layer, --server,
// --device, --ip, --link_timeout_ms, the fi flags and, for rdm with faults,
// --loss, --dup, --reorder and --fault_seed), on a fresh memif socket (raw,
// rdm, fi over bypass) or address file (fi), and points l and o at it.
// Returns the server's process id; ReapServerProcess(pid, *plan) afterwards.
absl::StatusOr<pid_t> StartLocalServer(const std::string& tool, LayerOptions* l, PingOptions* o,
                                       LocalPlan* plan);

// Waits up to 2 s for the server to exit (it does on the client's kFin),
// then kills it; removes the plan's files.
void ReapServerProcess(pid_t child, const LocalPlan& plan);

}  // namespace bypass::tools

#endif  // BYPASS_TOOLS_PINGPONG_SESSION_H_
