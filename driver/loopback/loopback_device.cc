#include "driver/loopback/loopback_device.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "driver/loopback/segment.h"
#include "driver/options.h"

namespace bypass::driver::loopback {

absl::StatusOr<std::unique_ptr<LoopbackDevice>> Open(DeviceUri uri, const DeviceOptions& defaults) {
  DeviceOptions opts = defaults;
  if (absl::Status s = TakeUriOptions(uri, opts); !s.ok()) return s;
  if (absl::Status s = ValidateOptions(opts); !s.ok()) return s;
  if (uri.target.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device '", uri.text, "': loopback needs a segment name: loopback:NAME[,mac=..][,ip=..]"));
  }
  if (absl::Status s = uri.CheckKnown({"mac", "ip", "mtu", "queues", "ring", "same_host"});
      !s.ok()) {
    return s;
  }
  bool same_host = false;
  if (std::optional<std::string> text = uri.Get("same_host")) {
    if (*text != "0" && *text != "1") {
      return absl::InvalidArgumentError(absl::StrCat(
          "device '", uri.text, "': same_host=", *text, " must be 0 or 1"));
    }
    same_host = *text == "1";
  }
  if (opts.queues > LoopbackDevice::kMaxQueues) {
    return absl::InvalidArgumentError(
        absl::StrCat("device '", uri.text, "': loopback supports 1 to ",
                     LoopbackDevice::kMaxQueues, " queues, not ", opts.queues));
  }
  std::optional<MacAddress> mac;
  if (std::optional<std::string> text = uri.Get("mac")) {
    absl::StatusOr<MacAddress> parsed = MacAddress::Parse(*text);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("device '", uri.text, "': ", parsed.status().message()));
    }
    if (parsed->IsMulticast() || *parsed == MacAddress{}) {
      return absl::InvalidArgumentError(absl::StrCat(
          "device '", uri.text, "': mac=", *text,
          " must be a unicast, non-zero address (e.g. 02:00:00:00:00:01)"));
    }
    mac = *parsed;
  }

  std::unique_ptr<LoopbackDevice> dev(new LoopbackDevice());
  dev->segment_ = uri.target;
  PortShared& shared = dev->shared_;
  shared.max_frame = opts.mtu + 14;
  shared.num_queues = opts.queues;
  shared.ring_size = opts.ring_size;
  shared.same_host = same_host;
  if (opts.queues > 1) shared.steer.reset(new std::atomic<uint16_t>[65536]());

  const uint32_t pool_buffers = opts.pool_buffers != 0 ? opts.pool_buffers : 4u * opts.ring_size;
  for (uint16_t q = 0; q < opts.queues; ++q) {
    absl::StatusOr<std::unique_ptr<LoopbackQueue>> queue =
        LoopbackQueue::Create(q, &shared, pool_buffers, opts.numa_node);
    if (!queue.ok()) {
      return absl::Status(queue.status().code(),
                          absl::StrCat("device '", uri.text, "': ", queue.status().message()));
    }
    dev->queues_.push_back(*std::move(queue));
  }

  DeviceInfo& info = dev->info_;
  info.uri = uri.text;
  info.driver = "loopback";
  info.mtu = opts.mtu;
  info.num_queues = opts.queues;
  info.ring_size = opts.ring_size;
  info.offloads = 0;
  info.can_steer = true;
  info.owns_port = true;
  info.integrity = true;  // frames are copied in memory (kRxIntact)

  if (absl::Status s = JoinSegment(uri.target, *dev, mac, opts.ipv4); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("device '", uri.text, "': ", s.message()));
  }
  dev->joined_ = true;
  return dev;
}

void LoopbackDevice::AssignAddress(uint16_t port_index, MacAddress mac, Ipv4Address ip) {
  port_index_ = port_index;
  info_.mac = mac;
  info_.ipv4 = ip;
  shared_.mac = mac;
  shared_.ipv4 = ip.value;
}

LoopbackDevice::~LoopbackDevice() {
  if (joined_) LeaveSegment(*this);
}

absl::Status LoopbackDevice::SteerUdpPort(uint16_t udp_port, uint16_t q) {
  if (q >= info_.num_queues) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SteerUdpPort(", udp_port, ", ", q, "): ", info_.uri, " has ", info_.num_queues,
        " queue(s)"));
  }
  // With one queue everything already arrives on queue 0.
  if (shared_.steer) shared_.steer[udp_port].store(q, std::memory_order_relaxed);
  return absl::OkStatus();
}

LinkState LoopbackDevice::link_state() const {
  return shared_.link_up.load(std::memory_order_relaxed) ? LinkState::kUp : LinkState::kDown;
}

absl::Status LoopbackDevice::SetLinkState(LinkState state) {
  shared_.link_up.store(state == LinkState::kUp, std::memory_order_relaxed);
  return absl::OkStatus();
}

}  // namespace bypass::driver::loopback
