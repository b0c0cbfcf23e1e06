// A DPDK application that embeds bypass (README.md here walks through it).
// It owns the EAL and port 0 (two queue pairs): on one lcore its pipeline
// forwards ordinary UDP traffic of queue 0 through rte_ring stages (rx ->
// ring -> worker -> ring -> tx, the worker reflecting each datagram to its
// sender), while on another lcore bypass attaches to queue 1
// (dpdk:port=0,queues=1-1) and serves an RDM endpoint that echoes every
// message back. The main lcore waits and reports.
//
// --role=peer is the other end of the test over memif: the same port
// layout, ordinary datagrams sent on queue 0 and counted back, RDM
// messages sent on queue 1 by a bypass endpoint and checked when echoed.
// No device here steers by UDP port, so the peer sends each kind of
// traffic on the queue that carries it (memif pairs queue i with queue i).
//
//   pipeline EAL-ARGS -- --role=app|peer [--packets=N] [--messages=M]
//            [--ip=A.B.C.D] [--peer-ip=A.B.C.D] [--peer-mac=MAC]
//            [--stop-file=PATH] [--seconds=S]
//
// Prints one JSON line of counts; exits 0 when nothing was lost.
#include <rte_common.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_pause.h>
#include <rte_ring.h>
#include <rte_udp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "driver/clock.h"
#include "driver/device.h"
#include "driver/dpdk/eal.h"
#include "fabric/rdm/rdm.h"
#include "fabric/stats/stats.h"

namespace {

using bypass::driver::Ipv4Address;
using bypass::driver::MacAddress;

constexpr uint16_t kPort = 0;
constexpr uint16_t kPipelineQueue = 0;
constexpr uint16_t kBypassQueue = 1;
constexpr uint16_t kRdmUdpPort = 7000;
constexpr uint16_t kOrdinaryUdpPort = 9000;
constexpr uint16_t kBurst = 32;
constexpr uint32_t kMaxMessage = 9000;  // several packets each over memif's 1500 B

struct Options {
  std::string role;
  uint64_t packets = 10000;
  uint64_t messages = 500;
  Ipv4Address ip;
  Ipv4Address peer_ip;
  MacAddress peer_mac;
  std::string stop_file;
  uint64_t seconds = 25;
};

// What each side counted; the lcores write their own fields, main reads
// them after rte_eal_mp_wait_lcore.
struct Counts {
  // The pipeline (app), or the ordinary traffic (peer).
  uint64_t rx = 0, forwarded = 0, tx = 0, ring_full = 0;
  uint64_t sent = 0, returned = 0, duplicates = 0, corrupt = 0;
  // bypass.
  uint64_t messages_received = 0, messages_echoed = 0;
  uint64_t messages_sent = 0, echoes_ok = 0, echoes_bad = 0, errors = 0;
  std::string rdm;  // the engine's counters at the end
  std::string failure;
};

Options g_opts;
Counts g_counts;
std::atomic<bool> g_stop{false};
std::atomic<bool> g_pipeline_done{false};  // the lcore's share of the work is done
std::atomic<bool> g_bypass_done{false};
// Lcores that returned: main reads their counts after both did (a
// synchronisation the sanitizers see, unlike DPDK's own wait).
std::atomic<int> g_lcores_exited{0};
// Set (release) by main once the options and the port are ready, read
// (acquire) first thing on each lcore: DPDK's launch hands the lcores over
// through its own, uninstrumented synchronisation, which the sanitizers
// do not see.
std::atomic<bool> g_ready{false};
void AwaitReady() {
  while (!g_ready.load(std::memory_order_acquire)) rte_pause();
}
rte_mempool* g_pool = nullptr;

uint64_t NowNs() { return bypass::driver::SteadyClock::Get().NowNs(); }

// ---- The pipeline's stages (app). Each moves at most one burst and never
// drops: a stage takes only what the next ring has room for.

struct Pipeline {
  rte_ring* to_worker;
  rte_ring* to_tx;
  rte_mbuf* tx_pending[kBurst];
  uint16_t tx_n = 0, tx_off = 0;
};

void RxStage(Pipeline& p) {
  rte_mbuf* m[kBurst];
  const uint16_t room = static_cast<uint16_t>(std::min<unsigned>(kBurst, rte_ring_free_count(p.to_worker)));
  if (room == 0) {
    ++g_counts.ring_full;
    return;
  }
  const uint16_t n = rte_eth_rx_burst(kPort, kPipelineQueue, m, room);
  if (n == 0) return;
  g_counts.rx += n;
  rte_ring_enqueue_burst(p.to_worker, reinterpret_cast<void**>(m), n, nullptr);  // room was there
}

// Sends the datagram back where it came from: addresses and ports swapped
// (the checksums stay valid: each sum is over the same words).
void Reflect(rte_mbuf* m) {
  auto* eth = rte_pktmbuf_mtod(m, rte_ether_hdr*);
  std::swap(eth->src_addr, eth->dst_addr);
  if (eth->ether_type != rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4)) return;
  auto* ip = reinterpret_cast<rte_ipv4_hdr*>(eth + 1);
  const rte_be32_t src_ip = ip->src_addr;
  ip->src_addr = ip->dst_addr;
  ip->dst_addr = src_ip;
  if (ip->next_proto_id != IPPROTO_UDP) return;
  auto* udp = reinterpret_cast<rte_udp_hdr*>(reinterpret_cast<uint8_t*>(ip) + rte_ipv4_hdr_len(ip));
  const rte_be16_t src_port = udp->src_port;
  udp->src_port = udp->dst_port;
  udp->dst_port = src_port;
}

void WorkerStage(Pipeline& p) {
  void* m[kBurst];
  const unsigned room = std::min<unsigned>(kBurst, rte_ring_free_count(p.to_tx));
  const unsigned n = rte_ring_dequeue_burst(p.to_worker, m, room, nullptr);
  for (unsigned i = 0; i < n; ++i) Reflect(static_cast<rte_mbuf*>(m[i]));
  g_counts.forwarded += n;
  rte_ring_enqueue_burst(p.to_tx, m, n, nullptr);
}

void TxStage(Pipeline& p) {
  if (p.tx_off == p.tx_n) {
    p.tx_n = static_cast<uint16_t>(
        rte_ring_dequeue_burst(p.to_tx, reinterpret_cast<void**>(p.tx_pending), kBurst, nullptr));
    p.tx_off = 0;
  }
  if (p.tx_off < p.tx_n) {
    const uint16_t took =
        rte_eth_tx_burst(kPort, kPipelineQueue, p.tx_pending + p.tx_off, p.tx_n - p.tx_off);
    p.tx_off = static_cast<uint16_t>(p.tx_off + took);
    g_counts.tx += took;
  }
}

int PipelineLcore(void*) {
  AwaitReady();
  Pipeline p;
  p.to_worker = rte_ring_create("to_worker", 1024, static_cast<int>(rte_socket_id()),
                                RING_F_SP_ENQ | RING_F_SC_DEQ);
  p.to_tx = rte_ring_create("to_tx", 1024, static_cast<int>(rte_socket_id()),
                            RING_F_SP_ENQ | RING_F_SC_DEQ);
  if (p.to_worker == nullptr || p.to_tx == nullptr) {
    g_counts.failure = std::string("rte_ring_create: ") + rte_strerror(rte_errno);
    g_pipeline_done = true;
    ++g_lcores_exited;
    return -1;
  }
  // One lcore runs the three stages in turn; the rings are single-producer
  // single-consumer, so each stage can move to an lcore of its own as is.
  while (!g_stop.load(std::memory_order_relaxed)) {
    RxStage(p);
    WorkerStage(p);
    TxStage(p);
    if (g_counts.tx >= g_opts.packets) g_pipeline_done.store(true, std::memory_order_relaxed);
  }
  g_pipeline_done = true;
  ++g_lcores_exited;
  return 0;
}

// ---- The ordinary traffic (peer): datagrams carrying a sequence number,
// at most a ring's worth outstanding.

constexpr uint32_t kMagic = 0x70697065;  // "pipe"
struct Datagram {
  uint32_t magic;
  uint32_t seq;
};

rte_mbuf* MakeDatagram(uint32_t seq) {
  rte_mbuf* m = rte_pktmbuf_alloc(g_pool);
  if (m == nullptr) return nullptr;
  const uint16_t len = sizeof(rte_ether_hdr) + sizeof(rte_ipv4_hdr) + sizeof(rte_udp_hdr) + 64;
  auto* eth = reinterpret_cast<rte_ether_hdr*>(rte_pktmbuf_append(m, len));
  std::memset(eth, 0, len);
  rte_eth_macaddr_get(kPort, &eth->src_addr);
  std::memcpy(eth->dst_addr.addr_bytes, g_opts.peer_mac.bytes.data(), 6);
  eth->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);
  auto* ip = reinterpret_cast<rte_ipv4_hdr*>(eth + 1);
  ip->version_ihl = RTE_IPV4_VHL_DEF;
  ip->total_length = rte_cpu_to_be_16(len - sizeof(rte_ether_hdr));
  ip->time_to_live = 64;
  ip->next_proto_id = IPPROTO_UDP;
  ip->src_addr = rte_cpu_to_be_32(g_opts.ip.value);
  ip->dst_addr = rte_cpu_to_be_32(g_opts.peer_ip.value);
  ip->hdr_checksum = rte_ipv4_cksum(ip);
  auto* udp = reinterpret_cast<rte_udp_hdr*>(ip + 1);
  udp->src_port = rte_cpu_to_be_16(kOrdinaryUdpPort);
  udp->dst_port = rte_cpu_to_be_16(kOrdinaryUdpPort);
  udp->dgram_len = rte_cpu_to_be_16(sizeof(rte_udp_hdr) + 64);
  const Datagram d{kMagic, seq};
  std::memcpy(udp + 1, &d, sizeof(d));
  return m;
}

int TrafficLcore(void*) {
  AwaitReady();
  std::vector<uint8_t> seen(g_opts.packets, 0);
  const uint64_t window = 256;
  while (!g_stop.load(std::memory_order_relaxed) && g_counts.returned < g_opts.packets) {
    if (g_counts.sent < g_opts.packets && g_counts.sent - g_counts.returned < window) {
      rte_mbuf* m = MakeDatagram(static_cast<uint32_t>(g_counts.sent));
      if (m != nullptr) {
        if (rte_eth_tx_burst(kPort, kPipelineQueue, &m, 1) == 1) {
          ++g_counts.sent;
        } else {
          rte_pktmbuf_free(m);  // the ring is full: the same datagram again next time
        }
      }
    }
    rte_mbuf* rx[kBurst];
    const uint16_t n = rte_eth_rx_burst(kPort, kPipelineQueue, rx, kBurst);
    for (uint16_t i = 0; i < n; ++i) {
      Datagram d{};
      const size_t at = sizeof(rte_ether_hdr) + sizeof(rte_ipv4_hdr) + sizeof(rte_udp_hdr);
      if (rte_pktmbuf_data_len(rx[i]) >= at + sizeof(d)) {
        std::memcpy(&d, rte_pktmbuf_mtod_offset(rx[i], uint8_t*, at), sizeof(d));
      }
      if (d.magic != kMagic || d.seq >= g_opts.packets) {
        ++g_counts.corrupt;
      } else if (seen[d.seq]++ > 0) {
        ++g_counts.duplicates;
      } else {
        ++g_counts.returned;
      }
      rte_pktmbuf_free(rx[i]);
    }
  }
  g_pipeline_done = true;
  ++g_lcores_exited;
  return 0;
}

// ---- bypass on queue 1, both roles.

void FillMessage(uint64_t id, uint8_t* buf, size_t len) {
  for (size_t i = 0; i < len; ++i) buf[i] = static_cast<uint8_t>(id * 131 + i * 7);
}

struct Rdm {
  std::unique_ptr<bypass::driver::Device> dev;
  std::unique_ptr<bypass::rdm::Port> port;
  std::unique_ptr<bypass::rdm::Endpoint> ep;
};

bool OpenRdm(Rdm& r) {
  bypass::driver::DeviceOptions o;
  o.ipv4 = g_opts.ip;
  auto dev = bypass::driver::OpenDevice("dpdk:port=0,queues=1-1", o);
  if (!dev.ok()) {
    g_counts.failure = std::string(dev.status().message());
    return false;
  }
  r.dev = *std::move(dev);
  r.port = std::make_unique<bypass::rdm::Port>(r.dev->queue(0), r.dev->info());
  bypass::rdm::EndpointConfig c;
  c.udp_port = kRdmUdpPort;
  // Lcores of two busy-polling processes share this machine's CPUs in the
  // test: a peer descheduled for a time slice is not a lost packet. On
  // dedicated cores the defaults (100 us, 2 s) fit.
  c.rto_min_ns = 5'000'000;
  c.rto_initial_ns = 10'000'000;
  c.peer_timeout_ns = 20'000'000'000;
  auto ep = bypass::rdm::Endpoint::Create(*r.port, bypass::driver::SteadyClock::Get(), c);
  if (!ep.ok()) {
    g_counts.failure = std::string(ep.status().message());
    return false;
  }
  r.ep = *std::move(ep);
  return true;
}

// A receive buffer, and the echo that goes out of it.
struct Slot {
  std::vector<uint8_t> buf = std::vector<uint8_t>(kMaxMessage);
  bool echoing = false;
};

// app: every message is sent back to its sender from the buffer it arrived
// in; the buffer takes a new message once the echo completed.
void ServeEchoes(Rdm& r) {
  std::vector<Slot> slots(64);
  for (Slot& s : slots) r.ep->PostRecv({.buf = s.buf.data(), .len = s.buf.size(), .context = &s});
  bypass::rdm::Completion c[32];
  while (!g_stop.load(std::memory_order_relaxed)) {
    r.ep->Progress();
    const size_t n = r.ep->PollCompletions(c);
    for (size_t i = 0; i < n; ++i) {
      Slot* s = static_cast<Slot*>(c[i].context);
      if (!s->echoing) {
        ++g_counts.messages_received;
        s->echoing = true;
        while (r.ep->Send({.dest = c[i].source, .buf = s->buf.data(), .len = c[i].len,
                           .context = s}) == bypass::rdm::Result::kAgain) {
          r.ep->Progress();
        }
      } else {
        ++g_counts.messages_echoed;
        s->echoing = false;
        r.ep->PostRecv({.buf = s->buf.data(), .len = s->buf.size(), .context = s});
      }
    }
    bypass::rdm::ErrorCompletion e[4];
    g_counts.errors += r.ep->PollErrors(e);
    if (g_counts.messages_echoed >= g_opts.messages) g_bypass_done.store(true, std::memory_order_relaxed);
  }
}

// peer: messages of 1..kMaxMessage bytes, at most 16 outstanding, each
// checked when it comes back.
void SendMessages(Rdm& r) {
  bypass::rdm::Address app;
  app.ip = g_opts.peer_ip;
  app.mac = g_opts.peer_mac;
  app.udp_port = kRdmUdpPort;
  auto peer = r.ep->InsertPeer(app);
  if (!peer.ok()) {
    g_counts.failure = std::string(peer.status().message());
    return;
  }
  constexpr int kWindow = 16;
  std::vector<std::vector<uint8_t>> out(kWindow, std::vector<uint8_t>(kMaxMessage));
  std::vector<std::vector<uint8_t>> in(kWindow, std::vector<uint8_t>(kMaxMessage));
  std::vector<uint64_t> id_of(kWindow, 0);
  std::vector<int> free_slots;
  for (int i = kWindow - 1; i >= 0; --i) free_slots.push_back(i);
  int pending = -1;  // a slot whose receive is posted and send not yet taken
  const auto size_of = [](uint64_t id) { return 1 + (id * 7919) % kMaxMessage; };
  bypass::rdm::Completion c[32];
  while (!g_stop.load(std::memory_order_relaxed) && g_counts.echoes_ok + g_counts.echoes_bad < g_opts.messages) {
    if (pending < 0 && g_counts.messages_sent < g_opts.messages && !free_slots.empty()) {
      // The echo's receive first: the reply may arrive before the send completes.
      pending = free_slots.back();
      free_slots.pop_back();
      id_of[pending] = g_counts.messages_sent;
      FillMessage(id_of[pending], out[pending].data(), size_of(id_of[pending]));
      r.ep->PostRecv({.buf = in[pending].data(), .len = in[pending].size(),
                      .context = reinterpret_cast<void*>(uintptr_t{1} << 32 | pending)});
    }
    if (pending >= 0 && r.ep->Send({.dest = *peer, .buf = out[pending].data(),
                                    .len = size_of(id_of[pending]),
                                    .context = reinterpret_cast<void*>(uintptr_t(pending))}) ==
                            bypass::rdm::Result::kOk) {
      ++g_counts.messages_sent;
      pending = -1;  // else kAgain: the same send after progress
    }
    r.ep->Progress();
    const size_t n = r.ep->PollCompletions(c);
    for (size_t i = 0; i < n; ++i) {
      const uintptr_t ctx = reinterpret_cast<uintptr_t>(c[i].context);
      if ((ctx >> 32) == 0) continue;  // a send completed; its slot frees with the echo
      const int s = static_cast<int>(ctx & 0xffffffff);
      std::vector<uint8_t> want(size_of(id_of[s]));
      FillMessage(id_of[s], want.data(), want.size());
      if (c[i].len == want.size() && std::memcmp(in[s].data(), want.data(), want.size()) == 0) {
        ++g_counts.echoes_ok;
      } else {
        ++g_counts.echoes_bad;
      }
      free_slots.push_back(s);
    }
    bypass::rdm::ErrorCompletion e[4];
    g_counts.errors += r.ep->PollErrors(e);
  }
  // Our last ACKs go out before we stop.
  const uint64_t until = NowNs() + 200'000'000;
  while (NowNs() < until) r.ep->Progress();
}

int BypassLcore(void*) {
  AwaitReady();
  Rdm r;
  if (OpenRdm(r)) {
    if (g_opts.role == "app") {
      ServeEchoes(r);
    } else {
      SendMessages(r);
    }
    g_counts.rdm = r.ep->counters().ToString();
  }
  g_bypass_done = true;
  ++g_lcores_exited;
  return 0;
}

// ---- The port and the run.

bool ParseOptions(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    const std::string key = a.substr(0, eq);
    const std::string v = eq == std::string::npos ? "" : a.substr(eq + 1);
    bool ok = eq != std::string::npos;
    if (key == "--role") {
      g_opts.role = v;
    } else if (key == "--packets") {
      ok = ok && absl::SimpleAtoi(v, &g_opts.packets);
    } else if (key == "--messages") {
      ok = ok && absl::SimpleAtoi(v, &g_opts.messages);
    } else if (key == "--seconds") {
      ok = ok && absl::SimpleAtoi(v, &g_opts.seconds);
    } else if (key == "--stop-file") {
      g_opts.stop_file = v;
    } else if (key == "--ip" || key == "--peer-ip") {
      auto ip = Ipv4Address::Parse(v);
      ok = ok && ip.ok();
      if (ok) (key == "--ip" ? g_opts.ip : g_opts.peer_ip) = *ip;
    } else if (key == "--peer-mac") {
      auto mac = MacAddress::Parse(v);
      ok = ok && mac.ok();
      if (ok) g_opts.peer_mac = *mac;
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "pipeline: bad argument '%s'\n", a.c_str());
      return false;
    }
  }
  if (g_opts.role != "app" && g_opts.role != "peer") {
    std::fprintf(stderr, "pipeline: --role=app or --role=peer\n");
    return false;
  }
  if (rte_lcore_count() < 3) {
    std::fprintf(stderr, "pipeline: needs 3 lcores (main, pipeline, bypass): e.g. --lcores=0@(0-1),1@(0-1),2@(0-1)\n");
    return false;
  }
  return true;
}

// Port 0 with two queue pairs; waits for the link, restarting the port
// while it stays down (a memif client's handshake can stall).
bool SetUpPort() {
  g_pool = rte_pktmbuf_pool_create("pipeline", 8191, 256, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
                                   static_cast<int>(rte_socket_id()));
  if (g_pool == nullptr || rte_eth_dev_count_avail() == 0) {
    std::fprintf(stderr, "pipeline: no mbuf pool or no port (give a --vdev)\n");
    return false;
  }
  rte_eth_conf conf{};
  if (rte_eth_dev_configure(kPort, 2, 2, &conf) != 0) return false;
  for (uint16_t q = 0; q < 2; ++q) {
    if (rte_eth_rx_queue_setup(kPort, q, 1024, SOCKET_ID_ANY, nullptr, g_pool) != 0 ||
        rte_eth_tx_queue_setup(kPort, q, 1024, SOCKET_ID_ANY, nullptr) != 0) {
      return false;
    }
  }
  const uint64_t deadline = NowNs() + 20'000'000'000;
  while (NowNs() < deadline) {
    if (rte_eth_dev_start(kPort) == 0) {
      const uint64_t up_by = NowNs() + 1'000'000'000;
      rte_eth_link link{};
      while (rte_eth_link_get_nowait(kPort, &link) == 0 && link.link_status != RTE_ETH_LINK_UP &&
             NowNs() < up_by) {
        usleep(1000);
      }
      // The app serves: its link comes up when the peer connects.
      if (link.link_status == RTE_ETH_LINK_UP || g_opts.role == "app") return true;
      rte_eth_dev_stop(kPort);
    }
    usleep(10000);
  }
  std::fprintf(stderr, "pipeline: the link did not come up\n");
  return false;
}

// The peer leaves second. When one end of a memif disconnects, DPDK 22.11's
// memif unmaps the shared regions from the other process's interrupt
// thread, racing with any lcore of that process in rx or tx burst on the
// port (a segfault in the app's lcores, seen in CI when the peer exited
// while the app still served). So the peer, whose lcores have stopped,
// keeps its end open until the app closed its own (the link goes down), or
// until the deadline; then it waits for its interrupt thread to finish
// handling the disconnect before it closes the port.
void AwaitAppClose(uint64_t deadline) {
  rte_eth_link link{};
  while (rte_eth_link_get_nowait(kPort, &link) == 0 && link.link_status == RTE_ETH_LINK_UP &&
         NowNs() < deadline) {
    usleep(1000);
  }
  bypass::driver::dpdk::AwaitInterruptThread();
}

bool Finished() {
  if (g_opts.role == "peer") return g_pipeline_done && g_bypass_done;
  return g_pipeline_done && g_bypass_done &&
         (g_opts.stop_file.empty() || access(g_opts.stop_file.c_str(), F_OK) == 0);
}

}  // namespace

int main(int argc, char** argv) {
  const int eal_args = rte_eal_init(argc, argv);
  if (eal_args < 0) {
    std::fprintf(stderr, "pipeline: rte_eal_init: %s\n", rte_strerror(rte_errno));
    return 2;
  }
  if (!ParseOptions(argc - eal_args - 1, argv + eal_args + 1) || !SetUpPort()) return 2;
  // The engine's counters on this EAL's telemetry socket: dpdk-telemetry.py
  // -f <this --file-prefix>, commands /bypass/engines, /bypass/engine,ID.
  if (absl::Status s = bypass::stats::Enable(); !s.ok()) {
    std::fprintf(stderr, "pipeline: counters not served: %s\n", std::string(s.message()).c_str());
  }
  g_ready.store(true, std::memory_order_release);
  const unsigned pipeline_lcore = rte_get_next_lcore(-1, 1, 0);
  const unsigned bypass_lcore = rte_get_next_lcore(pipeline_lcore, 1, 0);
  rte_eal_remote_launch(g_opts.role == "app" ? PipelineLcore : TrafficLcore, nullptr, pipeline_lcore);
  rte_eal_remote_launch(BypassLcore, nullptr, bypass_lcore);
  const uint64_t deadline = NowNs() + g_opts.seconds * 1'000'000'000;
  while (!Finished() && NowNs() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (g_opts.role == "app") {
    // The peer's last ACKs and echoes' ACKs: keep serving a little.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  g_stop = true;
  rte_eal_mp_wait_lcore();
  while (g_lcores_exited.load() < 2) std::this_thread::yield();
  const Counts& c = g_counts;
  const bool app = g_opts.role == "app";
  const bool lost = app ? (c.tx < g_opts.packets || c.messages_echoed < g_opts.messages)
                        : (c.returned < g_opts.packets || c.echoes_ok < g_opts.messages ||
                           c.duplicates + c.corrupt + c.echoes_bad > 0);
  if (app) {
    std::printf("{\"role\": \"app\", \"rx\": %lu, \"forwarded\": %lu, \"tx\": %lu, "
                "\"ring_full\": %lu, \"messages_received\": %lu, \"messages_echoed\": %lu, "
                "\"errors\": %lu, \"failure\": \"%s\", \"rdm\": \"%s\"}\n",
                c.rx, c.forwarded, c.tx, c.ring_full, c.messages_received, c.messages_echoed,
                c.errors, c.failure.c_str(), c.rdm.c_str());
  } else {
    std::printf("{\"role\": \"peer\", \"sent\": %lu, \"returned\": %lu, \"duplicates\": %lu, "
                "\"corrupt\": %lu, \"messages_sent\": %lu, \"echoes_ok\": %lu, \"echoes_bad\": %lu, "
                "\"errors\": %lu, \"failure\": \"%s\", \"rdm\": \"%s\"}\n",
                c.sent, c.returned, c.duplicates, c.corrupt, c.messages_sent, c.echoes_ok,
                c.echoes_bad, c.errors, c.failure.c_str(), c.rdm.c_str());
  }
  std::fflush(stdout);
  if (!app) AwaitAppClose(std::max(deadline, NowNs() + 1'000'000'000));
  rte_eth_dev_stop(kPort);
  bypass::driver::dpdk::AwaitInterruptThread();
  rte_eth_dev_close(kPort);
  bypass::driver::dpdk::AwaitInterruptThread();
  rte_eal_cleanup();
  return lost || c.errors > 0 || !c.failure.empty() ? 1 : 0;
}
