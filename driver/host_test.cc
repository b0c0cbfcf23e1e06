#include "driver/host.h"

#include <unistd.h>

#include <cerrno>
#include <cstdint>

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

// Several ranges in one read, each copied whole in order; a range that
// cannot be read ends the copy at its boundary.
TEST(HostTest, ReadProcessMemoryVCopiesRangesInOrder) {
  const uint32_t pid = static_cast<uint32_t>(getpid());
  const char a[] = "0123456789";
  const uint64_t word = 0x1122334455667788;
  char got_a[sizeof(a)] = {};
  uint64_t got_word = 0;
  const PeerRange both[] = {{reinterpret_cast<uintptr_t>(a), got_a, sizeof(a)},
                            {reinterpret_cast<uintptr_t>(&word), &got_word, sizeof(word)}};
  ASSERT_EQ(ReadProcessMemoryV(pid, both), static_cast<int64_t>(sizeof(a) + sizeof(word)));
  EXPECT_STREQ(got_a, a);
  EXPECT_EQ(got_word, word);

  got_word = 0;
  const PeerRange bad_second[] = {{reinterpret_cast<uintptr_t>(&word), &got_word, sizeof(word)},
                                  {8, got_a, sizeof(a)}};  // page 0: never mapped
  EXPECT_EQ(ReadProcessMemoryV(pid, bad_second), static_cast<int64_t>(sizeof(word)));
  EXPECT_EQ(got_word, word);
  const PeerRange bad_first[] = {{8, got_a, sizeof(a)}};
  EXPECT_EQ(ReadProcessMemoryV(pid, bad_first), -EFAULT);
  const PeerRange many[kMaxPeerRanges + 1] = {};
  EXPECT_EQ(ReadProcessMemoryV(pid, many), -EINVAL);
}

}  // namespace
}  // namespace bypass::driver
