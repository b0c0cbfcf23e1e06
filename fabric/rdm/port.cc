// The Port: one device queue demultiplexed by UDP destination port.
#include <algorithm>
#include <cstdint>
#include <optional>

#include "absl/strings/str_cat.h"
#include "fabric/rdm/inbox.h"
#include "fabric/rdm/rdm.h"
#include "fabric/rdm/stats_registry.h"

namespace bypass::rdm {

Port::Port(driver::QueuePair& qp, const driver::DeviceInfo& info)
    : qp_(qp), info_(info), id_(NextPortId()) {}

Port::~Port() = default;

absl::Status Port::Attach(uint16_t udp_port, Inbox* inbox) {
  for (uint32_t i = 0; i < count_; ++i) {
    if (ports_[i] == udp_port) {
      return absl::AlreadyExistsError(absl::StrCat("UDP port ", udp_port,
                                                   " already has an endpoint on ", info_.uri,
                                                   "; give each endpoint its own port"));
    }
  }
  if (count_ == kMaxEndpoints) {
    return absl::ResourceExhaustedError(
        absl::StrCat(info_.uri, " already has ", kMaxEndpoints, " endpoints on this queue"));
  }
  if (absl::Status s = qp_.BindUdpPort(udp_port); !s.ok()) return s;
  ports_[count_] = udp_port;
  inboxes_[count_] = inbox;
  ++count_;
  return absl::OkStatus();
}

void Port::Detach(uint16_t udp_port) {
  for (uint32_t i = 0; i < count_; ++i) {
    if (ports_[i] != udp_port) continue;
    driver::Packet* left[kMaxBurst];
    while (uint32_t n = inboxes_[i]->Pop(left)) qp_.FreeBulk({left, n});
    qp_.UnbindUdpPort(udp_port);
    --count_;
    ports_[i] = ports_[count_];
    inboxes_[i] = inboxes_[count_];
    return;
  }
}

void Port::Poll(uint16_t burst) {
  driver::Packet* pkts[kMaxBurst];
  const uint16_t n = qp_.RxBurst({pkts, std::min<size_t>(burst, kMaxBurst)});
  if (n == 0) return;
  counters_.rx_packets += n;
  driver::Packet* drop[kMaxBurst];
  uint32_t dropped = 0;
  for (uint16_t i = 0; i < n; ++i) {
    if (member_count_ > 0 && DeliverToGroup(pkts[i], /*loop=*/false)) continue;
    Inbox* in = count_ == 1 ? inboxes_[0] : Find(pkts[i]);
    if (in == nullptr) {
      ++counters_.no_endpoint;
      drop[dropped++] = pkts[i];
    } else if (!in->Push(pkts[i])) {
      ++counters_.inbox_full;
      drop[dropped++] = pkts[i];
    }
  }
  if (dropped > 0) qp_.FreeBulk({drop, dropped});
}

void Port::SnapshotQueue(QueueSnapshot* out) const {
  out->uri = info_.uri;
  out->queue = qp_.id();
  out->stats = qp_.stats();
  out->counters.clear();
  qp_.AppendCounters(&out->counters);
}

Inbox* Port::Find(const driver::Packet* p) const {
  const std::optional<uint16_t> port = PeekUdpDstPort(p->data, p->len);
  if (!port) return nullptr;
  for (uint32_t i = 0; i < count_; ++i) {
    if (ports_[i] == *port) return inboxes_[i];
  }
  return nullptr;
}

}  // namespace bypass::rdm
