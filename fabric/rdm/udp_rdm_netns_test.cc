// The engine over the kernel UDP device between two hosts: two network
// namespaces joined by a veth pair (test/netns.h), a thread in each with a
// UDP device on its veth end (mtu 9000 over the 1500-byte link, so the
// kernel fragments), exchanging 1,000 messages and one of 1 MiB each way;
// and over a jumbo link (MTU 9000) with no mtu=, where the device takes the
// link's MTU (udp_device.h, LinkMtuFor) and so does a composite's
// intra-host part. Needs root (CI runs as root); otherwise it fails saying so.
#include <stdlib.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "driver/clock.h"
#include "driver/device.h"
#include "driver/udp/udp_device.h"
#include "fabric/rdm/udp_exchange.h"
#include "gtest/gtest.h"
#include "test/netns.h"

namespace bypass::rdm::udp_exchange {
namespace {

constexpr uint16_t kUdpPort = 4791;
constexpr uint64_t kDeadlineNs = 120'000'000'000;

// One host: enters its namespace (this thread only), opens its device on
// its veth end, and steps until both sides are done.
// `keys` follow the device's interface in its URI; the endpoint's DATA
// payload must be at least `min_segment`.
absl::Status RunSide(const test::VethPair& net, int side, std::atomic<int>& done,
                     std::string* report, const std::string& keys = ",mtu=9000",
                     uint32_t min_segment = 0) {
  const absl::Status entered = side == 0 ? net.EnterA() : net.EnterB();
  if (!entered.ok()) {
    done.fetch_add(1);
    return entered;
  }
  const std::string& iface = side == 0 ? net.if_a() : net.if_b();
  absl::StatusOr<std::unique_ptr<Side>> me = Side::Create("udp:" + iface + keys, kUdpPort, side);
  if (!me.ok()) {
    done.fetch_add(1);
    return me.status();
  }
  if ((*me)->endpoint().max_segment() < min_segment) {
    done.fetch_add(1);
    return absl::InternalError(absl::StrCat("DATA payload ", (*me)->endpoint().max_segment(),
                                            ", expected at least ", min_segment));
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

// The pair's links raised to jumbo frames: a UDP device named without mtu=
// takes 9000, the composite "shm:+udp:IFACE" too (its intra-host part
// follows), and the exchange runs with 9000-byte frames.
TEST(RdmOverUdpNetns, AJumboLinkGivesTheDeviceItsMtu) {
  absl::StatusOr<std::unique_ptr<test::VethPair>> net = test::VethPair::Create("bpjmb");
  ASSERT_TRUE(net.ok()) << net.status();
  for (const auto& [ns, iface] : {std::pair((*net)->ns_a(), (*net)->if_a()),
                                  std::pair((*net)->ns_b(), (*net)->if_b())}) {
    ASSERT_TRUE(test::Run(absl::StrCat("ip -n ", ns, " link set dev ", iface, " mtu 9000")).ok());
  }
  uint32_t mtus[2] = {0, 0};
  std::thread probe([&] {
    if (!(*net)->EnterA().ok()) return;
    absl::StatusOr<std::unique_ptr<driver::Device>> d = driver::OpenDevice("udp:" + (*net)->if_a());
    if (d.ok()) mtus[0] = (*d)->info().mtu;
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/shmXXXXXX");
    ASSERT_NE(mkdtemp(dir.data()), nullptr);  // 0700, as the registry wants
    d = driver::OpenDevice(absl::StrCat("shm:", dir, "+udp:", (*net)->if_a()));
    EXPECT_TRUE(d.ok()) << d.status();
    if (d.ok()) mtus[1] = (*d)->info().mtu;
  });
  probe.join();
  EXPECT_EQ(mtus[0], 9000u);
  EXPECT_EQ(mtus[1], 9000u);
  EXPECT_EQ(driver::udp::LinkMtuFor(65535), 9000u);  // veth's largest: jumbo at most
  EXPECT_EQ(driver::udp::LinkMtuFor(1400), 1500u);   // never below the old default

  std::atomic<int> done{0};
  absl::Status status[2];
  std::string report[2];
  // 9000 less IPv4, UDP and the DATA headers (a hundred bytes or so).
  const uint32_t segment = 8800;
  std::thread b([&] { status[1] = RunSide(**net, 1, done, &report[1], "", segment); });
  status[0] = RunSide(**net, 0, done, &report[0], "", segment);
  b.join();
  EXPECT_TRUE(status[0].ok()) << status[0] << " " << report[0];
  EXPECT_TRUE(status[1].ok()) << status[1] << " " << report[1];
}

}  // namespace
}  // namespace bypass::rdm::udp_exchange
