// Steering on a real DPDK PMD, net_tap: a device says it can steer exactly
// when it can. Where it can, UDP datagrams the kernel sends into the tap
// arrive on the queue their destination port was steered to, and only
// there; where it cannot (net_tap needs the kernel's multiq qdisc, which this
// machine's kernel lacks), SteerUdpPort says so in one line and nothing is
// lost: the layer above demultiplexes in software.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "driver/device.h"
#include "driver/net_headers.h"
#include "gtest/gtest.h"
#include "test/netns.h"

namespace bypass::driver {
namespace {

// Receives on every queue until `want` datagrams to `port` arrived or the
// poll budget ran out; returns how many arrived on each queue.
std::vector<int> Drain(Device& dev, uint16_t port, int want) {
  std::vector<int> per_queue(dev.info().num_queues, 0);
  int got = 0;
  Packet* pkts[32];
  for (uint64_t polls = 0; got < want && polls < 50'000'000; ++polls) {
    for (uint16_t q = 0; q < dev.info().num_queues; ++q) {
      const uint16_t n = dev.queue(q).RxBurst(absl::MakeSpan(pkts));
      for (uint16_t i = 0; i < n; ++i) {
        auto parsed = ParseUdpFrame(absl::MakeConstSpan(pkts[i]->data, pkts[i]->len));
        if (parsed && parsed->flow.dst_port == port) {
          ++per_queue[q];
          ++got;
        }
      }
      dev.queue(q).FreeBulk(absl::MakeConstSpan(pkts, n));
    }
  }
  return per_queue;
}

TEST(TapSteeringTest, SteeredPortArrivesOnItsQueueOnly) {
  const std::string iface = absl::StrCat("btap", getpid() % 10000);
  DeviceOptions opts;
  opts.queues = 2;
  auto dev = OpenDevice(absl::StrCat("dpdk:net_tap_steer0,iface=", iface), opts);
  ASSERT_TRUE(dev.ok()) << dev.status();
  const bool can_steer = (*dev)->info().can_steer;
  constexpr uint16_t kSteered = 47123, kOther = 47124;
  const absl::Status steer = (*dev)->SteerUdpPort(kSteered, 1);
  if (can_steer) {
    ASSERT_TRUE(steer.ok()) << steer;
  } else {
    std::printf("net_tap cannot steer on this kernel: checking the software-demux path\n");
    ASSERT_EQ(steer.code(), absl::StatusCode::kUnimplemented) << steer;
    EXPECT_EQ(std::string(steer.message()).find('\n'), std::string::npos);
  }

  // The kernel side: an address on the tap and a static neighbour for the
  // DPDK side, so datagrams go out with no ARP.
  const std::string mac = (*dev)->info().mac.ToString();
  // A subnet of this process's own, so two runs of the test cannot collide.
  const std::string net = absl::StrCat("10.198.", getpid() % 250, ".");
  for (const std::string& cmd : {
           absl::StrCat("ip addr add ", net, "1/24 dev ", iface),
           absl::StrCat("ip link set ", iface, " up"),
           absl::StrCat("ip neigh replace ", net, "2 lladdr ", mac, " dev ", iface),
       }) {
    ASSERT_TRUE(test::Run(cmd).ok()) << cmd;
  }
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(fd, 0);
  auto send_to = [&](uint16_t port, int n) {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    inet_pton(AF_INET, (net + "2").c_str(), &to.sin_addr);
    for (int i = 0; i < n; ++i) {
      char b[32] = "steer";
      ASSERT_EQ(sendto(fd, b, sizeof(b), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)),
                static_cast<ssize_t>(sizeof(b)));
    }
  };
  send_to(kSteered, 20);
  std::vector<int> steered = Drain(**dev, kSteered, 20);
  send_to(kOther, 20);
  std::vector<int> other = Drain(**dev, kOther, 20);
  if (can_steer) {
    EXPECT_EQ(steered[1], 20) << "steered datagrams arrive on queue 1";
    EXPECT_EQ(steered[0], 0) << "and on no other";
    EXPECT_EQ(other[0], 20) << "unsteered datagrams stay on queue 0";
    EXPECT_EQ(other[1], 0);
  } else {
    // Unsteered, the kernel spreads a multi-queue tap's flows over its
    // queues by hash: nothing is lost, and the layer above demultiplexes
    // (and opens one queue where it cannot steer).
    EXPECT_EQ(steered[0] + steered[1], 20);
    EXPECT_EQ(other[0] + other[1], 20);
  }
  close(fd);
}

}  // namespace
}  // namespace bypass::driver
