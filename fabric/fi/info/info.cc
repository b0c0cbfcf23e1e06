// fi_getinfo for the bypass provider: candidates per device and endpoint
// type, checked against hints field by field (fi_getinfo(3), fi_domain(3),
// fi_endpoint(3), fi_fabric(3)), narrowed to what was asked.
#include "fabric/fi/info/info.h"

#include <rdma/fi_errno.h>
#include <strings.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "driver/host.h"
#include "fabric/fi/address/address.h"
#include "fabric/fi/info/raw_enum.h"
#include "fabric/fi/info/resolve.h"
#include "fabric/rdm/types.h"


namespace bypass::fi {
namespace {

// fi_getinfo(3)'s classes of capabilities.
constexpr uint64_t kPrimaryCaps = FI_MSG | FI_RMA | FI_TAGGED | FI_ATOMIC | FI_MULTICAST |
                                  FI_NAMED_RX_CTX | FI_DIRECTED_RECV | FI_VARIABLE_MSG | FI_HMEM |
                                  FI_COLLECTIVE | FI_AV_USER_ID;
constexpr uint64_t kPrimaryModifiers =
    FI_READ | FI_WRITE | FI_RECV | FI_SEND | FI_REMOTE_READ | FI_REMOTE_WRITE;
constexpr uint64_t kSecondaryCaps = FI_MULTI_RECV | FI_SOURCE | FI_RMA_EVENT | FI_SHARED_AV |
                                    FI_TRIGGER | FI_FENCE | FI_LOCAL_COMM | FI_REMOTE_COMM |
                                    FI_SOURCE_ERR | FI_RMA_PMEM;
// Offered only when asked: FI_SOURCE_ERR turns a message from a sender not
// in the AV into an error entry (fi_cq(3)), which an application that did
// not ask for it would not expect; FI_COLLECTIVE takes the top tag bit
// (fabric/fi/coll.h).
constexpr uint64_t kAskedOnlyCaps = FI_SOURCE_ERR | FI_COLLECTIVE;
// fi_endpoint(3): the capabilities that apply to each side.
constexpr uint64_t kTxCaps = FI_MSG | FI_RMA | FI_TAGGED | FI_ATOMIC | FI_READ | FI_WRITE |
                             FI_SEND | FI_HMEM | FI_TRIGGER | FI_FENCE | FI_MULTICAST |
                             FI_RMA_PMEM | FI_NAMED_RX_CTX | FI_COLLECTIVE;
constexpr uint64_t kRxCaps = FI_MSG | FI_RMA | FI_TAGGED | FI_ATOMIC | FI_REMOTE_READ |
                             FI_REMOTE_WRITE | FI_RECV | FI_HMEM | FI_TRIGGER | FI_RMA_PMEM |
                             FI_DIRECTED_RECV | FI_VARIABLE_MSG | FI_MULTI_RECV | FI_SOURCE |
                             FI_RMA_EVENT | FI_SOURCE_ERR | FI_COLLECTIVE;
// Default operation flags the facade honours. A send completes when the
// peer acknowledged it, which it does once it placed or buffered the
// message (transmit and delivery complete), or, up to inject_size bytes
// with FI_INJECT_COMPLETE, once the engine copied it (fabric/fi/README.md,
// "Completions and errors"). Datagrams are not acknowledged: no delivery.
constexpr uint64_t kTxOpFlags = FI_COMPLETION | FI_INJECT | FI_INJECT_COMPLETE |
                                FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE | FI_FENCE |
                                FI_REMOTE_CQ_DATA;
constexpr uint64_t kRxOpFlags = FI_COMPLETION | FI_MULTI_RECV;
// The engine delivers each peer's messages once, in the order sent. RMA
// ordering is not promised (the engine's RMA is newer than this contract).
// A peer's atomics execute at the target once each, in the order posted,
// their fetched values read as they execute: every atomic order holds.
constexpr uint64_t kRdmMsgOrder = FI_ORDER_SAS | FI_ORDER_ATOMIC_RAR | FI_ORDER_ATOMIC_RAW |
                                  FI_ORDER_ATOMIC_WAR | FI_ORDER_ATOMIC_WAW;
// Data ordering (fi_endpoint(3), max_order_*_size) for RDM: a read or
// write (RMA or atomic) after a write to the same peer sees it, at any size;
// promised up to an atomic's size. Not write-after-read: an RMA read's
// answer is built from the region as it is sent, and resent from it if lost,
// so a later write can change what it returns (0).
constexpr size_t kRdmMaxOrderSize = rdm::kMaxAtomicBytes;
// The mr_mode bits a hint may offer that the facade then uses.
// FI_MR_RMA_EVENT: regions registered with FI_RMA_EVENT start disabled,
// take their counters (fi_mr_bind) and are enabled by fi_mr_enable (mr.cc).
constexpr int kMrModeUsed = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_RMA_EVENT;
constexpr size_t kIpUdpHeaders = 20 + 8;

thread_local std::string g_mismatch;
std::atomic<MismatchLogFn> g_log{nullptr};
std::atomic<const char*> g_neighbour_path{"/proc/net/arp"};

uint64_t CommCaps(const DomainOffer& o) {
  if (o.comm_caps != 0) return o.comm_caps & (FI_LOCAL_COMM | FI_REMOTE_COMM);
  const std::string& d = o.device.driver;
  if (d == "loopback" || d == "net_memif" || d == "memif" || d == "shm") return FI_LOCAL_COMM;
  return FI_LOCAL_COMM | FI_REMOTE_COMM;
}

// Scalable endpoints are FI_EP_RDM's (fabric/fi/sep.h).
size_t MaxEpContexts(const DomainOffer& o, fi_ep_type type) {
  return type == FI_EP_RDM ? o.max_ep_ctx : 1;
}

const char* EpName(fi_ep_type t) {
  return t == FI_EP_RDM ? "FI_EP_RDM" : t == FI_EP_MSG ? "FI_EP_MSG" : "FI_EP_DGRAM";
}

bool ValidTclass(uint32_t tc) {
  if (tc == FI_TC_UNSPEC) return true;
  if ((tc & ~0xffu) == FI_TC_DSCP) return (tc & 0xff) < 64;
  return tc >= FI_TC_BEST_EFFORT && tc <= FI_TC_NETWORK_CTRL;
}

// The first mismatch between hints and one candidate, as text.
class Checker {
 public:
  bool ok() const { return why_.empty(); }
  const std::string& why() const { return why_; }
  template <typename... Args>
  void Fail(const absl::FormatSpec<Args...>& f, const Args&... args) {
    if (why_.empty()) why_ = absl::StrFormat(f, args...);
  }
  // A hint that is a maximum the application needs.
  void AtMost(const char* field, uint64_t asked, uint64_t offered) {
    if (asked > offered) Fail("%s %u asked, %u offered", field, asked, offered);
  }
  void Bits(const char* field, uint64_t asked, uint64_t offered) {
    if ((asked & ~offered) != 0) {
      Fail("%s 0x%x asked; 0x%x not offered", field, asked, asked & ~offered);
    }
  }

 private:
  std::string why_;
};

// The entry a domain offers for one endpoint type with no hints.
struct Defaults {
  uint64_t caps;
  size_t max_msg_size;
  size_t inject_size;
  size_t tx_size;
  size_t rx_size;
  size_t total_buffered_recv;
  size_t cq_data_size;
  uint64_t msg_order;
  uint32_t protocol;
  uint32_t protocol_version;
};

Defaults DefaultsFor(const DomainOffer& o, fi_ep_type type) {
  Defaults d;
  const uint64_t comm = CommCaps(o);
  const size_t datagram = o.device.mtu > kIpUdpHeaders ? o.device.mtu - kIpUdpHeaders : 0;
  if (type == FI_EP_RDM || type == FI_EP_MSG) {
    // FI_EP_MSG: the same engine endpoint, where FI_EP_RDM is offered.
    d.caps = (type == FI_EP_MSG ? o.rdm_caps & o.msg_caps & kMsgCaps : o.rdm_caps & kRdmCaps) | comm;
    if ((d.caps & FI_RMA) == 0) d.caps &= ~FI_RMA_EVENT;  // events of RMA targets
    d.max_msg_size = o.limits.max_msg_size;
    d.inject_size = o.limits.inject_size;
    d.tx_size = o.limits.max_send_ops;
    d.rx_size = o.limits.max_posted_recvs;
    d.total_buffered_recv = o.limits.unexpected_bytes;
    d.cq_data_size = kCqDataSize;
    d.msg_order = kRdmMsgOrder;
    // Atomic orders only where atomics are (not on FI_EP_MSG yet).
    if ((d.caps & FI_ATOMIC) == 0) {
      d.msg_order &= ~static_cast<uint64_t>(FI_ORDER_ATOMIC_RAR | FI_ORDER_ATOMIC_RAW |
                                            FI_ORDER_ATOMIC_WAR | FI_ORDER_ATOMIC_WAW);
    }
    d.protocol = kProtoBypassRdm;
    d.protocol_version = rdm::kWireVersion;
  } else {
    d.caps = (o.dgram_caps & (kDgramCaps | kDgramMulticastCap)) | comm;
    d.max_msg_size = datagram;
    d.inject_size = datagram;
    d.tx_size = o.device.ring_size != 0 ? o.device.ring_size : 1024;
    d.rx_size = d.tx_size;
    d.total_buffered_recv = 0;
    d.cq_data_size = 0;  // a datagram carries the application's bytes only
    d.msg_order = FI_ORDER_NONE;
    d.protocol = FI_PROTO_UDP;
    d.protocol_version = kDgramProtocolVersion;
  }
  // FI_SOURCE_ERR rides on FI_SOURCE (fi_getinfo(3)); Narrow keeps it
  // only for hints that ask.
  if (d.caps & FI_SOURCE) d.caps |= kAskedOnlyCaps;
  return d;
}

// fi_getinfo(3): FI_SOCKADDR is a sockaddr whose sa_family tells the rest;
// ours is always AF_INET, so the same sockaddr_in serves both. No device
// has an IPv6 address (FI_SOCKADDR_IN6 is refused).
bool AddrFormatOffered(uint32_t f) {
  return f == FI_FORMAT_UNSPEC || f == FI_SOCKADDR_IN || f == FI_SOCKADDR;
}

bool Legacy(uint32_t version) { return FI_VERSION_LT(version, FI_VERSION(1, 5)); }

// The returned mr_mode for a hint's, or a mismatch.
int MrMode(uint32_t version, const fi_info* hints, Checker* c) {
  const fi_domain_attr* h = hints != nullptr ? hints->domain_attr : nullptr;
  const int asked = h != nullptr ? h->mr_mode : 0;
  if (Legacy(version)) {
    // Before 1.5 mr_mode is an enum: BASIC (virtual addresses, provider
    // keys) or SCALABLE (offsets, application keys); both work.
    if (asked == FI_MR_UNSPEC) return FI_MR_SCALABLE;
    if (asked == FI_MR_BASIC || asked == FI_MR_SCALABLE) return asked;
    c->Fail("mr_mode %d is not FI_MR_UNSPEC, FI_MR_BASIC or FI_MR_SCALABLE (API < 1.5)", asked);
    return 0;
  }
  if ((asked & (FI_MR_BASIC | FI_MR_SCALABLE)) != 0) {
    // fi_mr(3): the legacy values stand alone (BASIC means VIRT_ADDR,
    // ALLOCATED and PROV_KEY).
    if (asked != FI_MR_BASIC && asked != FI_MR_SCALABLE) {
      c->Fail("mr_mode 0x%x mixes FI_MR_BASIC/FI_MR_SCALABLE with other bits", asked);
      return 0;
    }
    return asked;
  }
  // The facade requires no bit (memory is host memory, copied by the CPU;
  // neither FI_MR_LOCAL nor the FI_LOCAL_MR mode): it keeps the bits it will
  // follow, the rest (any others, even ones newer than 1.17: libfabric's
  // core passes ~(FI_MR_BASIC | FI_MR_SCALABLE) for "any mode") are dropped.
  return asked & kMrModeUsed;
}

void CheckFabric(const fi_fabric_attr* h, Checker* c) {
  if (h == nullptr) return;
  if (h->name != nullptr && std::strcmp(h->name, kFabricName) != 0) {
    c->Fail("fabric name \"%s\" is not \"%s\"", h->name, kFabricName);
  }
  if (h->prov_name != nullptr && !ProviderNameMatches(h->prov_name)) {
    c->Fail("provider \"%s\" is not \"%s\"", h->prov_name, kProviderName);
  }
}

void CheckDomain(uint32_t version, const fi_domain_attr* h, const fi_domain_attr& o, Checker* c) {
  if (h == nullptr) return;
  if (h->name != nullptr && std::strcmp(h->name, o.name) != 0) {
    c->Fail("domain \"%s\" is not \"%s\"", h->name, o.name);
  }
  switch (RawEnum(h->threading)) {
    case FI_THREAD_UNSPEC:
    case FI_THREAD_SAFE:
    case FI_THREAD_FID:
    case FI_THREAD_DOMAIN:
    case FI_THREAD_COMPLETION:
    case FI_THREAD_ENDPOINT:
      break;
    default:
      c->Fail("threading %d is not a libfabric threading model", RawEnum(h->threading));
  }
  const int progress[2] = {RawEnum(h->control_progress), RawEnum(h->data_progress)};
  const char* names[2] = {"control_progress", "data_progress"};
  for (int i = 0; i < 2; ++i) {
    if (progress[i] != FI_PROGRESS_UNSPEC && progress[i] != FI_PROGRESS_MANUAL &&
        progress[i] != FI_PROGRESS_AUTO) {
      c->Fail("%s %d is not a libfabric progress model", names[i], progress[i]);
    }
  }
  const int rm = RawEnum(h->resource_mgmt);
  if (rm != FI_RM_UNSPEC && rm != FI_RM_ENABLED && rm != FI_RM_DISABLED) {
    c->Fail("resource_mgmt %d is not a libfabric value", rm);
  }
  const int av_type = RawEnum(h->av_type);
  if (av_type != FI_AV_UNSPEC && av_type != FI_AV_MAP && av_type != FI_AV_TABLE) {
    c->Fail("av_type %d is not FI_AV_MAP or FI_AV_TABLE", av_type);
  }
  c->AtMost("mr_key_size", h->mr_key_size, o.mr_key_size);
  c->AtMost("cq_data_size", h->cq_data_size, o.cq_data_size);
  c->AtMost("cq_cnt", h->cq_cnt, o.cq_cnt);
  c->AtMost("ep_cnt", h->ep_cnt, o.ep_cnt);
  c->AtMost("domain tx_ctx_cnt", h->tx_ctx_cnt, o.tx_ctx_cnt);
  c->AtMost("domain rx_ctx_cnt", h->rx_ctx_cnt, o.rx_ctx_cnt);
  c->AtMost("max_ep_tx_ctx", h->max_ep_tx_ctx, o.max_ep_tx_ctx);
  c->AtMost("max_ep_rx_ctx", h->max_ep_rx_ctx, o.max_ep_rx_ctx);
  c->AtMost("max_ep_stx_ctx (shared transmit contexts)", h->max_ep_stx_ctx, o.max_ep_stx_ctx);
  c->AtMost("max_ep_srx_ctx (shared receive contexts)", h->max_ep_srx_ctx, o.max_ep_srx_ctx);
  c->AtMost("cntr_cnt", h->cntr_cnt, o.cntr_cnt);
  c->AtMost("mr_iov_limit", h->mr_iov_limit, o.mr_iov_limit);
  c->AtMost("max_err_data", h->max_err_data, o.max_err_data);
  c->AtMost("mr_cnt", h->mr_cnt, o.mr_cnt);
  c->Bits("domain caps", h->caps, o.caps);
  if (!Legacy(version) && !AuthKeySizeAccepted(h->auth_key_size)) {
    c->Fail("domain auth_key_size %u asked; bypass keys are %u bytes, or %u and more",
            h->auth_key_size, kAuthKeySize, kMinHandshakeKeySize);
  }
  if (!ValidTclass(h->tclass))
    c->Fail("domain tclass 0x%x is not a libfabric traffic class", h->tclass);
}

// Collectives (fabric/fi/coll.h) run on an endpoint's own receive queue:
// not with a shared receive context or on a scalable endpoint's contexts.
void CheckCollective(const fi_info* h, Checker* c) {
  const fi_ep_attr* e = h->ep_attr;
  if ((h->caps & FI_COLLECTIVE) == 0 || e == nullptr) return;
  if (e->rx_ctx_cnt == FI_SHARED_CONTEXT || (e->tx_ctx_cnt > 1 && e->tx_ctx_cnt != FI_SHARED_CONTEXT) ||
      e->rx_ctx_cnt > 1) {
    c->Fail("FI_COLLECTIVE asked with a shared receive context or scalable contexts; collectives need the endpoint's own");
  }
}

void CheckEp(uint32_t version, const fi_ep_attr* h, const fi_ep_attr& o, size_t max_ctx,
             Checker* c) {
  if (h == nullptr) return;
  if (RawEnum(h->type) != FI_EP_UNSPEC && RawEnum(h->type) != o.type) {
    c->Fail("endpoint type %d is not %s", RawEnum(h->type), EpName(o.type));
  }
  if (h->protocol != FI_PROTO_UNSPEC && h->protocol != o.protocol) {
    c->Fail("protocol 0x%x is not 0x%x", h->protocol, o.protocol);
  }
  c->AtMost("protocol_version", h->protocol_version, o.protocol_version);
  c->AtMost("max_msg_size", h->max_msg_size, o.max_msg_size);
  // FI_MSG_PREFIX's space, where it is offered (OfferModes).
  c->AtMost("msg_prefix_size", h->msg_prefix_size,
            o.type == FI_EP_DGRAM ? kDgramMsgPrefixSize : o.msg_prefix_size);
  // 0 in the offer: no RMA data ordering is promised.
  c->AtMost("max_order_raw_size", h->max_order_raw_size, o.max_order_raw_size);
  c->AtMost("max_order_war_size", h->max_order_war_size, o.max_order_war_size);
  c->AtMost("max_order_waw_size", h->max_order_waw_size, o.max_order_waw_size);
  // Shared contexts (fi_stx_context, fi_srx_context) for FI_EP_RDM.
  if (h->tx_ctx_cnt == FI_SHARED_CONTEXT) {
    if (o.type != FI_EP_RDM) c->Fail("tx_ctx_cnt FI_SHARED_CONTEXT asked; %s has none", EpName(o.type));
  } else {
    c->AtMost("ep tx_ctx_cnt", h->tx_ctx_cnt, max_ctx);
  }
  if (h->rx_ctx_cnt == FI_SHARED_CONTEXT) {
    if (o.type != FI_EP_RDM) c->Fail("rx_ctx_cnt FI_SHARED_CONTEXT asked; %s has none", EpName(o.type));
  } else {
    c->AtMost("ep rx_ctx_cnt", h->rx_ctx_cnt, max_ctx);
  }
  if (!Legacy(version) && !AuthKeySizeAccepted(h->auth_key_size)) {
    c->Fail("endpoint auth_key_size %u asked; bypass keys are %u bytes, or %u and more",
            h->auth_key_size, kAuthKeySize, kMinHandshakeKeySize);
  }
}

// Orders and op_flags are what the application requires; each must be
// provided (FI_ORDER_NONE: nothing required).
void CheckTx(const fi_tx_attr* h, const fi_info& cand, Checker* c) {
  if (h == nullptr) return;
  const fi_tx_attr& o = *cand.tx_attr;
  // Remote CQ data only where the domain carries it (not on DGRAM).
  const uint64_t op_flags = cand.ep_attr->type != FI_EP_DGRAM
                                ? kTxOpFlags
                                : kTxOpFlags & ~(FI_REMOTE_CQ_DATA | FI_DELIVERY_COMPLETE);
  c->Bits("tx caps", h->caps, o.caps);
  c->Bits("tx op_flags", h->op_flags, op_flags);
  c->Bits("tx msg_order", h->msg_order, o.msg_order);
  c->Bits("tx comp_order", h->comp_order, o.comp_order);
  c->AtMost("inject_size", h->inject_size, o.inject_size);
  c->AtMost("tx size", h->size, o.size);
  c->AtMost("tx iov_limit", h->iov_limit, o.iov_limit);
  c->AtMost("rma_iov_limit", h->rma_iov_limit, o.rma_iov_limit);
  if (!ValidTclass(h->tclass))
    c->Fail("tx tclass 0x%x is not a libfabric traffic class", h->tclass);
}

void CheckRx(const fi_rx_attr* h, const fi_info& cand, Checker* c) {
  if (h == nullptr) return;
  const fi_rx_attr& o = *cand.rx_attr;
  // Multi-receive buffers only where the endpoint type has them.
  const uint64_t op_flags = kRxOpFlags & ~(FI_MULTI_RECV & ~cand.caps);
  c->Bits("rx caps", h->caps, o.caps);
  c->Bits("rx op_flags", h->op_flags, op_flags);
  c->Bits("rx msg_order", h->msg_order, o.msg_order);
  c->Bits("rx comp_order", h->comp_order, o.comp_order);
  c->AtMost("total_buffered_recv", h->total_buffered_recv, o.total_buffered_recv);
  c->AtMost("rx size", h->size, o.size);
  c->AtMost("rx iov_limit", h->iov_limit, o.iov_limit);
}

// The candidate entry of one domain and endpoint type, before hints.
fi_info* Candidate(const DomainOffer& o, fi_ep_type type, uint32_t version) {
  fi_info* info = DupInfo(nullptr);
  if (info == nullptr) return nullptr;
  const Defaults d = DefaultsFor(o, type);
  info->caps = d.caps;
  info->mode = 0;  // the facade needs no mode bit of the application (OfferModes)
  info->addr_format = FI_SOCKADDR_IN;

  fi_tx_attr* tx = info->tx_attr;
  tx->caps = d.caps & kTxCaps;
  tx->msg_order = d.msg_order;
  tx->comp_order = FI_ORDER_NONE;
  tx->inject_size = d.inject_size;
  tx->size = d.tx_size;
  tx->iov_limit = kMsgIovLimit;
  tx->rma_iov_limit = (d.caps & FI_RMA) != 0 ? kIovLimit : 0;

  fi_rx_attr* rx = info->rx_attr;
  rx->caps = d.caps & kRxCaps;
  rx->msg_order = d.msg_order;
  rx->comp_order = FI_ORDER_NONE;
  rx->total_buffered_recv = d.total_buffered_recv;
  rx->size = d.rx_size;
  rx->iov_limit = kMsgIovLimit;

  fi_ep_attr* ep = info->ep_attr;
  ep->type = type;
  ep->protocol = d.protocol;
  ep->protocol_version = d.protocol_version;
  ep->max_msg_size = d.max_msg_size;
  ep->mem_tag_format =
      (d.caps & FI_TAGGED) == 0 ? 0 : type == FI_EP_MSG ? kMsgTagFormat : kDefaultTagFormat;
  ep->tx_ctx_cnt = 1;
  ep->rx_ctx_cnt = 1;
  if (type == FI_EP_RDM) ep->max_order_raw_size = ep->max_order_waw_size = kRdmMaxOrderSize;

  fi_domain_attr* dom = info->domain_attr;
  dom->name = strdup(o.name.c_str());
  dom->threading = FI_THREAD_DOMAIN;
  dom->control_progress = FI_PROGRESS_MANUAL;
  dom->data_progress = FI_PROGRESS_MANUAL;
  dom->resource_mgmt = FI_RM_ENABLED;
  dom->av_type = FI_AV_UNSPEC;
  dom->mr_mode = Legacy(version) ? FI_MR_SCALABLE : 0;
  dom->mr_key_size = kMrKeySize;
  dom->cq_data_size = d.cq_data_size;
  dom->cq_cnt = kMaxCqs;
  dom->ep_cnt = kMaxEndpoints;
  dom->tx_ctx_cnt = IndependentQueues(o.device);
  dom->rx_ctx_cnt = IndependentQueues(o.device);
  dom->max_ep_tx_ctx = MaxEpContexts(o, type);
  dom->max_ep_rx_ctx = MaxEpContexts(o, type);
  // An RDM endpoint may use one shared transmit and one shared receive
  // context (fabric/fi/shared_ctx.h).
  dom->max_ep_stx_ctx = type == FI_EP_RDM ? 1 : 0;
  dom->max_ep_srx_ctx = type == FI_EP_RDM ? 1 : 0;
  dom->cntr_cnt = kMaxCntrs;
  dom->mr_iov_limit = kIovLimit;
  dom->caps = d.caps & (FI_LOCAL_COMM | FI_REMOTE_COMM);
  dom->mode = 0;
  dom->auth_key_size = Legacy(version) ? 0 : kAuthKeySize;
  dom->max_err_data = sizeof(rdm::ErrorCompletion::message);
  dom->mr_cnt = o.limits.max_regions;

  fi_fabric_attr* fab = info->fabric_attr;
  fab->name = strdup(kFabricName);
  fab->prov_version = kProviderVersion;
  fab->api_version = version;  // the version asked for, as libfabric's providers answer
  if (dom->name == nullptr || fab->name == nullptr) {
    FreeInfo(info);
    return nullptr;
  }
  return info;
}

// Replaces *dst (freed) with a copy of len bytes of key.
bool SetKey(uint8_t** dst, const uint8_t* key, size_t len) {
  std::free(*dst);
  *dst = nullptr;
  if (key == nullptr) return true;
  *dst = static_cast<uint8_t*>(std::malloc(len));
  if (*dst == nullptr) return false;
  std::memcpy(*dst, key, len);
  return true;
}

// Narrows a matching candidate to the hints. False on allocation failure.
// The mode bits offered only to an application that sets them in
// hints->mode (fi_getinfo(3): a mode bit is a requirement the provider
// puts on the application): FI_BUFFERED_RECV on FI_EP_RDM (fabric/fi/
// buffered.h), FI_MSG_PREFIX on FI_EP_DGRAM (the endpoint then skips
// kDgramMsgPrefixSize bytes of every buffer). Without them the facade
// needs no mode bit.
void OfferModes(fi_info* info, uint64_t asked) {
  uint64_t mode = 0;
  const fi_ep_type type = info->ep_attr->type;
  if (type == FI_EP_RDM && (asked & FI_BUFFERED_RECV) &&
      (info->caps & (FI_MSG | FI_TAGGED)) != 0) {
    mode |= FI_BUFFERED_RECV;
  }
  if (type == FI_EP_DGRAM && (asked & FI_MSG_PREFIX)) {
    mode |= FI_MSG_PREFIX;
    info->ep_attr->msg_prefix_size = kDgramMsgPrefixSize;
  }
  info->mode = mode;
  info->rx_attr->mode = mode;
  info->tx_attr->mode = mode & FI_MSG_PREFIX;
}

bool Narrow(fi_info* info, const fi_info* hints, uint32_t version, int mr_mode) {
  info->domain_attr->mr_mode = mr_mode;
  if (hints == nullptr || (hints->caps & kAskedOnlyCaps) == 0) {
    // Behaviour an application must ask for: off unless asked.
    info->caps &= ~kAskedOnlyCaps;
    info->tx_attr->caps &= ~kAskedOnlyCaps;
    info->rx_attr->caps &= ~kAskedOnlyCaps;
  } else if ((hints->caps & FI_COLLECTIVE) == 0) {
    info->caps &= ~FI_COLLECTIVE;
    info->tx_attr->caps &= ~FI_COLLECTIVE;
    info->rx_attr->caps &= ~FI_COLLECTIVE;
  } else if ((hints->caps & FI_SOURCE_ERR) == 0) {
    info->caps &= ~FI_SOURCE_ERR;
    info->rx_attr->caps &= ~FI_SOURCE_ERR;
  }
  if (hints == nullptr) return true;
  OfferModes(info, hints->mode);
  if (hints->addr_format != FI_FORMAT_UNSPEC) info->addr_format = hints->addr_format;
  if (hints->caps != 0) {
    // fi_getinfo(3): the primary capabilities asked (with their modifiers),
    // and the secondary ones we offer at no cost.
    info->caps = (hints->caps & (kPrimaryCaps | kPrimaryModifiers)) | (info->caps & kSecondaryCaps);
  }
  // FI_RMA_EVENT is about RMA targets (fi_getinfo(3)): not without FI_RMA
  // unless asked.
  if ((info->caps & FI_RMA) == 0 && (hints->caps & FI_RMA_EVENT) == 0) {
    info->caps &= ~FI_RMA_EVENT;
  }
  const fi_tx_attr* ht = hints->tx_attr;
  info->tx_attr->caps = (ht != nullptr && ht->caps != 0 ? ht->caps : info->caps) & kTxCaps;
  const fi_rx_attr* hr = hints->rx_attr;
  info->rx_attr->caps = (hr != nullptr && hr->caps != 0 ? hr->caps : info->caps) & kRxCaps;
  if ((info->caps & FI_RMA) == 0) info->tx_attr->rma_iov_limit = 0;
  if ((info->caps & FI_TAGGED) == 0) info->ep_attr->mem_tag_format = 0;
  // Collectives' messages have the top tag bit (fabric/fi/coll.h).
  const bool coll = (info->caps & FI_COLLECTIVE) != 0;
  if (coll && (info->caps & FI_TAGGED) != 0) info->ep_attr->mem_tag_format = kMsgTagFormat;
  if (ht != nullptr) {
    info->tx_attr->op_flags = ht->op_flags;
    info->tx_attr->tclass = ht->tclass;
  }
  if (hr != nullptr) info->rx_attr->op_flags = hr->op_flags;
  if (const fi_ep_attr* he = hints->ep_attr; he != nullptr) {
    if (he->mem_tag_format != 0 && (info->caps & FI_TAGGED) != 0 && !coll) {
      // Any layout of fields fits a 64-bit tag.
      info->ep_attr->mem_tag_format = he->mem_tag_format;
    }
    if (he->tx_ctx_cnt != 0) info->ep_attr->tx_ctx_cnt = he->tx_ctx_cnt;
    if (he->rx_ctx_cnt != 0) info->ep_attr->rx_ctx_cnt = he->rx_ctx_cnt;
    if (!Legacy(version) && he->auth_key != nullptr && he->auth_key_size != 0) {
      if (!SetKey(&info->ep_attr->auth_key, he->auth_key, he->auth_key_size)) return false;
      info->ep_attr->auth_key_size = he->auth_key_size;
    }
  }
  if (const fi_domain_attr* hd = hints->domain_attr; hd != nullptr) {
    if (hd->threading != FI_THREAD_UNSPEC) info->domain_attr->threading = hd->threading;
    // FI_PROGRESS_AUTO only when asked: the domain then runs a progress
    // thread and takes its lock in every call (fabric/fi/progress_thread.h).
    if (hd->control_progress != FI_PROGRESS_UNSPEC) {
      info->domain_attr->control_progress = hd->control_progress;
    }
    if (hd->data_progress != FI_PROGRESS_UNSPEC) info->domain_attr->data_progress = hd->data_progress;
    if (hd->resource_mgmt != FI_RM_UNSPEC) info->domain_attr->resource_mgmt = hd->resource_mgmt;
    if (hd->av_type != FI_AV_UNSPEC) info->domain_attr->av_type = hd->av_type;
    info->domain_attr->tclass = hd->tclass;
    if (!Legacy(version) && hd->auth_key != nullptr && hd->auth_key_size != 0) {
      if (!SetKey(&info->domain_attr->auth_key, hd->auth_key, hd->auth_key_size)) return false;
      info->domain_attr->auth_key_size = hd->auth_key_size;
    }
  }
  return true;
}

// Where the endpoint of an entry will be and whom it talks to.
struct Addresses {
  bool have_src = false;
  sockaddr_in src{};
  bool have_dest = false;
  sockaddr_in dest{};
};

// An application's sockaddr_in, or a mismatch naming `which`.
bool ReadSockaddr(const void* addr, size_t len, const char* which, sockaddr_in* out, Checker* c) {
  if (len < sizeof(sockaddr_in)) {
    c->Fail("%s of %u bytes is not a sockaddr_in (%u bytes)", which, len, sizeof(sockaddr_in));
    return false;
  }
  std::memcpy(out, addr, sizeof(*out));
  if (out->sin_family != AF_INET) {
    c->Fail("%s family %d is not AF_INET", which, static_cast<int>(out->sin_family));
    return false;
  }
  return true;
}

sockaddr_in MakeAddr(uint32_t ip, uint16_t port, const driver::MacAddress& mac) {
  rdm::Address a;
  a.ip.value = ip;
  a.udp_port = port;
  a.mac = mac;
  return ToSockaddr(a);
}

// Whether ip, of 127.0.0.0/8, names domain o's device: one with the host's
// address that is not itself on a loopback address (as LocalToDevice).
bool LoopbackNamesDevice(const DomainOffer& o, uint32_t ip) {
  return o.device.host_address && driver::IsLoopbackIpv4(driver::Ipv4Address{ip}) &&
         !driver::IsLoopbackIpv4(o.device.ipv4);
}

// The source and destination addresses of a candidate of domain o.
Addresses ResolveAddresses(const DomainOffer& o, const internal::NodeService& ns, bool named,
                           uint64_t flags, const fi_info* hints, Checker* c) {
  Addresses a;
  const uint32_t local_ip = o.device.ipv4.value;
  const bool source = (flags & FI_SOURCE) != 0;
  // The source: node/service with FI_SOURCE, else the hints' src_addr, else
  // the device's address and port 0: the endpoint takes a free port when it
  // is enabled (fi_getname tells which).
  uint32_t src_ip = local_ip;
  uint16_t src_port = 0;
  if (source && named) {
    if (ns.ip.has_value()) src_ip = *ns.ip;
    if (ns.port.has_value()) src_port = *ns.port;
  } else if (hints != nullptr && hints->src_addr != nullptr) {
    sockaddr_in s;
    if (!ReadSockaddr(hints->src_addr, hints->src_addrlen, "hints src_addr", &s, c)) return a;
    src_ip = ntohl(s.sin_addr.s_addr);
    if (s.sin_port != 0) src_port = ntohs(s.sin_port);
  }
  if (src_ip == INADDR_ANY) src_ip = local_ip;
  // A device with the host's address answers to 127.0.0.1 (and the rest
  // of 127.0.0.0/8) too: the entry keeps the address as the application
  // typed it (fi_endpoint and fi_getname keep it too).
  if (src_ip != local_ip && !LoopbackNamesDevice(o, src_ip)) {
    c->Fail("source %s is not this domain's IPv4 %s", driver::Ipv4Address{src_ip}.ToString(),
            o.device.ipv4.ToString());
    return a;
  }
  a.have_src = true;
  a.src = MakeAddr(src_ip, src_port, o.device.mac);

  // The destination: node/service without FI_SOURCE (a service alone names
  // a port on this host), else the hints' dest_addr.
  std::optional<sockaddr_in> dest;
  if (!source && named) {
    const uint32_t ip = ns.ip.value_or(local_ip);
    dest = MakeAddr(ip, ns.port.value_or(o.default_port), driver::MacAddress{});
  } else if (hints != nullptr && hints->dest_addr != nullptr) {
    sockaddr_in s;
    if (!ReadSockaddr(hints->dest_addr, hints->dest_addrlen, "hints dest_addr", &s, c)) return a;
    dest = s;
  }
  if (dest.has_value()) {
    uint32_t ip = ntohl(dest->sin_addr.s_addr);
    if (LoopbackNamesDevice(o, ip)) ip = local_ip;  // fi_av_insert maps it the same way
    driver::MacAddress known;
    std::memcpy(known.bytes.data(), dest->sin_zero, 6);
    if (known == driver::MacAddress{}) {
      // This host's own address, else the kernel's neighbour table, else
      // zero (the engine discovers it on the wire).
      if (ip == local_ip) {
        known = o.device.mac;
      } else if (auto mac = internal::LookupNeighbour(g_neighbour_path.load(), ip)) {
        known = *mac;
      }
      std::memcpy(dest->sin_zero, known.bytes.data(), 6);
    }
    a.have_dest = true;
    a.dest = *dest;
  }
  return a;
}

bool SetAddresses(fi_info* info, const Addresses& a) {
  if (a.have_src) {
    info->src_addr = std::malloc(sizeof(sockaddr_in));
    if (info->src_addr == nullptr) return false;
    std::memcpy(info->src_addr, &a.src, sizeof(sockaddr_in));
    info->src_addrlen = sizeof(sockaddr_in);
  }
  if (a.have_dest) {
    info->dest_addr = std::malloc(sizeof(sockaddr_in));
    if (info->dest_addr == nullptr) return false;
    std::memcpy(info->dest_addr, &a.dest, sizeof(sockaddr_in));
    info->dest_addrlen = sizeof(sockaddr_in);
  }
  return true;
}

void Reject(const DomainOffer& o, fi_ep_type type, const std::string& why, std::string* all) {
  const std::string line = absl::StrCat(o.name, " ", EpName(type), ": ", why);
  if (MismatchLogFn log = g_log.load(); log != nullptr) log(line.c_str());
  if (!all->empty()) all->append("; ");
  all->append(line);
}

}  // namespace

void SetMismatchLog(MismatchLogFn fn) { g_log.store(fn); }

bool ProviderNameMatches(const char* prov_name) {
  // "core[;util...]": the core provider first, then utility providers to
  // layer over it; "^util" excludes one. bypass layers under none.
  const char* semi = std::strchr(prov_name, ';');
  const size_t core_len =
      semi != nullptr ? static_cast<size_t>(semi - prov_name) : std::strlen(prov_name);
  if (core_len != std::strlen(kProviderName) ||
      strncasecmp(prov_name, kProviderName, core_len) != 0) {
    return false;
  }
  for (const char* p = semi; p != nullptr; p = std::strchr(p + 1, ';')) {
    if (p[1] != '^') return false;  // a utility provider asked on top
  }
  return true;
}

void SetNeighbourTablePath(const char* path) {
  g_neighbour_path.store(path != nullptr ? path : "/proc/net/arp");
}

const char* LastMismatch() { return g_mismatch.c_str(); }

int GetInfo(uint32_t version, const char* node, const char* service, uint64_t flags,
            const fi_info* hints, absl::Span<const DomainOffer> offers, fi_info** info) {
  g_mismatch.clear();
  if (info == nullptr) {
    g_mismatch = "info (the result pointer) is null";
    return -FI_EINVAL;
  }
  *info = nullptr;
  if (FI_MAJOR(version) != FI_MAJOR(kApiVersion)) {
    g_mismatch = absl::StrFormat("API version %u.%u asked; bypass implements %u.x",
                                 FI_MAJOR(version), FI_MINOR(version), FI_MAJOR(kApiVersion));
    return -FI_ENOSYS;
  }
  if ((flags & FI_PROV_ATTR_ONLY) != 0) {
    // fi_getinfo(3): exactly one entry with default values.
    const DomainOffer none;
    *info = Candidate(offers.empty() ? none : offers.front(), FI_EP_RDM, version);
    return *info != nullptr ? 0 : -FI_ENOMEM;
  }
  const bool named =
      (node != nullptr && node[0] != '\0') || (service != nullptr && service[0] != '\0');
  if ((flags & FI_SOURCE) != 0 && !named) {
    g_mismatch = "FI_SOURCE given with neither node nor service: name the local address or port";
    return -FI_EINVAL;
  }
  internal::NodeService ns;
  if (named) {
    std::string err =
        internal::ResolveNodeService(node, service, (flags & FI_NUMERICHOST) != 0, &ns);
    if (!err.empty()) {
      g_mismatch = err;
      if (MismatchLogFn log = g_log.load(); log != nullptr) log(err.c_str());
      return -FI_ENODATA;
    }
  }
  if (hints != nullptr && !AddrFormatOffered(hints->addr_format)) {
    g_mismatch = absl::StrFormat(
        "addr_format %u asked; bypass addresses are IPv4: FI_SOCKADDR_IN or FI_SOCKADDR",
        hints->addr_format);
    if (MismatchLogFn log = g_log.load(); log != nullptr) log(g_mismatch.c_str());
    return -FI_ENODATA;
  }
  if (offers.empty()) {
    g_mismatch = "no bypass device is configured (FI_BYPASS_DEVICES)";
    return -FI_ENODATA;
  }

  std::string why_all;
  fi_info* head = nullptr;
  fi_info** tail = &head;
  for (const DomainOffer& o : offers) {
    for (const fi_ep_type type : {FI_EP_RDM, FI_EP_DGRAM, FI_EP_MSG}) {
      // An endpoint type the facade does not offer on this domain.
      if ((DefaultsFor(o, type).caps & ~(FI_LOCAL_COMM | FI_REMOTE_COMM)) == 0) {
        Reject(o, type, "not offered on this domain", &why_all);
        continue;
      }
      fi_info* cand = Candidate(o, type, version);
      if (cand == nullptr) {
        FreeInfo(head);
        return -FI_ENOMEM;
      }
      Checker c;
      if (hints != nullptr) {
        c.Bits("caps", hints->caps, cand->caps);
        CheckFabric(hints->fabric_attr, &c);
        CheckDomain(version, hints->domain_attr, *cand->domain_attr, &c);
        CheckEp(version, hints->ep_attr, *cand->ep_attr, MaxEpContexts(o, type), &c);
        CheckCollective(hints, &c);
        CheckTx(hints->tx_attr, *cand, &c);
        CheckRx(hints->rx_attr, *cand, &c);
      }
      const int mr_mode = MrMode(version, hints, &c);
      Addresses addrs;
      if (c.ok()) addrs = ResolveAddresses(o, ns, named, flags, hints, &c);
      if (!c.ok()) {
        Reject(o, type, c.why(), &why_all);
        FreeInfo(cand);
        continue;
      }
      if (!Narrow(cand, hints, version, mr_mode) || !SetAddresses(cand, addrs)) {
        FreeInfo(cand);
        FreeInfo(head);
        return -FI_ENOMEM;
      }
      *tail = cand;
      tail = &cand->next;
    }
  }
  if (head == nullptr) {
    g_mismatch = why_all;
    return -FI_ENODATA;
  }
  *info = head;
  return 0;
}

}  // namespace bypass::fi
