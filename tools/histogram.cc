#include "tools/histogram.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace bypass::tools {
namespace {

// The lower bound and width of the bucket holding v.
void BucketOf(uint64_t v, uint32_t sub, uint64_t* lower, uint64_t* width) {
  if (v < 2ull * sub) {
    *lower = v;
    *width = 1;
    return;
  }
  const int e = 63 - std::countl_zero(v);
  *width = (uint64_t{1} << e) / sub;
  *lower = (uint64_t{1} << e) + (v - (uint64_t{1} << e)) / *width * *width;
}

}  // namespace

std::vector<Bucket> Bucketize(const std::vector<uint64_t>& samples, uint32_t sub) {
  std::vector<Bucket> out;
  if (samples.empty()) return out;
  // sub is a power of two so every octave splits evenly.
  if (sub == 0 || (sub & (sub - 1)) != 0) sub = 8;
  std::vector<uint64_t> sorted = samples;
  std::sort(sorted.begin(), sorted.end());
  uint64_t lower = 0, width = 0;
  BucketOf(sorted.front(), sub, &lower, &width);
  size_t i = 0;
  for (;;) {
    Bucket b{lower, lower + width, 0};
    while (i < sorted.size() && sorted[i] < b.upper_ns) {
      ++b.count;
      ++i;
    }
    out.push_back(b);
    if (i == sorted.size() || b.upper_ns <= lower) break;  // done (or the top octave wrapped)
    BucketOf(b.upper_ns, sub, &lower, &width);
  }
  // A sample at UINT64_MAX's octave end cannot get a bucket above it.
  if (i < sorted.size()) out.back().count += sorted.size() - i;
  return out;
}

std::string HistogramCsv(const RunResult& r, const LatencyResult& l) {
  std::string out = absl::StrCat("# pingpong round trips: layer ", r.layer,
                                 r.provider.empty() ? "" : absl::StrCat(", provider ", r.provider),
                                 ", device ", r.device, ", size ", l.size, ", iters ", l.iters,
                                 "\n");
  out += "lower_ns,upper_ns,count\n";
  for (const Bucket& b : Bucketize(l.samples)) {
    absl::StrAppend(&out, b.lower_ns, ",", b.upper_ns, ",", b.count, "\n");
  }
  const Percentiles& p = l.rtt_ns;
  absl::StrAppend(&out, "\nstatistic,ns\n", "p50,", p.p50, "\np90,", p.p90, "\np99,", p.p99,
                  "\np999,", p.p999, "\nmax,", p.max, "\n");
  char mean[64];
  std::snprintf(mean, sizeof(mean), "mean,%.1f\n", p.mean);
  absl::StrAppend(&out, mean, "count,", l.samples.size(), "\n");
  return out;
}

absl::Status WriteHistogramCsv(const RunResult& r, const LatencyResult& l,
                               const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write --csv=", path, ": ", std::strerror(errno)));
  }
  const std::string csv = HistogramCsv(r, l);
  const bool ok = std::fwrite(csv.data(), 1, csv.size(), f) == csv.size();
  if (std::fclose(f) != 0 || !ok) {
    return absl::DataLossError(absl::StrCat("writing --csv=", path, " failed"));
  }
  return absl::OkStatus();
}

absl::Status CheckGnuplot() {
  const char* path = getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path == nullptr ? "/usr/bin:/bin" : path, ':')) {
    const std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/gnuplot");
    if (access(candidate.c_str(), X_OK) == 0) return absl::OkStatus();
  }
  return absl::FailedPreconditionError(
      "--plot needs gnuplot, which is not on PATH: install it (apt-get install gnuplot-nox, or run "
      "tools/setup.sh) or use --csv");
}

absl::Status PlotHistogram(const RunResult& r, const LatencyResult& l, const std::string& path) {
  if (absl::Status s = CheckGnuplot(); !s.ok()) return s;
  if (l.samples.empty()) return absl::FailedPreconditionError("--plot: no round trips were measured");
  char data_path[] = "/tmp/bypass-histogram-XXXXXX";
  const int fd = mkstemp(data_path);
  if (fd < 0) return absl::InternalError(absl::StrCat("mkstemp: ", std::strerror(errno)));
  std::string data;
  for (const Bucket& b : Bucketize(l.samples)) {
    // Box centre and width in microseconds.
    absl::StrAppend(&data, (static_cast<double>(b.lower_ns) + static_cast<double>(b.upper_ns)) / 2000.0,
                    " ", static_cast<double>(b.upper_ns - b.lower_ns) / 1000.0, " ", b.count, "\n");
  }
  const bool wrote = write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size());
  close(fd);
  if (!wrote) {
    unlink(data_path);
    return absl::InternalError("could not write gnuplot's data file in /tmp");
  }
  auto us = [](uint64_t ns) { return static_cast<double>(ns) / 1000.0; };
  std::string script = absl::StrCat(
      "set terminal png size 1000,600\n", "set output '", path, "'\n",
      "set title 'pingpong round trips: ", r.layer,
      r.provider.empty() ? "" : absl::StrCat(" (", r.provider, ")"), ", ", l.size, " B, ",
      l.samples.size(), " samples'\n",
      "set xlabel 'round trip (us)'\nset ylabel 'count'\nset logscale y\nset logscale x\nset yrange [0.5:*]\n",
      "set style fill solid 0.6\nset grid\nset key top right\n");
  const std::pair<const char*, uint64_t> marks[] = {
      {"p50", l.rtt_ns.p50}, {"p99", l.rtt_ns.p99}, {"p99.9", l.rtt_ns.p999}};
  int n = 1;
  for (const auto& [name, ns] : marks) {
    absl::StrAppend(&script, "set arrow ", n++, " from ", us(ns), ", graph 0 to ", us(ns),
                    ", graph 1 nohead dt 2\n");
    absl::StrAppend(&script, "set label ", n, " '", name, " ", us(ns), " us' at ", us(ns),
                    ", graph 0.95 rotate by 90 right\n");
  }
  absl::StrAppend(&script, "plot '", data_path, "' using 1:3:2 with boxes title 'round trips'\n");
  std::FILE* gp = popen("gnuplot 1>&2", "w");  // its messages on stderr, never in --json
  if (gp == nullptr) {
    unlink(data_path);
    return absl::InternalError("could not start gnuplot");
  }
  std::fwrite(script.data(), 1, script.size(), gp);
  const int status = pclose(gp);
  unlink(data_path);
  struct stat st;
  if (status != 0 || stat(path.c_str(), &st) != 0 || st.st_size == 0) {
    return absl::InternalError(absl::StrCat("gnuplot could not draw --plot=", path,
                                            " (is the directory writable?)"));
  }
  return absl::OkStatus();
}

}  // namespace bypass::tools
