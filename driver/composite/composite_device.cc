#include "driver/composite/composite_device.h"

#include <x86intrin.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "driver/host.h"

namespace bypass::driver::composite {
namespace {

// The destination of an Ethernet/IPv4/UDP frame; false for anything else
// (it goes to the remote device, which judges it).
bool Destination(const Packet* p, uint32_t* ip, uint16_t* port) {
  constexpr uint32_t kEth = 14;
  if (p->len < kEth + 20 + 8) return false;
  const uint8_t* f = p->data;
  if (f[12] != 0x08 || f[13] != 0x00) return false;       // IPv4
  const uint32_t ihl = (f[kEth] & 0x0f) * 4u;
  if ((f[kEth] >> 4) != 4 || ihl < 20 || p->len < kEth + ihl + 8) return false;
  if (f[kEth + 9] != 17) return false;                    // UDP
  *ip = (uint32_t{f[kEth + 16]} << 24) | (uint32_t{f[kEth + 17]} << 16) |
        (uint32_t{f[kEth + 18]} << 8) | f[kEth + 19];
  *port = static_cast<uint16_t>((f[kEth + ihl + 2] << 8) | f[kEth + ihl + 3]);
  return true;
}

}  // namespace

bool CompositeQueue::Local(const Packet* p) {
  uint32_t ip = 0;
  uint16_t port = 0;
  return Destination(p, &ip, &port) && local_.Reaches(Ipv4Address{ip}, port);
}

uint16_t CompositeQueue::RxBurst(absl::Span<Packet*> out) {
  // Alternate which device is asked first, so neither starves the other.
  uint16_t n = 0;
  if (local_first_) n = local_.RxBurst(out);
  if (n < out.size()) {
    const uint64_t now = __rdtsc();
    if (pacer_.Due(now)) {
      const uint16_t r = remote_.RxBurst(out.subspan(n));
      n = static_cast<uint16_t>(n + r);
      ++routes_.rx_remote_polls;
      pacer_.Polled(now, r > 0);
    }
  }
  if (!local_first_ && n < out.size()) n = static_cast<uint16_t>(n + local_.RxBurst(out.subspan(n)));
  local_first_ = !local_first_;
  return n;
}

// Sends a run of frames for the remote device. Intra-host buffers (a
// received packet sent on) are copied into remote buffers first: a NIC can
// send only its own.
uint16_t CompositeQueue::SendRemote(absl::Span<Packet* const> run) {
  pacer_.Active(__rdtsc());  // an answer may follow
  uint16_t sent = 0;
  while (sent < run.size()) {
    if (!local_.Owns(run[sent])) {
      if (run[sent]->len > remote_max_frame_) {
        // A frame sized for a peer of this host whose address is now
        // reached the remote way (it left, another took its port): never
        // sent beyond this host. Dropped, as a lost frame.
        remote_.FreeBulk({&run[sent], 1});
        ++routes_.tx_too_long;
        ++sent;
        continue;
      }
      size_t j = sent;
      while (j < run.size() && !local_.Owns(run[j]) && run[j]->len <= remote_max_frame_) ++j;
      const uint16_t took = remote_.TxBurst(run.subspan(sent, j - sent));
      routes_.tx_remote += took;
      sent = static_cast<uint16_t>(sent + took);
      if (sent < j) return sent;
      continue;
    }
    Packet* copy = nullptr;
    if (!remote_.AllocBulk({&copy, 1})) return sent;
    Packet* orig = run[sent];
    if (orig->len > copy->capacity || orig->len > remote_max_frame_) {  // dropped
      ++routes_.tx_too_long;
      remote_.FreeBulk({&copy, 1});
      local_.FreeBulk({&orig, 1});
      ++sent;
      continue;
    }
    std::memcpy(copy->data, orig->data, orig->len);
    copy->len = orig->len;
    copy->ol_flags = orig->ol_flags;
    if (remote_.TxBurst({&copy, 1}) != 1) {
      remote_.FreeBulk({&copy, 1});
      return sent;
    }
    ++routes_.tx_copied;
    ++routes_.tx_remote;
    local_.FreeBulk({&orig, 1});
    ++sent;
  }
  return sent;
}

uint16_t CompositeQueue::TxBurst(absl::Span<Packet* const> pkts) {
  size_t i = 0;
  while (i < pkts.size()) {
    // The intra-host device copies into the peers' lanes what it reaches
    // (the buffers stay ours to free) and stops at the first frame it does
    // not: one route lookup per frame.
    bool unrouted = false;
    const uint16_t took = local_.SendRouted(pkts.subspan(i), &unrouted);
    routes_.tx_local += took;
    FreeBulk(pkts.subspan(i, took));
    i += took;
    if (!unrouted) break;  // all sent, or a full lane: the caller keeps the rest
    // That frame, and those after it for other hosts, go the remote way.
    size_t j = i + 1;
    while (j < pkts.size() && !Local(pkts[j])) ++j;
    const uint16_t sent = SendRemote(pkts.subspan(i, j - i));
    i += sent;
    if (i < j) break;
  }
  return static_cast<uint16_t>(i);
}

void CompositeQueue::FreeBulk(absl::Span<Packet* const> pkts) {
  size_t i = 0;
  while (i < pkts.size()) {
    const bool local = local_.Owns(pkts[i]);
    size_t j = i + 1;
    while (j < pkts.size() && local_.Owns(pkts[j]) == local) ++j;
    if (local) {
      local_.FreeBulk(pkts.subspan(i, j - i));
    } else {
      remote_.FreeBulk(pkts.subspan(i, j - i));
    }
    i = j;
  }
}

QueueStats CompositeQueue::stats() const {
  QueueStats a = local_.stats();
  const QueueStats b = remote_.stats();
  a.rx_packets += b.rx_packets;
  a.rx_bytes += b.rx_bytes;
  a.tx_packets += b.tx_packets;
  a.tx_bytes += b.tx_bytes;
  a.tx_ring_full += b.tx_ring_full;
  a.rx_dropped += b.rx_dropped;
  a.alloc_failures += b.alloc_failures;
  return a;
}

absl::Status CompositeQueue::BindUdpPort(uint16_t port) {
  if (absl::Status s = remote_.BindUdpPort(port); !s.ok()) return s;
  if (absl::Status s = local_.BindUdpPort(port); !s.ok()) {
    remote_.UnbindUdpPort(port);
    return s;
  }
  return absl::OkStatus();
}

void CompositeQueue::UnbindUdpPort(uint16_t port) {
  local_.UnbindUdpPort(port);
  remote_.UnbindUdpPort(port);
}

absl::StatusOr<std::unique_ptr<CompositeDevice>> CompositeDevice::Create(
    std::string_view uri, std::unique_ptr<Device> local, std::unique_ptr<Device> remote) {
  auto* shm_queue = dynamic_cast<shm::ShmQueue*>(&local->queue(0));
  if (shm_queue == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device '", absl::string_view(uri.data(), uri.size()), "': the part before '+' must be ",
        "the intra-host device (shm:[DIR]), not ", local->info().driver));
  }
  if (remote->info().num_queues != 1 || local->info().num_queues != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device '", absl::string_view(uri.data(), uri.size()),
        "': LOCAL+REMOTE joins devices of one queue each; drop queues=")); 
  }
  if (!(local->info().ipv4 == remote->info().ipv4)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device '", absl::string_view(uri.data(), uri.size()), "': the intra-host device has ",
        local->info().ipv4.ToString(), " and the remote one ", remote->info().ipv4.ToString(),
        "; an endpoint has one address: give both the same ip="));
  }
  std::unique_ptr<CompositeDevice> d(new CompositeDevice());
  d->info_ = remote->info();
  d->info_.uri = std::string(uri);
  d->info_.driver = absl::StrCat(local->info().driver, "+", remote->info().driver);
  d->info_.mtu = std::min(local->info().mtu, remote->info().mtu);
  // Toward peers of this host, the intra-host device's frames, as far as
  // the TX buffers (the remote device's) hold them.
  uint32_t tx_frame = remote->info().max_frame();
  if (Packet* probe = nullptr; remote->queue(0).AllocBulk({&probe, 1})) {
    tx_frame = probe->capacity;
    remote->queue(0).FreeBulk({&probe, 1});
  }
  const uint32_t same_host_mtu =
      std::min(local->info().mtu, tx_frame > 14 ? tx_frame - 14 : 0);
  d->info_.same_host_mtu = same_host_mtu > d->info_.mtu ? same_host_mtu : 0;
  d->info_.host_address = remote->info().host_address || IsLocalIpv4(remote->info().ipv4);
  d->info_.same_host_key = local->info().same_host_key;
  // Per peer: frames through the intra-host device say kRxIntact, the
  // remote device's only if it is such a device too.
  d->info_.integrity = local->info().integrity && remote->info().integrity;
  d->queue_ = std::make_unique<CompositeQueue>(*shm_queue, remote->queue(0),
                                               remote->info().max_frame());
  d->local_ = std::move(local);
  d->remote_ = std::move(remote);
  return d;
}

absl::Status CompositeDevice::SteerUdpPort(uint16_t, uint16_t) {
  return absl::UnimplementedError(
      absl::StrCat(info_.uri, ": one queue; endpoints are demultiplexed by port in software"));
}

absl::Status CompositeDevice::SetLinkState(LinkState) {
  return absl::UnimplementedError(absl::StrCat(info_.uri, ": the link of a composite device cannot be toggled"));
}

void CompositeQueue::AppendCounters(NamedCounters* out) const {
  AppendNamed(out, "", {{"tx_local", routes_.tx_local},
                        {"tx_remote", routes_.tx_remote},
                        {"tx_copied", routes_.tx_copied},
                        {"tx_too_long", routes_.tx_too_long}});
  // Each part's own, told apart by a prefix.
  const auto part = [out](const QueuePair& q, std::string_view prefix) {
    const size_t from = out->size();
    q.AppendCounters(out);
    for (size_t i = from; i < out->size(); ++i) (*out)[i].name.insert(0, prefix);
  };
  part(local_, "shm_");
  part(remote_, "remote_");
}

}  // namespace bypass::driver::composite
