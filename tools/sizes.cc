#include "tools/sizes.h"

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace bypass::tools {
namespace {

absl::StatusOr<uint64_t> ParseOne(absl::string_view t, uint64_t max) {
  uint64_t mult = 1;
  if (!t.empty() && (t.back() == 'K' || t.back() == 'k')) {
    mult = 1024;
    t.remove_suffix(1);
  } else if (!t.empty() && (t.back() == 'M' || t.back() == 'm')) {
    mult = 1024 * 1024;
    t.remove_suffix(1);
  }
  uint64_t v = 0;
  if (!absl::SimpleAtoi(t, &v) || v == 0 || v > max / mult) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--sizes: '", t, "' is not a size from 1 to ", max, " (e.g. --sizes=1,64,4K,1M or 64-65536)"));
  }
  return v * mult;
}

}  // namespace

absl::StatusOr<std::vector<uint64_t>> ParseSizes(absl::string_view text, uint64_t max) {
  std::vector<uint64_t> out;
  if (text.empty()) return absl::InvalidArgumentError("--sizes is empty (e.g. --sizes=1,64,4096)");
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    const size_t dash = part.find('-');
    if (dash == absl::string_view::npos) {
      auto v = ParseOne(part, max);
      if (!v.ok()) return v.status();
      out.push_back(*v);
      continue;
    }
    auto lo = ParseOne(part.substr(0, dash), max);
    if (!lo.ok()) return lo.status();
    auto hi = ParseOne(part.substr(dash + 1), max);
    if (!hi.ok()) return hi.status();
    if (*lo > *hi) {
      return absl::InvalidArgumentError(absl::StrCat("--sizes: the range ", part, " runs backwards"));
    }
    for (uint64_t v = *lo; v < *hi; v *= 2) out.push_back(v);
    out.push_back(*hi);
  }
  return out;
}

}  // namespace bypass::tools
