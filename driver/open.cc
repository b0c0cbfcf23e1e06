// OpenDevice: parses the URI, takes bypass's own keys into DeviceOptions and
// hands the rest to the backend named by the scheme.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "driver/composite/composite_device.h"
#include "driver/device.h"
#include "driver/dpdk/dpdk_device.h"
#include "driver/loopback/loopback_device.h"
#include "driver/mlx5/mlx5_device.h"
#include "driver/options.h"
#include "driver/pcap/pcap_device.h"
#include "driver/shm/shm_device.h"
#include "driver/udp/udp_device.h"
#include "driver/uri.h"

namespace bypass::driver {
namespace {

// Abseil here is built with its own string_view (ABSL_OPTION_USE_STD_* = 0).
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// A part of a composite without its capture keys, which go to *capture
// (given in one part only).
absl::StatusOr<std::string> TakePartCapture(std::string_view text, std::string_view part,
                                            std::optional<pcap::CaptureOptions>* capture) {
  absl::StatusOr<DeviceUri> uri = DeviceUri::Parse(part);
  if (!uri.ok()) return uri.status();
  absl::StatusOr<std::optional<pcap::CaptureOptions>> c = pcap::TakeCaptureOptions(*uri);
  if (!c.ok()) return c.status();
  if (!c->has_value()) return std::string(part);
  if (capture->has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device '", Sv(text), "': pcap= in both parts; once captures the whole composite"));
  }
  *capture = std::move(*c);
  return absl::StrCat(uri->scheme, ":", uri->Rest());
}

// LOCAL+REMOTE: the remote device first, then the intra-host one with the
// remote's address (unless LOCAL names its own ip=, which must agree).
// pcap= in either part captures the composite as a whole: its queue needs
// the intra-host device's own queue, which a part's capture would hide.
absl::StatusOr<std::unique_ptr<Device>> OpenComposite(std::string_view text, size_t plus,
                                                      const DeviceOptions& defaults) {
  std::optional<pcap::CaptureOptions> capture;
  absl::StatusOr<std::string> local_text = TakePartCapture(text, text.substr(0, plus), &capture);
  if (!local_text.ok()) return local_text.status();
  absl::StatusOr<std::string> remote_text =
      TakePartCapture(text, text.substr(plus + 1), &capture);
  if (!remote_text.ok()) return remote_text.status();
  // The intra-host device's MTU: its own mtu=, else kCompositeShmMtu or
  // the remote's if larger (a UDP device's follows its link: jumbo frames
  // across hosts). The remote device's buffers are made as large (its MTU
  // unchanged), as the engine's TX buffers come from its pool: frames to
  // peers of this host are that large (DeviceInfo::same_host_mtu).
  absl::StatusOr<DeviceUri> local_uri = DeviceUri::Parse(*local_text);
  const bool local_names_mtu = local_uri.ok() && local_uri->Has("mtu");
  uint32_t local_mtu = shm::kCompositeShmMtu;
  if (local_names_mtu) {
    uint32_t named = 0;
    if (absl::SimpleAtoi(*local_uri->Get("mtu"), &named)) local_mtu = named;
  }
  DeviceOptions remote_opts = defaults;
  if (local_mtu <= shm::kMaxShmMtu) remote_opts.buffer_frame = local_mtu + 14;
  absl::StatusOr<std::unique_ptr<Device>> remote = OpenDevice(*remote_text, remote_opts);
  if (!remote.ok()) return remote.status();
  DeviceOptions local_opts = defaults;
  local_opts.ipv4 = (*remote)->info().ipv4;
  // In as many buffers as the remote's pool has (their count bounded as
  // the remote's is).
  if (!local_names_mtu) {
    local_opts.mtu = std::max(local_mtu, (*remote)->info().mtu);
    if (local_opts.pool_buffers == 0) local_opts.pool_buffers = (*remote)->queue(0).PoolCapacity();
  }
  absl::StatusOr<std::unique_ptr<Device>> local = OpenDevice(*local_text, local_opts);
  if (!local.ok()) return local.status();
  absl::StatusOr<std::unique_ptr<composite::CompositeDevice>> d =
      composite::CompositeDevice::Create(text, *std::move(local), *std::move(remote));
  if (!d.ok()) return d.status();
  if (capture.has_value()) return pcap::WrapWithCapture(*std::move(d), *capture);
  return std::unique_ptr<Device>(*std::move(d));
}

// One backend's device from its parsed URI (bypass's capture keys taken).
absl::StatusOr<std::unique_ptr<Device>> OpenBackend(std::string_view text, DeviceUri uri,
                                                    const DeviceOptions& defaults) {
  const std::string_view scheme = uri.scheme;
  const bool is_loopback = scheme == "loopback";
  const bool is_dpdk = scheme == "dpdk" || scheme == "memif";
  const bool is_mlx5 = scheme == "mlx5";
  const bool is_udp = scheme == "udp";
  const bool is_shm = scheme == "shm";
  if (!is_loopback && !is_dpdk && !is_mlx5 && !is_udp && !is_shm) {
    return absl::InvalidArgumentError(
        absl::StrCat("device '", Sv(text), "': unknown scheme '", Sv(scheme),
                     "'; known schemes: loopback:NAME, memif:SOCKET, dpdk:DEVARGS, "
                     "dpdk:port=N, mlx5:DEVICE, udp:[IFACE|A.B.C.D], shm:[DIR], and "
                     "LOCAL+REMOTE (e.g. shm:+udp:)"));
  }
  // shm takes bypass's keys itself: its MTU range is its own (up to 65000).
  if (is_shm) {
    absl::StatusOr<std::unique_ptr<shm::ShmDevice>> dev = shm::Open(std::move(uri), defaults);
    if (!dev.ok()) return dev.status();
    return std::unique_ptr<Device>(*std::move(dev));
  }

  // udp takes bypass's keys itself too: its MTU range is its own (the
  // kernel fragments its datagrams) and without mtu= it follows the link.
  if (is_udp) return udp::Open(std::move(uri), defaults);

  DeviceOptions opts = defaults;
  if (absl::Status s = TakeUriOptions(uri, opts); !s.ok()) return s;
  if (absl::Status s = ValidateOptions(opts); !s.ok()) return s;

  if (is_loopback) {
    absl::StatusOr<std::unique_ptr<loopback::LoopbackDevice>> dev =
        loopback::Open(std::move(uri), opts);
    if (!dev.ok()) return dev.status();
    return std::unique_ptr<Device>(*std::move(dev));
  }
  if (is_mlx5) return mlx5::Open(std::move(uri), opts);
  return dpdk::Open(std::move(uri), opts);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Device>> OpenDevice(std::string_view text,
                                                   const DeviceOptions& defaults) {
  if (const size_t plus = CompositeSplit(text); plus != std::string_view::npos) {
    return OpenComposite(text, plus, defaults);
  }
  absl::StatusOr<DeviceUri> parsed = DeviceUri::Parse(text);
  if (!parsed.ok()) return parsed.status();
  DeviceUri uri = *std::move(parsed);
  // pcap= is any device's: the backend opens without it, the capture
  // decorator goes around what it opened.
  absl::StatusOr<std::optional<pcap::CaptureOptions>> capture = pcap::TakeCaptureOptions(uri);
  if (!capture.ok()) return capture.status();
  absl::StatusOr<std::unique_ptr<Device>> dev = OpenBackend(text, std::move(uri), defaults);
  if (!dev.ok() || !capture->has_value()) return dev;
  return pcap::WrapWithCapture(*std::move(dev), **capture);
}

}  // namespace bypass::driver
