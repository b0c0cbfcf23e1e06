// The kernel UDP device: the no-configuration fallback for peers on other
// hosts (the role libfabric's tcp provider plays). bypass's frames
// (Ethernet + IPv4 + UDP + payload) travel as ordinary UDP datagrams
// through the kernel's sockets, busy-polled; what the kernel does not carry
// (the Ethernet header, the IPv4 and UDP headers) is synthesized on receive
// from the socket's addresses.
#ifndef BYPASS_DRIVER_UDP_UDP_DEVICE_H_
#define BYPASS_DRIVER_UDP_UDP_DEVICE_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "driver/device.h"
#include "driver/options.h"
#include "driver/packet_pool.h"
#include "driver/udp/udp_queue.h"
#include "driver/uri.h"

namespace bypass::driver::udp {

// The locally administered MAC a UDP device has when its interface has none
// (lo), and the source MAC of the frames it synthesizes: 02:00 and the four
// bytes of `ip`.
MacAddress MacFromIpv4(Ipv4Address ip);

// The MTU a UDP device takes from its interface's link when neither mtu=
// nor DeviceOptions names one: the link's up to jumbo frames (kMaxMtu),
// never below 1500. Measured (//fabric/rdm:udp_benchmark): over a
// 9000-byte link, 9000-byte frames cost 1.5x-1.7x less CPU per byte at
// 64 KiB-1 MiB than GSO runs of 1500-byte ones; frames above the link's
// MTU (fragmented by the kernel) cost more than either, and 65000-byte
// frames over a 65536-byte link (lo) more than 9000-byte ones (the
// receive buffer holds fewer, so more are dropped and sent again).
inline constexpr uint32_t kDefaultUdpMtu = 1500;
inline constexpr uint32_t kMaxUdpLinkMtu = kMaxMtu;
uint32_t LinkMtuFor(uint32_t link_mtu);

// Buffers of the device's pool when DeviceOptions names none: as
// DefaultPoolBuffers up to 1500-byte frames; above, the bytes that pool
// would take (prefaulted memory per process stays the same on jumbo
// links), but at least kMinJumboPoolBuffers.
inline constexpr uint32_t kMinJumboPoolBuffers = 1024;
uint32_t PoolBuffersFor(const DeviceOptions& opts, uint32_t max_frame);

// Opens `udp:[IFACE|A.B.C.D][,ip=..][,mtu=..][,ring=..][,gso=0]`. Its IPv4: ip= if
// given, else the literal, else the interface's, else PrimaryIpv4(); it must
// be an address of this host. Its MAC: its interface's, else MacFromIpv4.
// One queue; the MTU (up to kMaxUdpSocketMtu) bounds the datagrams it
// sends and receives, and the kernel fragments those larger than the
// link's. Without mtu= (and with DeviceOptions' default MTU) it is
// LinkMtuFor the MTU of the interface holding the address, but 1500 on a
// loopback interface (lo's 65536 is no link's). gso=0 sends and receives one datagram per frame (no UDP_SEGMENT or
// UDP_GRO). bypass's own keys are taken here too if OpenDevice has not.
absl::StatusOr<std::unique_ptr<Device>> Open(DeviceUri uri, const DeviceOptions& opts);

// A UDP device: one queue pair whose sockets are bound by BindUdpPort.
// Cannot steer (one queue) or toggle its link.
class UdpDevice final : public Device {
 public:
  UdpDevice(const UdpDevice&) = delete;
  UdpDevice& operator=(const UdpDevice&) = delete;

  const DeviceInfo& info() const override { return info_; }
  QueuePair& queue(uint16_t /*q*/) override { return *queue_; }
  absl::Status SteerUdpPort(uint16_t udp_port, uint16_t q) override;
  LinkState link_state() const override { return LinkState::kUp; }
  absl::Status SetLinkState(LinkState state) override;

  UdpQueue& udp_queue() { return *queue_; }

 private:
  friend absl::StatusOr<std::unique_ptr<Device>> Open(DeviceUri uri, const DeviceOptions& opts);
  UdpDevice() = default;

  DeviceInfo info_;
  std::unique_ptr<UdpQueue> queue_;
};

}  // namespace bypass::driver::udp

#endif  // BYPASS_DRIVER_UDP_UDP_DEVICE_H_
