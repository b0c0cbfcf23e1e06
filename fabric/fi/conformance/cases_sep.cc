// fi_endpoint(3) "SCALABLE ENDPOINTS" and fi_av(3) rx_ctx_bits /
// fi_rx_addr: fi_getinfo's context counts, contexts that bind their own
// CQs and share their scalable endpoint's AV, named receive contexts, the
// index range, closing order.
#include <rdma/fi_atomic.h>

#include <cstring>
#include <string>
#include <vector>

#include "fabric/fi/conformance/conformance.h"

namespace bypass::fi::conformance {
namespace {

constexpr size_t kContexts = 2;
constexpr int kRxBits = 1;

// Hints for a scalable endpoint of kContexts contexts each way.
fi_info* SepHints(Ctx& c, uint64_t caps = FI_MSG) {
  fi_info* h = c.Hints(caps);
  h->ep_attr->tx_ctx_cnt = kContexts;
  h->ep_attr->rx_ctx_cnt = kContexts;
  return h;
}

struct Sep {
  fi_info* info = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_ep* sep = nullptr;
  fid_ep* tx[kContexts] = {};
  fid_ep* rx[kContexts] = {};
  fid_cq* txcq[kContexts] = {};
  fid_cq* rxcq[kContexts] = {};
  std::vector<char> name;
};

// A scalable endpoint bound to an AV (rx_ctx_bits), its contexts each with
// a CQ, enabled; fi_getinfo refusing the hints refuses the case.
Sep OpenSep(Ctx& c, fi_info* hints, fid_domain* domain = nullptr, fi_info* info = nullptr) {
  Sep s;
  s.info = info != nullptr ? info : c.Info(hints);
  CHECK(s.info->domain_attr->max_ep_tx_ctx >= kContexts &&
            s.info->domain_attr->max_ep_rx_ctx >= kContexts,
        "max_ep_tx_ctx " << s.info->domain_attr->max_ep_tx_ctx << ", max_ep_rx_ctx "
                         << s.info->domain_attr->max_ep_rx_ctx << " for an entry of "
                         << kContexts << " contexts");
  s.domain = domain != nullptr ? domain : c.Domain(c.Fabric(s.info), s.info);
  fi_av_attr attr{};
  attr.type = FI_AV_TABLE;
  attr.rx_ctx_bits = kRxBits;
  CHECK_RET(fi_av_open(s.domain, &attr, &s.av, nullptr), 0);
  c.Own(&s.av->fid);
  CHECK_RET(fi_scalable_ep(s.domain, s.info, &s.sep, nullptr), 0);
  c.Own(&s.sep->fid);
  CHECK_RET(fi_scalable_ep_bind(s.sep, &s.av->fid, 0), 0);
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
  CHECK_RET(fi_enable(s.sep), 0);
  s.name.resize(256);
  size_t len = s.name.size();
  CHECK_RET(fi_getname(&s.sep->fid, s.name.data(), &len), 0);
  s.name.resize(len);
  return s;
}

// "max_ep_tx_ctx, max_ep_rx_ctx: the maximum number of transmit/receive
// contexts that may be associated with an endpoint": hints asking for
// contexts get entries that have them.
CONFORMANCE_CASE(sep_getinfo_contexts, kShm) {
  fi_info* info = c.Info(SepHints(c));
  CHECK(info->ep_attr->tx_ctx_cnt >= kContexts && info->ep_attr->rx_ctx_cnt >= kContexts,
        "ep_attr tx_ctx_cnt " << info->ep_attr->tx_ctx_cnt << ", rx_ctx_cnt "
                              << info->ep_attr->rx_ctx_cnt);
  CHECK(info->domain_attr->max_ep_tx_ctx >= kContexts, "max_ep_tx_ctx is " << info->domain_attr->max_ep_tx_ctx);
  CHECK(info->domain_attr->max_ep_rx_ctx >= kContexts, "max_ep_rx_ctx is " << info->domain_attr->max_ep_rx_ctx);
}

// Contexts bind their own CQs, use their scalable endpoint's AV, and
// exchange messages: transmit context i to the peer's receive context i
// (fi_rx_addr, FI_NAMED_RX_CTX); the other receive context gets nothing.
CONFORMANCE_CASE(sep_named_rx_ctx, kShm) {
  Sep a = OpenSep(c, SepHints(c, FI_MSG | FI_NAMED_RX_CTX));
  Sep b = OpenSep(c, nullptr, nullptr, a.info);
  const fi_addr_t to_b = c.Insert(a.av, b.name);
  c.Insert(b.av, a.name);
  for (size_t i = 0; i < kContexts; ++i) {
    char* in[kContexts];
    for (size_t j = 0; j < kContexts; ++j) {
      in[j] = c.Buf(16);
      CHECK_RET(fi_recv(b.rx[j], in[j], 16, nullptr, FI_ADDR_UNSPEC, in[j]), 0);
    }
    char* out = c.Buf(16, static_cast<char>('a' + i));
    const fi_addr_t dest = fi_rx_addr(to_b, static_cast<int>(i), kRxBits);
    c.Post("fi_send", [&] { return fi_send(a.tx[i], out, 16, nullptr, dest, out); });
    const Completion s = c.Wait(a.txcq[i], "the send of transmit context " + std::to_string(i));
    CHECK(!s.error && s.entry.op_context == out, "the send's completion is wrong");
    const Completion r = c.Wait(b.rxcq[i], "the receive of receive context " + std::to_string(i));
    CHECK(!r.error && r.entry.op_context == in[i], "receive context " << i << "'s completion is wrong");
    CHECK(std::memcmp(in[i], out, 16) == 0, "receive context " << i << " got other bytes");
    const size_t other = 1 - i;
    Completion none;
    CHECK(!c.Poll(b.rxcq[other], &none, 1000), "receive context " << other << " got message " << i);
    CHECK_RET(fi_cancel(&b.rx[other]->fid, in[other]), 0);
    c.Wait(b.rxcq[other], "the cancelled receive");
  }
}

// "When closing a scalable endpoint, there must be no opened transmit
// contexts, or receive contexts ... -FI_EBUSY".
CONFORMANCE_CASE(sep_close_busy, kShm) {
  Sep s = OpenSep(c, SepHints(c));
  CHECK_RET(fi_close(&s.sep->fid), -FI_EBUSY);
  for (size_t i = 0; i < kContexts; ++i) {
    CHECK_RET(c.Close(&s.tx[i]->fid), 0);
    if (i + 1 < kContexts) CHECK_RET(fi_close(&s.sep->fid), -FI_EBUSY);
  }
  CHECK_RET(fi_close(&s.sep->fid), -FI_EBUSY);  // receive contexts still open
  for (size_t i = 0; i < kContexts; ++i) CHECK_RET(c.Close(&s.rx[i]->fid), 0);
  CHECK_RET(c.Close(&s.sep->fid), 0);
}

// "index: Index to retrieve a specific transmit/receive context": an index
// beyond tx_ctx_cnt / rx_ctx_cnt opens no context.
CONFORMANCE_CASE(sep_context_index_range, kShm) {
  fi_info* info = c.Info(SepHints(c));
  fid_domain* domain = c.Domain(c.Fabric(info), info);
  fid_ep* sep = nullptr;
  CHECK_RET(fi_scalable_ep(domain, info, &sep, nullptr), 0);
  c.Own(&sep->fid);
  fid_ep* ctx = nullptr;
  const int tx_ret = fi_tx_context(sep, static_cast<int>(info->ep_attr->tx_ctx_cnt), nullptr, &ctx, nullptr);
  if (tx_ret == 0) c.Own(&ctx->fid);
  CHECK(tx_ret != 0, "fi_tx_context with index tx_ctx_cnt succeeded");
  const int rx_ret = fi_rx_context(sep, static_cast<int>(info->ep_attr->rx_ctx_cnt), nullptr, &ctx, nullptr);
  if (rx_ret == 0) c.Own(&ctx->fid);
  CHECK(rx_ret != 0, "fi_rx_context with index rx_ctx_cnt succeeded");
}

// fi_atomic(3) through transmit contexts: each context's fi_atomic and
// fi_fetch_atomic reach a plain endpoint's region and complete in that
// context's CQ; a receive context takes no atomic.
CONFORMANCE_CASE(sep_atomics, kShm) {
  Sep a = OpenSep(c, SepHints(c, FI_MSG | FI_RMA | FI_ATOMIC));
  fi_info* plain = c.Info(c.Hints(FI_MSG | FI_RMA | FI_ATOMIC));
  fid_domain* db = c.Domain(c.Fabric(plain), plain);
  Ep b = c.OpenEp(db, plain);
  uint64_t* region = reinterpret_cast<uint64_t*>(c.Buf(sizeof(uint64_t)));
  fid_mr* mr = nullptr;
  CHECK_RET(fi_mr_reg(db, region, sizeof(uint64_t), FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 191, 0,
                      &mr, nullptr),
            0);
  c.Own(&mr->fid);
  const fi_addr_t to_b = c.Insert(a.av, b.name);
  const uint64_t addr = RmaAddr(plain, region), key = fi_mr_key(mr), one = 1;
  for (size_t i = 0; i < kContexts; ++i) {
    uint64_t old = 99;
    c.Post("fi_atomic", [&] {
      return fi_atomic(a.tx[i], &one, 1, nullptr, to_b, addr, key, FI_UINT64, FI_SUM, nullptr);
    });
    c.Post("fi_fetch_atomic", [&] {
      return fi_fetch_atomic(a.tx[i], &one, 1, nullptr, &old, nullptr, to_b, addr, key, FI_UINT64,
                             FI_SUM, nullptr);
    });
    for (int k = 0; k < 2; ++k) {
      const Completion done = c.Wait(a.txcq[i], "an atomic of transmit context " + std::to_string(i));
      CHECK(!done.error && (done.entry.flags & FI_ATOMIC), "an atomic of transmit context " << i << " failed");
    }
    CHECK(old == 2 * i + 1, "transmit context " << i << " fetched " << old);
  }
  CHECK(*region == 2 * kContexts, "the target reads " << *region);
  CHECK_RET(fi_atomic(a.rx[0], &one, 1, nullptr, to_b, addr, key, FI_UINT64, FI_SUM, nullptr),
            -FI_EOPNOTSUPP);
}

}  // namespace
}  // namespace bypass::fi::conformance
