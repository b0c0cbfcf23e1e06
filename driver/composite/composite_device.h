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
  // Frames longer than the remote device's MTU allows, dropped rather than
  // sent the remote way (sized for a peer of this host that is no longer
  // reached through shared memory).
  uint64_t tx_too_long = 0;
  uint64_t rx_remote_polls = 0;  // RxBurst calls that asked the remote device (RemotePacer)
};

// When the composite polls its remote device. A kernel UDP poll is a
// system call, about as long as a whole round trip through shared memory
// (0.5-1 us here): a busy-polling process of a one-host job asking an
// empty socket on every pass spent a third of its time there. So the
// remote device is polled on a timer while it brings nothing: while it had
// traffic (received or sent) within kIdleAfter, the interval doubles from
// kMinGap up to kMaxGap TSC ticks (about a microsecond at 2-4 GHz), so a
// remote conversation is answered within that; once it has been silent
// that long (a one-host job, or remote peers that stopped talking), up to
// kIdleGap (30-60 us): the first frame of a remote peer after such silence
// waits at most that long in the socket (nothing is lost), and polling the
// idle socket costs about 1% of a core. Timed, not counted, so an
// application that polls rarely (a thread that sleeps between polls) does
// not delay remote frames by its sleeps. Pure: the caller passes the TSC.
class RemotePacer {
 public:
  static constexpr uint64_t kMinGap = 64;
  static constexpr uint64_t kMaxGap = 4096;
  static constexpr uint64_t kIdleGap = uint64_t{1} << 17;
  static constexpr uint64_t kIdleAfter = uint64_t{1} << 22;  // 1-2 ms

  // Whether the remote device is due a poll at TSC now.
  bool Due(uint64_t now) const { return now >= next_; }
  // A poll at now brought frames (got) or nothing.
  void Polled(uint64_t now, bool got) {
    if (got) {
      Active(now);
      return;
    }
    const uint64_t cap = now - active_ < kIdleAfter ? kMaxGap : kIdleGap;
    gap_ = std::clamp(gap_ * 2, kMinGap, cap);
    next_ = now + gap_;
  }
  // Remote traffic at now (a frame in, or one sent, whose answer may
  // follow): the next poll is at once, then at the short intervals.
  void Active(uint64_t now) {
    active_ = now;
    gap_ = 0;
    next_ = 0;
  }
  uint64_t gap() const { return gap_; }

 private:
  uint64_t next_ = 0;    // TSC of the next poll
  uint64_t gap_ = 0;     // the current interval (0: at once)
  uint64_t active_ = 0;  // TSC of the last remote traffic (0: none yet: idle)
};

class CompositeQueue final : public QueuePair {
 public:
  // remote_max_frame: the longest frame sent the remote way (its MTU + 14;
  // its buffers may be larger, DeviceInfo::same_host_mtu).
  CompositeQueue(shm::ShmQueue& local, QueuePair& remote, uint32_t remote_max_frame)
      : local_(local), remote_(remote), remote_max_frame_(remote_max_frame) {}

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

  shm::ShmQueue& local_;
  QueuePair& remote_;
  const uint32_t remote_max_frame_;
  bool local_first_ = true;
  RemotePacer pacer_;
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
