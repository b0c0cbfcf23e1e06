#include "tools/histogram.h"

#include <stdlib.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace bypass::tools {
namespace {

TEST(BucketizeTest, EmptyHasNoBuckets) { EXPECT_TRUE(Bucketize({}).empty()); }

TEST(BucketizeTest, EverySampleInExactlyOneContiguousBucket) {
  std::mt19937_64 rng(7);
  std::vector<uint64_t> samples;
  for (int i = 0; i < 5000; ++i) samples.push_back(900 + rng() % 2000000);
  samples.push_back(3);
  samples.push_back(17);
  const std::vector<Bucket> b = Bucketize(samples);
  ASSERT_FALSE(b.empty());
  uint64_t total = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_LT(b[i].lower_ns, b[i].upper_ns);
    if (i > 0) {
      EXPECT_EQ(b[i - 1].upper_ns, b[i].lower_ns) << "gap at bucket " << i;
    }
    total += b[i].count;
  }
  EXPECT_EQ(total, samples.size());
  EXPECT_EQ(b.front().lower_ns, 3u);
  EXPECT_GT(b.front().count, 0u);
  EXPECT_GT(b.back().count, 0u);
  for (uint64_t s : samples) {
    size_t in = 0;
    for (const Bucket& x : b) in += (s >= x.lower_ns && s < x.upper_ns) ? 1 : 0;
    EXPECT_EQ(in, 1u) << s;
  }
}

TEST(BucketizeTest, WidthIsAnEighthOfTheOctave) {
  const std::vector<Bucket> b = Bucketize({1000, 1000, 1100});
  ASSERT_GE(b.size(), 2u);
  EXPECT_EQ(b.front().lower_ns, 960u);  // 512 + 7 * 64
  EXPECT_EQ(b.front().upper_ns, 1024u);
  EXPECT_EQ(b.front().count, 2u);
  EXPECT_EQ(b.back().lower_ns, 1024u);  // 1024 + 0 * 128
  EXPECT_EQ(b.back().count, 1u);
}

TEST(HistogramCsvTest, HeaderRowsAndSummary) {
  RunResult r;
  r.layer = "raw";
  r.device = "memif:/x";
  LatencyResult l;
  l.size = 64;
  l.samples = {1000, 2000, 3000, 4000};
  l.iters = 4;
  l.rtt_ns = Percentiles::Of(l.samples);
  const std::string csv = HistogramCsv(r, l);
  EXPECT_NE(csv.find("\nlower_ns,upper_ns,count\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find("\nstatistic,ns\np50,3000\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find("\nmax,4000\nmean,2500.0\ncount,4\n"), std::string::npos) << csv;
}

TEST(GnuplotTest, MissingGnuplotIsOneLineSayingWhatToInstall) {
  const char* old = getenv("PATH");
  const std::string saved = old == nullptr ? "" : old;
  setenv("PATH", "/nonexistent-bypass-dir", 1);
  const absl::Status s = CheckGnuplot();
  RunResult r;
  LatencyResult l;
  l.samples = {1, 2};
  const absl::Status p = PlotHistogram(r, l, "/tmp/never.png");
  setenv("PATH", saved.c_str(), 1);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("gnuplot"), absl::string_view::npos);
  EXPECT_EQ(s.message().find('\n'), absl::string_view::npos);
  EXPECT_EQ(p.code(), s.code());
}

}  // namespace
}  // namespace bypass::tools
