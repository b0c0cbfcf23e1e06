// Parsing of device URIs: "scheme:target,key=value,...".
#ifndef BYPASS_DRIVER_URI_H_
#define BYPASS_DRIVER_URI_H_

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace bypass::driver {

// A parsed device URI. For "memif:/run/a.sock,role=auto,id=3": scheme
// "memif", target "/run/a.sock", params {role: auto, id: 3}. A first element
// that contains '=' is a parameter, and target is empty ("dpdk:port=0,...").
struct DeviceUri {
  std::string text;    // the whole URI as given
  std::string scheme;
  std::string target;
  std::vector<std::pair<std::string, std::string>> params;  // in order

  static absl::StatusOr<DeviceUri> Parse(std::string_view uri);

  std::optional<std::string> Get(std::string_view key) const;
  bool Has(std::string_view key) const { return Get(key).has_value(); }
  // Removes and returns key (for bypass's own keys before the rest goes on).
  std::optional<std::string> Take(std::string_view key);
  // target followed by the remaining params, comma-joined (DPDK devargs).
  std::string Rest() const;
  // InvalidArgument naming the first param not in `known`, for backends that
  // accept a fixed set.
  absl::Status CheckKnown(std::initializer_list<std::string_view> known) const;
};

// Where a composite "LOCAL+REMOTE" splits: the first '+' followed by a
// scheme and ':' (a '+' inside a path or devargs is not followed by one).
// npos: not a composite.
size_t CompositeSplit(std::string_view text);

}  // namespace bypass::driver

#endif  // BYPASS_DRIVER_URI_H_
