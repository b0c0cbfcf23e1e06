// What a DPDK queue pair adds to its QueueStats for telemetry: its port's
// rte_eth_stats and xstats, read as DPDK's own /ethdev/stats and
// /ethdev/xstats telemetry commands read them (rte_eth_stats_get and
// rte_eth_xstats_get are the PMD's, safe beside the data path). They count
// the whole port, every queue (an embedding application's too, when
// bypass is attached to a range of its queues).
#include <rte_ethdev.h>

#include <cctype>
#include <string>
#include <vector>

#include "driver/dpdk/queue_pair.h"

namespace bypass::driver::dpdk {
namespace {

// DPDK's xstat names may hold characters telemetry names may not.
std::string TelemetryName(const char* name) {
  std::string out = "xstat_";
  for (const char* c = name; *c != '\0'; ++c) {
    out += std::isalnum(static_cast<unsigned char>(*c)) ? *c : '_';
  }
  return out;
}

}  // namespace

void DpdkQueuePair::AppendCounters(NamedCounters* out) const {
  rte_eth_stats s{};
  if (rte_eth_stats_get(port_, &s) == 0) {
    AppendNamed(out, "eth_", {{"ipackets", s.ipackets},
                              {"opackets", s.opackets},
                              {"ibytes", s.ibytes},
                              {"obytes", s.obytes},
                              {"imissed", s.imissed},
                              {"ierrors", s.ierrors},
                              {"oerrors", s.oerrors},
                              {"rx_nombuf", s.rx_nombuf}});
  }
  const int n = rte_eth_xstats_get_names(port_, nullptr, 0);
  if (n <= 0) return;
  std::vector<rte_eth_xstat_name> names(static_cast<size_t>(n));
  std::vector<rte_eth_xstat> values(static_cast<size_t>(n));
  if (rte_eth_xstats_get_names(port_, names.data(), n) != n ||
      rte_eth_xstats_get(port_, values.data(), n) != n) {
    return;  // the port changed between the calls: next snapshot
  }
  for (const rte_eth_xstat& x : values) {
    if (x.id < names.size()) out->push_back({TelemetryName(names[x.id].name), x.value});
  }
}

}  // namespace bypass::driver::dpdk
