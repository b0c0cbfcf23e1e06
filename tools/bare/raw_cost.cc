// What one round trip of pingpong's raw layer costs against the bare DPDK
// loop's, in instructions: both run in this one process and thread over one
// net_ring port (its TX ring is its RX ring), so each step of a round trip
// runs once, with no waiting, and an instruction count under callgrind
// repeats exactly whatever the machine's load (wall-clock ping-pongs on a
// shared 2-core VM do not). tools/raw_cost.sh runs it under callgrind and
// prints instructions per round trip.
//
// A round trip here is what both ping-pongs do for one ping, client and
// server together, except the two clock reads: the client writes a ping
// into a new buffer and sends it; the server receives it, checks its
// header and echoes it; the client receives the echo, checks its header
// and its pattern, and frees it. The raw side runs the raw layer's own
// transports (tools/pingpong/raw_transport.h) the way machine.h drives
// them; the bare side memif_pingpong's steps (rte_pktmbuf_alloc, Fill,
// rte_eth_tx_burst, rte_eth_rx_burst, rte_pktmbuf_free_bulk).
//
//   raw_cost --which=raw|bare [--iters=N] [--size=64]
//
// Counted under callgrind with --toggle-collect='*Measure*' (the warm-up
// round trips run outside Measure).
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "driver/device.h"
#include "tools/bare/bare_frame.h"
#include "tools/ping_wire.h"
#include "tools/pingpong/raw.h"
#include "tools/pingpong/raw_transport.h"

namespace {

using bypass::tools::PingKind;
using bypass::tools::bare::kHdr;

[[noreturn]] void Fail(const char* what, uint64_t seq) {
  std::fprintf(stderr, "raw_cost: %s (round trip %llu)\n", what, static_cast<unsigned long long>(seq));
  std::exit(1);
}

// The bare loop's round trip, client and server (memif_pingpong.cc).
struct Bare {
  uint16_t port;
  rte_mempool* pool;
  uint64_t size;

  void RoundTrip(uint64_t seq) {
    rte_mbuf* m = rte_pktmbuf_alloc(pool);
    if (m == nullptr) Fail("no mbuf", seq);
    bypass::tools::bare::Fill(m, size, seq, PingKind::kPing);
    while (rte_eth_tx_burst(port, 0, &m, 1) == 0) {
    }
    // The server.
    rte_mbuf* rx[32];
    rte_mbuf* tx[32];
    const uint16_t n = rte_eth_rx_burst(port, 0, rx, 32);
    uint16_t ntx = 0;
    for (uint16_t i = 0; i < n; ++i) {
      bypass::tools::PingHeader h{};
      const uint8_t* d = rte_pktmbuf_mtod(rx[i], const uint8_t*);
      if (bypass::tools::ReadPingHeader(d + kHdr, rx[i]->pkt_len - kHdr, &h) &&
          h.kind == static_cast<uint32_t>(PingKind::kPing)) {
        tx[ntx++] = rx[i];
      } else {
        rte_pktmbuf_free(rx[i]);
      }
    }
    uint16_t done = 0;
    while (done < ntx) done += rte_eth_tx_burst(port, 0, tx + done, ntx - done);
    // The client again.
    const uint16_t r = rte_eth_rx_burst(port, 0, rx, 32);
    bool got = false;
    for (uint16_t k = 0; k < r; ++k) {
      const uint8_t* d = rte_pktmbuf_mtod(rx[k], const uint8_t*);
      const size_t len = rx[k]->pkt_len < kHdr ? 0 : rx[k]->pkt_len - kHdr;
      if (got || !bypass::tools::IsPingHeader(d + kHdr, len, seq, PingKind::kPing)) continue;
      got = bypass::tools::VerifyPing(d + kHdr, len, size, seq, PingKind::kPing);
    }
    if (r != 0) rte_pktmbuf_free_bulk(rx, r);
    if (!got) Fail("bare: no intact echo", seq);
  }
};

// The raw layer's round trip: RawClient and RawServer as PingClient and
// Serve (machine.h) drive them for one kPing.
struct Raw {
  bypass::tools::raw::RawClient& client;
  bypass::tools::raw::RawServer& server;
  uint64_t size;

  void RoundTrip(uint64_t seq) {
    const size_t bytes = bypass::tools::PingPayloadBytes(size);
    if (!*client.ArmReply()) Fail("raw: ArmReply", seq);
    uint8_t* buf = client.Buffer(bytes);
    if (buf == nullptr) Fail("raw: no buffer", seq);
    bypass::tools::WritePing(buf, size, seq, PingKind::kPing);
    if (!*client.Send(bytes)) Fail("raw: send refused", seq);
    // The server: Flush, Poll, the kPing's echo, Flush.
    bypass::tools::raw::RawServer::Msg msgs[bypass::tools::raw::RawServer::kBurst];
    (void)server.Flush();
    const size_t n = *server.Poll(msgs);
    for (size_t k = 0; k < n; ++k) {
      bypass::tools::PingHeader h{};
      if (bypass::tools::ReadPingHeader(msgs[k].data, msgs[k].len, &h) &&
          h.kind == static_cast<uint32_t>(PingKind::kPing)) {
        server.Reply(msgs[k]);
      } else {
        server.Release(msgs[k]);
      }
    }
    (void)server.Flush();
    // The client again.
    bypass::tools::Received in[bypass::tools::raw::RawClient::kBurst];
    const size_t r = *client.Poll(in);
    bool got = false;
    for (size_t k = 0; k < r && !got; ++k) {
      if (!bypass::tools::IsPingHeader(in[k].data, in[k].len, seq, PingKind::kPing)) continue;
      got = in[k].len == bytes && bypass::tools::VerifyPing(in[k].data, in[k].len, size, seq,
                                                            PingKind::kPing);
    }
    client.Release();
    if (!got) Fail("raw: no intact echo", seq);
  }
};

// The round trips callgrind counts (--toggle-collect='*Measure*').
template <class Loop>
__attribute__((noinline)) void Measure(Loop& loop, uint64_t first, uint64_t iters) {
  for (uint64_t i = 0; i < iters; ++i) loop.RoundTrip(first + i);
}

template <class Loop>
void Run(Loop& loop, uint64_t iters) {
  constexpr uint64_t kWarmup = 1000;
  for (uint64_t i = 0; i < kWarmup; ++i) loop.RoundTrip(i);
  Measure(loop, kWarmup, iters);
}

}  // namespace

int main(int argc, char** argv) {
  std::string which;
  uint64_t iters = 100000, size = 64;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (s.rfind("--which=", 0) == 0) {
      which = s.substr(8);
    } else if (s.rfind("--iters=", 0) == 0) {
      iters = std::strtoull(s.c_str() + 8, nullptr, 10);
    } else if (s.rfind("--size=", 0) == 0) {
      size = std::strtoull(s.c_str() + 7, nullptr, 10);
    } else {
      std::fprintf(stderr, "raw_cost: unknown argument %s (--which=raw|bare, --iters, --size)\n",
                   argv[i]);
      return 2;
    }
  }
  if ((which != "raw" && which != "bare") || size == 0 || size > 1400) {
    std::fprintf(stderr, "raw_cost: give --which=raw or --which=bare, and --size from 1 to 1400\n");
    return 2;
  }
  // The EAL is this program's, on small pages with no VA space reserved
  // beyond them: callgrind cannot run DPDK's default reservation. The
  // driver then takes it as an embedding application's.
  const std::string prefix = "--file-prefix=raw_cost-" + std::to_string(getpid());
  std::vector<std::string> eal = {"raw_cost", "--lcores=0",   "--no-huge",        "-m",
                                  "256",      "--no-shconf", "--no-pci",         "--no-telemetry",
                                  "--log-level=*:error",       prefix};
  std::vector<char*> eal_argv;
  for (std::string& a : eal) eal_argv.push_back(a.data());
  if (rte_eal_init(static_cast<int>(eal_argv.size()), eal_argv.data()) < 0) {
    std::fprintf(stderr, "raw_cost: rte_eal_init failed\n");
    return 1;
  }
  const std::string name = "net_ring_rc";  // the ring PMD refuses long names
  auto dev = bypass::driver::OpenDevice("dpdk:" + name);
  if (!dev.ok()) {
    std::fprintf(stderr, "raw_cost: %s\n", std::string(dev.status().message()).c_str());
    return 1;
  }
  if (which == "bare") {
    // As memif_pingpong's pool: no per-lcore cache.
    Bare bare{0, rte_pktmbuf_pool_create("raw_cost", 4095, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
                                         SOCKET_ID_ANY),
              size};
    if (bare.pool == nullptr || rte_eth_dev_get_port_by_name(name.c_str(), &bare.port) != 0) {
      std::fprintf(stderr, "raw_cost: no pool or no port %s\n", name.c_str());
      return 1;
    }
    Run(bare, iters);
  } else {
    bypass::tools::PingOptions opts;
    bypass::tools::raw::RawClient client(**dev, opts);
    bypass::tools::raw::RawServer server((*dev)->queue(0));
    Raw raw{client, server, size};
    Run(raw, iters);
  }
  std::printf("%s: %llu round trips of %llu B\n", which.c_str(),
              static_cast<unsigned long long>(iters), static_cast<unsigned long long>(size));
  return 0;
}
