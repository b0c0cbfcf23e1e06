#include "tools/pingpong/rate.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/ping_wire.h"

namespace bypass::tools {
namespace {

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

uint32_t ServerSlots(uint32_t window, uint64_t bytes) {
  const uint64_t fit = kRecvBudgetBytes / std::max<uint64_t>(bytes, 1);
  return static_cast<uint32_t>(std::max<uint64_t>(2, std::min<uint64_t>(window, fit)));
}

uint32_t WindowFor(const RateOps& ops, uint64_t size) {
  if (ops.max_inflight_bytes == 0) return ops.window;
  const uint64_t fit = ops.max_inflight_bytes / PingPayloadBytes(size);
  return static_cast<uint32_t>(std::clamp<uint64_t>(fit, 1, std::max<uint32_t>(ops.window, 1)));
}

absl::StatusOr<std::vector<RateResult>> RunRatePhases(const PingOptions& opts, const RateOps& ops) {
  std::vector<RateResult> out;
  const std::vector<uint64_t> sizes = opts.RateSizes();
  uint64_t last_progress = NowNs();
  for (size_t k = 0; k < sizes.size(); ++k) {
    const uint64_t size = sizes[k];
    RateResult r;
    r.size = size;
    r.wire_bytes = PingPayloadBytes(size);
    r.window = WindowFor(ops, size);
    r.skipped = ops.cannot(size);
    if (!r.skipped.empty()) {
      out.push_back(r);
      continue;
    }
    auto progress = [&](uint64_t sent, bool force) {
      const uint64_t now = NowNs();
      if (!opts.progress || (!force && now - last_progress < 200'000'000)) return;
      last_progress = now;
      std::string what = opts.duration_ms != 0
                             ? absl::StrCat(sent, " sent")
                             : absl::StrCat(sent, " of ", opts.iters);
      opts.progress(absl::StrCat("size ", size, " B (", k + 1, " of ", sizes.size(), "): ", what));
    };
    progress(0, true);
    // Large messages warm up with at most 64 MiB of them.
    const uint64_t warmup = std::min<uint64_t>(opts.warmup, std::max<uint64_t>(2, (64ull << 20) / r.wire_bytes));
    if (warmup != 0) {
      if (absl::Status s = ops.send(size, warmup); !s.ok()) return s;
      auto rep = ops.report();  // resets the server's count
      if (!rep.ok()) return rep.status();
    }
    // Between clock reads and progress lines: up to 4 MiB of messages.
    const uint64_t chunk = std::clamp<uint64_t>((4ull << 20) / r.wire_bytes, 1, 4096);
    if (opts.duration_ms != 0) {
      const uint64_t end = NowNs() + opts.duration_ms * 1'000'000;
      while (NowNs() < end) {
        if (absl::Status s = ops.send(size, chunk); !s.ok()) return s;
        r.sent += chunk;
        progress(r.sent, false);
      }
    } else {
      while (r.sent < opts.iters) {
        const uint64_t n = std::min<uint64_t>(chunk, opts.iters - r.sent);
        if (absl::Status s = ops.send(size, n); !s.ok()) return s;
        r.sent += n;
        progress(r.sent, false);
      }
    }
    auto rep = ops.report();
    if (!rep.ok()) return rep.status();
    r.msgs = rep->count;
    if (ops.reliable && r.msgs != r.sent) {
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

void SetRateResult(std::vector<RateResult> rates, RunResult* result) {
  if (rates.size() == 1) {
    const RateResult& r = rates[0];
    result->msgs_per_sec = r.msg_rate;
    if (!r.skipped.empty()) {
      absl::StrAppend(&result->extra_text, "skipped     ", r.skipped, "\n");
    } else {
      absl::StrAppend(&result->extra_json, ",\"received\":", r.msgs, ",\"sent\":", r.sent);
      absl::StrAppend(&result->extra_text, "received    ", r.msgs, " of ", r.sent, " messages\n");
    }
  }
  result->rates = std::move(rates);
}

}  // namespace bypass::tools
