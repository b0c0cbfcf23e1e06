// The latency histogram the tools export: log-linear buckets over round-trip
// samples, written as CSV (--csv) or drawn as a PNG by gnuplot (--plot).
#ifndef BYPASS_TOOLS_HISTOGRAM_H_
#define BYPASS_TOOLS_HISTOGRAM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tools/latency.h"

namespace bypass::tools {

// One bucket: samples s with lower_ns <= s < upper_ns.
struct Bucket {
  uint64_t lower_ns = 0;
  uint64_t upper_ns = 0;
  uint64_t count = 0;
};

// Buckets of `sub` equal widths per power of two (below 2*sub ns, one
// nanosecond wide), from the bucket of the smallest sample to that of the
// largest; empty buckets in between are kept. The counts sum to
// samples.size().
std::vector<Bucket> Bucketize(const std::vector<uint64_t>& samples, uint32_t sub = 8);

// The CSV of run r's round trips at one size, l: a header line "lower_ns,upper_ns,count", a row per bucket, a
// blank line, then "statistic,ns" and rows p50, p90, p99, p999, max, mean,
// count. Lines starting with '#' describe the run.
std::string HistogramCsv(const RunResult& r, const LatencyResult& l);

// Writes HistogramCsv to path.
absl::Status WriteHistogramCsv(const RunResult& r, const LatencyResult& l,
                               const std::string& path);

// The gnuplot found on PATH, or an error saying what to install.
absl::Status CheckGnuplot();

// Draws the histogram as a PNG at path with gnuplot (log-scaled count over
// round-trip time, percentiles marked).
absl::Status PlotHistogram(const RunResult& r, const LatencyResult& l, const std::string& path);

}  // namespace bypass::tools

#endif  // BYPASS_TOOLS_HISTOGRAM_H_
