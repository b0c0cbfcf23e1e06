// dpdk:port=N,queues=A-B attaches to a port an embedding application set up:
// it uses only the queues it was given and never reconfigures the port.
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "driver/device.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bypass::driver {
namespace {

using ::testing::HasSubstr;

TEST(AttachTest, WithoutAnEalSaysWhatToDo) {
  auto dev = OpenDevice("dpdk:port=0,queues=0-0");
  ASSERT_FALSE(dev.ok());
  EXPECT_THAT(std::string(dev.status().message()), HasSubstr("rte_eal_init"));
}

TEST(AttachTest, UsesOnlyItsQueuesAndLeavesThePortAlone) {
  // The application: its own EAL, a net_ring port with two queue pairs.
  std::vector<std::string> args = {"app", "--no-pci", "--no-huge", "-m", "128", "--no-shconf",
                                   "--no-telemetry", "--log-level=*:warning",
                                   "--file-prefix=attach" + std::to_string(getpid()),
                                   "--vdev=net_ring0"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  ASSERT_GE(rte_eal_init(static_cast<int>(argv.size()), argv.data()), 0) << rte_strerror(rte_errno);
  rte_mempool* app_pool =
      rte_pktmbuf_pool_create("app", 2047, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
  ASSERT_NE(app_pool, nullptr);
  rte_eth_conf conf{};
  ASSERT_EQ(rte_eth_dev_configure(0, 2, 2, &conf), 0);
  for (uint16_t q = 0; q < 2; ++q) {
    ASSERT_EQ(rte_eth_rx_queue_setup(0, q, 256, SOCKET_ID_ANY, nullptr, app_pool), 0);
    ASSERT_EQ(rte_eth_tx_queue_setup(0, q, 256, SOCKET_ID_ANY, nullptr), 0);
  }
  ASSERT_EQ(rte_eth_dev_start(0), 0);

  {
    auto bad = OpenDevice("dpdk:port=0,queues=1-2");
    ASSERT_FALSE(bad.ok());
    EXPECT_THAT(std::string(bad.status().message()), HasSubstr("outside"));

    auto dev = OpenDevice("dpdk:port=0,queues=1-1");
    ASSERT_TRUE(dev.ok()) << dev.status();
    EXPECT_FALSE((*dev)->info().owns_port);
    EXPECT_EQ((*dev)->info().num_queues, 1);
    QueuePair& qp = (*dev)->queue(0);
    // net_ring loops each queue's TX into the same queue's RX.
    Packet* p[4];
    ASSERT_TRUE(qp.AllocBulk(absl::MakeSpan(p)));
    for (int i = 0; i < 4; ++i) {
      std::memset(p[i]->data, i, 60);
      p[i]->len = 60;
    }
    ASSERT_EQ(qp.TxBurst(absl::MakeConstSpan(p)), 4);
    Packet* r[8];
    const uint16_t n = qp.RxBurst(absl::MakeSpan(r));
    ASSERT_EQ(n, 4);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(r[i]->len, 60u);
      EXPECT_EQ(r[i]->data[59], i);
    }
    qp.FreeBulk(absl::MakeConstSpan(r, n));
    // The application's queue 0 saw none of it.
    rte_mbuf* app_rx[8];
    EXPECT_EQ(rte_eth_rx_burst(0, 0, app_rx, 8), 0);
  }
  // Closing the attached device left the application's port running.
  rte_eth_link link{};
  ASSERT_EQ(rte_eth_link_get_nowait(0, &link), 0);
  EXPECT_EQ(link.link_status, RTE_ETH_LINK_UP);
  rte_mbuf* m = rte_pktmbuf_alloc(app_pool);
  ASSERT_NE(m, nullptr);
  ASSERT_NE(rte_pktmbuf_append(m, 60), nullptr);
  ASSERT_EQ(rte_eth_tx_burst(0, 0, &m, 1), 1);
  rte_mbuf* back[1];
  EXPECT_EQ(rte_eth_rx_burst(0, 0, back, 1), 1);
  rte_pktmbuf_free(back[0]);
}

}  // namespace
}  // namespace bypass::driver
