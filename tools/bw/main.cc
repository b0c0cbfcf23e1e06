// bw: windowed one-way message rate and bandwidth between two processes,
// for a range of message sizes, on the raw driver, the RDM engine or
// libfabric's API. See --help and tools/README.md (the --json schema).
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "tools/sizes.h"
#include "tools/latency.h"
#include "tools/pingpong/session.h"

ABSL_FLAG(std::string, layer, "rdm", "raw (the driver), rdm (the protocol engine) or fi (fi_* API)");
ABSL_FLAG(bool, server, false, "count what arrives until the client is done");
ABSL_FLAG(bool, local, false, "start a server process and a client on this host (memif for raw and rdm)");
ABSL_FLAG(std::string, connect, "",
          "raw, rdm: the server's MAC[/IPv4] (rdm needs the IPv4). fi: HOST[:PORT] of the server's "
          "address exchange socket");
ABSL_FLAG(std::string, device, "",
          "device URI (default with --local: memif on a fresh socket); fi with --provider=bypass: "
          "FI_BYPASS_DEVICES for this process");
ABSL_FLAG(std::string, sizes, "1,64,4096,65536,1048576,16777216",
          "message sizes: a list (1,64,4K,1M), a doubling range (64-65536) or both; the server "
          "needs the same list");
ABSL_FLAG(uint32_t, window, 32, "rdm, fi: messages outstanding (raw: frames per burst, at most 32)");
ABSL_FLAG(uint64_t, iters, 0, "messages per size (0: send for --duration_ms instead)");
ABSL_FLAG(uint64_t, duration_ms, 1000, "how long to send each size when --iters is 0");
ABSL_FLAG(uint64_t, warmup, 100, "messages per size before measuring (at most 64 MiB of them)");
ABSL_FLAG(bool, json, false, "print one JSON object (and no progress line)");
ABSL_FLAG(std::string, ip, "", "this side's IPv4 for devices with no kernel address");
ABSL_FLAG(std::string, provider, "bypass", "fi: the libfabric provider (bypass, shm, tcp, ...)");
ABSL_FLAG(bool, tagged, false, "fi: tagged messages (fi_tsend/fi_trecv)");
ABSL_FLAG(std::string, fi_node, "", "fi: the local address to bind (fi_getinfo with FI_SOURCE)");
ABSL_FLAG(uint32_t, oob_port, bypass::tools::kFiOobPort, "fi: the server's address exchange TCP port");
ABSL_FLAG(std::string, addr_file, "", "fi: exchange the server's address through this file");
ABSL_FLAG(uint32_t, link_timeout_ms, 10000, "how long to wait for the link (or the peer's address)");

namespace bypass::tools {
namespace {

// The largest size bw runs: the RDM engine's eager limit.
constexpr uint64_t kMaxSize = 16u << 20;

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "\nbw: %s\n", std::string(s.message()).c_str());
  return 1;
}

void PrintBwJson(const RunResult& r, uint32_t window) {
  std::string out = absl::StrCat("{\"tool\":\"bw\",\"layer\":\"", r.layer, "\",\"provider\":",
                                 JsonStringOrNull(r.provider), ",\"device\":\"", JsonEscape(r.device),
                                 "\",\"window\":", window, ",\"results\":[");
  for (size_t i = 0; i < r.rates.size(); ++i) {
    const RateResult& x = r.rates[i];
    char nums[256];
    std::snprintf(nums, sizeof(nums),
                  "\"seconds\":%.6f,\"msg_rate\":%.1f,\"mbytes_per_s\":%.3f", x.seconds, x.msg_rate,
                  x.mbytes_per_s);
    absl::StrAppend(&out, i == 0 ? "" : ",", "{\"size\":", x.size, ",\"wire_bytes\":", x.wire_bytes,
                    ",\"window\":", x.window, ",\"sent\":", x.sent, ",\"msgs\":", x.msgs, ",", nums);
    if (!x.skipped.empty()) absl::StrAppend(&out, ",\"skipped\":\"", JsonEscape(x.skipped), "\"");
    out += "}";
  }
  out += "]}\n";
  std::fputs(out.c_str(), stdout);
}

void PrintBwText(const RunResult& r, uint32_t window) {
  std::printf("bw: layer %s%s%s, device %s, window %u\n", r.layer.c_str(),
              r.provider.empty() ? "" : ", provider ", r.provider.c_str(), r.device.c_str(), window);
  std::printf("%10s %12s %12s %9s %14s %12s\n", "size", "sent", "received", "seconds", "msg/s", "MB/s");
  for (const RateResult& x : r.rates) {
    if (!x.skipped.empty()) {
      std::printf("%10llu  skipped: %s\n", static_cast<unsigned long long>(x.size), x.skipped.c_str());
      continue;
    }
    std::printf("%10llu %12llu %12llu %9.3f %14.0f %12.2f\n", static_cast<unsigned long long>(x.size),
                static_cast<unsigned long long>(x.sent), static_cast<unsigned long long>(x.msgs),
                x.seconds, x.msg_rate, x.mbytes_per_s);
  }
  std::printf("(MB/s counts each message's payload, at least the 16-byte ping header: 1e6 bytes/s)\n");
}

}  // namespace
}  // namespace bypass::tools

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "one-way message rate and bandwidth for a range of sizes, between two processes.\n"
      "  bw --local [--layer=raw|rdm|fi] [--provider=shm] [--sizes=1,64,4K] [--window=N]\n"
      "  bw --server --device=URI [--sizes=...]     one side (same --sizes as the client)\n"
      "  bw --device=URI --connect=MAC/IPv4          the other side (rdm)\n"
      "  bw --layer=fi --server [--provider=P]; bw --layer=fi --connect=HOST[:PORT]\n"
      "raw sends one frame per message: sizes above the device's MTU are skipped with a note.\n"
      "See tools/README.md for the --json schema.");
  absl::ParseCommandLine(argc, argv);
  using namespace bypass::tools;
  const std::string layer = absl::GetFlag(FLAGS_layer);
  if (absl::Status s = CheckLayer(layer); !s.ok()) return Fail(s);
  auto sizes = ParseSizes(absl::GetFlag(FLAGS_sizes), kMaxSize);
  if (!sizes.ok()) return Fail(sizes.status());
  PingOptions o;
  o.latency = false;
  o.rate = true;
  o.sizes = *sizes;
  o.iters = absl::GetFlag(FLAGS_iters);
  o.duration_ms = o.iters == 0 ? absl::GetFlag(FLAGS_duration_ms) : 0;
  if (o.iters == 0 && o.duration_ms == 0) return Fail(absl::InvalidArgumentError("give --iters or --duration_ms"));
  o.warmup = absl::GetFlag(FLAGS_warmup);
  o.window = absl::GetFlag(FLAGS_window);
  if (o.window == 0 || o.window > 1024) return Fail(absl::InvalidArgumentError("--window must be 1..1024"));
  o.burst = std::min<uint32_t>(o.window, 32);
  const bool json = absl::GetFlag(FLAGS_json);
  if (!json) {
    o.progress = [](const std::string& line) { std::fprintf(stderr, "\r\033[Kbw: %s", line.c_str()); };
  }

  LayerOptions l;
  l.layer = layer;
  l.device = absl::GetFlag(FLAGS_device);
  l.ip = absl::GetFlag(FLAGS_ip);
  l.link_timeout_ms = absl::GetFlag(FLAGS_link_timeout_ms);
  l.fi.provider = absl::GetFlag(FLAGS_provider);
  l.fi.tagged = absl::GetFlag(FLAGS_tagged);
  l.fi.node = absl::GetFlag(FLAGS_fi_node);
  l.fi.oob_port = static_cast<uint16_t>(absl::GetFlag(FLAGS_oob_port));
  l.fi.addr_file = absl::GetFlag(FLAGS_addr_file);
  if (absl::Status s = SetPeer(absl::GetFlag(FLAGS_connect), &l, &o); !s.ok()) return Fail(s);
  if (layer == "fi") {
    if (absl::Status s = PrepareProvider(l.fi.provider); !s.ok()) return Fail(s);
  }

  if (absl::GetFlag(FLAGS_server)) {
    if (absl::GetFlag(FLAGS_local)) return Fail(absl::InvalidArgumentError("--local starts the server itself: drop --server"));
    const absl::Status s = RunServerSide(l, o);
    return s.ok() ? 0 : Fail(s);
  }
  auto result = absl::GetFlag(FLAGS_local) ? RunLocalClient("bw", l, o) : RunClientSide(l, o);
  if (!json) std::fprintf(stderr, "\r\033[K");
  if (!result.ok()) return Fail(result.status());
  const uint32_t window = layer == "raw" ? o.burst : o.window;
  if (json) {
    PrintBwJson(*result, window);
  } else {
    PrintBwText(*result, window);
  }
  return 0;
}
