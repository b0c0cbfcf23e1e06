// BufferPool Get/Put and bulk get/put of 32, against malloc/free of the same
// size measured in the same run; prints the ratios at the end.
//   bazel run --config=opt //hugepage:pool_benchmark
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "hugepage/pool.h"

namespace bypass::hugepage {
namespace {

constexpr int kBulk = 32;

std::unique_ptr<BufferPool> MakePool(int64_t size) {
  PoolOptions o;
  o.buffer_size = Bytes(static_cast<uint64_t>(size));
  o.count = 1024;
  auto pool = BufferPool::Create(o);
  if (!pool.ok()) {
    std::fprintf(stderr, "%s\n", pool.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(pool);
}

void BM_PoolGetPut(benchmark::State& state) {
  auto pool = MakePool(state.range(0));
  for (auto _ : state) {
    void* b = pool->Get();
    benchmark::DoNotOptimize(b);
    pool->Put(b);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_MallocFree(benchmark::State& state) {
  const size_t size = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    void* b = std::malloc(size);
    benchmark::DoNotOptimize(b);
    std::free(b);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_PoolBulk32(benchmark::State& state) {
  auto pool = MakePool(state.range(0));
  void* bufs[kBulk];
  for (auto _ : state) {
    if (!pool->GetBulk(absl::MakeSpan(bufs))) state.SkipWithError("pool exhausted");
    benchmark::DoNotOptimize(bufs);
    pool->PutBulk(bufs);
  }
  state.SetItemsProcessed(state.iterations() * kBulk);
}

void BM_MallocFreeBulk32(benchmark::State& state) {
  const size_t size = static_cast<size_t>(state.range(0));
  void* bufs[kBulk];
  for (auto _ : state) {
    for (void*& b : bufs) b = std::malloc(size);
    benchmark::DoNotOptimize(bufs);
    for (void* b : bufs) std::free(b);
  }
  state.SetItemsProcessed(state.iterations() * kBulk);
}

BENCHMARK(BM_PoolGetPut)->Arg(64)->Arg(2048);
BENCHMARK(BM_MallocFree)->Arg(64)->Arg(2048);
BENCHMARK(BM_PoolBulk32)->Arg(64)->Arg(2048);
BENCHMARK(BM_MallocFreeBulk32)->Arg(64)->Arg(2048);

// The console output, plus each run's time kept for the ratio table.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.run_type == Run::RT_Iteration && !run.error_occurred) {
        ns_[run.benchmark_name()] = run.GetAdjustedRealTime();
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }

  // One line per pool benchmark: its time against the malloc baseline.
  void PrintRatios() const {
    std::printf("\nratio (malloc/free time / pool time; >1 means the pool is faster)\n");
    for (const auto& [name, ns] : ns_) {
      std::string baseline = name;
      if (!Replace(baseline, "BM_PoolGetPut", "BM_MallocFree") &&
          !Replace(baseline, "BM_PoolBulk32", "BM_MallocFreeBulk32")) {
        continue;
      }
      auto it = ns_.find(baseline);
      if (it == ns_.end() || ns <= 0) continue;
      std::printf("  %-22s %8.2f ns vs %-28s %8.2f ns: %5.2fx\n", name.c_str(), ns,
                  baseline.c_str(), it->second, it->second / ns);
    }
  }

 private:
  static bool Replace(std::string& s, const std::string& from, const std::string& to) {
    if (s.rfind(from + "/", 0) != 0) return false;
    s.replace(0, from.size(), to);
    return true;
  }

  std::map<std::string, double> ns_;
};

}  // namespace
}  // namespace bypass::hugepage

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  bypass::hugepage::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintRatios();
  benchmark::Shutdown();
  return 0;
}
