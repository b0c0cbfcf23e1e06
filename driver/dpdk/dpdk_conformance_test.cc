// The device conformance suite over the DPDK backends this machine has:
// net_ring in this process; memif between two processes; af_packet over a
// veth pair between two network namespaces that the test creates and
// removes; af_xdp over the same veth pair. The second process is
// //test:reflector, which sends every frame back with the Ethernet addresses
// swapped, so for those backends the pair is one device whose frames come
// back to it.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "driver/clock.h"
#include "driver/device.h"
#include "driver/testing/conformance.h"
#include "driver/testing/conformance_util.h"
#include "gtest/gtest.h"
#include "test/netns.h"

// The af_xdp PMD's leak of libxdp's UMEM handle is suppressed for LSan in
// every binary linking the DPDK backends (driver/dpdk/sanitizer_suppressions.cc).

namespace bypass::driver {
namespace {

using ::bypass::driver::testing::BackendFactory;
using ::bypass::driver::testing::BackendFeatures;
using ::bypass::driver::testing::DeviceConformanceTest;
using ::bypass::driver::testing::EndpointPair;
using ::bypass::driver::testing::FlowBetween;
using ::bypass::driver::testing::Pump;
using ::bypass::driver::testing::TestFrameSeq;
using ::bypass::driver::testing::WriteTestFrame;

// The largest MTU af_xdp takes with 4 KiB pages (AfXdpMaxMtu in af_xdp.h):
// the veth pair has it, so that XDP on veth (whose limit is about the same)
// and the kernel's forwarding pass such frames.
constexpr uint32_t kAfXdpLargestMtu = 3502;

// The reflector process of a pair; killed with the pair.
class Reflector {
 public:
  static absl::StatusOr<std::unique_ptr<Reflector>> Start(const std::string& uri,
                                                          const std::string& netns) {
    const char* srcdir = std::getenv("TEST_SRCDIR");
    const std::string bin = absl::StrCat(srcdir ? srcdir : ".", "/bypass/test/reflector");
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) return absl::InternalError("pipe");
    const pid_t pid = fork();
    if (pid < 0) return absl::InternalError("fork");
    if (pid == 0) {
      dup2(out[1], 1);
      std::vector<std::string> args = {bin, uri};
      if (!netns.empty()) args.push_back("--netns=" + netns);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(bin.c_str(), argv.data());
      std::perror("exec reflector");
      _exit(127);
    }
    close(out[1]);
    auto r = std::unique_ptr<Reflector>(new Reflector(pid, out[0]));
    // It prints "ready ..." once its device is open and its link is up; that
    // needs our side to be open too for memif, so waiting happens later.
    return r;
  }

  // Waits for the "ready" line (cold path, bounded).
  absl::Status WaitReady(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    std::string line;
    while (line.find('\n') == std::string::npos) {
      if (poll(&p, 1, timeout_ms) <= 0) {
        return absl::DeadlineExceededError("the reflector did not become ready");
      }
      char buf[128];
      const ssize_t n = read(fd_, buf, sizeof(buf));
      if (n <= 0) return absl::UnavailableError("the reflector exited (its error is above)");
      line.append(buf, static_cast<size_t>(n));
    }
    return absl::OkStatus();
  }

  ~Reflector() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    close(fd_);
  }

 private:
  Reflector(pid_t pid, int fd) : pid_(pid), fd_(fd) {}
  pid_t pid_;
  int fd_;
};

// A device whose peer is a reflector process: forwards everything, and owns
// the reflector so it goes away with the device.
class ReflectedDevice final : public Device {
 public:
  ReflectedDevice(std::unique_ptr<Device> inner, std::unique_ptr<Reflector> reflector)
      : inner_(std::move(inner)), reflector_(std::move(reflector)) {}
  ~ReflectedDevice() override {
    inner_.reset();  // close our side first, so the reflector sees it go
    reflector_.reset();
  }
  const DeviceInfo& info() const override { return inner_->info(); }
  QueuePair& queue(uint16_t q) override { return inner_->queue(q); }
  absl::Status SteerUdpPort(uint16_t p, uint16_t q) override { return inner_->SteerUdpPort(p, q); }
  LinkState link_state() const override { return inner_->link_state(); }
  absl::Status SetLinkState(LinkState s) override { return inner_->SetLinkState(s); }

 private:
  std::unique_ptr<Device> inner_;
  std::unique_ptr<Reflector> reflector_;
};

absl::Status WaitLinkUp(Device& dev) {
  const uint64_t deadline = SteadyClock::Get().NowNs() + 5'000'000'000ull;
  while (dev.link_state() != LinkState::kUp) {
    if (SteadyClock::Get().NowNs() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(dev.info().uri, ": link stayed down"));
    }
    usleep(1000);
  }
  return absl::OkStatus();
}

int g_pairs = 0;

// net_ring: one port whose TX ring is its RX ring.
class RingFactory final : public BackendFactory {
 public:
  std::string Name() const override { return "dpdk_net_ring"; }
  BackendFeatures Features() const override {
    BackendFeatures f;
    f.jumbo = true;
    f.max_queues = 1;
    // Its ring has the vdev's own fixed size, not ring_size: the suite's
    // back-pressure test cannot size its pool to fill it.
    f.tx_backpressure = false;
    f.poll_budget = 100'000;
    return f;
  }
  absl::StatusOr<EndpointPair> Open(const DeviceOptions& opts) override {
    auto a = OpenDevice(absl::StrCat("dpdk:net_ring_conf", ++g_pairs), opts);
    if (!a.ok()) return a.status();
    return EndpointPair(*std::move(a), nullptr);
  }
};

// Our side opens URI `ours`; the reflector opens `theirs` (in `netns`).
class ReflectedFactory final : public BackendFactory {
 public:
  using UriFn = std::string (*)(int pair, bool ours, const DeviceOptions& opts);
  ReflectedFactory(std::string name, UriFn uri, bool needs_veth, bool jumbo)
      : name_(std::move(name)), uri_(uri), needs_veth_(needs_veth), jumbo_(jumbo) {}

  std::string Name() const override { return name_; }
  BackendFeatures Features() const override {
    BackendFeatures f;
    f.jumbo = jumbo_;
    f.max_queues = 1;
    f.poll_budget = 50'000'000;  // another process answers: allow more polls
    return f;
  }
  absl::StatusOr<EndpointPair> Open(const DeviceOptions& opts) override {
    std::string netns;
    if (needs_veth_) {
      if (absl::Status s = EnsureVeth(); !s.ok()) return s;
      netns = veth_->ns_b();
    }
    const int pair = ++g_pairs;
    auto reflector = Reflector::Start(uri_(pair, false, opts), netns);
    if (!reflector.ok()) return reflector.status();
    auto a = OpenDevice(uri_(pair, true, opts), opts);
    if (!a.ok()) return a.status();
    if (absl::Status s = WaitLinkUp(**a); !s.ok()) return s;
    if (absl::Status s = (*reflector)->WaitReady(20000); !s.ok()) return s;
    return EndpointPair(std::make_unique<ReflectedDevice>(*std::move(a), *std::move(reflector)),
                        nullptr);
  }

  static test::VethPair* veth() { return veth_.get(); }

 private:
  // One veth pair for the whole binary; this process lives in namespace a.
  static absl::Status EnsureVeth() {
    if (veth_) return absl::OkStatus();
    auto v = test::VethPair::Create(absl::StrCat("bpc", getpid() % 10000, "_"));
    if (!v.ok()) return v.status();
    veth_ = *std::move(v);
    for (const auto& [ns, ifname] : {std::pair{veth_->ns_a(), veth_->if_a()},
                                     std::pair{veth_->ns_b(), veth_->if_b()}}) {
      if (absl::Status s = test::Run(absl::StrCat("ip -n ", ns, " link set dev ", ifname,
                                                  " mtu ", kAfXdpLargestMtu));
          !s.ok()) {
        return s;
      }
    }
    return veth_->EnterA();
  }

  std::string name_;
  UriFn uri_;
  bool needs_veth_;
  bool jumbo_;
  static inline std::unique_ptr<test::VethPair> veth_;
};

std::string MemifUri(int pair, bool ours, const DeviceOptions&) {
  return absl::StrCat("memif:/tmp/bypass-conf-", getpid(), "-", pair, ".sock,role=",
                      ours ? "client" : "server");
}

std::string AfPacketUri(int pair, bool ours, const DeviceOptions&) {
  test::VethPair* v = ReflectedFactory::veth();
  return absl::StrCat("dpdk:net_af_packet_c", pair, ours ? "a" : "b",
                      ",iface=", ours ? v->if_a() : v->if_b());
}

std::string AfXdpUri(int pair, bool ours, const DeviceOptions& opts) {
  test::VethPair* v = ReflectedFactory::veth();
  return absl::StrCat("dpdk:net_af_xdp_c", pair, ours ? "a" : "b",
                      ",iface=", ours ? v->if_a() : v->if_b(),
                      opts.mtu != 1500 ? absl::StrCat(",mtu=", opts.mtu) : "");
}

RingFactory ring;
// DPDK 22.11's memif reports 1518-byte frames at most: no jumbo frames.
ReflectedFactory memif("dpdk_memif_two_processes", MemifUri, false, /*jumbo=*/false);
ReflectedFactory af_packet("dpdk_af_packet_veth_netns", AfPacketUri, true, /*jumbo=*/false);
ReflectedFactory af_xdp("dpdk_af_xdp_veth_netns", AfXdpUri, true, /*jumbo=*/false);

INSTANTIATE_TEST_SUITE_P(Dpdk, DeviceConformanceTest,
                         ::testing::Values(&ring, &memif, &af_packet, &af_xdp),
                         ::bypass::driver::testing::BackendParamName);

// af_xdp at the largest MTU a page allows: frames of every length up to it
// arrive whole. The kernel drops a frame longer than its UMEM chunk less
// its XDP headroom, which the pool's data room once left out: from about
// 1770 bytes on frames were lost (4 KiB rdm messages at mtu=3000 never got
// a reply).
TEST(AfXdpLargestMtu, FramesOfEveryLengthArriveWhole) {
  DeviceOptions opts;
  opts.mtu = kAfXdpLargestMtu;
  absl::StatusOr<EndpointPair> pair = af_xdp.Open(opts);
  ASSERT_TRUE(pair.ok()) << pair.status();
  Device& dev = pair->a();
  ASSERT_EQ(dev.info().mtu, kAfXdpLargestMtu);
  QueuePair& q = dev.queue(0);
  const uint32_t before = q.PoolAvailable();
  Pump pump(af_xdp.Features());
  const auto flow = FlowBetween(dev, dev, testing::kSuitePorts[2]);
  // 28 bytes of IPv4 and UDP headers: frames of MTU + 14 bytes down to 2 KiB.
  std::vector<size_t> payloads;
  for (size_t p = kAfXdpLargestMtu - 28; p >= 2048; p -= 160) payloads.push_back(p);
  std::vector<Packet*> pkts(payloads.size());
  ASSERT_TRUE(q.AllocBulk(absl::MakeSpan(pkts)));
  for (size_t i = 0; i < pkts.size(); ++i) {
    ASSERT_TRUE(WriteTestFrame(pkts[i], flow, i, payloads[i])) << "capacity " << pkts[i]->capacity;
  }
  ASSERT_TRUE(pump.SendAll(q, pkts));
  std::vector<Packet*> got = pump.Receive(q, pkts.size());
  ASSERT_EQ(got.size(), payloads.size()) << "frames lost";
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i]->len, payloads[i] + 42) << "frame " << i;
    EXPECT_EQ(TestFrameSeq(got[i]), i) << "frame " << i << " damaged or reordered";
  }
  q.FreeBulk(got);
  EXPECT_EQ(q.PoolAvailable(), before);
}

// Without mtu= af_xdp takes its interface's MTU (up to the largest it
// takes), as the kernel UDP device follows its link.
TEST(AfXdpLargestMtu, WithoutMtuTheLinksIsTaken) {
  absl::StatusOr<EndpointPair> pair = af_xdp.Open(DeviceOptions{});
  ASSERT_TRUE(pair.ok()) << pair.status();
  EXPECT_EQ(pair->a().info().mtu, kAfXdpLargestMtu);
}

}  // namespace
}  // namespace bypass::driver
