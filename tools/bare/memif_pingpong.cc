// The bare DPDK memif ping-pong: rte_eth_tx_burst / rte_eth_rx_burst in a
// loop with nothing of bypass in between. It is the ceiling the raw layer is
// measured against (tools/raw_vs_bare.sh runs both in one go). Same frames,
// same payload check, same output as pingpong --layer=raw.
//
//   memif_pingpong --local [--size=64] [--iters=N] [--mode=latency|rate] [--json]
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tools/latency.h"
#include "tools/ping_wire.h"

namespace {

using bypass::tools::PingHeader;
using bypass::tools::PingKind;

constexpr size_t kHdr = 42;  // Ethernet + IPv4 + UDP

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

struct Args {
  bool server = false, local = false, json = false;
  std::string socket;
  std::string mode = "latency";
  uint64_t size = 64, iters = 100000, warmup = 1000;
};

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

void Fill(rte_mbuf* m, size_t size, uint64_t seq, PingKind kind) {
  const size_t payload = bypass::tools::PingPayloadBytes(size);
  uint8_t* d = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, static_cast<uint16_t>(kHdr + payload)));
  if (d == nullptr) std::abort();  // checked against the data room in main
  std::memset(d, 0xff, 6);           // broadcast
  std::memset(d + 6, 0x02, 6);
  d[12] = 0x08;
  d[13] = 0x00;
  std::memset(d + 14, 0, 28);
  d[14] = 0x45;
  d[23] = 17;
  const uint16_t port_be = htons(bypass::tools::kPingUdpPort);
  std::memcpy(d + 36, &port_be, 2);
  bypass::tools::WritePing(d + kHdr, size, seq, kind);
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

int Client(const Args& a, uint16_t port, rte_mempool* pool) {
  bypass::tools::RunResult r;
  r.layer = "bare-dpdk";
  r.device = "memif:" + a.socket;
  r.size = a.size;
  r.iters = a.iters;
  r.mode = a.mode;
  rte_mbuf* rx[32];
  if (a.mode == "latency") {
    std::vector<uint64_t> samples;
    samples.reserve(a.iters);
    uint64_t total = 0;
    for (uint64_t i = 0; i < a.warmup + a.iters; ++i) {
      rte_mbuf* m = rte_pktmbuf_alloc(pool);
      Fill(m, a.size, i, PingKind::kPing);
      const uint64_t t0 = NowNs();
      while (rte_eth_tx_burst(port, 0, &m, 1) == 0) {
      }
      bool got = false;
      while (!got) {
        const uint16_t n = rte_eth_rx_burst(port, 0, rx, 32);
        for (uint16_t k = 0; k < n; ++k) {
          const uint8_t* d = rte_pktmbuf_mtod(rx[k], const uint8_t*);
          if (bypass::tools::VerifyPing(d + kHdr, rx[k]->pkt_len - kHdr, a.size, i, PingKind::kPing)) got = true;
        }
        if (n != 0) rte_pktmbuf_free_bulk(rx, n);
      }
      const uint64_t rtt = NowNs() - t0;
      if (i >= a.warmup) {
        samples.push_back(rtt);
        total += rtt;
      }
    }
    r.rtt_ns = bypass::tools::Percentiles::Of(samples);
    r.msgs_per_sec = 1e9 * static_cast<double>(a.iters) / static_cast<double>(total);
  } else {
    rte_mbuf* burst[32];
    uint64_t sent = 0, elapsed = 0, received = 0;
    for (int phase = 0; phase < 2; ++phase) {
      const uint64_t goal = phase == 0 ? a.warmup : a.warmup + a.iters;
      while (sent < goal) {
        const unsigned n = static_cast<unsigned>(goal - sent < 32 ? goal - sent : 32);
        if (rte_pktmbuf_alloc_bulk(pool, burst, n) != 0) continue;
        for (unsigned k = 0; k < n; ++k) Fill(burst[k], a.size, sent + k, PingKind::kData);
        unsigned done = 0;
        while (done < n) done += rte_eth_tx_burst(port, 0, burst + done, static_cast<uint16_t>(n - done));
        sent += n;
        const uint16_t got = rte_eth_rx_burst(port, 0, rx, 32);
        if (got != 0) rte_pktmbuf_free_bulk(rx, got);
      }
      received = AskReport(port, pool, a.size, &elapsed);
    }
    r.msgs_per_sec = elapsed == 0 ? 0 : 1e9 * static_cast<double>(received) / static_cast<double>(elapsed);
    r.extra_json = ",\"received\":" + std::to_string(received) + ",\"sent\":" + std::to_string(a.iters);
  }
  rte_mbuf* m = rte_pktmbuf_alloc(pool);
  Fill(m, a.size, 0, PingKind::kFin);
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
    else if (take("--mode=")) a.mode = v;
    else if (take("--size=")) a.size = std::strtoull(v.c_str(), nullptr, 10);
    else if (take("--iters=")) a.iters = std::strtoull(v.c_str(), nullptr, 10);
    else if (take("--warmup=")) a.warmup = std::strtoull(v.c_str(), nullptr, 10);
    else {
      std::fprintf(stderr, "memif_pingpong: unknown argument %s (see the comment at the top of memif_pingpong.cc)\n", argv[i]);
      return 2;
    }
  }
  if (a.size + kHdr + 16 > RTE_MBUF_DEFAULT_DATAROOM) {
    std::fprintf(stderr, "memif_pingpong: --size up to %d\n", RTE_MBUF_DEFAULT_DATAROOM - 58);
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
