// The bare DPDK memif ping-pong: rte_eth_tx_burst / rte_eth_rx_burst in a
// loop with nothing of bypass in between. It is the ceiling the raw layer is
// measured against (tools/raw_vs_bare.sh runs both in one go). Same frames,
// same payload check, same output as pingpong --layer=raw.
//
//   memif_pingpong --local [--size=64 | --sizes=8,64,512] [--iters=N | --duration_ms=T]
//                  [--mode=latency|rate|latency,rate] [--json]
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tools/bare/bare_frame.h"
#include "tools/latency.h"
#include "tools/ping_wire.h"

namespace {

using bypass::tools::PingHeader;
using bypass::tools::PingKind;

using bypass::tools::bare::Fill;
using bypass::tools::bare::kHdr;

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

struct Args {
  bool server = false, local = false, json = false;
  std::string socket;
  bool latency = true, rate = false;  // --mode
  std::vector<uint64_t> sizes = {64};
  bool one_size = true;  // --size, not --sizes: a size that does not fit is an error
  uint64_t iters = 100000, warmup = 1000, duration_ms = 0;
};

// The largest payload one mbuf carries.
constexpr uint64_t kMaxSize = RTE_MBUF_DEFAULT_DATAROOM - kHdr - 16;

bool StartPort(const Args& a, uint16_t* port, rte_mempool** pool) {
  std::string prefix = "bare-" + std::to_string(getpid());
  std::string vdev = "--vdev=net_memif0,socket=" + a.socket +
                     ",socket-abstract=no,role=" + (a.server ? "server" : "client");
  std::vector<std::string> args = {"bare", "--lcores=0@(0-" + std::to_string(sysconf(_SC_NPROCESSORS_ONLN) - 1) + ")", "--no-pci", "--no-telemetry",
                                   "--log-level=*:warning", "--file-prefix=" + prefix, vdev};
  FILE* f = std::fopen("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages", "r");
  long free_pages = 0;
  if (f != nullptr) {
    if (std::fscanf(f, "%ld", &free_pages) != 1) free_pages = 0;
    std::fclose(f);
  }
  if (free_pages >= 64) {
    args.push_back("--in-memory");
  } else {
    args.insert(args.end(), {"--no-huge", "-m", "512", "--no-shconf"});
  }
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  if (rte_eal_init(static_cast<int>(argv.size()), argv.data()) < 0) {
    std::fprintf(stderr, "bare: rte_eal_init: %s\n", rte_strerror(rte_errno));
    return false;
  }
  *port = 0;
  *pool = rte_pktmbuf_pool_create("bare", 4095, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
  rte_eth_conf conf{};
  if (*pool == nullptr || rte_eth_dev_configure(*port, 1, 1, &conf) != 0 ||
      rte_eth_rx_queue_setup(*port, 0, 1024, SOCKET_ID_ANY, nullptr, *pool) != 0 ||
      rte_eth_tx_queue_setup(*port, 0, 1024, SOCKET_ID_ANY, nullptr) != 0 ||
      rte_eth_dev_start(*port) != 0) {
    std::fprintf(stderr, "bare: port setup failed\n");
    return false;
  }
  const uint64_t deadline = NowNs() + 10'000'000'000ull;
  rte_eth_link link{};
  do {
    rte_eth_link_get_nowait(*port, &link);
    if (NowNs() > deadline) {
      std::fprintf(stderr, "bare: memif link did not come up\n");
      return false;
    }
  } while (link.link_status != RTE_ETH_LINK_UP);
  return true;
}

int Serve(uint16_t port) {
  rte_mbuf* rx[32];
  rte_mbuf* tx[32];
  uint64_t count = 0, first = 0, last = 0;
  for (;;) {
    const uint16_t n = rte_eth_rx_burst(port, 0, rx, 32);
    uint16_t ntx = 0;
    bool fin = false;
    for (uint16_t i = 0; i < n; ++i) {
      PingHeader h{};
      uint8_t* d = rte_pktmbuf_mtod(rx[i], uint8_t*);
      if (!bypass::tools::ReadPingHeader(d + kHdr, rx[i]->pkt_len - kHdr, &h)) {
        rte_pktmbuf_free(rx[i]);
        continue;
      }
      if (h.kind == static_cast<uint32_t>(PingKind::kPing)) {
        tx[ntx++] = rx[i];
      } else if (h.kind == static_cast<uint32_t>(PingKind::kData)) {
        last = NowNs();
        if (count++ == 0) first = last;
        rte_pktmbuf_free(rx[i]);
      } else if (h.kind == static_cast<uint32_t>(PingKind::kReportAsk)) {
        PingHeader r{count, static_cast<uint32_t>(PingKind::kReport), bypass::tools::kPingMagic};
        const uint64_t elapsed = last - first;
        std::memcpy(d + kHdr, &r, sizeof(r));
        std::memcpy(d + kHdr + sizeof(r), &elapsed, sizeof(elapsed));
        tx[ntx++] = rx[i];
        count = 0;
      } else {
        fin = h.kind == static_cast<uint32_t>(PingKind::kFin);
        rte_pktmbuf_free(rx[i]);
      }
    }
    uint16_t done = 0;
    while (done < ntx) done += rte_eth_tx_burst(port, 0, tx + done, ntx - done);
    if (fin) return 0;
  }
}

uint64_t AskReport(uint16_t port, rte_mempool* pool, size_t size, uint64_t* elapsed) {
  rte_mbuf* rx[32];
  for (;;) {
    rte_mbuf* m = rte_pktmbuf_alloc(pool);
    Fill(m, size < 32 ? 32 : size, 0, PingKind::kReportAsk);
    while (rte_eth_tx_burst(port, 0, &m, 1) == 0) {
    }
    const uint64_t t0 = NowNs();
    while (NowNs() - t0 < 200'000'000) {
      const uint16_t n = rte_eth_rx_burst(port, 0, rx, 32);
      for (uint16_t i = 0; i < n; ++i) {
        PingHeader h{};
        uint8_t* d = rte_pktmbuf_mtod(rx[i], uint8_t*);
        if (bypass::tools::ReadPingHeader(d + kHdr, rx[i]->pkt_len - kHdr, &h) &&
            h.kind == static_cast<uint32_t>(PingKind::kReport)) {
          std::memcpy(elapsed, d + kHdr + sizeof(h), sizeof(*elapsed));
          rte_pktmbuf_free_bulk(rx, n);
          return h.seq;
        }
      }
      rte_pktmbuf_free_bulk(rx, n);
    }
  }
}

// Whether the measuring of a phase that started at t0 (with `done` so far) goes on.
bool GoesOn(const Args& a, uint64_t t0, uint64_t done) {
  return a.duration_ms == 0 ? done < a.iters : done == 0 || NowNs() - t0 < a.duration_ms * 1'000'000;
}

bypass::tools::LatencyResult Latency(const Args& a, uint16_t port, rte_mempool* pool, uint64_t size,
                                     uint64_t* seq) {
  bypass::tools::LatencyResult r;
  r.size = size;
  rte_mbuf* rx[32];
  std::vector<uint64_t> samples;
  samples.reserve(a.duration_ms == 0 ? a.iters : 1024);
  auto round_trip = [&]() {
    rte_mbuf* m = rte_pktmbuf_alloc(pool);
    const uint64_t s = (*seq)++;
    Fill(m, size, s, PingKind::kPing);
    const uint64_t t0 = NowNs();
    while (rte_eth_tx_burst(port, 0, &m, 1) == 0) {
    }
    // The clock stops on the reply's header; its pattern is checked after,
    // as pingpong's layers do.
    uint64_t got_at = 0;
    while (got_at == 0) {
      const uint16_t n = rte_eth_rx_burst(port, 0, rx, 32);
      for (uint16_t k = 0; k < n; ++k) {
        const uint8_t* d = rte_pktmbuf_mtod(rx[k], const uint8_t*);
        const size_t len = rx[k]->pkt_len < kHdr ? 0 : rx[k]->pkt_len - kHdr;
        if (got_at != 0 || !bypass::tools::IsPingHeader(d + kHdr, len, s, PingKind::kPing)) continue;
        got_at = NowNs();
        if (!bypass::tools::VerifyPing(d + kHdr, len, size, s, PingKind::kPing)) {
          std::fprintf(stderr, "memif_pingpong: the reply to ping %llu came back with different bytes\n",
                       static_cast<unsigned long long>(s));
          std::exit(1);
        }
      }
      if (n != 0) rte_pktmbuf_free_bulk(rx, n);
    }
    return got_at - t0;
  };
  // As pingpong's: a timed warm-up stops after a quarter of the phase, but
  // not before 50 ms.
  const uint64_t warm_t0 = NowNs();
  const uint64_t warm_ns = std::max<uint64_t>(50'000'000, a.duration_ms * 250'000);
  for (uint64_t i = 0; i < a.warmup && (a.duration_ms == 0 || NowNs() - warm_t0 < warm_ns); ++i) {
    round_trip();
  }
  uint64_t total = 0;
  const uint64_t t0 = NowNs();
  while (GoesOn(a, t0, samples.size())) {
    samples.push_back(round_trip());
    total += samples.back();
  }
  r.iters = samples.size();
  r.rtt_ns = bypass::tools::Percentiles::Of(samples);
  r.msgs_per_sec = 1e9 * static_cast<double>(r.iters) / static_cast<double>(total);
  return r;
}

bypass::tools::RateResult Rate(const Args& a, uint16_t port, rte_mempool* pool, uint64_t size) {
  bypass::tools::RateResult r;
  r.size = size;
  r.wire_bytes = bypass::tools::PingPayloadBytes(size);
  r.window = 32;
  rte_mbuf* rx[32];
  rte_mbuf* burst[32];
  uint64_t elapsed = 0;
  for (int phase = 0; phase < 2; ++phase) {
    const uint64_t t0 = NowNs();
    uint64_t sent = 0;
    while (phase == 0 ? sent < a.warmup : GoesOn(a, t0, sent)) {
      const uint64_t left = phase == 0 ? a.warmup - sent : (a.duration_ms == 0 ? a.iters - sent : 32);
      const unsigned n = static_cast<unsigned>(left < 32 ? left : 32);
      if (rte_pktmbuf_alloc_bulk(pool, burst, n) != 0) continue;
      for (unsigned k = 0; k < n; ++k) Fill(burst[k], size, sent + k, PingKind::kData);
      unsigned done = 0;
      while (done < n) done += rte_eth_tx_burst(port, 0, burst + done, static_cast<uint16_t>(n - done));
      sent += n;
      const uint16_t got = rte_eth_rx_burst(port, 0, rx, 32);
      if (got != 0) rte_pktmbuf_free_bulk(rx, got);
    }
    r.msgs = AskReport(port, pool, size, &elapsed);  // the first resets the server's count
    r.sent = sent;
  }
  r.seconds = static_cast<double>(elapsed) / 1e9;
  r.msg_rate = elapsed == 0 ? 0 : 1e9 * static_cast<double>(r.msgs) / static_cast<double>(elapsed);
  r.mbytes_per_s = r.msg_rate * static_cast<double>(r.wire_bytes) / 1e6;
  return r;
}

int Client(const Args& a, uint16_t port, rte_mempool* pool) {
  bypass::tools::RunResult r;
  r.layer = "bare-dpdk";
  r.device = "memif:" + a.socket;
  const std::string too_big = "one mbuf carries up to " + std::to_string(kMaxSize) + " B";
  uint64_t seq = 0;
  for (uint64_t size : a.sizes) {
    if (!a.latency) break;
    if (size > kMaxSize) {
      r.latencies.emplace_back().size = size;
      r.latencies.back().skipped = too_big;
      continue;
    }
    r.latencies.push_back(Latency(a, port, pool, size, &seq));
  }
  for (uint64_t size : a.sizes) {
    if (!a.rate) break;
    if (size > kMaxSize) {
      r.rates.emplace_back().size = size;
      r.rates.back().skipped = too_big;
      continue;
    }
    r.rates.push_back(Rate(a, port, pool, size));
  }
  rte_mbuf* m = rte_pktmbuf_alloc(pool);
  Fill(m, 16, 0, PingKind::kFin);
  while (rte_eth_tx_burst(port, 0, &m, 1) == 0) {
  }
  if (a.json) {
    bypass::tools::PrintJson(r);
  } else {
    bypass::tools::PrintText(r);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    std::string v;
    auto take = [&](const char* key) {
      const size_t n = std::strlen(key);
      if (s.compare(0, n, key) != 0) return false;
      v = s.substr(n);
      return true;
    };
    if (s == "--server") a.server = true;
    else if (s == "--local") a.local = true;
    else if (s == "--json") a.json = true;
    else if (take("--socket=")) a.socket = v;
    else if (take("--mode=")) {
      a.latency = v == "latency" || v == "latency,rate";
      a.rate = v == "rate" || v == "latency,rate";
      if (!a.latency && !a.rate) {
        std::fprintf(stderr, "memif_pingpong: --mode=%s is not latency, rate or latency,rate\n", v.c_str());
        return 2;
      }
    }
    else if (take("--size=")) a.sizes = {std::strtoull(v.c_str(), nullptr, 10)}, a.one_size = true;
    else if (take("--sizes=")) {
      a.sizes.clear();
      a.one_size = false;
      for (size_t at = 0; at <= v.size();) {
        const size_t comma = std::min(v.find(',', at), v.size());
        char* end = nullptr;
        const std::string item = v.substr(at, comma - at);
        const uint64_t n = std::strtoull(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || n == 0) {
          std::fprintf(stderr, "memif_pingpong: --sizes=%s: give byte counts separated by commas\n", v.c_str());
          return 2;
        }
        a.sizes.push_back(n);
        at = comma + 1;
      }
    }
    else if (take("--iters=")) a.iters = std::strtoull(v.c_str(), nullptr, 10);
    else if (take("--warmup=")) a.warmup = std::strtoull(v.c_str(), nullptr, 10);
    else if (take("--duration_ms=")) a.duration_ms = std::strtoull(v.c_str(), nullptr, 10);
    else {
      std::fprintf(stderr, "memif_pingpong: unknown argument %s (see the comment at the top of memif_pingpong.cc)\n", argv[i]);
      return 2;
    }
  }
  if (a.one_size && a.sizes[0] > kMaxSize) {
    std::fprintf(stderr, "memif_pingpong: --size up to %llu\n", static_cast<unsigned long long>(kMaxSize));
    return 2;
  }
  if (a.local) {
    a.socket = "/tmp/bypass-bare-" + std::to_string(getpid()) + ".sock";
    unlink(a.socket.c_str());
    pid_t child = fork();
    if (child == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      a.server = true;
    } else {
      a.server = false;
      // DPDK's memif client fails to start when the server's socket is not
      // there yet: wait for the server process to create it.
      for (int i = 0; i < 1000 && access(a.socket.c_str(), F_OK) != 0; ++i) usleep(10000);
    }
    uint16_t port;
    rte_mempool* pool;
    if (!StartPort(a, &port, &pool)) return 1;
    if (a.server) _exit(Serve(port));
    int rc = Client(a, port, pool);
    int status;
    waitpid(child, &status, 0);
    unlink(a.socket.c_str());
    return rc;
  }
  if (a.socket.empty()) {
    std::fprintf(stderr, "memif_pingpong: give --local, or --socket=PATH [--server]\n");
    return 2;
  }
  uint16_t port;
  rte_mempool* pool;
  if (!StartPort(a, &port, &pool)) return 1;
  return a.server ? Serve(port) : Client(a, port, pool);
}
