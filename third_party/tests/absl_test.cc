// Abseil from Debian's libabsl-dev links and works.
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"

namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError(absl::StrCat(x, " is odd"));
  return x / 2;
}

TEST(AbslTest, StatusOrCarriesValuesAndErrors) {
  ASSERT_TRUE(Half(4).ok());
  EXPECT_EQ(*Half(4), 2);
  EXPECT_EQ(Half(3).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Half(3).status().message(), "3 is odd");
  EXPECT_EQ(absl::StrFormat("%05.1f", 2.5), "002.5");
}

}  // namespace
// x
// y
