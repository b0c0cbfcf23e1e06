// Whether this binary runs under a sanitizer that slows every memory access
// (ASan, TSan: --config=asan, tsan, fuzz). A test whose size is a count of
// repetitions, not a property, may run fewer of them there so that it stays
// inside its Bazel size's timeout on a loaded 2-core machine; it says so
// where it does, and what it checks stays the same.
#ifndef BYPASS_DRIVER_TESTING_SANITIZER_H_
#define BYPASS_DRIVER_TESTING_SANITIZER_H_

#include <cstdint>

namespace bypass::driver::testing {

// gcc says __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__; clang 14 says it
// through __has_feature.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kUnderSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kUnderSanitizer = true;
#else
inline constexpr bool kUnderSanitizer = false;
#endif
#else
inline constexpr bool kUnderSanitizer = false;
#endif

// `n` without a sanitizer, n / divisor (at least 1) under one.
constexpr uint64_t SanitizerScaled(uint64_t n, uint64_t divisor) {
  if (!kUnderSanitizer) return n;
  return n / divisor > 0 ? n / divisor : 1;
}

}  // namespace bypass::driver::testing

#endif  // BYPASS_DRIVER_TESTING_SANITIZER_H_
