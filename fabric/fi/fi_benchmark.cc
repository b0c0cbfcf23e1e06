// The fi_* facade in one process over two loopback domains, through the
// public libfabric API only (the static library): an idle fi_cq_read, and
// 64-byte ping-pong round trips with fi_inject and with fi_send (whose
// completions the sender waits for, as fi_pingpong does above its inject
// size). Compare with //fabric/rdm:engine_benchmark's BM_RdmPingPong, the
// same exchange on the engine alone: the difference is the facade.
//   bazel run --config=opt //fabric/fi:fi_benchmark
#include <cstdint>

#include "benchmark/benchmark.h"
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

// a -> b -> a with 64-byte messages; state.range(0): 1 = fi_inject (no send
// completion), 0 = fi_send and its completion awaited.
void BM_FiPingPong(benchmark::State& state) {
  const bool inject = state.range(0) == 1;
  Pair p;
  p.Open(testing::RdmHints(FI_MSG));
  uint8_t out[64] = {}, in_a[64], in_b[64];
  fi_context2 ctx[4];
  for (auto _ : state) {
    fi_recv(p.b.ep, in_b, sizeof(in_b), nullptr, FI_ADDR_UNSPEC, &ctx[0]);
    fi_recv(p.a.ep, in_a, sizeof(in_a), nullptr, FI_ADDR_UNSPEC, &ctx[1]);
    if (inject) {
      fi_inject(p.a.ep, out, sizeof(out), p.a.peer);
    } else {
      fi_send(p.a.ep, out, sizeof(out), nullptr, p.a.peer, &ctx[2]);
    }
    WaitOne(p, p.b.rxcq);
    if (inject) {
      fi_inject(p.b.ep, in_b, sizeof(in_b), p.b.peer);
    } else {
      fi_send(p.b.ep, in_b, sizeof(in_b), nullptr, p.b.peer, &ctx[3]);
      WaitOne(p, p.a.txcq);
    }
    WaitOne(p, p.a.rxcq);
    if (!inject) WaitOne(p, p.b.txcq);
  }
  p.Close();
}
BENCHMARK(BM_FiPingPong)->Arg(1)->Arg(0)->ArgName("inject");

}  // namespace
}  // namespace bypass::fi

BENCHMARK_MAIN();
