// The RDM engine over two kernel UDP devices on 127.0.0.1, both ends in one
// thread: what the default domain's remote path costs in CPU, per round
// trip and per byte, with the device's offloads and MTU as parameters.
// Both ends in one thread take the peer's scheduling out of the numbers
// (the CPU column is this thread's time, the kernel's work for it
// included), so that a run on a loaded machine still compares the
// variants; cross-namespace latency is //tools:bench's `fi_udp` column.
// BM_UdpRoundTrip is the round trip an application sees (with the ACKs
// fi's default sends ask for, or without), and BM_TcpRoundTrip the
// kernel's TCP between the same addresses in the same way, its baseline.
//   bazel run -c opt //fabric/rdm:udp_benchmark
// Across two network namespaces (as root: each end's sockets are made in
// its namespace, and every frame crosses the veth pair between them):
//   udp_benchmark --netns=NS_A,NS_B --ips=IP_A,IP_B
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "benchmark/benchmark.h"
#include "driver/clock.h"
#include "driver/udp/udp_device.h"
#include "driver/uri.h"
#include "fabric/rdm/rdm.h"

namespace bypass::rdm {
namespace {

// The URI keys of the variants: arg `variant` of each benchmark.
const char* const kVariants[] = {
    "mtu=1500,gso=0",  // 0: one datagram per frame, no GRO
    "mtu=1500",        // 1: GSO runs of 1500-byte frames, GRO (the default before LinkMtuFor)
    "",                // 2: the default: the MTU of the link (up to 9000), GSO, GRO
    "mtu=65000",       // 3: the largest datagram the device allows
    "gso=0",           // 4: the link's MTU, no GSO or GRO
};

// --netns and --ips, taken from argv by main: each end's namespace (empty:
// this one) and address.
std::string g_netns[2];
std::string g_ips[2] = {"127.0.0.1", "127.0.0.1"};

// Enters end `i`'s namespace, if it has one; sockets made from here on are
// that namespace's.
void EnterNetns(int i) {
  if (g_netns[i].empty()) return;
  const std::string path = "/var/run/netns/" + g_netns[i];
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
    std::perror(path.c_str());
    std::exit(1);
  }
  close(fd);
}

std::unique_ptr<driver::Device> OpenUdp(int end, const std::string& keys) {
  EnterNetns(end);
  const std::string uri = "udp:" + g_ips[end] + (keys.empty() ? "" : "," + keys);
  auto dev = driver::udp::Open(*driver::DeviceUri::Parse(uri), {});
  if (!dev.ok()) {
    std::fprintf(stderr, "%s\n", dev.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(dev);
}

struct Pair {
  explicit Pair(const std::string& keys) {
    a = OpenUdp(0, keys);
    pa = std::make_unique<Port>(a->queue(0), a->info());
    b = OpenUdp(1, keys);
    pb = std::make_unique<Port>(b->queue(0), b->info());
    EndpointConfig c;
    c.max_msg_size = 64u << 20;
    // Ports of this process's own range: two runs at once do not collide.
    static uint16_t next_port = static_cast<uint16_t>(20000 + getpid() % 2000 * 16);
    c.udp_port = next_port++;
    EnterNetns(0);
    ea = *Endpoint::Create(*pa, driver::SteadyClock::Get(), c);
    c.udp_port = next_port++;
    EnterNetns(1);
    eb = *Endpoint::Create(*pb, driver::SteadyClock::Get(), c);
    to_b = *ea->InsertPeer(eb->address());
    to_a = *eb->InsertPeer(ea->address());
  }
  std::unique_ptr<driver::Device> a, b;
  std::unique_ptr<Port> pa, pb;
  std::unique_ptr<Endpoint> ea, eb;
  PeerId to_b, to_a;
};

void WaitOne(Endpoint& e, Endpoint& other) {
  Completion c;
  while (e.PollCompletions({&c, 1}) == 0) {
    e.Progress();
    other.Progress();
  }
}

// Ping-pong: arg 0 the size, arg 1 the variant. Each round trip is a
// message each way and both senders' completions.
void BM_UdpPingPong(benchmark::State& state) {
  const size_t size = static_cast<size_t>(state.range(0));
  Pair p(kVariants[state.range(1)]);
  state.SetLabel(kVariants[state.range(1)]);
  std::vector<uint8_t> out(size, 1), in_a(size), in_b(size);
  for (auto _ : state) {
    p.eb->PostRecv({.buf = in_b.data(), .len = size});
    p.ea->PostRecv({.buf = in_a.data(), .len = size});
    p.ea->Send({.dest = p.to_b, .buf = out.data(), .len = size});
    WaitOne(*p.eb, *p.ea);
    p.eb->Send({.dest = p.to_a, .buf = in_b.data(), .len = size});
    WaitOne(*p.ea, *p.eb);
    WaitOne(*p.eb, *p.ea);
    WaitOne(*p.ea, *p.eb);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * 2 * size));
}
BENCHMARK(BM_UdpPingPong)
    ->ArgsProduct({{8, 4 << 10, 64 << 10, 1 << 20}, {0, 1, 2, 3}})
    ->MeasureProcessCPUTime();

// Spins both ends until `e` completes a receive; send completions that come
// meanwhile are taken and counted in *sends.
void WaitRecv(Endpoint& e, Endpoint& other, int* sends) {
  Completion c[4];
  for (;;) {
    e.Progress();
    other.Progress();
    bool got = false;
    for (Endpoint* x : {&e, &other}) {
      const size_t n = x->PollCompletions(c);
      for (size_t k = 0; k < n; ++k) {
        if (c[k].flags & kCompRecv) {
          got = true;
        } else {
          ++*sends;
        }
      }
    }
    if (got) return;
  }
}

// The round trip an application sees: a ping and its pong, each send's
// completion taken whenever it comes (not waited for). Arg 0 the size,
// arg 1 whether each send asks for its acknowledgement at once
// (kSendAckNow, what fabric/fi does for its default FI_TRANSMIT_COMPLETE
// sends) or lets it ride on the next packet back; arg 2 the variant (2:
// the default, 4: without GSO and GRO).
// acks_per_rt: the standalone ACK datagrams each round trip adds.
void BM_UdpRoundTrip(benchmark::State& state) {
  const size_t size = static_cast<size_t>(state.range(0));
  const uint32_t flags = state.range(1) != 0 ? kSendAckNow : 0u;
  Pair p(kVariants[state.range(2)]);
  state.SetLabel(std::string(flags != 0 ? "ack at once" : "ack rides") +
                 (state.range(2) == 4 ? ", gso=0" : ""));
  std::vector<uint8_t> ping(size, 1), pong(size, 2), in_a(size), in_b(size);
  int sends = 0;  // send completions not yet taken: at most a few
  const uint64_t acks_before = p.ea->counters().tx_acks + p.eb->counters().tx_acks;
  for (auto _ : state) {
    p.eb->PostRecv({.buf = in_b.data(), .len = size});
    p.ea->PostRecv({.buf = in_a.data(), .len = size});
    p.ea->Send({.dest = p.to_b, .buf = ping.data(), .len = size, .flags = flags});
    WaitRecv(*p.eb, *p.ea, &sends);
    p.eb->Send({.dest = p.to_a, .buf = pong.data(), .len = size, .flags = flags});
    WaitRecv(*p.ea, *p.eb, &sends);
  }
  const uint64_t acks = p.ea->counters().tx_acks + p.eb->counters().tx_acks - acks_before;
  state.counters["acks_per_rt"] =
      static_cast<double>(acks) / static_cast<double>(std::max<int64_t>(state.iterations(), 1));
}
BENCHMARK(BM_UdpRoundTrip)
    ->ArgsProduct({{8, 4 << 10, 64 << 10, 1 << 20}, {0, 1}, {2, 4}})
    ->MeasureProcessCPUTime();

// The kernel's TCP between the same two addresses, as the baseline of
// BM_UdpRoundTrip: a connected pair of non-blocking sockets (TCP_NODELAY)
// in one thread, each end busy-polling recv, a message of arg 0 bytes each
// way per round trip. libfabric's tcp provider (tcp;ofi_rxm) adds its own
// headers and progress to this, so it is the least a round trip through it
// costs.
int TcpSocket(int end) {
  EnterNetns(end);
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (fd < 0 || setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    std::perror("tcp socket");
    std::exit(1);
  }
  return fd;
}

sockaddr_in TcpAddress(int end, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, g_ips[end].c_str(), &a.sin_addr);
  return a;
}

// Sends all of buf on fd, then reads len bytes from `from` (busy-polling
// both: a full send buffer drains only as the peer reads).
void TcpTransfer(int to, int from, const uint8_t* buf, uint8_t* into, size_t len) {
  size_t sent = 0, got = 0;
  while (got < len) {
    if (sent < len) {
      const ssize_t r = send(to, buf + sent, len - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (r > 0) sent += static_cast<size_t>(r);
    }
    const ssize_t r = recv(from, into + got, len - got, MSG_DONTWAIT);
    if (r > 0) got += static_cast<size_t>(r);
  }
}

void BM_TcpRoundTrip(benchmark::State& state) {
  const size_t size = static_cast<size_t>(state.range(0));
  const uint16_t port = static_cast<uint16_t>(40000 + getpid() % 2000 * 8 + state.range(0) % 7);
  const int listener = TcpSocket(1);
  const int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const sockaddr_in at = TcpAddress(1, port);
  if (bind(listener, reinterpret_cast<const sockaddr*>(&at), sizeof(at)) != 0 ||
      listen(listener, 1) != 0) {
    std::perror("tcp listen");
    std::exit(1);
  }
  const int a = TcpSocket(0);
  if (connect(a, reinterpret_cast<const sockaddr*>(&at), sizeof(at)) != 0) {
    std::perror("tcp connect");
    std::exit(1);
  }
  const int b = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  setsockopt(b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  std::vector<uint8_t> ping(size, 1), pong(size, 2), in_a(size), in_b(size);
  for (auto _ : state) {
    TcpTransfer(a, b, ping.data(), in_b.data(), size);
    TcpTransfer(b, a, pong.data(), in_a.data(), size);
  }
  close(a);
  close(b);
  close(listener);
}
BENCHMARK(BM_TcpRoundTrip)->Arg(8)->Arg(4 << 10)->Arg(64 << 10)->Arg(1 << 20)->MeasureProcessCPUTime();

// One way, 8 messages outstanding: arg 0 the size, arg 1 the variant.
void BM_UdpStream(benchmark::State& state) {
  const size_t size = static_cast<size_t>(state.range(0));
  Pair p(kVariants[state.range(1)]);
  state.SetLabel(kVariants[state.range(1)]);
  constexpr int kWindow = 8;
  std::vector<std::vector<uint8_t>> out(kWindow, std::vector<uint8_t>(size));
  std::vector<std::vector<uint8_t>> in(kWindow, std::vector<uint8_t>(size));
  int outstanding = 0;
  uint64_t next = 0;
  Completion c[16];
  for (auto _ : state) {
    while (outstanding < kWindow) {
      const size_t k = next++ % kWindow;
      p.eb->PostRecv({.buf = in[k].data(), .len = size});
      p.ea->Send({.dest = p.to_b, .buf = out[k].data(), .len = size});
      ++outstanding;
    }
    size_t done = 0;
    while (done == 0) {
      p.ea->Progress();
      p.eb->Progress();
      done = p.eb->PollCompletions(c);
      while (p.ea->PollCompletions(c) > 0) {
      }
    }
    outstanding -= static_cast<int>(done);
    state.SetBytesProcessed(state.bytes_processed() + static_cast<int64_t>(done * size));
  }
  state.counters["retransmits"] =
      static_cast<double>(p.ea->counters().retransmits_fast + p.ea->counters().retransmits_timeout);
}
BENCHMARK(BM_UdpStream)->ArgsProduct({{64 << 10, 1 << 20}, {0, 1, 2, 3}})->MeasureProcessCPUTime();

}  // namespace
}  // namespace bypass::rdm

// Takes --netns=A,B and --ips=A,B before the benchmark library's flags.
int main(int argc, char** argv) {
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    std::string* into = nullptr;
    if (arg.rfind("--netns=", 0) == 0) into = bypass::rdm::g_netns;
    if (arg.rfind("--ips=", 0) == 0) into = bypass::rdm::g_ips;
    if (into == nullptr) {
      argv[kept++] = argv[i];
      continue;
    }
    const std::vector<std::string> two = absl::StrSplit(arg.substr(arg.find('=') + 1), ',');
    if (two.size() != 2) {
      std::fprintf(stderr, "%s: expected two values, A,B\n", arg.c_str());
      return 2;
    }
    into[0] = two[0];
    into[1] = two[1];
  }
  argc = kept;
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
