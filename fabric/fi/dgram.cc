// FI_EP_DGRAM: plain UDP datagrams straight onto the device queue, with no
// engine in between (no reliability, no order, no flow control). Each
// endpoint owns a UDP port on its domain's port demultiplexer; a send
// builds one Ethernet/IPv4/UDP frame and completes once the device took it;
// a receive takes the next datagram for the port. The payload is copied
// into the frame and out of it (one copy each way).
#include "fabric/fi/dgram.h"

#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "driver/clock.h"
#include "driver/net_headers.h"
#include "fabric/fi/av.h"
#include "fabric/fi/cntr.h"
#include "fabric/fi/cq.h"
#include "fabric/fi/domain.h"
#include "fabric/fi/ep.h"
#include "fabric/fi/services.h"
#include "fabric/rdm/rdm.h"

namespace bypass::fi {
namespace {

constexpr uint32_t kRxBurst = 32;

void Complete(Cq* cq, void* ctx, uint64_t flags, size_t len, void* buf, fi_addr_t src) {
  CqEntry e{};
  e.e.op_context = ctx;
  e.e.flags = flags;
  e.e.len = len;
  e.e.buf = buf;
  e.src = src;
  cq->entries.push_back(e);
}

// The fi_addr of a datagram's source in the bound AV, or FI_ADDR_NOTAVAIL.
fi_addr_t SourceOf(const Ep* ep, const driver::UdpFlow& f) {
  const auto& addrs = ep->av->addrs;
  for (fi_addr_t a = 0; a < addrs.size(); ++a) {
    if (addrs[a] && addrs[a]->ip == f.src_ip && addrs[a]->udp_port == f.src_port) return a;
  }
  return FI_ADDR_NOTAVAIL;
}

// One datagram into the oldest posted receive.
void Deliver(Ep* ep, const driver::ParsedUdpFrame& f) {
  DgramState& s = *ep->dgram;
  if (s.posted.empty()) {
    ++s.dropped;  // datagram semantics: no receive, no delivery
    return;
  }
  DgramPosted r = std::move(s.posted.front());
  s.posted.pop_front();
  size_t room = 0;
  for (const iovec& v : r.iov) room += v.iov_len;
  const size_t n = std::min(room, f.payload.size());
  size_t done = 0;
  for (const iovec& v : r.iov) {
    const size_t k = std::min(v.iov_len, n - done);
    std::memcpy(v.iov_base, f.payload.data() + done, k);
    done += k;
    if (done == n) break;
  }
  if (ep->cntrs.recv != nullptr) {
    (f.payload.size() > room ? ep->cntrs.recv->errors : ep->cntrs.recv->value).fetch_add(1);
  }
  Cq* cq = ep->cqs.rx;
  if (cq == nullptr) return;
  const fi_addr_t src = SourceOf(ep, f.flow);
  if (f.payload.size() > room) {
    CqError e{};
    e.e.op_context = r.context;
    e.e.flags = FI_RECV | FI_MSG;
    e.e.len = n;
    e.e.buf = r.iov.empty() ? nullptr : r.iov[0].iov_base;
    e.e.olen = f.payload.size() - room;
    e.e.err = FI_ETRUNC;
    e.e.prov_errno = FI_ETRUNC;
    e.src = src;
    std::snprintf(e.message, sizeof(e.message), "a %zu-byte datagram was cut to the %zu-byte buffer",
                  f.payload.size(), room);
    cq->errors.push_back(e);
    return;
  }
  if (r.suppress) return;
  Complete(cq, r.context, FI_RECV | FI_MSG, n, r.iov.empty() ? nullptr : r.iov[0].iov_base, src);
}

}  // namespace

int EnableDgram(Ep* ep) {
  auto s = std::make_unique<DgramState>();
  s->max_posted = ep->config.max_posted_recvs;
  if (absl::Status st = ep->domain->port->Attach(ep->udp_port, &s->inbox); !st.ok()) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, "fi_enable: %s\n", std::string(st.message()).c_str());
    return FromStatus(st);
  }
  s->attached = true;
  ep->dgram = std::move(s);
  return 0;
}

void CloseDgram(Ep* ep) {
  if (ep->dgram == nullptr) return;
  if (ep->dgram->attached) ep->domain->port->Detach(ep->udp_port);  // frees its inbox
  BYPASS_FI_INFO(FI_LOG_EP_CTRL, "closing datagram endpoint on port %u: %llu dropped\n",
                 ep->udp_port, static_cast<unsigned long long>(ep->dgram->dropped));
  ep->dgram.reset();
}

void ProgressDgram(Ep* ep) {
  rdm::Port& port = *ep->domain->port;
  port.Poll(kRxBurst);
  driver::Packet* pkts[kRxBurst];
  // Only as many as the receive CQ can take: the rest wait in the inbox.
  const size_t room =
      ep->cqs.rx != nullptr ? std::min<size_t>(ep->cqs.rx->room(), kRxBurst) : kRxBurst;
  const uint32_t n = ep->dgram->inbox.Pop({pkts, room});
  for (uint32_t i = 0; i < n; ++i) {
    std::optional<driver::ParsedUdpFrame> f = driver::ParseUdpFrame({pkts[i]->data, pkts[i]->len});
    if (f && f->flow.dst_port == ep->udp_port && f->flow.dst_ip == port.info().ipv4) {
      Deliver(ep, *f);
    } else {
      ++ep->dgram->dropped;
    }
  }
  if (n > 0) port.qp().FreeBulk({pkts, n});
}

ssize_t DgramSend(Ep* ep, const iovec* iov, size_t count, fi_addr_t dest, void* context,
                  uint64_t flags, bool inject) {
  if (flags & FI_REMOTE_CQ_DATA) return -FI_EINVAL;  // cq_data_size is 0
  if (ep->av == nullptr || dest >= ep->av->addrs.size() || !ep->av->addrs[dest]) return -FI_EINVAL;
  const rdm::Address& to = *ep->av->addrs[dest];
  size_t len = 0;
  for (size_t i = 0; i < count; ++i) len += iov[i].iov_len;
  const driver::DeviceInfo& info = ep->domain->port->info();
  if (len > info.mtu - sizeof(driver::Ipv4Header) - sizeof(driver::UdpHeader)) return -FI_EMSGSIZE;
  const bool suppress = inject || (ep->cqs.tx_selective && !(flags & FI_COMPLETION));
  if (!suppress && ep->cqs.tx != nullptr && ep->cqs.tx->room() == 0) return -FI_EAGAIN;
  driver::QueuePair& qp = ep->domain->port->qp();
  driver::Packet* pkt = nullptr;
  if (!qp.AllocBulk({&pkt, 1})) return -FI_EAGAIN;
  uint8_t* payload = pkt->data + driver::kUdpFrameHeaderBytes;
  for (size_t i = 0; i < count; ++i) {
    std::memcpy(payload, iov[i].iov_base, iov[i].iov_len);
    payload += iov[i].iov_len;
  }
  driver::UdpFlow flow;
  flow.src_mac = info.mac;
  flow.dst_mac = to.mac == driver::MacAddress{} ? driver::kBroadcastMac : to.mac;
  flow.src_ip = info.ipv4;
  flow.dst_ip = to.ip;
  flow.src_port = ep->udp_port;
  flow.dst_port = to.udp_port;
  flow.dscp = ep->dscp.value_or(0);
  // UDP checksums on: receivers may be ordinary sockets.
  const size_t frame = driver::WriteUdpHeaders(flow, len, {pkt->data, pkt->capacity},
                                               driver::UdpChecksumFill::kCompute);
  pkt->len = static_cast<uint32_t>(frame);
  if (frame == 0 || qp.TxBurst({&pkt, 1}) != 1) {
    qp.FreeBulk({&pkt, 1});
    return frame == 0 ? -FI_EMSGSIZE : -FI_EAGAIN;
  }
  ep->domain->last_dgram_tx_ns = driver::SteadyClock::Get().NowNs();
  if (ep->cntrs.send != nullptr) ep->cntrs.send->value.fetch_add(1);
  if (!suppress && ep->cqs.tx != nullptr) {
    Complete(ep->cqs.tx, context, FI_SEND | FI_MSG, len, nullptr, FI_ADDR_NOTAVAIL);
  }
  return 0;
}

ssize_t DgramRecv(Ep* ep, const iovec* iov, size_t count, void* context, uint64_t flags) {
  if (flags & (FI_MULTI_RECV | FI_PEEK | FI_CLAIM | FI_DISCARD)) return -FI_EINVAL;
  DgramState& s = *ep->dgram;
  if (s.posted.size() >= s.max_posted) return -FI_EAGAIN;
  DgramPosted r;
  r.iov.assign(iov, iov + count);
  r.context = context;
  r.suppress = ep->cqs.rx_selective && !(flags & FI_COMPLETION);
  s.posted.push_back(std::move(r));
  return 0;
}

bool DgramCancel(Ep* ep, void* context) {
  DgramState& s = *ep->dgram;
  for (auto it = s.posted.begin(); it != s.posted.end(); ++it) {
    if (it->context != context) continue;
    if (ep->cqs.rx != nullptr) {
      CqError e{};
      e.e.op_context = context;
      e.e.flags = FI_RECV | FI_MSG;
      e.e.err = FI_ECANCELED;
      e.e.prov_errno = FI_ECANCELED;
      e.src = FI_ADDR_NOTAVAIL;
      std::snprintf(e.message, sizeof(e.message), "receive canceled");
      ep->cqs.rx->errors.push_back(e);
    }
    s.posted.erase(it);
    return true;
  }
  return false;
}

}  // namespace bypass::fi
