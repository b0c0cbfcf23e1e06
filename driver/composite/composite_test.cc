// The composite device: the conformance suite over pairs of "shm+udp"
// devices, which route every frame to each other through shared memory;
// per-frame routing between a peer of this host (intra-host device) and
// one the intra-host device does not reach (kernel UDP); and the RDM
// engine over both paths at once.
#include "driver/composite/composite_device.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "driver/clock.h"
#include "driver/device.h"
#include "driver/net_headers.h"
#include "driver/shm/shm_device.h"
#include "driver/testing/conformance.h"
#include "driver/testing/conformance_util.h"
#include "fabric/rdm/rdm.h"
#include "gtest/gtest.h"

namespace bypass::driver::composite {
namespace {

using ::bypass::driver::testing::BackendFactory;
using ::bypass::driver::testing::BackendFeatures;
using ::bypass::driver::testing::DeviceConformanceTest;
using ::bypass::driver::testing::EndpointPair;
using ::bypass::driver::testing::LocalIp;

// A fresh directory for the intra-host registry.
std::string TempDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string t = absl::StrCat(base != nullptr ? base : "/tmp", "/shmXXXXXX");
  if (mkdtemp(t.data()) == nullptr) return "";
  return t;
}

std::string CompositeUri(const std::string& dir, int host) {
  return absl::StrCat("shm:", dir, "+udp:lo,ip=", LocalIp(host));
}

absl::StatusOr<std::unique_ptr<Device>> OpenSmall(const std::string& uri) {
  DeviceOptions o;
  o.ring_size = 256;
  o.pool_buffers = 1024;
  return OpenDevice(uri, o);
}

class CompositeFactory final : public BackendFactory {
 public:
  std::string Name() const override { return "shm_udp"; }
  BackendFeatures Features() const override {
    BackendFeatures f;
    f.jumbo = true;
    f.max_queues = 1;
    f.tx_backpressure = true;  // the shared-memory lane fills
    f.binds_udp_ports = true;
    f.poll_budget = 1'000'000;
    return f;
  }
  absl::StatusOr<EndpointPair> Open(const DeviceOptions& opts) override {
    const std::string dir = TempDir();
    absl::StatusOr<std::unique_ptr<Device>> a = OpenDevice(CompositeUri(dir, 1), opts);
    if (!a.ok()) return a.status();
    absl::StatusOr<std::unique_ptr<Device>> b = OpenDevice(CompositeUri(dir, 2), opts);
    if (!b.ok()) return b.status();
    return EndpointPair(*std::move(a), *std::move(b));
  }
};

CompositeFactory factory;

INSTANTIATE_TEST_SUITE_P(Composite, DeviceConformanceTest, ::testing::Values(&factory),
                         ::bypass::driver::testing::BackendParamName);

TEST(CompositeTest, DescribesBothAndKeepsOneAddress) {
  const std::string dir = TempDir();
  absl::StatusOr<std::unique_ptr<Device>> d = OpenSmall(CompositeUri(dir, 1));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)->info().driver, "shm+udp");
  EXPECT_EQ((*d)->info().ipv4.ToString(), LocalIp(1));
  EXPECT_TRUE((*d)->info().host_address);
  EXPECT_EQ((*d)->info().num_queues, 1);
}

TEST(CompositeTest, BadPartsSayWhat) {
  const std::string dir = TempDir();
  absl::StatusOr<std::unique_ptr<Device>> d = OpenSmall(absl::StrCat("udp:lo+udp:lo"));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("shm:"), std::string::npos) << d.status();
  d = OpenSmall(absl::StrCat("shm:", dir, "+udp:nosuch0"));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("nosuch0"), std::string::npos) << d.status();
  d = OpenSmall(absl::StrCat("shm:", dir, ",ip=10.1.1.1+udp:lo,ip=", LocalIp(1)));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("same ip="), std::string::npos) << d.status();
}

// Frames to a peer bound in the intra-host registry go through shared
// memory; frames to one only the kernel knows go through UDP; a peer that
// closes is then reached through UDP (and here, nothing answers).
TEST(CompositeTest, RoutesPerFrame) {
  const std::string dir = TempDir();
  absl::StatusOr<std::unique_ptr<Device>> a = OpenSmall(CompositeUri(dir, 1));
  absl::StatusOr<std::unique_ptr<Device>> b = OpenSmall(CompositeUri(dir, 2));
  absl::StatusOr<std::unique_ptr<Device>> c = OpenSmall(absl::StrCat("udp:lo,ip=", LocalIp(3)));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  constexpr uint16_t kPort = 43000;
  for (Device* d : {a->get(), b->get(), c->get()}) ASSERT_TRUE(d->queue(0).BindUdpPort(kPort).ok());
  auto& q = static_cast<CompositeQueue&>((*a)->queue(0));
  EXPECT_TRUE(q.IsLocal((*b)->info().ipv4, kPort));
  EXPECT_FALSE(q.IsLocal((*c)->info().ipv4, kPort));
  EXPECT_FALSE(q.IsLocal((*b)->info().ipv4, kPort + 1));

  testing::Pump pump(factory.Features());
  auto send = [&](Device& to, uint64_t seq) {
    Packet* p = nullptr;
    ASSERT_TRUE(q.AllocBulk({&p, 1}));
    UdpFlow flow = testing::FlowBetween(**a, to, kPort);
    flow.src_port = kPort;
    ASSERT_TRUE(testing::WriteTestFrame(p, flow, seq, 64));
    ASSERT_TRUE(pump.SendAll(q, {&p, 1}));
  };
  send(**b, 1);
  send(**c, 2);
  for (Device* d : {b->get(), c->get()}) {
    std::vector<Packet*> got = pump.Receive(d->queue(0), 1);
    ASSERT_EQ(got.size(), 1u) << d->info().uri;
    d->queue(0).FreeBulk({got.data(), got.size()});
  }
  EXPECT_EQ(q.routes().tx_local, 1u);
  EXPECT_EQ(q.routes().tx_remote, 1u);

  // c answers through the kernel; a's RX sees it.
  Packet* p = nullptr;
  ASSERT_TRUE((*c)->queue(0).AllocBulk({&p, 1}));
  UdpFlow back = testing::FlowBetween(**c, **a, kPort);
  back.src_port = kPort;
  ASSERT_TRUE(testing::WriteTestFrame(p, back, 3, 64));
  ASSERT_TRUE(pump.SendAll((*c)->queue(0), {&p, 1}));
  std::vector<Packet*> got = pump.Receive(q, 1);
  ASSERT_EQ(got.size(), 1u);
  q.FreeBulk({got.data(), got.size()});

  // b leaves: its port is no longer in the registry, so the next frame to
  // it takes the remote path.
  b->reset();
  EXPECT_FALSE(q.IsLocal(Ipv4Address{0}, kPort));
  ASSERT_TRUE(q.AllocBulk({&p, 1}));
  UdpFlow gone = testing::FlowBetween(**a, **c, kPort);
  gone.src_port = kPort;
  gone.dst_ip = *Ipv4Address::Parse(LocalIp(2));
  ASSERT_TRUE(testing::WriteTestFrame(p, gone, 4, 64));
  ASSERT_TRUE(pump.SendAll(q, {&p, 1}));
  EXPECT_EQ(q.routes().tx_local, 1u);
  EXPECT_EQ(q.routes().tx_remote, 2u);
}

// Toward peers of this host the composite's frames are the intra-host
// device's (kCompositeShmMtu, its TX buffers as large), while its MTU, what
// remote peers are told, stays the remote device's; a frame that long for
// a peer reached the remote way is dropped, never sent beyond this host.
TEST(CompositeTest, FramesToThisHostAreLargerThanTheRemoteMtu) {
  const std::string dir = TempDir();
  absl::StatusOr<std::unique_ptr<Device>> a = OpenSmall(CompositeUri(dir, 1));
  absl::StatusOr<std::unique_ptr<Device>> b = OpenSmall(CompositeUri(dir, 2));
  absl::StatusOr<std::unique_ptr<Device>> c = OpenSmall(absl::StrCat("udp:lo,ip=", LocalIp(3)));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ((*a)->info().mtu, 1500u);
  EXPECT_EQ((*a)->info().same_host_mtu, shm::kCompositeShmMtu);
  constexpr uint16_t kPort = 43100;
  for (Device* d : {a->get(), b->get(), c->get()}) ASSERT_TRUE(d->queue(0).BindUdpPort(kPort).ok());
  auto& q = static_cast<CompositeQueue&>((*a)->queue(0));
  testing::Pump pump(factory.Features());
  constexpr size_t kPayload = 4096 + 76;  // a 4 KiB message and the engine's headers
  auto frame = [&](Device& to) {
    Packet* p = nullptr;
    EXPECT_TRUE(q.AllocBulk({&p, 1}));
    EXPECT_GE(p->capacity, shm::kCompositeShmMtu + 14);
    UdpFlow flow = testing::FlowBetween(**a, to, kPort);
    flow.src_port = kPort;
    EXPECT_TRUE(testing::WriteTestFrame(p, flow, 1, kPayload));
    return p;
  };
  Packet* p = frame(**b);
  const uint32_t len = p->len;
  ASSERT_TRUE(pump.SendAll(q, {&p, 1}));
  std::vector<Packet*> got = pump.Receive((*b)->queue(0), 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0]->len, len);
  (*b)->queue(0).FreeBulk({got.data(), got.size()});
  p = frame(**c);
  EXPECT_EQ(q.TxBurst({&p, 1}), 1u);  // taken, and dropped
  EXPECT_EQ(q.routes().tx_too_long, 1u);
  EXPECT_EQ(q.routes().tx_remote, 0u);

  // An intra-host part that names its MTU keeps it, for both kinds of peer.
  absl::StatusOr<std::unique_ptr<Device>> d =
      OpenSmall(absl::StrCat("shm:", dir, ",mtu=1500+udp:lo,ip=", LocalIp(4)));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)->info().mtu, 1500u);
  EXPECT_EQ((*d)->info().same_host_mtu, 0u);
}

// The engine over a composite device: one peer of this host (shared
// memory) and one only the kernel reaches, at once, every byte checked.
TEST(CompositeTest, EngineReachesLocalAndRemotePeers) {
  const std::string dir = TempDir();
  std::vector<std::unique_ptr<Device>> devs;
  // 2 is a composite too, of another registry: to 0 and 1 a process of
  // another host, its own limit as large as theirs. Were it told 0's
  // same-host limit, its frames to 0 would be too long for the kernel UDP
  // device and dropped (tx_too_long), and its messages would never arrive.
  const std::string other_dir = TempDir();
  for (const std::string& uri :
       {CompositeUri(dir, 1), CompositeUri(dir, 2), CompositeUri(other_dir, 3)}) {
    absl::StatusOr<std::unique_ptr<Device>> d = OpenSmall(uri);
    ASSERT_TRUE(d.ok()) << d.status();
    devs.push_back(*std::move(d));
  }
  const Clock& clock = SteadyClock::Get();
  std::vector<std::unique_ptr<rdm::Port>> ports;
  std::vector<std::unique_ptr<rdm::Endpoint>> eps;
  for (auto& d : devs) {
    ports.push_back(std::make_unique<rdm::Port>(d->queue(0), d->info()));
    absl::StatusOr<std::unique_ptr<rdm::Endpoint>> ep =
        rdm::Endpoint::Create(*ports.back(), clock, {.udp_port = 44000});
    ASSERT_TRUE(ep.ok()) << ep.status();
    eps.push_back(*std::move(ep));
  }
  // 0 sends to 1 (this host) and 2 (kernel UDP only); both answer.
  constexpr int kMsgs = 200;
  constexpr size_t kLen = 3000;  // one packet each to this host's peer, two to the remote one
  std::vector<rdm::PeerId> to(3);
  for (int i = 1; i < 3; ++i) to[i] = *eps[0]->InsertPeer(eps[i]->address());
  std::vector<std::vector<uint8_t>> rx(3, std::vector<uint8_t>(kLen * kMsgs));
  for (int i = 1; i < 3; ++i) {
    if (i == 1) (void)*eps[i]->InsertPeer(eps[0]->address());
    for (int m = 0; m < kMsgs; ++m) {
      ASSERT_EQ(eps[i]->PostRecv({.buf = rx[i].data() + m * kLen, .len = kLen}), rdm::Result::kOk);
    }
  }
  // And 2 sends as many to 0.
  const rdm::PeerId from2 = *eps[2]->InsertPeer(eps[0]->address());
  for (int m = 0; m < kMsgs; ++m) {
    ASSERT_EQ(eps[0]->PostRecv({.buf = rx[0].data() + m * kLen, .len = kLen}), rdm::Result::kOk);
  }
  std::vector<uint8_t> tx(kLen * kMsgs);
  for (size_t k = 0; k < tx.size(); ++k) tx[k] = static_cast<uint8_t>(k * 7 + 3);
  int sent[3] = {0, 0, 0};
  int received[3] = {0, 0, 0};
  int sent_back = 0;
  for (int spin = 0; spin < 50'000'000 &&
                     (received[1] < kMsgs || received[2] < kMsgs || received[0] < kMsgs);
       ++spin) {
    for (int i = 1; i < 3; ++i) {
      if (sent[i] < kMsgs &&
          eps[0]->Send({.dest = to[i], .buf = tx.data() + sent[i] * kLen, .len = kLen}) == rdm::Result::kOk) {
        ++sent[i];
      }
    }
    if (sent_back < kMsgs &&
        eps[2]->Send({.dest = from2, .buf = tx.data() + sent_back * kLen, .len = kLen}) ==
            rdm::Result::kOk) {
      ++sent_back;
    }
    for (auto& ep : eps) ep->Progress();
    for (int i = 0; i < 3; ++i) {
      rdm::Completion c[16];
      const size_t n = eps[i]->PollCompletions(c);
      for (size_t k = 0; k < n; ++k) {
        if ((c[k].flags & rdm::kCompRecv) != 0) ++received[i];
      }
    }
  }
  ASSERT_EQ(received[1], kMsgs);
  ASSERT_EQ(received[2], kMsgs);
  ASSERT_EQ(received[0], kMsgs);
  EXPECT_EQ(rx[1], tx);
  EXPECT_EQ(rx[2], tx);
  EXPECT_EQ(rx[0], tx);
  EXPECT_EQ(static_cast<CompositeQueue&>(devs[2]->queue(0)).routes().tx_too_long, 0u);
  auto& q = static_cast<CompositeQueue&>(devs[0]->queue(0));
  // One frame per message to the peer of this host (its HELLO announced
  // the intra-host device's limit), two to the remote one (1500).
  EXPECT_GE(q.routes().tx_local, 1u * kMsgs);
  EXPECT_LT(q.routes().tx_local, 2u * kMsgs);
  EXPECT_GE(q.routes().tx_remote, 2u * kMsgs);
  EXPECT_EQ(q.routes().tx_too_long, 0u);
}

// The pacer of remote polls, on a TSC the test hands it (no clock read): at
// once at first, then intervals doubling to kMaxGap while the remote device
// had traffic within kIdleAfter, to kIdleGap once it has not; traffic in
// either direction brings the next poll at once.
TEST(RemotePacerTest, ShortWhileTalkingLongWhenSilent) {
  using P = RemotePacer;
  P p;
  uint64_t now = uint64_t{1} << 40;  // no traffic yet: silent
  EXPECT_TRUE(p.Due(now));
  p.Polled(now, false);
  EXPECT_EQ(p.gap(), P::kMinGap);
  EXPECT_FALSE(p.Due(now + P::kMinGap - 1));
  EXPECT_TRUE(p.Due(now + P::kMinGap));
  for (int i = 0; i < 40; ++i) {
    now += p.gap();
    ASSERT_TRUE(p.Due(now));
    p.Polled(now, false);
  }
  EXPECT_EQ(p.gap(), P::kIdleGap);

  // A frame in: the next poll at once, and short intervals from there.
  p.Polled(now, true);
  EXPECT_TRUE(p.Due(now));
  const uint64_t heard = now;
  while (now + p.gap() - heard < P::kIdleAfter) {
    now += p.gap();
    p.Polled(now, false);
    ASSERT_LE(p.gap(), P::kMaxGap);
  }
  EXPECT_EQ(p.gap(), P::kMaxGap);
  // Silent for kIdleAfter: the intervals grow to kIdleGap.
  now = heard + P::kIdleAfter;
  for (int i = 0; i < 40; ++i) {
    now += p.gap();
    p.Polled(now, false);
  }
  EXPECT_EQ(p.gap(), P::kIdleGap);

  // A frame sent: polled at once (its answer may come), then short again.
  p.Active(now);
  EXPECT_TRUE(p.Due(now));
  for (int i = 0; i < 40; ++i) {
    now += p.gap();
    p.Polled(now, false);
  }
  EXPECT_EQ(p.gap(), P::kMaxGap);
}

// A composite whose remote device has been silent (polled at the long
// interval) still hears a remote frame, and polls the remote device again
// soon after; the frames of this host are not held up meanwhile.
TEST(CompositeTest, ASilentRemoteIsStillHeard) {
  const std::string dir = TempDir();
  absl::StatusOr<std::unique_ptr<Device>> a = OpenSmall(CompositeUri(dir, 1));
  absl::StatusOr<std::unique_ptr<Device>> b = OpenSmall(CompositeUri(dir, 2));
  absl::StatusOr<std::unique_ptr<Device>> c = OpenSmall(absl::StrCat("udp:lo,ip=", LocalIp(3)));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  constexpr uint16_t kPort = 43100;
  for (Device* d : {a->get(), b->get(), c->get()}) ASSERT_TRUE(d->queue(0).BindUdpPort(kPort).ok());
  auto& q = static_cast<CompositeQueue&>((*a)->queue(0));
  Packet* scratch[8];
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(q.RxBurst(scratch), 0);
  EXPECT_GT(q.routes().rx_remote_polls, 0u);

  testing::Pump pump(CompositeFactory().Features());
  for (uint64_t seq = 1; seq <= 3; ++seq) {
    Device& from = seq == 2 ? **b : **c;  // c through the kernel, b through shared memory
    Packet* p = nullptr;
    ASSERT_TRUE(from.queue(0).AllocBulk({&p, 1}));
    UdpFlow flow = testing::FlowBetween(from, **a, kPort);
    flow.src_port = kPort;
    ASSERT_TRUE(testing::WriteTestFrame(p, flow, seq, 64));
    ASSERT_TRUE(pump.SendAll(from.queue(0), {&p, 1}));
    std::vector<Packet*> got = pump.Receive(q, 1);
    ASSERT_EQ(got.size(), 1u) << seq;
    EXPECT_EQ(testing::TestFrameSeq(got[0]).value_or(0), seq);
    q.FreeBulk({got.data(), got.size()});
  }
}

}  // namespace
}  // namespace bypass::driver::composite
