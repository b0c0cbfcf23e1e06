#include "fabric/stats/stats_testing.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "fabric/stats/stats.h"
#include "gtest/gtest.h"

namespace bypass::stats::testing {
namespace {

rdm::testing::NetOptions Lossy() {
  rdm::testing::NetOptions o;
  o.faults.drop = 0.05;
  o.faults.seed = 23;
  return o;
}

}  // namespace

LossyPair::LossyPair() : net_(Lossy()) {}

void LossyPair::Run(int messages, const std::function<void()>& reader,
                    const std::function<void()>& each_step) {
  const rdm::PeerId to[2] = {net_.Peer(0, 1), net_.Peer(1, 0)};
  std::vector<std::vector<uint8_t>> out(2 * messages), in(2 * messages);
  for (int i = 0; i < 2 * messages; ++i) {
    out[i].assign(1 + (i * 7919) % 20000, static_cast<uint8_t>(i));
    in[i].assign(20000, 0);
  }
  int next_send[2] = {0, 0};
  int posted[2] = {0, 0};
  size_t done[2] = {0, 0};  // sends and receives completed at each endpoint
  const auto post = [&](int e, int upto) {
    for (; posted[e] < upto; ++posted[e]) {
      std::vector<uint8_t>& buf = in[e * messages + posted[e]];
      ASSERT_EQ(net_.ep(e).PostRecv({.buf = buf.data(), .len = buf.size()}), rdm::Result::kOk);
    }
  };
  post(0, messages / 2);
  post(1, messages / 2);
  std::atomic<bool> read{false};
  std::thread t([&] {
    reader();
    read = true;
  });
  for (uint64_t step = 0; step < 5'000'000 && (!read || done[0] + done[1] < 4u * messages);
       ++step) {
    for (int e = 0; e < 2; ++e) {
      while (next_send[e] < messages) {
        const std::vector<uint8_t>& m = out[e * messages + next_send[e]];
        if (net_.ep(e).Send({.dest = to[e], .buf = m.data(), .len = m.size()}) != rdm::Result::kOk) {
          break;
        }
        ++next_send[e];
      }
      if (step == 2000) post(e, messages);
      rdm::Completion c[64];
      while (size_t n = net_.ep(e).PollCompletions(c)) done[e] += n;
      rdm::ErrorCompletion err[4];
      ASSERT_EQ(net_.ep(e).PollErrors(err), 0u) << err[0].message;
    }
    if (each_step) each_step();
    net_.Step();
  }
  t.join();
  EXPECT_EQ(done[0] + done[1], 4u * messages);
}

void LossyPair::Publish() {
  net_.ep(0).PublishStats();
  net_.ep(1).PublishStats();
}

std::string RunCommand(const std::string& cmd) {
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) {
    ADD_FAILURE() << "popen " << cmd;
    return "";
  }
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), f)) out.append(buf, n);
  EXPECT_EQ(pclose(f), 0) << cmd;
  return out;
}

std::string RunStatTool(const std::string& args) {
  const char* srcdir = getenv("TEST_SRCDIR");
  return RunCommand(std::string(srcdir ? srcdir : ".") + "/bypass/tools/stat/bypass-stat " + args);
}

// (A scanner, not std::regex: gcc 12's regex trips -Wmaybe-uninitialized
// at -O1, the sanitizer configs' level.)
std::map<std::string, uint64_t> JsonNumbers(const std::string& json) {
  std::map<std::string, uint64_t> out;
  for (size_t at = json.find('"'); at != std::string::npos; at = json.find('"', at + 1)) {
    const size_t close = json.find('"', at + 1);
    if (close == std::string::npos) break;
    size_t v = close + 1;
    if (v < json.size() && json[v] == ':') {
      ++v;
      while (v < json.size() && json[v] == ' ') ++v;
      size_t digits = v;
      while (digits < json.size() && json[digits] >= '0' && json[digits] <= '9') ++digits;
      uint64_t n = 0;
      if (digits > v && absl::SimpleAtoi(absl::string_view(json).substr(v, digits - v), &n)) {
        out[json.substr(at + 1, close - at - 1)] = n;
      }
    }
    at = close;
  }
  return out;
}

std::vector<uint64_t> JsonArray(const std::string& json, const std::string& name) {
  std::vector<uint64_t> out;
  size_t at = json.find("\"" + name + "\":");
  if (at == std::string::npos) return out;
  const size_t open = json.find('[', at);
  const size_t close = json.find(']', open);
  if (open == std::string::npos || close == std::string::npos) return out;
  for (absl::string_view part :
       absl::StrSplit(absl::string_view(json).substr(open + 1, close - open - 1), ',',
                      absl::SkipEmpty())) {
    uint64_t v = 0;
    if (absl::SimpleAtoi(part, &v)) out.push_back(v);  // SimpleAtoi skips the spaces
  }
  return out;
}

void ExpectEngineMatches(const std::string& json, const rdm::Endpoint& ep, const rdm::Port& port) {
  const std::map<std::string, uint64_t> got = JsonNumbers(json);
  const rdm::Counters& c = ep.counters();
  for (const CounterField& f : CounterFields()) {
    ASSERT_TRUE(got.count(f.name)) << f.name << " missing in " << json;
    EXPECT_EQ(got.at(f.name), c.*f.member) << f.name;
  }
  EXPECT_EQ(got.at("retransmits"), c.retransmits_fast + c.retransmits_timeout);
  EXPECT_EQ(got.at("id"), ep.stats_id());
  EXPECT_EQ(got.at("port_rx_packets"), port.counters().rx_packets);
  EXPECT_EQ(got.at("port_inbox_full"), port.counters().inbox_full);
}

void ExpectPeersMatch(const std::string& json, const rdm::Endpoint& ep, rdm::PeerId peer) {
  const rdm::PeerCounters pc = *ep.peer_counters(peer);
  const rdm::PeerStats ps = *ep.peer_stats(peer);
  const std::pair<const char*, uint64_t> want[] = {
      {"id", peer.value},
      {"tx_packets", pc.tx_packets},
      {"rx_packets", pc.rx_packets},
      {"retransmits", pc.retransmits},
      {"duplicates", pc.duplicates},
      {"out_of_order", pc.out_of_order},
      {"rnr_sent", pc.rnr_sent},
      {"rnr_received", pc.rnr_received},
      {"credit_stalls", pc.credit_stalls},
      {"handshake_failures", pc.handshake_failures},
      {"srtt_ns", ps.srtt_ns},
      {"rto_ns", ps.rto_ns},
  };
  for (const auto& [name, value] : want) {
    EXPECT_EQ(JsonArray(json, name), std::vector<uint64_t>{value}) << name << " in " << json;
  }
}

void ExpectAtMost(const std::string& json, const rdm::Endpoint& ep) {
  const std::map<std::string, uint64_t> got = JsonNumbers(json);
  for (const CounterField& f : CounterFields()) {
    // Depths go down as well as up.
    if (std::string(f.name) == "unexpected_depth" || std::string(f.name) == "unexpected_bytes") {
      continue;
    }
    ASSERT_TRUE(got.count(f.name)) << f.name << " missing in " << json;
    EXPECT_LE(got.at(f.name), ep.counters().*f.member) << f.name;
  }
}

namespace {

// got[name] against want: equal, or at most want.
void ExpectField(const std::map<std::string, uint64_t>& got, const std::string& name,
                 uint64_t want, bool exact, const std::string& json) {
  ASSERT_TRUE(got.count(name)) << name << " missing in " << json;
  if (exact) {
    EXPECT_EQ(got.at(name), want) << name;
  } else {
    EXPECT_LE(got.at(name), want) << name;
  }
}

}  // namespace

void ExpectDatagramMatches(const std::string& json, const rdm::DatagramEndpoint& ep, bool exact) {
  const std::map<std::string, uint64_t> got = JsonNumbers(json);
  EXPECT_NE(json.find("\"type\": \"dgram\""), std::string::npos) << json;
  EXPECT_EQ(got.at("id"), ep.stats_id());
  for (const DatagramField& f : DatagramFields()) {
    ExpectField(got, f.name, ep.counters().*f.member, exact, json);
  }
}

void ExpectDeviceMatches(const std::string& json, const rdm::Port& port, bool exact) {
  const std::map<std::string, uint64_t> got = JsonNumbers(json);
  rdm::QueueSnapshot now;
  port.SnapshotQueue(&now);
  EXPECT_EQ(got.at("id"), port.id());
  for (const QueueField& f : QueueFields()) ExpectField(got, f.name, now.stats.*f.member, exact, json);
  ExpectField(got, "port_rx_packets", port.counters().rx_packets, exact, json);
  ASSERT_FALSE(now.counters.empty()) << "the backend names counters of its own";
  for (const driver::NamedCounter& c : now.counters) ExpectField(got, c.name, c.value, exact, json);
}

}  // namespace bypass::stats::testing
