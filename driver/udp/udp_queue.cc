#include "driver/udp/udp_queue.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/ip.h>
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
                                                           uint32_t pool_buffers, int numa_node) {
  PacketPool::Options po;
  po.max_frame = info.max_frame();
  po.buffers = pool_buffers;
  po.numa_node = numa_node;
  po.region_name = "bypass-udp";
  absl::StatusOr<std::unique_ptr<PacketPool>> pool = PacketPool::Create(po, "udp queue 0");
  if (!pool.ok()) return pool.status();
  return std::unique_ptr<UdpQueue>(new UdpQueue(info, *std::move(pool)));
}

UdpQueue::UdpQueue(const DeviceInfo& info, std::unique_ptr<PacketPool> pool)
    : info_(info), max_frame_(info.max_frame()), pool_(std::move(pool)) {
  std::memset(rx_msgs_, 0, sizeof(rx_msgs_));
  std::memset(tx_msgs_, 0, sizeof(tx_msgs_));
}

UdpQueue::~UdpQueue() {
  for (uint32_t i = 0; i < num_bound_; ++i) close(bound_[i].fd);
}

int UdpQueue::FindBound(uint16_t port) const {
  for (uint32_t i = 0; i < num_bound_; ++i) {
    if (bound_[i].port == port) return static_cast<int>(i);
  }
  return -1;
}

absl::Status UdpQueue::BindUdpPort(uint16_t port) {
  const std::string where = absl::StrCat(info_.ipv4.ToString(), ":", port);
  if (FindBound(port) >= 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("udp: ", where, " is already bound on this queue of ", info_.uri));
  }
  if (num_bound_ == kMaxBoundPorts) {
    return absl::ResourceExhaustedError(absl::StrCat("udp: cannot bind ", where, ": ", info_.uri,
                                                     " already has ", kMaxBoundPorts,
                                                     " UDP ports bound, its most"));
  }
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("udp: socket() for ", where, ": ", strerror(errno)));
  }
  RaiseBuffer(fd, SO_RCVBUFFORCE, SO_RCVBUF);
  RaiseBuffer(fd, SO_SNDBUFFORCE, SO_SNDBUF);
  // Frames larger than the path MTU (up to a 65000 MTU over a 1500-byte
  // link) are fragmented by the kernel rather than refused with EMSGSIZE.
  const int pmtu = IP_PMTUDISC_DONT;
  const int one = 1;
  if (setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu)) != 0 ||
      setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &one, sizeof(one)) != 0) {
    const int err = errno;
    close(fd);
    return absl::InternalError(
        absl::StrCat("udp: setting socket options for ", where, ": ", strerror(err)));
  }
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
  bound_[num_bound_++] = Bound{fd, port, 0};
  return absl::OkStatus();
}

void UdpQueue::UnbindUdpPort(uint16_t port) {
  const int i = FindBound(port);
  if (i < 0) return;
  close(bound_[i].fd);
  bound_[i] = bound_[--num_bound_];
  rx_next_ = 0;
}

bool UdpQueue::ReceiveFrom(const Bound& b, void** bufs, uint32_t* avail, uint32_t m,
                           absl::Span<Packet*> out, uint32_t* got) {
  const uint32_t base = *avail - m;
  // Datagrams land after the room for their headers; one longer than the
  // MTU allows does not fit and comes back truncated.
  const size_t room = max_frame_ - kUdpFrameHeaderBytes;
  for (uint32_t j = 0; j < m; ++j) {
    rx_iov_[j].iov_base = static_cast<uint8_t*>(bufs[base + j]) + kDataOffset + kUdpFrameHeaderBytes;
    rx_iov_[j].iov_len = room;
    msghdr& h = rx_msgs_[j].msg_hdr;
    h.msg_name = &rx_from_[j];
    h.msg_namelen = sizeof(rx_from_[j]);
    h.msg_iov = &rx_iov_[j];
    h.msg_iovlen = 1;
    h.msg_control = rx_control_[j];
    h.msg_controllen = kControlBytes;
    h.msg_flags = 0;
  }
  const int r = recvmmsg(b.fd, rx_msgs_, m, MSG_DONTWAIT, nullptr);
  if (r <= 0) {
    if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ++counters_.rx_errors;
    return false;
  }
  const uint32_t n = static_cast<uint32_t>(r);
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
    for (const cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(const_cast<msghdr*>(&h), const_cast<cmsghdr*>(c))) {
      if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS && c->cmsg_len >= CMSG_LEN(1)) {
        tos = *CMSG_DATA(c);
      }
    }
    Packet* p = pool_->InitPacket(buf);
    // The headers the datagram would have had on the wire, so that the
    // layers above parse it as they parse a NIC's frame. The kernel has
    // checked the checksums; the UDP one is left 0 (none).
    const Ipv4Address src{ntohl(rx_from_[j].sin_addr.s_addr)};
    const UdpFlow flow{MacFromIpv4(src),
                       info_.mac,
                       src,
                       info_.ipv4,
                       ntohs(rx_from_[j].sin_port),
                       b.port,
                       static_cast<uint8_t>(tos >> 2)};
    p->len = static_cast<uint32_t>(
        WriteUdpHeaders(flow, rx_msgs_[j].msg_len, {p->data, pool_->frame_capacity()}, UdpChecksumFill::kNone));
    p->ol_flags = kRxIpChecksumGood | kRxL4ChecksumGood;
    stats_.rx_bytes += p->len;
    out[(*got)++] = p;
  }
  // The buffers recvmmsg did not fill follow the kept ones.
  for (uint32_t j = n; j < m; ++j) bufs[base + keep + (j - n)] = bufs[base + j];
  *avail = base + keep + (m - n);
  return n == m;
}

uint16_t UdpQueue::RxBurst(absl::Span<Packet*> out) {
  out = out.first(std::min<size_t>(out.size(), UINT16_MAX));  // the count is 16 bits
  const uint32_t n_bound = num_bound_;
  if (n_bound == 0 || out.empty()) return 0;
  const uint32_t want = static_cast<uint32_t>(out.size());
  void* bufs[kBatch];
  uint32_t avail = 0;  // buffers taken from the pool for this call, in bufs
  uint32_t got = 0;
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

uint32_t UdpQueue::Flush(int fd, absl::Span<Packet* const> frames, bool* full) {
  const uint32_t n = static_cast<uint32_t>(frames.size());
  uint32_t done = 0;
  while (done < n) {
    const int r = sendmmsg(fd, tx_msgs_ + done, n - done, MSG_DONTWAIT);
    if (r > 0) {
      for (int k = 0; k < r; ++k) {
        ++stats_.tx_packets;
        stats_.tx_bytes += frames[done + k]->len;
      }
      done += static_cast<uint32_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 || errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) {
      *full = true;  // the kernel's send buffer: the caller keeps the rest
      break;
    }
    // Refused for a reason of its own (an unreachable network, EPERM from
    // a firewall): drop that one frame, so one bad destination cannot wedge
    // the queue.
    ++counters_.tx_send_errors;
    ++done;
  }
  return done;
}

uint16_t UdpQueue::TxBurst(absl::Span<Packet* const> pkts) {
  pkts = pkts.first(std::min<size_t>(pkts.size(), UINT16_MAX));  // the count is 16 bits
  size_t taken = 0;  // pkts[0, taken) are sent or dropped
  uint32_t staged = 0;  // tx_msgs_[0, staged) carry pkts[taken, taken + staged)
  int batch_socket = -1;
  bool full = false;
  const auto flush = [&] {
    if (staged == 0) return;
    taken += Flush(bound_[batch_socket].fd, pkts.subspan(taken, staged), &full);
    staged = 0;
  };
  for (size_t i = 0; i < pkts.size() && !full; ++i) {
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
      ++(at ? counters_.tx_unbound_port : counters_.tx_not_udp);
      ++taken;
      continue;
    }
    const uint8_t* ip = p.data + kEthHeader;
    const uint8_t tos = ip[offsetof(Ipv4Header, dscp_ecn)];
    if (staged > 0 && (s != batch_socket || staged == kBatch || tos != bound_[s].tos)) {
      flush();
      if (full) break;
    }
    if (tos != bound_[s].tos) {
      // The engine sets DSCP per endpoint: a socket's TOS changes rarely.
      const int v = tos;
      if (setsockopt(bound_[s].fd, IPPROTO_IP, IP_TOS, &v, sizeof(v)) == 0) bound_[s].tos = tos;
    }
    batch_socket = s;
    const uint8_t* udp = ip + at->ipv4_header_bytes;
    sockaddr_in& to = tx_to_[staged];
    to.sin_family = AF_INET;
    to.sin_port = htons(Load16(udp + offsetof(UdpHeader, dst_port)));
    to.sin_addr.s_addr = htonl(Load32(ip + offsetof(Ipv4Header, dst)));
    tx_iov_[staged].iov_base = const_cast<uint8_t*>(udp + sizeof(UdpHeader));
    tx_iov_[staged].iov_len = at->udp_bytes - sizeof(UdpHeader);
    msghdr& h = tx_msgs_[staged].msg_hdr;
    h.msg_name = &to;
    h.msg_namelen = sizeof(to);
    h.msg_iov = &tx_iov_[staged];
    h.msg_iovlen = 1;
    h.msg_control = nullptr;
    h.msg_controllen = 0;
    h.msg_flags = 0;
    ++staged;
  }
  if (!full) flush();
  stats_.tx_ring_full += pkts.size() - taken;
  FreeBulk(pkts.first(taken));
  return static_cast<uint16_t>(taken);
}

}  // namespace bypass::driver::udp
