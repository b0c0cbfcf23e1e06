// The fabric: the configured devices and engine settings (FI_BYPASS_*),
// read when it opens, and the fabric's calls (domains, EQs).
#include "fabric/fi/fabric.h"

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_split.h"
#include "fabric/fi/domain.h"
#include "fabric/fi/eq.h"
#include "fabric/fi/info/info.h"
#include "fabric/fi/msg_ep.h"
#include "fabric/fi/services.h"
#include "fabric/fi/wait.h"
#include "fabric/rdm/config.h"
#include "fabric/stats/stats.h"

namespace bypass::fi {
namespace {

// The default domain: processes of this host through shared memory (the
// intra-host device, its registry under /run/bypass), every other host
// through kernel UDP sockets; no setup, any number of processes.
constexpr char kDefaultDevices[] = "shm:+udp:";
constexpr uint16_t kDefaultBasePort = 7471;

int FabricClose(fid* f) {
  Fabric* fab = AsFabric(f);
  if (fab == nullptr) return BadFid(f, FI_CLASS_FABRIC);
  if (fab->obj.refs.load() > 0) return -FI_EBUSY;
  fab->obj.magic = Obj::kDead;
  Retire(fab);
  return 0;
}

int FabricControl(fid*, int, void*) { return -FI_ENOSYS; }

fi_ops g_fabric_fi_ops = {
    .size = sizeof(fi_ops),
    .close = FabricClose,
    .bind = NoSysBind,
    .control = FabricControl,
    .ops_open = NoSysOpsOpen,
    .tostr = NoSysTostr,
    .ops_set = NoSysOpsSet,
};

int Domain2(fid_fabric* f, fi_info* info, fid_domain** dom, uint64_t flags, void* ctx) {
  if (flags != 0) return -FI_EBADFLAGS;
  return OpenDomain(f, info, dom, ctx);
}

fi_ops_fabric g_fabric_ops = {
    .size = sizeof(fi_ops_fabric),
    .domain = OpenDomain,
    .passive_ep = OpenPep,
    .eq_open = OpenEq,
    .wait_open = OpenWaitSet,
    .trywait = TryWait,
    .domain2 = Domain2,
};

}  // namespace

Settings ReadSettings() {
  Settings s;
  std::string devices;
  if (auto v = ParamString("devices"); v && !v->empty()) {
    devices = *v;
  } else {
    devices = kDefaultDevices;
  }
  for (absl::string_view d : absl::StrSplit(devices, ';', absl::SkipWhitespace())) {
    s.devices.emplace_back(d);
  }
  if (auto v = ParamString("auth_key_file")) s.auth_key_file = *v;
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
  // else a standalone one after ack_delay_ns or 16 packets), and for the
  // last packet of a send whose completion waits for it (ep_ops.cc marks
  // those kSendAckNow) at the receiving application's next call on FI_EP_RDM
  // endpoints (defer_requested_acks; ep.cc): its reply carries the ACK, else
  // that call sends it. Applications may stop calling once they have what
  // they waited for (fi_pingpong does, before its TCP handshakes), and a
  // peer waiting for FI_TRANSMIT_COMPLETE would then wait for nothing: the
  // domain's progress thread watches for that (CallWatch, progress.h).
  // FI_BYPASS_DEFER_ACKS=0: at once, in the pass that received the message.
  c.defer_requested_acks = true;
  if (auto v = ParamInt("defer_acks", FI_PARAM_BOOL)) c.defer_requested_acks = *v != 0;
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
  // Messages that arrive before their receive (an MPI rank computing while
  // its peers send) wait in one buffer per domain (rdm::UnexpectedPool,
  // made at fi_domain), in 256-byte chunks so that a flood of small
  // messages fits many; beyond it, or beyond the entries an endpoint
  // keeps (about 150 bytes each, touched only once used), a message is
  // refused and its sender retries with backoff.
  c.unexpected_bytes = 32u << 20;
  c.unexpected_chunk_bytes = 256;
  c.max_unexpected_msgs = 65536;
  if (auto v = ParamInt("unexpected_bytes", FI_PARAM_SIZE_T)) {
    c.unexpected_bytes = static_cast<uint64_t>(*v);
  }
  if (auto v = ParamInt("unexpected_msgs")) c.max_unexpected_msgs = static_cast<uint32_t>(*v);
  // Sends up to this size are injected (fi_inject*) or buffered (a plain
  // send without a completion level: ep_ops.cc): copied, complete at once,
  // no standalone ACK. A 4 KiB copy costs less than the extra packet each
  // way of an ACK asked for at once (over veth, several microseconds).
  c.inject_size = 4096;
  if (auto v = ParamInt("window")) c.window_packets = static_cast<uint32_t>(*v);
  if (auto v = ParamInt("rto_min_us")) c.rto_min_ns = static_cast<uint64_t>(*v) * 1000;
  if (auto v = ParamInt("peer_timeout_ms")) c.peer_timeout_ns = static_cast<uint64_t>(*v) * 1'000'000;
  if (auto v = ParamInt("silent_peer_timeout_ms")) {
    c.silent_peer_timeout_ns = static_cast<uint64_t>(*v) * 1'000'000;
  }
  // Receiver not ready: a message its receiver refuses (no receive, no
  // room) is sent again with backoff up to rnr_retry_max for as long as the
  // receiver answers (MPI requires a send to complete however late its
  // receive comes); only a peer silent for the peer timeout fails it. An
  // application that prefers an error may opt in to rnr_give_up (0: never).
  if (auto v = ParamInt("rnr_retry_max_us")) c.rnr_retry_max_ns = static_cast<uint64_t>(*v) * 1000;
  if (auto v = ParamInt("rnr_give_up_ms")) c.rnr_give_up_ns = static_cast<uint64_t>(*v) * 1'000'000;
  if (auto v = ParamInt("max_msg_size", FI_PARAM_SIZE_T)) c.max_msg_size = static_cast<uint64_t>(*v);
  if (auto v = ParamInt("inject_size", FI_PARAM_SIZE_T)) c.inject_size = static_cast<uint32_t>(*v);
  // The default domain serves every process of a host: room for 256 peers
  // per endpoint (about 700 B each, allocated at fi_enable), of which 64 at
  // once have a send and a reorder ring of the endpoint's pool (1.4 MB at
  // window 128; more allocate theirs while active: fabric/rdm/PROTOCOL.md,
  // "Scale").
  c.max_peers = 256;
  if (auto v = ParamInt("max_peers")) c.max_peers = static_cast<uint32_t>(*v);
  if (auto v = ParamInt("max_active_peers"); v && *v >= 0) {
    c.max_active_peers = static_cast<uint32_t>(*v);
  }
  s.listen_peers = c.max_peers;
  if (auto v = ParamInt("listen_peers"); v && *v > 0) s.listen_peers = static_cast<uint32_t>(*v);
  // Regions open to remote access, per endpoint: the domain's mr_cnt (every
  // region counts, so one that becomes remote later still fits). About
  // 64 bytes each.
  c.max_regions = 1024;
  if (auto v = ParamInt("linger_ms"); v && *v >= 0) s.linger_quiet_ns = static_cast<uint64_t>(*v) * 1'000'000;
  if (auto v = ParamInt("ack_delay_ns")) c.ack_delay_ns = static_cast<uint64_t>(*v);
  if (auto v = ParamInt("deferred_ack_hold_ns"); v && *v >= 0) {
    c.deferred_ack_hold_ns = static_cast<uint64_t>(*v);
  }
  if (auto v = ParamInt("cma", FI_PARAM_BOOL)) c.read_in_place = *v != 0;
  if (auto v = ParamInt("in_place_threshold", FI_PARAM_SIZE_T)) {
    c.in_place_threshold = static_cast<uint64_t>(*v);
  }
  if (auto v = ParamInt("congestion_control", FI_PARAM_BOOL)) c.congestion_control = *v != 0;
  if (auto v = ParamInt("cc_initial_window")) c.cc_initial_window = static_cast<uint32_t>(*v);
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
  // The engines' counters for operators (fabric/stats): DPDK telemetry
  // commands, and with BYPASS_STATS a socket bypass-stat reads. A failure
  // costs only the counters.
  if (absl::Status st = stats::Enable(); !st.ok()) {
    BYPASS_FI_WARN(FI_LOG_CORE, "BYPASS_STATS: %s; the counters are not served\n",
                   std::string(st.message()).c_str());
  }
  *fabric = &f.release()->fid;
  return 0;
}

}  // namespace bypass::fi
