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
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "driver/device.h"
#include "driver/packet.h"
#include "driver/packet_pool.h"

namespace bypass::driver::udp {

// Buffers are laid out as driver/packet_pool.h says (kDataOffset). A
// datagram is received at frame + 42, where its synthesized headers end
// (without GRO), or copied there from a bounce buffer (with it).

// Drops beyond QueueStats, plain integers of the owner thread.
struct UdpCounters {
  uint64_t tx_not_udp = 0;        // not an unfragmented Ethernet/IPv4/UDP frame, or oversize
  uint64_t tx_unbound_port = 0;   // its UDP source port is not bound on this queue
  uint64_t tx_send_errors = 0;    // sendmmsg refused it for a reason other than a full buffer
  uint64_t rx_truncated = 0;      // a datagram longer than the MTU allows (also rx_dropped)
  uint64_t rx_no_buffer = 0;      // RxBurst calls that found the pool empty
  uint64_t rx_errors = 0;         // recvmmsg failures other than "nothing there" and ICMP
  // ICMP port unreachable for a destination of ours (IP_RECVERR): its
  // process is gone (PeerAlive says kDead until it is heard from again).
  uint64_t rx_port_unreachable = 0;
  // 1 once the kernel refused UDP_SEGMENT (EINVAL/EIO) and TX went back to
  // one datagram per frame for good; likewise UDP_GRO for RX.
  uint64_t tx_gso_refused = 0;
  uint64_t rx_gro_refused = 0;
  uint64_t tx_gso_messages = 0;   // messages of several segments sent (UDP_SEGMENT)
  uint64_t rx_gro_messages = 0;   // messages of several datagrams received (UDP_GRO)
};

// Whether the queue uses UDP generic segmentation (TX) and receive offload
// (RX): on unless the URI says gso=0.
struct UdpOffloads {
  bool gso = true;
  bool gro = true;
};

// The single queue pair of a UDP device. Its sockets are made by
// BindUdpPort (cold path); RxBurst and TxBurst make system calls (the kernel
// is the NIC here) but allocate nothing.
//
// With GSO, TxBurst sends a run of consecutive frames of one socket to one
// destination with one TOS and one payload length (the last may be shorter)
// as one message: their payloads gathered (no copy) under a UDP_SEGMENT
// cmsg, which the kernel cuts into the same datagrams, so that a 64 KiB
// message is a trip or two through the kernel instead of 45. With GRO the
// kernel hands RxBurst such runs whole (into bounce buffers), and RxBurst
// splits them back into frames.
class UdpQueue final : public QueuePair {
 public:
  static constexpr uint32_t kMaxBoundPorts = 64;
  static constexpr uint32_t kBatch = 64;  // datagrams (messages) per recvmmsg/sendmmsg
  // One GSO message: the kernel's segment limit (UDP_MAX_SEGMENTS is 64
  // before Linux 6.9), and payload bytes that fit one IPv4 datagram.
  static constexpr uint32_t kMaxSegments = 64;
  static constexpr uint32_t kMaxGsoBytes = 65000;
  // Frames one TxBurst stages before it sends (their iovecs).
  static constexpr uint32_t kMaxStagedFrames = 1024;
  // RX bounce buffers: messages per recvmmsg with GRO, each up to 64 KiB.
  static constexpr uint32_t kRxBounce = 16;
  static constexpr uint32_t kRxBounceBytes = 65536;

  static absl::StatusOr<std::unique_ptr<UdpQueue>> Create(const DeviceInfo& info,
                                                          uint32_t pool_buffers, int numa_node,
                                                          UdpOffloads offloads = {},
                                                          uint32_t buffer_frame = 0);
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
  void AppendCounters(NamedCounters* out) const override;
  uint16_t id() const override { return 0; }

  // A non-blocking socket bound to (device IPv4, port). AlreadyExists when
  // this queue or another process (or device) holds it.
  absl::Status BindUdpPort(uint16_t port) override;
  void UnbindUdpPort(uint16_t port) override;
  // A socket bound to group:port (SO_REUSEADDR) that joined the group on
  // the device's address; its datagrams arrive as frames to the group.
  // Sends to a group leave through the device's address
  // (IP_MULTICAST_IF), and the kernel loops them back to this host's
  // members, this queue's included (LoopsMulticast).
  absl::Status JoinGroup(Ipv4Address group, uint16_t port) override;
  void LeaveGroup(Ipv4Address group, uint16_t port) override;
  bool LoopsMulticast() const override { return true; }
  // kDead when the host of ip:udp_port answered a datagram of ours with
  // ICMP port unreachable (read from the endpoint sockets' error queues,
  // IP_RECVERR) and nothing came from ip:udp_port since; kNoDeathSeen
  // otherwise: a process that exits while its host is up is reported, a
  // host that crashes or a path that breaks is not.
  PeerLiveness PeerAlive(Ipv4Address ip, uint16_t udp_port) override;

  const UdpCounters& counters() const { return counters_; }
  // Whether GSO and GRO are in use (not off by the URI, not refused).
  bool gso() const { return gso_; }
  bool gro() const { return gro_; }

 private:
  struct Bound {
    int fd = -1;
    uint16_t port = 0;
    uint8_t tos = 0;  // the socket's IP_TOS, as last set
    uint32_t group = 0;  // a group's socket (JoinGroup): its address; 0: an endpoint's
  };
  // The cmsg space of one received datagram or GRO message: its TOS byte
  // (IP_RECVTOS) and its segment size (UDP_GRO, an int).
  static constexpr size_t kControlBytes = CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(int));
  // The cmsg of one GSO message: its segment size (UDP_SEGMENT, a u16).
  static constexpr size_t kTxControlBytes = CMSG_SPACE(sizeof(uint16_t));

  // The GRO messages of the last recvmmsg, split into frames from message
  // `next` at byte `offset` on; RxBurst finishes them before it receives
  // more (a short pool or a short `out` leaves the rest here).
  struct RxPending {
    uint32_t count = 0;   // messages received; none pending when next == count
    uint32_t next = 0;
    uint32_t offset = 0;
    uint16_t port = 0;    // the socket's port: their destination
    uint32_t group = 0;   // the socket's group, or 0: the device's address
  };

  UdpQueue(const DeviceInfo& info, std::unique_ptr<PacketPool> pool, UdpOffloads offloads);

  // Destinations whose host said "port unreachable" since they were last
  // heard from (ip << 16 | port), at most kMaxUnreachable, oldest replaced.
  static constexpr uint32_t kMaxUnreachable = 64;
  // Reads the error queue of socket fd (IP_RECVERR), noting destinations
  // whose port is unreachable.
  void DrainErrors(int fd);
  // A datagram came from `from`: it is not gone (called only while some
  // destination is noted unreachable).
  void Heard(const sockaddr_in& from);

  // Index in bound_ of the endpoint socket of `port` (group 0), or of the
  // socket of group:port; -1 when there is none.
  int FindBound(uint16_t port, uint32_t group = 0) const;
  // The socket options every socket of the queue has; false (errno set)
  // when one is refused.
  bool SetCommonOptions(int fd);
  // A new non-blocking socket for `where` (a message's words), or
  // ResourceExhausted when the queue has kMaxBoundPorts sockets.
  absl::StatusOr<int> NewSocket(const std::string& where);
  // Closes bound_[i] (nothing for -1) and takes it out.
  void CloseBound(int i);
  // Receives into the last `m` of bufs[0, *avail) from socket b; moves the
  // good ones to out[*got...] and keeps the rest in bufs. Returns false when
  // the socket had nothing more.
  bool ReceiveFrom(const Bound& b, void** bufs, uint32_t* avail, uint32_t m,
                   absl::Span<Packet*> out, uint32_t* got);
  // The GRO path: receives up to kRxBounce messages from socket b into the
  // bounce buffers (only when none are pending). False when it had nothing.
  bool ReceiveGro(const Bound& b);
  // recvmmsg of up to m datagrams from fd into rx_iov_[0, m) (set by the
  // caller), with their addresses and control messages; how many came (0
  // on none; errors other than "nothing there" are counted).
  uint32_t Receive(int fd, uint32_t m);
  // Message j's TOS byte and GRO segment size (0: one datagram).
  void ReadControl(uint32_t j, uint8_t* tos, uint32_t* segment);
  // Splits rx_pending_ into frames out[*got...], taking pool buffers from
  // bufs[0, *avail) and the pool. False when it stopped short (out full or
  // the pool empty); what is left stays pending.
  bool SplitPending(void** bufs, uint32_t* avail, absl::Span<Packet*> out, uint32_t* got);
  // A received frame in buffer `buf`: headers for `payload_len` bytes
  // already at its payload's place, from `from` to `port`.
  Packet* Deliver(void* buf, const sockaddr_in& from, uint16_t port, uint32_t group, uint8_t tos,
                  uint32_t payload_len);
  // Sends tx_msgs_[0, msgs), which carry `frames` (tx_msg_frames_[m] each,
  // in order), on socket fd; returns how many frames are done, and sets
  // *full when the kernel's buffer was full (EAGAIN, ENOBUFS). A message
  // it refused otherwise has its frames counted and done (taken, dropped),
  // but for a GSO message refused with EINVAL/EIO: GSO goes off for good
  // and Flush returns before it (*retry), so that its frames go again one
  // by one.
  uint32_t Flush(int fd, uint32_t msgs, absl::Span<Packet* const> frames, bool* full,
                 bool* retry);

  const DeviceInfo& info_;
  const uint32_t max_frame_;
  bool gso_;
  bool gro_;
  // Segments longer than this are not merged: the kernel refused one of
  // this length (beyond the path's MTU).
  uint32_t gso_max_segment_ = kMaxGsoBytes;
  std::unique_ptr<PacketPool> pool_;
  Bound bound_[kMaxBoundPorts];
  uint32_t num_bound_ = 0;
  uint32_t rx_next_ = 0;  // the socket RxBurst starts at, round-robin
  QueueStats stats_;
  UdpCounters counters_;
  uint64_t unreachable_[kMaxUnreachable] = {};
  uint32_t num_unreachable_ = 0;
  uint32_t next_unreachable_ = 0;  // the slot replaced when all are taken

  // Scratch of the burst calls, made once here so the hot path allocates
  // nothing.
  mmsghdr rx_msgs_[kBatch];
  iovec rx_iov_[kBatch];
  sockaddr_in rx_from_[kBatch];
  alignas(cmsghdr) uint8_t rx_control_[kBatch][kControlBytes];
  RxPending rx_pending_;
  std::unique_ptr<uint8_t[]> rx_bounce_;  // kRxBounce * kRxBounceBytes, with GRO
  uint32_t rx_segment_[kRxBounce];        // each GRO message's segment size
  uint8_t rx_tos_[kRxBounce];
  mmsghdr tx_msgs_[kBatch];
  uint32_t tx_msg_frames_[kBatch];
  iovec tx_iov_[kMaxStagedFrames];
  sockaddr_in tx_to_[kBatch];
  alignas(cmsghdr) uint8_t tx_control_[kBatch][kTxControlBytes];
};

}  // namespace bypass::driver::udp

#endif  // BYPASS_DRIVER_UDP_UDP_QUEUE_H_
