// The raw ping-pong: two processes exchange UDP frames directly on the driver.
#ifndef BYPASS_TOOLS_PINGPONG_RAW_H_
#define BYPASS_TOOLS_PINGPONG_RAW_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "driver/device.h"
#include "tools/latency.h"

namespace bypass::tools {

// What one run measures; the same for every layer.
struct PingOptions {
  uint64_t size = 64;      // payload bytes per message (latency); the server's largest
  uint64_t iters = 100000;  // round trips, or messages per size in rate mode
  uint64_t warmup = 1000;
  std::string mode = "latency";  // or "rate"
  uint32_t burst = 32;     // raw rate mode: frames per TxBurst
  uint32_t window = 32;    // rdm and fi rate mode: messages outstanding; server receives posted
  std::vector<uint64_t> sizes;  // rate mode: the sizes to run in turn (empty: just size)
  uint64_t duration_ms = 0;     // rate mode: send for this long per size instead of iters
  // Rate mode: called now and then (at most every 200 ms) with a line of
  // progress; may be empty.
  std::function<void(const std::string&)> progress;
  driver::MacAddress peer_mac = driver::kBroadcastMac;
  driver::Ipv4Address peer_ip;

  std::vector<uint64_t> RateSizes() const {
    return sizes.empty() ? std::vector<uint64_t>{size} : sizes;
  }
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
