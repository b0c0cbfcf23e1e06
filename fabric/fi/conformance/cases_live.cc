// Issue 21's last items: a scalable endpoint's name (fi_getname) taken
// before its contexts are enabled, as Open MPI's OFI MTL takes it with
// mtl_ofi_enable_sep (fi_endpoint(3): the address of a scalable endpoint is
// that of its contexts). Two fabrics of one process on the default domain
// know nothing of each other's ports, as two processes: their names must
// differ, and a message to the second's receive context 1 arrives there.
#include <cstring>
#include <string>
#include <vector>

#include "fabric/fi/conformance/conformance.h"

namespace bypass::fi::conformance {
namespace {

constexpr size_t kContexts = 2;
constexpr int kRxBits = 1;

struct Named {
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_ep* sep = nullptr;
  fid_ep* tx[kContexts] = {};
  fid_ep* rx[kContexts] = {};
  fid_cq* txcq[kContexts] = {};
  fid_cq* rxcq[kContexts] = {};
  std::vector<char> name;
};

// A scalable endpoint bound to its AV and enabled, named before any context
// exists.
Named OpenNamed(Ctx& c, fi_info* info) {
  Named s;
  s.domain = c.Domain(c.Fabric(info), info);
  fi_av_attr attr{};
  attr.type = FI_AV_TABLE;
  attr.rx_ctx_bits = kRxBits;
  CHECK_RET(fi_av_open(s.domain, &attr, &s.av, nullptr), 0);
  c.Own(&s.av->fid);
  CHECK_RET(fi_scalable_ep(s.domain, info, &s.sep, nullptr), 0);
  c.Own(&s.sep->fid);
  CHECK_RET(fi_scalable_ep_bind(s.sep, &s.av->fid, 0), 0);
  CHECK_RET(fi_enable(s.sep), 0);
  s.name.resize(256);
  size_t len = s.name.size();
  CHECK_RET(fi_getname(&s.sep->fid, s.name.data(), &len), 0);
  s.name.resize(len);
  return s;
}

void OpenContexts(Ctx& c, Named& s) {
  for (size_t i = 0; i < kContexts; ++i) {
    s.txcq[i] = c.Cq(s.domain, FI_CQ_FORMAT_TAGGED);
    s.rxcq[i] = c.Cq(s.domain, FI_CQ_FORMAT_TAGGED);
    CHECK_RET(fi_tx_context(s.sep, static_cast<int>(i), nullptr, &s.tx[i], nullptr), 0);
    c.Own(&s.tx[i]->fid);
    CHECK_RET(fi_rx_context(s.sep, static_cast<int>(i), nullptr, &s.rx[i], nullptr), 0);
    c.Own(&s.rx[i]->fid);
    CHECK_RET(fi_ep_bind(s.tx[i], &s.txcq[i]->fid, FI_TRANSMIT), 0);
    CHECK_RET(fi_ep_bind(s.rx[i], &s.rxcq[i]->fid, FI_RECV), 0);
    CHECK_RET(fi_enable(s.tx[i]), 0);
    CHECK_RET(fi_enable(s.rx[i]), 0);
  }
}

CONFORMANCE_CASE(sep_name_before_contexts, kShm) {
  fi_info* hints = c.Hints(FI_MSG | FI_NAMED_RX_CTX);
  hints->ep_attr->tx_ctx_cnt = kContexts;
  hints->ep_attr->rx_ctx_cnt = kContexts;
  fi_info* info = c.Info(hints);
  Named a = OpenNamed(c, info);
  Named b = OpenNamed(c, info);
  CHECK(a.name != b.name, "two scalable endpoints named alike before their contexts were enabled");
  OpenContexts(c, a);
  OpenContexts(c, b);
  std::vector<char> again(256);
  size_t len = again.size();
  CHECK_RET(fi_getname(&b.sep->fid, again.data(), &len), 0);
  again.resize(len);
  CHECK(again == b.name, "the name changed when the contexts were enabled");
  const fi_addr_t to_b = c.Insert(a.av, b.name);
  c.Insert(b.av, a.name);
  char* in = c.Buf(16);
  CHECK_RET(fi_recv(b.rx[1], in, 16, nullptr, FI_ADDR_UNSPEC, in), 0);
  char* out = c.Buf(16, 'n');
  const fi_addr_t dest = fi_rx_addr(to_b, 1, kRxBits);
  c.Post("fi_send", [&] { return fi_send(a.tx[1], out, 16, nullptr, dest, out); });
  const Completion s = c.Wait(a.txcq[1], "the send to receive context 1");
  CHECK(!s.error && s.entry.op_context == out, "the send's completion is wrong");
  const Completion r = c.Wait(b.rxcq[1], "the receive of receive context 1");
  CHECK(!r.error && r.entry.op_context == in, "receive context 1's completion is wrong");
  CHECK(std::memcmp(in, out, 16) == 0, "receive context 1 got other bytes");
}

}  // namespace
}  // namespace bypass::fi::conformance
