// Address vectors (map and table): inserts (by address, service or
// symmetric ranges), removal, lookup, and the FI_AV_COMPLETE events of an
// AV bound to an EQ. An insert reaches every enabled endpoint on the AV.
#include "fabric/fi/av.h"

#include <arpa/inet.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fabric/fi/address/address.h"
#include "fabric/fi/av_shared.h"
#include "fabric/fi/coll.h"
#include "fabric/fi/domain.h"
#include "fabric/fi/info/info.h"
#include "fabric/fi/ep.h"
#include "fabric/fi/eq.h"
#include "fabric/fi/info/resolve.h"
#include "fabric/fi/services.h"
#include "fabric/rdm/rdm.h"

namespace bypass::fi {
namespace {

int AvClose(fid* f) {
  Av* av = AsAv(f);
  if (av == nullptr) return BadFid(f, FI_CLASS_AV);
  Domain* d = av->domain;
  DomainGuard g(d->lock);
  if (av->obj.refs.load() > 0) return -FI_EBUSY;
  if (av->eq != nullptr) av->eq->obj.refs.fetch_sub(1);
  av->addrs.clear();
  av->shared.reset();  // its creator unlinks the name
  d->obj.refs.fetch_sub(1);
  av->obj.magic = Obj::kDead;
  Retire(av);
  return 0;
}

int AvBind(fid* f, fid* bfid, uint64_t flags) {
  Av* av = AsAv(f);
  if (av == nullptr) return BadFid(f, FI_CLASS_AV);
  Eq* eq = AsEq(bfid);
  if (eq == nullptr) return BadFid(bfid, FI_CLASS_EQ);
  if (flags != 0) return -FI_EBADFLAGS;
  DomainGuard g(av->domain->lock);
  if (av->eq != nullptr) return -FI_EINVAL;
  av->eq = eq;
  eq->obj.refs.fetch_add(1);
  return 0;
}

int AvControl(fid* f, int, void*) {
  if (AsAv(f) == nullptr) return BadFid(f, FI_CLASS_AV);
  return -FI_ENOSYS;
}

fi_ops g_av_fi_ops = {
    .size = sizeof(fi_ops),
    .close = AvClose,
    .bind = AvBind,
    .control = AvControl,
    .ops_open = NoSysOpsOpen,
    .tostr = NoSysTostr,
    .ops_set = NoSysOpsSet,
};

// Entries [from, addrs.size()) into every enabled endpoint on the AV (a
// failure is logged: that endpoint cannot reach the address).
void WireNew(Av* av, size_t from) {
  for (size_t fa = from; fa < av->addrs.size(); ++fa) {
    if (!av->addrs[fa]) continue;
    for (Ep* ep : av->eps) {
      if (Enabled(ep)) (void)AddPeerToEp(ep, fa, *av->addrs[fa]);
    }
  }
}

// A named AV: what other processes appended since, into addrs and the
// endpoints. REQUIRES: a lock on the table.
bool SyncLocked(Av* av) {
  const size_t from = av->addrs.size();
  const bool ok = av->shared->ReadNew(&av->addrs);
  WireNew(av, from);
  return ok;
}

void SyncSharedAv(Av* av) {
  if (av == nullptr || av->shared == nullptr) return;
  SharedAvTable::Lock lock(*av->shared, false);
  (void)SyncLocked(av);
}

// FI_READ: the named AV is someone else's to change.
bool ReadOnly(const Av* av) {
  if (av->shared == nullptr || !av->shared->read_only()) return false;
  BYPASS_FI_WARN(FI_LOG_AV, "the AV was opened FI_READ: inserts and removals are refused\n");
  return true;
}

// One address into the AV and every enabled endpoint on it; its fi_addr,
// or FI_ADDR_NOTAVAIL with *err set. A named AV's table gets it first, as
// its next entry (the entries others appended are read before).
fi_addr_t InsertOne(Av* av, rdm::Address a, int* err) {
  if (a.ip.value == 0) {
    *err = FI_EINVAL;
    return FI_ADDR_NOTAVAIL;
  }
  // A MAC of zeros is not known: the engine broadcasts to the peer until
  // its answer tells the MAC; datagrams go to the broadcast MAC.
  a = LocalToDevice(av->domain, a);
  if (av->shared != nullptr) {
    SharedAvTable::Lock lock(*av->shared, true);
    if (!SyncLocked(av) || !av->shared->Append(a)) {
      *err = FI_EIO;
      return FI_ADDR_NOTAVAIL;
    }
  }
  const fi_addr_t fa = av->addrs.size();
  av->addrs.push_back(a);
  for (Ep* ep : av->eps) {
    if (!Enabled(ep)) continue;
    if (int ret = AddPeerToEp(ep, fa, a); ret != 0) {
      av->addrs.back().reset();
      *err = -ret;
      return FI_ADDR_NOTAVAIL;
    }
  }
  *err = 0;
  return fa;
}

// The addresses of one insert call that could not be inserted: index, errno.
using InsertFailures = std::vector<std::pair<size_t, int>>;

// Completes an insert: the count, or, when the AV is bound to an EQ
// (asynchronous inserts, fi_av(3)), an error event per address that failed
// (data: its index in the call) and then FI_AV_COMPLETE with the count.
int FinishInsert(Av* av, const InsertFailures& failed, size_t ok, void* context) {
  if (av->eq == nullptr) return static_cast<int>(ok);
  for (const auto& [index, err] : failed) {
    char message[96];
    std::snprintf(message, sizeof(message), "address %zu of the insert: %s", index,
                  std::strerror(err));
    if (!EqPushError(av->eq, &av->fid.fid, context, index, err, err, message)) return -FI_EAGAIN;
  }
  EqEvent ev;
  ev.event = FI_AV_COMPLETE;
  fi_eq_entry entry{};
  entry.fid = &av->fid.fid;
  entry.context = context;
  entry.data = ok;
  ev.bytes.assign(reinterpret_cast<uint8_t*>(&entry),
                  reinterpret_cast<uint8_t*>(&entry) + sizeof(entry));
  if (!EqPush(av->eq, std::move(ev))) return -FI_EAGAIN;
  return 0;
}

int AvInsert(fid_av* f, const void* addr, size_t count, fi_addr_t* fi_addr, uint64_t flags,
             void* context) {
  Av* av = AsAv(f);
  if (av == nullptr) return BadFid(f, FI_CLASS_AV);
  if (addr == nullptr && count > 0) return -FI_EINVAL;
  if ((flags & ~static_cast<uint64_t>(FI_MORE | FI_SYNC_ERR)) != 0) return -FI_EBADFLAGS;
  if ((flags & FI_SYNC_ERR) && av->eq != nullptr) return -FI_EINVAL;
  int* errors = (flags & FI_SYNC_ERR) ? static_cast<int*>(context) : nullptr;
  if (ReadOnly(av)) return -FI_EACCES;
  DomainGuard g(av->domain->lock);
  size_t ok = 0;
  InsertFailures failed;
  for (size_t i = 0; i < count; ++i) {
    const auto* bytes = static_cast<const uint8_t*>(addr) + i * kAddrLen;
    std::optional<rdm::Address> a = FromSockaddr(bytes, kAddrLen);
    int err = FI_EINVAL;
    fi_addr_t fa = FI_ADDR_NOTAVAIL;
    if (a) fa = InsertOne(av, *a, &err);
    if (fa != FI_ADDR_NOTAVAIL) ++ok;
    if (fa == FI_ADDR_NOTAVAIL) failed.emplace_back(i, err);
    if (fi_addr != nullptr) fi_addr[i] = fa;
    if (errors != nullptr) errors[i] = -err;
  }
  return FinishInsert(av, failed, ok, context);
}

// node: dotted IPv4 or a host name; service: a UDP port number or a UDP
// service name (fi_av(3)); resolved as fi_getinfo resolves them.
std::optional<rdm::Address> Resolve(const char* node, const char* service) {
  if (node == nullptr || service == nullptr) return std::nullopt;
  internal::NodeService ns;
  const std::string err = internal::ResolveNodeService(node, service, false, &ns);
  if (!err.empty() || !ns.ip || !ns.port || *ns.port == 0) {
    BYPASS_FI_WARN(FI_LOG_AV, "cannot insert %s:%s: %s\n", node, service,
                   err.empty() ? "port 0 names no endpoint" : err.c_str());
    return std::nullopt;
  }
  rdm::Address a;
  a.ip.value = *ns.ip;
  a.udp_port = *ns.port;
  return a;
}

int AvInsertSvc(fid_av* f, const char* node, const char* service, fi_addr_t* fi_addr,
                uint64_t flags, void* context) {
  Av* av = AsAv(f);
  if (av == nullptr) return BadFid(f, FI_CLASS_AV);
  if (node == nullptr || service == nullptr) return -FI_EINVAL;
  if ((flags & ~static_cast<uint64_t>(FI_MORE)) != 0) return -FI_EBADFLAGS;
  if (ReadOnly(av)) return -FI_EACCES;
  std::optional<rdm::Address> a = Resolve(node, service);
  DomainGuard g(av->domain->lock);
  int err = FI_EINVAL;
  fi_addr_t fa = a ? InsertOne(av, *a, &err) : FI_ADDR_NOTAVAIL;
  if (fi_addr != nullptr) *fi_addr = fa;
  InsertFailures failed;
  if (fa == FI_ADDR_NOTAVAIL) failed.emplace_back(0, err);
  return FinishInsert(av, failed, fa != FI_ADDR_NOTAVAIL ? 1 : 0, context);
}

// nodecnt consecutive IPv4 addresses from node times svccnt consecutive
// ports from service, node-major (fi_av(3)).
int AvInsertSym(fid_av* f, const char* node, size_t nodecnt, const char* service, size_t svccnt,
                fi_addr_t* fi_addr, uint64_t flags, void* context) {
  Av* av = AsAv(f);
  if (av == nullptr) return BadFid(f, FI_CLASS_AV);
  if ((flags & ~static_cast<uint64_t>(FI_MORE)) != 0) return -FI_EBADFLAGS;
  if (ReadOnly(av)) return -FI_EACCES;
  std::optional<rdm::Address> base = Resolve(node, service);
  if (!base || nodecnt == 0 || svccnt == 0) return -FI_EINVAL;
  if (base->udp_port + svccnt - 1 > 65535) return -FI_EINVAL;
  DomainGuard g(av->domain->lock);
  size_t ok = 0, i = 0;
  InsertFailures failed;
  for (size_t n = 0; n < nodecnt; ++n) {
    for (size_t s = 0; s < svccnt; ++s, ++i) {
      rdm::Address a = *base;
      a.ip.value += static_cast<uint32_t>(n);
      a.udp_port = static_cast<uint16_t>(a.udp_port + s);
      int err = 0;
      const fi_addr_t fa = InsertOne(av, a, &err);
      if (fa != FI_ADDR_NOTAVAIL) ++ok;
      if (fa == FI_ADDR_NOTAVAIL) failed.emplace_back(i, err);
      if (fi_addr != nullptr) fi_addr[i] = fa;
    }
  }
  return FinishInsert(av, failed, ok, context);
}

int AvRemove(fid_av* f, fi_addr_t* fi_addr, size_t count, uint64_t flags) {
  Av* av = AsAv(f);
  if (av == nullptr) return BadFid(f, FI_CLASS_AV);
  if (fi_addr == nullptr && count > 0) return -FI_EINVAL;
  if (flags != 0) return -FI_EBADFLAGS;
  if (ReadOnly(av)) return -FI_EACCES;
  DomainGuard g(av->domain->lock);
  SyncSharedAv(av);
  for (size_t i = 0; i < count; ++i) {
    if (fi_addr[i] >= av->addrs.size() || !av->addrs[fi_addr[i]]) return -FI_EINVAL;
  }
  if (av->shared != nullptr) {
    // Gone from the table for processes that read it later; those that
    // have the entry keep it until they remove it themselves.
    SharedAvTable::Lock lock(*av->shared, true);
    for (size_t i = 0; i < count; ++i) (void)av->shared->MarkRemoved(fi_addr[i]);
  }
  int ret = 0;
  for (size_t i = 0; i < count; ++i) {
    const fi_addr_t fa = fi_addr[i];
    av->addrs[fa].reset();
    for (Ep* ep : av->eps) {
      if (!Enabled(ep) || fa >= ep->peers.peer_of.size()) continue;
      DomainGuard eg(*ep->lock);  // a slot of a scalable endpoint has its own
      FinishBeforeRemove(ep, fa);
      const rdm::PeerId p = ep->peers.peer_of[fa];
      ep->peers.peer_of[fa] = rdm::PeerId{};
      const uint32_t slot = p.slot();
      if (slot < ep->peers.addr_of.size()) ep->peers.addr_of[slot] = FI_ADDR_NOTAVAIL;
      const absl::Status s =
          ep->rdm != nullptr ? ep->rdm->RemovePeer(p) : ep->dgram->RemovePeer(p);
      if (!s.ok()) {
        // The AV forgets it either way; the engine keeps the session.
        BYPASS_FI_WARN(FI_LOG_AV, "the engine kept peer %u: %s\n", p.value,
                       std::string(s.message()).c_str());
        ret = FromStatus(s);
      }
    }
  }
  return ret == -FI_ENOSYS ? 0 : ret;
}

int AvLookup(fid_av* f, fi_addr_t fa, void* addr, size_t* addrlen) {
  Av* av = AsAv(f);
  if (av == nullptr) return BadFid(f, FI_CLASS_AV);
  if (addrlen == nullptr || (addr == nullptr && *addrlen > 0)) return -FI_EINVAL;
  DomainGuard g(av->domain->lock);
  if (fa >= av->addrs.size()) SyncSharedAv(av);
  if (fa >= av->addrs.size() || !av->addrs[fa]) return -FI_EINVAL;
  const sockaddr_in s = ToSockaddr(*av->addrs[fa]);
  std::memcpy(addr, &s, std::min(*addrlen, kAddrLen));
  *addrlen = kAddrLen;
  return 0;
}

const char* AvStraddr(fid_av* f, const void* addr, char* buf, size_t* len) {
  if (AsAv(f) == nullptr || buf == nullptr || len == nullptr) return nullptr;
  std::optional<rdm::Address> a = FromSockaddr(addr, kAddrLen);
  char text[96];
  if (a) {
    std::snprintf(text, sizeof(text), "fi_sockaddr_in://%s:%u", a->ip.ToString().c_str(),
                  a->udp_port);
  } else {
    std::snprintf(text, sizeof(text), "fi_addr_format_unknown");
  }
  const size_t need = std::strlen(text) + 1;
  if (*len > 0) std::snprintf(buf, *len, "%s", text);
  *len = need;
  return buf;
}

fi_ops_av g_av_ops = {
    .size = sizeof(fi_ops_av),
    .insert = AvInsert,
    .insertsvc = AvInsertSvc,
    .insertsym = AvInsertSym,
    .remove = AvRemove,
    .lookup = AvLookup,
    .straddr = AvStraddr,
    .av_set = OpenAvSet,  // coll.h
};

}  // namespace

int OpenAv(fid_domain* domain, fi_av_attr* attr, fid_av** out, void* context) {
  Domain* d = AsDomain(domain);
  if (d == nullptr) return BadFid(domain, FI_CLASS_DOMAIN);
  if (attr == nullptr || out == nullptr) return -FI_EINVAL;
  const int raw_type = RawEnum(attr->type);
  if (raw_type != FI_AV_UNSPEC && raw_type != FI_AV_MAP && raw_type != FI_AV_TABLE) {
    return -FI_EINVAL;
  }
  fi_av_type type = static_cast<fi_av_type>(raw_type);
  if (type == FI_AV_UNSPEC) type = d->av_type == FI_AV_UNSPEC ? FI_AV_TABLE : d->av_type;
  if (d->av_type != FI_AV_UNSPEC && type != d->av_type) return -FI_EINVAL;
  // fi_rx_addr's context index: the engine's ports are 16 bits.
  if (attr->rx_ctx_bits < 0 || attr->rx_ctx_bits > kMaxRxCtxBits) {
    BYPASS_FI_WARN(FI_LOG_AV, "rx_ctx_bits %d: 0 to %d (a receive context is a UDP port)\n",
                   attr->rx_ctx_bits, kMaxRxCtxBits);
    return -FI_EINVAL;
  }
  if ((attr->flags & ~static_cast<uint64_t>(FI_EVENT | FI_READ | FI_SYMMETRIC)) != 0) {
    return -FI_EBADFLAGS;
  }
  const bool read_only = (attr->flags & FI_READ) != 0;
  if (read_only && attr->name == nullptr) {
    BYPASS_FI_WARN(FI_LOG_AV, "fi_av_open: FI_READ opens a named AV; give attr->name\n");
    return -FI_EINVAL;
  }
  std::unique_ptr<SharedAvTable> shared;
  if (attr->name != nullptr) {
    if (int ret = SharedAvTable::Open(attr->name, read_only, &shared); ret != 0) return ret;
  }
  auto av = std::make_unique<Av>();
  std::memset(&av->fid, 0, sizeof(av->fid));
  av->fid.fid.fclass = FI_CLASS_AV;
  av->fid.fid.context = context;
  av->fid.fid.ops = &g_av_fi_ops;
  av->fid.ops = &g_av_ops;
  av->domain = d;
  av->type = type;
  av->rx_ctx_bits = attr->rx_ctx_bits;
  av->addrs.reserve(attr->count);
  av->shared = std::move(shared);
  if (av->shared != nullptr) SyncSharedAv(av.get());  // what its other users inserted
  d->obj.refs.fetch_add(1);
  *out = &av.release()->fid;
  return 0;
}

bool FindEntryPeer(Ep* ep, fi_addr_t fa, rdm::PeerId* out) {
  if (ep->peers.Find(fa, out)) return true;
  if (ep->av == nullptr || ep->av->shared == nullptr) return false;
  SyncSharedAv(ep->av);
  return ep->peers.Find(fa, out);
}

fi_addr_t AddrOfPeer(Ep* ep, rdm::PeerId p) {
  fi_addr_t fa = ep->peers.AddrOf(p);
  if (fa != FI_ADDR_NOTAVAIL || ep->av == nullptr || ep->av->shared == nullptr) return fa;
  SyncSharedAv(ep->av);  // perhaps another process inserted it
  return ep->peers.AddrOf(p);
}

std::optional<rdm::Address> AvAddress(Av* av, fi_addr_t fa) {
  if (fa >= av->addrs.size()) SyncSharedAv(av);
  if (fa >= av->addrs.size()) return std::nullopt;
  return av->addrs[fa];
}

}  // namespace bypass::fi
