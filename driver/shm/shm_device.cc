#include "driver/shm/shm_device.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "driver/host.h"
#include "driver/packet_pool.h"
#include "driver/options.h"
#include "driver/shm/keys.h"

namespace bypass::driver::shm {
namespace {

// A decimal key in [lo, hi], or one line saying what is accepted.
absl::Status TakeNumber(DeviceUri& uri, const char* key, uint32_t lo, uint32_t hi,
                        uint32_t* value) {
  std::optional<std::string> text = uri.Take(key);
  if (!text) return absl::OkStatus();
  uint32_t n = 0;
  if (!absl::SimpleAtoi(*text, &n) || n < lo || n > hi) {
    return absl::InvalidArgumentError(absl::StrCat("device '", uri.text, "': ", key, "=", *text,
                                                   ": expected a number from ", lo, " to ", hi));
  }
  *value = n;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmDevice>> Open(DeviceUri uri, const DeviceOptions& defaults) {
  DeviceOptions opts = defaults;
  // mtu= is taken here, before the shared keys: shared memory carries frames
  // far above a NIC's jumbo limit.
  uint32_t mtu = opts.mtu;
  if (absl::Status s = TakeNumber(uri, "mtu", kMinMtu, kMaxShmMtu, &mtu); !s.ok()) return s;
  if (mtu < kMinMtu || mtu > kMaxShmMtu) {
    return absl::InvalidArgumentError(absl::StrCat("device '", uri.text, "': mtu ", mtu,
                                                   ": expected ", kMinMtu, " to ", kMaxShmMtu));
  }
  if (absl::Status s = TakeUriOptions(uri, opts); !s.ok()) return s;
  DeviceOptions checked = opts;
  checked.mtu = std::min(mtu, kMaxMtu);  // the shared range check, but for the MTU
  if (absl::Status s = ValidateOptions(checked); !s.ok()) return s;
  if (absl::Status s = uri.CheckKnown({"lanes", "slots"}); !s.ok()) return s;
  uint32_t lanes = kDefaultLanes;
  uint32_t slots = kDefaultSlots;
  if (absl::Status s = TakeNumber(uri, "lanes", 1, kMaxLanes, &lanes); !s.ok()) return s;
  if (absl::Status s = TakeNumber(uri, "slots", 2, kMaxSlots, &slots); !s.ok()) return s;
  if ((slots & (slots - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("device '", uri.text, "': slots=", slots, ": expected a power of two"));
  }
  if (opts.queues != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device '", uri.text, "': shm has one queue (it cannot steer), not ", opts.queues));
  }

  std::unique_ptr<ShmDevice> dev(new ShmDevice());
  absl::StatusOr<std::unique_ptr<Registry>> registry = Registry::Open(uri.target);
  if (!registry.ok()) {
    return absl::Status(registry.status().code(),
                        absl::StrCat("device '", uri.text, "': ", registry.status().message()));
  }
  dev->registry_ = *std::move(registry);
  // Peers that find us through this registry share its user's key.
  absl::StatusOr<Key> key = UserKey(dev->registry_->dir());
  if (!key.ok()) {
    return absl::Status(key.status().code(),
                        absl::StrCat("device '", uri.text, "': ", key.status().message()));
  }
  dev->info_.same_host_key = *key;
  const uint32_t max_frame = mtu + 14;
  absl::StatusOr<OwnArea> area = OwnArea::Create(max_frame, lanes, slots);
  if (!area.ok()) {
    return absl::Status(area.status().code(),
                        absl::StrCat("device '", uri.text, "': ", area.status().message()));
  }
  dev->area_ = std::make_unique<OwnArea>(*std::move(area));
  // Our area exists and is locked: the reclaim cannot take it for a dead one.
  dev->registry_->ReclaimStale(dev->area_->name());

  DeviceInfo& info = dev->info_;
  info.ipv4 = opts.ipv4 ? *opts.ipv4 : PrimaryIpv4();
  info.integrity = true;  // frames are copied through shared memory (kRxIntact)
  const uint32_t pool_buffers = DefaultPoolBuffers(opts, max_frame);
  absl::StatusOr<std::unique_ptr<ShmQueue>> queue = ShmQueue::Create(
      dev->area_.get(), dev->registry_.get(), info.ipv4, max_frame, pool_buffers, opts.numa_node);
  if (!queue.ok()) {
    return absl::Status(queue.status().code(),
                        absl::StrCat("device '", uri.text, "': ", queue.status().message()));
  }
  dev->queue_ = *std::move(queue);

  info.uri = uri.text;
  info.driver = "shm";
  info.host_address = true;  // the host's address: peers of this host find it by port
  info.mtu = mtu;
  info.num_queues = 1;
  info.ring_size = static_cast<uint16_t>(slots);
  info.offloads = 0;
  info.can_steer = false;
  info.owns_port = true;
  // Locally administered unicast, from pid and nonce: distinct per device.
  uint64_t x = dev->area_->owner_word() * 0x9e3779b97f4a7c15;
  x ^= x >> 29;
  info.mac.bytes[0] = 0x02;
  for (int i = 1; i < 6; ++i) info.mac.bytes[i] = static_cast<uint8_t>(x >> (8 * i));
  return dev;
}

ShmDevice::~ShmDevice() = default;

absl::Status ShmDevice::SteerUdpPort(uint16_t udp_port, uint16_t /*q*/) {
  return absl::UnimplementedError(
      absl::StrCat("SteerUdpPort(", udp_port, "): ", info_.uri,
                   ": shm delivers by bound port to its one queue (BindUdpPort)"));
}

absl::Status ShmDevice::SetLinkState(LinkState /*state*/) {
  return absl::UnimplementedError(
      absl::StrCat(info_.uri, ": shm's link is always up"));
}

}  // namespace bypass::driver::shm
