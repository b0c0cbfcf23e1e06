// The Endpoint: the engine plus the device calls, a burst at a time.
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "fabric/rdm/engine.h"
#include "fabric/rdm/inbox.h"
#include "fabric/rdm/rdm.h"
#include "fabric/rdm/stats_registry.h"

namespace bypass::rdm {

absl::StatusOr<std::unique_ptr<Endpoint>> Endpoint::Create(Port& port, const driver::Clock& clock,
                                                           const EndpointConfig& config) {
  DeviceParams dev;
  dev.mac = port.info().mac;
  dev.ip = port.info().ipv4;
  dev.mtu = port.info().mtu;
  dev.same_host_mtu = port.info().same_host_mtu;
  dev.pool_capacity = port.qp().PoolCapacity();
  if (config.read_in_place) {
    // The device reads in place if it can read a byte of ours (the same
    // call, on this process: no ptrace permission is needed).
    const uint32_t pid = static_cast<uint32_t>(getpid());
    const uint8_t probe = 1;
    uint8_t copy = 0;
    if (port.qp().ReadPeerMemory(pid, reinterpret_cast<uintptr_t>(&probe), &copy, 1) == 1) {
      dev.pid = pid;
      dev.read_peer_memory = [](void* qp, uint32_t peer_pid,
                                absl::Span<const driver::PeerRange> ranges) {
        return static_cast<driver::QueuePair*>(qp)->ReadPeerMemoryV(peer_pid, ranges);
      };
      dev.read_peer_memory_arg = &port.qp();
    }
  }
  dev.reaches_same_host = [](void* qp, driver::Ipv4Address ip, uint16_t udp_port) {
    return static_cast<driver::QueuePair*>(qp)->ReachesSameHost(ip, udp_port);
  };
  dev.reaches_same_host_arg = &port.qp();
  dev.peer_alive = [](void* qp, driver::Ipv4Address ip, uint16_t udp_port) {
    return static_cast<driver::QueuePair*>(qp)->PeerAlive(ip, udp_port);
  };
  dev.peer_alive_arg = &port.qp();
  dev.integrity = port.info().integrity;
  SharedMatch* shared = nullptr;
  if (config.shared_recv != nullptr) {
    if (&config.shared_recv->port() != &port) {
      return absl::InvalidArgumentError(
          "Endpoint::Create: config.shared_recv belongs to another Port; endpoints share a "
          "receive queue only on one Port");
    }
    shared = &config.shared_recv->impl();
  }
  // A device that never drops for want of room needs no congestion window.
  EndpointConfig c = config;
  if (port.info().lossless) c.congestion_control = false;
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(dev, c, shared);
  if (!engine.ok()) return engine.status();
  std::unique_ptr<Endpoint> ep(new Endpoint(port, clock, *std::move(engine)));
  if (absl::Status s = port.Attach(config.udp_port, ep->inbox_.get()); !s.ok()) return s;
  ep->attached_ = true;
  return ep;
}

Endpoint::Endpoint(Port& port, const driver::Clock& clock, std::unique_ptr<Engine> engine)
    : port_(port),
      clock_(clock),
      engine_(std::move(engine)),
      inbox_(std::make_unique<Inbox>(kInboxSize)),
      stats_(RegisterEndpoint()) {
  engine_->SetNow(clock_.NowNs());
  PublishStats();
}

Endpoint::~Endpoint() {
  UnregisterEndpoint(stats_->id());
  if (attached_) port_.Detach(engine_->config().udp_port);
  engine_->ReleaseAll();
  FreeReleased();
  if (spare_n_ > 0) port_.qp().FreeBulk({spare_ + spare_head_, spare_n_});
  if (backlog_n_ > 0) port_.qp().FreeBulk({backlog_, backlog_n_});
}

Address Endpoint::address() const { return engine_->address(); }
const EndpointConfig& Endpoint::config() const { return engine_->config(); }
uint32_t Endpoint::max_segment() const { return engine_->max_segment(); }
absl::StatusOr<PeerId> Endpoint::InsertPeer(const Address& a) { return engine_->InsertPeer(a); }
absl::Status Endpoint::RemovePeer(PeerId id) {
  if (engine_->OweFinalAck(id)) Flush();
  return engine_->RemovePeer(id);
}
std::optional<Address> Endpoint::PeerAddress(PeerId id) const { return engine_->PeerAddress(id); }
std::optional<PeerStats> Endpoint::peer_stats(PeerId id) const { return engine_->peer_stats(id); }
absl::StatusOr<uint64_t> Endpoint::RegisterRegion(const RegionRequest& r) {
  return engine_->RegisterRegion(r);
}
absl::Status Endpoint::DeregisterRegion(uint64_t key) { return engine_->DeregisterRegion(key); }
absl::Status Endpoint::SetDscp(uint8_t dscp) { return engine_->SetDscp(dscp); }
void Endpoint::SetMinMultiRecv(size_t bytes) { engine_->SetMinMultiRecv(bytes); }
size_t Endpoint::min_multi_recv() const { return engine_->min_multi_recv(); }

Result Endpoint::Send(const SendRequest& r) {
  const Result res = engine_->PostSend(r);
  // More follow at once: they go together (a bundle), at the first send
  // without kSendMore or the next Progress.
  if (res == Result::kOk && (r.flags & kSendMore) != 0) return res;
  return AfterPost(res);
}

Result Endpoint::PostRecv(const RecvRequest& r) {
  const Result res = engine_->PostRecv(r);
  if (res == Result::kOk && engine_->HasTxWork()) Flush();
  return res;
}

Result Endpoint::Write(const RmaRequest& r) {
  return AfterPost(engine_->PostWrite(r));
}

Result Endpoint::Read(const RmaRequest& r) {
  return AfterPost(engine_->PostRead(r));
}

Result Endpoint::Atomic(const AtomicRequest& r) {
  return AfterPost(engine_->PostAtomic(r));
}

Result Endpoint::AfterPost(Result res) {
  engine_->ReleaseDeferredAcks();
  if (res == Result::kOk || engine_->HasTxWork()) Flush();
  return res;
}

bool Endpoint::CancelRecv(void* context, PeerId only) { return engine_->CancelRecv(context, only); }
size_t Endpoint::CancelRecvs(PeerId only) { return engine_->CancelRecvs(only); }
uint32_t Endpoint::SendSlotsFree() const { return engine_->SendSlotsFree(); }
uint32_t Endpoint::RecvSlotsFree() const { return engine_->RecvSlotsFree(); }
bool Endpoint::HasTxWork() const { return backlog_n_ > 0 || engine_->HasTxWork(); }
bool Endpoint::HasDeferredAcks() const { return engine_->HasDeferredAcks(); }
bool Endpoint::Unfinished() const { return backlog_n_ > 0 || engine_->Unfinished(); }
size_t Endpoint::PollCompletions(absl::Span<Completion> out) {
  return engine_->PollCompletions(out);
}
size_t Endpoint::PollErrors(absl::Span<ErrorCompletion> out) { return engine_->PollErrors(out); }
size_t Endpoint::PollPeerFailures(absl::Span<PeerFailure> out) {
  return engine_->PollPeerFailures(out);
}
const Counters& Endpoint::counters() const { return engine_->counters(); }
std::optional<PeerCounters> Endpoint::peer_counters(PeerId id) const {
  return engine_->peer_counters(id);
}
uint32_t Endpoint::stats_id() const { return stats_->id(); }

void Endpoint::PublishStats() {
  stats_->Publish([this](EndpointSnapshot& s) {
    s.address = engine_->address();
    s.port_id = port_.id();
    s.port = port_.counters();
    port_.SnapshotQueue(&s.device);
    s.counters = engine_->counters();
    engine_->SnapshotPeers(&s.peers);
  });
}

size_t Endpoint::Progress() {
  const EndpointConfig& c = engine_->config();
  port_.Poll(c.rx_burst);
  driver::Packet* batch[Port::kMaxBurst];
  const uint32_t n = inbox_->Pop({batch, std::min<size_t>(2u * c.rx_burst, Port::kMaxBurst)});
  // The clock after the poll, so what arrived is stamped after it arrived;
  // idle passes may reuse the last reading (idle_passes_per_clock_read).
  if (n > 0 || ++idle_passes_ >= c.idle_passes_per_clock_read) {
    engine_->SetNow(clock_.NowNs());
    idle_passes_ = 0;
  }
  // ACKs deferred by earlier calls that no reply has carried within the
  // hold go with this pass's burst (those this pass defers wait).
  engine_->ReleaseHeldDeferredAcks();
  if (n > 0) {
    engine_->HandleRx({batch, n});
    FreeReleased();
  }
  engine_->RunTimers();
  FreeReleased();
  Flush();
  if (stats_->wanted()) PublishStats();
  return n;
}

// Packets the engine is done with refill the spare TX buffers first (at the
// front: the next frame is built into a buffer warm in this core's cache),
// saving a pool free and a pool allocation per message; the rest go back to
// the pool. Only packets as large as the queue's own TX buffers are kept (a
// received packet may be transmitted).
inline void Endpoint::FreeReleased() {
  if (!engine_->released().empty()) GiveBack();
}

void Endpoint::GiveBack() {
  const absl::Span<driver::Packet* const> r = engine_->released();
  const uint32_t burst = std::min<uint32_t>(engine_->config().tx_burst, Port::kMaxBurst);
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
inline void Endpoint::Flush() {
  if (backlog_n_ > 0 || engine_->HasTxWork()) SendBursts();
}

void Endpoint::SendBursts() {
  const EndpointConfig& c = engine_->config();
  const uint32_t burst = std::min<uint32_t>(c.tx_burst, Port::kMaxBurst);
  driver::QueuePair& qp = port_.qp();
  for (uint32_t round = 0; round < c.tx_bursts_per_pass; ++round) {
    if (backlog_n_ > 0) {
      const uint16_t took = qp.TxBurst({backlog_, backlog_n_});
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
      if (qp.AllocBulk({spare_ + spare_n_, burst - spare_n_})) {
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
    const uint16_t took = qp.TxBurst({spare, built});
    if (took < built) {
      std::copy(spare + took, spare + built, backlog_);
      backlog_n_ = static_cast<uint32_t>(built - took);
    }
    spare_n_ -= static_cast<uint32_t>(built);
    spare_head_ = spare_n_ == 0 ? 0 : spare_head_ + static_cast<uint32_t>(built);
  }
}

}  // namespace bypass::rdm
