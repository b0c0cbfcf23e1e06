// The engine's counters for operators (README.md here): every endpoint of
// the process, its port and each of its peers, answered as DPDK telemetry
// commands under /bypass/ on the EAL's telemetry socket (dpdk-telemetry.py
// -f <prefix>) and, for processes without an EAL, on a socket of the
// process's own that bypass-stat reads. Both speak DPDK's telemetry v2
// protocol (SOCK_SEQPACKET; a JSON greeting, then one JSON answer per
// command). Readers never touch an engine: its owner thread publishes a
// snapshot at its next Progress when asked (rdm.h, SnapshotEndpoints).
#ifndef BYPASS_FABRIC_STATS_STATS_H_
#define BYPASS_FABRIC_STATS_STATS_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "fabric/rdm/rdm.h"

namespace bypass::stats {

// How long a command waits for the owners of the endpoints it reads to
// progress (an owner that does not answers with its last snapshot,
// "fresh": 0).
inline constexpr uint64_t kWaitNs = 100'000'000;

// Registers the /bypass/ commands with DPDK's telemetry (answered wherever
// an EAL runs telemetry: an embedding application's, or bypass's own with
// BYPASS_STATS set) and, when BYPASS_STATS is set (not "0"), starts serving
// them on SocketPath(getpid()). Idempotent and thread-safe; errors are
// returned (and never stop the caller's work: callers log them).
absl::Status Enable();

// The directory of the processes' sockets: $BYPASS_STATS_DIR, else
// /run/bypass/stats.u<uid> (0700, made when missing).
std::string SocketDir();
// <SocketDir>/<pid>.sock
std::string SocketPath(pid_t pid);

// A socket serving the commands (what Enable starts), closed and unlinked
// when destroyed. One client at a time, each for as long as it sends
// commands (a client silent for 5 s is dropped).
class Server {
 public:
  static absl::StatusOr<std::unique_ptr<Server>> Start(const std::string& path);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  const std::string& path() const;

 private:
  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Client side: connects to a telemetry v2 socket (ours or DPDK's), sends
// cmd and returns the JSON answer ({"<cmd>": ...}).
absl::StatusOr<std::string> Query(const std::string& path, const std::string& cmd);

// The fields of rdm::Counters by the names the commands use (every one,
// in declaration order).
struct CounterField {
  const char* name;
  uint64_t rdm::Counters::*member;
};
absl::Span<const CounterField> CounterFields();
// The same for rdm::DatagramCounters (a datagram endpoint's answer) and
// driver::QueueStats (a device's).
struct DatagramField {
  const char* name;
  uint64_t rdm::DatagramCounters::*member;
};
absl::Span<const DatagramField> DatagramFields();
struct QueueField {
  const char* name;
  uint64_t driver::QueueStats::*member;
};
absl::Span<const QueueField> QueueFields();

// The answer to cmd ("/bypass/engine,1"): the JSON the sockets send.
std::string Answer(const std::string& cmd);

}  // namespace bypass::stats

#endif  // BYPASS_FABRIC_STATS_STATS_H_
