// The phases every layer's client runs, one size at a time: latency (a
// warm-up, then round trips with one ping in flight) and rate (a warm-up
// and a measured burst of one-way kData messages, each closed by a
// kReportAsk whose kReport says how many arrived between the server's
// first and last).
#ifndef BYPASS_TOOLS_PINGPONG_PHASES_H_
#define BYPASS_TOOLS_PINGPONG_PHASES_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/latency.h"
#include "tools/pingpong/raw.h"

namespace bypass::tools {

// The turns of a busy-poll loop: Due() is true on every 256th, when the
// loop reads the clock for its timeout. A clock read costs more than an idle
// poll (tens of ns through a VM's kvm-clock), and a loop that reads it every
// turn notices what arrives that much later.
class SpinCheck {
 public:
  bool Due() { return (++turns_ & 255u) == 0; }

 private:
  uint32_t turns_ = 0;
};

// What a layer supplies for the latency phases.
struct LatencyOps {
  // Why `size` cannot run on this layer (empty: it can).
  std::function<std::string(uint64_t size)> cannot;
  // One round trip: sends a kPing of `size` with `seq`, waits for the
  // reply, verifies it byte for byte; returns the round trip in ns, from
  // handing the written ping to the layer to seeing the reply's header.
  std::function<absl::StatusOr<uint64_t>(uint64_t size, uint64_t seq)> ping;
};

// Runs opts.Sizes() in turn and returns one result per size. A size the
// layer cannot carry is skipped with the reason when it is one of a list
// (--sizes), and is an error when it was asked for alone (--size).
absl::StatusOr<std::vector<LatencyResult>> RunLatencyPhases(const PingOptions& opts,
                                                            const LatencyOps& ops);

// The server's answer to a kReportAsk.
struct Report {
  uint64_t count = 0;       // kData messages since the previous report
  uint64_t elapsed_ns = 0;  // first to last of them
};

// What a layer supplies for the rate phases.
struct RateOps {
  // Why `size` cannot run on this layer (empty: it can).
  std::function<std::string(uint64_t size)> cannot;
  // If set, run once before the first rate phase: servers keep two
  // receives posted for round trips (warm buffers, as a ping-pong
  // application reuses) and post the whole window only when asked.
  std::function<absl::Status()> begin;
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

// The kRateStart a reliable layer's RateOps::begin sends as a round trip:
// its sequence number, and the check that `reply` (len bytes) echoes it.
inline constexpr uint64_t kRateStartSeq = 1ull << 61;
absl::Status CheckRateStartReply(const absl::StatusOr<uint64_t>& round_trip, const uint8_t* reply,
                                 size_t len);

// The window for messages of `size`: ops.window, capped by max_inflight_bytes.
uint32_t WindowFor(const RateOps& ops, uint64_t size);

// Runs opts.Sizes() in turn and returns one result per size; a size the
// layer cannot carry is skipped or an error as for RunLatencyPhases.
absl::StatusOr<std::vector<RateResult>> RunRatePhases(const PingOptions& opts, const RateOps& ops);

// Runs the phases opts asks for (latency first, then rate) into a result
// that carries layer, provider and device already.
absl::Status RunPhases(const PingOptions& opts, const LatencyOps& lat, const RateOps& rate,
                       RunResult* result);

// Receive buffers a server posts: the window, at most kRecvBudgetBytes of
// them, at least 2.
inline constexpr uint64_t kRecvBudgetBytes = 256ull << 20;
uint32_t ServerSlots(uint32_t window, uint64_t bytes);

}  // namespace bypass::tools

#endif  // BYPASS_TOOLS_PINGPONG_PHASES_H_
