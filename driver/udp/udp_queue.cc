#include "driver/udp/udp_queue.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/errqueue.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "driver/net_headers.h"
#include "driver/udp/udp_device.h"

namespace bypass::driver::udp {
namespace {

constexpr uint32_t kEthHeader = sizeof(EthernetHeader);
// Socket buffers deep enough that a burst of 64 KB datagrams is not dropped
// by the receiving kernel while its poller is busy elsewhere.
constexpr int kSocketBufferBytes = 4 << 20;

uint16_t Load16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
uint32_t Load32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}

// Raises one of a socket's buffers: beyond net.core.[rw]mem_max with the
// FORCE option where we may (root), else as far as the kernel allows.
void RaiseBuffer(int fd, int force_opt, int opt) {
  const int bytes = kSocketBufferBytes;
  if (setsockopt(fd, SOL_SOCKET, force_opt, &bytes, sizeof(bytes)) == 0) return;
  (void)setsockopt(fd, SOL_SOCKET, opt, &bytes, sizeof(bytes));
}

}  // namespace

absl::StatusOr<std::unique_ptr<UdpQueue>> UdpQueue::Create(const DeviceInfo& info,
                                                           uint32_t pool_buffers, int numa_node,
                                                           UdpOffloads offloads,
                                                           uint32_t buffer_frame) {
  PacketPool::Options po;
  // Larger buffers than frames (a composite's TX buffers): frames stay
  // bounded by the MTU (max_frame_) both ways.
  po.max_frame = std::max(info.max_frame(), buffer_frame);
  po.buffers = pool_buffers;
  po.numa_node = numa_node;
  po.region_name = "bypass-udp";
  absl::StatusOr<std::unique_ptr<PacketPool>> pool = PacketPool::Create(po, "udp queue 0");
  if (!pool.ok()) return pool.status();
  return std::unique_ptr<UdpQueue>(new UdpQueue(info, *std::move(pool), offloads));
}

UdpQueue::UdpQueue(const DeviceInfo& info, std::unique_ptr<PacketPool> pool, UdpOffloads offloads)
    : info_(info),
      max_frame_(info.max_frame()),
      gso_(offloads.gso),
      gro_(offloads.gro),
      pool_(std::move(pool)) {
  std::memset(rx_msgs_, 0, sizeof(rx_msgs_));
  std::memset(tx_msgs_, 0, sizeof(tx_msgs_));
  // Not touched here: pages are faulted in as GRO messages arrive.
  if (gro_) rx_bounce_.reset(new uint8_t[size_t{kRxBounce} * kRxBounceBytes]);
}

UdpQueue::~UdpQueue() {
  for (uint32_t i = 0; i < num_bound_; ++i) close(bound_[i].fd);
}

int UdpQueue::FindBound(uint16_t port, uint32_t group) const {
  for (uint32_t i = 0; i < num_bound_; ++i) {
    if (bound_[i].port == port && bound_[i].group == group) return static_cast<int>(i);
  }
  return -1;
}

bool UdpQueue::SetCommonOptions(int fd) {
  RaiseBuffer(fd, SO_RCVBUFFORCE, SO_RCVBUF);
  RaiseBuffer(fd, SO_SNDBUFFORCE, SO_SNDBUF);
  // Frames larger than the path MTU (up to a 65000 MTU over a 1500-byte
  // link) are fragmented by the kernel rather than refused with EMSGSIZE.
  // Multicast leaves through the device's address, not the default route's.
  const int pmtu = IP_PMTUDISC_DONT;
  const int one = 1;
  in_addr self{};
  self.s_addr = htonl(info_.ipv4.value);
  return setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu)) == 0 &&
         setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &one, sizeof(one)) == 0 &&
         setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &self, sizeof(self)) == 0;
}

absl::Status UdpQueue::BindUdpPort(uint16_t port) {
  const std::string where = absl::StrCat(info_.ipv4.ToString(), ":", port);
  if (FindBound(port) >= 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("udp: ", where, " is already bound on this queue of ", info_.uri));
  }
  const absl::StatusOr<int> made = NewSocket(where);
  if (!made.ok()) return made.status();
  const int fd = *made;
  const int one = 1;
  if (!SetCommonOptions(fd)) {
    const int err = errno;
    close(fd);
    return absl::InternalError(
        absl::StrCat("udp: setting socket options for ", where, ": ", strerror(err)));
  }
  // A kernel without UDP_SEGMENT (before 4.18) says so here; without
  // UDP_GRO (before 5.0), likewise. Either goes off for the whole queue.
  const int zero = 0;
  if (gso_ && setsockopt(fd, SOL_UDP, UDP_SEGMENT, &zero, sizeof(zero)) != 0) {
    gso_ = false;
    ++counters_.tx_gso_refused;
  }
  if (gro_ && setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof(one)) != 0) {
    // The sockets that have it would hand the direct path whole runs.
    for (uint32_t i = 0; i < num_bound_; ++i) {
      (void)setsockopt(bound_[i].fd, SOL_UDP, UDP_GRO, &zero, sizeof(zero));
    }
    gro_ = false;
    ++counters_.rx_gro_refused;
  }
  // ICMP errors for our datagrams come to the error queue (PeerAlive): an
  // unconnected socket hears of none without it.
  (void)setsockopt(fd, IPPROTO_IP, IP_RECVERR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(info_.ipv4.value);
  if (bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    close(fd);
    switch (err) {
      case EADDRINUSE:
        return absl::AlreadyExistsError(absl::StrCat(
            "udp: ", where, " is in use: another process (or another device of this one) holds "
            "it; give this endpoint another UDP port or stop the one holding it"));
      case EADDRNOTAVAIL:
        return absl::FailedPreconditionError(absl::StrCat(
            "udp: cannot bind ", where, ": ", info_.ipv4.ToString(),
            " is not an address of this host (network namespace)"));
      case EACCES:
        return absl::PermissionDeniedError(absl::StrCat(
            "udp: cannot bind ", where, ": ports below 1024 need root or CAP_NET_BIND_SERVICE"));
      default:
        return absl::InternalError(absl::StrCat("udp: bind ", where, ": ", strerror(err)));
    }
  }
  bound_[num_bound_++] = Bound{fd, port, 0, 0};
  return absl::OkStatus();
}

absl::Status UdpQueue::JoinGroup(Ipv4Address group, uint16_t port) {
  const std::string where = absl::StrCat(group.ToString(), ":", port);
  if (!group.IsMulticast()) {
    return absl::InvalidArgumentError(absl::StrCat("udp: ", where, " is not a multicast group"));
  }
  if (FindBound(port, group.value) >= 0) {
    return absl::AlreadyExistsError(absl::StrCat("udp: ", where, " is joined on this queue"));
  }
  const absl::StatusOr<int> made = NewSocket(where);
  if (!made.ok()) return made.status();
  const int fd = *made;
  const int one = 1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(group.value);
  ip_mreq m{};
  m.imr_multiaddr.s_addr = htonl(group.value);
  m.imr_interface.s_addr = htonl(info_.ipv4.value);
  // No GRO on a group's socket: its datagrams come one by one (the direct path).
  if (!SetCommonOptions(fd) || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0 ||
      setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof(m)) != 0) {
    const int err = errno;
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat("udp: joining ", where, " on ",
                                                      info_.ipv4.ToString(), ": ", strerror(err)));
  }
  bound_[num_bound_++] = Bound{fd, port, 0, group.value};
  return absl::OkStatus();
}

void UdpQueue::LeaveGroup(Ipv4Address group, uint16_t port) {
  CloseBound(FindBound(port, group.value));  // closing the socket leaves the group
}

void UdpQueue::CloseBound(int i) {
  if (i < 0) return;
  close(bound_[i].fd);
  bound_[i] = bound_[--num_bound_];
  rx_next_ = 0;
}

absl::StatusOr<int> UdpQueue::NewSocket(const std::string& where) {
  if (num_bound_ == kMaxBoundPorts) {
    return absl::ResourceExhaustedError(absl::StrCat("udp: cannot open a socket for ", where, ": ",
                                                     info_.uri, " already has ", kMaxBoundPorts,
                                                     " sockets (UDP ports and groups), its most"));
  }
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("udp: socket() for ", where, ": ", strerror(errno)));
  }
  return fd;
}

void UdpQueue::UnbindUdpPort(uint16_t port) { CloseBound(FindBound(port)); }

bool UdpQueue::ReceiveFrom(const Bound& b, void** bufs, uint32_t* avail, uint32_t m,
                           absl::Span<Packet*> out, uint32_t* got) {
  const uint32_t base = *avail - m;
  // Datagrams land after the room for their headers; one longer than the
  // MTU allows does not fit and comes back truncated.
  const size_t room = max_frame_ - kUdpFrameHeaderBytes;
  for (uint32_t j = 0; j < m; ++j) {
    rx_iov_[j].iov_base = static_cast<uint8_t*>(bufs[base + j]) + kDataOffset + kUdpFrameHeaderBytes;
    rx_iov_[j].iov_len = room;
  }
  const uint32_t n = Receive(b.fd, m);
  if (n == 0) return false;
  uint32_t keep = 0;  // buffers of dropped datagrams, reused
  for (uint32_t j = 0; j < n; ++j) {
    void* buf = bufs[base + j];
    const msghdr& h = rx_msgs_[j].msg_hdr;
    if ((h.msg_flags & MSG_TRUNC) != 0 || rx_from_[j].sin_family != AF_INET) {
      ++counters_.rx_truncated;
      ++stats_.rx_dropped;
      bufs[base + keep++] = buf;
      continue;
    }
    uint8_t tos = 0;
    uint32_t segment = 0;
    ReadControl(j, &tos, &segment);
    out[(*got)++] = Deliver(buf, rx_from_[j], b.port, b.group, tos, rx_msgs_[j].msg_len);
  }
  // The buffers recvmmsg did not fill follow the kept ones.
  for (uint32_t j = n; j < m; ++j) bufs[base + keep + (j - n)] = bufs[base + j];
  *avail = base + keep + (m - n);
  return n == m;
}

uint32_t UdpQueue::Receive(int fd, uint32_t m) {
  for (uint32_t j = 0; j < m; ++j) {
    msghdr& h = rx_msgs_[j].msg_hdr;
    h.msg_name = &rx_from_[j];
    h.msg_namelen = sizeof(rx_from_[j]);
    h.msg_iov = &rx_iov_[j];
    h.msg_iovlen = 1;
    h.msg_control = rx_control_[j];
    h.msg_controllen = kControlBytes;
    h.msg_flags = 0;
  }
  const int r = recvmmsg(fd, rx_msgs_, m, MSG_DONTWAIT, nullptr);
  if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
    // An ICMP error (IP_RECVERR) is reported once by the next receive, as
    // the error itself; its details wait in the error queue.
    if (errno == ECONNREFUSED || errno == EHOSTUNREACH || errno == ENETUNREACH) {
      DrainErrors(fd);
    } else {
      ++counters_.rx_errors;
    }
  }
  if (r > 0 && num_unreachable_ > 0) {
    for (int j = 0; j < r; ++j) Heard(rx_from_[j]);
  }
  return r > 0 ? static_cast<uint32_t>(r) : 0;
}

void UdpQueue::DrainErrors(int fd) {
  for (;;) {
    sockaddr_in to{};
    // The error and its offender, after the IP_TOS of the original (IP_RECVTOS).
    alignas(cmsghdr) uint8_t control[256];
    msghdr h{};
    h.msg_name = &to;
    h.msg_namelen = sizeof(to);
    h.msg_control = control;
    h.msg_controllen = sizeof(control);
    if (recvmsg(fd, &h, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) return;  // drained
    for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c)) {
      if (c->cmsg_level != IPPROTO_IP || c->cmsg_type != IP_RECVERR) continue;
      if ((h.msg_flags & MSG_CTRUNC) != 0 || c->cmsg_len < CMSG_LEN(sizeof(sock_extended_err))) {
        continue;
      }
      sock_extended_err ee;
      std::memcpy(&ee, CMSG_DATA(c), sizeof(ee));
      // ICMP destination unreachable (3), port unreachable (3): the host is
      // up and nothing is bound there. Other errors (host unreachable, a
      // full buffer) say nothing of the process.
      if (ee.ee_origin != SO_EE_ORIGIN_ICMP || ee.ee_type != 3 || ee.ee_code != 3) continue;
      if (h.msg_namelen < sizeof(to) || to.sin_family != AF_INET) continue;
      ++counters_.rx_port_unreachable;
      const uint64_t key = uint64_t{ntohl(to.sin_addr.s_addr)} << 16 | ntohs(to.sin_port);
      bool known = false;
      for (uint32_t i = 0; i < num_unreachable_ && !known; ++i) known = unreachable_[i] == key;
      if (known) continue;
      if (num_unreachable_ < kMaxUnreachable) {
        unreachable_[num_unreachable_++] = key;
      } else {
        unreachable_[next_unreachable_] = key;
        next_unreachable_ = (next_unreachable_ + 1) % kMaxUnreachable;
      }
    }
  }
}

void UdpQueue::Heard(const sockaddr_in& from) {
  const uint64_t key = uint64_t{ntohl(from.sin_addr.s_addr)} << 16 | ntohs(from.sin_port);
  for (uint32_t i = 0; i < num_unreachable_; ++i) {
    if (unreachable_[i] != key) continue;
    unreachable_[i] = unreachable_[--num_unreachable_];
    next_unreachable_ = 0;
    return;
  }
}

PeerLiveness UdpQueue::PeerAlive(Ipv4Address ip, uint16_t udp_port) {
  for (uint32_t i = 0; i < num_bound_; ++i) {
    if (bound_[i].group == 0) DrainErrors(bound_[i].fd);
  }
  const uint64_t key = uint64_t{ip.value} << 16 | udp_port;
  for (uint32_t i = 0; i < num_unreachable_; ++i) {
    if (unreachable_[i] == key) return PeerLiveness::kDead;
  }
  return PeerLiveness::kNoDeathSeen;
}

void UdpQueue::ReadControl(uint32_t j, uint8_t* tos, uint32_t* segment) {
  msghdr& h = rx_msgs_[j].msg_hdr;
  *tos = 0;
  *segment = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c)) {
    if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS && c->cmsg_len >= CMSG_LEN(1)) {
      *tos = *CMSG_DATA(c);
    } else if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO &&
               c->cmsg_len >= CMSG_LEN(sizeof(int))) {
      int size;
      std::memcpy(&size, CMSG_DATA(c), sizeof(size));
      if (size > 0) *segment = static_cast<uint32_t>(size);
    }
  }
}

Packet* UdpQueue::Deliver(void* buf, const sockaddr_in& from, uint16_t port, uint32_t group,
                          uint8_t tos, uint32_t payload_len) {
  Packet* p = pool_->InitPacket(buf);
  // The headers the datagram would have had on the wire, so that the
  // layers above parse it as they parse a NIC's frame. The kernel has
  // checked the checksums; the UDP one is left 0 (none).
  const Ipv4Address src{ntohl(from.sin_addr.s_addr)};
  const Ipv4Address dst = group != 0 ? Ipv4Address{group} : info_.ipv4;
  const UdpFlow flow{MacFromIpv4(src),     group != 0 ? MulticastMac(dst) : info_.mac,
                     src,                  dst,
                     ntohs(from.sin_port), port,
                     static_cast<uint8_t>(tos >> 2)};
  p->len = static_cast<uint32_t>(
      WriteUdpHeaders(flow, payload_len, {p->data, pool_->frame_capacity()}, UdpChecksumFill::kNone));
  p->ol_flags = kRxIpChecksumGood | kRxL4ChecksumGood;
  stats_.rx_bytes += p->len;
  return p;
}

bool UdpQueue::ReceiveGro(const Bound& b) {
  for (uint32_t j = 0; j < kRxBounce; ++j) {
    rx_iov_[j].iov_base = rx_bounce_.get() + size_t{j} * kRxBounceBytes;
    rx_iov_[j].iov_len = kRxBounceBytes;
  }
  const uint32_t n = Receive(b.fd, kRxBounce);
  if (n == 0) return false;
  for (uint32_t j = 0; j < n; ++j) {
    ReadControl(j, &rx_tos_[j], &rx_segment_[j]);  // segment 0: one datagram
    if (rx_segment_[j] != 0 && rx_segment_[j] < rx_msgs_[j].msg_len) ++counters_.rx_gro_messages;
  }
  rx_pending_ = RxPending{n, 0, 0, b.port, b.group};
  return true;
}

bool UdpQueue::SplitPending(void** bufs, uint32_t* avail, absl::Span<Packet*> out,
                            uint32_t* got) {
  // A datagram longer than the MTU allows has no room behind its headers.
  const uint32_t room = max_frame_ - kUdpFrameHeaderBytes;
  RxPending& q = rx_pending_;
  while (q.next < q.count) {
    const uint32_t j = q.next;
    const msghdr& h = rx_msgs_[j].msg_hdr;
    const uint32_t len = rx_msgs_[j].msg_len;
    if ((h.msg_flags & MSG_TRUNC) != 0 || rx_from_[j].sin_family != AF_INET) {
      ++counters_.rx_truncated;
      ++stats_.rx_dropped;
      ++q.next;
      q.offset = 0;
      continue;
    }
    const uint8_t* data = rx_bounce_.get() + size_t{j} * kRxBounceBytes;
    // Without the cmsg the message is one datagram (perhaps empty).
    const uint32_t segment = rx_segment_[j] != 0 ? rx_segment_[j] : std::max<uint32_t>(len, 1);
    do {
      const uint32_t n = std::min(segment, len - q.offset);
      if (n > room) {
        ++counters_.rx_truncated;
        ++stats_.rx_dropped;
        q.offset += n;
        continue;
      }
      if (*got == out.size()) return false;
      if (*avail == 0) {
        *avail = pool_->GetBurst(absl::MakeSpan(
            bufs, std::min<size_t>(kBatch, out.size() - *got)));
        if (*avail == 0) {
          ++counters_.rx_no_buffer;
          return false;  // the rest waits for buffers: nothing is dropped
        }
      }
      void* buf = bufs[--*avail];
      std::memcpy(static_cast<uint8_t*>(buf) + kDataOffset + kUdpFrameHeaderBytes,
                  data + q.offset, n);
      out[(*got)++] = Deliver(buf, rx_from_[j], q.port, q.group, rx_tos_[j], n);
      q.offset += n;
    } while (q.offset < len);
    ++q.next;
    q.offset = 0;
  }
  return true;
}

uint16_t UdpQueue::RxBurst(absl::Span<Packet*> out) {
  out = out.first(std::min<size_t>(out.size(), UINT16_MAX));  // the count is 16 bits
  if (out.empty()) return 0;
  const uint32_t n_bound = num_bound_;
  const uint32_t want = static_cast<uint32_t>(out.size());
  void* bufs[kBatch];
  uint32_t avail = 0;  // buffers taken from the pool for this call, in bufs
  uint32_t got = 0;
  if (gro_) {
    // What the last call left comes first: it was received first.
    bool more = SplitPending(bufs, &avail, out, &got);
    for (uint32_t k = 0; more && k < n_bound && got < want; ++k) {
      const Bound& b = bound_[(rx_next_ + k) % n_bound];
      while (got < want) {
        // Buffers are taken once something came (SplitPending takes them):
        // most polls of an idle socket find nothing, and a burst taken and
        // put back costs more instructions than the system call. Without
        // buffers what came waits in the bounce buffer for the next call.
        if (!ReceiveGro(b)) break;
        if (!SplitPending(bufs, &avail, out, &got)) {
          more = false;
          break;
        }
        if (rx_pending_.count < kRxBounce) break;  // the socket had no more
      }
    }
    if (avail > 0) pool_->PutBulk(absl::MakeConstSpan(bufs, avail));
    if (n_bound > 0) rx_next_ = (rx_next_ + 1) % n_bound;
    stats_.rx_packets += got;
    return static_cast<uint16_t>(got);
  }
  if (n_bound == 0) return 0;
  bool pool_empty = false;
  for (uint32_t k = 0; k < n_bound && got < want && !pool_empty; ++k) {
    const Bound& b = bound_[(rx_next_ + k) % n_bound];
    while (got < want) {
      const uint32_t need = std::min(kBatch, want - got);
      if (avail < need) avail += pool_->GetBurst(absl::MakeSpan(bufs + avail, need - avail));
      if (avail == 0) {
        ++counters_.rx_no_buffer;
        pool_empty = true;
        break;
      }
      if (!ReceiveFrom(b, bufs, &avail, std::min(avail, need), out, &got)) break;
    }
  }
  if (avail > 0) pool_->PutBulk(absl::MakeConstSpan(bufs, avail));
  // Start at the next socket next time, so that a busy port cannot starve
  // the others.
  rx_next_ = (rx_next_ + 1) % n_bound;
  stats_.rx_packets += got;
  return static_cast<uint16_t>(got);
}

uint32_t UdpQueue::Flush(int fd, uint32_t msgs, absl::Span<Packet* const> frames, bool* full,
                         bool* retry) {
  uint32_t sent = 0;  // messages done
  uint32_t done = 0;  // their frames
  while (sent < msgs) {
    const int r = sendmmsg(fd, tx_msgs_ + sent, msgs - sent, MSG_DONTWAIT);
    if (r > 0) {
      for (uint32_t m = sent; m < sent + static_cast<uint32_t>(r); ++m) {
        if (tx_msg_frames_[m] > 1) ++counters_.tx_gso_messages;
        for (uint32_t k = 0; k < tx_msg_frames_[m]; ++k) {
          ++stats_.tx_packets;
          stats_.tx_bytes += frames[done++]->len;
        }
      }
      sent += static_cast<uint32_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 || errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) {
      *full = true;  // the kernel's send buffer: the caller keeps the rest
      break;
    }
    const uint32_t n = tx_msg_frames_[sent];
    if (n > 1 && (errno == EIO || errno == EINVAL || errno == EMSGSIZE)) {
      // The kernel refused the segmentation, not the frames: EIO when the
      // route's device cannot checksum for it (GSO off for good), EINVAL
      // or EMSGSIZE when a segment exceeds the path's MTU (an mtu= above
      // the link's): segments that long are not merged again. Its frames
      // go again, one by one.
      ++counters_.tx_gso_refused;
      if (errno == EIO) {
        gso_ = false;
      } else {
        gso_max_segment_ = static_cast<uint32_t>(tx_msgs_[sent].msg_hdr.msg_iov[0].iov_len) - 1;
      }
      *retry = true;
      break;
    }
    // Refused for a reason of its own (an unreachable network, EPERM from
    // a firewall): drop that message's frames, so one bad destination
    // cannot wedge the queue.
    counters_.tx_send_errors += n;
    done += n;
    ++sent;
  }
  return done;
}

uint16_t UdpQueue::TxBurst(absl::Span<Packet* const> pkts) {
  pkts = pkts.first(std::min<size_t>(pkts.size(), UINT16_MAX));  // the count is 16 bits
  size_t taken = 0;     // pkts[0, taken) are sent or dropped
  uint32_t msgs = 0;    // tx_msgs_[0, msgs) carry pkts[taken, taken + staged)
  uint32_t staged = 0;
  uint32_t segment = 0;  // the payload length of the last message's frames
  uint32_t bytes = 0;    // its payload bytes
  bool closed = false;   // its last frame was shorter: no more join it
  int batch_socket = -1;
  bool full = false;
  bool retry = false;
  const auto flush = [&] {
    if (msgs == 0) return;
    taken += Flush(bound_[batch_socket].fd, msgs, pkts.subspan(taken, staged), &full, &retry);
    msgs = 0;
    staged = 0;
  };
  size_t i = 0;  // the next frame to stage
  while (!full) {
    if (i == pkts.size()) {
      flush();
      if (!retry) break;
      retry = false;  // GSO refused at the last flush: what it left goes again
      i = taken;
      continue;
    }
    const Packet& p = *pkts[i];
    // Trust nothing: the frame's headers say where its payload goes.
    const std::optional<UdpFrameLayout> at =
        p.len <= max_frame_ ? LocateUdpFrame({p.data, p.len}) : std::nullopt;
    int s = -1;
    if (at) s = FindBound(Load16(p.data + kEthHeader + at->ipv4_header_bytes));
    if (s < 0) {
      // Dropped; the frames staged before it go first, so order holds.
      flush();
      if (full) break;
      if (retry) {  // GSO refused: the frames not sent are staged again
        retry = false;
        i = taken;
        continue;
      }
      ++(at ? counters_.tx_unbound_port : counters_.tx_not_udp);
      ++taken;
      ++i;
      continue;
    }
    const uint8_t* ip = p.data + kEthHeader;
    const uint8_t* udp = ip + at->ipv4_header_bytes;
    const uint8_t tos = ip[offsetof(Ipv4Header, dscp_ecn)];
    const uint16_t dst_port = htons(Load16(udp + offsetof(UdpHeader, dst_port)));
    const uint32_t dst_ip = htonl(Load32(ip + offsetof(Ipv4Header, dst)));
    const uint32_t len = static_cast<uint32_t>(at->udp_bytes - sizeof(UdpHeader));
    // It joins the last message as one more segment when nothing about
    // the datagram the kernel cuts for it would differ, but that it is
    // the last (a shorter one).
    const bool join = gso_ && msgs > 0 && s == batch_socket && tos == bound_[s].tos && !closed &&
                      len > 0 && len <= segment && segment <= gso_max_segment_ &&
                      tx_to_[msgs - 1].sin_port == dst_port &&
                      tx_to_[msgs - 1].sin_addr.s_addr == dst_ip &&
                      tx_msg_frames_[msgs - 1] < kMaxSegments && bytes + len <= kMaxGsoBytes &&
                      staged < kMaxStagedFrames;
    if (!join && msgs > 0 &&
        (s != batch_socket || msgs == kBatch || staged == kMaxStagedFrames ||
         tos != bound_[s].tos)) {
      flush();
      if (full) break;
      if (retry) {
        retry = false;
        i = taken;
        continue;
      }
    }
    if (tos != bound_[s].tos) {
      // The engine sets DSCP per endpoint: a socket's TOS changes rarely.
      const int v = tos;
      if (setsockopt(bound_[s].fd, IPPROTO_IP, IP_TOS, &v, sizeof(v)) == 0) bound_[s].tos = tos;
    }
    batch_socket = s;
    iovec& v = tx_iov_[staged];
    v.iov_base = const_cast<uint8_t*>(udp + sizeof(UdpHeader));
    v.iov_len = len;
    if (join) {
      const uint32_t m = msgs - 1;
      msghdr& h = tx_msgs_[m].msg_hdr;
      ++h.msg_iovlen;
      if (++tx_msg_frames_[m] == 2) {
        // A second frame makes it a GSO message: every segment but the
        // last is `segment` bytes.
        h.msg_control = tx_control_[m];
        h.msg_controllen = kTxControlBytes;
        cmsghdr* c = CMSG_FIRSTHDR(&h);
        c->cmsg_level = SOL_UDP;
        c->cmsg_type = UDP_SEGMENT;
        c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        const uint16_t gso_size = static_cast<uint16_t>(segment);
        std::memcpy(CMSG_DATA(c), &gso_size, sizeof(gso_size));
      }
      bytes += len;
      closed = len < segment;
    } else {
      sockaddr_in& to = tx_to_[msgs];
      to.sin_family = AF_INET;
      to.sin_port = dst_port;
      to.sin_addr.s_addr = dst_ip;
      msghdr& h = tx_msgs_[msgs].msg_hdr;
      h.msg_name = &to;
      h.msg_namelen = sizeof(to);
      h.msg_iov = &v;
      h.msg_iovlen = 1;
      h.msg_control = nullptr;
      h.msg_controllen = 0;
      h.msg_flags = 0;
      tx_msg_frames_[msgs] = 1;
      ++msgs;
      segment = len;
      bytes = len;
      closed = false;
    }
    ++staged;
    ++i;
  }
  stats_.tx_ring_full += pkts.size() - taken;
  FreeBulk(pkts.first(taken));
  return static_cast<uint16_t>(taken);
}

void UdpQueue::AppendCounters(NamedCounters* out) const {
  const UdpCounters& c = counters_;
  AppendNamed(out, "", {{"tx_not_udp", c.tx_not_udp},
                        {"tx_unbound_port", c.tx_unbound_port},
                        {"tx_send_errors", c.tx_send_errors},
                        {"rx_truncated", c.rx_truncated},
                        {"rx_no_buffer", c.rx_no_buffer},
                        {"rx_errors", c.rx_errors},
                        {"rx_port_unreachable", c.rx_port_unreachable},
                        {"tx_gso_refused", c.tx_gso_refused},
                        {"rx_gro_refused", c.rx_gro_refused},
                        {"tx_gso_messages", c.tx_gso_messages},
                        {"rx_gro_messages", c.rx_gro_messages}});
}

}  // namespace bypass::driver::udp
