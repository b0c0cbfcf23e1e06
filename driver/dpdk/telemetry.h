// DPDK telemetry (lib/telemetry, DPDK 22.11) for the layers above, which
// never include rte_*.h: commands answered with a TelemetryDict, served on
// the EAL's telemetry socket (/var/run/dpdk/<prefix>/dpdk_telemetry.v2,
// read with dpdk-telemetry.py -f <prefix>). Registering works before or
// after rte_eal_init, and costs nothing where the EAL runs without
// telemetry (--no-telemetry) or is never started.
#ifndef BYPASS_DRIVER_DPDK_TELEMETRY_H_
#define BYPASS_DRIVER_DPDK_TELEMETRY_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"

namespace bypass::driver::dpdk {

// An answer as rte_tel_data holds one: a dict of unsigned integers,
// strings, and arrays of either (DPDK 22.11 nests only arrays, one level).
// Names are letters, digits, '_' and '/'; at most 256 entries (RTE_TEL_MAX_
// DICT_ENTRIES), 512 per array, strings under 128 bytes.
class TelemetryDict {
 public:
  using Value = std::variant<uint64_t, std::string, std::vector<uint64_t>, std::vector<std::string>>;

  // Out of line: inlined, GCC 12 at -O2 warns (maybe-uninitialized) about
  // the variant's move inside emplace_back, which fails `-c opt` builds.
  void Add(std::string name, Value v);
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }
  // The JSON DPDK's telemetry writes for it, e.g. {"a": 1, "b": "x", "c": [1, 2]}.
  std::string ToJson() const;

 private:
  std::vector<std::pair<std::string, Value>> entries_;
};

// Answers a command's parameters (the text after its first comma, maybe
// empty); a non-OK status answers null, as DPDK does for a failed command.
using TelemetryHandler = std::function<absl::Status(std::string_view params, TelemetryDict* out)>;

// Registers cmd ("/bypass/engines": '/', letters, digits, '_') with help
// text. Thread-safe; a second registration of cmd replaces its handler.
// InvalidArgument for a name DPDK refuses, ResourceExhausted when its
// command table is full.
absl::Status RegisterTelemetryCommand(const std::string& cmd, const std::string& help,
                                      TelemetryHandler handler);

// Answers cmd as the telemetry socket would, for a process that serves it
// elsewhere (fabric/stats' socket): {"<cmd>": <answer or null>}; NotFound
// for a command not registered here.
absl::Status AnswerTelemetryCommand(std::string_view cmd, std::string_view params,
                                    std::string* json);
// The commands registered here, in order.
std::vector<std::string> TelemetryCommands();

}  // namespace bypass::driver::dpdk

#endif  // BYPASS_DRIVER_DPDK_TELEMETRY_H_
