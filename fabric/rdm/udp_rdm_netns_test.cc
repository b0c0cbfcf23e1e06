// The engine over the kernel UDP device between two hosts: two network
// namespaces joined by a veth pair (test/netns.h), a thread in each with a
// UDP device on its veth end (mtu 9000 over the 1500-byte link, so the
// kernel fragments), exchanging 1,000 messages and one of 1 MiB each way.
// Needs root (CI runs as root); otherwise it fails saying so.
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "driver/clock.h"
#include "driver/device.h"
#include "fabric/rdm/udp_exchange.h"
#include "gtest/gtest.h"
#include "test/netns.h"

namespace bypass::rdm::udp_exchange {
namespace {

constexpr uint16_t kUdpPort = 4791;
constexpr uint64_t kDeadlineNs = 120'000'000'000;

// One host: enters its namespace (this thread only), opens its device on
// its veth end, and steps until both sides are done.
absl::Status RunSide(const test::VethPair& net, int side, std::atomic<int>& done,
                     std::string* report) {
  const absl::Status entered = side == 0 ? net.EnterA() : net.EnterB();
  if (!entered.ok()) return entered;
  const std::string& iface = side == 0 ? net.if_a() : net.if_b();
  absl::StatusOr<std::unique_ptr<Side>> me = Side::Create("udp:" + iface + ",mtu=9000", kUdpPort, side);
  if (!me.ok()) {
    done.fetch_add(1);
    return me.status();
  }
  Address other;
  other.ip = *driver::Ipv4Address::Parse(side == 0 ? net.ip_b() : net.ip_a());
  other.udp_port = kUdpPort;
  if (absl::Status s = (*me)->Connect(other); !s.ok()) {
    done.fetch_add(1);
    return s;
  }
  const uint64_t start = driver::SteadyClock::Get().NowNs();
  bool counted = false;
  absl::Status result;
  // Go on stepping after finishing until the other side has too: its last
  // messages need our ACKs.
  while (done.load() < 2) {
    if (absl::Status s = (*me)->Step(); !s.ok()) {
      result = s;
      break;
    }
    if (!counted && (*me)->Done()) {
      counted = true;
      done.fetch_add(1);
    }
    if (driver::SteadyClock::Get().NowNs() - start > kDeadlineNs) {
      result = absl::DeadlineExceededError("unfinished");
      break;
    }
  }
  if (!counted) done.fetch_add(1);
  *report = (*me)->Report();
  return result;
}

TEST(RdmOverUdpNetns, TwoHostsExchangeAcrossAVethPair) {
  absl::StatusOr<std::unique_ptr<test::VethPair>> net = test::VethPair::Create("bpudp");
  ASSERT_TRUE(net.ok()) << net.status();
  std::atomic<int> done{0};
  absl::Status status[2];
  std::string report[2];
  std::thread b([&] { status[1] = RunSide(**net, 1, done, &report[1]); });
  status[0] = RunSide(**net, 0, done, &report[0]);
  b.join();
  std::fprintf(stderr, "%s\n%s\n", report[0].c_str(), report[1].c_str());
  EXPECT_TRUE(status[0].ok()) << status[0] << " " << report[0];
  EXPECT_TRUE(status[1].ok()) << status[1] << " " << report[1];
}

}  // namespace
}  // namespace bypass::rdm::udp_exchange
