// The provider entry point (fi_prov_ini), its FI_BYPASS_* parameters,
// getinfo over the configured devices, and the fabric object.
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include <rdma/providers/fi_prov.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "driver/uri.h"
#include "fabric/fi/info/info.h"
#include "fabric/fi/objects.h"
#include "fabric/fi/services.h"

namespace bypass::fi {
namespace {

// The default device: a memif on a well-known socket, role decided by who
// takes its lock first, so two processes on one host meet with no setup.
constexpr char kDefaultSocketDir[] = "/run/bypass";
constexpr char kDefaultSocket[] = "/run/bypass/fi.sock";
constexpr uint16_t kDefaultBasePort = 7471;

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

// Shells of closed objects and how to free each (Retire in objects.h).
std::mutex g_graveyard_mu;
std::vector<std::pair<void*, void (*)(void*)>>* g_graveyard = nullptr;

// libfabric unloads the provider after this: no call can reach a shell
// again, and the graveyard would be unreachable (a leak) once unloaded.
void Cleanup() {
  std::lock_guard<std::mutex> lock(g_graveyard_mu);
  if (g_graveyard == nullptr) return;
  for (const auto& [shell, destroy] : *g_graveyard) destroy(shell);
  delete g_graveyard;
  g_graveyard = nullptr;
}

void LogMismatch(const char* line) { BYPASS_FI_INFO(FI_LOG_CORE, "%s\n", line); }

// The DeviceInfo GetInfo can know without opening the device (opening a
// memif at fi_getinfo time would take its server role): what the URI says.
driver::DeviceInfo DescribeWithoutOpening(const std::string& uri) {
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
    offers.push_back(std::move(o));
  }
  SetMismatchLog(LogMismatch);
  const int ret = GetInfo(version, node, service, flags, hints, offers, info);
  if (ret == -FI_ENODATA) BYPASS_FI_INFO(FI_LOG_CORE, "no match: %s\n", LastMismatch());
  return ret;
}

// ---- fabric ----

int FabricClose(fid* f) {
  Fabric* fab = AsFabric(f);
  if (fab == nullptr) return BadFid(f, FI_CLASS_FABRIC);
  if (fab->obj.refs.load() > 0) return -FI_EBUSY;
  fab->obj.magic = Obj::kDead;
  Retire(fab);
  return 0;
}

int FabricControl(fid*, int, void*) { return -FI_ENOSYS; }
int FabricBind(fid*, fid*, uint64_t) { return -FI_ENOSYS; }

fi_ops g_fabric_fi_ops = {
    .size = sizeof(fi_ops),
    .close = FabricClose,
    .bind = FabricBind,
    .control = FabricControl,
    .ops_open = NoSysOpsOpen,
    .tostr = NoSysTostr,
    .ops_set = NoSysOpsSet,
};

int PassiveEp(fid_fabric*, fi_info*, fid_pep**, void*) { return -FI_ENOSYS; }
int WaitOpen(fid_fabric*, fi_wait_attr*, fid_wait**) { return -FI_ENOSYS; }
int TryWait(fid_fabric* f, fid** fids, int count) {
  if (AsFabric(f) == nullptr) return BadFid(f, FI_CLASS_FABRIC);
  if (count < 0 || (count > 0 && fids == nullptr)) return -FI_EINVAL;
  return 0;  // nothing sleeps: every wait is a progress loop
}
int Domain2(fid_fabric* f, fi_info* info, fid_domain** dom, uint64_t flags, void* ctx) {
  if (flags != 0) return -FI_EBADFLAGS;
  return OpenDomain(f, info, dom, ctx);
}

fi_ops_fabric g_fabric_ops = {
    .size = sizeof(fi_ops_fabric),
    .domain = OpenDomain,
    .passive_ep = PassiveEp,
    .eq_open = OpenEq,
    .wait_open = WaitOpen,
    .trywait = TryWait,
    .domain2 = Domain2,
};

}  // namespace

fi_provider* Provider() { return &g_provider; }

void RetireShell(void* shell, void (*destroy)(void*)) {
  std::lock_guard<std::mutex> lock(g_graveyard_mu);
  if (g_graveyard == nullptr) g_graveyard = new std::vector<std::pair<void*, void (*)(void*)>>();
  g_graveyard->emplace_back(shell, destroy);
}

int BadFid(const void* fid, size_t fclass) {
  if (fid == nullptr) return -FI_EINVAL;
  auto* f = static_cast<const ::fid*>(fid);
  if (f->fclass != fclass) return -FI_EINVAL;
  return -FI_EBADF;
}

int FromStatus(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk:
      return 0;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return -FI_EINVAL;
    case absl::StatusCode::kNotFound:
      return -FI_ENOENT;
    case absl::StatusCode::kAlreadyExists:
      return -FI_EADDRINUSE;
    case absl::StatusCode::kResourceExhausted:
      return -FI_ENOMEM;
    case absl::StatusCode::kUnimplemented:
      return -FI_ENOSYS;
    case absl::StatusCode::kPermissionDenied:
      return -FI_EPERM;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return -FI_ENODEV;
    default:
      return -FI_EOTHER;
  }
}

int NoSysOpsOpen(fid*, const char*, uint64_t, void**, void*) { return -FI_ENOSYS; }
int NoSysOpsSet(fid*, const char*, uint64_t, void*, void*) { return -FI_ENOSYS; }
int NoSysTostr(const fid*, char*, size_t) { return -FI_ENOSYS; }

Settings ReadSettings() {
  Settings s;
  std::string devices;
  if (auto v = ParamString("devices"); v && !v->empty()) {
    devices = *v;
  } else {
    // The well-known memif socket; its directory is made on first use.
    if (mkdir(kDefaultSocketDir, 0755) != 0 && errno != EEXIST) {
      BYPASS_FI_WARN(FI_LOG_CORE, "cannot create %s (%s): set FI_BYPASS_DEVICES\n",
                     kDefaultSocketDir, std::strerror(errno));
    }
    devices = std::string("memif:") + kDefaultSocket + ",role=auto";
  }
  for (absl::string_view d : absl::StrSplit(devices, ';', absl::SkipWhitespace())) {
    s.devices.emplace_back(d);
  }
  s.base_port = kDefaultBasePort;
  if (auto v = ParamInt("port")) {
    if (*v > 0 && *v < 65536) {
      s.base_port = static_cast<uint16_t>(*v);
    } else {
      BYPASS_FI_WARN(FI_LOG_CORE, "FI_BYPASS_PORT=%lld is not a UDP port (1..65535); using %u\n",
                     static_cast<long long>(*v), kDefaultBasePort);
    }
  }
  rdm::EndpointConfig& c = s.engine;
  c.max_msg_size = 64u << 20;
  // Acknowledgement: the engine's delayed ACKs (a packet back carries it,
  // else a standalone one after ack_delay_ns or 16 packets), and at once
  // for the last packet of a send whose completion waits for it (ep_ops.cc
  // marks those kSendAckNow): applications stop progressing once they have
  // what they waited for (fi_pingpong does, before its TCP handshakes), and
  // a peer waiting for FI_TRANSMIT_COMPLETE would otherwise wait for nothing.
  // An idle pass (nothing received) reuses the last clock reading up to
  // this many times: a clock read costs about as much as an empty RX poll,
  // and timers (1 ms RTO floor) may fire a few microseconds late.
  c.idle_passes_per_clock_read = 16;
  // The application progresses the engine only when it calls in, and may
  // not for a while (fi_pingpong talks TCP between phases): a retransmit
  // floor of 1 ms spares spurious retransmissions (SACK repairs real loss
  // in a round trip), and a peer is given up after 10 s of silence.
  c.rto_min_ns = 1'000'000;
  c.rto_initial_ns = 2'000'000;
  c.peer_timeout_ns = 10'000'000'000;
  c.unexpected_bytes = 16u << 20;
  // Sends up to this size are injected (fi_inject*) or buffered (a plain
  // send without a completion level: ep_ops.cc): copied, complete at once,
  // no standalone ACK. A 4 KiB copy costs less than the extra packet each
  // way of an ACK asked for at once (over veth, several microseconds).
  c.inject_size = 4096;
  if (auto v = ParamInt("window")) c.window_packets = static_cast<uint32_t>(*v);
  if (auto v = ParamInt("rto_min_us")) c.rto_min_ns = static_cast<uint64_t>(*v) * 1000;
  if (auto v = ParamInt("peer_timeout_ms")) c.peer_timeout_ns = static_cast<uint64_t>(*v) * 1'000'000;
  if (auto v = ParamInt("max_msg_size", FI_PARAM_SIZE_T)) c.max_msg_size = static_cast<uint64_t>(*v);
  if (auto v = ParamInt("inject_size", FI_PARAM_SIZE_T)) c.inject_size = static_cast<uint32_t>(*v);
  if (auto v = ParamInt("max_peers")) c.max_peers = static_cast<uint32_t>(*v);
  if (auto v = ParamInt("ack_delay_ns")) c.ack_delay_ns = static_cast<uint64_t>(*v);
  c.rto_initial_ns = std::max(c.rto_initial_ns, c.rto_min_ns);
  rdm::EndpointConfig probe = c;
  probe.udp_port = s.base_port;
  if (absl::Status st = rdm::ValidateConfig(probe); !st.ok()) {
    BYPASS_FI_WARN(FI_LOG_CORE, "FI_BYPASS_* engine settings rejected (%s); using defaults\n",
                   std::string(st.message()).c_str());
    c = rdm::EndpointConfig();
  }
  return s;
}

int OpenFabric(fi_fabric_attr* attr, fid_fabric** fabric, void* context) {
  if (attr == nullptr || fabric == nullptr) return -FI_EINVAL;
  if (attr->name != nullptr && std::strcmp(attr->name, kFabricName) != 0) return -FI_ENODATA;
  auto f = std::make_unique<Fabric>();
  std::memset(&f->fid, 0, sizeof(f->fid));
  f->fid.fid.fclass = FI_CLASS_FABRIC;
  f->fid.fid.context = context;
  f->fid.fid.ops = &g_fabric_fi_ops;
  f->fid.ops = &g_fabric_ops;
  f->settings = ReadSettings();
  f->api_version = attr->api_version;
  *fabric = &f.release()->fid;
  return 0;
}

}  // namespace bypass::fi

extern "C" __attribute__((visibility("default"))) fi_provider* fi_prov_ini(void) {
  using bypass::fi::DefineParam;
  DefineParam("devices", FI_PARAM_STRING,
              "Device URIs, ';'-separated; each is a domain (default: "
              "memif:/run/bypass/fi.sock,role=auto). E.g. loopback:NAME,ip=10.0.0.1 or "
              "dpdk:net_af_xdp0,iface=veth0");
  DefineParam("port", FI_PARAM_INT,
              "Base UDP port: endpoints take port, port+1, ... unless given one (default 7471)");
  DefineParam("window", FI_PARAM_INT, "Receive window per peer in packets, 1..256 (default 128)");
  DefineParam("rto_min_us", FI_PARAM_INT, "Minimum retransmit timeout in microseconds (default 1000)");
  DefineParam("peer_timeout_ms", FI_PARAM_INT,
              "Silence with work pending before a peer's operations fail (default 10000)");
  DefineParam("max_msg_size", FI_PARAM_SIZE_T, "Largest message in bytes (default 64 MiB)");
  DefineParam("inject_size", FI_PARAM_SIZE_T,
              "Bytes an inject (or a send without a completion level) copies (default 4096)");
  DefineParam("max_peers", FI_PARAM_INT, "Peers per endpoint (default 64)");
  DefineParam("ack_delay_ns", FI_PARAM_INT,
              "Delay before a standalone ACK when no packet back carries it, in nanoseconds "
              "(default 5000); the last packet of a send whose completion waits for it is "
              "acknowledged at once");
  return bypass::fi::Provider();
}
