// The phases every layer's client runs, one size at a time: latency (a
// warm-up, then round trips with one ping in flight) and rate (a warm-up
// and a measured burst of one-way kData messages, each closed by a
// kReportAsk whose kReport says how many arrived between the server's
// first and last).
#ifndef BYPASS_TOOLS_PINGPONG_PHASES_H_
#define BYPASS_TOOLS_PINGPONG_PHASES_H_

#include <cstdint>
#include <ctime>
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

// CLOCK_MONOTONIC in ns (through the vDSO), as driver::SteadyClock reads
// it: the one clock of the ping tools, on every layer.
inline uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

// The server's answer to a kReportAsk.
struct Report {
  uint64_t count = 0;       // kData messages since the previous report
  uint64_t elapsed_ns = 0;  // first to last of them
};

// The client's side of the ping protocol as the phases drive it, one size
// at a time; PingClient<Transport> (machine.h) is the one implementation,
// over every layer. One virtual call per round trip or per chunk of data.
class PhaseDriver {
 public:
  virtual ~PhaseDriver() = default;
  // Why `size` cannot run on this layer (empty: it can).
  virtual std::string Cannot(uint64_t size) const = 0;
  // One round trip: sends a kPing of `size` with `seq`, waits for the
  // reply, verifies it byte for byte; returns the round trip in ns, from
  // handing the written ping to the layer to seeing the reply's header.
  virtual absl::StatusOr<uint64_t> Ping(uint64_t size, uint64_t seq) = 0;
  // Runs once before the first rate phase: servers of reliable layers keep
  // two receives posted for round trips (warm buffers, as a ping-pong
  // application reuses) and post the whole window only when asked.
  virtual absl::Status StartRate() = 0;
  // Sends n kData messages of `size` (waiting for room in the window).
  virtual absl::Status SendData(uint64_t size, uint64_t n) = 0;
  // Waits until every data message left, sends a kReportAsk, returns the kReport.
  virtual absl::StatusOr<Report> AskReport() = 0;
  // Messages of `size` outstanding in rate mode (raw: frames per burst).
  virtual uint32_t Window(uint64_t size) const = 0;
  // True when every message must arrive (reliable layers): a shortfall is an error.
  virtual bool reliable() const = 0;
};

// Runs opts.Sizes() in turn and returns one result per size. A size the
// layer cannot carry is skipped with the reason when it is one of a list
// (--sizes), and is an error when it was asked for alone (--size).
absl::StatusOr<std::vector<LatencyResult>> RunLatencyPhases(const PingOptions& opts,
                                                            PhaseDriver& client);

// The window for messages of `size`: `window`, and fewer when
// max_inflight_bytes is non-zero and window of them would be more bytes
// than that (at least one).
uint32_t WindowFor(uint32_t window, uint64_t max_inflight_bytes, uint64_t size);

// Runs opts.Sizes() in turn and returns one result per size; a size the
// layer cannot carry is skipped or an error as for RunLatencyPhases.
absl::StatusOr<std::vector<RateResult>> RunRatePhases(const PingOptions& opts,
                                                      PhaseDriver& client);

// Runs the phases opts asks for (latency first, then rate) into a result
// that carries layer, provider and device already.
absl::Status RunPhases(const PingOptions& opts, PhaseDriver& client, RunResult* result);

}  // namespace bypass::tools

#endif  // BYPASS_TOOLS_PINGPONG_PHASES_H_
