#include "driver/host.h"

#include "gtest/gtest.h"

namespace bypass::driver {
namespace {

TEST(HostTest, LoopbackIsLocalAndListed) {
  EXPECT_TRUE(IsLocalIpv4(Ipv4Address{0x7f000001}));
  EXPECT_TRUE(IsLocalIpv4(Ipv4Address{0x7f000002}));
  EXPECT_FALSE(IsLocalIpv4(Ipv4Address{0xc0000201}));  // 192.0.2.1, TEST-NET-1
  bool lo = false;
  for (const HostInterface& h : HostInterfaces()) lo = lo || h.loopback;
  EXPECT_TRUE(lo);
  ASSERT_TRUE(FindInterface("lo").ok());
  EXPECT_EQ(FindInterface("lo")->ipv4.value, 0x7f000001u);
}

TEST(HostTest, PrimaryAddressIsOneOfOurs) {
  const Ipv4Address p = PrimaryIpv4();
  EXPECT_NE(p.value, 0u);
  EXPECT_TRUE(IsLocalIpv4(p));
}

TEST(HostTest, UnknownInterfaceSaysWhatThereIs) {
  absl::StatusOr<HostInterface> h = FindInterface("nosuch0");
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("lo"), std::string::npos) << h.status();
}

TEST(HostTest, NamespaceIdIsStable) {
  EXPECT_NE(NetNamespaceId(), 0u);
  EXPECT_EQ(NetNamespaceId(), NetNamespaceId());
}

}  // namespace
}  // namespace bypass::driver
