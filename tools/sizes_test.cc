#include "tools/sizes.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace bypass::tools {
namespace {

constexpr uint64_t kMax = 16u << 20;

TEST(ParseSizesTest, ListRangeAndSuffixes) {
  EXPECT_EQ(*ParseSizes("1,64,4096", kMax), (std::vector<uint64_t>{1, 64, 4096}));
  EXPECT_EQ(*ParseSizes("64-1024", kMax), (std::vector<uint64_t>{64, 128, 256, 512, 1024}));
  EXPECT_EQ(*ParseSizes("100-300", kMax), (std::vector<uint64_t>{100, 200, 300}));
  EXPECT_EQ(*ParseSizes("4K,16M", kMax), (std::vector<uint64_t>{4096, 16u << 20}));
  EXPECT_EQ(*ParseSizes("1,2-4", kMax), (std::vector<uint64_t>{1, 2, 4}));
}

TEST(ParseSizesTest, BadInputIsAnError) {
  for (const char* bad : {"", "0", "x", "1,,2", "17M", "8-4", "-4", "4-", "1.5"}) {
    EXPECT_FALSE(ParseSizes(bad, kMax).ok()) << bad;
  }
}

}  // namespace
}  // namespace bypass::tools
