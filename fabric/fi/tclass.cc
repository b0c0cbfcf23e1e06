// FI_TC_* to DSCP (tclass.h).
#include "fabric/fi/tclass.h"

#include <rdma/fabric.h>

namespace bypass::fi {

std::optional<uint8_t> DscpOfTclass(uint32_t tclass, bool* bad) {
  *bad = false;
  if (tclass == FI_TC_UNSPEC) return std::nullopt;
  if ((tclass & ~0xffu) == FI_TC_DSCP && (tclass & 0xffu) < 64) {
    return static_cast<uint8_t>(tclass & 0xffu);
  }
  switch (tclass) {
    case FI_TC_BEST_EFFORT: return 0;
    case FI_TC_LOW_LATENCY: return 46;
    case FI_TC_DEDICATED_ACCESS: return 34;
    case FI_TC_BULK_DATA: return 10;
    case FI_TC_SCAVENGER: return 8;
    case FI_TC_NETWORK_CTRL: return 48;
    default: break;
  }
  *bad = true;
  return std::nullopt;
}

}  // namespace bypass::fi
