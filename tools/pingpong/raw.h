// The raw ping-pong: two processes exchange UDP frames directly on the driver.
#ifndef BYPASS_TOOLS_PINGPONG_RAW_H_
#define BYPASS_TOOLS_PINGPONG_RAW_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "driver/device.h"
#include "tools/latency.h"

namespace bypass::tools {

struct PingOptions {
  uint64_t size = 64;      // payload bytes per message
  uint64_t iters = 100000;
  uint64_t warmup = 1000;
  std::string mode = "latency";  // or "rate"
  uint32_t burst = 32;     // rate mode
  driver::MacAddress peer_mac = driver::kBroadcastMac;
  driver::Ipv4Address peer_ip;
};

// Waits for the link to come up (memif waits for its peer). Cold path.
absl::Status WaitForLink(driver::Device& dev, uint64_t timeout_ms);

// Echoes pings until the client's kFin; counts rate-mode data and reports it.
absl::Status RunRawServer(driver::Device& dev, const PingOptions& opts);

// Sends pings (or a rate run) and returns what it measured; every reply's
// payload is verified.
absl::StatusOr<RunResult> RunRawClient(driver::Device& dev, const PingOptions& opts);

}  // namespace bypass::tools

#endif  // BYPASS_TOOLS_PINGPONG_RAW_H_
