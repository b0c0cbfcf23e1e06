#include "driver/loopback/segment.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "driver/loopback/spsc_ring.h"

namespace bypass::driver::loopback {
namespace {

// Abseil here is built with its own string_view (ABSL_OPTION_USE_STD_* = 0).
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// One virtual L2 segment: its number and its ports by index (null = free).
struct Segment {
  uint16_t number = 0;
  std::vector<LoopbackDevice*> ports;
  size_t live = 0;
};

// Every segment of the process, by name.
struct Registry {
  std::mutex mu;
  std::map<std::string, Segment, std::less<>> segments;
  std::vector<bool> numbers_used;  // segment numbers in use
};

Registry& GetRegistry() {
  // Never destroyed: devices may be closed during static destruction.
  static Registry* registry = new Registry;
  return *registry;
}

uint16_t LowestFree(std::vector<bool>& used) {
  for (size_t i = 0; i < used.size(); ++i) {
    if (!used[i]) return static_cast<uint16_t>(i);
  }
  used.push_back(false);
  return static_cast<uint16_t>(used.size() - 1);
}

// Creates one ring per (queue of `from`, queue of `to`), sized by the receiver.
void Wire(LoopbackDevice& from, LoopbackDevice& to) {
  const PortShared& dst = to.shared();
  const uint32_t slot_bytes = (dst.max_frame + 63) & ~63u;
  for (uint16_t sq = 0; sq < from.info().num_queues; ++sq) {
    std::vector<SpscRing*> rings;
    for (uint16_t rq = 0; rq < to.info().num_queues; ++rq) {
      auto ring = std::make_unique<SpscRing>(dst.ring_size, slot_bytes);
      rings.push_back(ring.get());
      to.loopback_queue(rq).AddIncoming(&from.shared(), std::move(ring));
    }
    from.loopback_queue(sq).AddRoute(&dst, std::move(rings));
  }
}

}  // namespace

absl::Status JoinSegment(std::string_view name, LoopbackDevice& port,
                         std::optional<MacAddress> mac, std::optional<Ipv4Address> ip) {
  Registry& reg = GetRegistry();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto it = reg.segments.find(name);
  const bool created = it == reg.segments.end();
  if (created) {
    const uint16_t number = LowestFree(reg.numbers_used);
    it = reg.segments.emplace(std::string(name), Segment{number, {}, 0}).first;
    reg.numbers_used[number] = true;
  }
  Segment& seg = it->second;
  const auto fail = [&](absl::Status s) {
    if (created) {
      reg.numbers_used[seg.number] = false;
      reg.segments.erase(it);
    }
    return s;
  };

  size_t index = 0;
  while (index < seg.ports.size() && seg.ports[index] != nullptr) ++index;
  if (index >= LoopbackDevice::kMaxPorts) {
    return fail(absl::ResourceExhaustedError(absl::StrCat(
        "loopback:", Sv(name), ": the segment already has ", LoopbackDevice::kMaxPorts,
        " ports; close one or use another segment name")));
  }
  const uint8_t p = static_cast<uint8_t>(index + 1);
  const MacAddress chosen =
      mac.value_or(MacAddress{{0x02, 0x00, 0x00, static_cast<uint8_t>(seg.number >> 8),
                               static_cast<uint8_t>(seg.number & 0xff), p}});
  for (const LoopbackDevice* other : seg.ports) {
    if (other != nullptr && other->info().mac == chosen) {
      return fail(absl::AlreadyExistsError(absl::StrCat(
          "loopback:", Sv(name), ": MAC ", chosen.ToString(), " is already used by port ",
          other->port_index(), " of the segment; give another with mac=")));
    }
  }
  const Ipv4Address addr = ip.value_or(
      Ipv4Address{(10u << 24) | (77u << 16) | uint32_t{static_cast<uint8_t>(seg.number)} << 8 | p});

  if (index == seg.ports.size()) seg.ports.push_back(nullptr);
  seg.ports[index] = &port;
  ++seg.live;
  port.AssignAddress(static_cast<uint16_t>(index), chosen, addr);
  for (LoopbackDevice* other : seg.ports) {
    if (other == nullptr || other == &port) continue;
    Wire(port, *other);
    Wire(*other, port);
  }
  Wire(port, port);
  return absl::OkStatus();
}

void LeaveSegment(LoopbackDevice& port) {
  Registry& reg = GetRegistry();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto it = reg.segments.find(port.segment_name());
  if (it == reg.segments.end()) return;
  Segment& seg = it->second;
  for (LoopbackDevice* other : seg.ports) {
    if (other == nullptr || other == &port) continue;
    for (uint16_t q = 0; q < other->info().num_queues; ++q) {
      other->loopback_queue(q).RemoveRoute(&port.shared());
      other->loopback_queue(q).RemoveIncoming(&port.shared());
    }
  }
  for (auto& slot : seg.ports) {
    if (slot == &port) slot = nullptr;
  }
  if (--seg.live == 0) {
    reg.numbers_used[seg.number] = false;
    reg.segments.erase(it);
  }
}

}  // namespace bypass::driver::loopback
