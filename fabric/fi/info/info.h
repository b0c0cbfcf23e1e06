// fi_getinfo's work for the bypass provider: the fi_info entries each
// device offers, filtered by an application's hints, with node/service
// resolved into addresses. Used by the provider's getinfo (the .so inside
// libfabric) and by the static library's own fi_getinfo (fabric/fi/core).
#ifndef BYPASS_FABRIC_FI_INFO_INFO_H_
#define BYPASS_FABRIC_FI_INFO_INFO_H_

#include <rdma/fabric.h>

#include <cstdint>
#include <string>

#include "absl/types/span.h"
#include "driver/device.h"
#include "fabric/rdm/config.h"

namespace bypass::fi {

inline constexpr char kProviderName[] = "bypass";
inline constexpr char kFabricName[] = "bypass";
inline constexpr uint32_t kProviderVersion = FI_VERSION(1, 0);  // our own version
inline constexpr uint32_t kApiVersion = FI_VERSION(1, 17);      // the libfabric API we implement

// The size of an authorization key: the engine's 32-bit auth_key. Keys of
// kMinHandshakeKeySize bytes or more authenticate handshakes instead
// (fabric/fi/keys.h); sizes between are refused.
inline constexpr size_t kAuthKeySize = sizeof(uint32_t);
inline constexpr size_t kMinHandshakeKeySize = 32;
inline bool AuthKeySizeAccepted(size_t size) {
  return size == 0 || size == kAuthKeySize || size >= kMinHandshakeKeySize;
}
// Registration keys and remote CQ data are 64-bit.
inline constexpr size_t kMrKeySize = sizeof(uint64_t);
inline constexpr size_t kCqDataSize = sizeof(uint64_t);

// The capabilities of each endpoint type (primary and secondary) the
// facade can offer, before a device and hints narrow them.
// FI_LOCAL_COMM / FI_REMOTE_COMM come from the device (see DomainOffer).
inline constexpr uint64_t kRdmCaps = FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | FI_SEND | FI_RECV | FI_READ |
                                     FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE |
                                     FI_DIRECTED_RECV | FI_MULTI_RECV | FI_SOURCE | FI_RMA_EVENT |
                                     FI_SHARED_AV | FI_NAMED_RX_CTX | FI_TRIGGER | FI_COLLECTIVE;
// FI_COLLECTIVE: collectives (fabric/fi/coll.h), RDM only, offered only
// when asked (its endpoints' tags are 63 bits: kMsgTagFormat).
// FI_TRIGGER: triggered operations and deferred work (fabric/fi/trigger.h),
// RDM only (datagram and connected endpoints: not offered).
// FI_SHARED_AV: named AVs shared by the user's processes of a host
// (fabric/fi/av_shared.h), for both endpoint types.
inline constexpr uint64_t kDgramCaps = FI_MSG | FI_SEND | FI_RECV | FI_SOURCE | FI_SHARED_AV;
// FI_EP_MSG (fabric/fi/msg_ep.h): an RDM endpoint with one peer, the
// connection's, and no AV: no FI_SOURCE, FI_DIRECTED_RECV or FI_SHARED_AV.
// Offered wherever FI_EP_RDM is.
inline constexpr uint64_t kMsgCaps = FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | FI_SEND | FI_RECV |
                                     FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE |
                                     FI_MULTI_RECV | FI_RMA_EVENT;
// Tags of FI_EP_MSG are 63 bits: the top one marks the connection
// manager's messages (fabric/fi/cm.h).
inline constexpr uint64_t kMsgTagFormat = 0x2AAAAAAAAAAAAAAAull;
// Offered on FI_EP_DGRAM only where DomainOffer::dgram_caps adds it (a
// device that carries multicast: fabric/fi/mcast.h).
inline constexpr uint64_t kDgramMulticastCap = FI_MULTICAST;

// The wire protocol an RDM entry names in ep_attr->protocol: libfabric has
// no value for it, so it is provider specific (fi_endpoint(3)); the version
// is the one of fabric/rdm/PROTOCOL.md. DGRAM endpoints send plain UDP
// datagrams (FI_PROTO_UDP), so they talk to SOCK_DGRAM sockets too.
inline constexpr uint32_t kProtoBypassRdm = FI_PROV_SPECIFIC | 1;
inline constexpr uint32_t kDgramProtocolVersion = 1;
// FI_MSG_PREFIX on FI_EP_DGRAM (offered when hints->mode asks): the space
// the application leaves ahead of each send and receive buffer. The
// provider writes nothing there (fi_getinfo(3): its contents are opaque);
// a multiple of 8 (fi_endpoint(3)), the smallest one.
inline constexpr size_t kDgramMsgPrefixSize = 8;

// Limits of a domain that are ours to choose (host memory objects).
inline constexpr size_t kMaxCqs = 1024;
inline constexpr size_t kMaxCntrs = 1024;
// Endpoints of one domain: each has its own UDP port on the device's
// queue, demultiplexed by rdm::Port (its kMaxEndpoints); each is one
// transmit and one receive context. Memory regions: the engine's
// max_regions (fabric/rdm/config.h), the regions each endpoint can serve.
inline constexpr size_t kMaxEndpoints = 64;
// Transmit and receive contexts of a scalable endpoint (FI_EP_RDM only):
// context i is an engine endpoint at the scalable endpoint's UDP port + i
// (fabric/fi/sep.h), and av_attr->rx_ctx_bits names it (fi_rx_addr).
inline constexpr size_t kMaxEpContexts = 16;
inline constexpr int kMaxRxCtxBits = 16;
// Queues of a device that progress independently (domain_attr->tx_ctx_cnt
// and rx_ctx_cnt): a device that delivers by port (host_address: kernel
// UDP, shm and their composite) is opened again for each (fabric/fi/lane.h),
// one with steering has its queues, any other one queue, demultiplexed in
// software.
inline size_t IndependentQueues(const driver::DeviceInfo& d) {
  if (d.host_address) return kMaxEndpoints;
  return d.can_steer ? d.num_queues : 1;
}
// One buffer per operation: the engine's sends, receives and regions take
// one contiguous buffer each.
inline constexpr size_t kIovLimit = 1;
// Buffers of one send, receive or RMA's local side (tx/rx iov_limit): the
// facade gathers them into one (fabric/fi/ep_ops.cc); more is -FI_EINVAL.
inline constexpr size_t kMsgIovLimit = 4;
// A tag is 64 bits; with no hint the format is libfabric's generic one.
inline constexpr uint64_t kDefaultTagFormat = 0xAAAAAAAAAAAAAAAAull;

// What one domain (one device) offers, before hints.
struct DomainOffer {
  std::string name;           // domain_attr->name: the device URI, e.g. "shm:+udp:"
  driver::DeviceInfo device;  // mtu, mac, ipv4, queues, can_steer (driver/device.h)
  rdm::EndpointConfig limits;  // sizes an endpoint would be created with (fabric/rdm/config.h)
  // The UDP port a destination named by node alone gets (the base port:
  // the first endpoint of a host has it). A source address named by no
  // one gets port 0: the endpoint takes a free port at fi_enable.
  uint16_t default_port = 0;
  // What the facade implements on this domain (a subset of kRdmCaps /
  // kDgramCaps; e.g. drop FI_RMA while the engine lacks it). 0: no entry
  // of that endpoint type.
  uint64_t rdm_caps = kRdmCaps;
  uint64_t dgram_caps = kDgramCaps;
  // FI_EP_MSG (within rdm_caps: the same engine endpoint). Off unless the
  // caller offers it: the provider does (provider.cc).
  uint64_t msg_caps = 0;
  // FI_LOCAL_COMM and/or FI_REMOTE_COMM; 0: from device.driver (memif and
  // loopback reach this host only, every other driver both).
  uint64_t comm_caps = 0;
  // Transmit/receive contexts of a scalable endpoint (max_ep_tx_ctx,
  // max_ep_rx_ctx) of FI_EP_RDM (FI_EP_DGRAM: 1); 1: no scalable endpoints.
  size_t max_ep_ctx = 1;
};

// Returned attributes the facade must honour when it opens objects from an
// entry: domain_attr->threading is the hint's (FI_THREAD_DOMAIN when none;
// every level but FI_THREAD_DOMAIN needs the domain's lock: its endpoints
// share one device queue); mr_mode keeps only FI_MR_VIRT_ADDR and
// FI_MR_PROV_KEY of the hint's bits (offsets and application keys
// otherwise), or FI_MR_BASIC / FI_MR_SCALABLE as asked (legacy: the
// domain follows them as the bits they stand for); av_type is the hint's (FI_AV_UNSPEC when
// none: either type opens); resource_mgmt is the hint's (FI_RM_ENABLED when
// none); control_progress and data_progress are the hint's (FI_PROGRESS_AUTO
// only when asked: the domain then starts a progress thread; otherwise
// FI_PROGRESS_MANUAL).

// Builds the candidate fi_info entries of every offer (FI_EP_RDM over the
// engine and FI_EP_DGRAM straight onto the driver), filters them by hints,
// trims caps to what was asked, resolves node/service (and FI_SOURCE) into
// src_addr/dest_addr (FI_SOCKADDR_IN, fabric/fi/address/address.h). Returns 0 and a
// list allocated with calloc/malloc/strdup only (libfabric's fi_freeinfo
// frees it with free()), or a negative fi_errno: -FI_ENODATA when nothing
// matches (why: LastMismatch()), -FI_EINVAL / -FI_ENOMEM etc.
// fabric_attr->prov_name is left null (the core fills it, as libfabric does).
// node: an IPv4 literal, a host name (getaddrinfo; FI_NUMERICHOST: literals
// only) or "fi_sockaddr_in://<IPv4>:<port>" (service then null); service: a
// UDP port or service name. Without FI_SOURCE they name the destination (a
// service alone: a port on the domain's own IPv4; a node alone: the
// default port) and the source is the domain's IPv4 and default port (or
// hints->src_addr, which also picks the domain by IPv4); with FI_SOURCE
// they name the source (0.0.0.0: any domain) and hints->dest_addr is the
// destination. A destination's MAC comes from the domain (its own IPv4), the
// kernel neighbour table, or stays zero for the engine to discover.
// Thread-safe.
int GetInfo(uint32_t version, const char* node, const char* service, uint64_t flags,
            const fi_info* hints, absl::Span<const DomainOffer> offers, fi_info** info);

// Why the last GetInfo on this thread matched nothing, for logs (one line;
// empty after a match).
const char* LastMismatch();

// Called once per rejected candidate with a one-line reason (the provider
// logs it with FI_INFO). Null: no calls. Process-wide; set it before GetInfo.
using MismatchLogFn = void (*)(const char* line);
void SetMismatchLog(MismatchLogFn fn);

// The kernel neighbour table that gives a destination's MAC (tests point it
// at a file of their own); null: "/proc/net/arp". Process-wide.
// REQUIRES: path outlives the GetInfo calls that use it.
void SetNeighbourTablePath(const char* path);

// Whether a hint's prov_name names this provider: "bypass" (any case),
// possibly followed by exclusions of utility providers ("bypass;^ofi_rxm",
// as libfabric's core passes them); "bypass;ofi_rxm" asks for a layering
// bypass does not have.
bool ProviderNameMatches(const char* prov_name);

// Frees a list built by GetInfo or DupInfo (every pointer with free()); the
// same as libfabric's fi_freeinfo. Null is fine.
void FreeInfo(fi_info* info);

// A deep copy of one entry (not its next), allocated like GetInfo's; null
// `info` gives a zeroed entry with every attribute allocated, like
// fi_allocinfo. Null on allocation failure.
fi_info* DupInfo(const fi_info* info);

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_INFO_INFO_H_
