// An RDM endpoint on a device queue: the engine plus the device calls, a
// burst at a time. QP = driver::QueuePair costs one virtual call per burst;
// a concrete final queue type (loopback::LoopbackQueue) costs none.
//
//   driver::ManualClock clock;          // or driver::SteadyClock::Get()
//   rdm::Port<> port(dev->queue(0), dev->info());
//   auto ep = rdm::Endpoint<>::Create(port, clock, {.udp_port = 5000});
//   rdm::PeerId peer = *(*ep)->InsertPeer(other_address);
//   (*ep)->Send({.dest = peer, .buf = msg, .len = n, .context = &op});
//   while (...) (*ep)->Progress();      // manual progress
#ifndef BYPASS_FABRIC_RDM_ENDPOINT_H_
#define BYPASS_FABRIC_RDM_ENDPOINT_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "driver/clock.h"
#include "driver/device.h"
#include "driver/packet.h"
#include "fabric/rdm/config.h"
#include "fabric/rdm/engine.h"
#include "fabric/rdm/port.h"
#include "fabric/rdm/types.h"

namespace bypass::rdm {

// One reliable-datagram endpoint, progressed manually by its owner thread.
template <class QP = driver::QueuePair>
class Endpoint {
 public:
  static constexpr uint32_t kInboxSize = 1024;

  // REQUIRES: port and clock outlive the endpoint. Binds config.udp_port
  // on the port (steer it to this queue first where the device can).
  static absl::StatusOr<std::unique_ptr<Endpoint>> Create(Port<QP>& port,
                                                          const driver::Clock& clock,
                                                          const EndpointConfig& config) {
    DeviceParams dev;
    dev.mac = port.info().mac;
    dev.ip = port.info().ipv4;
    dev.mtu = port.info().mtu;
    dev.pool_capacity = port.qp().PoolCapacity();
    absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(dev, config);
    if (!engine.ok()) return engine.status();
    std::unique_ptr<Endpoint> ep(new Endpoint(port, clock, *std::move(engine)));
    if (absl::Status s = port.Attach(config.udp_port, &ep->inbox_); !s.ok()) return s;
    ep->attached_ = true;
    return ep;
  }

  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;
  // Frees every packet it holds; operations in flight are dropped silently.
  ~Endpoint() {
    if (attached_) port_.Detach(engine_->config().udp_port);
    engine_->ReleaseAll();
    FreeReleased();
    if (spare_n_ > 0) port_.qp().FreeBulk({spare_ + spare_head_, spare_n_});
    if (backlog_n_ > 0) port_.qp().FreeBulk({backlog_, backlog_n_});
  }

  Address address() const { return engine_->address(); }
  absl::StatusOr<PeerId> InsertPeer(const Address& a) { return engine_->InsertPeer(a); }
  std::optional<Address> PeerAddress(PeerId id) const { return engine_->PeerAddress(id); }

  // Posts a send of any kind; what can go out at once does. kAgain: no
  // send slot or completion entry free (progress and retry).
  Result Send(const SendRequest& r) {
    const Result res = engine_->PostSend(r);
    if (res == Result::kOk) Flush();
    return res;
  }
  Result PostRecv(const RecvRequest& r) {
    const Result res = engine_->PostRecv(r);
    if (res == Result::kOk && engine_->HasTxWork()) Flush();
    return res;
  }

  // One pass: reads the clock once, receives a burst, runs the protocol and
  // its timers, and transmits. Returns the packets it received.
  size_t Progress() {
    const EndpointConfig& c = engine_->config();
    port_.Poll(c.rx_burst);
    driver::Packet* batch[Port<QP>::kMaxBurst];
    const uint32_t n = inbox_.Pop({batch, std::min<size_t>(2u * c.rx_burst, Port<QP>::kMaxBurst)});
    // The clock after the poll, so what arrived is stamped after it arrived;
    // idle passes may reuse the last reading (idle_passes_per_clock_read).
    if (n > 0 || ++idle_passes_ >= c.idle_passes_per_clock_read) {
      engine_->SetNow(clock_.NowNs());
      idle_passes_ = 0;
    }
    if (n > 0) {
      engine_->HandleRx({batch, n});
      FreeReleased();
    }
    engine_->RunTimers();
    FreeReleased();
    Flush();
    return n;
  }

  Result Write(const RmaRequest& r) {
    const Result res = engine_->PostWrite(r);
    if (res == Result::kOk) Flush();
    return res;
  }
  Result Read(const RmaRequest& r) {
    const Result res = engine_->PostRead(r);
    if (res == Result::kOk) Flush();
    return res;
  }

  size_t PollCompletions(absl::Span<Completion> out) { return engine_->PollCompletions(out); }
  size_t PollErrors(absl::Span<ErrorCompletion> out) { return engine_->PollErrors(out); }
  const Counters& counters() const { return engine_->counters(); }
  std::optional<PeerStats> peer_stats(PeerId id) const { return engine_->peer_stats(id); }
  Engine& engine() { return *engine_; }
  Port<QP>& port() { return port_; }

 private:
  Endpoint(Port<QP>& port, const driver::Clock& clock, std::unique_ptr<Engine> engine)
      : port_(port), clock_(clock), engine_(std::move(engine)), inbox_(kInboxSize) {
    engine_->SetNow(clock_.NowNs());
  }

  // Packets the engine is done with refill the spare TX buffers first (at
  // the front: the next frame is built into a buffer warm in this core's
  // cache), saving a pool free and a pool allocation per message; the rest
  // go back to the pool. Only packets as large as the queue's own TX
  // buffers are kept (QueuePair: a received packet may be transmitted).
  void FreeReleased() {
    const absl::Span<driver::Packet* const> r = engine_->released();
    if (r.empty()) return;
    const uint32_t burst = std::min<uint32_t>(engine_->config().tx_burst, Port<QP>::kMaxBurst);
    size_t i = 0;
    for (; i < r.size() && spare_n_ < burst && r[i]->capacity >= tx_capacity_; ++i) {
      r[i]->len = 0;
      r[i]->ol_flags = 0;
      if (spare_head_ > 0) {
        spare_[--spare_head_] = r[i];
      } else {
        spare_[spare_n_] = r[i];
      }
      ++spare_n_;
    }
    if (i < r.size()) port_.qp().FreeBulk(r.subspan(i));
    engine_->ClearReleased();
  }

  // Builds and transmits up to tx_bursts_per_pass bursts; what the TX ring
  // does not take waits in the backlog, in order, for the next call.
  void Flush() {
    const EndpointConfig& c = engine_->config();
    const uint32_t burst = std::min<uint32_t>(c.tx_burst, Port<QP>::kMaxBurst);
    for (uint32_t round = 0; round < c.tx_bursts_per_pass; ++round) {
      if (backlog_n_ > 0) {
        const uint16_t took = port_.qp().TxBurst({backlog_, backlog_n_});
        std::copy(backlog_ + took, backlog_ + backlog_n_, backlog_);
        backlog_n_ -= took;
        if (backlog_n_ > 0) {
          ++engine_->mutable_counters().tx_ring_full;
          return;
        }
      }
      if (!engine_->HasTxWork()) return;
      if (spare_n_ < burst) {
        std::copy(spare_ + spare_head_, spare_ + spare_head_ + spare_n_, spare_);
        spare_head_ = 0;
        if (port_.qp().AllocBulk({spare_ + spare_n_, burst - spare_n_})) {
          tx_capacity_ = spare_[spare_n_]->capacity;
          spare_n_ = burst;
        } else {
          ++engine_->mutable_counters().tx_no_buffer;
          if (spare_n_ == 0) return;
        }
      }
      driver::Packet** const spare = spare_ + spare_head_;
      const size_t built = engine_->BuildTx({spare, spare_n_});
      if (built == 0) return;
      const uint16_t took = port_.qp().TxBurst({spare, built});
      if (took < built) {
        std::copy(spare + took, spare + built, backlog_);
        backlog_n_ = static_cast<uint32_t>(built - took);
      }
      spare_n_ -= static_cast<uint32_t>(built);
      spare_head_ = spare_n_ == 0 ? 0 : spare_head_ + static_cast<uint32_t>(built);
    }
  }

  Port<QP>& port_;
  const driver::Clock& clock_;
  std::unique_ptr<Engine> engine_;
  Inbox inbox_;
  bool attached_ = false;
  uint32_t idle_passes_ = 0;  // Progress passes since the last clock reading
  // Allocated, not yet built into: spare_[spare_head_, spare_head_ + spare_n_).
  driver::Packet* spare_[Port<QP>::kMaxBurst];
  uint32_t spare_head_ = 0;
  uint32_t spare_n_ = 0;
  uint32_t tx_capacity_ = UINT32_MAX;  // of AllocBulk's buffers; until known, nothing is kept
  driver::Packet* backlog_[Port<QP>::kMaxBurst];  // built, not yet taken by TxBurst
  uint32_t backlog_n_ = 0;
};

extern template class Port<driver::QueuePair>;
extern template class Endpoint<driver::QueuePair>;

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_ENDPOINT_H_
