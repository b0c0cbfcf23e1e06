#include "fabric/rdm/crc32c.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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

// Reflected multiplication modulo the polynomial.
constexpr uint32_t MultModP(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = (b & 1) ? (b >> 1) ^ kPoly : b >> 1;
  }
  return p;
}

// kShift[j] = x^(64j - 33) mod P: carry-less multiplying a CRC state by it
// and folding the product with the CRC instruction advances the state over
// 8j zero bytes (j >= 1).
constexpr size_t kShiftWords = 640;  // streams of up to 5 KiB
constexpr std::array<uint32_t, kShiftWords + 1> MakeShifts() {
  std::array<uint32_t, kShiftWords + 1> t{};
  uint32_t x31 = 0x80000000u;  // x^0
  for (int i = 0; i < 31; ++i) x31 = MultModP(x31, 0x40000000u);
  uint32_t x64 = 0x80000000u;
  for (int i = 0; i < 64; ++i) x64 = MultModP(x64, 0x40000000u);
  t[1] = x31;
  for (size_t j = 2; j <= kShiftWords; ++j) t[j] = MultModP(t[j - 1], x64);
  return t;
}
constexpr auto kShifts = MakeShifts();

#if defined(__x86_64__)
__attribute__((target("sse4.2,pclmul"))) inline uint32_t ShiftState(uint32_t c, size_t words) {
  const __m128i a = _mm_cvtsi32_si128(static_cast<int>(c));
  const __m128i b = _mm_cvtsi32_si128(static_cast<int>(kShifts[words]));
  const uint64_t t = static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_clmulepi64_si128(a, b, 0)));
  return static_cast<uint32_t>(_mm_crc32_u64(0, t));
}

__attribute__((target("sse4.2"), always_inline)) inline uint32_t ExtendSse42Inline(
    uint32_t state, const uint8_t* p, size_t n) {
  uint64_t c = state;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = __builtin_ia32_crc32di(c, word);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  if (n >= 4) {
    uint32_t w;
    std::memcpy(&w, p, 4);
    c32 = __builtin_ia32_crc32si(c32, w);
    p += 4;
    n -= 4;
  }
  if (n >= 2) {
    uint16_t w;
    std::memcpy(&w, p, 2);
    c32 = __builtin_ia32_crc32hi(c32, w);
    p += 2;
    n -= 2;
  }
  if (n > 0) c32 = __builtin_ia32_crc32qi(c32, *p);
  return c32;
}

__attribute__((target("sse4.2"))) uint32_t ExtendSse42(uint32_t state, const uint8_t* p, size_t n) {
  return ExtendSse42Inline(state, p, n);
}

__attribute__((target("sse4.2"))) uint32_t PacketSse42(const uint8_t* pseudo, const uint8_t* p,
                                                       size_t n, size_t zero_at) {
  uint64_t head;
  uint32_t tail;
  std::memcpy(&head, pseudo, 8);
  std::memcpy(&tail, pseudo + 8, 4);
  uint32_t c = static_cast<uint32_t>(__builtin_ia32_crc32di(kCrc32cInit, head));
  c = __builtin_ia32_crc32si(c, tail);
  c = ExtendSse42Inline(c, p, zero_at);
  c = __builtin_ia32_crc32si(c, 0);
  return ExtendSse42Inline(c, p + zero_at + 4, n - zero_at - 4);
}

// The same in three independent streams, so that the CRC instruction's
// latency, not its throughput, is paid about a third as often: A, the
// pseudo header and the bytes up to and including the zeroed field, then
// the rest's odd bytes; B and C, the rest's remaining bytes in two halves
// of `words` 8-byte words each, from state 0. Linearity joins them:
// crc(A|B|C) = shift(A, |B|+|C|) ^ shift(B, |C|) ^ C, each shift a
// carry-less multiplication. REQUIRES: 2 * words <= kShiftWords.
__attribute__((target("sse4.2,pclmul"))) uint32_t PacketThreeStreams(const uint8_t* pseudo,
                                                                     const uint8_t* p, size_t n,
                                                                     size_t zero_at, size_t words) {
  const uint8_t* rest = p + zero_at + 4;
  const size_t odd = n - zero_at - 4 - 16 * words;
  const uint8_t* b = rest + odd;
  const uint8_t* c = b + 8 * words;
  uint64_t sb = 0, sc = 0;
  for (size_t i = 0; i < words; ++i) {
    uint64_t wb, wc;
    std::memcpy(&wb, b + 8 * i, 8);
    std::memcpy(&wc, c + 8 * i, 8);
    sb = __builtin_ia32_crc32di(sb, wb);
    sc = __builtin_ia32_crc32di(sc, wc);
  }
  uint64_t head;
  uint32_t tail;
  std::memcpy(&head, pseudo, 8);
  std::memcpy(&tail, pseudo + 8, 4);
  uint32_t sa = static_cast<uint32_t>(__builtin_ia32_crc32di(kCrc32cInit, head));
  sa = __builtin_ia32_crc32si(sa, tail);
  sa = ExtendSse42Inline(sa, p, zero_at);
  sa = __builtin_ia32_crc32si(sa, 0);
  sa = ExtendSse42Inline(sa, rest, odd);
  return ShiftState(sa, 2 * words) ^ ShiftState(static_cast<uint32_t>(sb), words) ^
         static_cast<uint32_t>(sc);
}
#endif

bool DetectClmul() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("pclmul");
#else
  return false;
#endif
}

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

uint32_t Crc32cPacket(const uint8_t* pseudo, const uint8_t* data, size_t n, size_t zero_at) {
#if defined(__x86_64__)
  static const bool clmul = internal::DetectClmul();
  // Parallel streams pay off once each has a few words.
  const size_t words = std::min((n - zero_at - 4) / 16, internal::kShiftWords / 2);
  if (clmul && words >= 2) return internal::PacketThreeStreams(pseudo, data, n, zero_at, words);
  if (internal::Crc32cHardware()) return internal::PacketSse42(pseudo, data, n, zero_at);
#endif
  constexpr uint8_t kZero[4] = {0, 0, 0, 0};
  uint32_t s = internal::Crc32cExtendPortable(kCrc32cInit, pseudo, 12);
  s = internal::Crc32cExtendPortable(s, data, zero_at);
  s = internal::Crc32cExtendPortable(s, kZero, 4);
  return internal::Crc32cExtendPortable(s, data + zero_at + 4, n - zero_at - 4);
}

uint32_t Crc32cExtend(uint32_t state, const uint8_t* data, size_t n) {
#if defined(__x86_64__)
  if (internal::Crc32cHardware()) return internal::ExtendSse42(state, data, n);
#endif
  return internal::Crc32cExtendPortable(state, data, n);
}

}  // namespace bypass::rdm
