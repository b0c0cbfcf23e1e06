// The RDM engine (fabric/rdm) over two fake ConnectX NICs joined by a wire:
// tagged and untagged messages of one to many packets each way, every
// payload byte checked, on the mlx5 queue pair and ring code.
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "driver/clock.h"
#include "driver/device.h"
#include "driver/mlx5/fake_device.h"
#include "fabric/rdm/rdm.h"
#include "gtest/gtest.h"

namespace bypass::driver::mlx5 {
namespace {

using rdm::Address;
using rdm::Endpoint;
using rdm::EndpointConfig;
using rdm::PeerId;
using rdm::Port;
using rdm::Result;

constexpr int kMessages = 200;  // each way
constexpr uint16_t kUdpPort = 4791;
constexpr size_t kSizes[] = {0, 1, 64, 1000, 1400, 1500, 4000, 9000, 30000, 70000, 17};

size_t SizeOf(int side, int i) { return kSizes[(i * 5 + side * 3) % std::size(kSizes)]; }
bool Tagged(int side, int i) { return (i + side) % 3 == 0; }
uint64_t TagOf(int side, int i) {
  return (static_cast<uint64_t>(side) << 32) | static_cast<uint64_t>(1000 + i);
}
uint8_t ByteOf(int side, int i, size_t k) {
  return static_cast<uint8_t>((side + 1) * 131 + i * 17 + k * 7 + (k >> 8));
}

// One side: a fake mlx5 device, a port and an endpoint.
struct Side {
  Side(std::shared_ptr<Wire> wire, int index, ManualClock& clock) {
    DeviceOptions o;
    dev = *FakeMlx5Device::Open(std::move(wire), index, o, FakeNic::Options{});
    port = std::make_unique<Port>(dev->queue(0), dev->info());
    EndpointConfig c;
    c.udp_port = kUdpPort;
    c.max_posted_recvs = kMessages;
    ep = *Endpoint::Create(*port, clock, c);
  }
  Address address() const {
    Address a;
    a.mac = dev->info().mac;
    a.ip = dev->info().ipv4;
    a.udp_port = kUdpPort;
    return a;
  }
  std::unique_ptr<FakeMlx5Device> dev;
  std::unique_ptr<Port> port;
  std::unique_ptr<Endpoint> ep;
};

TEST(RdmOverFakeMlx5Test, TaggedAndUntaggedMessagesArriveWhole) {
  auto wire = std::make_shared<Wire>();
  ManualClock clock(1'000'000);
  Side sides[2] = {Side(wire, 0, clock), Side(wire, 1, clock)};
  PeerId peer[2];
  std::vector<std::vector<uint8_t>> out[2], in[2];
  for (int s = 0; s < 2; ++s) {
    peer[s] = *sides[s].ep->InsertPeer(sides[1 - s].address());
    out[s].resize(kMessages);
    in[s].resize(kMessages);
    for (int i = 0; i < kMessages; ++i) {
      out[s][i].resize(SizeOf(s, i));
      for (size_t k = 0; k < out[s][i].size(); ++k) out[s][i][k] = ByteOf(s, i, k);
      in[s][i].assign(SizeOf(1 - s, i) + 1, 0xee);
      rdm::RecvRequest r{.buf = in[s][i].data(), .len = in[s][i].size(),
                         .context = reinterpret_cast<void*>(static_cast<intptr_t>(i + 1))};
      if (Tagged(1 - s, i)) {
        r.tagged = true;
        r.tag = TagOf(1 - s, i);
      }
      ASSERT_EQ(sides[s].ep->PostRecv(r), Result::kOk);
    }
  }
  int sent[2] = {}, send_done[2] = {}, recv_done[2] = {};
  rdm::Completion comps[64];
  rdm::ErrorCompletion err;
  for (int step = 0; step < 2'000'000; ++step) {
    bool done = true;
    for (int s = 0; s < 2; ++s) {
      Endpoint& ep = *sides[s].ep;
      while (sent[s] < kMessages) {
        rdm::SendRequest r{.dest = peer[s], .buf = out[s][sent[s]].data(),
                           .len = out[s][sent[s]].size(),
                           .context = reinterpret_cast<void*>(-(sent[s] + 1))};
        if (Tagged(s, sent[s])) {
          r.flags = rdm::kSendTagged;
          r.tag = TagOf(s, sent[s]);
        }
        if (ep.Send(r) != Result::kOk) break;
        ++sent[s];
      }
      ep.Progress();
      ASSERT_EQ(ep.PollErrors({&err, 1}), 0u) << err.message;
      const size_t n = ep.PollCompletions(comps);
      for (size_t k = 0; k < n; ++k) {
        const intptr_t v = reinterpret_cast<intptr_t>(comps[k].context);
        if (v < 0) {
          ++send_done[s];
          continue;
        }
        const int i = static_cast<int>(v - 1);
        const size_t want = SizeOf(1 - s, i);
        ASSERT_EQ(comps[k].len, want) << "side " << s << " message " << i;
        for (size_t b = 0; b < want; ++b) {
          ASSERT_EQ(in[s][i][b], ByteOf(1 - s, i, b)) << "side " << s << " message " << i;
        }
        ASSERT_EQ(in[s][i][want], 0xee) << "overrun";
        ++recv_done[s];
      }
      done = done && send_done[s] == kMessages && recv_done[s] == kMessages;
    }
    if (done) break;
    clock.Advance(1'000);
  }
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ(send_done[s], kMessages) << "side " << s;
    EXPECT_EQ(recv_done[s], kMessages) << "side " << s;
    EXPECT_EQ(sides[s].dev->qp().errors(), 0u) << sides[s].dev->qp().last_error();
  }
}

}  // namespace
}  // namespace bypass::driver::mlx5
