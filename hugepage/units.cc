#include "hugepage/units.h"

#include <string>

namespace bypass::hugepage {

std::string Bytes::ToString() const {
  struct Unit {
    int shift;
    const char* name;
  };
  static constexpr Unit kUnits[] = {{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}};
  for (const Unit& u : kUnits) {
    const uint64_t unit = uint64_t{1} << u.shift;
    if (n_ != 0 && n_ % unit == 0) return std::to_string(n_ >> u.shift) + " " + u.name;
  }
  return std::to_string(n_) + " B";
}

}  // namespace bypass::hugepage
