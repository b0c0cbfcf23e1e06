#include "driver/udp/udp_device.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "driver/host.h"
#include "driver/packet_pool.h"
#include "driver/options.h"

namespace bypass::driver::udp {
namespace {

// The interface holding `ip`, if any (for its MAC).
std::optional<HostInterface> InterfaceWith(Ipv4Address ip) {
  for (HostInterface& h : HostInterfaces()) {
    if (h.ipv4 == ip) return std::move(h);
  }
  return std::nullopt;
}

}  // namespace

uint32_t LinkMtuFor(uint32_t link_mtu) {
  if (link_mtu <= kDefaultUdpMtu) return kDefaultUdpMtu;
  return std::min(link_mtu, kMaxUdpLinkMtu);
}

uint32_t PoolBuffersFor(const DeviceOptions& opts, uint32_t max_frame) {
  const uint32_t by_default = DefaultPoolBuffers(opts, max_frame);
  if (opts.pool_buffers != 0 || max_frame <= kDefaultUdpMtu + 14) return by_default;
  // The bytes a pool of default frames would take, in larger buffers; at
  // least kMinJumboPoolBuffers of them.
  const uint64_t bytes = uint64_t{DefaultPoolBuffers(opts, kDefaultUdpMtu + 14)} *
                         (kDataOffset + kDefaultUdpMtu + 14);
  const uint64_t fit = bytes / (kDataOffset + max_frame);
  return static_cast<uint32_t>(
      std::min<uint64_t>(by_default, std::max<uint64_t>(fit, kMinJumboPoolBuffers)));
}

MacAddress MacFromIpv4(Ipv4Address ip) {
  return MacAddress{{0x02, 0x00, static_cast<uint8_t>(ip.value >> 24),
                     static_cast<uint8_t>(ip.value >> 16), static_cast<uint8_t>(ip.value >> 8),
                     static_cast<uint8_t>(ip.value)}};
}

absl::StatusOr<std::unique_ptr<Device>> Open(DeviceUri uri, const DeviceOptions& defaults) {
  DeviceOptions opts = defaults;
  // No mtu= and the options' default: the MTU follows the interface's link
  // (below, once the interface is known).
  const bool mtu_from_link = !uri.Has("mtu") && defaults.mtu == DeviceOptions{}.mtu;
  if (absl::Status s = TakeUriOptions(uri, opts, kMaxUdpSocketMtu); !s.ok()) return s;
  if (absl::Status s = ValidateOptions(opts, kMaxUdpSocketMtu); !s.ok()) return s;
  // gso=0 sends and receives one datagram per frame (no UDP_SEGMENT or
  // UDP_GRO): for tests of that path, and kernels that mishandle them.
  UdpOffloads offloads;
  if (std::optional<std::string> gso = uri.Take("gso")) {
    if (*gso != "0" && *gso != "1") {
      return absl::InvalidArgumentError(absl::StrCat(
          "device '", uri.text, "': gso=", *gso, " is not 0 or 1 (1, the default, uses UDP "
          "segmentation and receive offload)"));
    }
    offloads.gso = offloads.gro = *gso == "1";
  }
  if (absl::Status s = uri.CheckKnown({"ip", "mtu", "queues", "ring"}); !s.ok()) return s;
  if (opts.queues != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device '", uri.text, "': udp has one queue, not ", opts.queues,
        " (it cannot steer: the layer above demultiplexes by port)"));
  }

  // The address: the target's (an interface or a literal), or the host's
  // primary one, and ip= over either.
  std::optional<HostInterface> iface;
  Ipv4Address ip;
  if (uri.target.empty()) {
    ip = PrimaryIpv4();
  } else if (absl::StatusOr<Ipv4Address> literal = Ipv4Address::Parse(uri.target); literal.ok()) {
    if (!IsLocalIpv4(*literal)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "device '", uri.text, "': ", uri.target,
          " is not an address of this host; name a local address or interface, or use "
          "'udp:' for the primary address"));
    }
    ip = *literal;
  } else {
    absl::StatusOr<HostInterface> found = FindInterface(uri.target);
    if (!found.ok()) {
      return absl::NotFoundError(absl::StrCat(
          "device '", uri.text, "': ", found.status().message(),
          "; use one of those, an address (udp:A.B.C.D), or 'udp:' for the primary address"));
    }
    iface = *std::move(found);
    ip = iface->ipv4;
  }
  if (opts.ipv4) {
    if (!IsLocalIpv4(*opts.ipv4)) {
      return absl::InvalidArgumentError(
          absl::StrCat("device '", uri.text, "': ip=", opts.ipv4->ToString(),
                       " is not an address of this host, so no socket can be bound to it"));
    }
    ip = *opts.ipv4;
  }
  if (!iface || iface->ipv4 != ip) {
    if (std::optional<HostInterface> holder = InterfaceWith(ip)) iface = std::move(holder);
  }

  // Not lo's 65536: no link's, and what reaches this host's peers there
  // (tests; the default domain's shm carries them) keeps 1500.
  if (mtu_from_link && iface && !iface->loopback) opts.mtu = LinkMtuFor(InterfaceMtu(iface->name));

  std::unique_ptr<UdpDevice> dev(new UdpDevice());
  DeviceInfo& info = dev->info_;
  info.uri = uri.text;
  info.driver = "udp";
  info.host_address = true;  // its sockets are the host's: 127.0.0.1 and the rest name it
  info.mtu = opts.mtu;
  info.ipv4 = ip;
  info.mac = iface && iface->mac != MacAddress{} ? iface->mac : MacFromIpv4(ip);
  info.num_queues = 1;
  info.ring_size = opts.ring_size;
  // The kernel verified both checksums of what it delivers.
  info.offloads = kOffloadRxIpChecksum | kOffloadRxUdpChecksum;
  info.can_steer = false;
  info.owns_port = true;

  // As many buffers as frames of the MTU would have, each as large as
  // buffer_frame asks (a composite's remote part: DeviceOptions).
  const uint32_t pool_buffers = PoolBuffersFor(opts, opts.mtu + 14);
  absl::StatusOr<std::unique_ptr<UdpQueue>> queue =
      UdpQueue::Create(dev->info_, pool_buffers, opts.numa_node, offloads, opts.buffer_frame);
  if (!queue.ok()) {
    return absl::Status(queue.status().code(),
                        absl::StrCat("device '", uri.text, "': ", queue.status().message()));
  }
  dev->queue_ = *std::move(queue);
  return std::unique_ptr<Device>(std::move(dev));
}

absl::Status UdpDevice::SteerUdpPort(uint16_t udp_port, uint16_t q) {
  return absl::UnimplementedError(absl::StrCat(
      "SteerUdpPort(", udp_port, ", ", q, "): ", info_.uri,
      " cannot steer (one queue; its sockets deliver by port)"));
}

absl::Status UdpDevice::SetLinkState(LinkState state) {
  return absl::UnimplementedError(absl::StrCat("SetLinkState(", state == LinkState::kUp ? "up" : "down", "): ",
                                               info_.uri, " has no link to toggle"));
}

}  // namespace bypass::driver::udp
