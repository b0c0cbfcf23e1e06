// The queue pair of the kernel UDP device: the RDM engine's Ethernet/IPv4/UDP
// frames carried as the payloads of ordinary kernel UDP sockets, one socket
// per bound port, busy-polled with recvmmsg/sendmmsg.
#ifndef BYPASS_DRIVER_UDP_UDP_QUEUE_H_
#define BYPASS_DRIVER_UDP_UDP_QUEUE_H_

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "driver/device.h"
#include "driver/packet.h"
#include "driver/packet_pool.h"

namespace bypass::driver::udp {

// Buffers are laid out as driver/packet_pool.h says (kDataOffset). A
// datagram is received at frame + 42, where its synthesized headers end.

// Drops beyond QueueStats, plain integers of the owner thread.
struct UdpCounters {
  uint64_t tx_not_udp = 0;        // not an unfragmented Ethernet/IPv4/UDP frame, or oversize
  uint64_t tx_unbound_port = 0;   // its UDP source port is not bound on this queue
  uint64_t tx_send_errors = 0;    // sendmmsg refused it for a reason other than a full buffer
  uint64_t rx_truncated = 0;      // a datagram longer than the MTU allows (also rx_dropped)
  uint64_t rx_no_buffer = 0;      // RxBurst calls that found the pool empty
  uint64_t rx_errors = 0;         // recvmmsg failures other than "nothing there"
};

// The single queue pair of a UDP device. Its sockets are made by
// BindUdpPort (cold path); RxBurst and TxBurst make system calls (the kernel
// is the NIC here) but allocate nothing.
class UdpQueue final : public QueuePair {
 public:
  static constexpr uint32_t kMaxBoundPorts = 64;
  static constexpr uint32_t kBatch = 64;  // datagrams per recvmmsg/sendmmsg

  static absl::StatusOr<std::unique_ptr<UdpQueue>> Create(const DeviceInfo& info,
                                                          uint32_t pool_buffers, int numa_node);
  UdpQueue(const UdpQueue&) = delete;
  UdpQueue& operator=(const UdpQueue&) = delete;
  ~UdpQueue() override;  // closes the sockets

  uint16_t RxBurst(absl::Span<Packet*> out) override;
  uint16_t TxBurst(absl::Span<Packet* const> pkts) override;
  bool AllocBulk(absl::Span<Packet*> out) override { return pool_->AllocBulk(out, &stats_); }
  void FreeBulk(absl::Span<Packet* const> pkts) override { pool_->FreeBulk(pkts); }
  uint32_t PoolAvailable() const override { return pool_->available(); }
  uint32_t PoolCapacity() const override { return pool_->capacity(); }
  QueueStats stats() const override { return stats_; }
  uint16_t id() const override { return 0; }

  // A non-blocking socket bound to (device IPv4, port). AlreadyExists when
  // this queue or another process (or device) holds it.
  absl::Status BindUdpPort(uint16_t port) override;
  void UnbindUdpPort(uint16_t port) override;

  const UdpCounters& counters() const { return counters_; }

 private:
  struct Bound {
    int fd = -1;
    uint16_t port = 0;
    uint8_t tos = 0;  // the socket's IP_TOS, as last set
  };
  // The cmsg space of one received datagram: its TOS byte (IP_RECVTOS).
  static constexpr size_t kControlBytes = CMSG_SPACE(sizeof(int));

  UdpQueue(const DeviceInfo& info, std::unique_ptr<PacketPool> pool);

  // Index in bound_ of `port`, or -1.
  int FindBound(uint16_t port) const;
  // Receives into the last `m` of bufs[0, *avail) from socket b; moves the
  // good ones to out[*got...] and keeps the rest in bufs. Returns false when
  // the socket had nothing more.
  bool ReceiveFrom(const Bound& b, void** bufs, uint32_t* avail, uint32_t m,
                   absl::Span<Packet*> out, uint32_t* got);
  // Sends tx_msgs_[0, frames.size()), which carry `frames`, on socket fd;
  // returns how many are done, and sets *full when the kernel's buffer was
  // full (EAGAIN, ENOBUFS). Frames it refused otherwise are counted and
  // done (taken, dropped).
  uint32_t Flush(int fd, absl::Span<Packet* const> frames, bool* full);

  const DeviceInfo& info_;
  const uint32_t max_frame_;
  std::unique_ptr<PacketPool> pool_;
  Bound bound_[kMaxBoundPorts];
  uint32_t num_bound_ = 0;
  uint32_t rx_next_ = 0;  // the socket RxBurst starts at, round-robin
  QueueStats stats_;
  UdpCounters counters_;

  // Scratch of the burst calls, made once here so the hot path allocates
  // nothing.
  mmsghdr rx_msgs_[kBatch];
  iovec rx_iov_[kBatch];
  sockaddr_in rx_from_[kBatch];
  alignas(cmsghdr) uint8_t rx_control_[kBatch][kControlBytes];
  mmsghdr tx_msgs_[kBatch];
  iovec tx_iov_[kBatch];
  sockaddr_in tx_to_[kBatch];
};

}  // namespace bypass::driver::udp

#endif  // BYPASS_DRIVER_UDP_UDP_QUEUE_H_
