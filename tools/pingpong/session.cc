#include "tools/pingpong/session.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "driver/device.h"
#include "tools/ping_wire.h"

namespace bypass::tools {
namespace {

absl::StatusOr<std::unique_ptr<driver::Device>> OpenForPing(const LayerOptions& l,
                                                            const PingOptions& o) {
  if (l.device.empty()) {
    return absl::InvalidArgumentError(
        "no device: give --device=URI (e.g. memif:/tmp/pp.sock) or --local");
  }
  driver::DeviceOptions dopts;
  dopts.queues = 1;
  dopts.ring_size = 1024;
  // raw: one frame per message, so the MTU must hold IPv4 + UDP + the
  // largest payload that fits a jumbo frame (larger sizes are skipped).
  // rdm segments messages: the default MTU.
  if (l.layer == "raw") {
    uint64_t needed = 0;
    for (uint64_t s : o.Sizes()) {
      if (28 + PingPayloadBytes(s) <= 9000) needed = std::max<uint64_t>(needed, 28 + PingPayloadBytes(s));
    }
    dopts.mtu = static_cast<uint32_t>(std::clamp<uint64_t>(needed, 1500, 9000));
  }
  if (!l.ip.empty()) {
    auto a = driver::Ipv4Address::Parse(l.ip);
    if (!a.ok()) return a.status();
    dopts.ipv4 = *a;
  }
  auto dev = driver::OpenDevice(l.device, dopts);
  if (!dev.ok() && l.layer == "raw" && dopts.mtu > 1500 && !o.sizes.empty()) {
    // Devices without jumbo frames (memif): in a list of sizes, those above
    // the MTU are skipped.
    dopts.mtu = 1500;
    dev = driver::OpenDevice(l.device, dopts);
  }
  if (!dev.ok()) return dev.status();
  if (absl::Status s = WaitForLink(**dev, l.link_timeout_ms); !s.ok()) return s;
  return dev;
}

// --local: the addresses and rendezvous both sides use on this host.
struct LocalPlan {
  std::string server_device;  // raw, rdm: memif, server role
  std::string client_device;
  std::string addr_file;      // fi: the server's address
  std::string cleanup[3];     // files to remove afterwards
};
constexpr char kLocalServerIp[] = "10.79.255.1";
constexpr char kLocalClientIp[] = "10.79.255.2";

LocalPlan MakeLocalPlan(const std::string& tool) {
  LocalPlan p;
  const std::string base = absl::StrCat("/tmp/bypass-", tool, "-", getpid());
  const std::string sock = base + ".sock";
  p.server_device = absl::StrCat("memif:", sock, ",role=server");
  p.client_device = absl::StrCat("memif:", sock, ",role=client");
  p.addr_file = base + ".addr";
  p.cleanup[0] = sock;
  p.cleanup[1] = sock + ".lock";
  p.cleanup[2] = p.addr_file;
  for (const std::string& f : p.cleanup) unlink(f.c_str());
  return p;
}

// Starts this binary again as the server with args (argv[1..]); it dies
// with this process.
absl::StatusOr<pid_t> StartServerProcess(const std::vector<std::string>& args) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return absl::InternalError("cannot find this program (/proc/self/exe)");
  self[n] = '\0';
  const pid_t child = fork();
  if (child < 0) return absl::InternalError("fork failed");
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);  // never outlive the client
    std::vector<std::string> all = {self};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(self, argv.data());
    std::perror("exec of the server");
    _exit(127);
  }
  return child;
}

// Starts the server of l's layer, o's sizes and window for --local, and
// points l and o at it. Returns its process id.
absl::StatusOr<pid_t> StartLocalServer(const std::string& tool, LayerOptions* l, PingOptions* o,
                                       LocalPlan* plan) {
  *plan = MakeLocalPlan(tool);
  std::vector<std::string> args = {
      absl::StrCat("--layer=", l->layer),
      "--server",
      absl::StrCat("--sizes=", absl::StrJoin(o->Sizes(), ",")),
      absl::StrCat("--window=", o->window),
      absl::StrCat("--link_timeout_ms=", l->link_timeout_ms),
  };
  if (l->layer == "fi") {
    FiPingOptions& fi = l->fi;
    if (fi.provider == "tcp" && fi.node.empty()) fi.node = "127.0.0.1";
    fi.addr_file = plan->addr_file;
    args.push_back(absl::StrCat("--provider=", fi.provider));
    args.push_back(absl::StrCat("--tagged=", fi.tagged ? "true" : "false"));
    // Only pingpong has --ep (bw shares this launcher and is FI_EP_RDM's).
    if (fi.connected) args.push_back("--ep=msg");
    args.push_back(absl::StrCat("--addr_file=", plan->addr_file));
    if (!fi.node.empty()) args.push_back(absl::StrCat("--fi_node=", fi.node));
    if (fi.provider == "bypass" && l->device == "default") {
      // The provider's default domain on both sides (shared memory here).
      args.push_back("--device=default");
      fi.devices = "default";
    } else if (fi.provider == "bypass" && l->device.empty()) {
      // Each side its own memif role on a fresh socket.
      args.push_back(absl::StrCat("--device=", plan->server_device, ",ip=", kLocalServerIp));
      fi.devices = absl::StrCat(plan->client_device, ",ip=", kLocalClientIp);
    }
    if (fi.provider != "bypass") {
      // One error line, not one from each side. (bypass's getinfo may open
      // devices: its server must come first.)
      if (absl::Status s = ProbeProvider(fi); !s.ok()) return s;
    }
  } else {
    args.push_back(absl::StrCat("--device=", plan->server_device));
    l->device = plan->client_device;
  }
  if (l->layer == "rdm") {
    args.push_back(absl::StrCat("--ip=", kLocalServerIp));
    const RdmPingOptions& r = l->rdm;
    if (r.loss > 0 || r.dup > 0 || r.reorder > 0) {
      args.push_back(absl::StrCat("--loss=", r.loss));
      args.push_back(absl::StrCat("--dup=", r.dup));
      args.push_back(absl::StrCat("--reorder=", r.reorder));
      args.push_back(absl::StrCat("--fault_seed=", r.fault_seed + 1));
    }
    l->ip = kLocalClientIp;
    o->peer_ip = *driver::Ipv4Address::Parse(kLocalServerIp);  // memif is point to point: broadcast MAC
  }
  return StartServerProcess(args);
}

// Waits up to 2 s for the server to exit, then kills it; removes the
// plan's files.
void ReapServerProcess(pid_t child, const LocalPlan& plan) {
  int status = 0;
  for (int i = 0; i < 200; ++i) {  // the server exits on the client's kFin
    if (waitpid(child, &status, WNOHANG) == child) break;
    usleep(10000);
    if (i == 199) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
    }
  }
  for (const std::string& f : plan.cleanup) unlink(f.c_str());
}

}  // namespace

absl::Status CheckLayer(const std::string& layer) {
  if (layer == "raw" || layer == "rdm" || layer == "fi") return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--layer=", layer, " is not a layer: use raw (the driver), rdm (the engine) or fi (libfabric's API)"));
}

absl::Status RunServerSide(const LayerOptions& l, const PingOptions& o) {
  if (l.layer == "fi") return RunFiServer(o, l.fi);
  auto dev = OpenForPing(l, o);
  if (!dev.ok()) return dev.status();
  return l.layer == "rdm" ? RunRdmServer(*std::move(dev), o, l.rdm) : RunRawServer(**dev, o);
}

absl::Status SetPeer(const std::string& connect, LayerOptions* l, PingOptions* o) {
  l->fi.timeout_ms = l->link_timeout_ms;
  if (l->layer == "fi") {
    l->fi.connect = connect;
    l->fi.devices = l->device;
    return absl::OkStatus();
  }
  if (connect.empty()) return absl::OkStatus();
  const size_t slash = connect.find('/');
  auto mac = driver::MacAddress::Parse(connect.substr(0, slash));
  if (!mac.ok()) return mac.status();
  o->peer_mac = *mac;
  if (slash != std::string::npos) {
    auto ip = driver::Ipv4Address::Parse(connect.substr(slash + 1));
    if (!ip.ok()) return ip.status();
    o->peer_ip = *ip;
  }
  return absl::OkStatus();
}

absl::StatusOr<RunResult> RunClientSide(const LayerOptions& l, const PingOptions& o) {
  if (l.layer == "fi") return RunFiClient(o, l.fi);
  auto dev = OpenForPing(l, o);
  if (!dev.ok()) return dev.status();
  return l.layer == "rdm" ? RunRdmClient(*std::move(dev), o, l.rdm) : RunRawClient(**dev, o);
}

absl::StatusOr<RunResult> RunLocalClient(const std::string& tool, LayerOptions l, PingOptions o) {
  LocalPlan plan;
  absl::StatusOr<pid_t> child = StartLocalServer(tool, &l, &o, &plan);
  if (!child.ok()) return child.status();
  absl::StatusOr<RunResult> result = RunClientSide(l, o);
  ReapServerProcess(*child, plan);
  return result;
}

}  // namespace bypass::tools
