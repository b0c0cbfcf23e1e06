// Open: the URI dispatch over the DPDK backends. A port's configuration is
// in port.cc and port_open.cc, memif's specifics in memif.cc and af_xdp's in
// af_xdp.cc.
#include "driver/dpdk/dpdk_device.h"

#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "driver/dpdk/af_xdp.h"
#include "driver/dpdk/memif.h"
#include "driver/dpdk/port.h"

namespace bypass::driver::dpdk {

absl::StatusOr<std::unique_ptr<Device>> Open(DeviceUri uri, const DeviceOptions& opts) {
  if (uri.scheme == "memif") return OpenMemif(uri, opts);
  if (uri.scheme != "dpdk") {
    return absl::InvalidArgumentError(absl::StrCat("dpdk: scheme ", uri.scheme, " is not dpdk or memif"));
  }
  if (uri.target.empty() && uri.Has("port")) return DpdkDevice::Attach(uri, opts);
  if (uri.target.empty()) {
    return absl::InvalidArgumentError(
        "dpdk: no device named: write dpdk:DEVARGS (e.g. dpdk:net_ring0, dpdk:0000:3b:00.0) or "
        "dpdk:port=N,queues=A-B");
  }
  std::optional<std::string> iface = uri.Get("iface");
  const std::string devargs = uri.Rest();
  if (IsAfXdp(devargs)) return OpenAfXdp(devargs, uri.text, opts, iface);
  return DpdkDevice::OpenOwned(devargs, uri.text, opts, -1, std::move(iface));
}

}  // namespace bypass::driver::dpdk
