// The tools' --sizes: a list ("1,64,4096"), a doubling range ("64-65536"), or a
// mix ("1,64-1024,1048576"), with optional K/M suffixes (KiB, MiB).
#ifndef BYPASS_TOOLS_SIZES_H_
#define BYPASS_TOOLS_SIZES_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace bypass::tools {

// The sizes in the order given (ranges ascending by doubling, the upper
// bound included even when not a doubling of the lower). Each is 1..max.
absl::StatusOr<std::vector<uint64_t>> ParseSizes(absl::string_view text, uint64_t max);

}  // namespace bypass::tools

#endif  // BYPASS_TOOLS_SIZES_H_
