#include "fabric/rdm/peer_table.h"

#include <cstdint>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace bypass::rdm {
namespace {

Address At(uint32_t ip, uint16_t port) {
  Address a;
  a.ip.value = ip;
  a.udp_port = port;
  return a;
}

TEST(PeerTableTest, RemovalKeepsEveryOtherPeerFindable) {
  PeerTable t(64);
  std::vector<uint32_t> idx;
  for (uint32_t i = 0; i < 64; ++i) {
    idx.push_back(t.Add(At(0x0a000000 + i % 8, static_cast<uint16_t>(1000 + i))));
  }
  EXPECT_EQ(t.Add(At(1, 1)), kNone) << "full";
  for (uint32_t i = 0; i < 64; i += 3) t.Remove(idx[i]);
  for (uint32_t i = 0; i < 64; ++i) {
    const uint32_t want = i % 3 == 0 ? kNone : idx[i];
    EXPECT_EQ(t.Find(0x0a000000 + i % 8, static_cast<uint16_t>(1000 + i)), want) << i;
  }
  EXPECT_NE(t.Add(At(2, 2)), kNone) << "a removed slot is reused";
}

TEST(PeerTableTest, ARemovedIdNeverNamesThePeerReusingItsSlot) {
  PeerTable t(4);
  const uint32_t a = t.Add(At(10, 1));
  const PeerId old = t.Id(a);
  EXPECT_TRUE(t.Valid(old));
  EXPECT_EQ(old.slot(), a);
  EXPECT_EQ(t.address(a).udp_port, 1);
  t.Remove(a);
  EXPECT_FALSE(t.Valid(old));
  EXPECT_FALSE(t.in_use(a));
  const uint32_t b = t.Add(At(11, 2));
  ASSERT_EQ(b, a) << "the slot is reused";
  EXPECT_FALSE(t.Valid(old)) << "under a new generation";
  EXPECT_TRUE(t.Valid(t.Id(b)));
  EXPECT_FALSE(t.Valid(kAnyPeer));
  EXPECT_EQ(t.Find(10, 1), kNone);
  EXPECT_EQ(t.Find(11, 2), b);
}

// Adds and removals in random order, many keys sharing an IPv4 or a port
// (so their hashes and tags collide now and then), every lookup checked
// against a map: the index's entries compare through the address array, and
// its backward-shift deletion must keep every other peer findable.
TEST(PeerTableTest, ChurnAgreesWithAMap) {
  constexpr uint32_t kMax = 1000;
  PeerTable t(kMax);
  std::map<std::pair<uint32_t, uint16_t>, uint32_t> want;
  std::mt19937 rng(22);
  const auto key = [&] {
    return std::pair<uint32_t, uint16_t>{0x0a000000 + rng() % 40,
                                         static_cast<uint16_t>(7000 + rng() % 64)};
  };
  for (int step = 0; step < 20000; ++step) {
    const auto k = key();
    const auto it = want.find(k);
    if (it != want.end()) {
      ASSERT_EQ(t.Find(k.first, k.second), it->second);
      if (rng() % 2 == 0) {
        t.Remove(it->second);
        want.erase(it);
      }
    } else {
      ASSERT_EQ(t.Find(k.first, k.second), kNone);
      const uint32_t i = t.Add(At(k.first, k.second));
      if (want.size() == kMax) {
        ASSERT_EQ(i, kNone);
      } else {
        ASSERT_NE(i, kNone);
        want[k] = i;
      }
    }
  }
  for (const auto& [k, i] : want) EXPECT_EQ(t.Find(k.first, k.second), i);
  EXPECT_GT(want.size(), kMax / 2);
}

}  // namespace
}  // namespace bypass::rdm
