// fi_domain(3) and fi_endpoint(3): ep_cnt, close ordering, bind and enable
// rules, op_flags from the attributes, FI_SETOPSFLAG, names, iov_limit,
// inject_size, send to self, several endpoints per domain.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/fi_trigger.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "fabric/fi/conformance/conformance.h"

namespace bypass::fi::conformance {
namespace {

// A message from `from` to `to` arrives intact (both sides complete).
void Exchange(Ctx& c, Ep& from, fi_addr_t dest, Ep& to, size_t len) {
  std::vector<char> out(len), in(len + 1, 0);
  for (size_t i = 0; i < len; ++i) out[i] = static_cast<char>('a' + i % 26);
  int rctx = 0, sctx = 0;
  CHECK_RET(fi_recv(to.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, &rctx), 0);
  c.Post("fi_send", [&] { return fi_send(from.ep, out.data(), len, nullptr, dest, &sctx); });
  const Completion s = c.Wait(from.tx, "the send");
  CHECK(!s.error, "the send failed: " << Err(-s.err.err));
  CHECK(s.entry.op_context == &sctx, "the send's completion has another op_context");
  const Completion r = c.Wait(to.rx, "the receive");
  CHECK(!r.error, "the receive failed: " << Err(-r.err.err));
  CHECK(r.entry.op_context == &rctx, "the receive's completion has another op_context");
  CHECK(r.entry.len == len, "received " << r.entry.len << " bytes, sent " << len);
  CHECK(std::memcmp(in.data(), out.data(), len) == 0, "the received bytes differ from the sent ones");
}

struct Bare {
  fi_info* info;
  fid_fabric* fabric;
  fid_domain* domain;
};

Bare OpenDomain(Ctx& c, fi_info* hints) {
  Bare b;
  b.info = c.Info(hints);
  b.fabric = c.Fabric(b.info);
  b.domain = c.Domain(b.fabric, b.info);
  return b;
}

// An endpoint opened (not enabled) with `info`'s tx/rx op_flags.
fid_ep* RawEp(Ctx& c, fid_domain* domain, fi_info* info) {
  fid_ep* ep = nullptr;
  CHECK_RET(fi_endpoint(domain, info, &ep, nullptr), 0);
  c.Own(&ep->fid);
  return ep;
}

// Binds and enables `ep` (opened by hand), its tx CQ with tx_flags.
Ep Finish(Ctx& c, fid_domain* domain, fi_info* info, fid_ep* ep, uint64_t tx_flags) {
  EpOpts o;
  o.opened = ep;
  o.tx_bind = tx_flags;
  return c.OpenEp(domain, info, o);
}

// A plain fi_send on an endpoint bound with FI_SELECTIVE_COMPLETION whose
// transmit op_flags carry FI_COMPLETION is reported.
void SelectiveSendCompletes(Ctx& c, Ep& a) {
  fi_addr_t self = c.Insert(a.av, a.name);
  char* in = c.Buf(8);
  char* out = c.Buf(8, 'x');
  int rctx = 0, sctx = 0;
  CHECK_RET(fi_recv(a.ep, in, 8, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
  c.Post("fi_send", [&] { return fi_send(a.ep, out, 8, nullptr, self, &sctx); });
  const Completion s = c.Wait(a.tx, "the send (FI_COMPLETION from the op_flags)");
  CHECK(!s.error && s.entry.op_context == &sctx, "the send's completion is wrong");
  CHECK(!c.Wait(a.rx, "the receive").error, "the receive failed");
}

}  // namespace

// "ep_cnt: the total number of endpoints supported by the domain": that
// many (up to 8) open and enable.
CONFORMANCE_CASE(domain_ep_cnt_endpoints, kShm) {
  Bare b = OpenDomain(c, c.Hints());
  const size_t n = std::min<size_t>(b.info->domain_attr->ep_cnt, 8);
  CHECK(n >= 1, "ep_cnt is 0");
  for (size_t i = 0; i < n; ++i) c.OpenEp(b.domain, b.info);
}

// Several endpoints of one domain exchange messages (ep_cnt says so).
CONFORMANCE_CASE(ep_several_per_domain, kShm) {
  fi_info* probe = c.Info(c.Hints());
  CHECK(probe->domain_attr->ep_cnt >= 2,
        "ep_cnt is " << probe->domain_attr->ep_cnt << ": the domain reports room for one endpoint");
  Pair p = c.OpenPair(c.Hints(), {}, /*same_domain=*/true);
  Exchange(c, p.a, p.a_to_b, p.b, 100);
  Exchange(c, p.b, p.b_to_a, p.a, 100);
}

// "there must be no opened ... associated with the domain ... -FI_EBUSY":
// a domain with an open CQ, AV, counter or MR does not close.
CONFORMANCE_CASE(domain_close_busy, kShm) {
  Bare b = OpenDomain(c, c.Hints(FI_MSG | FI_RMA));
  fid_cq* cq = c.Cq(b.domain, FI_CQ_FORMAT_CONTEXT);
  CHECK_RET(fi_close(&b.domain->fid), -FI_EBUSY);
  CHECK_RET(c.Close(&cq->fid), 0);
  fid_av* av = c.Av(b.domain, FI_AV_TABLE);
  CHECK_RET(fi_close(&b.domain->fid), -FI_EBUSY);
  CHECK_RET(c.Close(&av->fid), 0);
  fid_cntr* cntr = c.Cntr(b.domain);
  CHECK_RET(fi_close(&b.domain->fid), -FI_EBUSY);
  CHECK_RET(c.Close(&cntr->fid), 0);
  static char buf[64];
  fid_mr* mr = nullptr;
  CHECK_RET(fi_mr_reg(b.domain, buf, sizeof buf, FI_REMOTE_WRITE, 0, 1, 0, &mr, nullptr), 0);
  c.Own(&mr->fid);
  CHECK_RET(fi_close(&b.domain->fid), -FI_EBUSY);
  CHECK_RET(c.Close(&mr->fid), 0);
  CHECK_RET(c.Close(&b.domain->fid), 0);
  CHECK_RET(c.Close(&b.fabric->fid), 0);
}

// A fabric with an open domain does not close.
CONFORMANCE_CASE(fabric_close_busy, kShm) {
  Bare b = OpenDomain(c, c.Hints());
  CHECK_RET(fi_close(&b.fabric->fid), -FI_EBUSY);
  CHECK_RET(c.Close(&b.domain->fid), 0);
  CHECK_RET(c.Close(&b.fabric->fid), 0);
}

// "Endpoints making use of ... address vectors must be bound to them
// before being enabled": an RDM endpoint with no AV does not enable.
CONFORMANCE_CASE(ep_enable_needs_av, kShm) {
  Bare b = OpenDomain(c, c.Hints());
  fid_ep* ep = RawEp(c, b.domain, b.info);
  fid_cq* tx = c.Cq(b.domain, FI_CQ_FORMAT_CONTEXT);
  fid_cq* rx = c.Cq(b.domain, FI_CQ_FORMAT_CONTEXT);
  CHECK_RET(fi_ep_bind(ep, &tx->fid, FI_TRANSMIT), 0);
  CHECK_RET(fi_ep_bind(ep, &rx->fid, FI_RECV), 0);
  const int r = fi_enable(ep);
  CHECK(r < 0, "fi_enable without an AV returned " << Err(r) << ", not an error (-FI_ENOAV)");
}

// ... nor one with no completion queue (-FI_ENOCQ).
CONFORMANCE_CASE(ep_enable_needs_cq, kShm) {
  Bare b = OpenDomain(c, c.Hints());
  fid_ep* ep = RawEp(c, b.domain, b.info);
  fid_av* av = c.Av(b.domain, FI_AV_TABLE);
  CHECK_RET(fi_ep_bind(ep, &av->fid, 0), 0);
  const int r = fi_enable(ep);
  CHECK(r < 0, "fi_enable without CQs returned " << Err(r) << ", not an error (-FI_ENOCQ)");
}

// A CQ bound after fi_enable is refused (bindings come before enable).
CONFORMANCE_CASE(ep_bind_after_enable, kShm) {
  Bare b = OpenDomain(c, c.Hints());
  Ep e = c.OpenEp(b.domain, b.info);
  fid_cq* late = c.Cq(b.domain, FI_CQ_FORMAT_CONTEXT);
  const int r = fi_ep_bind(e.ep, &late->fid, FI_TRANSMIT);
  CHECK(r < 0, "fi_ep_bind of a CQ after fi_enable returned " << Err(r));
}

// A CQ bound to an endpoint does not close (-FI_EBUSY), nor its AV.
CONFORMANCE_CASE(ep_bound_objects_close_busy, kShm) {
  Bare b = OpenDomain(c, c.Hints());
  Ep e = c.OpenEp(b.domain, b.info);
  CHECK_RET(fi_close(&e.tx->fid), -FI_EBUSY);
  CHECK_RET(fi_close(&e.av->fid), -FI_EBUSY);
  CHECK_RET(fi_close(&b.domain->fid), -FI_EBUSY);
  CHECK_RET(c.Close(&e.ep->fid), 0);
  CHECK_RET(c.Close(&e.tx->fid), 0);
  CHECK_RET(c.Close(&e.av->fid), 0);
}

// tx_attr->op_flags are the default flags of calls that take none: with
// FI_SELECTIVE_COMPLETION, FI_COMPLETION there makes fi_send complete.
CONFORMANCE_CASE(ep_tx_op_flags_completion, kShm) {
  fi_info* h = c.Hints();
  Bare b = OpenDomain(c, h);
  b.info->tx_attr->op_flags = FI_COMPLETION;
  fid_ep* ep = RawEp(c, b.domain, b.info);
  Ep a = Finish(c, b.domain, b.info, ep, FI_SELECTIVE_COMPLETION);
  SelectiveSendCompletes(c, a);
}

// FI_GETOPSFLAG answers the op_flags given in tx_attr and rx_attr.
CONFORMANCE_CASE(ep_getopsflag, kShm) {
  Bare b = OpenDomain(c, c.Hints());
  b.info->tx_attr->op_flags = FI_COMPLETION | FI_TRANSMIT_COMPLETE;
  b.info->rx_attr->op_flags = FI_COMPLETION;
  fid_ep* ep = RawEp(c, b.domain, b.info);
  uint64_t flags = FI_TRANSMIT;
  CHECK_RET(fi_control(&ep->fid, FI_GETOPSFLAG, &flags), 0);
  CHECK((flags & (FI_COMPLETION | FI_TRANSMIT_COMPLETE)) == (FI_COMPLETION | FI_TRANSMIT_COMPLETE),
        "FI_GETOPSFLAG(FI_TRANSMIT) answers 0x" << std::hex << flags);
  flags = FI_RECV;
  CHECK_RET(fi_control(&ep->fid, FI_GETOPSFLAG, &flags), 0);
  CHECK((flags & FI_COMPLETION) != 0, "FI_GETOPSFLAG(FI_RECV) answers 0x" << std::hex << flags);
}

// fi_endpoint(3) FI_OPT_FI_HMEM_P2P: fi_getopt answers the mode in force
// (FI_HMEM_P2P_ENABLED by default), fi_setopt takes the modes the provider
// can hold and answers -FI_EOPNOTSUPP for one it cannot; an int-sized
// optlen is needed.
CONFORMANCE_CASE(ep_opt_hmem_p2p, kShm) {
  Bare b = OpenDomain(c, c.Hints());
  fid_ep* ep = RawEp(c, b.domain, b.info);
  int mode = -1;
  size_t len = sizeof mode;
  CHECK_RET(fi_getopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_FI_HMEM_P2P, &mode, &len), 0);
  CHECK(len == sizeof(int) && mode == FI_HMEM_P2P_ENABLED,
        "the default mode is " << mode << " (optlen " << len << ")");
  mode = FI_HMEM_P2P_DISABLED;
  CHECK_RET(fi_setopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_FI_HMEM_P2P, &mode, sizeof mode), 0);
  mode = -1;
  len = sizeof mode;
  CHECK_RET(fi_getopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_FI_HMEM_P2P, &mode, &len), 0);
  CHECK(mode == FI_HMEM_P2P_DISABLED, "fi_getopt answers " << mode << " after DISABLED was set");
  mode = FI_HMEM_P2P_REQUIRED;
  const int r = fi_setopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_FI_HMEM_P2P, &mode, sizeof mode);
  CHECK(r == 0 || r == -FI_EOPNOTSUPP, "FI_HMEM_P2P_REQUIRED answered " << Err(r));
}

// fi_endpoint(3): FI_OPT_XPU_TRIGGER applies to fi_getopt only, and a
// provider without XPU triggers for the device answers -FI_EOPNOTSUPP;
// FI_OPT_BUFFERED_MIN and LIMIT need FI_BUFFERED_RECV (fi_getopt gives the
// threshold of an endpoint that has it; without it the option is not
// there: -FI_ENOPROTOOPT).
CONFORMANCE_CASE(ep_opt_xpu_and_buffered, kShm) {
  Bare b = OpenDomain(c, c.Hints());
  fid_ep* ep = RawEp(c, b.domain, b.info);
  fi_trigger_var vars[2] = {};
  fi_trigger_xpu xpu{};
  xpu.count = 2;
  xpu.iface = FI_HMEM_SYSTEM;
  xpu.var = vars;
  size_t len = sizeof xpu;
  CHECK_RET(fi_getopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_XPU_TRIGGER, &xpu, &len), -FI_EOPNOTSUPP);
  size_t v = 0;
  len = sizeof v;
  CHECK_RET(fi_getopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_BUFFERED_MIN, &v, &len), -FI_ENOPROTOOPT);
  CHECK_RET(fi_setopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_BUFFERED_LIMIT, &v, sizeof v),
            -FI_ENOPROTOOPT);
}

// fi_ep_alias: "An alias EP differs from its parent endpoint only by its
// default data transfer flags": on an endpoint bound with
// FI_SELECTIVE_COMPLETION, a send through an alias made with FI_TRANSMIT |
// FI_COMPLETION is reported, one through the parent is not; both arrive.
CONFORMANCE_CASE(ep_alias_tx_flags, kShm) {
  Bare b = OpenDomain(c, c.Hints());
  fid_ep* ep = RawEp(c, b.domain, b.info);
  Ep a = Finish(c, b.domain, b.info, ep, FI_SELECTIVE_COMPLETION);
  fid_ep* alias = nullptr;
  CHECK_RET(fi_ep_alias(a.ep, &alias, FI_TRANSMIT | FI_COMPLETION), 0);
  c.Own(&alias->fid);
  const fi_addr_t self = c.Insert(a.av, a.name);
  char* in = c.Buf(16);
  char* out = c.Buf(8, 'a');
  int rctx[2], sctx[2];
  for (int& r : rctx) CHECK_RET(fi_recv(a.ep, in + (&r - rctx) * 8, 8, nullptr, FI_ADDR_UNSPEC, &r), 0);
  c.Post("fi_send", [&] { return fi_send(a.ep, out, 8, nullptr, self, &sctx[0]); });
  c.Post("fi_send", [&] { return fi_send(alias, out, 8, nullptr, self, &sctx[1]); });
  CHECK(!c.Wait(a.rx, "the first receive").error, "a receive failed");
  CHECK(!c.Wait(a.rx, "the second receive").error, "a receive failed");
  const Completion s = c.Wait(a.tx, "the alias's send");
  CHECK(!s.error && s.entry.op_context == &sctx[1],
        "the completion is not the alias's send (the parent's has no FI_COMPLETION)");
  Completion extra;
  CHECK(!c.Poll(a.tx, &extra, 200), "the parent's send (no FI_COMPLETION) was reported");
}

// fi_ep_alias: the flags carry FI_TRANSMIT or FI_RECV, not both, not
// neither; "All allocated aliases must be closed for the underlying
// endpoint to be released" (its fi_close: -FI_EBUSY until then).
CONFORMANCE_CASE(ep_alias_flags_and_close, kShm) {
  Bare b = OpenDomain(c, c.Hints());
  fid_ep* ep = RawEp(c, b.domain, b.info);
  Ep a = Finish(c, b.domain, b.info, ep, 0);
  fid_ep* alias = nullptr;
  CHECK_RET(fi_ep_alias(a.ep, &alias, FI_TRANSMIT | FI_RECV | FI_COMPLETION), -FI_EINVAL);
  CHECK_RET(fi_ep_alias(a.ep, &alias, FI_COMPLETION), -FI_EINVAL);
  CHECK_RET(fi_ep_alias(a.ep, &alias, FI_RECV | FI_COMPLETION), 0);
  CHECK_RET(fi_close(&a.ep->fid), -FI_EBUSY);
  CHECK_RET(fi_close(&alias->fid), 0);
  CHECK_RET(c.Close(&a.ep->fid), 0);
}

// "FI_SETOPSFLAG ... override the previous transmit and receive
// attributes": FI_COMPLETION set this way makes fi_send complete.
CONFORMANCE_CASE(ep_setopsflag, kShm) {
  Bare b = OpenDomain(c, c.Hints());
  fid_ep* ep = RawEp(c, b.domain, b.info);
  uint64_t flags = FI_TRANSMIT | FI_COMPLETION;
  CHECK_RET(fi_control(&ep->fid, FI_SETOPSFLAG, &flags), 0);
  Ep a = Finish(c, b.domain, b.info, ep, FI_SELECTIVE_COMPLETION);
  SelectiveSendCompletes(c, a);
}

// rx_attr->op_flags FI_MULTI_RECV: a plain fi_recv buffer takes several
// messages, each completion pointing into it.
CONFORMANCE_CASE(ep_rx_op_flags_multi_recv, kShm) {
  fi_info* h = c.Hints(FI_MSG | FI_MULTI_RECV);
  Bare b = OpenDomain(c, h);
  b.info->rx_attr->op_flags = FI_MULTI_RECV;
  fid_ep* ep = RawEp(c, b.domain, b.info);
  size_t min = 64;
  CHECK_RET(fi_setopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof min), 0);
  Ep a = Finish(c, b.domain, b.info, ep, 0);
  fi_addr_t self = c.Insert(a.av, a.name);
  static char buf[4096];
  char* m1 = c.Buf(100, '1');
  char* m2 = c.Buf(100, '2');
  int rctx = 0;
  CHECK_RET(fi_recv(a.ep, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
  c.Post("fi_send 1", [&] { return fi_send(a.ep, m1, 100, nullptr, self, nullptr); });
  c.Post("fi_send 2", [&] { return fi_send(a.ep, m2, 100, nullptr, self, nullptr); });
  for (int i = 0; i < 2; ++i) {
    const Completion r = c.Wait(a.rx, "message " + std::to_string(i + 1) + " into the FI_MULTI_RECV buffer");
    CHECK(!r.error, "receive " << i << " failed: " << Err(-r.err.err));
    const char* at = static_cast<const char*>(r.entry.buf);
    CHECK(at >= buf && at + r.entry.len <= buf + sizeof buf, "a completion's buf is outside the posted buffer");
    CHECK(r.entry.len == 100, "a completion's len is " << r.entry.len);
  }
}

// fi_getname with a short buffer: -FI_ETOOSMALL and the size needed.
CONFORMANCE_CASE(ep_getname_toosmall, kShm) {
  Bare b = OpenDomain(c, c.Hints());
  Ep e = c.OpenEp(b.domain, b.info);
  char small[1];
  size_t len = sizeof small;
  CHECK_RET(fi_getname(&e.ep->fid, small, &len), -FI_ETOOSMALL);
  CHECK(len == e.name.size(), "fi_getname says it needs " << len << " bytes; the name is " << e.name.size());
}

// fi_setname before enable: fi_getname then answers that address.
CONFORMANCE_CASE(ep_setname_getname, kTcp) {
  fi_info* h = c.Hints();
  h->addr_format = FI_SOCKADDR_IN;
  Bare b = OpenDomain(c, h);
  fid_ep* ep = RawEp(c, b.domain, b.info);
  sockaddr_in want{};
  want.sin_family = AF_INET;
  want.sin_port = htons(47211);
  want.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK_RET(fi_setname(&ep->fid, &want, sizeof want), 0);
  Ep e = Finish(c, b.domain, b.info, ep, 0);
  CHECK(e.name.size() >= sizeof(sockaddr_in), "fi_getname answers " << e.name.size() << " bytes");
  sockaddr_in got;
  std::memcpy(&got, e.name.data(), sizeof got);
  CHECK(got.sin_family == AF_INET && got.sin_port == want.sin_port && got.sin_addr.s_addr == want.sin_addr.s_addr,
        "fi_getname does not answer the address given to fi_setname");
}

// iov_limit: a send and a receive of iov_limit buffers (up to 4) gather
// and scatter.
CONFORMANCE_CASE(ep_iov_limit_honoured, kShm) {
  Pair p = c.OpenPair(c.Hints());
  const size_t n = std::min<size_t>({p.a.info->tx_attr->iov_limit, p.a.info->rx_attr->iov_limit, 4});
  CHECK(n >= 1, "iov_limit is 0");
  std::vector<std::vector<char>> out(n, std::vector<char>(10)), in(n, std::vector<char>(10));
  std::vector<iovec> siov(n), riov(n);
  for (size_t i = 0; i < n; ++i) {
    std::fill(out[i].begin(), out[i].end(), static_cast<char>('A' + i));
    siov[i] = {out[i].data(), out[i].size()};
    riov[i] = {in[i].data(), in[i].size()};
  }
  CHECK_RET(fi_recvv(p.b.ep, riov.data(), nullptr, n, FI_ADDR_UNSPEC, nullptr), 0);
  c.Post("fi_sendv", [&] { return fi_sendv(p.a.ep, siov.data(), nullptr, n, p.a_to_b, nullptr); });
  CHECK(!c.Wait(p.a.tx, "the fi_sendv").error, "the fi_sendv failed");
  const Completion r = c.Wait(p.b.rx, "the fi_recvv");
  CHECK(!r.error && r.entry.len == 10 * n, "the vectored receive got " << r.entry.len << " bytes");
  CHECK(in == out, "the scattered bytes differ from the gathered ones");
}

// More buffers than iov_limit are refused, not silently used.
CONFORMANCE_CASE(ep_iov_limit_exceeded, kShm) {
  Pair p = c.OpenPair(c.Hints());
  const size_t n = p.a.info->tx_attr->iov_limit + 1;
  std::vector<char> data(n);
  std::vector<iovec> iov(n);
  for (size_t i = 0; i < n; ++i) iov[i] = {&data[i], 1};
  const ssize_t r = fi_sendv(p.a.ep, iov.data(), nullptr, n, p.a_to_b, nullptr);
  CHECK(r < 0 && r != -FI_EAGAIN, "fi_sendv with iov_limit+1 buffers returned " << Err(r));
}

// inject_size bytes inject; one byte more is refused.
CONFORMANCE_CASE(ep_inject_size, kShm) {
  Pair p = c.OpenPair(c.Hints());
  const size_t n = p.a.info->tx_attr->inject_size;
  CHECK(n > 0, "inject_size is 0");
  std::vector<char> out(n + 1, 'i'), in(n + 1, 0);
  CHECK_RET(fi_recv(p.b.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  c.Post("fi_inject(inject_size)", [&] { return fi_inject(p.a.ep, out.data(), n, p.a_to_b); });
  const Completion r = c.Wait(p.b.rx, "the injected message");
  CHECK(!r.error && r.entry.len == n, "the injected message arrived with " << r.entry.len << " bytes");
  const ssize_t big = fi_inject(p.a.ep, out.data(), n + 1, p.a_to_b);
  CHECK(big < 0 && big != -FI_EAGAIN, "fi_inject of inject_size+1 bytes returned " << Err(big));
}

// max_msg_size is enforced: a send one byte longer is refused (the buffer
// is reserved, never touched, so a provider that accepts it reads zeros).
CONFORMANCE_CASE(ep_max_msg_size_enforced, kShm) {
  Pair p = c.OpenPair(c.Hints());
  const size_t max = p.a.info->ep_attr->max_msg_size;
  CHECK(max < (size_t{1} << 34), "max_msg_size is " << max << ": too large to try one byte more");
  void* buf = mmap(nullptr, max + 1, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  CHECK(buf != MAP_FAILED, "mmap of " << max + 1 << " bytes failed");
  const ssize_t r = fi_send(p.a.ep, buf, max + 1, nullptr, p.a_to_b, nullptr);
  munmap(buf, max + 1);
  CHECK(r < 0 && r != -FI_EAGAIN, "fi_send of max_msg_size+1 bytes returned " << Err(r));
}

// An endpoint sends to its own address.
CONFORMANCE_CASE(ep_send_to_self, kShm) {
  Bare b = OpenDomain(c, c.Hints());
  Ep e = c.OpenEp(b.domain, b.info);
  const fi_addr_t self = c.Insert(e.av, e.name);
  Exchange(c, e, self, e, 64);
  Exchange(c, e, self, e, 70000);
}

}  // namespace bypass::fi::conformance
