// fi_tostr / fi_tostr_r: libfabric 1.17's text for every fi_type, byte for
// byte (the YAML-like layout, flag order, "Unknown" for values it does not
// name, and its truncation: at most len - 2 characters, then a trailing
// ", " dropped). core_test compares it with libfabric's own.
#include <arpa/inet.h>
#include <endian.h>
#include <netinet/in.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <sys/socket.h>

#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "fabric/fi/core/internal.h"

namespace bypass::fi::core {
namespace {

constexpr const char kTab[] = "    ";

// Appends like libfabric's ofi_strncatf: vsnprintf into what is left of a
// buffer of `size` bytes (the caller's length minus one).
class Out {
 public:
  Out(char* buf, size_t size) : buf_(buf), size_(size) {}

  __attribute__((format(printf, 2, 3))) void Add(const char* fmt, ...) {
    const size_t used = std::strlen(buf_);
    if (used >= size_) return;
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(buf_ + used, size_ - used, fmt, args);
    va_end(args);
  }
  // Appends as libfabric's address writer (ofi_straddr) does: bounded by
  // the caller's whole length, one byte more than Add.
  __attribute__((format(printf, 2, 3))) void AddAddress(const char* fmt, ...) {
    const size_t used = std::strlen(buf_);
    if (used >= size_ + 1) return;
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(buf_ + used, size_ + 1 - used, fmt, args);
    va_end(args);
  }
  // Drops a trailing ", " (after a list of flags).
  void RemoveComma() {
    const size_t n = std::strlen(buf_);
    if (n >= 2 && std::strcmp(buf_ + n - 2, ", ") == 0) buf_[n - 2] = '\0';
  }

 private:
  char* buf_;
  size_t size_;
};

struct Flag {
  uint64_t bit;
  const char* name;
};

#define BYPASS_FLAG(f) \
  { f, #f }

constexpr Flag kCaps[] = {
    BYPASS_FLAG(FI_MSG),          BYPASS_FLAG(FI_RMA),
    BYPASS_FLAG(FI_TAGGED),       BYPASS_FLAG(FI_ATOMIC),
    BYPASS_FLAG(FI_MULTICAST),    BYPASS_FLAG(FI_COLLECTIVE),
    BYPASS_FLAG(FI_READ),         BYPASS_FLAG(FI_WRITE),
    BYPASS_FLAG(FI_RECV),         BYPASS_FLAG(FI_SEND),
    BYPASS_FLAG(FI_REMOTE_READ),  BYPASS_FLAG(FI_REMOTE_WRITE),
    BYPASS_FLAG(FI_MULTI_RECV),   BYPASS_FLAG(FI_REMOTE_CQ_DATA),
    BYPASS_FLAG(FI_TRIGGER),      BYPASS_FLAG(FI_FENCE),
    BYPASS_FLAG(FI_VARIABLE_MSG), BYPASS_FLAG(FI_RMA_PMEM),
    BYPASS_FLAG(FI_SOURCE_ERR),   BYPASS_FLAG(FI_LOCAL_COMM),
    BYPASS_FLAG(FI_REMOTE_COMM),  BYPASS_FLAG(FI_SHARED_AV),
    BYPASS_FLAG(FI_RMA_EVENT),    BYPASS_FLAG(FI_SOURCE),
    BYPASS_FLAG(FI_NAMED_RX_CTX), BYPASS_FLAG(FI_DIRECTED_RECV),
    BYPASS_FLAG(FI_HMEM),
};

constexpr Flag kOpFlags[] = {
    BYPASS_FLAG(FI_MULTICAST),
    BYPASS_FLAG(FI_MULTI_RECV),
    BYPASS_FLAG(FI_REMOTE_CQ_DATA),
    BYPASS_FLAG(FI_MORE),
    BYPASS_FLAG(FI_PEEK),
    BYPASS_FLAG(FI_TRIGGER),
    BYPASS_FLAG(FI_FENCE),
    BYPASS_FLAG(FI_COMPLETION),
    BYPASS_FLAG(FI_INJECT),
    BYPASS_FLAG(FI_INJECT_COMPLETE),
    BYPASS_FLAG(FI_TRANSMIT_COMPLETE),
    BYPASS_FLAG(FI_DELIVERY_COMPLETE),
    BYPASS_FLAG(FI_MATCH_COMPLETE),
    BYPASS_FLAG(FI_AFFINITY),
    BYPASS_FLAG(FI_CLAIM),
    BYPASS_FLAG(FI_DISCARD),
};

constexpr Flag kModes[] = {
    BYPASS_FLAG(FI_CONTEXT),         BYPASS_FLAG(FI_MSG_PREFIX), BYPASS_FLAG(FI_ASYNC_IOV),
    BYPASS_FLAG(FI_RX_CQ_DATA),      BYPASS_FLAG(FI_LOCAL_MR),   BYPASS_FLAG(FI_NOTIFY_FLAGS_ONLY),
    BYPASS_FLAG(FI_RESTRICTED_COMP), BYPASS_FLAG(FI_CONTEXT2),   BYPASS_FLAG(FI_BUFFERED_RECV),
};

constexpr Flag kMsgOrder[] = {
    BYPASS_FLAG(FI_ORDER_RAR),        BYPASS_FLAG(FI_ORDER_RAW),
    BYPASS_FLAG(FI_ORDER_RAS),        BYPASS_FLAG(FI_ORDER_WAR),
    BYPASS_FLAG(FI_ORDER_WAW),        BYPASS_FLAG(FI_ORDER_WAS),
    BYPASS_FLAG(FI_ORDER_SAR),        BYPASS_FLAG(FI_ORDER_SAW),
    BYPASS_FLAG(FI_ORDER_SAS),        BYPASS_FLAG(FI_ORDER_RMA_RAR),
    BYPASS_FLAG(FI_ORDER_RMA_RAW),    BYPASS_FLAG(FI_ORDER_RMA_WAR),
    BYPASS_FLAG(FI_ORDER_RMA_WAW),    BYPASS_FLAG(FI_ORDER_ATOMIC_RAR),
    BYPASS_FLAG(FI_ORDER_ATOMIC_RAW), BYPASS_FLAG(FI_ORDER_ATOMIC_WAR),
    BYPASS_FLAG(FI_ORDER_ATOMIC_WAW),
};

constexpr Flag kCqFlags[] = {
    BYPASS_FLAG(FI_SEND),
    BYPASS_FLAG(FI_RECV),
    BYPASS_FLAG(FI_RMA),
    BYPASS_FLAG(FI_ATOMIC),
    BYPASS_FLAG(FI_MSG),
    BYPASS_FLAG(FI_TAGGED),
    BYPASS_FLAG(FI_READ),
    BYPASS_FLAG(FI_WRITE),
    BYPASS_FLAG(FI_REMOTE_READ),
    BYPASS_FLAG(FI_REMOTE_WRITE),
    BYPASS_FLAG(FI_REMOTE_CQ_DATA),
    BYPASS_FLAG(FI_MULTI_RECV),
    BYPASS_FLAG(FI_MORE),
    BYPASS_FLAG(FI_CLAIM),
};

constexpr Flag kMrModes[] = {
    BYPASS_FLAG(FI_MR_BASIC),    BYPASS_FLAG(FI_MR_SCALABLE),   BYPASS_FLAG(FI_MR_LOCAL),
    BYPASS_FLAG(FI_MR_RAW),      BYPASS_FLAG(FI_MR_VIRT_ADDR),  BYPASS_FLAG(FI_MR_ALLOCATED),
    BYPASS_FLAG(FI_MR_PROV_KEY), BYPASS_FLAG(FI_MR_MMU_NOTIFY), BYPASS_FLAG(FI_MR_RMA_EVENT),
    BYPASS_FLAG(FI_MR_ENDPOINT), BYPASS_FLAG(FI_MR_HMEM),       BYPASS_FLAG(FI_MR_COLLECTIVE),
};

#undef BYPASS_FLAG

template <size_t N>
void Flags(Out& o, uint64_t value, const Flag (&table)[N]) {
  for (const Flag& f : table) {
    if ((value & f.bit) != 0) o.Add("%s, ", f.name);
  }
  o.RemoveComma();
}

// A name by value from a dense table, "Unknown" outside it.
template <size_t N>
const char* Name(uint64_t value, const char* const (&names)[N]) {
  return value < N && names[value] != nullptr ? names[value] : "Unknown";
}

constexpr const char* kEpTypes[] = {"FI_EP_UNSPEC", "FI_EP_MSG",         "FI_EP_DGRAM",
                                    "FI_EP_RDM",    "FI_EP_SOCK_STREAM", "FI_EP_SOCK_DGRAM"};
constexpr const char* kAddrFormats[] = {
    "FI_FORMAT_UNSPEC", "FI_SOCKADDR",   "FI_SOCKADDR_IN", "FI_SOCKADDR_IN6",
    "FI_SOCKADDR_IB",   "FI_ADDR_PSMX",  "FI_ADDR_GNI",    "FI_ADDR_BGQ",
    "FI_ADDR_MLX",      "FI_ADDR_STR",   "FI_ADDR_PSMX2",  "FI_ADDR_IB_UD",
    "FI_ADDR_EFA",      "FI_ADDR_PSMX3", "FI_ADDR_OPX",    "FI_ADDR_CXI"};
constexpr const char* kThreading[] = {"FI_THREAD_UNSPEC",     "FI_THREAD_SAFE",
                                      "FI_THREAD_FID",        "FI_THREAD_DOMAIN",
                                      "FI_THREAD_COMPLETION", "FI_THREAD_ENDPOINT"};
constexpr const char* kProgress[] = {"FI_PROGRESS_UNSPEC", "FI_PROGRESS_AUTO",
                                     "FI_PROGRESS_MANUAL"};
constexpr const char* kResourceMgmt[] = {"FI_RM_UNSPEC", "FI_RM_DISABLED", "FI_RM_ENABLED"};
constexpr const char* kAvTypes[] = {"FI_AV_UNSPEC", "FI_AV_MAP", "FI_AV_TABLE"};
// libfabric 1.17 does not name FI_PROTO_MXM (7) or FI_PROTO_MRAIL (17).
constexpr const char* kProtocols[] = {"FI_PROTO_UNSPEC",        "FI_PROTO_RDMA_CM_IB_RC",
                                      "FI_PROTO_IWARP",         "FI_PROTO_IB_UD",
                                      "FI_PROTO_PSMX",          "FI_PROTO_UDP",
                                      "FI_PROTO_SOCK_TCP",      nullptr,
                                      "FI_PROTO_IWARP_RDM",     "FI_PROTO_IB_RDM",
                                      "FI_PROTO_GNI",           "FI_PROTO_RXM",
                                      "FI_PROTO_RXD",           "FI_PROTO_MLX",
                                      "FI_PROTO_NETWORKDIRECT", "FI_PROTO_PSMX2",
                                      "FI_PROTO_SHM",           nullptr,
                                      "FI_PROTO_RSTREAM",       "FI_PROTO_RDMA_CM_IB_XRC",
                                      "FI_PROTO_EFA",           "FI_PROTO_PSMX3",
                                      "FI_PROTO_RXM_TCP",       "FI_PROTO_OPX",
                                      "FI_PROTO_CXI",           "FI_PROTO_XNET"};
constexpr const char* kAtomicTypes[] = {"FI_INT8",          "FI_UINT8",
                                        "FI_INT16",         "FI_UINT16",
                                        "FI_INT32",         "FI_UINT32",
                                        "FI_INT64",         "FI_UINT64",
                                        "FI_FLOAT",         "FI_DOUBLE",
                                        "FI_FLOAT_COMPLEX", "FI_DOUBLE_COMPLEX",
                                        "FI_LONG_DOUBLE",   "FI_LONG_DOUBLE_COMPLEX",
                                        "FI_INT128",        "FI_UINT128"};
constexpr const char* kAtomicOps[] = {
    "FI_MIN",         "FI_MAX",          "FI_SUM",      "FI_PROD",     "FI_LOR",
    "FI_LAND",        "FI_BOR",          "FI_BAND",     "FI_LXOR",     "FI_BXOR",
    "FI_ATOMIC_READ", "FI_ATOMIC_WRITE", "FI_CSWAP",    "FI_CSWAP_NE", "FI_CSWAP_LE",
    "FI_CSWAP_LT",    "FI_CSWAP_GE",     "FI_CSWAP_GT", "FI_MSWAP"};
constexpr const char* kEqEvents[] = {"FI_NOTIFY",       "FI_CONNREQ",     "FI_CONNECTED",
                                     "FI_SHUTDOWN",     "FI_MR_COMPLETE", "FI_AV_COMPLETE",
                                     "FI_JOIN_COMPLETE"};
constexpr const char* kOpTypes[] = {"FI_OP_RECV",     "FI_OP_SEND",         "FI_OP_TRECV",
                                    "FI_OP_TSEND",    "FI_OP_READ",         "FI_OP_WRITE",
                                    "FI_OP_ATOMIC",   "FI_OP_FETCH_ATOMIC", "FI_OP_COMPARE_ATOMIC",
                                    "FI_OP_CNTR_SET", "FI_OP_CNTR_ADD"};
constexpr const char* kCollectiveOps[] = {"FI_BARRIER",   "FI_BROADCAST", "FI_ALLTOALL",
                                          "FI_ALLREDUCE", "FI_ALLGATHER", "FI_REDUCE_SCATTER",
                                          "FI_REDUCE",    "FI_SCATTER",   "FI_GATHER"};
constexpr const char* kHmemIfaces[] = {"FI_HMEM_SYSTEM", "FI_HMEM_CUDA",   "FI_HMEM_ROCR",
                                       "FI_HMEM_ZE",     "FI_HMEM_NEURON", "FI_HMEM_SYNAPSEAI"};
constexpr const char* kCqFormats[] = {"FI_CQ_FORMAT_UNSPEC", "FI_CQ_FORMAT_CONTEXT",
                                      "FI_CQ_FORMAT_MSG", "FI_CQ_FORMAT_DATA",
                                      "FI_CQ_FORMAT_TAGGED"};
constexpr const char* kLogLevels[] = {"warn", "trace", "info", "debug"};
constexpr const char* kLogSubsys[] = {"core", "fabric", "domain", "ep_ctrl", "ep_data",
                                      "av",   "cq",     "eq",     "mr",      "cntr"};

const char* AddrFormat(uint32_t f) {
  if (f < sizeof(kAddrFormats) / sizeof(kAddrFormats[0])) return kAddrFormats[f];
  return (f & FI_PROV_SPECIFIC) != 0 ? "Provider specific" : "Unknown";
}

const char* Protocol(uint32_t p) {
  if (p < sizeof(kProtocols) / sizeof(kProtocols[0]) && kProtocols[p] != nullptr)
    return kProtocols[p];
  return (p & FI_PROV_SPECIFIC) != 0 ? "Provider specific" : "Unknown";
}

const char* Str(const char* s) { return s != nullptr ? s : "(null)"; }

template <typename T>
T Load(const void* p, size_t offset) {
  T v;
  std::memcpy(&v, static_cast<const uint8_t*>(p) + offset, sizeof(v));
  return v;
}

// An address as libfabric's ofi_straddr writes it; "" for a format (or
// socket family) it has no text for.
void Address(Out& o, uint32_t format, const void* addr, size_t len) {
  if (addr == nullptr) {
    o.Add("(null)");
    return;
  }
  char ip[INET6_ADDRSTRLEN];
  switch (format) {
    case FI_SOCKADDR:
    case FI_SOCKADDR_IN:
    case FI_SOCKADDR_IN6: {
      if (len < sizeof(sa_family_t)) return;
      const sa_family_t family = Load<sa_family_t>(addr, 0);
      if (family == AF_INET && len >= sizeof(sockaddr_in)) {
        const sockaddr_in sin = Load<sockaddr_in>(addr, 0);
        inet_ntop(AF_INET, &sin.sin_addr, ip, sizeof(ip));
        o.AddAddress("fi_sockaddr_in://%s:%" PRIu16, ip, ntohs(sin.sin_port));
      } else if (family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
        const sockaddr_in6 sin6 = Load<sockaddr_in6>(addr, 0);
        inet_ntop(AF_INET6, &sin6.sin6_addr, ip, sizeof(ip));
        o.AddAddress("fi_sockaddr_in6://[%s]:%" PRIu16, ip, ntohs(sin6.sin6_port));
      }
      return;
    }
    case FI_SOCKADDR_IB:
      // struct sockaddr_ib: family, pkey (be16), flowinfo, gid (16 bytes at
      // 8), service id (be64 at 24), its mask, scope id (at 40; the last
      // byte is written).
      if (len >= 48) {
        inet_ntop(AF_INET6, static_cast<const uint8_t*>(addr) + 8, ip, sizeof(ip));
        const uint64_t sid = be64toh(Load<uint64_t>(addr, 24));
        o.AddAddress("fi_sockaddr_ib://[%s]:0x%x:0x%x:0x%x", ip, ntohs(Load<uint16_t>(addr, 2)),
                     static_cast<unsigned>((sid >> 16) & 0xfff), Load<uint8_t>(addr, 47));
      }
      return;
    case FI_ADDR_PSMX:
      if (len >= 8) o.AddAddress("fi_addr_psmx://%" PRIx64, Load<uint64_t>(addr, 0));
      return;
    case FI_ADDR_GNI:
      if (len >= 8) o.AddAddress("fi_addr_gni://%" PRIx64, Load<uint64_t>(addr, 0));
      return;
    case FI_ADDR_BGQ:
      o.AddAddress("fi_addr_bgq://%p", addr);
      return;
    case FI_ADDR_MLX:
      o.AddAddress("fi_addr_mlx://%p", addr);
      return;
    case FI_ADDR_STR:
      o.AddAddress("%.*s", static_cast<int>(strnlen(static_cast<const char*>(addr), len)),
                   static_cast<const char*>(addr));
      return;
    case FI_ADDR_PSMX2:
      if (len >= 16) {
        o.AddAddress("fi_addr_psmx2://%" PRIx64 ":%" PRIx64, Load<uint64_t>(addr, 0),
                     Load<uint64_t>(addr, 8));
      }
      return;
    case FI_ADDR_IB_UD:
      // gid, qpn (u32), lid (u16), pkey (u16), service (u16), sl (u8).
      if (len >= 27) {
        inet_ntop(AF_INET6, addr, ip, sizeof(ip));
        o.AddAddress("fi_addr_ib_ud://%s:%" PRIx32 "/%" PRIx16 "/%" PRIx16 "/%" PRIx8, ip,
                     Load<uint32_t>(addr, 16), Load<uint16_t>(addr, 20), Load<uint16_t>(addr, 22),
                     Load<uint8_t>(addr, 26));
      }
      return;
    case FI_ADDR_EFA:
      // raw gid, qpn (u16), pad, qkey (u32).
      if (len >= 24) {
        inet_ntop(AF_INET6, addr, ip, sizeof(ip));
        o.AddAddress("fi_addr_efa://[%s]:%" PRIu16 ":%" PRIu32, ip, Load<uint16_t>(addr, 16),
                     Load<uint32_t>(addr, 20));
      }
      return;
    case FI_ADDR_PSMX3:
      if (len >= 32) {
        o.AddAddress("fi_addr_psmx3://%" PRIx64 ":%" PRIx64 ":%" PRIx64 ":%" PRIx64,
                     Load<uint64_t>(addr, 0), Load<uint64_t>(addr, 8), Load<uint64_t>(addr, 16),
                     Load<uint64_t>(addr, 24));
      }
      return;
    case FI_ADDR_OPX:
      if (len >= 8) o.AddAddress("fi_addr_opx://%016" PRIx64, Load<uint64_t>(addr, 0));
      return;
    case FI_ADDR_CXI:
      if (len >= 4) o.AddAddress("fi_addr_cxi://0x%08" PRIx32, Load<uint32_t>(addr, 0));
      return;
    default:
      // FI_FORMAT_UNSPEC and unknown formats.
      return;
  }
}

void FlagLine(Out& o, const char* prefix, const char* field, uint64_t value, const Flag* table,
              size_t n) {
  o.Add("%s%s: [ ", prefix, field);
  for (size_t i = 0; i < n; ++i) {
    if ((value & table[i].bit) != 0) o.Add("%s, ", table[i].name);
  }
  o.RemoveComma();
  o.Add(" ]\n");
}

#define BYPASS_FLAG_LINE(o, prefix, field, value, table) \
  FlagLine(o, prefix, field, value, table, sizeof(table) / sizeof(table[0]))

void CompOrder(Out& o, const char* prefix, uint64_t order) {
  o.Add("%scomp_order: [ ", prefix);
  if ((order & FI_ORDER_STRICT) == FI_ORDER_NONE) {
    o.Add("FI_ORDER_NONE, ");
  } else if ((order & FI_ORDER_STRICT) == FI_ORDER_STRICT) {
    o.Add("FI_ORDER_STRICT, ");
  }
  if ((order & FI_ORDER_DATA) != 0) o.Add("FI_ORDER_DATA, ");
  o.RemoveComma();
  o.Add(" ]\n");
}

// `prefix` indents the header; fields get one more level.
void TxAttr(Out& o, const char* prefix, const fi_tx_attr* a) {
  if (a == nullptr) {
    o.Add("%sfi_tx_attr: (null)\n", prefix);
    return;
  }
  char p[64];
  std::snprintf(p, sizeof(p), "%s%s", prefix, kTab);
  o.Add("%sfi_tx_attr:\n", prefix);
  BYPASS_FLAG_LINE(o, p, "caps", a->caps, kCaps);
  BYPASS_FLAG_LINE(o, p, "mode", a->mode, kModes);
  BYPASS_FLAG_LINE(o, p, "op_flags", a->op_flags, kOpFlags);
  BYPASS_FLAG_LINE(o, p, "msg_order", a->msg_order, kMsgOrder);
  CompOrder(o, p, a->comp_order);
  o.Add("%sinject_size: %zu\n", p, a->inject_size);
  o.Add("%ssize: %zu\n", p, a->size);
  o.Add("%siov_limit: %zu\n", p, a->iov_limit);
  o.Add("%srma_iov_limit: %zu\n", p, a->rma_iov_limit);
  o.Add("%stclass: 0x%x\n", p, a->tclass);
}

void RxAttr(Out& o, const char* prefix, const fi_rx_attr* a) {
  if (a == nullptr) {
    o.Add("%sfi_rx_attr: (null)\n", prefix);
    return;
  }
  char p[64];
  std::snprintf(p, sizeof(p), "%s%s", prefix, kTab);
  o.Add("%sfi_rx_attr:\n", prefix);
  BYPASS_FLAG_LINE(o, p, "caps", a->caps, kCaps);
  BYPASS_FLAG_LINE(o, p, "mode", a->mode, kModes);
  BYPASS_FLAG_LINE(o, p, "op_flags", a->op_flags, kOpFlags);
  BYPASS_FLAG_LINE(o, p, "msg_order", a->msg_order, kMsgOrder);
  CompOrder(o, p, a->comp_order);
  o.Add("%stotal_buffered_recv: %zu\n", p, a->total_buffered_recv);
  o.Add("%ssize: %zu\n", p, a->size);
  o.Add("%siov_limit: %zu\n", p, a->iov_limit);
}

void CtxCount(Out& o, const char* prefix, const char* field, size_t n) {
  if (n == FI_SHARED_CONTEXT) {
    o.Add("%s%s: FI_SHARED_CONTEXT\n", prefix, field);
  } else {
    o.Add("%s%s: %zu\n", prefix, field, n);
  }
}

void EpAttr(Out& o, const char* prefix, const fi_ep_attr* a) {
  if (a == nullptr) {
    o.Add("%sfi_ep_attr: (null)\n", prefix);
    return;
  }
  char p[64];
  std::snprintf(p, sizeof(p), "%s%s", prefix, kTab);
  o.Add("%sfi_ep_attr:\n", prefix);
  o.Add("%stype: %s\n", p, Name(static_cast<uint32_t>(a->type), kEpTypes));
  o.Add("%sprotocol: %s\n", p, Protocol(a->protocol));
  o.Add("%sprotocol_version: %d\n", p, static_cast<int>(a->protocol_version));
  o.Add("%smax_msg_size: %zu\n", p, a->max_msg_size);
  o.Add("%smsg_prefix_size: %zu\n", p, a->msg_prefix_size);
  o.Add("%smax_order_raw_size: %zu\n", p, a->max_order_raw_size);
  o.Add("%smax_order_war_size: %zu\n", p, a->max_order_war_size);
  o.Add("%smax_order_waw_size: %zu\n", p, a->max_order_waw_size);
  o.Add("%smem_tag_format: 0x%016" PRIx64 "\n", p, a->mem_tag_format);
  CtxCount(o, p, "tx_ctx_cnt", a->tx_ctx_cnt);
  CtxCount(o, p, "rx_ctx_cnt", a->rx_ctx_cnt);
  o.Add("%sauth_key_size: %zu\n", p, a->auth_key_size);
}

void DomainAttr(Out& o, const char* prefix, const fi_domain_attr* a) {
  if (a == nullptr) {
    o.Add("%sfi_domain_attr: (null)\n", prefix);
    return;
  }
  char p[64];
  std::snprintf(p, sizeof(p), "%s%s", prefix, kTab);
  o.Add("%sfi_domain_attr:\n", prefix);
  // libfabric writes the low 32 bits of the pointer ("0x%x").
  o.Add("%sdomain: 0x%x\n", p,
        static_cast<unsigned>(reinterpret_cast<uintptr_t>(a->domain) & 0xffffffffu));
  o.Add("%sname: %s\n", p, Str(a->name));
  o.Add("%sthreading: %s\n", p, Name(static_cast<uint32_t>(a->threading), kThreading));
  o.Add("%scontrol_progress: %s\n", p, Name(static_cast<uint32_t>(a->control_progress), kProgress));
  o.Add("%sdata_progress: %s\n", p, Name(static_cast<uint32_t>(a->data_progress), kProgress));
  o.Add("%sresource_mgmt: %s\n", p, Name(static_cast<uint32_t>(a->resource_mgmt), kResourceMgmt));
  o.Add("%sav_type: %s\n", p, Name(static_cast<uint32_t>(a->av_type), kAvTypes));
  BYPASS_FLAG_LINE(o, p, "mr_mode", static_cast<uint32_t>(a->mr_mode), kMrModes);
  o.Add("%smr_key_size: %zu\n", p, a->mr_key_size);
  o.Add("%scq_data_size: %zu\n", p, a->cq_data_size);
  o.Add("%scq_cnt: %zu\n", p, a->cq_cnt);
  o.Add("%sep_cnt: %zu\n", p, a->ep_cnt);
  o.Add("%stx_ctx_cnt: %zu\n", p, a->tx_ctx_cnt);
  o.Add("%srx_ctx_cnt: %zu\n", p, a->rx_ctx_cnt);
  o.Add("%smax_ep_tx_ctx: %zu\n", p, a->max_ep_tx_ctx);
  o.Add("%smax_ep_rx_ctx: %zu\n", p, a->max_ep_rx_ctx);
  o.Add("%smax_ep_stx_ctx: %zu\n", p, a->max_ep_stx_ctx);
  o.Add("%smax_ep_srx_ctx: %zu\n", p, a->max_ep_srx_ctx);
  o.Add("%scntr_cnt: %zu\n", p, a->cntr_cnt);
  o.Add("%smr_iov_limit: %zu\n", p, a->mr_iov_limit);
  BYPASS_FLAG_LINE(o, p, "caps", a->caps, kCaps);
  BYPASS_FLAG_LINE(o, p, "mode", a->mode, kModes);
  o.Add("%sauth_key_size: %zu\n", p, a->auth_key_size);
  o.Add("%smax_err_data: %zu\n", p, a->max_err_data);
  o.Add("%smr_cnt: %zu\n", p, a->mr_cnt);
  o.Add("%stclass: 0x%x\n", p, a->tclass);
}

void FabricAttr(Out& o, const char* prefix, const fi_fabric_attr* a) {
  if (a == nullptr) {
    o.Add("%sfi_fabric_attr: (null)\n", prefix);
    return;
  }
  char p[64];
  std::snprintf(p, sizeof(p), "%s%s", prefix, kTab);
  o.Add("%sfi_fabric_attr:\n", prefix);
  o.Add("%sname: %s\n", p, Str(a->name));
  o.Add("%sprov_name: %s\n", p, Str(a->prov_name));
  o.Add("%sprov_version: %u.%u\n", p, FI_MAJOR(a->prov_version), FI_MINOR(a->prov_version));
  o.Add("%sapi_version: %u.%u\n", p, FI_MAJOR(a->api_version), FI_MINOR(a->api_version));
}

void Info(Out& o, const fi_info* info) {
  const char* p = kTab;
  o.Add("fi_info:\n");
  BYPASS_FLAG_LINE(o, p, "caps", info->caps, kCaps);
  BYPASS_FLAG_LINE(o, p, "mode", info->mode, kModes);
  o.Add("%saddr_format: %s\n", p, AddrFormat(info->addr_format));
  o.Add("%ssrc_addrlen: %zu\n", p, info->src_addrlen);
  o.Add("%sdest_addrlen: %zu\n", p, info->dest_addrlen);
  o.Add("%ssrc_addr: ", p);
  Address(o, info->addr_format, info->src_addr, info->src_addrlen);
  o.Add("\n%sdest_addr: ", p);
  Address(o, info->addr_format, info->dest_addr, info->dest_addrlen);
  o.Add("\n%shandle: %p\n", p, static_cast<void*>(info->handle));
  TxAttr(o, p, info->tx_attr);
  RxAttr(o, p, info->rx_attr);
  EpAttr(o, p, info->ep_attr);
  DomainAttr(o, p, info->domain_attr);
  FabricAttr(o, p, info->fabric_attr);
  // A NIC's attributes are not written (bypass returns none): its address.
  o.Add("%snic: %p\n", p, static_cast<void*>(info->nic));
}

template <typename T>
T Value(const void* data) {
  T v;
  std::memcpy(&v, data, sizeof(v));
  return v;
}

void ToStr(Out& o, const void* data, fi_type type) {
  switch (type) {
    case FI_TYPE_INFO:
      Info(o, static_cast<const fi_info*>(data));
      return;
    case FI_TYPE_EP_TYPE:
      o.Add("%s", Name(Value<uint32_t>(data), kEpTypes));
      return;
    case FI_TYPE_CAPS:
      Flags(o, Value<uint64_t>(data), kCaps);
      return;
    case FI_TYPE_OP_FLAGS:
      Flags(o, Value<uint64_t>(data), kOpFlags);
      return;
    case FI_TYPE_ADDR_FORMAT:
      o.Add("%s", AddrFormat(Value<uint32_t>(data)));
      return;
    case FI_TYPE_TX_ATTR:
      TxAttr(o, "", static_cast<const fi_tx_attr*>(data));
      return;
    case FI_TYPE_RX_ATTR:
      RxAttr(o, "", static_cast<const fi_rx_attr*>(data));
      return;
    case FI_TYPE_EP_ATTR:
      EpAttr(o, "", static_cast<const fi_ep_attr*>(data));
      return;
    case FI_TYPE_DOMAIN_ATTR:
      DomainAttr(o, "", static_cast<const fi_domain_attr*>(data));
      return;
    case FI_TYPE_FABRIC_ATTR:
      FabricAttr(o, "", static_cast<const fi_fabric_attr*>(data));
      return;
    case FI_TYPE_THREADING:
      o.Add("%s", Name(Value<uint32_t>(data), kThreading));
      return;
    case FI_TYPE_PROGRESS:
      o.Add("%s", Name(Value<uint32_t>(data), kProgress));
      return;
    case FI_TYPE_PROTOCOL:
      o.Add("%s", Protocol(Value<uint32_t>(data)));
      return;
    case FI_TYPE_MSG_ORDER:
      Flags(o, Value<uint64_t>(data), kMsgOrder);
      return;
    case FI_TYPE_MODE:
      Flags(o, Value<uint64_t>(data), kModes);
      return;
    case FI_TYPE_AV_TYPE:
      o.Add("%s", Name(Value<uint32_t>(data), kAvTypes));
      return;
    case FI_TYPE_ATOMIC_TYPE:
      o.Add("%s", Name(Value<uint32_t>(data), kAtomicTypes));
      return;
    case FI_TYPE_ATOMIC_OP:
      o.Add("%s", Name(Value<uint32_t>(data), kAtomicOps));
      return;
    case FI_TYPE_VERSION:
      // The library's version, whatever data holds (as libfabric does).
      o.Add("%d.%d.%d", FI_MAJOR_VERSION, FI_MINOR_VERSION, FI_REVISION_VERSION);
      return;
    case FI_TYPE_EQ_EVENT:
      o.Add("%s", Name(Value<uint32_t>(data), kEqEvents));
      return;
    case FI_TYPE_CQ_EVENT_FLAGS:
      Flags(o, Value<uint64_t>(data), kCqFlags);
      return;
    case FI_TYPE_MR_MODE:
      Flags(o, static_cast<uint32_t>(Value<int>(data)), kMrModes);
      return;
    case FI_TYPE_OP_TYPE:
      o.Add("%s", Name(Value<uint32_t>(data), kOpTypes));
      return;
    case FI_TYPE_FID:
      o.Add("fid: %p\n", data);
      return;
    case FI_TYPE_COLLECTIVE_OP:
      o.Add("%s", Name(Value<uint32_t>(data), kCollectiveOps));
      return;
    case FI_TYPE_HMEM_IFACE:
      o.Add("%s", Name(Value<uint32_t>(data), kHmemIfaces));
      return;
    case FI_TYPE_CQ_FORMAT:
      o.Add("%s", Name(Value<uint32_t>(data), kCqFormats));
      return;
    case FI_TYPE_LOG_LEVEL:
      o.Add("%s", Name(Value<uint32_t>(data), kLogLevels));
      return;
    case FI_TYPE_LOG_SUBSYS:
      o.Add("%s", Name(Value<uint32_t>(data), kLogSubsys));
      return;
  }
  o.Add("Unknown type");
}

}  // namespace
}  // namespace bypass::fi::core

extern "C" char* fi_tostr_r(char* buf, size_t len, const void* data, enum fi_type datatype) {
  // libfabric answers null for no buffer and for no data.
  if (buf == nullptr || len == 0 || data == nullptr) return nullptr;
  buf[0] = '\0';
  bypass::fi::core::Out out(buf, len - 1);
  bypass::fi::core::ToStr(out, data, datatype);
  return buf;
}

extern "C" char* fi_tostr(const void* data, enum fi_type datatype) {
  // One buffer per thread, as libfabric's; valid until the thread's next call.
  static thread_local char buf[8192];
  return fi_tostr_r(buf, sizeof(buf), data, datatype);
}
