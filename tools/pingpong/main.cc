// pingpong: round-trip latency and message rate between two processes, on
// the raw driver (--layer=raw) or the RDM engine (--layer=rdm). See --help.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "driver/device.h"
#include "tools/latency.h"
#include "tools/ping_wire.h"
#include "tools/pingpong/raw.h"
#include "tools/pingpong/rdm.h"

ABSL_FLAG(std::string, layer, "raw", "raw (the driver), rdm (the protocol engine) or fi (fi_* API)");
ABSL_FLAG(bool, server, false, "echo pings until the client is done");
ABSL_FLAG(std::string, connect, "",
          "the server's MAC[/IPv4] for raw frames (default: broadcast, fine for point-to-point "
          "devices such as memif and veth)");
ABSL_FLAG(bool, local, false, "start a server process and a client over memif on this host");
ABSL_FLAG(uint64_t, size, 64, "payload bytes per message");
ABSL_FLAG(uint64_t, iters, 100000, "measured iterations (messages in rate mode)");
ABSL_FLAG(uint64_t, warmup, 1000, "iterations before measuring");
ABSL_FLAG(std::string, device, "", "device URI (default with --local: memif on a fresh socket)");
ABSL_FLAG(std::string, mode, "latency", "latency (one ping in flight) or rate (one-way bursts)");
ABSL_FLAG(uint32_t, burst, 32, "frames per burst in rate mode");
ABSL_FLAG(bool, json, false, "print one JSON object instead of text");
ABSL_FLAG(std::string, ip, "",
          "this side's IPv4 for devices with no kernel address (rdm checks it; --local sets both)");
ABSL_FLAG(double, loss, 0, "rdm: drop this fraction of received packets (driver/fault)");
ABSL_FLAG(double, dup, 0, "rdm: duplicate this fraction of received packets");
ABSL_FLAG(double, reorder, 0, "rdm: reorder this fraction of received packets");
ABSL_FLAG(uint64_t, fault_seed, 1, "rdm: the seed of the injected faults");
ABSL_FLAG(uint32_t, window, 32, "rdm: messages outstanding in rate mode");
ABSL_FLAG(uint32_t, link_timeout_ms, 10000, "how long to wait for the link to come up");

namespace bypass::tools {
namespace {

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "pingpong: %s\n", std::string(s.message()).c_str());
  return 1;
}

absl::StatusOr<PingOptions> OptionsFromFlags() {
  PingOptions o;
  o.size = absl::GetFlag(FLAGS_size);
  o.iters = absl::GetFlag(FLAGS_iters);
  o.warmup = absl::GetFlag(FLAGS_warmup);
  o.mode = absl::GetFlag(FLAGS_mode);
  o.burst = absl::GetFlag(FLAGS_burst);
  if (o.mode != "latency" && o.mode != "rate") {
    return absl::InvalidArgumentError(absl::StrCat("--mode=", o.mode, " is not latency or rate"));
  }
  if (o.iters == 0) return absl::InvalidArgumentError("--iters must be at least 1");
  const bool rdm = absl::GetFlag(FLAGS_layer) == "rdm";
  if (rdm && o.size > (256u << 20)) {
    return absl::InvalidArgumentError(absl::StrCat("--size=", o.size, " is over the 256 MiB the rdm ping buffers"));
  }
  if (!rdm && 28 + PingPayloadBytes(o.size) > 9000) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--size=", o.size, " does not fit one frame: the raw layer sends one frame per message, "
        "so use --size up to ", 9000 - 28, " (jumbo frames) or --layer=rdm"));
  }
  if (absl::GetFlag(FLAGS_window) == 0 || absl::GetFlag(FLAGS_window) > 1024) {
    return absl::InvalidArgumentError("--window must be 1..1024");
  }
  for (double p : {absl::GetFlag(FLAGS_loss), absl::GetFlag(FLAGS_dup), absl::GetFlag(FLAGS_reorder)}) {
    if (!(p >= 0 && p < 1)) return absl::InvalidArgumentError("--loss, --dup and --reorder are fractions in [0, 1)");
    if (p > 0 && !rdm) return absl::InvalidArgumentError("--loss, --dup and --reorder need --layer=rdm");
  }
  if (o.burst == 0 || o.burst > 32) return absl::InvalidArgumentError("--burst must be 1..32");
  const std::string connect = absl::GetFlag(FLAGS_connect);
  if (!connect.empty()) {
    const size_t slash = connect.find('/');
    auto mac = driver::MacAddress::Parse(connect.substr(0, slash));
    if (!mac.ok()) return mac.status();
    o.peer_mac = *mac;
    if (slash != std::string::npos) {
      auto ip = driver::Ipv4Address::Parse(connect.substr(slash + 1));
      if (!ip.ok()) return ip.status();
      o.peer_ip = *ip;
    }
  }
  return o;
}

absl::StatusOr<std::unique_ptr<driver::Device>> OpenForPing(const std::string& uri,
                                                            const PingOptions& o) {
  driver::DeviceOptions dopts;
  dopts.queues = 1;
  dopts.ring_size = 1024;
  // One frame per message: the MTU must hold IPv4 + UDP + the payload
  // (OptionsFromFlags checked it fits a jumbo frame).
  // The rdm layer segments messages: the default MTU.
  const uint64_t needed = absl::GetFlag(FLAGS_layer) == "rdm" ? 0 : 28 + PingPayloadBytes(o.size);
  dopts.mtu = static_cast<uint32_t>(std::max<uint64_t>(1500, needed));
  if (const std::string ip = absl::GetFlag(FLAGS_ip); !ip.empty()) {
    auto a = driver::Ipv4Address::Parse(ip);
    if (!a.ok()) return a.status();
    dopts.ipv4 = *a;
  }
  auto dev = driver::OpenDevice(uri, dopts);
  if (!dev.ok()) return dev.status();
  if (absl::Status s = WaitForLink(**dev, absl::GetFlag(FLAGS_link_timeout_ms)); !s.ok()) return s;
  return dev;
}

RdmPingOptions RdmFromFlags() {
  RdmPingOptions r;
  r.loss = absl::GetFlag(FLAGS_loss);
  r.dup = absl::GetFlag(FLAGS_dup);
  r.reorder = absl::GetFlag(FLAGS_reorder);
  r.fault_seed = absl::GetFlag(FLAGS_fault_seed);
  r.window = absl::GetFlag(FLAGS_window);
  return r;
}

int RunServer(const std::string& uri, const PingOptions& o) {
  auto dev = OpenForPing(uri, o);
  if (!dev.ok()) return Fail(dev.status());
  absl::Status s = absl::GetFlag(FLAGS_layer) == "rdm"
                       ? RunRdmServer(*std::move(dev), o, RdmFromFlags())
                       : RunRawServer(**dev, o);
  return s.ok() ? 0 : Fail(s);
}

int RunClient(const std::string& uri, const PingOptions& o) {
  auto dev = OpenForPing(uri, o);
  if (!dev.ok()) return Fail(dev.status());
  auto result = absl::GetFlag(FLAGS_layer) == "rdm"
                    ? RunRdmClient(*std::move(dev), o, RdmFromFlags())
                    : RunRawClient(**dev, o);
  if (!result.ok()) return Fail(result.status());
  if (absl::GetFlag(FLAGS_json)) {
    PrintJson(*result);
  } else {
    PrintText(*result);
  }
  return 0;
}

// --local: this process is the client; a child started from the same binary
// serves. Both open memif on a fresh socket before DPDK starts in either.
constexpr char kLocalServerIp[] = "10.79.255.1";
constexpr char kLocalClientIp[] = "10.79.255.2";

int RunLocal(PingOptions o, char* argv0) {
  const bool rdm = absl::GetFlag(FLAGS_layer) == "rdm";
  const std::string sock = absl::StrCat("/tmp/bypass-pingpong-", getpid(), ".sock");
  const pid_t child = fork();
  if (child < 0) return Fail(absl::InternalError("fork failed"));
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);  // never outlive the client
    std::vector<std::string> args = {
        argv0,
        absl::StrCat("--layer=", absl::GetFlag(FLAGS_layer)),
        "--server",
        absl::StrCat("--device=memif:", sock, ",role=server"),
        absl::StrCat("--size=", o.size),
        absl::StrCat("--link_timeout_ms=", absl::GetFlag(FLAGS_link_timeout_ms)),
    };
    if (rdm) {
      args.push_back(absl::StrCat("--ip=", kLocalServerIp));
      args.push_back(absl::StrCat("--loss=", absl::GetFlag(FLAGS_loss)));
      args.push_back(absl::StrCat("--dup=", absl::GetFlag(FLAGS_dup)));
      args.push_back(absl::StrCat("--reorder=", absl::GetFlag(FLAGS_reorder)));
      args.push_back(absl::StrCat("--fault_seed=", absl::GetFlag(FLAGS_fault_seed) + 1));
      args.push_back(absl::StrCat("--window=", absl::GetFlag(FLAGS_window)));
    }
    std::vector<char*> cargv;
    for (auto& a : args) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    execv("/proc/self/exe", cargv.data());
    std::perror("pingpong: exec of the server");
    _exit(127);
  }
  // The server creates the socket; the memif client connects when it is there.
  if (rdm) {
    absl::SetFlag(&FLAGS_ip, kLocalClientIp);
    o.peer_ip = *driver::Ipv4Address::Parse(kLocalServerIp);  // memif is point to point: broadcast MAC
  }
  const int rc = RunClient(absl::StrCat("memif:", sock, ",role=client"), o);
  int status = 0;
  for (int i = 0; i < 200; ++i) {  // the server exits on the client's kFin
    if (waitpid(child, &status, WNOHANG) == child) break;
    usleep(10000);
    if (i == 199) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
    }
  }
  unlink(sock.c_str());
  unlink((sock + ".lock").c_str());
  return rc;
}

}  // namespace
}  // namespace bypass::tools

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "round-trip latency and message rate between two processes.\n"
      "  pingpong --local                      both sides over memif on this host\n"
      "  pingpong --server --device=URI        one side\n"
      "  pingpong --device=URI [--connect=MAC] the other side\n"
      "  pingpong --layer=rdm --local [--loss=0.01 --dup=P --reorder=P]\n"
      "                                        over RDM endpoints, faults injected into what\n"
      "                                        each side receives; prints retransmit counters\n"
      "  pingpong --layer=rdm --server --device=URI [--ip=A]\n"
      "  pingpong --layer=rdm --device=URI --connect=MAC/A  (rdm needs the server's IPv4)");
  absl::ParseCommandLine(argc, argv);
  using namespace bypass::tools;
  const std::string layer = absl::GetFlag(FLAGS_layer);
  if (layer != "raw" && layer != "rdm") {
    return Fail(absl::UnimplementedError(absl::StrCat(
        "--layer=", layer, " is not built yet (see README: what works); use --layer=raw or rdm")));
  }
  auto opts = OptionsFromFlags();
  if (!opts.ok()) return Fail(opts.status());
  if (absl::GetFlag(FLAGS_local)) {
    if (absl::GetFlag(FLAGS_server)) return Fail(absl::InvalidArgumentError("--local starts the server itself: drop --server"));
    return RunLocal(*opts, argv[0]);
  }
  const std::string uri = absl::GetFlag(FLAGS_device);
  if (uri.empty()) {
    return Fail(absl::InvalidArgumentError(
        "no device: give --device=URI (e.g. memif:/tmp/pp.sock) or --local"));
  }
  return absl::GetFlag(FLAGS_server) ? RunServer(uri, *opts) : RunClient(uri, *opts);
}
