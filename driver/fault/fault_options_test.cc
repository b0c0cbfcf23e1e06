#include "driver/fault/fault_options.h"

#include <string>

#include "absl/status/status.h"
#include "driver/fault/prng.h"
#include "gtest/gtest.h"

namespace bypass::driver::fault {
namespace {

TEST(FaultSpecTest, ParsesTheDocumentedExample) {
  absl::StatusOr<FaultOptions> o = ParseFaultSpec(
      "drop=0.05,dup=0.02,reorder=0.1,reorder_depth=8,delay=0.01,delay_ns=50000,"
      "corrupt=0.001,seed=7");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->drop, 0.05);
  EXPECT_EQ(o->dup, 0.02);
  EXPECT_EQ(o->reorder, 0.1);
  EXPECT_EQ(o->reorder_depth, 8u);
  EXPECT_EQ(o->delay, 0.01);
  EXPECT_EQ(o->delay_ns, 50000u);
  EXPECT_EQ(o->corrupt, 0.001);
  EXPECT_EQ(o->seed, 7u);
  EXPECT_TRUE(ValidateFaultOptions(*o).ok());
}

TEST(FaultSpecTest, EmptyMeansNoFaultsAndDefaultsStay) {
  absl::StatusOr<FaultOptions> o = ParseFaultSpec("");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->drop, 0);
  EXPECT_EQ(o->reorder_depth, FaultOptions{}.reorder_depth);
  o = ParseFaultSpec("corrupt_bytes=2,delay_slots=16,drop=1");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->corrupt_bytes, 2u);
  EXPECT_EQ(o->delay_slots, 16u);
  EXPECT_EQ(o->drop, 1.0);
}

TEST(FaultSpecTest, ParsesTheBottleneckLink) {
  absl::StatusOr<FaultOptions> o = ParseFaultSpec("rate_pps=2000000,queue=128");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rate_pps, 2'000'000u);
  EXPECT_EQ(o->queue, 128u);
  EXPECT_EQ(o->drop, 0);
  o = ParseFaultSpec("");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->rate_pps, 0u) << "no link unless asked";
  o = ParseFaultSpec("rate_pps=0,queue=1");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->queue, 1u);
  FaultOptions bad;
  bad.rate_pps = 2'000'000'000;
  EXPECT_NE(std::string(ValidateFaultOptions(bad).message()).find("rate_pps"), std::string::npos);
  bad = {};
  bad.queue = 0;
  EXPECT_NE(std::string(ValidateFaultOptions(bad).message()).find("queue"), std::string::npos);
}

TEST(FaultSpecTest, ToStringRoundTrips) {
  FaultOptions o;
  o.drop = 0.1234567890123;
  o.reorder = 0.125;
  o.reorder_depth = 3;
  o.delay_ns = 123456789012ull;
  o.seed = 0xfedcba9876543210ull;
  o.rate_pps = 123456;
  o.queue = 17;
  absl::StatusOr<FaultOptions> back = ParseFaultSpec(o.ToString());
  ASSERT_TRUE(back.ok()) << back.status() << " from " << o.ToString();
  EXPECT_EQ(back->ToString(), o.ToString());
  EXPECT_EQ(back->seed, o.seed);
  EXPECT_EQ(back->delay_ns, o.delay_ns);
  EXPECT_EQ(back->rate_pps, o.rate_pps);
  EXPECT_EQ(back->queue, o.queue);
}

TEST(FaultSpecTest, ErrorsAreOneLineAndSayWhatIsAccepted) {
  // A bad input and a phrase its error must contain.
  struct Case {
    const char* spec;
    const char* expect;
  };
  for (const Case& c : {Case{"drop=1.5", "probability from 0 to 1"},
                        Case{"drop=-0.1", "probability from 0 to 1"},
                        Case{"drop=nan", "probability from 0 to 1"},
                        Case{"drop=0.1x", "probability from 0 to 1"},
                        Case{"drop= 0.1", "probability from 0 to 1"},
                        Case{"loss=0.1", "unknown key (known: drop, dup"},
                        Case{"drop", "expected key=value"},
                        Case{"drop=0.1,,dup=0.1", "expected key=value"},
                        Case{"drop=0.1,", "trailing ','"},
                        Case{"drop=0.1,drop=0.2", "given twice"},
                        Case{"reorder_depth=0", "from 1 to 1024"},
                        Case{"reorder_depth=2000", "from 1 to 1024"},
                        Case{"corrupt_bytes=65", "from 1 to 64"},
                        Case{"delay_slots=x", "from 1 to 65536"},
                        Case{"seed=-1", "whole number"},
                        Case{"delay_ns=1e6", "whole number"},
                        Case{"rate_pps=-5", "from 0 to 1000000000"},
                        Case{"rate_pps=1000000001", "from 0 to 1000000000"},
                        Case{"rate_pps=1M", "from 0 to 1000000000"},
                        Case{"queue=0", "from 1 to 65536"},
                        Case{"queue=65537", "from 1 to 65536"},
                        Case{"queue=", "from 1 to 65536"}}) {
    absl::StatusOr<FaultOptions> o = ParseFaultSpec(c.spec);
    ASSERT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << c.spec;
    const std::string msg(o.status().message());
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.spec << " -> " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(FaultOptionsTest, ValidateNamesTheField) {
  FaultOptions o;
  o.dup = 2;
  absl::Status s = ValidateFaultOptions(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("dup"), std::string::npos) << s;
  o = {};
  o.corrupt_bytes = 0;
  EXPECT_FALSE(ValidateFaultOptions(o).ok());
}

TEST(PrngTest, DeterministicAndRoughlyUniform) {
  Xoshiro256 a(42), b(42), c(43);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.Next(), b.Next());
  EXPECT_NE(a.Next(), c.Next());
  uint32_t buckets[10] = {};
  for (int i = 0; i < 100'000; ++i) {
    const double u = a.Uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    ++buckets[a.Below(10)];
  }
  for (uint32_t n : buckets) EXPECT_NEAR(n, 10'000, 500);  // ~5 sigma
  EXPECT_FALSE(a.Chance(0));
  EXPECT_TRUE(a.Chance(1));
}

}  // namespace
}  // namespace bypass::driver::fault
