// The RDM engine over in-process loopback ports, both ends in one thread:
// 64-byte ping-pong round trips (on the virtual-per-burst QueuePair and on
// the concrete loopback queue) beside the raw driver's frame ping-pong
// measured in the same run, the 64 B message rate beside raw bursts (BM_RawRate,
// BM_RdmRate), one-way bandwidth at 64 KiB and 1 MiB, and the time of a
// first contact (the handshake).
//   bazel run --config=opt //fabric/rdm:engine_benchmark
// Each round trip is one out-of-line call (RawRoundTrip, RdmRoundTrip), so
// that callgrind counts its instructions alone, the same on a loaded machine
// as on a quiet one (PROTOCOL.md, "Where a round trip's time goes"):
//   valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*RdmRoundTrip*'
//     bazel-bin/fabric/rdm/engine_benchmark --benchmark_filter='BM_RdmPingPong$'
//     --benchmark_min_time=0.05
// (one command line), then callgrind_annotate: instructions per call.
// Under callgrind a round trip takes about 50 times as long as natively, so
// the engine's wall-clock deadlines (the 5 us delayed ACK, the tail-loss
// probe) fall due on every round trip where natively they do not, and the
// count is that of a much slower machine. BYPASS_BENCH_STEP_NS=N gives the
// ping-pong pairs a clock that moves N ns at every reading instead (about 4
// readings per round trip: N=250 makes a 1 us round trip, as natively), so
// callgrind counts what a native round trip does, the same on every run.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "driver/clock.h"
#include "driver/fault/fault_device.h"
#include "driver/loopback/loopback_device.h"
#include "driver/net_headers.h"
#include "driver/uri.h"
#include "fabric/rdm/rdm.h"
#include "fabric/rdm/scale_rig.h"

namespace bypass::rdm {
namespace {

using driver::loopback::LoopbackDevice;

std::unique_ptr<LoopbackDevice> OpenPort(const std::string& segment, const std::string& keys = "") {
  auto dev = driver::loopback::Open(*driver::DeviceUri::Parse("loopback:" + segment + keys), {});
  if (!dev.ok()) {
    std::fprintf(stderr, "%s\n", dev.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(dev);
}

// A clock that moves step_ns at every reading (BYPASS_BENCH_STEP_NS; see
// the top). Single-threaded, as the ping-pong pairs are.
class SteppingClock final : public driver::Clock {
 public:
  explicit SteppingClock(uint64_t step_ns) : step_ns_(step_ns) {}
  uint64_t NowNs() const override { return now_ += step_ns_; }

 private:
  const uint64_t step_ns_;
  mutable uint64_t now_ = 1'000'000'000;
};

// The clock of the ping-pong pairs: the steady clock, or a stepping one.
const driver::Clock& PairClock() {
  static const char* step = std::getenv("BYPASS_BENCH_STEP_NS");
  if (step == nullptr || std::atoll(step) <= 0) return driver::SteadyClock::Get();
  static SteppingClock* stepping = new SteppingClock(static_cast<uint64_t>(std::atoll(step)));
  return *stepping;
}

std::string Segment() {
  static int n = 0;
  return "rdm-bench-" + std::to_string(n++);
}

// One raw round trip of 64 payload bytes (out of line: see the top).
__attribute__((noinline)) void RawRoundTrip(LoopbackDevice& a, LoopbackDevice& b,
                                            const driver::UdpFlow& flow) {
  uint8_t payload[64] = {};
  driver::Packet* p;
  a.queue(0).AllocBulk({&p, 1});
  p->len = static_cast<uint32_t>(driver::BuildUdpFrame(flow, payload, {p->data, p->capacity},
                                                       driver::UdpChecksumFill::kNone));
  a.queue(0).TxBurst({&p, 1});
  while (b.queue(0).RxBurst({&p, 1}) == 0) {
  }
  driver::ReverseUdpFrame(p->data);
  b.queue(0).TxBurst({&p, 1});
  while (a.queue(0).RxBurst({&p, 1}) == 0) {
  }
  a.queue(0).FreeBulk({&p, 1});
}

// Raw frames: a sends 64 payload bytes, b turns the frame around, a gets it.
void BM_RawPingPong(benchmark::State& state) {
  const std::string seg = Segment();
  auto a = OpenPort(seg);
  auto b = OpenPort(seg);
  const driver::UdpFlow flow{a->info().mac, b->info().mac, a->info().ipv4, b->info().ipv4, 1, 2, 0};
  for (auto _ : state) RawRoundTrip(*a, *b, flow);
}
BENCHMARK(BM_RawPingPong);

// Two endpoints on two loopback ports of one segment.
struct Pair {
  // shared_recv: b receives through a SharedRecvQueue (alone on it).
  explicit Pair(uint16_t idle_passes_per_clock_read = 1,
                uint64_t rendezvous_threshold = EndpointConfig{}.rendezvous_threshold,
                const std::string& keys = "", bool read_in_place = true, bool shared_recv = false,
                bool congestion_control = EndpointConfig{}.congestion_control) {
    const std::string seg = Segment();
    a = OpenPort(seg, keys);
    b = OpenPort(seg, keys);
    pa = std::make_unique<Port>(a->queue(0), a->info());
    pb = std::make_unique<Port>(b->queue(0), b->info());
    EndpointConfig c;
    c.idle_passes_per_clock_read = idle_passes_per_clock_read;
    c.rendezvous_threshold = rendezvous_threshold;
    c.max_msg_size = 64u << 20;
    c.read_in_place = read_in_place;
    c.congestion_control = congestion_control;
    c.udp_port = 1;
    ea = *Endpoint::Create(*pa, PairClock(), c);
    c.udp_port = 2;
    if (shared_recv) {
      srq = *SharedRecvQueue::Create(*pb, {});
      c.shared_recv = srq.get();
    }
    eb = *Endpoint::Create(*pb, PairClock(), c);
    to_b = *ea->InsertPeer(eb->address());
    to_a = *eb->InsertPeer(ea->address());
  }
  std::unique_ptr<LoopbackDevice> a, b;
  std::unique_ptr<Port> pa, pb;
  std::unique_ptr<SharedRecvQueue> srq;  // outlives eb
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

// One RDM round trip of kSize bytes (out of line: see the top).
template <size_t kSize>
__attribute__((noinline)) void RdmRoundTrip(Pair& p, uint8_t* out, uint8_t* in_a, uint8_t* in_b) {
  p.eb->PostRecv({.buf = in_b, .len = kSize});
  p.ea->PostRecv({.buf = in_a, .len = kSize});
  p.ea->Send({.dest = p.to_b, .buf = out, .len = kSize, .flags = kSendInject});
  WaitOne(*p.eb, *p.ea);
  p.eb->Send({.dest = p.to_a, .buf = in_b, .len = kSize, .flags = kSendInject});
  WaitOne(*p.ea, *p.eb);
}

template <uint16_t kIdlePassesPerClockRead = 1, bool kSharedRecv = false, size_t kSize = 64,
          bool kCongestionControl = true>
void BM_RdmPingPong(benchmark::State& state) {
  Pair p(kIdlePassesPerClockRead, EndpointConfig{}.rendezvous_threshold, "", true, kSharedRecv,
         kCongestionControl);
  uint8_t out[kSize] = {}, in_a[kSize], in_b[kSize];
  for (auto _ : state) RdmRoundTrip<kSize>(p, out, in_a, in_b);
  state.counters["tx_acks_per_rt"] =
      benchmark::Counter(static_cast<double>(p.ea->counters().tx_acks + p.eb->counters().tx_acks) /
                         static_cast<double>(state.iterations()));
}
BENCHMARK(BM_RdmPingPong<>)->Name("BM_RdmPingPong");

// 8 B, with congestion control on (the default toward a peer not on this
// host, as loopback's are) and off: what the congestion window and pacing
// cost an uncongested round trip (PROTOCOL.md, "Congestion control").
BENCHMARK(BM_RdmPingPong<1, false, 8>)->Name("BM_RdmPingPong8/cc_on");
BENCHMARK(BM_RdmPingPong<1, false, 8, false>)->Name("BM_RdmPingPong8/cc_off");
// Idle passes reuse the clock reading (EndpointConfig::idle_passes_per_clock_read).
BENCHMARK(BM_RdmPingPong<16>)->Name("BM_RdmPingPong/lazy_clock");
// b's receives through a SharedRecvQueue (fi_srx_context) instead of its own.
BENCHMARK(BM_RdmPingPong<1, true>)->Name("BM_RdmPingPong/shared_recv");

// One Progress pass that finds nothing: what a busy-polling loop pays per
// turn, and so about twice what a message waits, on average, to be seen.
template <uint16_t kIdlePassesPerClockRead = 1>
void BM_IdleProgress(benchmark::State& state) {
  Pair p(kIdlePassesPerClockRead);
  for (auto _ : state) benchmark::DoNotOptimize(p.ea->Progress());
}
BENCHMARK(BM_IdleProgress<>)->Name("BM_IdleProgress");
BENCHMARK(BM_IdleProgress<16>)->Name("BM_IdleProgress/lazy_clock");

// 64-byte ping-pong with each end's device dropping state.range(0) per
// 10'000 received packets (driver/fault): the p50 and p99 round trip. The
// goal: one loss costs about a round trip, so the p99 at 1% loss stays
// within a few lossless p99s (not the 100 us RTO floor). Both ends share
// one thread, so neither is descheduled while the other waits.
void BM_RdmPingPongLoss(benchmark::State& state) {
  const std::string seg = Segment();
  std::unique_ptr<driver::Device> dev[2];
  std::unique_ptr<Port> port[2];
  std::unique_ptr<Endpoint> ep[2];
  for (int i = 0; i < 2; ++i) {
    driver::fault::FaultOptions f;
    f.drop = static_cast<double>(state.range(0)) / 10'000;
    f.seed = static_cast<uint64_t>(i + 1);
    dev[i] = *driver::fault::FaultDevice::Create(OpenPort(seg), f);
    port[i] = std::make_unique<Port>(dev[i]->queue(0), dev[i]->info());
    EndpointConfig c;
    c.udp_port = static_cast<uint16_t>(i + 1);
    ep[i] = *Endpoint::Create(*port[i], driver::SteadyClock::Get(), c);
  }
  const PeerId to_b = *ep[0]->InsertPeer(ep[1]->address());
  const PeerId to_a = *ep[1]->InsertPeer(ep[0]->address());
  const auto& clock = driver::SteadyClock::Get();
  uint8_t out[64] = {}, in_a[64], in_b[64];
  std::vector<uint64_t> rtt;
  rtt.reserve(1 << 20);
  for (auto _ : state) {
    const uint64_t t0 = clock.NowNs();
    ep[1]->PostRecv({.buf = in_b, .len = sizeof(in_b)});
    ep[0]->PostRecv({.buf = in_a, .len = sizeof(in_a)});
    ep[0]->Send({.dest = to_b, .buf = out, .len = sizeof(out), .flags = kSendInject});
    WaitOne(*ep[1], *ep[0]);
    ep[1]->Send({.dest = to_a, .buf = in_b, .len = sizeof(in_b), .flags = kSendInject});
    WaitOne(*ep[0], *ep[1]);
    rtt.push_back(clock.NowNs() - t0);
  }
  std::sort(rtt.begin(), rtt.end());
  const auto at = [&](double q) {
    if (rtt.empty()) return 0.0;
    return static_cast<double>(rtt[static_cast<size_t>(q * static_cast<double>(rtt.size() - 1))]);
  };
  state.counters["p50_ns"] = at(0.5);
  state.counters["p99_ns"] = at(0.99);
  const Counters& a = ep[0]->counters();
  const Counters& b = ep[1]->counters();
  const double iters = static_cast<double>(state.iterations());
  state.counters["probes_per_rt"] = static_cast<double>(a.tail_probes + b.tail_probes) / iters;
  state.counters["rtos_per_rt"] =
      static_cast<double>(a.rto_expirations + b.rto_expirations) / iters;
}
BENCHMARK(BM_RdmPingPongLoss)->Arg(0)->Arg(100)->Iterations(200'000);

// One way, 8 messages outstanding.
void BM_RdmStream(benchmark::State& state) {
  Pair p;
  const size_t size = static_cast<size_t>(state.range(0));
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
BENCHMARK(BM_RdmStream)->Arg(64 << 10)->Arg(1 << 20);

// The 64 B message rate: a window of kRateWindow messages one way, each
// window one out-of-line call (RawRateWindow, RdmRateWindow), so callgrind
// counts the instructions per message (a window's count / kRateWindow) the
// same on any load: the in-process counterpart of the bench's rate table
// (`pingpong --mode=rate`, issue 22's ">= 0.5x bare memif's packet rate").
// Raw frames go as one burst of kRateWindow; the engine's sends ask for
// their ACK as the pingpong tool's rate mode does (completions on the
// peer's acknowledgement), or are injected.
constexpr size_t kRateWindow = 32;

__attribute__((noinline)) void RawRateWindow(LoopbackDevice& a, LoopbackDevice& b,
                                             const driver::UdpFlow& flow) {
  uint8_t payload[64] = {};
  driver::Packet* p[kRateWindow];
  a.queue(0).AllocBulk(p);
  for (driver::Packet* f : p) {
    f->len = static_cast<uint32_t>(driver::BuildUdpFrame(flow, payload, {f->data, f->capacity},
                                                         driver::UdpChecksumFill::kNone));
  }
  a.queue(0).TxBurst(p);
  for (size_t got = 0; got < kRateWindow;) {
    got += b.queue(0).RxBurst({p + got, kRateWindow - got});
  }
  b.queue(0).FreeBulk(p);
}

void BM_RawRate(benchmark::State& state) {
  const std::string seg = Segment();
  auto a = OpenPort(seg);
  auto b = OpenPort(seg);
  const driver::UdpFlow flow{a->info().mac, b->info().mac, a->info().ipv4, b->info().ipv4, 1, 2, 0};
  for (auto _ : state) RawRateWindow(*a, *b, flow);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kRateWindow));
}
BENCHMARK(BM_RawRate);

__attribute__((noinline)) void RdmRateWindow(Pair& p, uint8_t (*out)[64], uint8_t (*in)[64],
                                             uint32_t flags, bool more) {
  for (size_t i = 0; i < kRateWindow; ++i) p.eb->PostRecv({.buf = in[i], .len = 64});
  Completion c[kRateWindow];
  // Injected sends complete with no completion entry.
  const size_t completions = (flags & kSendInject) != 0 ? 0 : kRateWindow;
  size_t posted = 0, received = 0, sent = 0;
  while (posted < kRateWindow || received < kRateWindow || sent < completions) {
    while (posted < kRateWindow &&
           p.ea->Send({.dest = p.to_b, .buf = out[posted], .len = 64,
                       .flags = flags | (more && posted + 1 < kRateWindow ? kSendMore : 0u)}) ==
               Result::kOk) {
      ++posted;
    }
    p.ea->Progress();
    p.eb->Progress();
    received += p.eb->PollCompletions(c);
    sent += p.ea->PollCompletions(c);
  }
}

// arg 0: the send flags (0: completion on the peer's ACK, as the pingpong
// tool's rate mode; 1: kSendInject; 2: as 0, with kSendMore on all but the
// window's last send, as pingpong --more: bundles, PROTOCOL.md "Bundles").
void BM_RdmRate(benchmark::State& state) {
  Pair p;
  const uint32_t flags = state.range(0) == 1 ? kSendInject : 0;
  const bool more = state.range(0) == 2;
  uint8_t out[kRateWindow][64] = {}, in[kRateWindow][64];
  // The handshake first, outside what callgrind counts.
  RdmRoundTrip<64>(p, out[0], in[0], in[1]);
  for (auto _ : state) RdmRateWindow(p, out, in, flags, more);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kRateWindow));
  const double msgs = static_cast<double>(state.iterations() * kRateWindow);
  state.counters["tx_acks_per_msg"] = static_cast<double>(p.eb->counters().tx_acks) / msgs;
}
BENCHMARK(BM_RdmRate)->Arg(0)->Arg(1)->Arg(2);

// Eager against rendezvous at one size: arg 0 the size, arg 1 the protocol
// (0 eager, 1 rendezvous), arg 2 messages outstanding (1: each message's
// time alone; 8: a stream). Receives are posted first. The rendezvous
// threshold (EndpointConfig::rendezvous_threshold) is chosen from this
// (PROTOCOL.md, "Choosing the rendezvous threshold").
void BM_RdmProtocol(benchmark::State& state) {
  const size_t size = static_cast<size_t>(state.range(0));
  const bool rndv = state.range(1) != 0;
  const int window = static_cast<int>(state.range(2));
  Pair p(1, rndv ? 0 : UINT64_MAX);
  std::vector<std::vector<uint8_t>> out(window, std::vector<uint8_t>(size));
  std::vector<std::vector<uint8_t>> in(window, std::vector<uint8_t>(size));
  int outstanding = 0;
  uint64_t next = 0;
  Completion c[16];
  for (auto _ : state) {
    while (outstanding < window) {
      const size_t k = next++ % static_cast<size_t>(window);
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
  state.counters["rendezvous"] = static_cast<double>(p.ea->counters().rendezvous_sent);
}
BENCHMARK(BM_RdmProtocol)
    ->ArgsProduct({{4 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 1 << 20,
                    4 << 20},
                   {0, 1},
                   {1, 8}});

// Rendezvous ping-pong over loopback with same_host=1 (frames as the
// intra-host device delivers them): arg 0 the size, arg 1 reading in place
// (0: pulled, every byte copied into packets and out; 1: read in place,
// one copy). Each round trip is a message each way; the ratio of the two
// is printed by `engine_benchmark --benchmark_filter=BM_RdmInPlace`
// (PROTOCOL.md, "Reading in place").
void BM_RdmInPlace(benchmark::State& state) {
  const size_t size = static_cast<size_t>(state.range(0));
  const bool in_place = state.range(1) != 0;
  Pair p(1, 0, ",same_host=1", in_place);
  std::vector<uint8_t> out(size, 1), in_a(size), in_b(size);
  for (auto _ : state) {
    p.eb->PostRecv({.buf = in_b.data(), .len = size});
    p.ea->PostRecv({.buf = in_a.data(), .len = size});
    p.ea->Send({.dest = p.to_b, .buf = out.data(), .len = size});
    WaitOne(*p.eb, *p.ea);
    p.eb->Send({.dest = p.to_a, .buf = in_b.data(), .len = size});
    WaitOne(*p.ea, *p.eb);
    // The senders' completions.
    WaitOne(*p.eb, *p.ea);
    WaitOne(*p.ea, *p.eb);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * 2 * size));
  state.counters["in_place"] = static_cast<double>(p.eb->counters().rendezvous_copied_in_place);
  state.counters["pulled"] = static_cast<double>(p.eb->counters().rendezvous_pulled);
}
BENCHMARK(BM_RdmInPlace)->ArgsProduct({{256 << 10, 1 << 20, 4 << 20}, {0, 1}});

// First contact: a fresh endpoint pair (new incarnations, nothing known
// beyond the inserted addresses), timed from a's first send of one byte
// until b's receive completes: the handshake (HELLO, since wire version 4
// the COOKIE and HELLO echoing it, HELLO_ACK) and the DATA. Arg: 1 if b
// inserted a too (else a is an unknown source to b).
void BM_RdmHandshake(benchmark::State& state) {
  const std::string seg = Segment();
  auto a = OpenPort(seg);
  auto b = OpenPort(seg);
  Port pa(a->queue(0), a->info()), pb(b->queue(0), b->info());
  EndpointConfig c;
  uint8_t in[8], out[8] = {};
  for (auto _ : state) {
    state.PauseTiming();
    std::unique_ptr<Endpoint> ea, eb;
    c.udp_port = 1;
    ea = *Endpoint::Create(pa, driver::SteadyClock::Get(), c);
    c.udp_port = 2;
    eb = *Endpoint::Create(pb, driver::SteadyClock::Get(), c);
    const PeerId to_b = *ea->InsertPeer(eb->address());
    if (state.range(0) == 1 && !eb->InsertPeer(ea->address()).ok()) std::abort();
    eb->PostRecv({.buf = in, .len = sizeof(in)});
    state.ResumeTiming();
    ea->Send({.dest = to_b, .buf = out, .len = 1, .flags = kSendInject});
    WaitOne(*eb, *ea);
    state.PauseTiming();
    eb.reset();
    ea.reset();
    state.ResumeTiming();
  }
}
// Fixed iterations: each one creates two endpoints outside the timing.
BENCHMARK(BM_RdmHandshake)->Arg(0)->Arg(1)->Iterations(3000);

// Scale (issue 22): a hub endpoint with N peers on loopback, each
// handshaked by one message and idle (scale_rig.h). BM_PingPongPeers/N: an
// 8 B round trip between the hub and one of them, with the hub's heap per
// peer (hub_bytes_per_peer: all it took, over N; the scale table below also
// prints the marginal bytes per peer against N = 2). BM_IdleProgressPeers/N:
// one hub Progress pass that finds nothing. One rig at a time (1024
// endpoints take a while to make), kept across a benchmark's repetitions;
// always 18 peer ports on the segment, so that the loopback device's poll
// (a ring per port) costs the same at every N.
ScaleRig& RigOf(uint32_t peers) {
  static std::unique_ptr<ScaleRig> rig;
  static int n = 0;
  if (rig == nullptr || rig->peers() != peers) {
    rig.reset();
    // As many loopback ports for every N (the most peers need): the
    // device's poll costs the same, and the table shows the engine's part.
    rig = std::make_unique<ScaleRig>("rdm-scale-" + std::to_string(n++), peers, EndpointConfig{},
                                     (1024 + ScaleRig::kPerPort - 1) / ScaleRig::kPerPort);
  }
  return *rig;
}

void BM_PingPongPeers(benchmark::State& state) {
  ScaleRig& rig = RigOf(static_cast<uint32_t>(state.range(0)));
  for (auto _ : state) rig.RoundTrip(0);
  state.counters["hub_bytes_per_peer"] =
      static_cast<double>(rig.hub_bytes()) / static_cast<double>(rig.peers());
  state.counters["hub_bytes"] = static_cast<double>(rig.hub_bytes());
}
BENCHMARK(BM_PingPongPeers)->RangeMultiplier(4)->Range(2, 1024);

void BM_IdleProgressPeers(benchmark::State& state) {
  ScaleRig& rig = RigOf(static_cast<uint32_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(rig.hub().Progress());
}
BENCHMARK(BM_IdleProgressPeers)->RangeMultiplier(4)->Range(2, 1024);

// Prints the pulled / in-place ratio of BM_RdmInPlace per size.
class InPlaceRatio : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      const std::string name = r.benchmark_name();
      if (r.run_type != Run::RT_Iteration) continue;
      NoteScale(r, name);
      if (name.rfind("BM_RdmInPlace/", 0) != 0) continue;
      const size_t slash = name.rfind('/');
      (name.substr(slash + 1) == "0" ? pulled_ : in_place_)[name.substr(0, slash)] =
          r.GetAdjustedRealTime();
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    for (const auto& [size, t] : in_place_) {
      const auto it = pulled_.find(size);
      if (it == pulled_.end() || t <= 0) continue;
      std::printf("%s: pulled / in place = %.2f (real time per round trip)\n", size.c_str(),
                  it->second / t);
    }
    PrintScale();
  }

 private:
  struct ScaleRow {
    double rt_ns = 0;
    double hub_bytes = 0;
    double idle_ns = 0;
  };
  void NoteScale(const Run& r, const std::string& name) {
    const size_t slash = name.rfind('/');
    if (slash == std::string::npos) return;
    const std::string what = name.substr(0, slash);
    if (what != "BM_PingPongPeers" && what != "BM_IdleProgressPeers") return;
    ScaleRow& row = scale_[std::stoi(name.substr(slash + 1))];
    if (what == "BM_IdleProgressPeers") {
      row.idle_ns = r.GetAdjustedCPUTime();
      return;
    }
    row.rt_ns = r.GetAdjustedCPUTime();
    const auto it = r.counters.find("hub_bytes");
    if (it != r.counters.end()) row.hub_bytes = it->second.value;
  }
  // The scale table: peers vs round trip (ratio to the fewest peers'),
  // the hub's heap per peer (all of it over N, and what each peer beyond
  // the previous row's added), and an idle pass.
  void PrintScale() const {
    if (scale_.empty()) return;
    const auto& [n0, base] = *scale_.begin();
    std::printf("\nscale: hub with N idle handshaked peers, CPU time per op (2 cores shared, "
                "load %s)\n", LoadAverage().c_str());
    std::printf("| peers | 8 B round trip | vs %d peers | hub heap / peer | added per peer | "
                "idle pass |\n", n0);
    std::printf("|---|---|---|---|---|---|\n");
    const ScaleRow* prev = nullptr;
    int prev_n = 0;
    for (const auto& [n, row] : scale_) {
      char added[32] = "-";
      if (prev != nullptr) {
        std::snprintf(added, sizeof(added), "%.0f B",
                      (row.hub_bytes - prev->hub_bytes) / static_cast<double>(n - prev_n));
      }
      std::printf("| %d | %.2f us | %.2fx | %.0f B | %s | %.1f ns |\n", n, row.rt_ns / 1e3,
                  base.rt_ns > 0 ? row.rt_ns / base.rt_ns : 0.0, row.hub_bytes / n, added,
                  row.idle_ns);
      prev = &row;
      prev_n = n;
    }
  }
  static std::string LoadAverage() {
    double l[1] = {0};
    if (getloadavg(l, 1) != 1) return "unknown";
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.2f", l[0]);
    return buf;
  }

  std::map<std::string, double> pulled_, in_place_;
  std::map<int, ScaleRow> scale_;
};

}  // namespace
}  // namespace bypass::rdm

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  bypass::rdm::InPlaceRatio reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  return 0;
}
