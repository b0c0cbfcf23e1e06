// A device of two, for one domain that reaches every peer (URI
// "LOCAL+REMOTE", default "shm:+udp:"): frames to a peer of this host that
// the intra-host device reaches go through shared memory, everything else
// through the remote device (the kernel UDP device, or a NIC: af_xdp, a
// DPDK port, mlx5). The choice is made per frame from the intra-host
// registry's cache (no system call), so a peer that appears on this host or
// leaves it is followed without configuration; the way efa carries local
// peers over shm.
#ifndef BYPASS_DRIVER_COMPOSITE_COMPOSITE_DEVICE_H_
#define BYPASS_DRIVER_COMPOSITE_COMPOSITE_DEVICE_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "driver/device.h"
#include "driver/shm/shm_queue.h"

namespace bypass::driver::composite {

// What went where, for logs and tests.
struct RouteCounters {
  uint64_t tx_local = 0;     // frames sent through the intra-host device
  uint64_t tx_remote = 0;    // frames sent through the remote device
  uint64_t tx_copied = 0;    // intra-host buffers copied into remote ones to be sent
};

class CompositeQueue final : public QueuePair {
 public:
  CompositeQueue(shm::ShmQueue& local, QueuePair& remote) : local_(local), remote_(remote) {}

  uint16_t RxBurst(absl::Span<Packet*> out) override;
  uint16_t TxBurst(absl::Span<Packet* const> pkts) override;
  // Buffers come from the remote device: a NIC sends only its own, and the
  // intra-host device copies from any.
  bool AllocBulk(absl::Span<Packet*> out) override { return remote_.AllocBulk(out); }
  void FreeBulk(absl::Span<Packet* const> pkts) override;
  uint32_t PoolAvailable() const override { return remote_.PoolAvailable(); }
  // The smaller pool: received packets come from either, and the engine
  // holds at most a share of this (more from the smaller pool would starve
  // its RX of the packet that completes what it holds).
  uint32_t PoolCapacity() const override {
    return std::min(local_.PoolCapacity(), remote_.PoolCapacity());
  }
  QueueStats stats() const override;
  // Its routing counters, then the intra-host queue's (prefixed shm_) and
  // the remote one's (remote_).
  void AppendCounters(NamedCounters* out) const override;
  uint16_t id() const override { return 0; }
  // Both devices: the port is this process's on the host and on the wire.
  absl::Status BindUdpPort(uint16_t port) override;
  // Groups are the remote device's: a multicast frame is never for the
  // intra-host device (no registry entry has a group's address), and the
  // remote device's members on this host get it through the kernel.
  absl::Status JoinGroup(Ipv4Address group, uint16_t udp_port) override {
    return remote_.JoinGroup(group, udp_port);
  }
  void LeaveGroup(Ipv4Address group, uint16_t udp_port) override {
    remote_.LeaveGroup(group, udp_port);
  }
  bool LoopsMulticast() const override { return remote_.LoopsMulticast(); }
  void UnbindUdpPort(uint16_t port) override;
  // Frames with kRxSameHost come from the intra-host device, which reads.
  int64_t ReadPeerMemory(uint32_t pid, uint64_t addr, void* dst, size_t len) override {
    return local_.ReadPeerMemory(pid, addr, dst, len);
  }
  int64_t ReadPeerMemoryV(uint32_t pid, absl::Span<const PeerRange> ranges) override {
    return local_.ReadPeerMemoryV(pid, ranges);
  }
  bool ReachesSameHost(Ipv4Address ip, uint16_t udp_port) override {
    return local_.Reaches(ip, udp_port);
  }
  // The intra-host device's answer for an address bound on this host; the
  // remote device's for any other (and for one of this host no longer
  // bound: its frames go the remote way, and so does the question).
  PeerLiveness PeerAlive(Ipv4Address ip, uint16_t udp_port) override {
    const PeerLiveness l = local_.PeerAlive(ip, udp_port);
    return l != PeerLiveness::kUnknown ? l : remote_.PeerAlive(ip, udp_port);
  }

  // Whether a frame to ip:port goes through the intra-host device.
  bool IsLocal(Ipv4Address ip, uint16_t udp_port) { return local_.Reaches(ip, udp_port); }
  const RouteCounters& routes() const { return routes_; }

 private:
  bool Local(const Packet* p);
  uint16_t SendRemote(absl::Span<Packet* const> run);

  // While the remote device stays idle it is polled at most once per
  // interval, doubling from kMinRemoteGap up to kMaxRemoteGap TSC ticks
  // (about a microsecond at 2-4 GHz): a kernel UDP poll is a system call,
  // about as long as a whole round trip through shared memory. Timed, not
  // counted, so an application that polls rarely (a thread that sleeps
  // between polls) does not delay remote frames by its sleeps.
  static constexpr uint64_t kMinRemoteGap = 64;
  static constexpr uint64_t kMaxRemoteGap = 4096;

  shm::ShmQueue& local_;
  QueuePair& remote_;
  bool local_first_ = true;
  uint64_t remote_next_ = 0;  // TSC of the next remote poll
  uint64_t remote_gap_ = 0;   // the current interval (0: poll every time)
  RouteCounters routes_;
};

class CompositeDevice final : public Device {
 public:
  // REQUIRES: local is an shm device (its queue 0 an shm::ShmQueue); both
  // have one queue. uri: the composite's as opened.
  static absl::StatusOr<std::unique_ptr<CompositeDevice>> Create(std::string_view uri,
                                                                 std::unique_ptr<Device> local,
                                                                 std::unique_ptr<Device> remote);

  const DeviceInfo& info() const override { return info_; }
  QueuePair& queue(uint16_t) override { return *queue_; }
  // The remote device steers nothing it could not before: one queue.
  absl::Status SteerUdpPort(uint16_t, uint16_t) override;
  LinkState link_state() const override { return remote_->link_state(); }
  absl::Status SetLinkState(LinkState) override;

  CompositeQueue& composite_queue() { return *queue_; }
  Device& local() { return *local_; }
  Device& remote() { return *remote_; }

 private:
  CompositeDevice() = default;

  // Declared before the queue, which refers to both: it is destroyed first.
  std::unique_ptr<Device> local_;
  std::unique_ptr<Device> remote_;
  std::unique_ptr<CompositeQueue> queue_;
  DeviceInfo info_;
};

}  // namespace bypass::driver::composite

#endif  // BYPASS_DRIVER_COMPOSITE_COMPOSITE_DEVICE_H_
