// Connections sharing their listener's port, and what fi_shutdown does to
// operations still posted (fi_cm(3)): the accepted endpoints' names, each
// connection's receives taking its own peer's messages only, and the
// receives canceled (FI_ECANCELED) by a shutdown on either side. The
// reference is libfabric's tcp, whose accepted sockets share the listening
// port and whose shutdown flushes the endpoint's queues.
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "fabric/fi/conformance/cm_pair.h"
#include "fabric/fi/conformance/conformance.h"

namespace bypass::fi::conformance {
namespace {

constexpr char kTcpMsg[] = "tcp";

sockaddr_in NameOf(fid_t f) {
  sockaddr_in s{};
  size_t len = sizeof s;
  CHECK_RET(fi_getname(f, &s, &len), 0);
  return s;
}

// Two accepted endpoints are at the listener's port (fi_getname), each
// with its own peer (fi_getpeer: its client's port).
CONFORMANCE_CASE(msgport_accepted_at_listener_port, kTcpMsg) {
  Cm m = Connected(c);
  Cm::Side client2;
  Cm::Side server2 = Accept(c, m, &client2);
  sockaddr_in pep{};
  std::memcpy(&pep, m.pep_name.data(), std::min(sizeof pep, m.pep_name.size()));
  for (const Cm::Side* s : {&m.server, &server2}) {
    const sockaddr_in name = NameOf(&s->ep->fid);
    CHECK(name.sin_port == pep.sin_port, "an accepted endpoint is at port " << ntohs(name.sin_port)
                                             << ", the listener at " << ntohs(pep.sin_port));
  }
  const Cm::Side* clients[] = {&m.client, &client2};
  const Cm::Side* servers[] = {&m.server, &server2};
  for (int i = 0; i < 2; ++i) {
    sockaddr_in peer{};
    size_t len = sizeof peer;
    CHECK_RET(fi_getpeer(servers[i]->ep, &peer, &len), 0);
    const sockaddr_in client = NameOf(&clients[i]->ep->fid);
    CHECK(peer.sin_port == client.sin_port, "fi_getpeer of accepted endpoint " << i << ": port "
                                                << ntohs(peer.sin_port) << ", its client's "
                                                << ntohs(client.sin_port));
  }
}

// Each accepted endpoint's receive takes its own peer's message: the second
// client's goes to the second endpoint, the first endpoint's receive waits.
CONFORMANCE_CASE(msgport_receives_own_peer, kTcpMsg) {
  Cm m = Connected(c);
  Cm::Side client2;
  Cm::Side server2 = Accept(c, m, &client2);
  char* in1 = c.Buf(8);
  char* in2 = c.Buf(8);
  char* out = c.Buf(8, '2');
  int r1, r2, s2;
  CHECK_RET(fi_recv(m.server.ep, in1, 8, nullptr, 0, &r1), 0);
  CHECK_RET(fi_recv(server2.ep, in2, 8, nullptr, 0, &r2), 0);
  c.Post("fi_send", [&] { return fi_send(client2.ep, out, 8, nullptr, 0, &s2); });
  Completion got = c.Wait(server2.cq, "the second connection's receive");
  CHECK(!got.error && got.entry.op_context == &r2, "the second connection's receive");
  CHECK(std::memcmp(in2, out, 8) == 0, "the bytes");
  Completion none;
  CHECK(!c.Poll(m.server.cq, &none, 20), "the first connection's receive took another's message");
}

// fi_shutdown cancels the receives still posted: FI_ECANCELED error
// completions in the endpoint's CQ.
CONFORMANCE_CASE(msgport_shutdown_cancels_receives, kTcpMsg) {
  Cm m = Connected(c);
  char* in = c.Buf(16);
  int r[2];
  CHECK_RET(fi_recv(m.client.ep, in, 8, nullptr, 0, &r[0]), 0);
  CHECK_RET(fi_recv(m.client.ep, in + 8, 8, nullptr, 0, &r[1]), 0);
  CHECK_RET(fi_shutdown(m.client.ep, 0), 0);
  for (int i = 0; i < 2; ++i) {
    Completion x = c.Wait(m.client.cq, "a canceled receive");
    CHECK(x.error, "a receive posted before fi_shutdown completed without error");
    CHECK(x.err.err == FI_ECANCELED, "the receive's error is " << x.err.err << ", want FI_ECANCELED");
    CHECK(x.err.op_context == &r[0] || x.err.op_context == &r[1], "the error's context");
  }
}

// The peer of a shutdown sees FI_SHUTDOWN; its receives still posted are
// canceled too.
CONFORMANCE_CASE(msgport_peer_shutdown_cancels_receives, kTcpMsg) {
  Cm m = Connected(c);
  char* in = c.Buf(8);
  int r;
  CHECK_RET(fi_recv(m.server.ep, in, 8, nullptr, 0, &r), 0);
  CHECK_RET(fi_shutdown(m.client.ep, 0), 0);
  fi_eq_cm_entry e{};
  CHECK_RET(NextEvent(c, m.server.eq, {m.client.eq}, &e), FI_SHUTDOWN);
  Completion x = c.Wait(m.server.cq, "the peer's canceled receive");
  CHECK(x.error && x.err.err == FI_ECANCELED && x.err.op_context == &r,
        "the receive after FI_SHUTDOWN: error " << x.error << " err " << x.err.err);
}

}  // namespace
}  // namespace bypass::fi::conformance
