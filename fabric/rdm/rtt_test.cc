// RFC 6298 arithmetic, the floor and ceiling, and backoff.
#include "fabric/rdm/rtt.h"

#include "gtest/gtest.h"

namespace bypass::rdm {
namespace {

TEST(RttTest, InitialThenRfc6298) {
  const RtoBounds b{1'000'000, 10'000, 1'000'000'000};
  RttEstimator r;
  EXPECT_FALSE(r.has_sample());
  EXPECT_EQ(r.rto(b), 1'000'000u);
  r.Sample(40'000);
  EXPECT_EQ(r.srtt(), 40'000u);
  EXPECT_EQ(r.rttvar(), 20'000u);
  EXPECT_EQ(r.rto(b), 40'000u + 4 * 20'000u);
  r.Sample(80'000);
  EXPECT_EQ(r.rttvar(), (3 * 20'000u + 40'000u) / 4);
  EXPECT_EQ(r.srtt(), (7 * 40'000u + 80'000u) / 8);
}

TEST(RttTest, FloorCeilingAndBackoff) {
  const RtoBounds b{1'000'000, 100'000, 10'000'000};
  RttEstimator r;
  for (int i = 0; i < 50; ++i) r.Sample(1'000);
  EXPECT_EQ(r.rto(b), 100'000u) << "floor";
  EXPECT_EQ(r.rto(b, 1), 200'000u);
  EXPECT_EQ(r.rto(b, 3), 800'000u);
  EXPECT_EQ(r.rto(b, 10), 10'000'000u) << "ceiling";
  EXPECT_EQ(r.rto(b, 64), 10'000'000u);
  for (int i = 0; i < 50; ++i) r.Sample(1'000'000'000);
  EXPECT_EQ(r.rto(b), 10'000'000u);
}

}  // namespace
}  // namespace bypass::rdm
