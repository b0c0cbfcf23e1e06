// fi_cm(3) fi_join / fi_mc_addr and FI_MULTICAST on FI_EP_DGRAM (fi_getinfo(3),
// fi_endpoint(3), fi_cq(3)), and traffic classes (fi_endpoint(3) tclass,
// fi_domain(3) FI_TC_*). libfabric's udp provider is the reference for
// multicast (it offers FI_MULTICAST on FI_EP_DGRAM); shm for tclass.
#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "fabric/fi/conformance/conformance.h"

namespace bypass::fi::conformance {
namespace {

constexpr char kUdp[] = "udp";

fi_info* DgramHints(Ctx& c) {
  fi_info* h = c.Hints(FI_MSG | FI_MULTICAST);
  h->ep_attr->type = FI_EP_DGRAM;
  return h;
}

sockaddr_in Group(const char* ip, uint16_t port_network_order) {
  sockaddr_in s{};
  s.sin_family = AF_INET;
  s.sin_port = port_network_order;
  inet_pton(AF_INET, ip, &s.sin_addr);
  return s;
}

// A datagram endpoint with an EQ bound (fi_join needs one), enabled.
struct McEp {
  Ep e;
  fid_eq* eq = nullptr;
};
McEp OpenMcEp(Ctx& c, fid_fabric* fabric, fid_domain* domain, fi_info* info) {
  McEp m;
  fid_ep* ep = nullptr;
  CHECK_RET(fi_endpoint(domain, info, &ep, nullptr), 0);
  c.Own(&ep->fid);
  m.eq = c.Eq(fabric);
  CHECK_RET(fi_ep_bind(ep, &m.eq->fid, 0), 0);
  EpOpts o;
  o.opened = ep;
  m.e = c.OpenEp(domain, info, o);
  return m;
}

// fi_join, then its FI_JOIN_COMPLETE on the EQ naming the fid_mc.
fid_mc* Join(Ctx& c, const McEp& m, const sockaddr_in& group) {
  fid_mc* mc = nullptr;
  int ctx = 0;
  CHECK_RET(fi_join(m.e.ep, &group, 0, &mc, &ctx), 0);
  c.Own(&mc->fid);
  uint32_t event = 0;
  fi_eq_entry entry{};
  ssize_t n = -FI_EAGAIN;
  for (int i = 0; i < 100000 && n == -FI_EAGAIN; ++i) {
    n = fi_eq_read(m.eq, &event, &entry, sizeof(entry), 0);
    c.Progress();
  }
  CHECK_RET(n, sizeof(entry));
  CHECK(event == FI_JOIN_COMPLETE, "event " << event << ", want FI_JOIN_COMPLETE");
  CHECK(entry.fid == &mc->fid, "the event's fid is not the fid_mc");
  CHECK(entry.context == &ctx, "the event's context is not fi_join's");
  return mc;
}

}  // namespace

CONFORMANCE_CASE(mcast_getinfo_dgram, kUdp) {
  fi_info* list = nullptr;
  const int r = c.TryInfo(DgramHints(c), &list);
  if (r == -FI_ENODATA) Refuse("fi_getinfo refused FI_MULTICAST on FI_EP_DGRAM");
  CHECK_RET(r, 0);
  for (fi_info* i = list; i != nullptr; i = i->next) {
    CHECK(i->ep_attr->type == FI_EP_DGRAM, "an entry of another endpoint type");
    CHECK(i->caps & FI_MULTICAST, "an entry without FI_MULTICAST");
  }
  // Not on FI_EP_RDM (bypass offers multicast on datagrams only).
  fi_info* rdm = c.Hints(FI_MSG | FI_MULTICAST);
  fi_info* none = nullptr;
  if (c.bypass()) CHECK_RET(c.TryInfo(rdm, &none), -FI_ENODATA);
}

// a and b on one domain joined to one group; a's fid_mc and b's.
struct Group2 {
  McEp a, b;
  fid_mc* ma = nullptr;
  fid_mc* mb = nullptr;
};
Group2 JoinTwo(Ctx& c, const char* ip) {
  fi_info* info = c.Info(DgramHints(c));
  fid_fabric* fabric = c.Fabric(info);
  fid_domain* domain = c.Domain(fabric, info);
  Group2 g;
  g.a = OpenMcEp(c, fabric, domain, info);
  g.b = OpenMcEp(c, fabric, domain, info);
  // The group's port is b's (a kernel socket receives a group's datagrams
  // on the port it is bound to).
  sockaddr_in bname{};
  std::memcpy(&bname, g.b.e.name.data(), std::min(sizeof(bname), g.b.e.name.size()));
  const sockaddr_in group = Group(ip, bname.sin_port);
  g.ma = Join(c, g.a, group);
  g.mb = Join(c, g.b, group);
  return g;
}

// a sends 8 bytes to the group (fi_sendmsg with FI_MULTICAST).
void SendToGroup(Ctx& c, const Group2& g, char fill) {
  char* sbuf = c.Buf(8, fill);
  iovec iov{sbuf, 8};
  fi_msg msg{};
  msg.msg_iov = &iov;
  msg.iov_count = 1;
  msg.addr = fi_mc_addr(g.ma);
  c.Post("fi_sendmsg(FI_MULTICAST)", [&] { return fi_sendmsg(g.a.e.ep, &msg, FI_MULTICAST); });
}

CONFORMANCE_CASE(mcast_join_send_receive, kUdp) {
  Group2 g = JoinTwo(c, "239.255.77.1");
  char* rbuf = c.Buf(64);
  c.Post("fi_recv", [&] { return fi_recv(g.b.e.ep, rbuf, 64, nullptr, FI_ADDR_UNSPEC, nullptr); });
  SendToGroup(c, g, 'm');
  const Completion got = c.Wait(g.b.e.rx, "the group's datagram at b");
  CHECK(!got.error, "an error completion at b");
  CHECK(got.entry.len == 8 && std::memcmp(rbuf, "mmmmmmmm", 8) == 0, "b received other bytes");
  CHECK(got.entry.flags & FI_RECV, "no FI_RECV flag");
}

CONFORMANCE_CASE(mcast_leave_stops_delivery, kUdp) {
  Group2 g = JoinTwo(c, "239.255.77.2");
  char* rbuf = c.Buf(64);
  c.Post("fi_recv", [&] { return fi_recv(g.b.e.ep, rbuf, 64, nullptr, FI_ADDR_UNSPEC, nullptr); });
  c.Post("fi_recv", [&] { return fi_recv(g.b.e.ep, rbuf, 64, nullptr, FI_ADDR_UNSPEC, nullptr); });
  SendToGroup(c, g, '1');
  const Completion first = c.Wait(g.b.e.rx, "the group's datagram at b, joined");
  CHECK(!first.error, "an error completion at b");
  CHECK_RET(c.Close(&g.mb->fid), 0);  // b leaves
  SendToGroup(c, g, '2');
  Completion late;
  CHECK(!c.Poll(g.b.e.rx, &late, 20000), "b received after it left the group");
}

CONFORMANCE_CASE(mcast_join_not_multicast, kUdp) {
  fi_info* info = c.Info(DgramHints(c));
  fid_fabric* fabric = c.Fabric(info);
  McEp a = OpenMcEp(c, fabric, c.Domain(fabric, info), info);
  const sockaddr_in unicast = Group("10.1.2.3", htons(7000));
  fid_mc* mc = nullptr;
  const int r = fi_join(a.e.ep, &unicast, 0, &mc, nullptr);
  if (mc != nullptr && r == 0) c.Own(&mc->fid);
  CHECK_RET(r, -FI_EINVAL);
}

CONFORMANCE_CASE(tclass_label_accepted, kShm) {
  fi_info* hints = c.Hints();
  hints->tx_attr->tclass = FI_TC_LOW_LATENCY;
  Pair p = c.OpenPair(hints);
  char* rbuf = c.Buf(16);
  char* sbuf = c.Buf(16, 't');
  c.Post("fi_recv", [&] { return fi_recv(p.b.ep, rbuf, 16, nullptr, FI_ADDR_UNSPEC, nullptr); });
  c.Post("fi_send", [&] { return fi_send(p.a.ep, sbuf, 16, nullptr, p.a_to_b, nullptr); });
  const Completion got = c.Wait(p.b.rx, "the message of a low-latency endpoint");
  CHECK(!got.error && std::memcmp(rbuf, sbuf, 16) == 0, "not received intact");
}

CONFORMANCE_CASE(tclass_invalid_refused, kShm) {
  fi_info* hints = c.Hints();
  hints->domain_attr->tclass = fi_tc_dscp_set(64);  // a DSCP is 6 bits
  fi_info* none = nullptr;
  CHECK_RET(c.TryInfo(hints, &none), -FI_ENODATA);
}

}  // namespace bypass::fi::conformance
