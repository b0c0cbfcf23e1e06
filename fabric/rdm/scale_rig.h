// Many peers in one process (issue 22, "Scale"): a hub endpoint and N peer
// endpoints on loopback ports of one segment, each peer handshaked with the
// hub once by one 8 B message, then idle. What the hub's heap grew by from
// its creation to that idle state is measured (mallinfo2: bytes in use plus
// mmapped blocks); 8 B round trips then run between the hub and one peer.
// Shared by engine_benchmark (the scale table) and scale_test (the bound on
// bytes per idle peer).
#ifndef BYPASS_FABRIC_RDM_SCALE_RIG_H_
#define BYPASS_FABRIC_RDM_SCALE_RIG_H_

#include <malloc.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "driver/clock.h"
#include "driver/loopback/loopback_device.h"
#include "driver/uri.h"
#include "fabric/rdm/rdm.h"

namespace bypass::rdm {

// Heap bytes this process holds (malloc's arena in use plus its mmapped blocks).
inline uint64_t HeapBytes() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

class ScaleRig {
 public:
  // Endpoints per loopback port (Port::kMaxEndpoints bounds it).
  static constexpr uint32_t kPerPort = 60;

  // peers: how many; hub: the hub's settings (udp_port and max_peers are
  // set here); min_ports: peer ports to open at least (the loopback device
  // polls a ring per port of its segment: a benchmark comparing peer counts
  // keeps that cost the same by opening as many ports for few peers).
  ScaleRig(const std::string& segment, uint32_t peers, EndpointConfig hub = {},
           uint32_t min_ports = 0) {
    const uint32_t ports = std::max(min_ports, (peers + kPerPort - 1) / kPerPort);
    devs_.push_back(OpenPort(segment));
    for (uint32_t i = 0; i < ports; ++i) devs_.push_back(OpenPort(segment));
    for (auto& d : devs_) ports_.push_back(std::make_unique<Port>(d->queue(0), d->info()));
    // Small peers: each knows only the hub.
    EndpointConfig pc;
    pc.max_peers = 2;
    pc.max_send_ops = 8;
    pc.max_posted_recvs = 8;
    pc.max_unexpected_msgs = 8;
    pc.unexpected_bytes = 64u << 10;
    pc.max_regions = 1;
    pc.max_rma_ops = 2;
    pc.window_packets = 16;
    // Each endpoint keeps up to tx_burst spare TX buffers: kPerPort of them
    // must leave most of their port's pool free.
    pc.tx_burst = 4;
    pc.rx_burst = 8;
    for (uint32_t i = 0; i < peers; ++i) {
      pc.udp_port = static_cast<uint16_t>(1000 + i);
      peers_.push_back(Must(Endpoint::Create(*ports_[1 + i % ports], clock(), pc)));
    }
    hub.udp_port = 1;
    hub.max_peers = peers;
    const uint64_t before = HeapBytes();
    hub_ = Must(Endpoint::Create(*ports_[0], clock(), hub));
    for (auto& p : peers_) {
      to_.push_back(Must(hub_->InsertPeer(p->address())));
      from_.push_back(Must(p->InsertPeer(hub_->address())));
    }
    // One 8 B message to each peer, completed when acknowledged.
    uint8_t out[8] = {};
    std::vector<uint8_t> bufs(8 * peers);
    uint32_t sent = 0, got = 0;
    Completion c[64];
    const auto progress = [&] {
      hub_->Progress();
      sent += static_cast<uint32_t>(hub_->PollCompletions(c));
      for (auto& p : peers_) {
        p->Progress();
        got += static_cast<uint32_t>(p->PollCompletions(c));
      }
    };
    for (uint32_t i = 0; i < peers; ++i) {
      Check(peers_[i]->PostRecv({.buf = &bufs[8 * i], .len = 8}) == Result::kOk, "PostRecv");
      while (hub_->Send({.dest = to_[i], .buf = out, .len = 8}) == Result::kAgain) progress();
    }
    for (uint64_t spin = 0; sent < peers || got < peers; ++spin) {
      Check(spin < 10'000'000, "the handshakes did not finish");
      progress();
    }
    hub_bytes_ = HeapBytes() - before;
  }
  ScaleRig(const ScaleRig&) = delete;
  ScaleRig& operator=(const ScaleRig&) = delete;
  ~ScaleRig() {
    hub_.reset();
    peers_.clear();
    ports_.clear();
  }

  Endpoint& hub() { return *hub_; }
  Endpoint& peer(uint32_t i) { return *peers_[i]; }
  uint32_t peers() const { return static_cast<uint32_t>(peers_.size()); }
  // What the hub's heap grew by, from before its creation to every peer
  // handshaked and idle.
  uint64_t hub_bytes() const { return hub_bytes_; }

  // One 8 B round trip between the hub and peer i (the peer echoes).
  void RoundTrip(uint32_t i) {
    uint8_t out[8] = {}, in_h[8], in_p[8];
    Endpoint& p = *peers_[i];
    p.PostRecv({.buf = in_p, .len = sizeof(in_p)});
    hub_->PostRecv({.buf = in_h, .len = sizeof(in_h)});
    hub_->Send({.dest = to_[i], .buf = out, .len = 8, .flags = kSendInject});
    WaitRecv(p, *hub_);
    p.Send({.dest = from_[i], .buf = in_p, .len = 8, .flags = kSendInject});
    WaitRecv(*hub_, p);
  }

 private:
  static const driver::Clock& clock() { return driver::SteadyClock::Get(); }
  static void Check(bool ok, const char* what) {
    if (ok) return;
    std::fprintf(stderr, "scale rig: %s\n", what);
    std::abort();
  }
  template <class T>
  static T Must(absl::StatusOr<T> v) {
    if (!v.ok()) {
      std::fprintf(stderr, "scale rig: %s\n", v.status().ToString().c_str());
      std::abort();
    }
    return *std::move(v);
  }
  static std::unique_ptr<driver::loopback::LoopbackDevice> OpenPort(const std::string& segment) {
    driver::DeviceOptions o;
    o.ring_size = 256;
    return Must(driver::loopback::Open(*driver::DeviceUri::Parse("loopback:" + segment), o));
  }
  // Progresses both until e completes a receive (sends are injects).
  static void WaitRecv(Endpoint& e, Endpoint& other) {
    Completion c;
    for (;;) {
      e.Progress();
      other.Progress();
      if (e.PollCompletions({&c, 1}) > 0 && (c.flags & kCompRecv) != 0) return;
    }
  }

  std::vector<std::unique_ptr<driver::loopback::LoopbackDevice>> devs_;
  std::vector<std::unique_ptr<Port>> ports_;
  std::vector<std::unique_ptr<Endpoint>> peers_;
  std::unique_ptr<Endpoint> hub_;
  std::vector<PeerId> to_, from_;
  uint64_t hub_bytes_ = 0;
};

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_SCALE_RIG_H_
