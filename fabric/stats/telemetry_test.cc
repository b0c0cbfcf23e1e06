// The /bypass/ commands on DPDK's telemetry socket of an application's EAL
// (/var/run/dpdk/<prefix>/dpdk_telemetry.v2, the JSON protocol Debian's
// dpdk-telemetry.py speaks over SOCK_SEQPACKET), read during a lossy run
// and after it, against the engines' own counters.
#include <rte_eal.h>
#include <rte_errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fabric/stats/stats.h"
#include "fabric/stats/stats_testing.h"
#include "gtest/gtest.h"

namespace bypass::stats {
namespace {

using testing::LossyPair;

std::string RuntimeDir(const std::string& prefix) {
  const std::string base =
      getuid() == 0 ? "/var/run/dpdk/" : absl::StrCat("/run/user/", getuid(), "/dpdk/");
  return base + prefix;
}

// What Debian's dpdk-telemetry.py prints for cmd (non-interactive: one JSON
// line per command); empty when the script is not installed.
std::string RunScript(const std::string& prefix, const std::string& cmd) {
  if (access("/usr/bin/dpdk-telemetry.py", X_OK) != 0) return "";
  return testing::RunCommand(
      absl::StrCat("echo '", cmd, "' | /usr/bin/dpdk-telemetry.py -f ", prefix));
}

TEST(TelemetryTest, DpdkTelemetryReadsTheCountersOfALossyRun) {
  // Registered before the EAL starts, as fabric/fi does (its domain opens
  // the device, which starts the EAL, after).
  ASSERT_TRUE(Enable().ok());
  const std::string prefix = absl::StrCat("bypass-tel", getpid());
  // DPDK removes its socket at exit; its runtime directory stays: removed
  // after that (handlers registered earlier run later).
  static std::string runtime_dir;
  runtime_dir = RuntimeDir(prefix);
  std::atexit([] { rmdir(runtime_dir.c_str()); });
  std::vector<std::string> args = {"app", "--no-pci", "--no-huge", "-m", "128", "--no-shconf",
                                   "--log-level=*:warning", "--file-prefix=" + prefix};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  ASSERT_GE(rte_eal_init(static_cast<int>(argv.size()), argv.data()), 0) << rte_strerror(rte_errno);
  const std::string socket = RuntimeDir(prefix) + "/dpdk_telemetry.v2";

  LossyPair pair;
  const uint32_t id0 = pair.net().ep(0).stats_id();
  const uint32_t id1 = pair.net().ep(1).stats_id();
  std::vector<std::string> during;
  pair.Run(200, [&] {
    for (int i = 0; i < 3; ++i) {
      absl::StatusOr<std::string> j = Query(socket, absl::StrCat("/bypass/engine,", id0));
      ASSERT_TRUE(j.ok()) << j.status();
      during.push_back(*j);
    }
  });
  pair.Publish();
  for (const std::string& j : during) {
    EXPECT_EQ(testing::JsonNumbers(j)["fresh"], 1u) << j;
    testing::ExpectAtMost(j, pair.net().ep(0));
  }
  absl::StatusOr<std::string> e0 = Query(socket, absl::StrCat("/bypass/engine,", id0));
  ASSERT_TRUE(e0.ok()) << e0.status();
  testing::ExpectEngineMatches(*e0, pair.net().ep(0), pair.net().port(0));
  const rdm::Counters& c0 = pair.net().ep(0).counters();
  EXPECT_GT(c0.retransmits_fast + c0.retransmits_timeout, 0u) << "5% drop makes retransmissions";
  absl::StatusOr<std::string> p1 = Query(socket, absl::StrCat("/bypass/peers,", id1));
  ASSERT_TRUE(p1.ok()) << p1.status();
  testing::ExpectPeersMatch(*p1, pair.net().ep(1), pair.net().Peer(1, 0));
  // DPDK's own commands list ours.
  absl::StatusOr<std::string> list = Query(socket, "/");
  ASSERT_TRUE(list.ok());
  EXPECT_NE(list->find("\"/bypass/peers\""), std::string::npos) << *list;
  // The script prints the same JSON.
  const std::string script = RunScript(prefix, absl::StrCat("/bypass/engine,", id1));
  if (!script.empty()) {
    testing::ExpectEngineMatches(script, pair.net().ep(1), pair.net().port(1));
  } else {
    std::printf("dpdk-telemetry.py is not installed: the script's check is skipped\n");
  }
  rte_eal_cleanup();
}

}  // namespace
}  // namespace bypass::stats
