// Test helpers: a loopback segment of fault-injecting devices with one
// endpoint each and a manual clock, a pump that steps them, a queue
// decorator that drops or watches chosen packets, and payload patterns.
#ifndef BYPASS_FABRIC_RDM_TEST_UTIL_H_
#define BYPASS_FABRIC_RDM_TEST_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "driver/clock.h"
#include "driver/device.h"
#include "driver/fault/fault_device.h"
#include "fabric/rdm/rdm.h"
#include "fabric/rdm/wire.h"

namespace bypass::rdm::testing {

// A queue decorator that shows every received packet to `filter` first
// (decoded, or nullptr if it does not parse) and drops those it rejects.
class TapQueue final : public driver::QueuePair {
 public:
  using Filter = std::function<bool(const wire::View* v)>;  // true: deliver
  // Sees each parsed DATA, RMA or ACK packet after the filter kept it;
  // returning true rebuilds the packet (good CRC) from the fields it changed.
  using Rewrite = std::function<bool(wire::View* v)>;
  explicit TapQueue(driver::QueuePair& inner) : inner_(inner) {}
  void set_filter(Filter f) { filter_ = std::move(f); }
  void set_rewrite(Rewrite r) { rewrite_ = std::move(r); }

  uint16_t RxBurst(absl::Span<driver::Packet*> out) override;
  uint16_t TxBurst(absl::Span<driver::Packet* const> pkts) override { return inner_.TxBurst(pkts); }
  bool AllocBulk(absl::Span<driver::Packet*> out) override {
    ++alloc_calls_;
    return inner_.AllocBulk(out);
  }
  void FreeBulk(absl::Span<driver::Packet* const> pkts) override { inner_.FreeBulk(pkts); }
  uint32_t PoolAvailable() const override { return inner_.PoolAvailable(); }
  uint32_t PoolCapacity() const override { return inner_.PoolCapacity(); }
  driver::QueueStats stats() const override { return inner_.stats(); }
  void AppendCounters(driver::NamedCounters* out) const override { inner_.AppendCounters(out); }
  uint16_t id() const override { return inner_.id(); }
  uint64_t dropped() const { return dropped_; }
  uint64_t alloc_calls() const { return alloc_calls_; }

  // Reading in place: every call is counted (after the endpoint's probe at
  // creation, which is counted too) and goes to `read` if set, else inside.
  using ReadPeer = std::function<int64_t(uint32_t pid, uint64_t addr, void* dst, size_t len)>;
  void set_read_peer_memory(ReadPeer read) { read_ = std::move(read); }
  int64_t ReadPeerMemory(uint32_t pid, uint64_t addr, void* dst, size_t len) override {
    ++read_calls_;
    return read_ ? read_(pid, addr, dst, len) : inner_.ReadPeerMemory(pid, addr, dst, len);
  }
  uint64_t read_calls() const { return read_calls_; }
  bool ReachesSameHost(driver::Ipv4Address ip, uint16_t port) override {
    return inner_.ReachesSameHost(ip, port);
  }
  // What the device says of a silent peer: `alive` if set, else inside.
  using Liveness = std::function<driver::PeerLiveness(driver::Ipv4Address ip, uint16_t port)>;
  void set_peer_alive(Liveness alive) { alive_ = std::move(alive); }
  driver::PeerLiveness PeerAlive(driver::Ipv4Address ip, uint16_t port) override {
    return alive_ ? alive_(ip, port) : inner_.PeerAlive(ip, port);
  }
  // Clears kRxSameHost on received frames (as a remote device's would be).
  void set_strip_same_host(bool strip) { strip_same_host_ = strip; }

 private:
  driver::QueuePair& inner_;
  Filter filter_;
  Rewrite rewrite_;
  uint64_t dropped_ = 0;
  uint64_t alloc_calls_ = 0;
  ReadPeer read_;
  uint64_t read_calls_ = 0;
  Liveness alive_;
  bool strip_same_host_ = false;
};

// What a Net is made of.
struct NetOptions {
  int nodes = 2;
  driver::fault::FaultOptions faults;  // applied to what every node receives
  // Then this, if set, adjusts node i's faults (e.g. a bottleneck at one).
  std::function<void(int node, driver::fault::FaultOptions* faults)> configure_faults;
  uint32_t mtu = 1500;
  uint16_t ring_size = 1024;
  uint64_t tick_ns = 1'000;  // the clock advances this much per Step
  EndpointConfig config;     // for every node; udp_port and seeds are set per node
  std::string device_keys;   // appended to each node's loopback URI (",same_host=1")
  // Then this, if set, adjusts node i's config (e.g. another auth key).
  std::function<void(int node, EndpointConfig* config)> configure;
};

// N loopback ports on a fresh segment, each wrapped in a FaultDevice and a
// TapQueue, with an endpoint on each, all on one ManualClock.
class Net {
 public:
  explicit Net(const NetOptions& opts);
  ~Net();

  Endpoint& ep(int i) { return *nodes_[i]->ep; }
  driver::ManualClock& clock() { return clock_; }
  driver::fault::FaultDevice& device(int i) { return *nodes_[i]->dev; }
  TapQueue& tap(int i) { return *nodes_[i]->tap; }
  Port& port(int i) { return *nodes_[i]->port; }
  const NetOptions& options() const { return opts_; }

  // ep(i)'s PeerId for ep(j).
  PeerId Peer(int i, int j);
  // Every endpoint progresses once; then the clock moves tick_ns.
  void Step();
  // Steps until done() or max_steps; returns done().
  bool RunUntil(const std::function<bool()>& done, uint64_t max_steps);
  // Destroys ep(i) (its device stays); Revive creates a new one on the same
  // port with a new incarnation.
  void Kill(int i);
  void Revive(int i);

 private:
  // One host: device, its decorators, the port and the endpoint.
  struct Node {
    std::unique_ptr<driver::fault::FaultDevice> dev;
    std::unique_ptr<TapQueue> tap;
    std::unique_ptr<Port> port;
    std::unique_ptr<Endpoint> ep;
    uint32_t generation = 0;
  };
  void MakeEndpoint(int i);

  NetOptions opts_;
  driver::ManualClock clock_{1'000'000'000};
  std::vector<std::unique_ptr<Node>> nodes_;
};

// A unique loopback segment name per call ("rdm-<n>").
std::string UniqueSegment();

// The byte pattern of message `id`: distinct per message and offset.
void FillPattern(uint64_t id, absl::Span<uint8_t> buf);
// The first offset where buf differs from the pattern of `id`, or -1.
int64_t CheckPattern(uint64_t id, absl::Span<const uint8_t> buf);

// Posts receives on ep(b) for messages of `sizes`, sends them from ep(a),
// steps until every send and receive completed, and checks with gtest that
// each arrived once, in order, intact, without error. Returns the steps it
// took, or -1 if max_steps ran out.
int64_t TransferAndVerify(Net& net, int a, int b, const std::vector<size_t>& sizes,
                          uint64_t max_steps);

// Polls every completion and error of ep into the vectors.
void Drain(Endpoint& ep, std::vector<Completion>* ok, std::vector<ErrorCompletion>* err);

// The completions of ep(0)'s sends and of ep(1)'s receives.
struct Transfer {
  std::vector<Completion> sent, got;
  std::vector<ErrorCompletion> send_err, recv_err;
  bool Done(size_t sends, size_t recvs) const {
    return sent.size() + send_err.size() >= sends && got.size() + recv_err.size() >= recvs;
  }
};

// Steps, draining ep(0) and ep(1) into t, until `sends` sends and `recvs`
// receives have completed or failed; false if `steps` ran out first.
bool RunTransfer(Net& net, Transfer& t, size_t sends, size_t recvs, uint64_t steps = 500'000);

// Sends a message of `send_len` bytes from ep(0) to a receive of ep(1) of
// `recv_len` < send_len bytes, posted before the send or after 2000 steps
// (unexpected), runs both to completion into t, and checks with gtest that
// the sender's side completed and the receive failed with EMSGSIZE,
// truncated, holding the message's first recv_len bytes.
void SendIntoShorterReceive(Net& net, size_t send_len, size_t recv_len, bool posted_first,
                            Transfer& t);

}  // namespace bypass::rdm::testing

#endif  // BYPASS_FABRIC_RDM_TEST_UTIL_H_
