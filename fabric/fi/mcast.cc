// fi_join / fi_mc_addr / fi_close of a multicast membership (mcast.h).
#include "fabric/fi/mcast.h"

#include <netinet/in.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "fabric/fi/coll.h"
#include "fabric/fi/common.h"
#include "fabric/fi/domain.h"
#include "fabric/fi/eq.h"
#include "fabric/fi/ep.h"
#include "fabric/fi/services.h"
#include "fabric/rdm/rdm.h"

namespace bypass::fi {

// One membership: what fi_join made, undone by fi_close.
struct Mc {
  fid_mc fid;
  Obj obj;
  Ep* ep = nullptr;  // its endpoint (the base), held through its refs
  driver::Ipv4Address group;
  uint16_t udp_port = 0;
  bool receives = false;  // joined in the engine (not FI_SEND)
  bool sends = false;     // a peer of the engine to send to (not FI_RECV)
  rdm::PeerId peer;
};
static_assert(offsetof(Mc, fid) == 0);

namespace {

// fi_mc_addr values: this tag in the high 32 bits, the membership's number
// in the endpoint in the low ones; an AV's fi_addr is never this high.
constexpr fi_addr_t kGroupTag = 0xb1fa'0000'0000'0000ull;
constexpr fi_addr_t kGroupTagMask = 0xffff'ffff'0000'0000ull;

int Fail(int err, const char* why) {
  BYPASS_FI_WARN(FI_LOG_EP_CTRL, "fi_join: %s\n", why);
  return err;
}

// Undoes JoinEngine.
void LeaveEngine(Ep* ep, const Mc* mc) {
  if (mc->receives) (void)ep->dgram->LeaveGroup(mc->group, mc->udp_port);
  if (mc->sends) (void)ep->dgram->RemovePeer(mc->peer);
}

int CloseMc(fid* f) {
  Mc* mc = As<Mc>(f, FI_CLASS_MC);
  if (mc == nullptr) return BadFid(f, FI_CLASS_MC);
  Ep* ep = mc->ep;
  {
    DomainGuard g(*ep->lock);
    LeaveEngine(ep, mc);
    std::erase(ep->groups, mc);
  }
  ep->obj.refs.fetch_sub(1);
  mc->obj.magic = Obj::kDead;
  Retire(mc);
  return 0;
}

int McControl(fid*, int, void*) { return -FI_ENOSYS; }

fi_ops g_mc_fi_ops = {
    .size = sizeof(fi_ops),
    .close = CloseMc,
    .bind = NoSysBind,
    .control = McControl,
    .ops_open = NoSysOpsOpen,
    .tostr = NoSysTostr,
    .ops_set = NoSysOpsSet,
};

// The group fi_join names, or a negative fi_errno (logged).
int ParseGroup(const void* addr, driver::Ipv4Address* group, uint16_t* port) {
  if (addr == nullptr) return Fail(-FI_EINVAL, "no address");
  sa_family_t family;
  std::memcpy(&family, addr, sizeof(family));
  if (family != AF_INET) {
    return Fail(-FI_EINVAL, "the group must be a struct sockaddr_in (AF_INET)");
  }
  sockaddr_in s;
  std::memcpy(&s, addr, sizeof(s));
  *group = driver::Ipv4Address{ntohl(s.sin_addr.s_addr)};
  *port = ntohs(s.sin_port);
  if (!group->IsMulticast()) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, "fi_join: %s is not an IPv4 multicast address (224.0.0.0/4)\n",
                   group->ToString().c_str());
    return -FI_EINVAL;
  }
  if (*port == 0) return Fail(-FI_EINVAL, "the group's sin_port is 0; name the group's UDP port");
  return 0;
}

// The checks on the endpoint before a join, as a negative fi_errno.
int CheckEp(const Ep* ep) {
  if (ep->type != FI_EP_DGRAM) return Fail(-FI_EOPNOTSUPP, "multicast is FI_EP_DGRAM's only");
  if ((ep->caps & FI_MULTICAST) == 0) {
    return Fail(-FI_EOPNOTSUPP, "the endpoint was opened without FI_MULTICAST in its caps");
  }
  if (!DeviceCarriesMulticast(ep->domain->dev->info())) {
    return Fail(-FI_EOPNOTSUPP, "this domain's device carries no multicast (fabric/fi/README.md)");
  }
  if (ep->dgram == nullptr) return Fail(-FI_EOPBADSTATE, "the endpoint is not enabled (fi_enable)");
  if (ep->eq == nullptr) return Fail(-FI_ENOEQ, "bind an EQ to the endpoint first (fi_cm(3))");
  return 0;
}

// The engine side of a membership; a negative fi_errno (logged) undoes it.
int JoinEngine(Ep* ep, Mc* mc) {
  if (mc->receives) {
    const absl::Status s = ep->dgram->JoinGroup(mc->group, mc->udp_port);
    if (!s.ok()) {
      BYPASS_FI_WARN(FI_LOG_EP_CTRL, "fi_join: %s\n", std::string(s.message()).c_str());
      switch (s.code()) {
        case absl::StatusCode::kAlreadyExists: return -FI_EALREADY;
        case absl::StatusCode::kResourceExhausted: return -FI_ENOSPC;
        case absl::StatusCode::kInvalidArgument: return -FI_EINVAL;
        default: return -FI_EADDRNOTAVAIL;  // the device could not join (a socket error)
      }
    }
  }
  if (mc->sends) {
    const absl::StatusOr<rdm::PeerId> p =
        ep->dgram->InsertPeer(rdm::Address{driver::MulticastMac(mc->group), mc->group, mc->udp_port, 0});
    if (!p.ok()) {
      mc->sends = false;
      LeaveEngine(ep, mc);
      BYPASS_FI_WARN(FI_LOG_EP_CTRL, "fi_join: %s\n", std::string(p.status().message()).c_str());
      return -FI_ENOSPC;
    }
    mc->peer = *p;
  }
  return 0;
}

}  // namespace

bool DeviceCarriesMulticast(const driver::DeviceInfo& info) {
  const std::string& d = info.driver;
  return d == "loopback" || d == "udp" || d == "shm+udp";
}

int JoinGroup(fid_ep* f, const void* addr, uint64_t flags, fid_mc** out, void* context) {
  Ep* ep = AsEp(f);
  if (ep == nullptr) return BadFid(f, FI_CLASS_EP);
  if (flags & FI_COLLECTIVE) return JoinCollective(f, addr, flags, out, context);  // coll.h
  ep = ep->base;
  if (out == nullptr) return Fail(-FI_EINVAL, "mc is null");
  if ((flags & ~(FI_SEND | FI_RECV)) != 0 || flags == (FI_SEND | FI_RECV)) {
    return Fail(-FI_EBADFLAGS, "flags are 0, FI_SEND or FI_RECV");
  }
  auto mc = std::make_unique<Mc>();
  if (int ret = ParseGroup(addr, &mc->group, &mc->udp_port); ret != 0) return ret;
  DomainGuard g(*ep->lock);
  if (int ret = CheckEp(ep); ret != 0) return ret;
  for (const Mc* other : ep->groups) {
    if (other->group == mc->group && other->udp_port == mc->udp_port) {
      return Fail(-FI_EALREADY, "the endpoint has joined this group already");
    }
  }
  mc->receives = flags != FI_SEND;
  mc->sends = flags != FI_RECV;
  if (int ret = JoinEngine(ep, mc.get()); ret != 0) return ret;
  std::memset(&mc->fid, 0, sizeof(mc->fid));
  mc->fid.fid.fclass = FI_CLASS_MC;
  mc->fid.fid.context = context;
  mc->fid.fid.ops = &g_mc_fi_ops;
  uint32_t number = 0;  // the lowest not taken
  while (std::any_of(ep->groups.begin(), ep->groups.end(),
                     [&](const Mc* m) { return m->fid.fi_addr == (kGroupTag | number); })) {
    ++number;
  }
  mc->fid.fi_addr = kGroupTag | number;
  mc->ep = ep;
  // The join is complete at once (the device needs no signalling): the
  // event says so; with no room for it nothing stays joined.
  EqEvent ev;
  ev.event = FI_JOIN_COMPLETE;
  fi_eq_entry entry{};
  entry.fid = &mc->fid.fid;
  entry.context = context;
  ev.bytes.assign(reinterpret_cast<uint8_t*>(&entry),
                  reinterpret_cast<uint8_t*>(&entry) + sizeof(entry));
  if (!EqPush(ep->eq, std::move(ev))) {
    LeaveEngine(ep, mc.get());
    return Fail(-FI_EAGAIN, "the EQ is full; read it and join again");
  }
  ep->obj.refs.fetch_add(1);
  ep->groups.push_back(mc.get());
  *out = &mc.release()->fid;
  return 0;
}

bool FindGroupPeer(const Ep* ep, fi_addr_t fa, rdm::PeerId* out) {
  if ((fa & kGroupTagMask) != kGroupTag) return false;
  for (const Mc* m : ep->groups) {
    if (m->fid.fi_addr != fa) continue;
    if (!m->sends) return false;
    *out = m->peer;
    return true;
  }
  return false;
}

}  // namespace bypass::fi
