#include "tools/pingpong/phases.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tools/ping_wire.h"

namespace bypass::tools {
namespace {

// Warm-up messages of `size`: opts.warmup, but at most 64 MiB of them.
uint64_t WarmupFor(const PingOptions& opts, uint64_t size) {
  return std::min<uint64_t>(opts.warmup, std::max<uint64_t>(2, (64ull << 20) / PingPayloadBytes(size)));
}

// One progress line at most every 200 ms.
class Progress {
 public:
  Progress(const PingOptions& opts, const char* phase) : opts_(opts), phase_(phase) {}
  void Report(uint64_t size, size_t k, size_t of, uint64_t done, bool force) {
    const uint64_t now = NowNs();
    if (!opts_.progress || (!force && now - last_ < 200'000'000)) return;
    last_ = now;
    const std::string what = opts_.duration_ms != 0 ? absl::StrCat(done, " done")
                                                    : absl::StrCat(done, " of ", opts_.iters);
    opts_.progress(absl::StrCat(phase_, " size ", size, " B (", k + 1, " of ", of, "): ", what));
  }

 private:
  const PingOptions& opts_;
  const char* phase_;
  uint64_t last_ = 0;
};

// The reason `size` is skipped, or the error when it was asked for alone.
absl::Status CannotAlone(const PingOptions& opts, uint64_t size, const std::string& why) {
  if (!opts.sizes.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("--size=", size, ": ", why));
}

}  // namespace

uint32_t WindowFor(uint32_t window, uint64_t max_inflight_bytes, uint64_t size) {
  if (max_inflight_bytes == 0) return window;
  const uint64_t fit = max_inflight_bytes / PingPayloadBytes(size);
  return static_cast<uint32_t>(std::clamp<uint64_t>(fit, 1, std::max<uint32_t>(window, 1)));
}

absl::StatusOr<std::vector<LatencyResult>> RunLatencyPhases(const PingOptions& opts,
                                                            PhaseDriver& client) {
  std::vector<LatencyResult> out;
  const std::vector<uint64_t> sizes = opts.Sizes();
  Progress progress(opts, "latency");
  uint64_t seq = 0;  // never repeats within a run, so a late reply cannot pass for a new one
  for (size_t k = 0; k < sizes.size(); ++k) {
    LatencyResult r;
    r.size = sizes[k];
    r.skipped = client.Cannot(r.size);
    if (!r.skipped.empty()) {
      if (absl::Status s = CannotAlone(opts, r.size, r.skipped); !s.ok()) return s;
      out.push_back(std::move(r));
      continue;
    }
    progress.Report(r.size, k, sizes.size(), 0, true);
    // A timed phase's warm-up ends early after a quarter of it, but not
    // before 50 ms: two processes just started may share a core that long
    // before the scheduler moves one (round trips of tens of us here).
    const uint64_t warm_end =
        opts.duration_ms == 0 ? ~uint64_t{0}
                              : NowNs() + std::max<uint64_t>(50'000'000, opts.duration_ms * 250'000);
    for (uint64_t i = WarmupFor(opts, r.size); i > 0 && NowNs() < warm_end; --i) {
      auto rtt = client.Ping(r.size, seq++);
      if (!rtt.ok()) return rtt.status();
    }
    const uint64_t end = opts.duration_ms == 0 ? 0 : NowNs() + opts.duration_ms * 1'000'000;
    uint64_t measured_ns = 0;
    r.samples.reserve(opts.duration_ms == 0 ? opts.iters : 1024);
    while (opts.duration_ms == 0 ? r.samples.size() < opts.iters : r.samples.empty() || NowNs() < end) {
      auto rtt = client.Ping(r.size, seq++);
      if (!rtt.ok()) return rtt.status();
      r.samples.push_back(*rtt);
      measured_ns += *rtt;
      progress.Report(r.size, k, sizes.size(), r.samples.size(), false);
    }
    r.iters = r.samples.size();
    r.rtt_ns = Percentiles::Of(r.samples);
    r.msgs_per_sec = measured_ns == 0 ? 0 : 1e9 * static_cast<double>(r.iters) /
                                                static_cast<double>(measured_ns);
    out.push_back(std::move(r));
  }
  return out;
}

absl::StatusOr<std::vector<RateResult>> RunRatePhases(const PingOptions& opts,
                                                      PhaseDriver& client) {
  std::vector<RateResult> out;
  const std::vector<uint64_t> sizes = opts.Sizes();
  Progress progress(opts, "rate");
  bool began = false;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const uint64_t size = sizes[k];
    RateResult r;
    r.size = size;
    r.wire_bytes = PingPayloadBytes(size);
    r.window = client.Window(size);
    r.skipped = client.Cannot(size);
    if (!r.skipped.empty()) {
      if (absl::Status s = CannotAlone(opts, size, r.skipped); !s.ok()) return s;
      out.push_back(r);
      continue;
    }
    if (!began) {
      if (absl::Status s = client.StartRate(); !s.ok()) return s;
    }
    began = true;
    progress.Report(size, k, sizes.size(), 0, true);
    if (const uint64_t warmup = WarmupFor(opts, size); warmup != 0) {
      if (absl::Status s = client.SendData(size, warmup); !s.ok()) return s;
      auto rep = client.AskReport();  // resets the server's count
      if (!rep.ok()) return rep.status();
    }
    // Between clock reads and progress lines: up to 4 MiB of messages.
    const uint64_t chunk = std::clamp<uint64_t>((4ull << 20) / r.wire_bytes, 1, 4096);
    if (opts.duration_ms != 0) {
      const uint64_t end = NowNs() + opts.duration_ms * 1'000'000;
      while (NowNs() < end) {
        if (absl::Status s = client.SendData(size, chunk); !s.ok()) return s;
        r.sent += chunk;
        progress.Report(size, k, sizes.size(), r.sent, false);
      }
    } else {
      while (r.sent < opts.iters) {
        const uint64_t n = std::min<uint64_t>(chunk, opts.iters - r.sent);
        if (absl::Status s = client.SendData(size, n); !s.ok()) return s;
        r.sent += n;
        progress.Report(size, k, sizes.size(), r.sent, false);
      }
    }
    auto rep = client.AskReport();
    if (!rep.ok()) return rep.status();
    r.msgs = rep->count;
    if (client.reliable() && r.msgs != r.sent) {
      return absl::DataLossError(absl::StrCat("the server received ", r.msgs, " of ", r.sent,
                                              " reliable messages of ", size, " B"));
    }
    r.seconds = static_cast<double>(rep->elapsed_ns) / 1e9;
    if (rep->elapsed_ns != 0) {
      r.msg_rate = static_cast<double>(r.msgs) / r.seconds;
      r.mbytes_per_s = r.msg_rate * static_cast<double>(r.wire_bytes) / 1e6;
    }
    out.push_back(r);
  }
  return out;
}

absl::Status RunPhases(const PingOptions& opts, PhaseDriver& client, RunResult* result) {
  if (opts.latency) {
    auto l = RunLatencyPhases(opts, client);
    if (!l.ok()) return l.status();
    result->latencies = *std::move(l);
  }
  if (opts.rate) {
    auto r = RunRatePhases(opts, client);
    if (!r.ok()) return r.status();
    result->rates = *std::move(r);
  }
  return absl::OkStatus();
}

}  // namespace bypass::tools
