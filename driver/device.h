// The driver contract: a device is one NIC port (or a virtual one), opened
// from a URI, with queue pairs that burst packets. No backend types appear
// here; the layers above see only this header, packet.h and clock.h.
#ifndef BYPASS_DRIVER_DEVICE_H_
#define BYPASS_DRIVER_DEVICE_H_

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "driver/packet.h"

namespace bypass::driver {

// A 48-bit Ethernet address.
struct MacAddress {
  std::array<uint8_t, 6> bytes{};

  static absl::StatusOr<MacAddress> Parse(std::string_view text);  // "02:00:..."
  std::string ToString() const;
  bool IsBroadcast() const;
  bool IsMulticast() const { return (bytes[0] & 1) != 0; }
  friend bool operator==(const MacAddress&, const MacAddress&) = default;
};
inline constexpr MacAddress kBroadcastMac{{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}};

// An IPv4 address in host byte order.
struct Ipv4Address {
  uint32_t value = 0;
  static absl::StatusOr<Ipv4Address> Parse(std::string_view text);  // "10.0.0.1"
  std::string ToString() const;
  bool IsMulticast() const { return (value >> 28) == 0xe; }  // 224.0.0.0/4
  friend bool operator==(const Ipv4Address&, const Ipv4Address&) = default;
};

// The Ethernet address an IPv4 multicast group is sent to (RFC 1112):
// 01:00:5e and the group's low 23 bits.
inline MacAddress MulticastMac(Ipv4Address group) {
  return MacAddress{{0x01, 0x00, 0x5e, static_cast<uint8_t>((group.value >> 16) & 0x7f),
                     static_cast<uint8_t>(group.value >> 8), static_cast<uint8_t>(group.value)}};
}

// Device-level offload capabilities (DeviceInfo::offloads).
enum DeviceOffload : uint32_t {
  kOffloadRxIpChecksum = 1u << 0,
  kOffloadRxUdpChecksum = 1u << 1,
  kOffloadTxIpChecksum = 1u << 2,
  kOffloadTxUdpChecksum = 1u << 3,
};

enum class LinkState { kDown, kUp };
std::string_view LinkStateName(LinkState s);

// What a device is and can do, fixed at open.
struct DeviceInfo {
  std::string uri;          // as opened
  std::string driver;       // "loopback", "net_memif", "net_af_xdp", "mlx5", ...
  uint32_t mtu = 1500;      // largest IP packet; a frame is mtu + 14
  MacAddress mac;
  Ipv4Address ipv4;         // 0.0.0.0 if the device has none and none was given
  uint16_t num_queues = 1;
  uint16_t ring_size = 0;   // descriptors per RX and per TX ring
  uint32_t offloads = 0;    // DeviceOffload bits
  bool can_steer = false;   // SteerUdpPort works
  bool owns_port = true;    // false when attached to an application's port
  // ipv4 is this host's own (the kernel UDP and intra-host devices): every
  // local address (127.0.0.0/8 and the host's others, driver/host.h) names
  // this device, and peers on this host are reached by port.
  bool host_address = false;
  // The key peers this device reaches on this host share (the intra-host
  // device's per-user key file, driver/shm/keys.h): the engine's
  // EndpointConfig::same_host_key. Unset for devices that reach no such peer.
  std::optional<std::array<uint8_t, 32>> same_host_key;
  // Nothing between this device and its peers drops a frame for want of
  // room: a full ring holds the sender back (TxBurst takes fewer) instead
  // (memif's shared-memory rings). The engine runs no congestion control
  // on such a device (fabric/rdm/PROTOCOL.md, "Congestion control").
  bool lossless = false;
  // Every frame this device delivers came through memory only and carries
  // kRxIntact (the intra-host device, memif, loopback): a peer may send us
  // its packets without their checksum.
  bool integrity = false;
  // The MTU toward peers of this host (QueuePair::ReachesSameHost), where
  // it is larger than `mtu` (0: `mtu`). The composite's: its intra-host
  // device's, bounded by what its TX buffers hold (fabric/rdm/PROTOCOL.md,
  // "The same-host path"). The engine announces the larger receive limit
  // only to such peers; every other peer is told and sent `mtu`.
  uint32_t same_host_mtu = 0;

  uint32_t max_frame() const { return mtu + 14; }
};

// How to open a device. URI keys (see OpenDevice) override these.
struct DeviceOptions {
  uint16_t queues = 1;         // queue pairs to set up
  uint16_t ring_size = 1024;   // power of two
  uint32_t pool_buffers = 0;   // per queue; 0: 4 * ring_size
  uint32_t mtu = 1500;         // 9000 for jumbo frames where supported
  std::optional<Ipv4Address> ipv4;  // for devices with no kernel address
  int numa_node = -1;
  // Bytes each pool buffer holds, when more than a frame (mtu + 14): the
  // kernel UDP device's, as the remote part of a composite whose TX buffers
  // also carry the intra-host device's larger frames. 0: mtu + 14. Others
  // ignore it.
  uint32_t buffer_frame = 0;
};

// What a device can tell of the process behind a peer's address
// (QueuePair::PeerAlive), for a peer that has gone silent.
enum class PeerLiveness : uint8_t {
  // The device cannot tell (NICs: a silent peer and a dead one look the
  // same): the engine's peer timeout decides.
  kUnknown,
  // A process holds the address now (the intra-host device: the flock of
  // the area the address is bound to). It may compute without calling in.
  kAlive,
  // The process that held the address is gone: the area's lock is free
  // (the intra-host device), or its host answered "port unreachable" to
  // a datagram sent there since we last heard from it (kernel UDP).
  kDead,
  // The device would report the process's exit while its host is up (the
  // kernel UDP device: ICMP port unreachable) and has seen none since we
  // last heard from it. Says nothing of a host that crashed or a path
  // that broke (nothing answers then).
  kNoDeathSeen,
};
std::string_view PeerLivenessName(PeerLiveness l);

// Plain counters of one queue pair, summed on demand.
struct QueueStats {
  uint64_t rx_packets = 0;
  uint64_t rx_bytes = 0;
  uint64_t tx_packets = 0;
  uint64_t tx_bytes = 0;
  uint64_t tx_ring_full = 0;     // packets TxBurst handed back to the caller
  uint64_t rx_dropped = 0;       // frames dropped by the backend (link down, oversize)
  uint64_t alloc_failures = 0;   // AllocBulk calls that found too few buffers
};

// A queue's counter beyond QueueStats, by name (the telemetry of
// fabric/stats: /bypass/device,ID). Names are letters, digits and '_'.
struct NamedCounter {
  std::string name;
  uint64_t value = 0;
};
using NamedCounters = std::vector<NamedCounter>;
// Appends {name, value} pairs to out, each name prefixed with `prefix`.
void AppendNamed(NamedCounters* out, std::string_view prefix,
                 std::initializer_list<std::pair<const char*, uint64_t>> counters);

// One RX ring and one TX ring, owned by one thread. Nothing here allocates,
// locks or makes a system call.
// One range of a read of a peer process's memory (QueuePair::ReadPeerMemoryV):
// len bytes at addr, in the peer, into dst.
struct PeerRange {
  uint64_t addr = 0;
  void* dst = nullptr;
  size_t len = 0;
};
// The most ranges one ReadPeerMemoryV takes (more: -EINVAL).
inline constexpr size_t kMaxPeerRanges = 64;

class QueuePair {
 public:
  virtual ~QueuePair() = default;

  // Receives up to out.size() packets; returns how many were stored in out.
  // The caller owns them and must FreeBulk or TxBurst them.
  virtual uint16_t RxBurst(absl::Span<Packet*> out) = 0;

  // Transmits as many of pkts as fit, in order; returns how many it took.
  // Those are no longer the caller's; the rest still are.
  virtual uint16_t TxBurst(absl::Span<Packet* const> pkts) = 0;

  // Bulk: all of out.size() empty packets (len 0, capacity >= max frame) or
  // none, returning false and counting an alloc failure.
  virtual bool AllocBulk(absl::Span<Packet*> out) = 0;

  // Returns packets from RxBurst or AllocBulk to the pool.
  virtual void FreeBulk(absl::Span<Packet* const> pkts) = 0;

  // Free buffers left in this queue's pool (for accounting tests).
  virtual uint32_t PoolAvailable() const = 0;
  virtual uint32_t PoolCapacity() const = 0;

  virtual QueueStats stats() const = 0;
  virtual uint16_t id() const = 0;
  // Cold path, the owner thread (telemetry snapshots): appends what the
  // backend counts beyond stats() (its drops and errors by kind; a DPDK
  // port's rte_eth_stats and xstats; a decorator's own and its inner
  // queue's) to out. Default: nothing.
  virtual void AppendCounters(NamedCounters* /*out*/) const {}

  // The UDP ports this queue receives for (cold path). A NIC queue sees
  // every frame of its port and needs no binding: the default accepts any
  // port. A device that delivers by port rather than by frame (the kernel
  // UDP device's sockets, the intra-host device's registry) binds `port`
  // for this process, and returns AlreadyExists when another process (or
  // another queue) holds it. rdm::Port::Attach binds; Detach unbinds.
  virtual absl::Status BindUdpPort(uint16_t /*port*/) { return absl::OkStatus(); }
  virtual void UnbindUdpPort(uint16_t /*port*/) {}

  // IPv4 multicast (cold path): frames to group:udp_port (224.0.0.0/4)
  // reach this queue from JoinGroup until LeaveGroup. A device that cannot
  // join groups (the default: DPDK ports and mlx5, whose receive side would
  // need an MAC filter or flow rule nobody here can test) refuses with
  // Unimplemented, and fi_getinfo offers it no FI_MULTICAST. The loopback device carries every
  // multicast frame to every other port already; the kernel UDP device
  // opens a socket bound to group:udp_port (SO_REUSEADDR, so this host's
  // processes can each have one) with IP_ADD_MEMBERSHIP on its address.
  virtual absl::Status JoinGroup(Ipv4Address /*group*/, uint16_t /*udp_port*/) {
    return absl::UnimplementedError(
        "this device does not join multicast groups (loopback, kernel UDP and the default "
        "domain do)");
  }
  virtual void LeaveGroup(Ipv4Address /*group*/, uint16_t /*udp_port*/) {}
  // Whether a multicast frame sent on this queue comes back to it for the
  // groups it joined (the kernel's IP_MULTICAST_LOOP); false: the layer
  // above hands this queue's members their copy itself.
  virtual bool LoopsMulticast() const { return false; }

  // Copies len bytes at addr in process pid of this host into dst, in one
  // copy (cross-memory attach), for a peer whose frames arrive with
  // kRxSameHost. Returns the bytes copied or a negative errno; -ENOSYS on
  // devices that carry no such frames (the default). A system call: the
  // engine uses it for large messages only.
  virtual int64_t ReadPeerMemory(uint32_t /*pid*/, uint64_t /*addr*/, void* /*dst*/,
                                 size_t /*len*/) {
    return -38;  // -ENOSYS
  }
  // As ReadPeerMemory, for several ranges copied in order, each completely
  // before the next (one system call where the device can: the default
  // makes one ReadPeerMemory call per range). Returns the bytes copied,
  // stopping after the first range not copied whole, or the first range's
  // negative errno.
  virtual int64_t ReadPeerMemoryV(uint32_t pid, absl::Span<const PeerRange> ranges) {
    int64_t total = 0;
    for (const PeerRange& r : ranges) {
      const int64_t n = ReadPeerMemory(pid, r.addr, r.dst, r.len);
      if (n < 0) return total == 0 ? n : total;
      total += n;
      if (static_cast<size_t>(n) != r.len) break;
    }
    return total;
  }
  // Whether frames to ip:udp_port go through memory only this host's
  // processes share (so the peer's frames come with kRxSameHost): the
  // engine then authenticates its handshake with the intra-host key
  // (SECURITY.md). A cold path (once per handshake packet). Default: no.
  virtual bool ReachesSameHost(Ipv4Address /*ip*/, uint16_t /*udp_port*/) { return false; }
  // Whether the process at ip:udp_port (a peer this queue sent to) still
  // exists, as far as the device can tell (PeerLiveness). A cold path (a
  // few system calls): the engine asks about a peer that stays silent
  // while it has work for it, at most once per liveness interval
  // (fabric/rdm/PROTOCOL.md, "Peer liveness"). Default: kUnknown.
  virtual PeerLiveness PeerAlive(Ipv4Address /*ip*/, uint16_t /*udp_port*/) {
    return PeerLiveness::kUnknown;
  }
};

// One NIC port or virtual port. Open with OpenDevice.
class Device {
 public:
  virtual ~Device() = default;

  virtual const DeviceInfo& info() const = 0;

  // REQUIRES: q < info().num_queues.
  virtual QueuePair& queue(uint16_t q) = 0;

  // Delivers UDP datagrams with destination port `udp_port` (to this
  // device's IPv4) to queue q. Unimplemented when !info().can_steer; the
  // layer above then demultiplexes from queue 0 in software.
  virtual absl::Status SteerUdpPort(uint16_t udp_port, uint16_t q) = 0;

  virtual LinkState link_state() const = 0;
  // Brings the link down or up (tests); Unimplemented where the device
  // cannot.
  virtual absl::Status SetLinkState(LinkState state) = 0;
};

// Opens a device from a URI:
//   loopback:NAME[,mac=..][,ip=..]   ports on one in-process L2 segment NAME
//   memif:SOCKET[,role=server|client|auto][,id=N][,ip=..]
//   dpdk:DEVARGS[,ip=..]             PCI address or vdev string (af_xdp,
//                                    net_af_xdpN,iface=IF: mtu up to 3502,
//                                    without mtu= IF's from 1500 up to that)
//   dpdk:port=N,queues=A-B[,ip=..]   attach to an application's port
//   mlx5:DEVICE[,port=N][,ip=..]
//   udp:[IFACE|A.B.C.D][,ip=..][,mtu=..]  kernel UDP sockets (any host;
//                                    mtu up to 65000, the kernel fragments)
//   shm:[DIR][,ip=..][,lanes=N][,slots=N]  processes of one host, through
//                                    shared memory (mtu= up to 65000)
// Keys `ip=`, `mtu=`, `queues=` (except in dpdk attach) and `ring=` are
// bypass's own; everything else goes to the backend. On any of them (each
// part of a composite on its own), `pcap=FILE[,pcap_max_mb=N]
// [,pcap_snaplen=N][,pcap_format=pcap|pcapng]` captures what the device
// sends and receives (driver/pcap/pcap_device.h).
absl::StatusOr<std::unique_ptr<Device>> OpenDevice(std::string_view uri,
                                                   const DeviceOptions& opts = {});

}  // namespace bypass::driver

#endif  // BYPASS_DRIVER_DEVICE_H_
