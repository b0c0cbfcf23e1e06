// The loopback backend: ports of one process joined into virtual L2 segments
// by SPSC rings. Deterministic, no threads of its own.
#ifndef BYPASS_DRIVER_LOOPBACK_LOOPBACK_DEVICE_H_
#define BYPASS_DRIVER_LOOPBACK_LOOPBACK_DEVICE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "driver/device.h"
#include "driver/loopback/loopback_queue.h"
#include "driver/uri.h"

namespace bypass::driver::loopback {

class LoopbackDevice;

// Opens `loopback:NAME[,mac=..][,ip=..][,mtu=..][,queues=..][,ring=..][,same_host=0|1]`:
// a new port on the in-process segment NAME (created by its first port, gone
// with its last). same_host=1 makes it act as the intra-host device does
// between processes: received frames carry kRxSameHost and ReadPeerMemory
// reads (process_vm_readv); default 0 (-ENOSYS). bypass's own keys are taken here too if OpenDevice has not.
// Default addresses: MAC 02:00:00:SS:SS:PP, IPv4 10.77.S.P, where S is the
// segment's number (lowest free when it was created) and P = port index + 1
// (lowest free on the segment), so the same open sequence gives the same
// addresses. Segment names and MACs are checked, with one-line errors.
absl::StatusOr<std::unique_ptr<LoopbackDevice>> Open(DeviceUri uri, const DeviceOptions& opts);

// One port on a virtual segment. TX delivers by destination MAC: unicast to
// the port with that MAC (itself included), broadcast and multicast to every
// other port; unknown unicast is dropped and counted. Each (sender queue,
// receiver queue) pair has its own SPSC ring sized at open, so each ring has
// one producer and one consumer thread; with several receiver queues the
// sender picks the ring by the receiver's steering table. A full ring makes
// TxBurst take fewer.
//
// Threading: each queue pair belongs to one thread. Opening or destroying a
// port rewires the rings of every port on its segment; the other ports'
// threads may keep polling meanwhile (each queue's burst calls and its
// rewiring take the queue's own lock). SteerUdpPort and SetLinkState may be
// called from any thread at any time.
class LoopbackDevice final : public Device {
 public:
  static constexpr uint16_t kMaxQueues = 8;
  static constexpr uint16_t kMaxPorts = 254;  // per segment

  LoopbackDevice(const LoopbackDevice&) = delete;
  LoopbackDevice& operator=(const LoopbackDevice&) = delete;
  // Leaves the segment; frames in flight to this port are dropped.
  ~LoopbackDevice() override;

  const DeviceInfo& info() const override { return info_; }
  QueuePair& queue(uint16_t q) override { return *queues_[q]; }
  absl::Status SteerUdpPort(uint16_t udp_port, uint16_t q) override;
  LinkState link_state() const override;
  absl::Status SetLinkState(LinkState state) override;

  // REQUIRES: q < info().num_queues; called by the queue's thread.
  const LoopbackCounters& counters(uint16_t q) const { return queues_[q]->counters(); }
  const std::string& segment_name() const { return segment_; }
  uint16_t port_index() const { return port_index_; }

  // For the segment registry (segment.cc).
  PortShared& shared() { return shared_; }
  LoopbackQueue& loopback_queue(uint16_t q) { return *queues_[q]; }
  void AssignAddress(uint16_t port_index, MacAddress mac, Ipv4Address ip);

 private:
  friend absl::StatusOr<std::unique_ptr<LoopbackDevice>> Open(DeviceUri uri,
                                                              const DeviceOptions& opts);
  LoopbackDevice() = default;

  DeviceInfo info_;
  PortShared shared_;
  std::vector<std::unique_ptr<LoopbackQueue>> queues_;
  std::string segment_;
  uint16_t port_index_ = 0;
  bool joined_ = false;
};

}  // namespace bypass::driver::loopback

#endif  // BYPASS_DRIVER_LOOPBACK_LOOPBACK_DEVICE_H_
