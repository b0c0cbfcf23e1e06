#include "fabric/rdm/crc32c.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace bypass::rdm {
namespace internal {
namespace {

constexpr uint32_t kPoly = 0x82f63b78u;  // Castagnoli, reflected

// Slicing-by-8 tables: kTables[k][b] is the CRC of byte b followed by k zero bytes.
constexpr std::array<std::array<uint32_t, 256>, 8> MakeTables() {
  std::array<std::array<uint32_t, 256>, 8> t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1) ? kPoly : 0);
    t[0][b] = c;
  }
  for (size_t k = 1; k < 8; ++k) {
    for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
  }
  return t;
}
constexpr auto kTables = MakeTables();

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t ExtendSse42(uint32_t state, const uint8_t* p, size_t n) {
  uint64_t c = state;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = __builtin_ia32_crc32di(c, word);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; n > 0; ++p, --n) c32 = __builtin_ia32_crc32qi(c32, *p);
  return c32;
}
#endif

bool DetectHardware() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("sse4.2");
#else
  return false;
#endif
}

}  // namespace

uint32_t Crc32cExtendPortable(uint32_t state, const uint8_t* p, size_t n) {
  uint32_t c = state;
  for (; n >= 8; p += 8, n -= 8) {
    // Little-endian assembly of the first four bytes, as the reflected CRC wants.
    const uint32_t lo =
        c ^ (uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24);
    c = kTables[7][lo & 0xff] ^ kTables[6][(lo >> 8) & 0xff] ^ kTables[5][(lo >> 16) & 0xff] ^
        kTables[4][lo >> 24] ^ kTables[3][p[4]] ^ kTables[2][p[5]] ^ kTables[1][p[6]] ^
        kTables[0][p[7]];
  }
  for (; n > 0; ++p, --n) c = (c >> 8) ^ kTables[0][(c ^ *p) & 0xff];
  return c;
}

bool Crc32cHardware() {
  static const bool hw = DetectHardware();
  return hw;
}

}  // namespace internal

uint32_t Crc32cExtend(uint32_t state, const uint8_t* data, size_t n) {
#if defined(__x86_64__)
  if (internal::Crc32cHardware()) return internal::ExtendSse42(state, data, n);
#endif
  return internal::Crc32cExtendPortable(state, data, n);
}

}  // namespace bypass::rdm
