// DPDK from Debian's libdpdk-dev links, and its EAL starts with no PCI scan,
// no hugepages and no worker threads.
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_version.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace {

TEST(DpdkTest, EalStartsWithoutPciOrHugepages) {
  std::string prefix = "bypass-dpdk-test-" + std::to_string(getpid());
  std::vector<std::string> args = {"dpdk_test", "-l",         "0",
                                   "--no-pci",  "--no-huge",  "-m",
                                   "64",        "--no-shconf", "--log-level=lib.eal:error",
                                   "--file-prefix=" + prefix};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  ASSERT_GE(rte_eal_init(static_cast<int>(argv.size()), argv.data()), 0)
      << "rte_eal_init failed: " << rte_strerror(rte_errno);
  EXPECT_EQ(rte_lcore_count(), 1u);
  EXPECT_EQ(rte_eth_dev_count_avail(), 0u) << "no PCI scan, no vdevs: no ports";

  rte_mempool* pool = rte_pktmbuf_pool_create("t", 511, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
                                              SOCKET_ID_ANY);
  ASSERT_NE(pool, nullptr) << rte_strerror(rte_errno);
  rte_mbuf* m = rte_pktmbuf_alloc(pool);
  ASSERT_NE(m, nullptr);
  EXPECT_NE(rte_pktmbuf_append(m, 64), nullptr);
  EXPECT_EQ(rte_pktmbuf_pkt_len(m), 64u);
  rte_pktmbuf_free(m);
  rte_mempool_free(pool);
  printf("DPDK %s\n", rte_version());
  EXPECT_EQ(rte_eal_cleanup(), 0);
}

}  // namespace
