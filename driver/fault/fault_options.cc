#include "driver/fault/fault_options.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace bypass::driver::fault {
namespace {

// Abseil here is built with its own string_view (ABSL_OPTION_USE_STD_* = 0).
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

constexpr std::string_view kKeys =
    "drop, dup, reorder, delay, corrupt, reorder_depth, delay_ns, delay_slots, corrupt_bytes, "
    "seed, rate_pps, queue";

// Bounds of the integer fields, shared by the parser and the validator.
constexpr uint64_t kMaxReorderDepth = 1024;
constexpr uint64_t kMaxDelaySlots = 65536;
constexpr uint64_t kMaxCorruptBytes = 64;
constexpr uint64_t kMaxQueue = 65536;
constexpr uint64_t kMaxRatePps = 1'000'000'000;  // one packet per nanosecond

template <typename T>
bool ParseWhole(std::string_view s, T* out) {
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, *out);
  return ec == std::errc() && ptr == end && !s.empty();
}

bool IsRate(double r) { return r >= 0 && r <= 1; }  // false for NaN

absl::Status RangeError(std::string_view key, uint64_t lo, uint64_t hi) {
  return absl::InvalidArgumentError(
      absl::StrCat("fault option ", Sv(key), ": expected a whole number from ", lo, " to ", hi));
}

}  // namespace

std::string FaultOptions::ToString() const {
  // Shortest text that parses back to the same double.
  const auto rate = [](double r) {
    char buf[32];
    auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), r);
    return std::string(buf, ec == std::errc() ? end : buf);
  };
  return absl::StrCat("drop=", rate(drop), ",dup=", rate(dup), ",reorder=", rate(reorder),
                      ",reorder_depth=", reorder_depth, ",delay=", rate(delay),
                      ",delay_ns=", delay_ns, ",delay_slots=", delay_slots,
                      ",corrupt=", rate(corrupt), ",corrupt_bytes=", corrupt_bytes,
                      ",seed=", seed, ",rate_pps=", rate_pps, ",queue=", queue);
}

FaultCounters& FaultCounters::operator+=(const FaultCounters& o) {
  seen += o.seen;
  dropped += o.dropped;
  duplicated += o.duplicated;
  reordered += o.reordered;
  delayed += o.delayed;
  corrupted += o.corrupted;
  evicted += o.evicted;
  dup_no_buffer += o.dup_no_buffer;
  queue_dropped += o.queue_dropped;
  queue_max = std::max(queue_max, o.queue_max);
  return *this;
}

absl::Status ValidateFaultOptions(const FaultOptions& o) {
  const std::pair<std::string_view, double> rates[] = {
      {"drop", o.drop}, {"dup", o.dup}, {"reorder", o.reorder},
      {"delay", o.delay}, {"corrupt", o.corrupt}};
  for (const auto& [key, rate] : rates) {
    if (!IsRate(rate)) {
      return absl::InvalidArgumentError(
          absl::StrCat("fault option ", Sv(key), "=", rate, ": expected a probability from 0 to 1"));
    }
  }
  if (o.reorder_depth < 1 || o.reorder_depth > kMaxReorderDepth) {
    return RangeError("reorder_depth", 1, kMaxReorderDepth);
  }
  if (o.delay_slots < 1 || o.delay_slots > kMaxDelaySlots) {
    return RangeError("delay_slots", 1, kMaxDelaySlots);
  }
  if (o.corrupt_bytes < 1 || o.corrupt_bytes > kMaxCorruptBytes) {
    return RangeError("corrupt_bytes", 1, kMaxCorruptBytes);
  }
  if (o.rate_pps > kMaxRatePps) return RangeError("rate_pps", 0, kMaxRatePps);
  if (o.queue < 1 || o.queue > kMaxQueue) return RangeError("queue", 1, kMaxQueue);
  return absl::OkStatus();
}

absl::StatusOr<FaultOptions> ParseFaultSpec(std::string_view spec) {
  FaultOptions o;
  std::vector<std::string_view> seen;
  const auto bad = [&](std::string_view item, std::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("fault spec '", Sv(spec), "': '", Sv(item), "': ", Sv(what)));
  };
  size_t pos = 0;
  while (pos < spec.size()) {
    size_t comma = spec.find(',', pos);
    if (comma == std::string_view::npos) comma = spec.size();
    const std::string_view item = spec.substr(pos, comma - pos);
    pos = comma + 1;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) return bad(item, "expected key=value");
    const std::string_view key = item.substr(0, eq);
    const std::string_view value = item.substr(eq + 1);
    for (std::string_view k : seen) {
      if (k == key) return bad(item, "key given twice");
    }
    seen.push_back(key);

    double* rate = key == "drop"      ? &o.drop
                   : key == "dup"     ? &o.dup
                   : key == "reorder" ? &o.reorder
                   : key == "delay"   ? &o.delay
                   : key == "corrupt" ? &o.corrupt
                                      : nullptr;
    if (rate != nullptr) {
      if (!ParseWhole(value, rate) || !IsRate(*rate)) {
        return bad(item, "expected a probability from 0 to 1");
      }
      continue;
    }
    uint64_t n = 0;
    const bool is_number = ParseWhole(value, &n);
    if (key == "seed" || key == "delay_ns") {
      if (!is_number) return bad(item, "expected a whole number");
      (key == "seed" ? o.seed : o.delay_ns) = n;
      continue;
    }
    if (key == "rate_pps") {
      if (!is_number || n > kMaxRatePps) {
        return bad(item, absl::StrCat("expected a whole number from 0 to ", kMaxRatePps));
      }
      o.rate_pps = n;
      continue;
    }
    // An integer field and its upper bound.
    struct Bounded {
      std::string_view key;
      uint32_t* field;
      uint64_t max;
    };
    const Bounded bounded[] = {{"reorder_depth", &o.reorder_depth, kMaxReorderDepth},
                               {"delay_slots", &o.delay_slots, kMaxDelaySlots},
                               {"corrupt_bytes", &o.corrupt_bytes, kMaxCorruptBytes},
                               {"queue", &o.queue, kMaxQueue}};
    bool known = false;
    for (const Bounded& b : bounded) {
      if (b.key != key) continue;
      known = true;
      if (!is_number || n < 1 || n > b.max) {
        return bad(item, absl::StrCat("expected a whole number from 1 to ", b.max));
      }
      *b.field = static_cast<uint32_t>(n);
    }
    if (!known) return bad(item, absl::StrCat("unknown key (known: ", Sv(kKeys), ")"));
  }
  if (!spec.empty() && spec.back() == ',') {
    return absl::InvalidArgumentError(absl::StrCat("fault spec '", Sv(spec), "': trailing ','"));
  }
  return o;
}

}  // namespace bypass::driver::fault
