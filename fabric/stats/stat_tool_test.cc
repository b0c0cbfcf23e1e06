// bypass-stat reads a process's counters from its stats socket during a
// lossy run, and after it exactly what the engines counted.
#include <stdlib.h>
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

using testing::RunStatTool;

TEST(StatToolTest, ReadsTheCountersOfALossyRun) {
  // A short directory: TEST_TMPDIR is too long for a unix socket's path.
  char dir[] = "/tmp/bypass-stat-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  setenv("BYPASS_STATS_DIR", dir, 1);
  // Registered before the server starts, so run after it stopped at exit
  // (and unlinked its socket).
  std::atexit([] { rmdir(getenv("BYPASS_STATS_DIR")); });
  setenv("BYPASS_STATS", "1", 1);
  const absl::Status enabled = Enable();
  ASSERT_TRUE(enabled.ok()) << enabled;
  LossyPair pair;
  const uint32_t id0 = pair.net().ep(0).stats_id();
  const uint32_t id1 = pair.net().ep(1).stats_id();
  const std::string pid = std::to_string(getpid());
  std::vector<std::string> during;
  pair.Run(200, [&] {
    for (int i = 0; i < 3; ++i) during.push_back(RunStatTool(absl::StrCat(pid, " /bypass/engine,", id0)));
  });
  pair.Publish();
  for (const std::string& j : during) {
    EXPECT_EQ(testing::JsonNumbers(j)["fresh"], 1u) << "the owner progressed meanwhile: " << j;
    testing::ExpectAtMost(j, pair.net().ep(0));
  }
  // After the run: exactly the engines' counters.
  const std::string e0 = RunStatTool(absl::StrCat(pid, " /bypass/engine,", id0));
  testing::ExpectEngineMatches(e0, pair.net().ep(0), pair.net().port(0));
  const rdm::Counters& c0 = pair.net().ep(0).counters();
  EXPECT_GT(c0.retransmits_fast + c0.retransmits_timeout, 0u) << "5% drop makes retransmissions";
  testing::ExpectEngineMatches(RunStatTool(absl::StrCat(pid, " /bypass/engine,", id1)),
                               pair.net().ep(1), pair.net().port(1));
  testing::ExpectPeersMatch(RunStatTool(absl::StrCat(pid, " /bypass/peers,", id1)), pair.net().ep(1),
                            pair.net().Peer(1, 0));
  // Totals: the sum over both engines (this process has no others).
  const auto total = testing::JsonNumbers(RunStatTool(pid));
  EXPECT_EQ(total.at("tx_packets"),
            c0.tx_packets + pair.net().ep(1).counters().tx_packets);
  EXPECT_EQ(total.at("peers"), 2u);
  // Every process serving: the same, under a heading per socket.
  EXPECT_NE(RunStatTool("").find(absl::StrCat(pid, ".sock")), std::string::npos);
  // An engine that is not there answers null.
  EXPECT_EQ(RunStatTool(absl::StrCat(pid, " /bypass/engine,999")), "{\"/bypass/engine\": null}\n");
}

}  // namespace
}  // namespace bypass::stats
