// The RDM engine over two intra-host (shared-memory) devices in one
// process, both ends in one thread: the same-host path of the default
// domain without its second process, so that callgrind counts what one
// round trip costs exactly, on a loaded machine as on a quiet one
// (fabric/rdm/PROTOCOL.md, "The same-host path").
//   bazel run -c opt //fabric/rdm:shm_benchmark
// Arg 0: message bytes; arg 1: how the send completes, as the fi layer asks
// for it: 0 FI_TRANSMIT_COMPLETE (kSendAckNow: the completion waits for
// the peer's ACK, asked for at once), 1 FI_INJECT_COMPLETE (kSendBuffered:
// copied at once, completed at once); arg 2: 1 the default domain's
// composite device (shm:DIR+udp:127.0.0.1), 0 the intra-host device
// alone. Each round trip is one out-of-line
// call (ShmRoundTrip):
//   valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*ShmRoundTrip*'
//     bazel-bin/fabric/rdm/shm_benchmark --benchmark_filter='BM_ShmPingPong/8/0/1'
//     --benchmark_min_time=0.05
// (one command line), then callgrind_annotate: instructions per call.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "driver/clock.h"
#include "driver/device.h"
#include "driver/uri.h"
#include "fabric/rdm/rdm.h"

namespace bypass::rdm {
namespace {

// composite: the default domain's device (shm:DIR+udp:127.0.0.1), else
// the intra-host device alone.
std::unique_ptr<driver::Device> OpenShm(const std::string& dir, bool composite) {
  auto dev = driver::OpenDevice(composite ? absl::StrCat("shm:", dir, "+udp:127.0.0.1")
                                          : absl::StrCat("shm:", dir, ",ip=127.0.0.1"));
  if (!dev.ok()) {
    std::fprintf(stderr, "%s\n", dev.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(dev);
}

// Two endpoints, each on its own intra-host device (its own area, lanes
// and registry links) in one private registry directory.
struct ShmPair {
  explicit ShmPair(bool composite) {
    dir = absl::StrCat(getenv("TMPDIR") != nullptr ? getenv("TMPDIR") : "/tmp",
                       "/shm_bench_XXXXXX");
    if (mkdtemp(dir.data()) == nullptr) {
      std::perror("mkdtemp");
      std::exit(1);
    }
    a = OpenShm(dir, composite);
    b = OpenShm(dir, composite);
    pa = std::make_unique<Port>(a->queue(0), a->info());
    pb = std::make_unique<Port>(b->queue(0), b->info());
    EndpointConfig c;
    c.max_msg_size = 64u << 20;
    c.inject_size = 4096;  // as the fi layer sets it
    c.udp_port = 40001;
    ea = *Endpoint::Create(*pa, driver::SteadyClock::Get(), c);
    c.udp_port = 40002;
    eb = *Endpoint::Create(*pb, driver::SteadyClock::Get(), c);
    to_b = *ea->InsertPeer(eb->address());
    to_a = *eb->InsertPeer(ea->address());
  }
  ~ShmPair() {
    ea.reset();
    eb.reset();
    pa.reset();
    pb.reset();
    a.reset();
    b.reset();
    std::error_code ignored;  // what the devices left (registry files)
    std::filesystem::remove_all(dir, ignored);
  }
  std::string dir;
  std::unique_ptr<driver::Device> a, b;
  std::unique_ptr<Port> pa, pb;
  std::unique_ptr<Endpoint> ea, eb;
  PeerId to_b, to_a;
};

// One round trip of `size` bytes: a sends, b receives and answers, a
// receives; each send's completion is awaited as the fi layer's ping-pong
// does (out of line: see the top).
__attribute__((noinline)) void ShmRoundTrip(ShmPair& p, size_t size, uint32_t flags, uint8_t* out,
                                            uint8_t* in_a, uint8_t* in_b) {
  p.eb->PostRecv({.buf = in_b, .len = size});
  p.ea->PostRecv({.buf = in_a, .len = size});
  p.ea->Send({.dest = p.to_b, .buf = out, .len = size, .flags = flags});
  // b's receive, then a's send completion (either order is possible).
  int a_done = 0;
  int b_done = 0;
  Completion c;
  while (b_done == 0) {
    p.eb->Progress();
    p.ea->Progress();
    b_done += static_cast<int>(p.eb->PollCompletions({&c, 1}));
    a_done += static_cast<int>(p.ea->PollCompletions({&c, 1}));
  }
  p.eb->Send({.dest = p.to_a, .buf = in_b, .len = size, .flags = flags});
  int b_sent = 0;
  while (a_done < 2 || b_sent == 0) {
    p.ea->Progress();
    p.eb->Progress();
    a_done += static_cast<int>(p.ea->PollCompletions({&c, 1}));
    b_sent += static_cast<int>(p.eb->PollCompletions({&c, 1}));
  }
}

void BM_ShmPingPong(benchmark::State& state) {
  const size_t size = static_cast<size_t>(state.range(0));
  const uint32_t flags = state.range(1) == 0 ? kSendAckNow : kSendBuffered;
  ShmPair p(state.range(2) != 0);
  std::vector<uint8_t> out(size, 1), in_a(size), in_b(size);
  for (int i = 0; i < 100; ++i) ShmRoundTrip(p, size, flags, out.data(), in_a.data(), in_b.data());
  const uint64_t sent0 = p.ea->counters().tx_packets + p.eb->counters().tx_packets;
  for (auto _ : state) ShmRoundTrip(p, size, flags, out.data(), in_a.data(), in_b.data());
  const uint64_t sent = p.ea->counters().tx_packets + p.eb->counters().tx_packets - sent0;
  state.counters["frames_per_rt"] = static_cast<double>(sent) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_ShmPingPong)->ArgsProduct({{8, 512, 4096}, {0, 1}, {0, 1}});

}  // namespace
}  // namespace bypass::rdm

BENCHMARK_MAIN();
