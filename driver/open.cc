// OpenDevice: parses the URI, takes bypass's own keys into DeviceOptions and
// hands the rest to the backend named by the scheme.
#include <memory>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "driver/device.h"
#include "driver/dpdk/dpdk_device.h"
#include "driver/loopback/loopback_device.h"
#include "driver/mlx5/mlx5_device.h"
#include "driver/options.h"
#include "driver/udp/udp_device.h"
#include "driver/uri.h"

namespace bypass::driver {
namespace {

// Abseil here is built with its own string_view (ABSL_OPTION_USE_STD_* = 0).
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

}  // namespace

absl::StatusOr<std::unique_ptr<Device>> OpenDevice(std::string_view text,
                                                   const DeviceOptions& defaults) {
  absl::StatusOr<DeviceUri> parsed = DeviceUri::Parse(text);
  if (!parsed.ok()) return parsed.status();
  DeviceUri uri = *std::move(parsed);

  const std::string_view scheme = uri.scheme;
  const bool is_loopback = scheme == "loopback";
  const bool is_dpdk = scheme == "dpdk" || scheme == "memif";
  const bool is_mlx5 = scheme == "mlx5";
  const bool is_udp = scheme == "udp";
  if (!is_loopback && !is_dpdk && !is_mlx5 && !is_udp) {
    return absl::InvalidArgumentError(
        absl::StrCat("device '", Sv(text), "': unknown scheme '", Sv(scheme),
                     "'; known schemes: loopback:NAME, memif:SOCKET, dpdk:DEVARGS, "
                     "dpdk:port=N, mlx5:DEVICE, udp:[IFACE|A.B.C.D]"));
  }

  // The kernel fragments the UDP device's datagrams: its MTU may exceed a
  // NIC's.
  const uint32_t max_mtu = is_udp ? kMaxUdpSocketMtu : kMaxMtu;
  DeviceOptions opts = defaults;
  if (absl::Status s = TakeUriOptions(uri, opts, max_mtu); !s.ok()) return s;
  if (absl::Status s = ValidateOptions(opts, max_mtu); !s.ok()) return s;

  if (is_loopback) {
    absl::StatusOr<std::unique_ptr<loopback::LoopbackDevice>> dev =
        loopback::Open(std::move(uri), opts);
    if (!dev.ok()) return dev.status();
    return std::unique_ptr<Device>(*std::move(dev));
  }
  if (is_mlx5) return mlx5::Open(std::move(uri), opts);
  if (is_udp) return udp::Open(std::move(uri), opts);
  return dpdk::Open(std::move(uri), opts);
}

}  // namespace bypass::driver
