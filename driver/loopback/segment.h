// The process-wide registry of loopback segments (cold path, one mutex).
#ifndef BYPASS_DRIVER_LOOPBACK_SEGMENT_H_
#define BYPASS_DRIVER_LOOPBACK_SEGMENT_H_

#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "driver/device.h"
#include "driver/loopback/loopback_device.h"

namespace bypass::driver::loopback {

// Adds `port` to segment `name` (creating it): assigns its index and its
// addresses (`mac`/`ip` when given, else the defaults described at Open) and
// creates the rings between it and every port already there, itself
// included. On error nothing changes.
absl::Status JoinSegment(std::string_view name, LoopbackDevice& port,
                         std::optional<MacAddress> mac, std::optional<Ipv4Address> ip);

// Removes `port` from its segment and the rings to and from it; the segment
// goes when its last port does. REQUIRES: a successful JoinSegment.
void LeaveSegment(LoopbackDevice& port);

}  // namespace bypass::driver::loopback

#endif  // BYPASS_DRIVER_LOOPBACK_SEGMENT_H_
