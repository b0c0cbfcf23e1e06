// The fi_* facade in one process over two loopback domains, through the
// public libfabric API only (the static library): an idle fi_cq_read, and
// 64-byte ping-pong round trips with fi_inject and with fi_send (whose
// completions the sender waits for, as fi_pingpong does above its inject
// size). Compare with //fabric/rdm:engine_benchmark's BM_RdmPingPong, the
// same exchange on the engine alone: the difference is the facade. And
// 8-byte atomics (base, fetch, compare) against 8-byte fi_write in the same
// loop, as latency and as a rate with a window: the counters give the
// atomic / write ratios.
//   bazel run --config=opt //fabric/fi:fi_benchmark
// Each ping-pong round trip is one out-of-line call (FiRoundTrip), so that
// callgrind counts its instructions alone, as engine_benchmark's
// RdmRoundTrip (fabric/fi/README.md, "Cost of the facade"):
//   BYPASS_BENCH_STEP_NS=250 valgrind --tool=callgrind --collect-atstart=no
//     --toggle-collect='*FiRoundTrip*' bazel-bin/fabric/fi/fi_benchmark
//     --benchmark_filter='BM_FiPingPong/inject:1' --benchmark_min_time=0.05
// (one command line): instructions per round trip are callgrind's total
// over the "FiRoundTrip calls" printed at exit. BYPASS_BENCH_STEP_NS=N gives the engine endpoints a
// clock that moves N ns at every reading, as engine_benchmark does, so
// that the count is that of a native round trip (under callgrind the
// engine's 5 us delayed ACK and tail-loss probe fall due on every one).
#include <rdma/fi_atomic.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "benchmark/benchmark.h"
#include "driver/clock.h"
#include "fabric/fi/engine_clock.h"
#include "fabric/fi/fi_test_util.h"

namespace bypass::fi {
namespace {

using testing::Pair;

// Both endpoints progressed until cq yields one completion.
void WaitOne(Pair& p, fid_cq* cq) {
  fid_cq* other = cq == p.a.rxcq || cq == p.a.txcq ? p.b.txcq : p.a.txcq;
  fi_cq_tagged_entry e;
  while (fi_cq_read(cq, &e, 1) != 1) fi_cq_read(other, nullptr, 0);
}

// One fi_cq_read that finds nothing: a busy-polling loop's turn, and so
// about twice what a message waits, on average, to be seen.
void BM_FiIdleCqRead(benchmark::State& state) {
  Pair p;
  p.Open(testing::RdmHints(FI_MSG));
  fi_cq_tagged_entry e;
  for (auto _ : state) benchmark::DoNotOptimize(fi_cq_read(p.a.rxcq, &e, 1));
  p.Close();
}
BENCHMARK(BM_FiIdleCqRead);

// A clock that moves step_ns at every reading (BYPASS_BENCH_STEP_NS; see
// the top). Atomic: a domain's progress thread (the watch) may read it
// beside the benchmark's thread.
class SteppingClock final : public driver::Clock {
 public:
  explicit SteppingClock(uint64_t step_ns) : step_ns_(step_ns) {}
  uint64_t NowNs() const override {
    return now_.fetch_add(step_ns_, std::memory_order_relaxed) + step_ns_;
  }

 private:
  const uint64_t step_ns_;
  mutable std::atomic<uint64_t> now_{1'000'000'000};
};

// a -> b -> a with 64-byte messages; inject: fi_inject (no send
// completion), else fi_send and its completion awaited.
inline void RoundTrip(Pair& p, bool inject, uint8_t* out, uint8_t* in_a, uint8_t* in_b,
                      fi_context2* ctx) {
  fi_recv(p.b.ep, in_b, 64, nullptr, FI_ADDR_UNSPEC, &ctx[0]);
  fi_recv(p.a.ep, in_a, 64, nullptr, FI_ADDR_UNSPEC, &ctx[1]);
  if (inject) {
    fi_inject(p.a.ep, out, 64, p.a.peer);
  } else {
    fi_send(p.a.ep, out, 64, nullptr, p.a.peer, &ctx[2]);
  }
  WaitOne(p, p.b.rxcq);
  if (inject) {
    fi_inject(p.b.ep, in_b, 64, p.b.peer);
  } else {
    fi_send(p.b.ep, in_b, 64, nullptr, p.b.peer, &ctx[3]);
    WaitOne(p, p.a.txcq);
  }
  WaitOne(p, p.a.rxcq);
  if (!inject) WaitOne(p, p.b.txcq);
}

// Calls of FiRoundTrip in the whole run (google benchmark runs a case
// several times to size it): printed at exit, the divisor of callgrind's
// total.
uint64_t g_round_trips = 0;

// One round trip out of line (see the top).
__attribute__((noinline)) void FiRoundTrip(Pair& p, bool inject, uint8_t* out, uint8_t* in_a,
                                           uint8_t* in_b, fi_context2* ctx) {
  RoundTrip(p, inject, out, in_a, in_b, ctx);
  ++g_round_trips;
}

// state.range(0): 1 = fi_inject, 0 = fi_send (FiRoundTrip).
void BM_FiPingPong(benchmark::State& state) {
  const bool inject = state.range(0) == 1;
  Pair p;
  p.Open(testing::RdmHints(FI_MSG));
  uint8_t out[64] = {}, in_a[64], in_b[64];
  fi_context2 ctx[4];
  RoundTrip(p, inject, out, in_a, in_b, ctx);  // the handshake, not counted by callgrind
  for (auto _ : state) FiRoundTrip(p, inject, out, in_a, in_b, ctx);
  p.Close();
}
BENCHMARK(BM_FiPingPong)->Arg(1)->Arg(0)->ArgName("inject");

// An initiator a and a target b with an 8-byte region open to remote
// reads and writes: fi_write of 8 bytes, or an atomic on one uint64_t.
struct AtomicRig {
  Pair p;
  uint64_t region[8] = {};
  fid_mr* mr = nullptr;
  uint64_t addr = 0, key = 0;
  uint64_t operand = 1, compare = 0, result = 0;

  AtomicRig() {
    fi_info* hints = testing::RdmHints(FI_MSG | FI_RMA | FI_ATOMIC);
    p.Open(hints);
    fi_freeinfo(hints);
    fi_mr_reg(p.b.domain, region, sizeof(region), FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr,
              nullptr);
    addr = reinterpret_cast<uint64_t>(region);
    key = fi_mr_key(mr);
  }
  ~AtomicRig() {
    fi_close(&mr->fid);
    p.Close();
  }
  // kind: -1 fi_write; 0 fi_atomic SUM; 1 fi_fetch_atomic SUM; 2
  // fi_compare_atomic CSWAP. Retries while the endpoint is full.
  void Post(int kind) {
    for (;;) {
      ssize_t ret;
      switch (kind) {
        case -1:
          ret = fi_write(p.a.ep, &operand, 8, nullptr, p.a.peer, addr, key, nullptr);
          break;
        case 0:
          ret = fi_atomic(p.a.ep, &operand, 1, nullptr, p.a.peer, addr, key, FI_UINT64, FI_SUM,
                          nullptr);
          break;
        case 1:
          ret = fi_fetch_atomic(p.a.ep, &operand, 1, nullptr, &result, nullptr, p.a.peer, addr,
                                key, FI_UINT64, FI_SUM, nullptr);
          break;
        default:
          ret = fi_compare_atomic(p.a.ep, &operand, 1, nullptr, &compare, nullptr, &result,
                                  nullptr, p.a.peer, addr, key, FI_UINT64, FI_CSWAP, nullptr);
          break;
      }
      if (ret != -FI_EAGAIN) return;
      fi_cq_read(p.a.txcq, nullptr, 0);
      fi_cq_read(p.b.txcq, nullptr, 0);
    }
  }
  // Posts n of kind, keeping at most window in flight; returns seconds.
  double Run(int kind, int n, int window) {
    const auto t0 = std::chrono::steady_clock::now();
    int posted = 0, done = 0;
    fi_cq_tagged_entry e[16];
    while (done < n) {
      while (posted < n && posted - done < window) {
        Post(kind);
        ++posted;
      }
      const ssize_t got = fi_cq_read(p.a.txcq, e, 16);
      if (got > 0) done += static_cast<int>(got);
      fi_cq_read(p.b.txcq, nullptr, 0);  // the target's progress
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};

// Latency: one 8-byte fi_write, then one atomic (state.range(0): 0 base
// SUM, 1 fetch SUM, 2 compare CSWAP), each awaited, per iteration.
void BM_FiAtomicVsWrite(benchmark::State& state) {
  AtomicRig r;
  double write_s = 0, atomic_s = 0;
  for (auto _ : state) {
    write_s += r.Run(-1, 1, 1);
    atomic_s += r.Run(static_cast<int>(state.range(0)), 1, 1);
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["write_us"] = write_s / n * 1e6;
  state.counters["atomic_us"] = atomic_s / n * 1e6;
  state.counters["atomic/write"] = atomic_s / write_s;
}
BENCHMARK(BM_FiAtomicVsWrite)->Arg(0)->Arg(1)->Arg(2)->ArgName("form");

// Rate: bursts of 256 operations with 32 in flight, writes and atomics
// alternating per iteration.
void BM_FiAtomicRateVsWrite(benchmark::State& state) {
  AtomicRig r;
  constexpr int kBurst = 256, kWindow = 32;
  double write_s = 0, atomic_s = 0;
  for (auto _ : state) {
    write_s += r.Run(-1, kBurst, kWindow);
    atomic_s += r.Run(static_cast<int>(state.range(0)), kBurst, kWindow);
  }
  const double ops = static_cast<double>(state.iterations()) * kBurst;
  state.counters["write_Mops"] = ops / write_s / 1e6;
  state.counters["atomic_Mops"] = ops / atomic_s / 1e6;
  state.counters["atomic/write"] = write_s / atomic_s;  // rate ratio
}
BENCHMARK(BM_FiAtomicRateVsWrite)->Arg(0)->Arg(1)->ArgName("form");

}  // namespace
}  // namespace bypass::fi

int main(int argc, char** argv) {
  // The stepping clock for every engine endpoint (see the top).
  if (const char* step = std::getenv("BYPASS_BENCH_STEP_NS"); step != nullptr && std::atoll(step) > 0) {
    static bypass::fi::SteppingClock clock(static_cast<uint64_t>(std::atoll(step)));
    bypass::fi::SetEngineClockForBenchmark(&clock);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (bypass::fi::g_round_trips > 0) {
    std::fprintf(stderr, "FiRoundTrip calls: %llu\n",
                 static_cast<unsigned long long>(bypass::fi::g_round_trips));
  }
  return 0;
}
