// What fuzz targets share: an invariant check that aborts (so libFuzzer and
// the gcc runner both report the input) and big-endian field access.
#ifndef BYPASS_TEST_FUZZ_FUZZ_CHECK_H_
#define BYPASS_TEST_FUZZ_FUZZ_CHECK_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace bypass::fuzz {

// Aborts with `what` when an invariant of the code under test is broken.
inline void Require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
  std::abort();
}

inline uint16_t Get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
inline void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
inline uint32_t Get32(const uint8_t* p) { return uint32_t{Get16(p)} << 16 | Get16(p + 2); }

}  // namespace bypass::fuzz

#endif  // BYPASS_TEST_FUZZ_FUZZ_CHECK_H_
