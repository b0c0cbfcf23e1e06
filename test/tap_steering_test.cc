// Steering on a real DPDK PMD, net_tap: a device says it can steer exactly
// when it can. Where it can, UDP datagrams the kernel sends into the tap
// arrive on the queue their destination port was steered to, and only
// there; where it cannot (net_tap needs the kernel's multiq qdisc, which this
// machine's kernel lacks), SteerUdpPort says so in one line and everything
// arrives on queue 0 for the layer above to demultiplex.
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
  const int steered_queue = can_steer ? 1 : 0;

  // The kernel side: an address on the tap and a static neighbour for the
  // DPDK side, so datagrams go out with no ARP.
  const std::string mac = (*dev)->info().mac.ToString();
  for (const std::string& cmd : {
           absl::StrCat("ip addr add 10.198.0.1/24 dev ", iface),
           absl::StrCat("ip link set ", iface, " up"),
           absl::StrCat("ip neigh replace 10.198.0.2 lladdr ", mac, " dev ", iface),
       }) {
    ASSERT_TRUE(test::Run(cmd).ok()) << cmd;
  }
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(fd, 0);
  auto send_to = [&](uint16_t port, int n) {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    inet_pton(AF_INET, "10.198.0.2", &to.sin_addr);
    for (int i = 0; i < n; ++i) {
      char b[32] = "steer";
      ASSERT_EQ(sendto(fd, b, sizeof(b), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)),
                static_cast<ssize_t>(sizeof(b)));
    }
  };
  send_to(kSteered, 20);
  std::vector<int> steered = Drain(**dev, kSteered, 20);
  EXPECT_EQ(steered[steered_queue], 20) << "steered datagrams arrive on queue " << steered_queue;
  EXPECT_EQ(steered[1 - steered_queue], 0) << "and on no other";
  send_to(kOther, 20);
  std::vector<int> other = Drain(**dev, kOther, 20);
  EXPECT_EQ(other[0], 20) << "unsteered datagrams stay on queue 0";
  EXPECT_EQ(other[1], 0);
  close(fd);
}

}  // namespace
}  // namespace bypass::driver
