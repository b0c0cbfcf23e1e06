#include "driver/uri.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace bypass::driver {
namespace {

// Abseil here is built with its own string_view (ABSL_OPTION_USE_STD_* = 0).
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string JoinNames(std::initializer_list<std::string_view> names) {
  std::string out;
  for (std::string_view n : names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

constexpr std::string_view kForm = "expected SCHEME:TARGET[,key=value...]";

bool IsSchemeChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

// Splits at commas that are outside square brackets, so DPDK list values
// such as "representor=[0,1]" stay whole. Unbalanced brackets are an error.
absl::StatusOr<std::vector<std::string_view>> SplitElements(std::string_view uri,
                                                            std::string_view body) {
  std::vector<std::string_view> out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c == '[') {
      ++depth;
    } else if (c == ']') {
      if (--depth < 0) break;
    } else if (c == ',' && depth == 0) {
      out.push_back(body.substr(start, i - start));
      start = i + 1;
    }
  }
  if (depth != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("device URI '", Sv(uri), "' has unbalanced '[' ']'"));
  }
  out.push_back(body.substr(start));
  return out;
}

}  // namespace

absl::StatusOr<DeviceUri> DeviceUri::Parse(std::string_view uri) {
  const size_t colon = uri.find(':');
  if (uri.empty() || colon == std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("device URI '", Sv(uri), "' has no scheme: ", Sv(kForm)));
  }
  DeviceUri out;
  out.text = std::string(uri);
  out.scheme = std::string(uri.substr(0, colon));
  if (out.scheme.empty() || !std::all_of(out.scheme.begin(), out.scheme.end(), IsSchemeChar)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device URI '", Sv(uri), "': scheme '", out.scheme,
        "' must be lower-case letters, digits or '_'; ", Sv(kForm)));
  }
  const std::string_view body = uri.substr(colon + 1);
  if (body.empty()) return out;  // "loopback:" -- the backend says what it needs

  absl::StatusOr<std::vector<std::string_view>> elements = SplitElements(uri, body);
  if (!elements.ok()) return elements.status();
  for (size_t i = 0; i < elements->size(); ++i) {
    const std::string_view e = (*elements)[i];
    if (e.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("device URI '", Sv(uri), "' has an empty element (stray ','?)"));
    }
    const size_t eq = e.find('=');
    if (eq == std::string_view::npos) {
      if (i == 0) {
        out.target = std::string(e);
        continue;
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "device URI '", Sv(uri), "': '", Sv(e), "' is not key=value (only the target may be bare)"));
    }
    const std::string_view key = e.substr(0, eq);
    const std::string_view value = e.substr(eq + 1);
    if (key.empty() || value.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "device URI '", Sv(uri), "': parameter '", Sv(e), "' needs both a key and a value"));
    }
    if (out.Has(key)) {
      return absl::InvalidArgumentError(
          absl::StrCat("device URI '", Sv(uri), "': parameter '", Sv(key), "' is given twice"));
    }
    out.params.emplace_back(std::string(key), std::string(value));
  }
  return out;
}

std::optional<std::string> DeviceUri::Get(std::string_view key) const {
  for (const auto& [k, v] : params) {
    if (k == key) return v;
  }
  return std::nullopt;
}

std::optional<std::string> DeviceUri::Take(std::string_view key) {
  for (auto it = params.begin(); it != params.end(); ++it) {
    if (it->first == key) {
      std::string value = std::move(it->second);
      params.erase(it);
      return value;
    }
  }
  return std::nullopt;
}

std::string DeviceUri::Rest() const {
  std::string out = target;
  for (const auto& [k, v] : params) absl::StrAppend(&out, out.empty() ? "" : ",", k, "=", v);
  return out;
}

absl::Status DeviceUri::CheckKnown(std::initializer_list<std::string_view> known) const {
  for (const auto& [k, v] : params) {
    if (std::find(known.begin(), known.end(), k) == known.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "device URI '", text, "': unknown parameter '", k, "' for ", scheme,
          known.size() == 0 ? " (it takes none)"
                            : absl::StrCat(" (accepted: ", JoinNames(known), ")")));
    }
  }
  return absl::OkStatus();
}

size_t CompositeSplit(std::string_view text) {
  for (size_t plus = text.find('+'); plus != std::string_view::npos;
       plus = text.find('+', plus + 1)) {
    size_t i = plus + 1;
    while (i < text.size() && ((text[i] >= 'a' && text[i] <= 'z') || (text[i] >= '0' && text[i] <= '9'))) {
      ++i;
    }
    if (i > plus + 1 && i < text.size() && text[i] == ':') return plus;
  }
  return std::string_view::npos;
}

}  // namespace bypass::driver
