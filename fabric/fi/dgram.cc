// FI_EP_DGRAM over rdm::DatagramEndpoint: plain UDP datagrams (no
// reliability, no order), one copy into the frame and one out of it.
#include "fabric/fi/dgram.h"

#include <rdma/fi_errno.h>

#include <vector>

#include "driver/clock.h"
#include "fabric/fi/cntr.h"
#include "fabric/fi/domain.h"
#include "fabric/fi/ep.h"
#include "fabric/fi/hmem.h"
#include "fabric/fi/info/info.h"
#include "fabric/fi/mcast.h"
#include "fabric/fi/services.h"

namespace bypass::fi {

absl::StatusOr<std::unique_ptr<rdm::DatagramEndpoint>> CreateDgram(Ep* ep) {
  rdm::DatagramConfig c;
  c.udp_port = ep->udp_port;
  c.max_peers = ep->config.max_peers;
  c.max_posted_recvs = ep->config.max_posted_recvs;
  c.max_unread_sends = ep->config.max_send_ops;
  c.dscp = ep->dscp.value_or(0);
  return rdm::DatagramEndpoint::Create(*ep->domain->port, c);
}

bool SkipPrefix(const iovec* iov, size_t count, size_t prefix, iovec* out) {
  if (count == 0 || iov == nullptr || iov[0].iov_len < prefix) {
    BYPASS_FI_WARN(FI_LOG_EP_DATA, "FI_MSG_PREFIX: the first buffer must hold the %zu-byte "
                   "prefix\n", prefix);
    return false;
  }
  for (size_t i = 0; i < count; ++i) out[i] = iov[i];
  out[0].iov_base = static_cast<uint8_t*>(iov[0].iov_base) + prefix;
  out[0].iov_len -= prefix;
  return true;
}

ssize_t DgramSend(Ep* ep, const iovec* iov, size_t count, fi_addr_t dest, void* context,
                  uint64_t flags, bool inject_call) {
  if (flags & FI_REMOTE_CQ_DATA) return -FI_EINVAL;  // cq_data_size is 0
  iovec payload[kMsgIovLimit];
  if (ep->msg_prefix != 0) {
    if (!SkipPrefix(iov, count, ep->msg_prefix, payload)) return -FI_EINVAL;
    iov = payload;
  }
  rdm::SendRequest r;
  // fi_mc_addr names a group (mcast.h); FI_MULTICAST says dest is one.
  const bool group = FindGroupPeer(ep, dest, &r.dest);
  if ((flags & FI_MULTICAST) && !group) return -FI_EINVAL;
  if (!group && !ep->peers.Find(dest, &r.dest)) return -FI_EINVAL;
  r.context = context;
  // No CQ entry (fi_inject, or FI_SELECTIVE_COMPLETION without
  // FI_COMPLETION): the send counter counts it here.
  const bool quiet = inject_call || (ep->cqs.tx_selective && !(flags & FI_COMPLETION));
  if (quiet || ep->cqs.tx == nullptr) r.flags = rdm::kSendInject;
  // With the application's copy functions (hmem.h), they gather the
  // datagram into a provider buffer, which the engine copies into the frame.
  std::vector<uint8_t> gathered;
  iovec one;
  if (HmemOverridden(ep->domain)) {
    size_t len = 0;
    for (size_t i = 0; i < count; ++i) len += iov[i].iov_len;
    if (len > ep->dgram->max_payload()) return -FI_EMSGSIZE;
    gathered.resize(len);
    Gather(ep->domain, iov, count, gathered.data());
    one = {gathered.data(), len};
    iov = &one;
    count = 1;
  }
  const rdm::Result res = ep->dgram->SendV(r, {iov, count});
  if (res != rdm::Result::kOk) return static_cast<ssize_t>(res);
  ep->domain->last_dgram_tx_ns = driver::SteadyClock::Get().NowNs();
  if (r.flags & rdm::kSendInject) CountEvent(ep->cntrs.send);
  return 0;
}

void CloseDgram(Ep* ep) {
  if (ep->dgram == nullptr) return;
  const rdm::DatagramCounters& c = ep->dgram->counters();
  BYPASS_FI_INFO(FI_LOG_EP_CTRL,
                 "closing datagram endpoint on port %u: sent %llu, received %llu (%llu "
                 "truncated); dropped %llu with no receive, %llu not for it\n",
                 ep->udp_port, static_cast<unsigned long long>(c.sent),
                 static_cast<unsigned long long>(c.received),
                 static_cast<unsigned long long>(c.truncated),
                 static_cast<unsigned long long>(c.no_receive_dropped),
                 static_cast<unsigned long long>(c.not_for_us_dropped));
  ep->dgram.reset();  // detaches from the port, freeing what waits in its inbox
}

}  // namespace bypass::fi
