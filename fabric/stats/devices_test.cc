// Datagram endpoints and device queues in the telemetry: bypass-stat reads
// a datagram endpoint's counters and its device queue's (QueueStats, the
// backend's own counters, the port's) during traffic, never above what the
// objects count, and after it exactly that; over a DPDK port (net_ring, in
// bypass's own EAL) the device answer carries the port's rte_eth_stats and
// xstats, equal to what DPDK says when read directly.
#include <rte_ethdev.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "driver/device.h"
#include "fabric/rdm/rdm.h"
#include "fabric/stats/stats.h"
#include "fabric/stats/stats_testing.h"
#include "gtest/gtest.h"

namespace bypass::stats {
namespace {

using testing::LossyPair;

using testing::RunStatTool;

// One datagram endpoint's side of a stream: sends one datagram per call
// while the peer takes them, and keeps receives posted.
struct DatagramFlow {
  std::unique_ptr<rdm::DatagramEndpoint> ep;
  rdm::PeerId to;
  std::vector<std::vector<uint8_t>> bufs = std::vector<std::vector<uint8_t>>(64);
  uint32_t posted = 0;
  uint64_t completions = 0;

  void Step(bool send) {
    const uint8_t msg[100] = {1};
    if (send) ep->Send({.dest = to, .buf = msg, .len = sizeof(msg), .flags = rdm::kSendInject});
    while (posted < bufs.size()) {
      std::vector<uint8_t>& b = bufs[posted % bufs.size()];
      b.resize(1500);
      if (ep->PostRecv({.buf = b.data(), .len = b.size()}) != rdm::Result::kOk) break;
      ++posted;
    }
    ep->Progress();
    rdm::Completion c[64];
    while (size_t n = ep->PollCompletions(c)) {
      completions += n;
      posted -= static_cast<uint32_t>(n);
    }
  }
};

TEST(DevicesTest, DatagramEndpointsAndDeviceQueuesDuringALossyRun) {
  char dir[] = "/tmp/bypass-dev-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  setenv("BYPASS_STATS_DIR", dir, 1);
  std::atexit([] { rmdir(getenv("BYPASS_STATS_DIR")); });
  setenv("BYPASS_STATS", "1", 1);
  ASSERT_TRUE(Enable().ok());
  LossyPair pair;
  // Datagram endpoints on the same ports (the same device queues) as the
  // reliable ones.
  DatagramFlow a, b;
  a.ep = *rdm::DatagramEndpoint::Create(pair.net().port(0), {.udp_port = 7100});
  b.ep = *rdm::DatagramEndpoint::Create(pair.net().port(1), {.udp_port = 7101});
  a.to = *a.ep->InsertPeer(b.ep->address());
  b.to = *b.ep->InsertPeer(a.ep->address());
  const std::string pid = std::to_string(getpid());
  const uint32_t port0 = pair.net().port(0).id();
  std::vector<std::string> dgram_during, device_during;
  uint64_t step = 0;
  pair.Run(
      200,
      [&] {
        for (int i = 0; i < 3; ++i) {
          dgram_during.push_back(RunStatTool(absl::StrCat(pid, " /bypass/engine,", a.ep->stats_id())));
          device_during.push_back(RunStatTool(absl::StrCat(pid, " /bypass/device,", port0)));
        }
      },
      [&] {
        a.Step(++step % 4 == 0);
        b.Step(false);
      });
  pair.Publish();
  a.ep->PublishStats();
  b.ep->PublishStats();
  for (const std::string& j : dgram_during) {
    EXPECT_EQ(testing::JsonNumbers(j)["fresh"], 1u) << j;
    testing::ExpectDatagramMatches(j, *a.ep, /*exact=*/false);
  }
  for (const std::string& j : device_during) {
    EXPECT_EQ(testing::JsonNumbers(j)["fresh"], 1u) << j;
    testing::ExpectDeviceMatches(j, pair.net().port(0), /*exact=*/false);
  }
  // After the run: exactly what the endpoints and the queues count.
  EXPECT_GT(a.ep->counters().sent, 100u);
  EXPECT_GT(b.ep->counters().received, 50u);
  testing::ExpectDatagramMatches(RunStatTool(absl::StrCat(pid, " /bypass/engine,", a.ep->stats_id())),
                                 *a.ep, /*exact=*/true);
  testing::ExpectDatagramMatches(RunStatTool(absl::StrCat(pid, " /bypass/engine,", b.ep->stats_id())),
                                 *b.ep, /*exact=*/true);
  for (int i = 0; i < 2; ++i) {
    const std::string j = RunStatTool(absl::StrCat(pid, " /bypass/device,", pair.net().port(i).id()));
    testing::ExpectDeviceMatches(j, pair.net().port(i), /*exact=*/true);
    EXPECT_GT(testing::JsonNumbers(j)["fault_dropped"], 0u) << "5% drop: " << j;
    EXPECT_NE(j.find("\"uri\": \"loopback:"), std::string::npos) << j;
  }
  // The lists: the datagram endpoints beside the engines, their totals,
  // and both device queues with their endpoints.
  const std::string engines = RunStatTool(pid);
  EXPECT_EQ(testing::JsonArray(engines, "datagram_endpoints"),
            (std::vector<uint64_t>{a.ep->stats_id(), b.ep->stats_id()}));
  EXPECT_EQ(testing::JsonNumbers(engines)["dgram_sent"], a.ep->counters().sent);
  EXPECT_EQ(testing::JsonNumbers(engines)["dgram_received"], b.ep->counters().received);
  const std::string devices = RunStatTool(absl::StrCat(pid, " /bypass/devices"));
  EXPECT_EQ(testing::JsonArray(devices, "id"),
            (std::vector<uint64_t>{port0, pair.net().port(1).id()}));
  EXPECT_EQ(testing::JsonArray(devices, "endpoints"), (std::vector<uint64_t>{2, 2}));
  // A datagram endpoint's peers: addresses.
  const std::string peers = RunStatTool(absl::StrCat(pid, " /bypass/peers,", a.ep->stats_id()));
  EXPECT_NE(peers.find(b.ep->address().ToString()), std::string::npos) << peers;
  EXPECT_EQ(RunStatTool(absl::StrCat(pid, " /bypass/device,999")), "{\"/bypass/device\": null}\n");
}

// A DPDK port in bypass's own EAL: net_ring, whose TX ring is its RX ring,
// so a datagram endpoint sending to itself makes traffic both ways.
TEST(DevicesTest, ADpdkPortAnswersItsEthStatsAndXstats) {
  absl::StatusOr<std::unique_ptr<driver::Device>> dev =
      driver::OpenDevice("dpdk:net_ring_dst0,ip=10.9.0.1");
  ASSERT_TRUE(dev.ok()) << dev.status();
  rdm::Port port((*dev)->queue(0), (*dev)->info());
  DatagramFlow a;
  a.ep = *rdm::DatagramEndpoint::Create(port, {.udp_port = 7200});
  a.to = *a.ep->InsertPeer(a.ep->address());
  uint16_t port_id = 0;
  ASSERT_EQ(rte_eth_dev_get_port_by_name("net_ring_dst0", &port_id), 0);
  std::string during;
  for (int i = 0; i < 300; ++i) a.Step(true);
  // Read from another thread while the owner keeps sending.
  std::atomic<bool> read{false};
  std::thread reader([&] {
    during = Answer(absl::StrCat("/bypass/device,", port.id()));
    read = true;
  });
  while (!read) a.Step(true);
  reader.join();
  EXPECT_EQ(testing::JsonNumbers(during)["fresh"], 1u) << during;
  testing::ExpectDeviceMatches(during, port, /*exact=*/false);
  a.ep->PublishStats();
  const std::string after = Answer(absl::StrCat("/bypass/device,", port.id()));
  testing::ExpectDeviceMatches(after, port, /*exact=*/true);
  // What DPDK itself says, read here directly.
  rte_eth_stats s{};
  ASSERT_EQ(rte_eth_stats_get(port_id, &s), 0);
  const auto got = testing::JsonNumbers(after);
  EXPECT_EQ(got.at("eth_opackets"), s.opackets);
  EXPECT_EQ(got.at("eth_ipackets"), s.ipackets);
  EXPECT_EQ(got.at("eth_obytes"), s.obytes);
  EXPECT_GT(s.opackets, 300u);
  EXPECT_EQ(got.at("xstat_tx_good_packets"), s.opackets) << after;
  EXPECT_EQ(got.at("tx_packets"), a.ep->counters().sent) << "bypass's queue counts what it sent";
  testing::ExpectDatagramMatches(Answer(absl::StrCat("/bypass/engine,", a.ep->stats_id())), *a.ep,
                                 /*exact=*/true);
}

}  // namespace
}  // namespace bypass::stats
