// The report prints the test region and the host state in aligned lines.
#include "hugepage/report.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bypass::hugepage {
namespace {

using ::testing::HasSubstr;

TEST(ReportTest, PrintsRegionAndHost) {
  char* text = nullptr;
  size_t len = 0;
  std::FILE* out = open_memstream(&text, &len);
  ASSERT_NE(out, nullptr);
  PrintHugepageReport(out);
  std::fclose(out);
  const std::string report(text, len);
  std::free(text);
  EXPECT_THAT(report, HasSubstr("test region (4 MiB, best 1G hugetlb)\n"));
  EXPECT_THAT(report,
              ::testing::ContainsRegex("\n  backing +(1G hugetlb|2M hugetlb|transparent|small)\n"));
  EXPECT_THAT(report, ::testing::ContainsRegex("\n  iova +(physical|virtual)\n"));
  EXPECT_THAT(report, HasSubstr("\nhost\n"));
  EXPECT_THAT(report, ::testing::ContainsRegex("\n  thp +"));
  EXPECT_THAT(report, ::testing::ContainsRegex("\n  numa nodes +[1-9]"));
}

}  // namespace
}  // namespace bypass::hugepage
