// bypass's own URI keys (ip=, mtu=, queues=, ring=) and the range checks on
// DeviceOptions that every backend shares.
#ifndef BYPASS_DRIVER_OPTIONS_H_
#define BYPASS_DRIVER_OPTIONS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "driver/device.h"
#include "driver/uri.h"

namespace bypass::driver {

inline constexpr uint32_t kMinMtu = 68;      // the IPv4 minimum
inline constexpr uint32_t kMaxMtu = 9000;    // jumbo
// The kernel UDP device's ceiling: its datagrams are fragmented by the
// kernel, so its MTU is bounded by one IPv4 datagram, not by a NIC.
inline constexpr uint32_t kMaxUdpSocketMtu = 65000;
inline constexpr uint32_t kMinRingSize = 8;
inline constexpr uint32_t kMaxRingSize = 32768;  // DeviceOptions::ring_size is 16 bits
inline constexpr uint32_t kMaxQueues = 1024;

// Moves `ip=`, `mtu=`, `queues=` and `ring=` out of `uri` into `opts`, leaving
// the rest for the backend. `queues=` stays in the URI for the DPDK attach
// form (scheme "dpdk" with an empty target), where it means a range of the
// application's queues. Bad values give one-line InvalidArgument errors that
// say what is accepted. Taking twice is harmless (the second finds nothing).
// `max_mtu` is the backend's ceiling (kMaxMtu but for the kernel UDP device).
absl::Status TakeUriOptions(DeviceUri& uri, DeviceOptions& opts, uint32_t max_mtu = kMaxMtu);

// One-line InvalidArgument when a field of opts is out of range.
absl::Status ValidateOptions(const DeviceOptions& opts, uint32_t max_mtu = kMaxMtu);

}  // namespace bypass::driver

#endif  // BYPASS_DRIVER_OPTIONS_H_
