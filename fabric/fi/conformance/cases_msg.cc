// fi_cm(3), fi_eq(3) and fi_endpoint(3) for connected endpoints (FI_EP_MSG):
// passive endpoints, connection requests with their info and data, accept
// and reject with data, shutdown, fi_getpeer, FI_OPT_CM_DATA_SIZE, and the
// data calls over a connection. The reference is libfabric's tcp, whose
// native endpoint type FI_EP_MSG is.
#include <netinet/in.h>
#include <rdma/fi_atomic.h>

#include <cstring>
#include <string>
#include <vector>

#include "fabric/fi/conformance/cm_pair.h"
#include "fabric/fi/conformance/conformance.h"

namespace bypass::fi::conformance {
namespace {

constexpr char kTcpMsg[] = "tcp";

CONFORMANCE_CASE(msg_connect_accept_data, kTcpMsg) {
  Cm m = Listen(c);
  fi_eq_cm_entry e = Request(c, m, "request");
  CHECK(e.info->ep_attr->type == FI_EP_MSG, "the FI_CONNREQ's info is not FI_EP_MSG");
  m.server = OpenSide(c, m, e.info);
  fi_freeinfo(e.info);
  CHECK_RET(fi_accept(m.server.ep, "accepted", 8), 0);
  std::vector<uint8_t> got;
  CHECK_RET(NextEvent(c, m.client.eq, {m.server.eq, m.pep_eq}, &e, &got), FI_CONNECTED);
  CHECK(got.size() >= 8 && std::memcmp(got.data(), "accepted", 8) == 0,
        "the client's FI_CONNECTED does not carry the accept's data (" << got.size() << " bytes)");
  CHECK_RET(NextEvent(c, m.server.eq, {m.client.eq}, &e), FI_CONNECTED);
}

CONFORMANCE_CASE(msg_send_recv, kTcpMsg) {
  Cm m = Connected(c);
  char* in = c.Buf(16);
  char* out = c.Buf(16, 'm');
  int rctx, sctx;
  CHECK_RET(fi_recv(m.server.ep, in, 16, nullptr, 0, &rctx), 0);
  c.Post("fi_send", [&] { return fi_send(m.client.ep, out, 16, nullptr, 0, &sctx); });
  Completion r = c.Wait(m.server.cq, "the receive");
  CHECK(!r.error && r.entry.op_context == &rctx && r.entry.len == 16, "the receive's completion");
  CHECK(std::memcmp(in, out, 16) == 0, "the bytes received");
  Completion s = c.Wait(m.client.cq, "the send");
  CHECK(!s.error && s.entry.op_context == &sctx, "the send's completion");
}

CONFORMANCE_CASE(msg_reject_data, kTcpMsg) {
  Cm m = Listen(c);
  fi_eq_cm_entry e = Request(c, m, nullptr);
  CHECK_RET(fi_reject(m.pep, e.info->handle, "no room", 7), 0);
  fi_freeinfo(e.info);
  fi_eq_err_entry err{};
  char data[64] = {};
  err.err_data = data;
  err.err_data_size = sizeof data;
  CHECK_RET(NextEvent(c, m.client.eq, {m.pep_eq}, &e, nullptr, &err), -FI_EAVAIL);
  CHECK(err.err == FI_ECONNREFUSED, "the rejected connect's error is " << err.err);
  CHECK(err.fid == &m.client.ep->fid, "the error's fid is not the connecting endpoint");
  CHECK(err.err_data_size >= 7 && std::memcmp(err.err_data, "no room", 7) == 0,
        "err_data is not the rejection's data (" << err.err_data_size << " bytes)");
}

CONFORMANCE_CASE(msg_shutdown_event, kTcpMsg) {
  Cm m = Connected(c);
  CHECK_RET(fi_shutdown(m.client.ep, 0), 0);
  fi_eq_cm_entry e{};
  CHECK_RET(NextEvent(c, m.server.eq, {m.client.eq}, &e), FI_SHUTDOWN);
  CHECK(e.fid == &m.server.ep->fid, "FI_SHUTDOWN names another fid");
}

CONFORMANCE_CASE(msg_getpeer, kTcpMsg) {
  Cm m = Connected(c);
  sockaddr_in peer{}, name{};
  size_t len = sizeof peer;
  CHECK_RET(fi_getpeer(m.client.ep, &peer, &len), 0);
  len = sizeof name;
  CHECK_RET(fi_getname(&m.server.ep->fid, &name, &len), 0);
  CHECK(peer.sin_port == name.sin_port, "fi_getpeer's port " << ntohs(peer.sin_port)
                                                              << " is not the peer's " << ntohs(name.sin_port));
  len = 1;
  CHECK_RET(fi_getpeer(m.client.ep, &peer, &len), -FI_ETOOSMALL);
  CHECK(len >= sizeof(sockaddr_in), "fi_getpeer's size needed is " << len);
}

CONFORMANCE_CASE(msg_cm_data_size, kTcpMsg) {
  Cm m = Listen(c);
  size_t size = 0, len = sizeof size;
  CHECK_RET(fi_getopt(&m.pep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &size, &len), 0);
  CHECK(size > 0, "FI_OPT_CM_DATA_SIZE is 0");
  std::vector<char> big(size + 1, 'x');
  CHECK(fi_connect(m.client.ep, m.pep_name.data(), big.data(), big.size()) < 0,
        "fi_connect took " << big.size() << " bytes of data, beyond FI_OPT_CM_DATA_SIZE " << size);
}

CONFORMANCE_CASE(msg_rma_write_read, kTcpMsg) {
  Cm m = Connected(c, FI_MSG | FI_RMA);
  char* region = c.Buf(64);
  fid_mr* mr = nullptr;
  CHECK_RET(fi_mr_reg(m.server.domain, region, 64, FI_REMOTE_WRITE | FI_REMOTE_READ, 0, 0, 0, &mr, nullptr), 0);
  c.Own(&mr->fid);
  const uint64_t addr = RmaAddr(m.info, region);
  char* out = c.Buf(8, 'w');
  c.Post("fi_write", [&] { return fi_write(m.client.ep, out, 8, nullptr, 0, addr, fi_mr_key(mr), out); });
  Completion w = c.Wait(m.client.cq, "the write");
  CHECK(!w.error, "the write failed: " << w.err.err);
  // The default completion (FI_TRANSMIT_COMPLETE) does not promise the
  // bytes are at the target yet: progress until they are.
  {
    HangGuard guard(kHangSeconds, "the write landing in the region");
    while (std::memcmp(region, out, 8) != 0) c.Progress();
  }
  region[8] = 'r';
  char* in = c.Buf(1);
  c.Post("fi_read", [&] { return fi_read(m.client.ep, in, 1, nullptr, 0, addr + 8, fi_mr_key(mr), in); });
  Completion r = c.Wait(m.client.cq, "the read");
  CHECK(!r.error && in[0] == 'r', "the read");
}

// fi_atomic(3) over a connection: the destination argument is ignored (the
// connected peer's region is the target); a fetching add answers the old
// value.
CONFORMANCE_CASE(msg_atomic_fetch_add, kTcpMsg) {
  Cm m = Connected(c, FI_MSG | FI_ATOMIC);
  auto* region = reinterpret_cast<uint64_t*>(c.Buf(16));
  region[0] = 40;
  fid_mr* mr = nullptr;
  CHECK_RET(fi_mr_reg(m.server.domain, region, 16, FI_REMOTE_WRITE | FI_REMOTE_READ, 0, 0, 0, &mr,
                      nullptr),
            0);
  c.Own(&mr->fid);
  const uint64_t addr = RmaAddr(m.info, region);
  auto* add = reinterpret_cast<uint64_t*>(c.Buf(8));
  auto* old = reinterpret_cast<uint64_t*>(c.Buf(8));
  *add = 2;
  c.Post("fi_fetch_atomic", [&] {
    return fi_fetch_atomic(m.client.ep, add, 1, nullptr, old, nullptr, 0, addr, fi_mr_key(mr),
                           FI_UINT64, FI_SUM, old);
  });
  Completion a = c.Wait(m.client.cq, "the fetching add");
  CHECK(!a.error, "the atomic failed: " << Err(-a.err.err));
  CHECK(*old == 40, "fetched " << *old << ", want 40");
  CHECK(region[0] == 42, "the region holds " << region[0] << ", want 42");
}

}  // namespace
}  // namespace bypass::fi::conformance
