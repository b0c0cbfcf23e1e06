#include "driver/loopback/spsc_ring.h"

#include <cstdint>
#include <cstdlib>

namespace bypass::driver::loopback {

SpscRing::SpscRing(uint32_t slots, uint32_t slot_bytes)
    : mask_(slots - 1),
      slot_bytes_(slot_bytes),
      lens_(new uint32_t[slots]),
      // Default-initialised: pages are touched only as slots are used.
      frames_(new uint8_t[static_cast<size_t>(slots) * slot_bytes]) {
  if (slots == 0 || (slots & (slots - 1)) != 0 || slots > (1u << 31) || slot_bytes == 0) {
    std::abort();  // REQUIRES violated by the caller (loopback_device.cc checks)
  }
}

}  // namespace bypass::driver::loopback
