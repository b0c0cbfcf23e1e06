// What the stats tests share: a lossy exchange between two endpoints and
// the checks of an answer against the engines' own counters.
#ifndef BYPASS_FABRIC_STATS_STATS_TESTING_H_
#define BYPASS_FABRIC_STATS_STATS_TESTING_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "fabric/rdm/rdm.h"
#include "fabric/rdm/test_util.h"

namespace bypass::stats::testing {

// Two endpoints on loopback ports dropping 5% of what they receive.
class LossyPair {
 public:
  LossyPair();
  rdm::testing::Net& net() { return net_; }
  // Sends `messages` messages (1 B to 20 KB) each way, half of the
  // receives posted late, stepping until every one completed, while
  // `reader` runs on another thread (the steps go on until it returns).
  // Checks with gtest that every message arrived. `each_step`, if set,
  // runs on this thread once per step (more traffic on the same ports).
  void Run(int messages, const std::function<void()>& reader,
           const std::function<void()>& each_step = nullptr);
  // Publishes both endpoints' state; nothing progresses them afterwards.
  void Publish();

 private:
  rdm::testing::Net net_;
};

// Runs a shell command; its standard output. Checks with gtest that it
// exited 0.
std::string RunCommand(const std::string& cmd);
// Runs the test's bypass-stat (a data dependency, under TEST_SRCDIR) with
// args; its standard output.
std::string RunStatTool(const std::string& args);

// The numbers of a JSON answer: "name": 123 (top level or nested).
std::map<std::string, uint64_t> JsonNumbers(const std::string& json);
// The array "name": [1, 2, ...] of a JSON answer (empty if missing).
std::vector<uint64_t> JsonArray(const std::string& json, const std::string& name);

// Checks with gtest that a /bypass/engine answer for ep matches its
// counters (every field) and its port's.
void ExpectEngineMatches(const std::string& json, const rdm::Endpoint& ep, const rdm::Port& port);
// The same for a /bypass/peers answer: its single peer's counters.
void ExpectPeersMatch(const std::string& json, const rdm::Endpoint& ep, rdm::PeerId peer);
// A /bypass/engine answer read during the run: every counter at most the
// final one (they only grow).
void ExpectAtMost(const std::string& json, const rdm::Endpoint& ep);

// A /bypass/engine answer for a datagram endpoint: its counters, equal
// (exact) or at most (read during the run) ep's now.
void ExpectDatagramMatches(const std::string& json, const rdm::DatagramEndpoint& ep, bool exact);
// A /bypass/device answer for port: its queue's QueueStats and
// AppendCounters, read directly now, equal (exact) or at least what the
// answer says (read during the run).
void ExpectDeviceMatches(const std::string& json, const rdm::Port& port, bool exact);

}  // namespace bypass::stats::testing

#endif  // BYPASS_FABRIC_STATS_STATS_TESTING_H_
