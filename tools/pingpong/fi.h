// The fi ping-pong: the same pings as the raw and rdm layers, through
// libfabric's API (FI_EP_RDM, or connected FI_EP_MSG with --ep=msg; FI_MSG
// or FI_TAGGED, manual progress by
// busy-polling fi_cq_read), over any provider: bypass's own
// (libbypass-fi.so) or libfabric's shm and tcp for comparison.
#ifndef BYPASS_TOOLS_PINGPONG_FI_H_
#define BYPASS_TOOLS_PINGPONG_FI_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/latency.h"
#include "tools/pingpong/raw.h"

namespace bypass::tools {

inline constexpr uint16_t kFiOobPort = 47002;  // the server hands out its address here

// How the fi layer finds its provider and its peer.
struct FiPingOptions {
  std::string provider = "bypass";  // fabric_attr->prov_name ("tcp" matches "tcp;ofi_rxm")
  bool tagged = false;              // FI_TAGGED instead of FI_MSG
  // FI_EP_MSG (fi_cm(3)): the server publishes a passive endpoint's name,
  // the client fi_connects to it, the server accepts; then the same pings
  // over the connection. Otherwise FI_EP_RDM.
  bool connected = false;
  std::string node;                 // the local address to bind (fi_getinfo FI_SOURCE), if any
  std::string devices;              // bypass: FI_BYPASS_DEVICES for this process, if any
  // The server's fi_getname address reaches the client through a file (both
  // sides name it) or a TCP socket: the server listens on oob_port, the
  // client connects to connect (HOST[:PORT]).
  std::string addr_file;
  uint16_t oob_port = kFiOobPort;
  std::string connect;
  uint32_t timeout_ms = 10000;      // waiting for the peer's address or a reply
};

// Loads libfabric (tools/pingpong/libfabric.h) and points FI_PROVIDER_PATH at the directory of libbypass-fi.so next to this
// binary (Bazel's bazel-bin or runfiles) when the provider is bypass and the
// variable is unset. Must run before the first fi_* call. Fails with what to
// build when the library is nowhere.
absl::Status PrepareProvider(const std::string& provider);

// Whether libfabric offers what the fi layer needs from fi.provider (one
// fi_getinfo); --local asks before it starts the server.
absl::Status ProbeProvider(const FiPingOptions& fi);

// Echoes pings until the client's kFin; counts rate-mode data and reports it.
absl::Status RunFiServer(const PingOptions& opts, const FiPingOptions& fi);

// Pings the server through libfabric and returns what it measured; every
// reply is verified.
absl::StatusOr<RunResult> RunFiClient(const PingOptions& opts, const FiPingOptions& fi);

}  // namespace bypass::tools

#endif  // BYPASS_TOOLS_PINGPONG_FI_H_
