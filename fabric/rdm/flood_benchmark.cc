// Many-to-one floods through a bottleneck with congestion control on and
// off (flood.h): link utilization, retransmissions per delivered packet and
// bottleneck drops, in virtual time (deterministic), and the wall time of
// each simulation. bazel run --config=opt //fabric/rdm:flood_benchmark
#include <cstdio>

#include "fabric/rdm/flood.h"

int main() {
  using bypass::rdm::testing::FloodOptions;
  using bypass::rdm::testing::FloodResult;
  using bypass::rdm::testing::RunFlood;
  std::printf("%7s %5s %5s | %-28s | %-28s | %-22s\n", "senders", "queue", "msgs",
              "utilization off / on", "retx per delivered off / on", "bottleneck drops off / on");
  struct Case {
    int senders;
    uint32_t queue;
    int messages;
  };
  for (const Case& c : {Case{2, 64, 128}, Case{8, 64, 64}, Case{8, 256, 64}, Case{16, 64, 32},
                        Case{32, 128, 16}}) {
    FloodOptions o;
    o.senders = c.senders;
    o.queue = c.queue;
    o.messages = c.messages;
    o.congestion_control = false;
    const FloodResult off = RunFlood(o);
    o.congestion_control = true;
    const FloodResult on = RunFlood(o);
    std::printf("%7d %5u %5d | %12.2f / %-13.2f | %12.3f / %-13.3f | %9llu / %-10llu%s\n",
                c.senders, c.queue, c.messages, off.link_utilization(o), on.link_utilization(o),
                off.retransmits_per_delivered(), on.retransmits_per_delivered(),
                static_cast<unsigned long long>(off.queue_dropped),
                static_cast<unsigned long long>(on.queue_dropped),
                off.exactly_once && on.exactly_once ? "" : "  NOT EXACTLY ONCE:");
    if (!off.exactly_once) std::printf("    off: %s\n", off.error.c_str());
    if (!on.exactly_once) std::printf("    on: %s\n", on.error.c_str());
  }
  std::printf("(4 KiB messages of 3 packets; link 2 Mpps; virtual time, 1 us per step)\n");
  return 0;
}
