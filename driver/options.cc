#include "driver/options.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace bypass::driver {
namespace {

// Abseil here is built with its own string_view (ABSL_OPTION_USE_STD_* = 0).
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Strict decimal: digits only, no sign, no spaces, at most 9 digits.
std::optional<uint32_t> ParseNumber(std::string_view s) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  uint32_t n = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + static_cast<uint32_t>(c - '0');
  }
  return n;
}

bool IsPowerOfTwo(uint32_t n) { return n != 0 && (n & (n - 1)) == 0; }

absl::Status Bad(const DeviceUri& uri, std::string_view key, std::string_view value,
                 std::string_view accepted) {
  return absl::InvalidArgumentError(
      absl::StrCat("device '", uri.text, "': ", Sv(key), "=", Sv(value), ": expected ", Sv(accepted)));
}

std::string MtuRange(uint32_t max_mtu) {
  return absl::StrCat("a number from ", kMinMtu, " to ", max_mtu);
}
std::string QueuesRange() { return absl::StrCat("a number from 1 to ", kMaxQueues); }
std::string RingRange() {
  return absl::StrCat("a power of two from ", kMinRingSize, " to ", kMaxRingSize);
}

}  // namespace

absl::Status TakeUriOptions(DeviceUri& uri, DeviceOptions& opts, uint32_t max_mtu) {
  if (std::optional<std::string> ip = uri.Take("ip")) {
    absl::StatusOr<Ipv4Address> addr = Ipv4Address::Parse(*ip);
    if (!addr.ok()) return Bad(uri, "ip", *ip, "an IPv4 address like 10.0.0.1");
    opts.ipv4 = *addr;
  }
  if (std::optional<std::string> mtu = uri.Take("mtu")) {
    std::optional<uint32_t> n = ParseNumber(*mtu);
    if (!n || *n < kMinMtu || *n > max_mtu) return Bad(uri, "mtu", *mtu, MtuRange(max_mtu));
    opts.mtu = *n;
  }
  const bool dpdk_attach = uri.scheme == "dpdk" && uri.target.empty();
  if (!dpdk_attach) {
    if (std::optional<std::string> queues = uri.Take("queues")) {
      std::optional<uint32_t> n = ParseNumber(*queues);
      if (!n || *n < 1 || *n > kMaxQueues) return Bad(uri, "queues", *queues, QueuesRange());
      opts.queues = static_cast<uint16_t>(*n);
    }
  }
  if (std::optional<std::string> ring = uri.Take("ring")) {
    std::optional<uint32_t> n = ParseNumber(*ring);
    if (!n || !IsPowerOfTwo(*n) || *n < kMinRingSize || *n > kMaxRingSize) {
      return Bad(uri, "ring", *ring, RingRange());
    }
    opts.ring_size = static_cast<uint16_t>(*n);
  }
  return absl::OkStatus();
}

absl::Status ValidateOptions(const DeviceOptions& opts, uint32_t max_mtu) {
  if (opts.mtu < kMinMtu || opts.mtu > max_mtu) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceOptions.mtu ", opts.mtu, ": expected ", MtuRange(max_mtu)));
  }
  if (opts.queues < 1 || opts.queues > kMaxQueues) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceOptions.queues ", opts.queues, ": expected ", QueuesRange()));
  }
  if (!IsPowerOfTwo(opts.ring_size) || opts.ring_size < kMinRingSize) {
    // ring_size is 16 bits, so the upper bound holds by type.
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceOptions.ring_size ", opts.ring_size, ": expected ", RingRange()));
  }
  return absl::OkStatus();
}

}  // namespace bypass::driver
