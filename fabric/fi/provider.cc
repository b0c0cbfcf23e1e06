// The provider entry point (fi_prov_ini), its FI_BYPASS_* parameters, and
// getinfo over the configured devices. The fabric it opens is fabric.cc's.
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include <rdma/providers/fi_prov.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "driver/host.h"
#include "driver/uri.h"
#include "fabric/fi/common.h"
#include "fabric/fi/fabric.h"
#include "fabric/fi/info/info.h"
#include "fabric/fi/mcast.h"
#include "fabric/fi/services.h"

namespace bypass::fi {
namespace {

int GetInfoEntry(uint32_t version, const char* node, const char* service, uint64_t flags,
                 const fi_info* hints, fi_info** info);
void Cleanup();

fi_provider g_provider = {
    .version = kProviderVersion,
    .fi_version = kApiVersion,
    .context = {},
    .name = kProviderName,
    .getinfo = GetInfoEntry,
    .fabric = OpenFabric,
    .cleanup = Cleanup,
};

// libfabric unloads the provider after this: no call can reach a shell
// again, and the graveyard would be unreachable (a leak) once unloaded.
void Cleanup() { FreeRetiredShells(); }

void LogMismatch(const char* line) { BYPASS_FI_INFO(FI_LOG_CORE, "%s\n", line); }

// The DeviceInfo GetInfo can know without opening the device (opening a
// memif at fi_getinfo time would take its server role): what the URI says,
// and for the devices with the host's address (udp, shm) the host's IPv4.
// A composite "LOCAL+REMOTE" is described as both: the smaller MTU, the
// remote device's address.
driver::DeviceInfo DescribeWithoutOpening(const std::string& uri) {
  if (const size_t plus = driver::CompositeSplit(uri); plus != std::string::npos) {
    driver::DeviceInfo local = DescribeWithoutOpening(uri.substr(0, plus));
    driver::DeviceInfo d = DescribeWithoutOpening(uri.substr(plus + 1));
    d.uri = uri;
    d.driver = local.driver + "+" + d.driver;
    d.mtu = std::min(d.mtu, local.mtu);
    return d;
  }
  driver::DeviceInfo d;
  d.uri = uri;
  absl::StatusOr<driver::DeviceUri> parsed = driver::DeviceUri::Parse(uri);
  if (!parsed.ok()) return d;
  d.driver = parsed->scheme == "memif" ? "net_memif" : parsed->scheme;
  if (parsed->scheme == "dpdk") {
    // "net_af_xdp0,iface=veth0" -> net_af_xdp
    std::string t = parsed->target;
    while (!t.empty() && t.back() >= '0' && t.back() <= '9') t.pop_back();
    if (!t.empty()) d.driver = t;
  }
  if (parsed->scheme == "udp" || parsed->scheme == "shm") {
    d.host_address = true;
    d.ipv4 = driver::PrimaryIpv4();
    if (parsed->scheme == "udp" && !parsed->target.empty()) {
      if (auto v = driver::Ipv4Address::Parse(parsed->target); v.ok()) {
        d.ipv4 = *v;
      } else if (auto h = driver::FindInterface(parsed->target); h.ok()) {
        d.ipv4 = h->ipv4;
      }
    }
  }
  if (auto queues = parsed->Get("queues")) {
    uint32_t q = 0;
    if (absl::SimpleAtoi(*queues, &q) && q > 0 && q <= UINT16_MAX) d.num_queues = q;
  }
  // Loopback ports and mlx5 NICs (verbs flow rules) steer; whether a DPDK
  // port does is known once it is open (rte_flow): not claimed here.
  d.can_steer = parsed->scheme == "loopback" || parsed->scheme == "mlx5";
  if (auto ip = parsed->Get("ip")) {
    if (auto v = driver::Ipv4Address::Parse(*ip); v.ok()) d.ipv4 = *v;
  }
  if (auto mtu = parsed->Get("mtu")) {
    uint32_t m = 0;
    if (absl::SimpleAtoi(*mtu, &m)) d.mtu = m;
  }
  return d;
}

// libfabric's internal fi_getinfo flag (its ofi.h) with which a utility
// provider (ofi_rxd, ofi_rxm) asks the core providers for something to
// layer over. The bit has been stable since libfabric 1.5.
constexpr uint64_t kOfiCoreProvOnly = 1ULL << 59;

int GetInfoEntry(uint32_t version, const char* node, const char* service, uint64_t flags,
                 const fi_info* hints, fi_info** info) {
  if (info == nullptr) return -FI_EINVAL;
  if ((flags & kOfiCoreProvOnly) != 0) {
    // We offer FI_EP_RDM natively: ofi_rxd layered over our FI_EP_DGRAM
    // would be listed first ("bypass;ofi_rxd") and taken by applications
    // that use the first fi_info (fi_pingpong does), running libfabric's
    // reliability over raw datagrams instead of the engine.
    BYPASS_FI_INFO(FI_LOG_CORE, "not offered to utility providers (native FI_EP_RDM)\n");
    return -FI_ENODATA;
  }
  const Settings s = ReadSettings();
  std::vector<DomainOffer> offers;
  for (const std::string& uri : s.devices) {
    DomainOffer o;
    o.name = uri;
    o.device = DescribeWithoutOpening(uri);
    o.limits = s.engine;
    o.default_port = s.base_port;
    o.msg_caps = kMsgCaps;  // connected endpoints (msg_ep.h) wherever FI_EP_RDM is
    o.max_ep_ctx = kMaxEpContexts;
    if (DeviceCarriesMulticast(o.device)) o.dgram_caps |= kDgramMulticastCap;
    offers.push_back(std::move(o));
  }
  SetMismatchLog(LogMismatch);
  const int ret = GetInfo(version, node, service, flags, hints, offers, info);
  if (ret == -FI_ENODATA) BYPASS_FI_INFO(FI_LOG_CORE, "no match: %s\n", LastMismatch());
  return ret;
}

}  // namespace

fi_provider* Provider() { return &g_provider; }

}  // namespace bypass::fi

extern "C" __attribute__((visibility("default"))) fi_provider* fi_prov_ini(void) {
  using bypass::fi::DefineParam;
  DefineParam("devices", FI_PARAM_STRING,
              "Device URIs, ';'-separated; each is a domain (default: shm:+udp:, this "
              "host's processes over shared memory and other hosts over kernel UDP). "
              "LOCAL+REMOTE joins two devices in one domain, e.g. "
              "shm:+dpdk:net_af_xdp0,iface=veth0; loopback:NAME,ip=10.0.0.1 is in-process");
  DefineParam("auth_key_file", FI_PARAM_STRING,
              "File of 32 or more secret bytes (yours, chmod 600) that authenticates handshakes "
              "with every peer; the job's processes share it (default: none; this host's "
              "processes then use the per-user key next to /run/bypass's registries, and peers "
              "on other hosts are not authenticated)");
  DefineParam("port", FI_PARAM_INT,
              "Base UDP port: endpoints take port, port+1, ... unless given one (default 7471)");
  DefineParam("window", FI_PARAM_INT, "Receive window per peer in packets, 1..256 (default 128)");
  DefineParam("rto_min_us", FI_PARAM_INT, "Minimum retransmit timeout in microseconds (default 1000)");
  DefineParam("peer_timeout_ms", FI_PARAM_INT,
              "Silence with work pending before a peer's operations fail, for a peer whose device "
              "cannot tell whether its process lives (NICs; default 10000)");
  DefineParam("silent_peer_timeout_ms", FI_PARAM_INT,
              "The same for a peer on another host over kernel UDP, whose process's exit its "
              "host would report (port unreachable); 0: never (default 900000)");
  DefineParam("rnr_retry_max_us", FI_PARAM_INT,
              "Longest wait between retries of a message its receiver refused for lack of room, "
              "in microseconds (default 10000)");
  DefineParam("rnr_give_up_ms", FI_PARAM_INT,
              "Opt-in: refusals for this long fail a message (-FI_ENOSPC) although its "
              "receiver still answers, in milliseconds (default 0: never; a refused message "
              "is retried while the receiver lives)");
  DefineParam("defer_acks", FI_PARAM_BOOL,
              "An ACK a sender's transmit completion waits for leaves at the receiving "
              "application's next call, on its reply if it sends one (default 1); 0: at once, "
              "in the pass that received the message (an extra packet each way of a ping-pong)");
  DefineParam("unexpected_bytes", FI_PARAM_SIZE_T,
              "Buffer per domain for messages that arrive before their receive, in bytes "
              "(default 32 MiB); beyond it a sender is refused and retries");
  DefineParam("unexpected_msgs", FI_PARAM_INT,
              "Messages each endpoint buffers before their receive (default 65536; as many "
              "rendezvous requests again)");
  DefineParam("max_msg_size", FI_PARAM_SIZE_T, "Largest message in bytes (default 64 MiB)");
  DefineParam("inject_size", FI_PARAM_SIZE_T,
              "Bytes an inject (or a send without a completion level) copies (default 4096)");
  DefineParam("max_peers", FI_PARAM_INT, "Peers per endpoint (default 256)");
  DefineParam("max_active_peers", FI_PARAM_INT,
              "Send and reorder rings pooled per endpoint (default 64; 0: one pair per peer)");
  DefineParam("listen_peers", FI_PARAM_INT,
              "Peers of a passive endpoint's port: the connections accepted on it, which share "
              "it, and the requests it holds (default: max_peers)");
  DefineParam("ack_delay_ns", FI_PARAM_INT,
              "Delay before a standalone ACK when no packet back carries it, in nanoseconds "
              "(default 5000); the last packet of a send whose completion waits for it is "
              "acknowledged at once");
  DefineParam("deferred_ack_hold_ns", FI_PARAM_INT,
              "How long a progress pass holds the ACK a peer's send waits for, so that a reply "
              "sent within it carries it, in nanoseconds (default 2000; below ack_delay_ns; 0: "
              "the next call sends it)");
  DefineParam("linger_ms", FI_PARAM_INT,
              "A closing endpoint keeps answering its peers until they have been quiet this "
              "long, in milliseconds, at most 1 s (default 100; 0: only until its own sends "
              "are acknowledged)");
  DefineParam("cma", FI_PARAM_BOOL,
              "Copy large messages between this host's processes once, the receiver reading "
              "the sender's buffer in place (cross-memory attach; needs ptrace permission, "
              "else they are pulled) (default 1; 0: always pull)");
  DefineParam("in_place_threshold", FI_PARAM_SIZE_T,
              "Messages longer than this to a process of this host are read in place "
              "(one copy; with FI_BYPASS_CMA) (default 16384)");
  DefineParam("congestion_control", FI_PARAM_BOOL,
              "Congestion window and pacing toward peers on other hosts, so that many senders "
              "into one receiver do not collapse into drops and retransmissions (never toward "
              "this host's processes, reached through shared memory) (default 1; 0: the "
              "receiver's credit window alone)");
  DefineParam("cc_initial_window", FI_PARAM_INT,
              "Packets of a congestion-controlled sender's first flight, 2..256 (default 16)");
  return bypass::fi::Provider();
}
