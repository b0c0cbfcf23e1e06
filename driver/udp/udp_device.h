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
#include "driver/udp/udp_queue.h"
#include "driver/uri.h"

namespace bypass::driver::udp {

// The locally administered MAC a UDP device has when its interface has none
// (lo), and the source MAC of the frames it synthesizes: 02:00 and the four
// bytes of `ip`.
MacAddress MacFromIpv4(Ipv4Address ip);

// Opens `udp:[IFACE|A.B.C.D][,ip=..][,mtu=..][,ring=..][,gso=0]`. Its IPv4: ip= if
// given, else the literal, else the interface's, else PrimaryIpv4(); it must
// be an address of this host. Its MAC: its interface's, else MacFromIpv4.
// One queue; the MTU (up to kMaxUdpSocketMtu) bounds the datagrams it
// sends and receives, and the kernel fragments those larger than the
// link's. gso=0 sends and receives one datagram per frame (no UDP_SEGMENT or
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
