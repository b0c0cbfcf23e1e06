// pingpong: round-trip latency and message rate between two processes, on
// the raw driver (--layer=raw), the RDM engine (--layer=rdm) or libfabric's
// API (--layer=fi). See --help and tools/README.md (the --json schema).
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "tools/histogram.h"
#include "tools/latency.h"
#include "tools/ping_wire.h"
#include "tools/sizes.h"
#include "tools/pingpong/session.h"

ABSL_FLAG(std::string, layer, "raw", "raw (the driver), rdm (the protocol engine) or fi (fi_* API)");
ABSL_FLAG(bool, server, false, "echo pings until the client is done");
ABSL_FLAG(std::string, connect, "",
          "raw, rdm: the server's MAC[/IPv4] (default: broadcast, fine for point-to-point devices "
          "such as memif and veth; rdm needs the IPv4). fi: HOST[:PORT] of the server's address "
          "exchange socket");
ABSL_FLAG(bool, local, false, "start a server process and a client on this host (memif for raw and rdm)");
ABSL_FLAG(uint64_t, size, 64, "payload bytes per message");
ABSL_FLAG(std::string, sizes, "",
          "several sizes in turn instead of --size: a list (8,64,4K), a doubling range (64-65536) "
          "or both; one JSON line per size (a size the layer cannot carry is skipped, saying why)");
ABSL_FLAG(uint64_t, iters, 100000, "measured iterations per size (messages in rate mode)");
ABSL_FLAG(uint64_t, warmup, 1000, "iterations per size before measuring (at most 64 MiB of messages)");
ABSL_FLAG(std::string, device, "",
          "device URI (default with --local: memif on a fresh socket); fi with --provider=bypass: "
          "FI_BYPASS_DEVICES for this process, or 'default' for the provider's default domain "
          "(this host's processes through shared memory, other hosts through kernel UDP)");
ABSL_FLAG(std::string, mode, "latency",
          "latency (one ping in flight), rate (one-way, --window outstanding) or latency,rate "
          "(both, every size, in one run)");
ABSL_FLAG(uint32_t, burst, 32, "raw: frames per burst in rate mode");
ABSL_FLAG(uint32_t, window, 32, "rdm, fi: messages outstanding in rate mode");
ABSL_FLAG(bool, more, false,
          "rdm, fi rate mode: post each run of sends (up to the window) with FI_MORE (rdm: "
          "kSendMore) on all but the last, so that they may go together");
ABSL_FLAG(uint64_t, duration_ms, 0,
          "measure each size (and mode) for this long instead of --iters; a latency warm-up stops "
          "after a quarter of it (at least 50 ms)");
ABSL_FLAG(bool, json, false, "print a JSON line per size and mode instead of text (and no progress line)");
ABSL_FLAG(std::string, csv, "", "write the round-trip histogram (and percentiles) to this CSV file");
ABSL_FLAG(std::string, plot, "", "draw the round-trip histogram to this PNG file (needs gnuplot)");
ABSL_FLAG(std::string, ip, "",
          "this side's IPv4 for devices with no kernel address (rdm checks it; --local sets both)");
ABSL_FLAG(double, loss, 0, "rdm: drop this fraction of received packets (driver/fault)");
ABSL_FLAG(double, dup, 0, "rdm: duplicate this fraction of received packets");
ABSL_FLAG(double, reorder, 0, "rdm: reorder this fraction of received packets");
ABSL_FLAG(uint64_t, fault_seed, 1, "rdm: the seed of the injected faults");
ABSL_FLAG(std::string, provider, "bypass", "fi: the libfabric provider (bypass, shm, tcp, ...)");
ABSL_FLAG(bool, tagged, false, "fi: tagged messages (fi_tsend/fi_trecv) instead of fi_send/fi_recv");
ABSL_FLAG(std::string, ep, "rdm",
          "fi: the endpoint type, rdm (FI_EP_RDM) or msg (FI_EP_MSG: a connection through "
          "fi_connect/fi_accept)");
ABSL_FLAG(std::string, fi_node, "",
          "fi: the local address to bind (fi_getinfo with FI_SOURCE), e.g. this host's IPv4 for tcp");
ABSL_FLAG(uint32_t, oob_port, bypass::tools::kFiOobPort,
          "fi: the TCP port the server hands out its address on");
ABSL_FLAG(std::string, addr_file, "",
          "fi: exchange the server's address through this file instead of a TCP socket");
ABSL_FLAG(uint32_t, link_timeout_ms, 10000, "how long to wait for the link (or the peer's address)");

namespace bypass::tools {
namespace {

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "pingpong: %s\n", std::string(s.message()).c_str());
  return 1;
}

// The largest message the ping buffers hold.
constexpr uint64_t kMaxSize = 256ull << 20;

absl::StatusOr<PingOptions> OptionsFromFlags() {
  PingOptions o;
  o.size = absl::GetFlag(FLAGS_size);
  o.iters = absl::GetFlag(FLAGS_iters);
  o.warmup = absl::GetFlag(FLAGS_warmup);
  o.burst = absl::GetFlag(FLAGS_burst);
  o.window = absl::GetFlag(FLAGS_window);
  o.more = absl::GetFlag(FLAGS_more);
  o.duration_ms = absl::GetFlag(FLAGS_duration_ms);
  const std::string mode = absl::GetFlag(FLAGS_mode);
  o.latency = mode == "latency" || mode == "latency,rate" || mode == "rate,latency";
  o.rate = mode == "rate" || mode == "latency,rate" || mode == "rate,latency";
  if (!o.latency && !o.rate) {
    return absl::InvalidArgumentError(absl::StrCat("--mode=", mode, " is not latency, rate or latency,rate"));
  }
  if (o.iters == 0) return absl::InvalidArgumentError("--iters must be at least 1");
  const std::string layer = absl::GetFlag(FLAGS_layer);
  const bool rdm = layer == "rdm";
  if (const std::string sizes = absl::GetFlag(FLAGS_sizes); !sizes.empty()) {
    auto parsed = ParseSizes(sizes, kMaxSize);
    if (!parsed.ok()) return parsed.status();
    o.sizes = *parsed;
  } else if (o.size > kMaxSize) {
    return absl::InvalidArgumentError(absl::StrCat("--size=", o.size, " is over the 256 MiB the ping buffers hold"));
  } else if (layer == "raw" && 28 + PingPayloadBytes(o.size) > 9000) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--size=", o.size, " does not fit one frame: the raw layer sends one frame per message, "
        "so use --size up to ", 9000 - 28, " (jumbo frames) or --layer=rdm"));
  }
  if (o.window == 0 || o.window > 1024) return absl::InvalidArgumentError("--window must be 1..1024");
  for (double p : {absl::GetFlag(FLAGS_loss), absl::GetFlag(FLAGS_dup), absl::GetFlag(FLAGS_reorder)}) {
    if (!(p >= 0 && p < 1)) return absl::InvalidArgumentError("--loss, --dup and --reorder are fractions in [0, 1)");
    if (p > 0 && !rdm) return absl::InvalidArgumentError("--loss, --dup and --reorder need --layer=rdm");
  }
  if (o.burst == 0 || o.burst > 32) return absl::InvalidArgumentError("--burst must be 1..32");
  if (!absl::GetFlag(FLAGS_csv).empty() || !absl::GetFlag(FLAGS_plot).empty()) {
    if (!o.latency) {
      return absl::InvalidArgumentError("--csv and --plot export round trips: use them with --mode=latency");
    }
    if (o.sizes.size() > 1) {
      return absl::InvalidArgumentError("--csv and --plot export one size's round trips: give one --size");
    }
  }
  return o;
}

LayerOptions LayerFromFlags() {
  LayerOptions l;
  l.layer = absl::GetFlag(FLAGS_layer);
  l.device = absl::GetFlag(FLAGS_device);
  l.ip = absl::GetFlag(FLAGS_ip);
  l.link_timeout_ms = absl::GetFlag(FLAGS_link_timeout_ms);
  l.rdm.loss = absl::GetFlag(FLAGS_loss);
  l.rdm.dup = absl::GetFlag(FLAGS_dup);
  l.rdm.reorder = absl::GetFlag(FLAGS_reorder);
  l.rdm.fault_seed = absl::GetFlag(FLAGS_fault_seed);
  l.fi.provider = absl::GetFlag(FLAGS_provider);
  l.fi.tagged = absl::GetFlag(FLAGS_tagged);
  l.fi.connected = absl::GetFlag(FLAGS_ep) == "msg";
  l.fi.node = absl::GetFlag(FLAGS_fi_node);
  l.fi.oob_port = static_cast<uint16_t>(absl::GetFlag(FLAGS_oob_port));
  l.fi.addr_file = absl::GetFlag(FLAGS_addr_file);
  return l;
}

// The client; with `local`, against a server process it starts from the
// same binary (session.h: RunLocalClient).
int RunClient(const LayerOptions& l, PingOptions o, bool local) {
  // Progress on one updating line, for people watching a terminal.
  const bool progress = !absl::GetFlag(FLAGS_json) && isatty(STDERR_FILENO);
  if (progress) {
    o.progress = [](const std::string& line) { std::fprintf(stderr, "\r\033[Kpingpong: %s", line.c_str()); };
  }
  auto result = local ? RunLocalClient("pingpong", l, o) : RunClientSide(l, o);
  if (progress) std::fprintf(stderr, "\r\033[K");
  if (!result.ok()) return Fail(result.status());
  // --csv and --plot: one latency size (OptionsFromFlags checked it).
  const LatencyResult* one = result->latencies.empty() ? nullptr : &result->latencies.front();
  if (const std::string csv = absl::GetFlag(FLAGS_csv); !csv.empty() && one != nullptr) {
    if (absl::Status s = WriteHistogramCsv(*result, *one, csv); !s.ok()) return Fail(s);
  }
  if (const std::string png = absl::GetFlag(FLAGS_plot); !png.empty() && one != nullptr) {
    if (absl::Status s = PlotHistogram(*result, *one, png); !s.ok()) return Fail(s);
  }
  if (absl::GetFlag(FLAGS_json)) {
    PrintJson(*result);
  } else {
    PrintText(*result);
  }
  return 0;
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
      "  pingpong --layer=rdm --device=URI --connect=MAC/A  (rdm needs the server's IPv4)\n"
      "  pingpong --layer=fi --local [--provider=bypass|shm|tcp] [--tagged] [--ep=msg]\n"
      "  pingpong --layer=fi --server [--provider=P] [--fi_node=A] [--oob_port=N]\n"
      "  pingpong --layer=fi --connect=HOST[:PORT] [--provider=P]\n"
      "  pingpong ... --mode=rate [--window=N] [--duration_ms=T]   one-way message rate\n"
      "  pingpong ... --sizes=8,64,4K --mode=latency,rate --json   every size and both modes in\n"
      "                                        one run, one JSON line each\n"
      "  pingpong ... --csv=FILE --plot=FILE.png                   the round-trip histogram\n"
      "See tools/README.md for the --json schema.");
  absl::ParseCommandLine(argc, argv);
  using namespace bypass::tools;
  const std::string layer = absl::GetFlag(FLAGS_layer);
  if (absl::Status s = CheckLayer(layer); !s.ok()) return Fail(s);
  auto opts = OptionsFromFlags();
  if (!opts.ok()) return Fail(opts.status());
  if (!absl::GetFlag(FLAGS_plot).empty()) {
    // Before the run, not after it.
    if (absl::Status s = CheckGnuplot(); !s.ok()) return Fail(s);
  }
  LayerOptions l = LayerFromFlags();
  if (const std::string ep = absl::GetFlag(FLAGS_ep); ep != "rdm" && ep != "msg") {
    return Fail(absl::InvalidArgumentError(absl::StrCat("--ep=", ep, ": rdm or msg")));
  }
  if (l.fi.connected && layer != "fi") {
    return Fail(absl::InvalidArgumentError("--ep=msg is the fi layer's: add --layer=fi"));
  }
  if (absl::Status s = SetPeer(absl::GetFlag(FLAGS_connect), &l, &*opts); !s.ok()) return Fail(s);
  if (layer == "fi") {
    if (absl::Status s = PrepareProvider(l.fi.provider); !s.ok()) return Fail(s);
  }
  if (absl::GetFlag(FLAGS_local)) {
    if (absl::GetFlag(FLAGS_server)) return Fail(absl::InvalidArgumentError("--local starts the server itself: drop --server"));
    return RunClient(l, *opts, true);
  }
  if (absl::GetFlag(FLAGS_server)) {
    const absl::Status s = RunServerSide(l, *opts);
    return s.ok() ? 0 : Fail(s);
  }
  return RunClient(l, *opts, false);
}
