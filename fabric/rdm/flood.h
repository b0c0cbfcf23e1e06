// A many-to-one flood through a bottleneck link, shared by flood_test and
// flood_benchmark: N senders on one loopback segment each send M messages
// to one receiver whose device receives through the fault device's
// bottleneck (rate_pps, a drop-tail queue), on a manual clock, so a run is
// deterministic and its "time" is virtual.
#ifndef BYPASS_FABRIC_RDM_FLOOD_H_
#define BYPASS_FABRIC_RDM_FLOOD_H_

#include <cstdint>
#include <string>

namespace bypass::rdm::testing {

struct FloodOptions {
  int senders = 8;
  int messages = 64;           // per sender
  uint32_t message_bytes = 4096;
  uint64_t rate_pps = 2'000'000;  // the bottleneck
  uint32_t queue = 64;            // its drop-tail queue
  uint64_t tick_ns = 1'000;       // virtual time per step
  bool congestion_control = true;
  double drop = 0;  // random loss on every node's receive too (not congestion)
  uint64_t seed = 1;
  uint64_t max_steps = 2'000'000;
};

struct FloodResult {
  bool finished = false;  // every send and receive completed within max_steps
  // Every message arrived once, intact, in each sender's order, and no
  // operation failed; else what went wrong first.
  bool exactly_once = false;
  std::string error;
  uint64_t steps = 0;
  uint64_t delivered_packets = 0;  // DATA consumed in order by the receiver
  uint64_t data_packets_sent = 0;  // by the senders, first sends and resends
  uint64_t retransmits = 0;        // fast and by the timer, all senders
  uint64_t rto_expirations = 0;
  uint64_t cwnd_reductions = 0;
  uint64_t queue_dropped = 0;  // at the bottleneck
  uint64_t queue_max = 0;
  double wall_seconds = 0;  // of the simulation

  double virtual_seconds(uint64_t tick_ns) const { return steps * tick_ns / 1e9; }
  // Delivered packets per second of virtual time over the link's rate.
  double link_utilization(const FloodOptions& o) const {
    return steps == 0 ? 0 : delivered_packets / virtual_seconds(o.tick_ns) / o.rate_pps;
  }
  double retransmits_per_delivered() const {
    return delivered_packets == 0 ? 0 : static_cast<double>(retransmits) / delivered_packets;
  }
};

FloodResult RunFlood(const FloodOptions& o);

}  // namespace bypass::rdm::testing

#endif  // BYPASS_FABRIC_RDM_FLOOD_H_
