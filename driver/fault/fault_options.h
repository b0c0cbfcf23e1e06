// What the fault-injecting decorator does, and the spec strings that say so.
#ifndef BYPASS_DRIVER_FAULT_FAULT_OPTIONS_H_
#define BYPASS_DRIVER_FAULT_FAULT_OPTIONS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace bypass::driver::fault {

// Fault rates (probabilities per received packet) and their parameters.
// First, if rate_pps is set, the bottleneck link; then, per packet that
// leaves it, in this order: drop; else duplicate (the copy is taken before
// corruption and delivered right after the original's place); corrupt; then
// delay, or else reorder (a packet is at most one of the two).
struct FaultOptions {
  double drop = 0;
  double dup = 0;
  double reorder = 0;
  double delay = 0;
  double corrupt = 0;
  // A reordered packet is released after 1..reorder_depth later packets; at
  // most reorder_depth are held at once per queue (when full, the oldest goes).
  uint32_t reorder_depth = 8;
  // A delayed packet is released by the first RxBurst at or after
  // (its arrival + delay_ns) on the injected clock.
  uint64_t delay_ns = 50'000;
  // Delayed packets held at once per queue; when full, the oldest goes early.
  uint32_t delay_slots = 1024;
  // A corrupted packet has 1..corrupt_bytes distinct bytes past the
  // Ethernet header XORed with a non-zero value.
  uint32_t corrupt_bytes = 4;
  uint64_t seed = 1;
  // A bottleneck link in front of the receiver (a switch port or a NIC's
  // queue that many senders share): every packet received waits in a FIFO
  // of `queue` packets and leaves it at rate_pps per second of the injected
  // clock (packet k after the link went busy at t0 leaves at the first
  // RxBurst at or after t0 + k / rate_pps; an idle link saves no credit).
  // A packet arriving to a full FIFO is dropped (drop-tail). 0: no link.
  uint64_t rate_pps = 0;
  uint32_t queue = 64;

  // "drop=0.05,dup=0,...,seed=7": every key, parseable by ParseFaultSpec.
  std::string ToString() const;
};

// What a fault queue did, plain counters of the queue's thread.
struct FaultCounters {
  uint64_t seen = 0;        // packets from the inner RxBurst (past the bottleneck, if any)
  uint64_t dropped = 0;
  uint64_t duplicated = 0;
  uint64_t reordered = 0;
  uint64_t delayed = 0;
  uint64_t corrupted = 0;
  uint64_t evicted = 0;        // held packets released early: holding area full
  uint64_t dup_no_buffer = 0;  // duplicates skipped: the pool was empty
  uint64_t queue_dropped = 0;  // arrived to the bottleneck's full FIFO (rate_pps)
  uint64_t queue_max = 0;      // the deepest the bottleneck's FIFO was (summed: the deepest queue's)

  FaultCounters& operator+=(const FaultCounters& o);
  friend bool operator==(const FaultCounters&, const FaultCounters&) = default;
};

// One-line InvalidArgument naming the first bad field.
absl::Status ValidateFaultOptions(const FaultOptions& opts);

// Parses "drop=0.05,dup=0.02,reorder=0.1,reorder_depth=8,delay=0.01,
// delay_ns=50000,corrupt=0.001,seed=7" (also delay_slots=, corrupt_bytes=,
// and the bottleneck link: rate_pps=, queue=).
// Keys may come in any order, each once; missing keys keep their defaults;
// "" means no faults. Errors are one line saying what is accepted.
absl::StatusOr<FaultOptions> ParseFaultSpec(std::string_view spec);

}  // namespace bypass::driver::fault

#endif  // BYPASS_DRIVER_FAULT_FAULT_OPTIONS_H_
