// Connected endpoints: the passive endpoint (an RDM endpoint of its own
// domain on the listening port, taking connection requests; the endpoints
// accepted from it share that engine endpoint, MsgPort), the connection
// state of an FI_EP_MSG endpoint, and the connection manager's exchange
// (cm.h):
//
//   connecting ep            passive ep              accepting ep
//   fi_connect  --CONNREQ-->  FI_CONNREQ (handle)
//                                                    fi_accept
//   FI_CONNECTED <----------------ACCEPT-----------
//               -----------------ACK-------------->  FI_CONNECTED
//   (or)        <--REJECT---  fi_reject: FI_ECONNREFUSED, err_data the data
//   fi_shutdown / fi_close -----SHUTDOWN---------->  FI_SHUTDOWN (and back)
//
// A connected endpoint keeps its connection manager's receives directed at
// its peer, so the engine watches that peer: one that dies is given up
// after FI_BYPASS_PEER_TIMEOUT_MS and the endpoint sees FI_SHUTDOWN.
#include "fabric/fi/msg_ep.h"

#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <algorithm>
#include <array>
#include <deque>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "driver/clock.h"
#include "fabric/fi/address/address.h"
#include "fabric/fi/cm.h"
#include "fabric/fi/common.h"
#include "fabric/fi/domain.h"
#include "fabric/fi/ep.h"
#include "fabric/fi/eq.h"
#include "fabric/fi/fabric.h"
#include "fabric/fi/info/info.h"
#include "fabric/fi/mr.h"
#include "fabric/fi/progress.h"
#include "fabric/fi/services.h"
#include "fabric/rdm/rdm.h"

namespace bypass::fi {

// The fi_addr of a connected endpoint's peer in its PeerMap.
constexpr fi_addr_t kPeerAddr = 0;
// Connection-manager receives an endpoint keeps posted (more messages wait
// in the engine's unexpected queue until a slot is posted again).
constexpr size_t kCmSlots = 2;
// What a port's engine endpoint holds per connection it may carry
// (FI_BYPASS_LISTEN_PEERS of them), beside the listener's own: the
// connection manager's receives and a share of the application's
// receives and sends (the port's budgets, shared by its connections).
constexpr uint32_t kPortRecvsPerConn = kCmSlots + 2;
constexpr uint32_t kPortSendsPerConn = 2;
// ... and a passive endpoint.
constexpr size_t kPepSlots = 64;
// A passive endpoint forgets a connecting endpoint this long (5 ms) after its
// request (the engine's acknowledgement of it long gone) unless a
// connection took it: the listener's engine keeps a peer per connection
// only. It forgets that incarnation of it: a new endpoint on the same
// address (a client that closed and reopened) is another session, kept. A
// request retransmitted after that (its acknowledgement lost) is known by
// its conn_id and dropped.
constexpr uint64_t kForgetNs = 5'000'000;
// The longest fi_shutdown and the close of a connection wait for their
// SHUTDOWN's acknowledgement (a dead peer never gives it).
constexpr uint64_t kShutdownWaitNs = 1'000'000'000;
// Connection ids a passive endpoint remembers for that.
constexpr size_t kRecentIds = 1024;

enum class ConnState { kIdle, kConnecting, kAccepting, kConnected, kShutdown, kFailed };

using CmBuffer = std::array<uint8_t, kCmMaxPacket>;

struct MsgConn {
  ConnState state = ConnState::kIdle;
  // An accepted connection on its listener's port (Ep::shares), or null;
  // one of the port's members once enabled (opened before).
  MsgPort* port = nullptr;
  bool member = false;
  bool from_connreq = false;  // opened with info->handle: fi_accept, never fi_connect
  uint64_t conn_id = 0;
  rdm::Address peer_addr;     // the connection request's sender (accepting side)
  std::optional<rdm::PeerId> peer;      // the connected peer
  std::optional<rdm::PeerId> listener;  // the passive endpoint (connecting side)
  Eq* eq = nullptr;  // where it is registered for progress
  std::array<CmBuffer, kCmSlots> rx{};
  bool rx_posted = false;
  // The peer's session as last seen (WatchPeer): its incarnation once
  // established, and since when it has had none (0: it has one).
  uint32_t peer_incarnation = 0;
  uint64_t sessionless_since_ns = 0;
};

namespace {

// ---- the connection request (fi_info::handle of FI_CONNREQ) ----

struct ConnReq {
  ::fid handle;
  Obj obj;
  uint64_t conn_id = 0;
  rdm::Address client;
  MsgPort* port = nullptr;  // the listening port the connection shares
};
static_assert(offsetof(ConnReq, handle) == 0);

int ConnReqClose(::fid*) { return -FI_ENOSYS; }  // freed by its passive endpoint
int ConnReqControl(::fid*, int, void*) { return -FI_ENOSYS; }

fi_ops g_connreq_ops = {
    .size = sizeof(fi_ops),
    .close = ConnReqClose,
    .bind = NoSysBind,
    .control = ConnReqControl,
    .ops_open = NoSysOpsOpen,
    .tostr = NoSysTostr,
    .ops_set = NoSysOpsSet,
};

uint64_t NewConnId() {
  static std::mutex mu;
  static std::mt19937_64 gen{std::random_device{}()};
  std::lock_guard<std::mutex> g(mu);
  uint64_t id = 0;
  while (id == 0) id = gen();
  return id;
}

// ---- EQ registration ----

void EqAdd(Eq* eq, fid_t f) {
  std::lock_guard<std::mutex> g(eq->mu);
  eq->cm.push_back(f);
}

void EqDrop(Eq* eq, fid_t f) {
  std::lock_guard<std::mutex> g(eq->mu);
  EraseOne(eq->cm, f);
}

// An event of a connected or passive endpoint: fi_eq_cm_entry and data.
void PushCmEvent(Eq* eq, uint32_t event, fid_t f, fi_info* info, const uint8_t* data, size_t n) {
  if (eq == nullptr) return;
  EqEvent ev;
  ev.event = event;
  ev.bytes.resize(sizeof(fi_eq_cm_entry) + n);
  fi_eq_cm_entry e{};
  e.fid = f;
  e.info = info;
  std::memcpy(ev.bytes.data(), &e, sizeof(e));
  if (n > 0) std::memcpy(ev.bytes.data() + sizeof(e), data, n);
  if (!EqPush(eq, std::move(ev))) {
    BYPASS_FI_WARN(FI_LOG_EQ, "EQ full: connection event %u lost\n", event);
  }
}

// A connection error (fi_eq_readerr): err an FI_* errno, err_data the
// peer's data (a rejection's) or else the message.
void PushCmError(Ep* ep, int err, int prov_errno, const char* message, const uint8_t* data,
                 size_t n) {
  BYPASS_FI_WARN(FI_LOG_EP_CTRL, "%s\n", message);
  Eq* eq = ep->eq;
  if (eq == nullptr) return;
  EqEvent ev;
  ev.error = true;
  ev.err.fid = &ep->fid.fid;
  ev.err.context = ep->fid.fid.context;
  ev.err.err = err;
  ev.err.prov_errno = prov_errno;
  std::snprintf(ev.message, sizeof(ev.message), "%s", message);
  if (n > 0) ev.err_bytes.assign(data, data + n);
  ev.binary = n > 0;
  if (!EqPush(eq, std::move(ev))) BYPASS_FI_WARN(FI_LOG_EQ, "EQ full: connection error lost\n");
}

// ---- a connected endpoint's messages ----

rdm::Result SendCm(Ep* ep, rdm::PeerId to, CmType type, const void* data, size_t n) {
  CmMessage m;
  m.type = type;
  m.conn_id = ep->msg->conn_id;
  m.addr = ep->rdm->address();
  m.data_len = static_cast<uint8_t>(n);
  if (n > 0) std::memcpy(m.data, data, n);
  uint8_t buf[kCmMaxPacket];
  rdm::SendRequest r;
  r.dest = to;
  r.buf = buf;
  r.len = EncodeCm(m, buf);
  r.tag = kCmTagBit | (type == CmType::kConnReq ? kCmListenerBit : 0) | static_cast<uint64_t>(type);
  // Acknowledged at once: a closing endpoint lingers until its SHUTDOWN is,
  // and the connecting side's request should not wait on the listener.
  r.flags = rdm::kSendTagged | rdm::kSendInject | rdm::kSendAckNow;
  return ep->rdm->Send(r);
}

rdm::Result PostCmRecv(Ep* ep, size_t slot) {
  MsgConn* m = ep->msg;
  rdm::RecvRequest r;
  r.source = m->peer.value_or(rdm::kAnyPeer);
  r.buf = m->rx[slot].data();
  r.len = m->rx[slot].size();
  r.context = &m->rx[slot];
  r.tagged = true;
  r.tag = kCmTagBit;
  r.ignore = kCmListenerBit - 1;  // not a connection request (the listener's)
  return ep->rdm->PostRecv(r);
}

void CancelCmRecvs(Ep* ep) {
  MsgConn* m = ep->msg;
  if (!m->rx_posted) return;
  for (CmBuffer& b : m->rx) ep->rdm->CancelRecv(&b);  // their errors are taken (MsgError)
  m->rx_posted = false;
}

// Posts every slot, directed at the peer once there is one (the engine
// then watches it: a dead peer fails them and reports a peer failure).
void RepostCmRecvs(Ep* ep) {
  CancelCmRecvs(ep);
  for (size_t i = 0; i < kCmSlots; ++i) {
    if (PostCmRecv(ep, i) != rdm::Result::kOk) {
      BYPASS_FI_WARN(FI_LOG_EP_CTRL, "no receive slot for the connection manager\n");
    }
  }
  ep->msg->rx_posted = true;
}

int SlotOf(const MsgConn* m, const void* ctx) {
  for (size_t i = 0; i < kCmSlots; ++i) {
    if (ctx == &m->rx[i]) return static_cast<int>(i);
  }
  return -1;
}

// The connection's peer as the data path's only destination (kPeerAddr).
// On a shared port not the other way (PeerMap::addr_of, by the engine's
// peer slot, would cost a word per peer of the port for each connection):
// a connection reports no source.
void SetPeer(Ep* ep, rdm::PeerId peer) {
  if (ep->shares != nullptr) {
    ep->peers.peer_of.assign(1, peer);
  } else {
    ep->peers.Set(kPeerAddr, peer);
  }
}

void Connected(Ep* ep, rdm::PeerId peer) {
  MsgConn* m = ep->msg;
  m->peer = peer;
  if (std::optional<rdm::Address> a = ep->rdm->PeerAddress(peer)) m->peer_addr = *a;
  SetPeer(ep, peer);
  m->state = ConnState::kConnected;
}

// The receives a connection's peer's messages match: on a shared port
// those directed to it, on an endpoint of its own every one.
rdm::PeerId ReceivesOf(const Ep* ep) {
  return ep->shares != nullptr && ep->msg->peer ? *ep->msg->peer : rdm::kAnyPeer;
}

// Progresses until what was sent to the peer (the SHUTDOWN last) is
// acknowledged, at most kShutdownWaitNs (a dead peer never answers).
void AwaitAcks(Ep* ep) {
  MsgConn* m = ep->msg;
  if (!m->peer) return;
  const driver::Clock& clock = driver::SteadyClock::Get();
  const uint64_t start = clock.NowNs();
  for (;;) {
    const std::optional<rdm::PeerStats> st = ep->rdm->peer_stats(*m->peer);
    // Operations only awaiting the peer's answer (a rendezvous it never
    // pulls) are canceled next, not waited for.
    if (!st || !st->established || st->queued_ops <= st->waiting_ops) return;
    if (clock.NowNs() - start >= kShutdownWaitNs) return;
    ProgressEp(ep);
  }
}

// fi_shutdown (fi_cm(3)): the receives still posted are canceled, each an
// FI_ECANCELED error completion in its CQ before the call returns (as
// libfabric's tcp provider flushes its queues; as many as the CQ has room
// for). Sends, RMA and atomics already posted went out before the
// SHUTDOWN, in order: they complete as the peer acknowledges them, or fail.
// REQUIRES: the endpoint's lock.
void FlushPosted(Ep* ep) {
  ep->rdm->CancelRecvs(ReceivesOf(ep));
  for (int pass = 0; pass < 64 && ProgressEp(ep) > 0; ++pass) {
  }
}

void OnCm(Ep* ep, const CmMessage& cm, rdm::PeerId source) {
  MsgConn* m = ep->msg;
  if (cm.conn_id != m->conn_id) {
    BYPASS_FI_INFO(FI_LOG_EP_CTRL, "a connection message for another connection: dropped\n");
    return;
  }
  const bool from_peer = m->peer && *m->peer == source;
  switch (cm.type) {
    case CmType::kAccept:
      if (m->state != ConnState::kConnecting) return;
      if (SendCm(ep, source, CmType::kAck, nullptr, 0) != rdm::Result::kOk) {
        PushCmError(ep, FI_EAGAIN, EAGAIN, "fi_connect: no room to acknowledge the accept",
                    nullptr, 0);
        m->state = ConnState::kFailed;
        return;
      }
      Connected(ep, source);
      RepostCmRecvs(ep);
      PushCmEvent(ep->eq, FI_CONNECTED, &ep->fid.fid, nullptr, cm.data, cm.data_len);
      return;
    case CmType::kReject:
      if (m->state != ConnState::kConnecting) return;
      m->state = ConnState::kFailed;
      PushCmError(ep, FI_ECONNREFUSED, ECONNREFUSED, "fi_connect: the peer rejected the connection",
                  cm.data, cm.data_len);
      return;
    case CmType::kAck:
      if (m->state != ConnState::kAccepting || !from_peer) return;
      m->state = ConnState::kConnected;
      PushCmEvent(ep->eq, FI_CONNECTED, &ep->fid.fid, nullptr, nullptr, 0);
      return;
    case CmType::kShutdown:
      if ((m->state != ConnState::kConnected && m->state != ConnState::kAccepting) || !from_peer) {
        return;
      }
      m->state = ConnState::kShutdown;
      CancelCmRecvs(ep);  // stop watching the peer
      // The receives can take nothing more (tcp's provider flushes them
      // too); their errors follow in this pass. The peer forgets us.
      ep->rdm->CancelRecvs(ReceivesOf(ep));
      PushCmEvent(ep->eq, FI_SHUTDOWN, &ep->fid.fid, nullptr, nullptr, 0);
      return;
    case CmType::kConnReq:
      return;  // for passive endpoints
  }
}

bool Live(ConnState s) { return s == ConnState::kConnected || s == ConnState::kAccepting; }

// The enabled base endpoint of a connected-endpoint call, or null (*err).
Ep* MsgEpOf(fid_ep* f, int* err) {
  Ep* ep = AsEp(f);
  if (ep == nullptr) {
    *err = BadFid(f, FI_CLASS_EP);
    return nullptr;
  }
  ep = ep->base;
  if (ep->msg == nullptr) {
    *err = -FI_EINVAL;  // not FI_EP_MSG
    return nullptr;
  }
  *err = 0;
  return ep;
}

int CheckData(const void* param, size_t len) {
  if (len > kCmDataSize) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, "connection data of %zu bytes; at most %zu "
                   "(FI_OPT_CM_DATA_SIZE)\n", len, kCmDataSize);
    return -FI_EINVAL;
  }
  return param == nullptr && len > 0 ? -FI_EINVAL : 0;
}

// fi_enable if the application did not, as fi_connect and fi_accept allow.
int EnsureEnabled(Ep* ep) {
  if (Enabled(ep)) return 0;
  return fi_enable(&ep->fid);
}

int MsgConnect(fid_ep* f, const void* addr, const void* param, size_t paramlen) {
  int err;
  Ep* ep = MsgEpOf(f, &err);
  if (ep == nullptr) return err;
  if (int ret = CheckData(param, paramlen); ret != 0) return ret;
  std::optional<rdm::Address> a = FromSockaddr(addr, kAddrLen);
  if (!a) return -FI_EINVAL;
  DomainGuard g(*ep->lock);
  MsgConn* m = ep->msg;
  if (m->from_connreq) return -FI_EINVAL;  // accept it instead
  if (m->state != ConnState::kIdle) return Live(m->state) ? -FI_EISCONN : -FI_EOPBADSTATE;
  if (int ret = EnsureEnabled(ep); ret != 0) return ret;
  absl::StatusOr<rdm::PeerId> p = ep->rdm->InsertPeer(LocalToDevice(ep->domain, *a));
  if (!p.ok()) return FromStatus(p.status());
  m->listener = *p;
  m->conn_id = NewConnId();
  const rdm::Result r = SendCm(ep, *p, CmType::kConnReq, param, paramlen);
  if (r != rdm::Result::kOk) return static_cast<int>(r);
  m->state = ConnState::kConnecting;
  return 0;
}

int MsgAccept(fid_ep* f, const void* param, size_t paramlen) {
  int err;
  Ep* ep = MsgEpOf(f, &err);
  if (ep == nullptr) return err;
  if (int ret = CheckData(param, paramlen); ret != 0) return ret;
  DomainGuard g(*ep->lock);
  MsgConn* m = ep->msg;
  if (!m->from_connreq) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, "fi_accept: open the endpoint with the FI_CONNREQ's info\n");
    return -FI_EINVAL;
  }
  if (m->state != ConnState::kIdle) return -FI_EOPBADSTATE;
  if (int ret = EnsureEnabled(ep); ret != 0) return ret;
  // On the listener's port the peer is in the engine since fi_enable.
  absl::StatusOr<rdm::PeerId> p =
      m->peer ? absl::StatusOr<rdm::PeerId>(*m->peer) : ep->rdm->InsertPeer(m->peer_addr);
  if (!p.ok()) return FromStatus(p.status());
  const rdm::Result r = SendCm(ep, *p, CmType::kAccept, param, paramlen);
  if (r != rdm::Result::kOk) return static_cast<int>(r);
  Connected(ep, *p);
  m->state = ConnState::kAccepting;  // until the ACK: FI_CONNECTED
  RepostCmRecvs(ep);
  return 0;
}

int MsgShutdown(fid_ep* f, uint64_t flags) {
  int err;
  Ep* ep = MsgEpOf(f, &err);
  if (ep == nullptr) return err;
  if (flags != 0) return -FI_EBADFLAGS;
  DomainGuard g(*ep->lock);
  MsgConn* m = ep->msg;
  if (!Live(m->state)) return -FI_ENOTCONN;
  const rdm::Result r = SendCm(ep, *m->peer, CmType::kShutdown, nullptr, 0);
  if (r != rdm::Result::kOk) return static_cast<int>(r);
  m->state = ConnState::kShutdown;
  CancelCmRecvs(ep);
  FlushPosted(ep);
  return 0;
}

int MsgGetPeer(fid_ep* f, void* addr, size_t* addrlen) {
  int err;
  Ep* ep = MsgEpOf(f, &err);
  if (ep == nullptr) return err;
  if (addrlen == nullptr) return -FI_EINVAL;
  DomainGuard g(*ep->lock);
  MsgConn* m = ep->msg;
  // The peer of the connection, also after it ended (fi_shutdown forgets
  // it in the engine).
  if (!m->peer || m->state == ConnState::kIdle || m->state == ConnState::kConnecting) {
    return -FI_ENOTCONN;
  }
  const size_t given = *addrlen;
  *addrlen = kAddrLen;
  if (given < kAddrLen || addr == nullptr) return -FI_ETOOSMALL;
  const sockaddr_in s = ToSockaddr(m->peer_addr);
  std::memcpy(addr, &s, kAddrLen);
  return 0;
}

int NoListen(fid_pep*) { return -FI_EINVAL; }
int NoReject(fid_pep*, fid_t, const void*, size_t) { return -FI_EINVAL; }

// FI_OPT_CM_DATA_SIZE (read only), else the endpoint's own options.
const fi_ops_ep* g_base_ep_ops = nullptr;

int CmDataSizeOpt(int level, int optname, void* optval, size_t* optlen, bool* handled) {
  *handled = level == FI_OPT_ENDPOINT && optname == FI_OPT_CM_DATA_SIZE;
  if (!*handled) return 0;
  if (optval == nullptr || optlen == nullptr) return -FI_EINVAL;
  if (*optlen < sizeof(size_t)) {
    *optlen = sizeof(size_t);
    return -FI_ETOOSMALL;
  }
  const size_t v = kCmDataSize;
  std::memcpy(optval, &v, sizeof(v));
  *optlen = sizeof(v);
  return 0;
}

int MsgGetopt(fid_t f, int level, int optname, void* optval, size_t* optlen) {
  bool handled;
  const int ret = CmDataSizeOpt(level, optname, optval, optlen, &handled);
  return handled ? ret : g_base_ep_ops->getopt(f, level, optname, optval, optlen);
}

int MsgSetopt(fid_t f, int level, int optname, const void* optval, size_t optlen) {
  if (level == FI_OPT_ENDPOINT && optname == FI_OPT_CM_DATA_SIZE) return -FI_EOPNOTSUPP;
  return g_base_ep_ops->setopt(f, level, optname, optval, optlen);
}

fi_ops_cm g_msg_cm_ops;
fi_ops_ep g_msg_ep_ops;
std::once_flag g_msg_ops_once;

// The tables of an FI_EP_MSG endpoint: the RDM endpoint's, with the
// connection calls and FI_OPT_CM_DATA_SIZE.
void InitMsgOps(const fi_ops_cm* cm, const fi_ops_ep* ops) {
  std::call_once(g_msg_ops_once, [cm, ops] {
    g_base_ep_ops = ops;
    g_msg_cm_ops = *cm;
    g_msg_cm_ops.connect = MsgConnect;
    g_msg_cm_ops.accept = MsgAccept;
    g_msg_cm_ops.shutdown = MsgShutdown;
    g_msg_cm_ops.getpeer = MsgGetPeer;
    g_msg_cm_ops.listen = NoListen;
    g_msg_cm_ops.reject = NoReject;
    g_msg_ep_ops = *ops;
    g_msg_ep_ops.getopt = MsgGetopt;
    g_msg_ep_ops.setopt = MsgSetopt;
  });
}

// ---- the passive endpoint ----

struct Pep;

}  // namespace

// The listening port (after fi_listen): an RDM endpoint of the passive
// endpoint's own domain, its CQ and its receives for connection requests,
// and the connections accepted on it, which share its engine endpoint (one
// session per connected peer). It lives while the passive endpoint or one
// of its connections does. Its members change under the listening
// endpoint's lock.
struct MsgPort {
  Pep* pep = nullptr;  // null once the passive endpoint is closed
  fid_domain* dom = nullptr;
  fid_av* av = nullptr;  // empty: an RDM endpoint enables with one
  fid_cq* cq = nullptr;
  fid_ep* ep = nullptr;
  Ep* l = nullptr;  // ep's
  std::vector<CmBuffer> rx;
  std::vector<Ep*> members;  // the enabled connections on the port (progress reads them)
  size_t opened = 0;         // ... and those opened, not yet enabled
  absl::flat_hash_map<uint32_t, Ep*> by_peer;  // by rdm::PeerId::value
  // Peers of closed connections, removed from the engine once what was
  // sent them (their SHUTDOWN) is acknowledged (TendSharedPort).
  struct Closed {
    rdm::PeerId peer;
    uint32_t incarnation = 0;  // the peer's then: another one later is kept
    uint64_t at_ns = 0;
  };
  std::vector<Closed> closed;
  bool closing = false;  // the last one out closes it (ReleasePort)
};

namespace {

struct Pep {
  fid_pep fid;
  Obj obj;
  Fabric* fabric = nullptr;
  fi_info* info = nullptr;  // a copy of fi_passive_ep's, without its handle
  Eq* eq = nullptr;
  std::optional<sockaddr_in> name;  // src_addr or fi_setname
  MsgPort* port = nullptr;          // after fi_listen
  std::vector<ConnReq*> connreqs;  // handed out; freed (retired) at close
  // Connecting endpoints to forget (kForgetNs after their request: that
  // incarnation of the address), and recent connection ids.
  struct Handled {
    rdm::Address addr;
    uint64_t at_ns = 0;
  };
  std::deque<Handled> handled;
  std::deque<uint64_t> recent_ids;
  std::mutex mu;  // the listening objects (fi_eq_read may run in any thread)
};
static_assert(offsetof(Pep, fid) == 0);

Pep* AsPep(const void* f) { return As<Pep>(f, FI_CLASS_PEP); }

// Closes the listening objects and frees the port, after the peers of its
// closed connections have acknowledged their SHUTDOWN (at most
// kShutdownWaitNs). REQUIRES: no guard of its lock is held (its domain,
// and the lock with it, may go).
void CloseListener(MsgPort* port) {
  if (port->l != nullptr) {
    const driver::Clock& clock = driver::SteadyClock::Get();
    const uint64_t start = clock.NowNs();
    DomainGuard g(*port->l->lock);
    while (!port->closed.empty() && clock.NowNs() - start < kShutdownWaitNs) {
      ProgressEp(port->l);
    }
  }
  if (port->ep != nullptr) fi_close(&port->ep->fid);
  if (port->cq != nullptr) fi_close(&port->cq->fid);
  if (port->av != nullptr) fi_close(&port->av->fid);
  if (port->dom != nullptr) fi_close(&port->dom->fid);
  delete port;
}

// The passive endpoint leaves its port: its receives for requests are
// canceled; the port closes now unless connections remain on it.
void LeavePort(Pep* p) {
  MsgPort* port = p->port;
  if (port == nullptr) return;
  p->port = nullptr;
  bool last = false;
  if (port->l != nullptr) {
    DomainGuard g(*port->l->lock);
    port->pep = nullptr;
    for (CmBuffer& b : port->rx) port->l->rdm->CancelRecv(&b);
    last = port->members.empty() && port->opened == 0 && !port->closing;
    port->closing = port->closing || last;
  } else {
    last = true;  // fi_listen failed half way
  }
  if (last) CloseListener(port);
}

int PepClose(fid* f) {
  Pep* p = AsPep(f);
  if (p == nullptr) return BadFid(f, FI_CLASS_PEP);
  {
    std::lock_guard<std::mutex> g(p->mu);
    LeavePort(p);
  }
  if (p->eq != nullptr) {
    EqDrop(p->eq, &p->fid.fid);
    p->eq->obj.refs.fetch_sub(1);
  }
  for (ConnReq* c : p->connreqs) {
    c->obj.magic = Obj::kDead;
    Retire(c);
  }
  FreeInfo(p->info);
  p->fabric->obj.refs.fetch_sub(1);
  p->obj.magic = Obj::kDead;
  Retire(p);
  return 0;
}

int PepBind(fid* f, fid* bfid, uint64_t flags) {
  Pep* p = AsPep(f);
  if (p == nullptr) return BadFid(f, FI_CLASS_PEP);
  if (flags != 0) return -FI_EBADFLAGS;
  Eq* eq = AsEq(bfid);
  if (eq == nullptr) return -FI_EINVAL;  // a passive endpoint binds an EQ only
  if (p->eq != nullptr) return -FI_EINVAL;
  p->eq = eq;
  eq->obj.refs.fetch_add(1);
  EqAdd(eq, &p->fid.fid);
  return 0;
}

int PepControl(fid*, int, void*) { return -FI_ENOSYS; }

fi_ops g_pep_fi_ops = {
    .size = sizeof(fi_ops),
    .close = PepClose,
    .bind = PepBind,
    .control = PepControl,
    .ops_open = NoSysOpsOpen,
    .tostr = NoSysTostr,
    .ops_set = NoSysOpsSet,
};

int PepGetopt(fid_t f, int level, int optname, void* optval, size_t* optlen) {
  if (AsPep(f) == nullptr) return BadFid(f, FI_CLASS_PEP);
  bool handled;
  const int ret = CmDataSizeOpt(level, optname, optval, optlen, &handled);
  return handled ? ret : -FI_ENOPROTOOPT;
}

int PepSetopt(fid_t f, int, int, const void*, size_t) {
  return AsPep(f) == nullptr ? BadFid(f, FI_CLASS_PEP) : -FI_ENOPROTOOPT;
}

int NoCtx(fid_ep*, int, fi_tx_attr*, fid_ep**, void*) { return -FI_ENOSYS; }
int NoRxCtx(fid_ep*, int, fi_rx_attr*, fid_ep**, void*) { return -FI_ENOSYS; }
ssize_t NoCancel(fid_t, void*) { return -FI_ENOSYS; }
ssize_t NoSizeLeft(fid_ep*) { return -FI_ENOSYS; }

fi_ops_ep g_pep_ops = {
    .size = sizeof(fi_ops_ep),
    .cancel = NoCancel,
    .getopt = PepGetopt,
    .setopt = PepSetopt,
    .tx_ctx = NoCtx,
    .rx_ctx = NoRxCtx,
    .rx_size_left = NoSizeLeft,
    .tx_size_left = NoSizeLeft,
};

int PostPepRecv(MsgPort* port, size_t slot) {
  return static_cast<int>(fi_trecv(port->ep, port->rx[slot].data(), port->rx[slot].size(),
                                   nullptr, FI_ADDR_UNSPEC, kCmTagBit | kCmListenerBit,
                                   kCmListenerBit - 1, &port->rx[slot]));
}

// The listening port: a domain of the passive endpoint's info, an AV, a CQ
// and an RDM endpoint on the port (room for FI_BYPASS_LISTEN_PEERS peers:
// its connections and the requests it holds), its receives.
int OpenListener(Pep* p) {
  fi_info* info = DupInfo(p->info);
  if (info == nullptr) return -FI_ENOMEM;
  std::unique_ptr<fi_info, void (*)(fi_info*)> own(info, FreeInfo);
  info->ep_attr->type = FI_EP_RDM;
  // The connections' data calls run on this endpoint's engine: every
  // capability of the passive endpoint's info.
  info->caps = (p->info->caps & ~static_cast<uint64_t>(FI_DIRECTED_RECV | FI_SOURCE)) |
               FI_MSG | FI_TAGGED | FI_SEND | FI_RECV;
  info->tx_attr->caps = info->caps;
  info->rx_attr->caps = info->caps;
  info->domain_attr->threading = FI_THREAD_SAFE;  // read from any thread's fi_eq_read
  std::free(info->dest_addr);
  info->dest_addr = nullptr;
  info->dest_addrlen = 0;
  if (p->name) {
    std::free(info->src_addr);
    info->src_addr = std::malloc(kAddrLen);
    if (info->src_addr == nullptr) return -FI_ENOMEM;
    std::memcpy(info->src_addr, &*p->name, kAddrLen);
    info->src_addrlen = kAddrLen;
    info->addr_format = FI_SOCKADDR_IN;
  }
  auto port = new MsgPort;
  port->pep = p;
  p->port = port;
  int ret = OpenDomainOf(&p->fabric->fid, info, &port->dom, nullptr, true);
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  if (ret == 0) ret = fi_av_open(port->dom, &av_attr, &port->av, nullptr);
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_TAGGED;
  cq_attr.size = kPepSlots * 2;
  if (ret == 0) ret = fi_cq_open(port->dom, &cq_attr, &port->cq, nullptr);
  if (ret == 0) ret = fi_endpoint(port->dom, info, &port->ep, nullptr);
  if (ret == 0) {
    port->l = AsEp(port->ep);
    rdm::EndpointConfig& c = port->l->config;
    const uint32_t conns = p->fabric->settings.listen_peers;
    c.max_peers = conns;
    c.max_posted_recvs = std::min<uint32_t>(c.max_posted_recvs + kPepSlots + conns * kPortRecvsPerConn, 1u << 16);
    c.max_send_ops = std::min<uint32_t>(c.max_send_ops + conns * kPortSendsPerConn, 1u << 16);
  }
  if (ret == 0) ret = fi_ep_bind(port->ep, &port->av->fid, 0);
  if (ret == 0) ret = fi_ep_bind(port->ep, &port->cq->fid, FI_TRANSMIT | FI_RECV);
  if (ret == 0) ret = fi_enable(port->ep);
  if (ret == 0) port->l->port_share = port;
  port->rx.assign(kPepSlots, CmBuffer{});
  for (size_t i = 0; ret == 0 && i < kPepSlots; ++i) ret = PostPepRecv(port, i);
  if (ret != 0) {
    p->port = nullptr;
    port->l = nullptr;
    CloseListener(port);
  }
  return ret;
}

int PepListen(fid_pep* f) {
  Pep* p = AsPep(f);
  if (p == nullptr) return BadFid(f, FI_CLASS_PEP);
  std::lock_guard<std::mutex> g(p->mu);
  if (p->port != nullptr) return -FI_EOPBADSTATE;  // already listening
  if (p->eq == nullptr) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, "fi_listen: bind an EQ to the passive endpoint first\n");
    return -FI_ENOEQ;
  }
  const int ret = OpenListener(p);
  if (ret != 0) BYPASS_FI_WARN(FI_LOG_EP_CTRL, "fi_listen: the listening endpoint failed (%d)\n", ret);
  return ret;
}

// The FI_CONNREQ's info: the passive endpoint's, its destination the
// connecting endpoint, no source (the accepting endpoint shares the
// listener's port whatever it names), its handle the request.
fi_info* ConnReqInfo(Pep* p, ConnReq* c) {
  fi_info* info = DupInfo(p->info);
  if (info == nullptr) return nullptr;
  std::free(info->src_addr);
  info->src_addr = nullptr;
  info->src_addrlen = 0;
  std::free(info->dest_addr);
  info->dest_addr = std::malloc(kAddrLen);
  if (info->dest_addr == nullptr) {
    FreeInfo(info);
    return nullptr;
  }
  const sockaddr_in s = ToSockaddr(c->client);
  std::memcpy(info->dest_addr, &s, kAddrLen);
  info->dest_addrlen = kAddrLen;
  info->addr_format = FI_SOCKADDR_IN;
  info->handle = &c->handle;
  return info;
}

// Forgets the connecting endpoints whose requests came kForgetNs ago: that
// incarnation of each, out of the listener's engine, unless a connection
// took it (it goes with the connection) or a rejection to it is not yet
// acknowledged (looked at again later). A new endpoint on the same address
// (another incarnation) keeps its session: its request is not lost.
void ForgetHandled(Pep* p) {
  const uint64_t now = driver::SteadyClock::Get().NowNs();
  MsgPort* port = p->port;
  if (port == nullptr) return;
  Ep* e = port->l;
  DomainGuard g(*e->lock);
  while (!p->handled.empty() && now - p->handled.front().at_ns >= kForgetNs) {
    const Pep::Handled h = p->handled.front();
    rdm::Address any = h.addr;
    any.incarnation = 0;  // finds the learned one, whatever its incarnation
    absl::StatusOr<rdm::PeerId> id = e->rdm->InsertPeer(any);
    uint32_t incarnation = 0;  // the peer's now (0: unknown)
    uint32_t queued = 0;
    if (id.ok()) {
      if (const std::optional<rdm::PeerStats> st = e->rdm->peer_stats(*id)) {
        incarnation = st->incarnation;
        queued = st->queued_ops;
      }
    }
    if (queued > 0 && now - h.at_ns < e->config.peer_timeout_ns) break;
    p->handled.pop_front();
    if (!id.ok() || port->by_peer.contains(id->value)) continue;
    if (incarnation != 0 && h.addr.incarnation != 0 && incarnation != h.addr.incarnation) {
      continue;  // another endpoint on that address now
    }
    (void)e->rdm->RemovePeer(*id);
  }
}

void OnConnReq(Pep* p, const CmMessage& m) {
  if (std::find(p->recent_ids.begin(), p->recent_ids.end(), m.conn_id) != p->recent_ids.end()) {
    return;  // a retransmission after we forgot its sender
  }
  p->recent_ids.push_back(m.conn_id);
  if (p->recent_ids.size() > kRecentIds) p->recent_ids.pop_front();
  p->handled.push_back({m.addr, driver::SteadyClock::Get().NowNs()});
  auto c = std::make_unique<ConnReq>();
  std::memset(&c->handle, 0, sizeof(c->handle));
  c->handle.fclass = FI_CLASS_CONNREQ;
  c->handle.ops = &g_connreq_ops;
  c->conn_id = m.conn_id;
  c->client = m.addr;
  c->port = p->port;
  fi_info* info = ConnReqInfo(p, c.get());
  if (info == nullptr) return;
  p->connreqs.push_back(c.release());
  PushCmEvent(p->eq, FI_CONNREQ, &p->fid.fid, info, m.data, m.data_len);
}

void ProgressPep(Pep* p) {
  std::lock_guard<std::mutex> g(p->mu);
  MsgPort* port = p->port;
  if (port == nullptr) return;
  const auto slot_of = [port](void* ctx) -> std::ptrdiff_t {
    auto* b = static_cast<CmBuffer*>(ctx);
    const bool mine = b >= port->rx.data() && b < port->rx.data() + port->rx.size();
    return mine ? b - port->rx.data() : -1;
  };
  fi_cq_tagged_entry e[16];
  for (;;) {
    const ssize_t n = fi_cq_read(port->cq, e, 16);
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      if (fi_cq_readerr(port->cq, &err, 0) != 1) break;
      BYPASS_FI_INFO(FI_LOG_EP_CTRL, "passive endpoint: a receive failed (error %d)\n", err.err);
      if (const std::ptrdiff_t i = slot_of(err.op_context); i >= 0) PostPepRecv(port, i);
      continue;
    }
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i) {
      const std::ptrdiff_t slot = slot_of(e[i].op_context);
      if (slot < 0) continue;
      std::optional<CmMessage> m = ParseCm(port->rx[slot].data(), e[i].len);
      if (m && m->type == CmType::kConnReq) {
        OnConnReq(p, *m);
      } else {
        BYPASS_FI_INFO(FI_LOG_EP_CTRL, "passive endpoint: not a connection request: dropped\n");
      }
      PostPepRecv(port, slot);
    }
  }
  ForgetHandled(p);
}

int PepReject(fid_pep* f, fid_t handle, const void* param, size_t paramlen) {
  Pep* p = AsPep(f);
  if (p == nullptr) return BadFid(f, FI_CLASS_PEP);
  if (int ret = CheckData(param, paramlen); ret != 0) return ret;
  ConnReq* c = As<ConnReq>(handle, FI_CLASS_CONNREQ);
  if (c == nullptr) return -FI_EINVAL;
  std::lock_guard<std::mutex> g(p->mu);
  if (p->port == nullptr) return -FI_EOPBADSTATE;
  bool mine = false;
  for (ConnReq* r : p->connreqs) mine = mine || r == c;
  if (!mine) return -FI_EINVAL;
  Ep* l = p->port->l;
  DomainGuard lg(*l->lock);
  // The request's sender, learned by the engine (or again, if forgotten
  // since); forgotten kForgetNs after its request once the rejection is
  // acknowledged (ForgetHandled).
  absl::StatusOr<rdm::PeerId> to = l->rdm->InsertPeer(c->client);
  if (!to.ok()) return FromStatus(to.status());
  CmMessage m;
  m.type = CmType::kReject;
  m.conn_id = c->conn_id;
  m.addr = l->rdm->address();
  m.data_len = static_cast<uint8_t>(paramlen);
  if (paramlen > 0) std::memcpy(m.data, param, paramlen);
  uint8_t buf[kCmMaxPacket];
  rdm::SendRequest r;
  r.dest = *to;
  r.buf = buf;
  r.len = EncodeCm(m, buf);
  r.tag = kCmTagBit | static_cast<uint64_t>(m.type);
  r.flags = rdm::kSendTagged | rdm::kSendInject | rdm::kSendAckNow;
  return static_cast<int>(l->rdm->Send(r));
}

int PepGetName(fid_t f, void* addr, size_t* addrlen) {
  Pep* p = AsPep(f);
  if (p == nullptr) return BadFid(f, FI_CLASS_PEP);
  std::lock_guard<std::mutex> g(p->mu);
  if (p->port != nullptr) return fi_getname(&p->port->ep->fid, addr, addrlen);
  if (addrlen == nullptr) return -FI_EINVAL;
  if (!p->name) return -FI_EADDRNOTAVAIL;  // no port yet: fi_listen takes one
  const size_t given = *addrlen;
  *addrlen = kAddrLen;
  if (given < kAddrLen || addr == nullptr) return -FI_ETOOSMALL;
  std::memcpy(addr, &*p->name, kAddrLen);
  return 0;
}

int PepSetName(fid_t f, void* addr, size_t addrlen) {
  Pep* p = AsPep(f);
  if (p == nullptr) return BadFid(f, FI_CLASS_PEP);
  if (!FromSockaddr(addr, addrlen) || addrlen != kAddrLen) return -FI_EINVAL;
  std::lock_guard<std::mutex> g(p->mu);
  if (p->port != nullptr) return -FI_EOPBADSTATE;  // before fi_listen only
  sockaddr_in s;
  std::memcpy(&s, addr, kAddrLen);
  p->name = s;
  return 0;
}

int PepNoConnect(fid_ep*, const void*, const void*, size_t) { return -FI_EINVAL; }
int PepNoAccept(fid_ep*, const void*, size_t) { return -FI_EINVAL; }
int PepNoShutdown(fid_ep*, uint64_t) { return -FI_EINVAL; }
int PepNoGetPeer(fid_ep*, void*, size_t*) { return -FI_EINVAL; }
int PepNoJoin(fid_ep*, const void*, uint64_t, fid_mc**, void*) { return -FI_ENOSYS; }

fi_ops_cm g_pep_cm_ops = {
    .size = sizeof(fi_ops_cm),
    .setname = PepSetName,
    .getname = PepGetName,
    .getpeer = PepNoGetPeer,
    .connect = PepNoConnect,
    .listen = PepListen,
    .accept = PepNoAccept,
    .reject = PepReject,
    .shutdown = PepNoShutdown,
    .join = PepNoJoin,
};

}  // namespace

int OpenPep(fid_fabric* fabric, fi_info* info, fid_pep** out, void* context) {
  Fabric* fab = AsFabric(fabric);
  if (fab == nullptr) return BadFid(fabric, FI_CLASS_FABRIC);
  if (info == nullptr || out == nullptr) return -FI_EINVAL;
  if (info->ep_attr != nullptr && info->ep_attr->type != FI_EP_MSG &&
      info->ep_attr->type != FI_EP_UNSPEC) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, "fi_passive_ep: the info is not an FI_EP_MSG entry\n");
    return -FI_EINVAL;
  }
  auto p = std::make_unique<Pep>();
  std::memset(&p->fid, 0, sizeof(p->fid));
  p->fid.fid.fclass = FI_CLASS_PEP;
  p->fid.fid.context = context;
  p->fid.fid.ops = &g_pep_fi_ops;
  p->fid.ops = &g_pep_ops;
  p->fid.cm = &g_pep_cm_ops;
  p->fabric = fab;
  p->info = DupInfo(info);
  if (p->info == nullptr) return -FI_ENOMEM;
  p->info->handle = nullptr;
  p->info->next = nullptr;
  if (p->info->ep_attr != nullptr) p->info->ep_attr->type = FI_EP_MSG;
  if (FromSockaddr(info->src_addr, info->src_addrlen)) {
    sockaddr_in s;
    std::memcpy(&s, info->src_addr, kAddrLen);
    p->name = s;
  }
  fab->obj.refs.fetch_add(1);
  *out = &p.release()->fid;
  return 0;
}

int OpenMsg(Ep* ep, const fi_info* info) {
  if (ep->shared_rx || ep->shared_tx) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, "FI_EP_MSG endpoints have no shared contexts\n");
    return -FI_EINVAL;
  }
  auto m = std::make_unique<MsgConn>();
  if (info->handle != nullptr) {
    const ConnReq* c = As<ConnReq>(info->handle, FI_CLASS_CONNREQ);
    if (c == nullptr) {
      BYPASS_FI_WARN(FI_LOG_EP_CTRL, "fi_endpoint: info->handle is not a live connection request\n");
      return -FI_EINVAL;
    }
    m->from_connreq = true;
    m->conn_id = c->conn_id;
    m->peer_addr = c->client;
    // The connection shares its listener's port: its engine endpoint,
    // lane, lock and address (fi_getname). A member from now on, so the
    // port outlives it.
    MsgPort* port = c->port;
    Ep* l = port->l;
    DomainGuard g(*l->lock);
    m->port = port;
    ep->shares = l;
    ep->lock = l->lock;
    ep->lane = l->lane;
    ep->udp_port = l->udp_port;
    ep->port_given = true;
    ep->loopback_name = l->loopback_name;
    ++port->opened;
  }
  InitMsgOps(ep->fid.cm, ep->fid.ops);
  ep->fid.cm = &g_msg_cm_ops;
  ep->fid.ops = &g_msg_ep_ops;
  ep->caps &= ~static_cast<uint64_t>(FI_DIRECTED_RECV | FI_SOURCE);  // one peer
  ep->msg = m.release();
  return 0;
}

int EnableSharedMsg(Ep* ep) {
  MsgConn* m = ep->msg;
  MsgPort* port = m->port;
  Ep* l = port->l;
  Domain* d = ep->domain;
  absl::StatusOr<rdm::PeerId> peer = l->rdm->InsertPeer(m->peer_addr);
  if (!peer.ok()) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, "fi_enable: the listener has no room for the peer: %s "
                   "(FI_BYPASS_LISTEN_PEERS)\n", std::string(peer.status().message()).c_str());
    return FromStatus(peer.status());
  }
  ep->rdm = l->rdm;
  // The domain's regions open to remote access, on the shared engine once
  // per domain (another connection of the domain may have them there).
  bool engine_has = false;
  for (const Ep* o : port->members) engine_has = engine_has || (o != ep && o->domain == d && o->rdm);
  for (Mr* mr : engine_has ? std::vector<Mr*>{} : d->mrs) {
    const bool remote = (mr->access & (FI_REMOTE_READ | FI_REMOTE_WRITE)) != 0;
    if (!remote || !mr->enabled) continue;
    if (int ret = RegisterMrWithEp(mr, ep); ret != 0) {
      for (Mr* x : d->mrs) {
        if (std::find(x->registered.begin(), x->registered.end(), ep) != x->registered.end()) {
          DeregisterMrFromEp(x, ep);
        }
      }
      ep->rdm.reset();
      return ret;
    }
  }
  m->peer = *peer;
  SetPeer(ep, *peer);
  port->by_peer[peer->value] = ep;
  --port->opened;
  port->members.push_back(ep);
  m->member = true;
  // Made at first use: an idle connection holds none.
  ep->records.InitLazy(ep->config.max_send_ops + ep->config.max_posted_recvs);
  return EnableMsg(ep);
}

int EnableMsg(Ep* ep) {
  if (ep->eq == nullptr) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, "fi_enable: bind an EQ to the FI_EP_MSG endpoint first\n");
    return -FI_ENOEQ;
  }
  RepostCmRecvs(ep);
  ep->msg->eq = ep->eq;
  EqAdd(ep->eq, &ep->fid.fid);
  return 0;
}

void CloseMsg(Ep* ep) {
  MsgConn* m = ep->msg;
  if (m == nullptr) return;
  if (m->eq != nullptr) EqDrop(m->eq, &ep->fid.fid);
  m->eq = nullptr;
  if (ep->rdm == nullptr) return;
  // An endpoint closed while connected tells its peer (FI_SHUTDOWN there);
  // the linger that follows delivers it.
  if (Live(m->state)) SendCm(ep, *m->peer, CmType::kShutdown, nullptr, 0);
  m->state = ConnState::kShutdown;
  CancelCmRecvs(ep);
}

MsgPort* LeaveSharedPort(Ep* ep) {
  MsgConn* m = ep->msg;
  MsgPort* port = m->port;
  Ep* l = port->l;
  Domain* d = ep->domain;
  // The domain's regions stay on the engine for its other connections there.
  Ep* heir = nullptr;
  for (Ep* o : port->members) {
    if (o != ep && o->domain == d && o->rdm != nullptr) heir = o;
  }
  for (Mr* mr : d->mrs) {
    auto it = std::find(mr->registered.begin(), mr->registered.end(), ep);
    if (it == mr->registered.end()) continue;
    if (heir != nullptr) {
      *it = heir;
    } else {
      DeregisterMrFromEp(mr, ep);
    }
  }
  if (ep->rdm != nullptr && m->peer) {
    // Operations of the application still going to the peer may read its
    // memory: they are given their acknowledgements first (at most 1 s),
    // as an endpoint of its own lingers.
    const std::optional<rdm::PeerStats> st = l->rdm->peer_stats(*m->peer);
    if (st && st->queued_ops > 0) AwaitAcks(ep);
  }
  CloseMsg(ep);  // a connected peer is told (FI_SHUTDOWN there)
  if (ep->rdm != nullptr && m->peer) {
    // Its receives are canceled now (their buffers are the application's
    // again); its peer is removed from the engine once the SHUTDOWN is
    // acknowledged, unless a newer connection to the same address took it.
    // What arrives for the connection meanwhile is dropped.
    auto it = port->by_peer.find(m->peer->value);
    if (it != port->by_peer.end() && it->second == ep) {
      port->by_peer.erase(it);
      l->rdm->CancelRecvs(*m->peer);
      const std::optional<rdm::PeerStats> now = l->rdm->peer_stats(*m->peer);
      port->closed.push_back({*m->peer, now ? now->incarnation : 0,
                              driver::SteadyClock::Get().NowNs()});
    }
  }
  if (m->member) {
    EraseOne(port->members, ep);
  } else {
    --port->opened;
  }
  const bool last =
      port->pep == nullptr && port->members.empty() && port->opened == 0 && !port->closing;
  port->closing = port->closing || last;
  return last ? port : nullptr;
}

void CloseSharedPort(MsgPort* port) {
  if (port != nullptr) CloseListener(port);
}

void TendSharedPort(Ep* l) {
  MsgPort* port = l->port_share;
  if (port == nullptr || port->closed.empty()) return;
  const uint64_t now = driver::SteadyClock::Get().NowNs();
  std::erase_if(port->closed, [&](const MsgPort::Closed& c) {
    const std::optional<rdm::PeerStats> st = l->rdm->peer_stats(c.peer);
    if (st && st->queued_ops > 0 && now - c.at_ns < l->config.peer_timeout_ns) return false;
    // Not a new connection's peer, nor a new endpoint on its address.
    const bool same = !st || st->incarnation == 0 || c.incarnation == 0 ||
                      st->incarnation == c.incarnation;
    if (same && !port->by_peer.contains(c.peer.value)) (void)l->rdm->RemovePeer(c.peer);
    return true;
  });
}

const std::vector<Ep*>* SharedMembers(const Ep* l) {
  return l->port_share != nullptr ? &l->port_share->members : nullptr;
}

Ep* RouteShared(Ep* l, const rdm::Completion* c, rdm::PeerId peer) {
  MsgPort* port = l->port_share;
  if (c != nullptr) {
    const auto* b = static_cast<const CmBuffer*>(c->context);
    if (b >= port->rx.data() && b < port->rx.data() + port->rx.size()) return l;  // a request
  }
  auto it = port->by_peer.find(peer.value);
  return it != port->by_peer.end() ? it->second : nullptr;
}

void FreeMsg(Ep* ep) {
  delete ep->msg;
  ep->msg = nullptr;
}

int MsgDest(const Ep* ep, fi_addr_t* dest) {
  if (ep->msg == nullptr) return 0;
  if (!Live(ep->msg->state)) return -FI_ENOTCONN;
  *dest = kPeerAddr;
  return 0;
}

bool MsgCompletion(Ep* ep, const rdm::Completion& c) {
  MsgConn* m = ep->msg;
  const int slot = SlotOf(m, c.context);
  if (slot < 0) return false;
  std::optional<CmMessage> cm = ParseCm(m->rx[slot].data(), c.len);
  if (cm) {
    OnCm(ep, *cm, c.source);
  } else {
    BYPASS_FI_INFO(FI_LOG_EP_CTRL, "a malformed connection message: dropped\n");
  }
  if (m->rx_posted && PostCmRecv(ep, slot) != rdm::Result::kOk) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, "no receive slot for the connection manager\n");
  }
  return true;
}

bool MsgError(Ep* ep, const rdm::ErrorCompletion& ec) {
  MsgConn* m = ep->msg;
  if (const int slot = SlotOf(m, ec.op.context); slot >= 0) {
    // Canceled (its slot already posted again, or the connection ended),
    // or its peer given up (MsgPeerFailure): nothing more. Any other end
    // (the peer reset or restarted its session: ECONNRESET) is posted
    // again, so the engine keeps watching the peer.
    if (m->rx_posted && ec.err != ECANCELED && ec.err != ETIMEDOUT &&
        PostCmRecv(ep, slot) != rdm::Result::kOk) {
      BYPASS_FI_WARN(FI_LOG_EP_CTRL, "no receive slot for the connection manager\n");
    }
    return true;
  }
  if (!(ec.op.flags & rdm::kCompAfterCompletion)) return false;
  // A connection message that could not be delivered.
  if (m->state == ConnState::kConnecting && m->listener && ec.op.source == *m->listener) {
    m->state = ConnState::kFailed;
    PushCmError(ep, ec.err == ETIMEDOUT ? FI_ETIMEDOUT : FI_EHOSTUNREACH, ec.err, ec.message,
                nullptr, 0);
    return true;
  }
  if (m->state == ConnState::kAccepting && m->peer && ec.op.source == *m->peer) {
    m->state = ConnState::kFailed;
    PushCmError(ep, FI_ECONNABORTED, ec.err, ec.message, nullptr, 0);
    return true;
  }
  // After the connection ended, a late failure to the old listener or peer.
  return m->state == ConnState::kShutdown || m->state == ConnState::kFailed ||
         (m->listener && ec.op.source == *m->listener);
}

bool MsgPeerFailure(Ep* ep, const rdm::PeerFailure& f) {
  MsgConn* m = ep->msg;
  if (m->peer && f.peer == *m->peer) {
    if (m->state == ConnState::kConnected) {
      BYPASS_FI_WARN(FI_LOG_EP_CTRL, "%s: the connection is shut down\n", f.message);
      m->state = ConnState::kShutdown;
      CancelCmRecvs(ep);
      PushCmEvent(ep->eq, FI_SHUTDOWN, &ep->fid.fid, nullptr, nullptr, 0);
    } else if (m->state == ConnState::kAccepting) {
      m->state = ConnState::kFailed;
      CancelCmRecvs(ep);
      PushCmError(ep, FI_ECONNABORTED, f.err, f.message, nullptr, 0);
    }
    return true;
  }
  if (m->listener && f.peer == *m->listener) {
    if (m->state == ConnState::kConnecting) {
      m->state = ConnState::kFailed;
      PushCmError(ep, FI_ETIMEDOUT, f.err, f.message, nullptr, 0);
    }
    return true;
  }
  return false;
}

namespace {

// The connection ends (FI_SHUTDOWN) when its peer's session does: the peer
// restarted (another incarnation), or has had no session for the peer
// timeout (a session the peer reset, or that a RESET sent in its name
// ended, and that nobody re-established: the engine watches only
// established peers, so a dead one would otherwise never time out).
void WatchPeer(Ep* ep) {
  MsgConn* m = ep->msg;
  if (m == nullptr || m->state != ConnState::kConnected || ep->rdm == nullptr) return;
  const std::optional<rdm::PeerStats> st = ep->rdm->peer_stats(*m->peer);
  const char* why = nullptr;
  const uint64_t now = driver::SteadyClock::Get().NowNs();
  if (!st) {
    why = "the peer is gone";
  } else if (st->established && m->peer_incarnation == 0) {
    m->peer_incarnation = st->incarnation;
  } else if (st->established && st->incarnation != m->peer_incarnation) {
    why = "the peer restarted";
  }
  if (st && st->established) {
    m->sessionless_since_ns = 0;
  } else if (m->sessionless_since_ns == 0) {
    m->sessionless_since_ns = now;
  } else if (now - m->sessionless_since_ns >= ep->config.peer_timeout_ns) {
    why = "the peer's session ended and was not re-established within the peer timeout";
  }
  if (why == nullptr) return;
  BYPASS_FI_WARN(FI_LOG_EP_CTRL, "%s: the connection is shut down\n", why);
  m->state = ConnState::kShutdown;
  CancelCmRecvs(ep);
  PushCmEvent(ep->eq, FI_SHUTDOWN, &ep->fid.fid, nullptr, nullptr, 0);
}

}  // namespace

void ProgressCm(Eq* eq) {
  std::vector<fid_t> members;
  {
    std::lock_guard<std::mutex> g(eq->mu);
    if (eq->cm.empty()) return;
    members = eq->cm;
  }
  for (fid_t f : members) {
    if (Pep* p = AsPep(f)) {
      ProgressPep(p);
    } else if (Ep* ep = AsEp(f)) {
      DomainGuard g(*ep->lock);
      ProgressEp(ep);
      WatchPeer(ep);
    }
  }
}

bool HasCm(Eq* eq) {
  std::lock_guard<std::mutex> g(eq->mu);
  return !eq->cm.empty();
}

}  // namespace bypass::fi
