// CRC-32C (Castagnoli), the checksum every bypass packet carries over its
// bypass header and payload: SSE4.2 instructions when the CPU has them, a
// table otherwise; both give the same value.
#ifndef BYPASS_FABRIC_RDM_CRC32C_H_
#define BYPASS_FABRIC_RDM_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace bypass::rdm {

// The running state of a CRC-32C: start with kCrc32cInit, Extend over the
// bytes in order, and Finish. Crc32c("123456789") == 0xe3069283.
inline constexpr uint32_t kCrc32cInit = 0xffffffffu;

// Extends `state` over data[0, n).
uint32_t Crc32cExtend(uint32_t state, const uint8_t* data, size_t n);
inline uint32_t Crc32cFinish(uint32_t state) { return state ^ 0xffffffffu; }
inline uint32_t Crc32c(const uint8_t* data, size_t n) {
  return Crc32cFinish(Crc32cExtend(kCrc32cInit, data, n));
}

// Extends kCrc32cInit over pseudo[0, 12) then data[0, n) with the four
// bytes data[zero_at, zero_at + 4) taken as zeros (a packet's own CRC
// field), in one call: the per-packet checksum. REQUIRES: zero_at + 4 <= n.
uint32_t Crc32cPacket(const uint8_t* pseudo, const uint8_t* data, size_t n, size_t zero_at);

namespace internal {
// The table implementation, always available (tests compare the two).
uint32_t Crc32cExtendPortable(uint32_t state, const uint8_t* data, size_t n);
// Whether Crc32cExtend uses the SSE4.2 instruction.
bool Crc32cHardware();
}  // namespace internal

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_CRC32C_H_
