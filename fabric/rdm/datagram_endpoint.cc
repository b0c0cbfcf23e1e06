// DatagramEndpoint: unreliable datagrams through the Port's demultiplexer
// and the Completions stage.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "driver/net_headers.h"
#include "fabric/rdm/completions.h"
#include "fabric/rdm/inbox.h"
#include "fabric/rdm/peer_table.h"
#include "fabric/rdm/rdm.h"
#include "fabric/rdm/stats_registry.h"

namespace bypass::rdm {

// The state behind a DatagramEndpoint: its inbox, its peers, the posted
// receives (a FIFO ring) and its completions.
class DatagramPath {
 public:
  DatagramPath(const DatagramConfig& c, const driver::DeviceInfo& i)
      : config(c),
        info(i),
        inbox(Endpoint::kInboxSize),
        peers(c.max_peers),
        completions(completion_counters, peers, c.max_posted_recvs + c.max_unread_sends,
                    /*extra_errors=*/0),
        posted(new RecvRequest[c.max_posted_recvs]) {}

  DatagramConfig config;
  const driver::DeviceInfo info;
  Inbox inbox;
  bool attached = false;
  PeerTable peers;
  // What Completions counts as it would for a reliable endpoint; this
  // endpoint reports its own DatagramCounters.
  Counters completion_counters;
  Completions completions;
  DatagramCounters counters;
  std::unique_ptr<RecvRequest[]> posted;  // ring of max_posted_recvs
  uint32_t posted_head = 0;
  uint32_t posted_count = 0;
  // The groups joined (Port::JoinGroup), left when the endpoint goes.
  struct Group {
    driver::Ipv4Address ip;
    uint16_t udp_port = 0;
  };
  std::vector<Group> groups;

  bool Joined(driver::Ipv4Address ip, uint16_t udp_port) const {
    for (const Group& g : groups) {
      if (g.ip == ip && g.udp_port == udp_port) return true;
    }
    return false;
  }

  RecvRequest& posted_at(uint32_t i) {
    return posted[(posted_head + i) % config.max_posted_recvs];
  }
  // One datagram into the oldest posted receive, or dropped.
  void Deliver(const driver::ParsedUdpFrame& f, uint64_t extra_flags);
};

void DatagramPath::Deliver(const driver::ParsedUdpFrame& f, uint64_t extra_flags) {
  if (posted_count == 0) {
    ++counters.no_receive_dropped;  // datagram semantics: no receive, no delivery
    return;
  }
  const RecvRequest r = posted_at(0);
  posted_head = (posted_head + 1) % config.max_posted_recvs;
  --posted_count;
  const size_t n = std::min(r.len, f.payload.size());
  if (n > 0) std::memcpy(r.buf, f.payload.data(), n);
  ++counters.received;
  if (f.payload.size() > r.len) ++counters.truncated;
  const uint32_t pi = peers.Find(f.flow.src_ip.value, f.flow.src_port);
  MessageInfo m;
  m.total = f.payload.size();
  completions.Received(pi == kNone ? PeerId{} : peers.Id(pi), r, m, extra_flags);
}

absl::StatusOr<std::unique_ptr<DatagramEndpoint>> DatagramEndpoint::Create(
    Port& port, const DatagramConfig& config) {
  if (absl::Status s = ValidateConfig(config); !s.ok()) return s;
  if (port.info().ipv4.value == 0) {
    return absl::FailedPreconditionError(
        "datagram endpoint: the device has no IPv4 address; open it with ip=A.B.C.D");
  }
  auto path = std::make_unique<DatagramPath>(config, port.info());
  if (absl::Status s = port.Attach(config.udp_port, &path->inbox); !s.ok()) return s;
  path->attached = true;
  return std::unique_ptr<DatagramEndpoint>(new DatagramEndpoint(port, std::move(path)));
}

DatagramEndpoint::DatagramEndpoint(Port& port, std::unique_ptr<DatagramPath> path)
    : port_(port), path_(std::move(path)), stats_(RegisterEndpoint()) {
  PublishStats();
}

DatagramEndpoint::~DatagramEndpoint() {
  UnregisterEndpoint(stats_->id());
  for (const DatagramPath::Group& g : path_->groups) port_.LeaveGroup(g.ip, g.udp_port, &path_->inbox);
  if (path_->attached) port_.Detach(path_->config.udp_port);  // frees what its inbox holds
}

Address DatagramEndpoint::address() const {
  return Address{path_->info.mac, path_->info.ipv4, path_->config.udp_port, 0};
}

uint32_t DatagramEndpoint::max_payload() const {
  const uint32_t headers = sizeof(driver::Ipv4Header) + sizeof(driver::UdpHeader);
  return path_->info.mtu > headers ? path_->info.mtu - headers : 0;
}

absl::StatusOr<PeerId> DatagramEndpoint::InsertPeer(const Address& addr) {
  if (addr.ip.value == 0 || addr.udp_port == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("InsertPeer(", addr.ToString(), "): the address needs an IPv4 and a port"));
  }
  PeerTable& peers = path_->peers;
  uint32_t pi = peers.Find(addr.ip.value, addr.udp_port);
  if (pi == kNone) pi = peers.Add(addr);
  if (pi == kNone) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "InsertPeer(", addr.ToString(), "): the peer table is full (max_peers=",
        path_->config.max_peers, "); create the endpoint with a larger max_peers"));
  }
  peers.address(pi).mac = addr.mac;
  return peers.Id(pi);
}

absl::Status DatagramEndpoint::RemovePeer(PeerId id) {
  if (!path_->peers.Valid(id)) {
    return absl::NotFoundError(absl::StrCat(
        "RemovePeer(", id.value, "): no such peer (never inserted, or already removed)"));
  }
  path_->peers.Remove(id.slot());
  return absl::OkStatus();
}

std::optional<Address> DatagramEndpoint::PeerAddress(PeerId id) const {
  if (!path_->peers.Valid(id)) return std::nullopt;
  return path_->peers.address(id.slot());
}

absl::Status DatagramEndpoint::SetDscp(uint8_t dscp) {
  if (dscp > 63) {
    return absl::InvalidArgumentError(
        absl::StrCat("SetDscp(", dscp, "): a DSCP is 6 bits; use 0..63 (e.g. 46 for EF)"));
  }
  path_->config.dscp = dscp;
  return absl::OkStatus();
}

absl::Status DatagramEndpoint::JoinGroup(driver::Ipv4Address group, uint16_t udp_port) {
  if (udp_port == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("JoinGroup(", group.ToString(), ":0): a group needs its UDP port"));
  }
  if (absl::Status s = port_.JoinGroup(group, udp_port, &path_->inbox); !s.ok()) return s;
  path_->groups.push_back({group, udp_port});
  return absl::OkStatus();
}

absl::Status DatagramEndpoint::LeaveGroup(driver::Ipv4Address group, uint16_t udp_port) {
  std::vector<DatagramPath::Group>& gs = path_->groups;
  for (size_t i = 0; i < gs.size(); ++i) {
    if (!(gs[i].ip == group) || gs[i].udp_port != udp_port) continue;
    port_.LeaveGroup(group, udp_port, &path_->inbox);
    gs.erase(gs.begin() + static_cast<ptrdiff_t>(i));
    return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat("LeaveGroup(", group.ToString(), ":", udp_port,
                                          "): this endpoint has not joined it"));
}

Result DatagramEndpoint::Send(const SendRequest& r) {
  const iovec one{const_cast<void*>(r.buf), r.len};
  if (r.len > 0 && r.buf == nullptr) return Result::kInvalid;
  return SendV(r, {&one, r.len > 0 ? 1u : 0u});
}

Result DatagramEndpoint::SendV(const SendRequest& r, absl::Span<const iovec> iov) {
  DatagramPath& p = *path_;
  if (!p.peers.Valid(r.dest) || (r.flags & ~kSendInject) != 0) return Result::kInvalid;
  size_t len = 0;
  for (const iovec& v : iov) {
    if (v.iov_len > 0 && v.iov_base == nullptr) return Result::kInvalid;
    if (v.iov_len > max_payload() - len) return Result::kTooLong;  // also no overflow
    len += v.iov_len;
  }
  const bool report = (r.flags & kSendInject) == 0;
  if (report && !p.completions.Reserve()) return Result::kAgain;
  driver::QueuePair& qp = port_.qp();
  driver::Packet* pkt = nullptr;
  if (!qp.AllocBulk({&pkt, 1})) {
    ++p.counters.tx_no_buffer;
    if (report) p.completions.Unreserve();
    return Result::kAgain;
  }
  if (driver::kUdpFrameHeaderBytes + len > pkt->capacity) {  // a buffer smaller than the MTU
    qp.FreeBulk({&pkt, 1});
    if (report) p.completions.Unreserve();
    return Result::kTooLong;
  }
  const Address& to = p.peers.address(r.dest.slot());
  const bool group = to.ip.IsMulticast();
  const driver::MacAddress dst_mac = group                          ? driver::MulticastMac(to.ip)
                                     : to.mac == driver::MacAddress{} ? driver::kBroadcastMac
                                                                      : to.mac;
  const driver::UdpFlow flow{p.info.mac,
                             dst_mac,
                             p.info.ipv4,
                             to.ip,
                             p.config.udp_port,
                             to.udp_port,
                             p.config.dscp};
  uint8_t* at = pkt->data + driver::kUdpFrameHeaderBytes;
  for (const iovec& v : iov) {
    if (v.iov_len > 0) std::memcpy(at, v.iov_base, v.iov_len);
    at += v.iov_len;
  }
  // UDP checksums on: receivers may be ordinary sockets.
  pkt->len = static_cast<uint32_t>(driver::WriteUdpHeaders(
      flow, len, {pkt->data, pkt->capacity}, driver::UdpChecksumFill::kCompute));
  const bool built = pkt->len != 0;
  // This port's members get the datagram once the device took it (unless
  // the device loops it back itself); TxBurst takes the frame, so they get
  // it from a copy kept until then.
  driver::Packet* loop = nullptr;
  if (built && group && port_.group_members() > 0 && !qp.LoopsMulticast() &&
      qp.AllocBulk({&loop, 1})) {
    std::memcpy(loop->data, pkt->data, pkt->len);
    loop->len = pkt->len;
  }
  if (!built || qp.TxBurst({&pkt, 1}) != 1) {
    qp.FreeBulk({&pkt, 1});
    if (loop != nullptr) qp.FreeBulk({&loop, 1});
    if (report) p.completions.Unreserve();
    if (!built) return Result::kTooLong;
    ++p.counters.tx_ring_full;
    return Result::kAgain;
  }
  if (loop != nullptr) {
    port_.LoopToGroup(*loop);
    qp.FreeBulk({&loop, 1});
  }
  ++p.counters.sent;
  if (report) {
    Completion c;
    c.context = r.context;
    c.flags = kCompSend | kCompMsg;
    c.len = len;
    c.source = r.dest;
    p.completions.Push(c);
  }
  return Result::kOk;
}

Result DatagramEndpoint::PostRecv(const RecvRequest& r) {
  DatagramPath& p = *path_;
  if (r.flags != 0 || r.tagged || (r.len > 0 && r.buf == nullptr)) return Result::kInvalid;
  if (p.posted_count == p.config.max_posted_recvs) return Result::kAgain;
  if (!p.completions.Reserve()) return Result::kAgain;
  p.posted_at(p.posted_count) = r;
  ++p.posted_count;
  return Result::kOk;
}

bool DatagramEndpoint::CancelRecv(void* context) {
  DatagramPath& p = *path_;
  for (uint32_t i = 0; i < p.posted_count; ++i) {
    if (p.posted_at(i).context != context) continue;
    const RecvRequest r = p.posted_at(i);
    for (uint32_t k = i; k + 1 < p.posted_count; ++k) p.posted_at(k) = p.posted_at(k + 1);
    --p.posted_count;
    p.completions.ReceiveFailed(PeerId{}, r, MessageInfo{}, 0, 0, ECANCELED, "receive canceled",
                                /*failure=*/false);
    return true;
  }
  return false;
}

uint32_t DatagramEndpoint::RecvSlotsFree() const {
  return path_->config.max_posted_recvs - path_->posted_count;
}

size_t DatagramEndpoint::Progress() {
  DatagramPath& p = *path_;
  port_.Poll(p.config.rx_burst);
  driver::Packet* pkts[Port::kMaxBurst];
  const uint32_t n = p.inbox.Pop({pkts, std::min<size_t>(p.config.rx_burst, Port::kMaxBurst)});
  for (uint32_t i = 0; i < n; ++i) {
    const std::optional<driver::ParsedUdpFrame> f =
        driver::ParseUdpFrame({pkts[i]->data, pkts[i]->len});
    if (f && f->flow.dst_port == p.config.udp_port && f->flow.dst_ip == p.info.ipv4) {
      p.Deliver(*f, 0);
    } else if (f && f->flow.dst_ip.IsMulticast() && p.Joined(f->flow.dst_ip, f->flow.dst_port)) {
      p.Deliver(*f, kCompMulticast);
    } else {
      ++p.counters.not_for_us_dropped;
    }
  }
  if (n > 0) port_.qp().FreeBulk({pkts, n});
  if (stats_->wanted()) PublishStats();
  return n;
}

uint32_t DatagramEndpoint::stats_id() const { return stats_->id(); }

void DatagramEndpoint::PublishStats() {
  stats_->Publish([this](EndpointSnapshot& s) {
    const DatagramPath& p = *path_;
    s.datagram = true;
    s.address = address();
    s.port_id = port_.id();
    s.port = port_.counters();
    port_.SnapshotQueue(&s.device);
    s.datagram_counters = p.counters;
    s.datagram_peers.clear();
    for (uint32_t i = 0; i < p.peers.size(); ++i) {
      if (p.peers.in_use(i)) s.datagram_peers.push_back(p.peers.address(i));
    }
  });
}

size_t DatagramEndpoint::PollCompletions(absl::Span<Completion> out) {
  return path_->completions.Poll(out);
}

size_t DatagramEndpoint::PollErrors(absl::Span<ErrorCompletion> out) {
  return path_->completions.PollErrors(out);
}

const DatagramCounters& DatagramEndpoint::counters() const { return path_->counters; }

}  // namespace bypass::rdm
