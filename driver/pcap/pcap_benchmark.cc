// What capturing costs the data path: bursts of 32 frames from one loopback
// port to another, with and without `pcap=` on both (to /dev/null, with a
// budget that never runs out, so every frame is copied). The writer
// thread's work is not the data path's and is not in the time.
//   bazel run --config=opt //driver/pcap:pcap_benchmark
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "driver/device.h"
#include "driver/net_headers.h"

namespace bypass::driver {
namespace {

void BM_Burst(benchmark::State& state) {
  const size_t payload = static_cast<size_t>(state.range(0));
  // 0: no capture; 1: classic pcap; 2: pcapng.
  const int64_t capture = state.range(1);
  static int segment = 0;
  const std::string keys = capture == 0   ? ""
                           : capture == 1 ? ",pcap=/dev/null,pcap_max_mb=1048576"
                                          : ",pcap=/dev/null,pcap_max_mb=1048576,pcap_format=pcapng";
  const std::string seg = absl::StrCat("pcap-bench-", segment++);
  std::unique_ptr<Device> a = *OpenDevice(absl::StrCat("loopback:", seg, keys));
  std::unique_ptr<Device> b = *OpenDevice(absl::StrCat("loopback:", seg, keys));
  const UdpFlow flow{a->info().mac, b->info().mac, a->info().ipv4, b->info().ipv4, 7000, 7001};
  constexpr size_t kBurst = 32;
  Packet* pkts[kBurst];
  for (auto _ : state) {
    if (!a->queue(0).AllocBulk({pkts, kBurst})) {
      state.SkipWithError("no buffers");
      break;
    }
    for (Packet* p : pkts) {
      p->len = static_cast<uint32_t>(WriteUdpHeaders(flow, payload, {p->data, p->capacity},
                                                     UdpChecksumFill::kNone));
    }
    const uint16_t sent = a->queue(0).TxBurst({pkts, kBurst});
    if (sent < kBurst) a->queue(0).FreeBulk({pkts + sent, kBurst - sent});
    size_t got = 0;
    while (got < sent) {
      const uint16_t n = b->queue(0).RxBurst({pkts, kBurst});
      b->queue(0).FreeBulk({pkts, n});
      got += n;
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBurst));
}
BENCHMARK(BM_Burst)->ArgsProduct({{22, 1458}, {0, 1, 2}});

}  // namespace
}  // namespace bypass::driver

BENCHMARK_MAIN();
