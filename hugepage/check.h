// A check that aborts with file:line and a message, for violated
// preconditions that must never corrupt state (e.g. a double put).
#ifndef BYPASS_HUGEPAGE_CHECK_H_
#define BYPASS_HUGEPAGE_CHECK_H_

namespace bypass::hugepage::internal {

// Prints "file:line: message" to stderr and aborts.
[[noreturn]] void CheckFailed(const char* file, int line, const char* format, ...)
    __attribute__((format(printf, 3, 4)));

}  // namespace bypass::hugepage::internal

// BYPASS_HUGEPAGE_CHECK(cond, "printf format", args...): aborts unless cond.
#define BYPASS_HUGEPAGE_CHECK(cond, ...)                                          \
  do {                                                                            \
    if (__builtin_expect(!(cond), 0)) {                                           \
      ::bypass::hugepage::internal::CheckFailed(__FILE__, __LINE__, __VA_ARGS__); \
    }                                                                             \
  } while (0)

#endif  // BYPASS_HUGEPAGE_CHECK_H_
