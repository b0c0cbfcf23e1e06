// The rate-mode phases every layer runs: per size, a warm-up and a measured
// burst of one-way kData messages, each closed by a kReportAsk whose
// kReport says how many arrived between the server's first and last.
#ifndef BYPASS_TOOLS_PINGPONG_RATE_H_
#define BYPASS_TOOLS_PINGPONG_RATE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/latency.h"
#include "tools/pingpong/raw.h"

namespace bypass::tools {

// The server's answer to a kReportAsk.
struct Report {
  uint64_t count = 0;       // kData messages since the previous report
  uint64_t elapsed_ns = 0;  // first to last of them
};

// What a layer supplies.
struct RateOps {
  // Why `size` cannot run on this layer (empty: it can).
  std::function<std::string(uint64_t size)> cannot;
  // Sends n kData messages of `size` (waiting for room in the window).
  std::function<absl::Status(uint64_t size, uint64_t n)> send;
  // Waits until every data message left, sends a kReportAsk, returns the kReport.
  std::function<absl::StatusOr<Report>()> report;
  uint32_t window = 0;  // messages outstanding (raw: frames per burst)
  // Non-zero: fewer messages outstanding when window of them would be
  // more bytes than this (at least one).
  uint64_t max_inflight_bytes = 0;
  // True when every message must arrive (reliable layers): a shortfall is an error.
  bool reliable = false;
};

// The window for messages of `size`: ops.window, capped by max_inflight_bytes.
uint32_t WindowFor(const RateOps& ops, uint64_t size);

// Runs opts.RateSizes() in turn and returns one result per size.
absl::StatusOr<std::vector<RateResult>> RunRatePhases(const PingOptions& opts, const RateOps& ops);

// Fills result's rate fields (msgs_per_sec of a single size, extra lines)
// from rates.
void SetRateResult(std::vector<RateResult> rates, RunResult* result);

// Receive buffers a server posts: the window, at most kRecvBudgetBytes of
// them, at least 2.
inline constexpr uint64_t kRecvBudgetBytes = 256ull << 20;
uint32_t ServerSlots(uint32_t window, uint64_t bytes);

}  // namespace bypass::tools

#endif  // BYPASS_TOOLS_PINGPONG_RATE_H_
