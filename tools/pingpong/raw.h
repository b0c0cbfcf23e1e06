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
  uint64_t size = 64;           // the one payload size when `sizes` is empty
  std::vector<uint64_t> sizes;  // the payload sizes to run in turn (--sizes)
  uint64_t iters = 100000;      // per size: round trips (latency), messages (rate)
  uint64_t duration_ms = 0;     // per size and phase: measure this long instead of iters
  uint64_t warmup = 1000;       // per size and phase, before measuring
  bool latency = true;          // round trips with one ping in flight
  bool rate = false;            // one-way messages, `window` outstanding
  uint32_t burst = 32;     // raw rate mode: frames per TxBurst
  uint32_t window = 32;    // rdm and fi rate mode: messages outstanding (and the server's receives)
  // rdm and fi rate mode: every send but the last of a run of them (up to
  // the window) posted with kSendMore / FI_MORE: they go together.
  bool more = false;
  // Called now and then (at most every 200 ms) with a line of progress;
  // may be empty.
  std::function<void(const std::string&)> progress;
  driver::MacAddress peer_mac = driver::kBroadcastMac;
  driver::Ipv4Address peer_ip;

  std::vector<uint64_t> Sizes() const { return sizes.empty() ? std::vector<uint64_t>{size} : sizes; }
  uint64_t MaxSize() const {
    uint64_t m = sizes.empty() ? size : 0;
    for (uint64_t s : sizes) m = s > m ? s : m;
    return m;
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
