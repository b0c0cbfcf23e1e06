// Reading the enum fields an application fills in (fi_info hints, object
// attributes): they may hold any value, and loading one outside an enum's
// range as the enum is undefined behaviour, so they are read as integers.
#ifndef BYPASS_FABRIC_FI_INFO_RAW_ENUM_H_
#define BYPASS_FABRIC_FI_INFO_RAW_ENUM_H_

#include <cstring>

namespace bypass::fi {

// The value of an application's enum field, as an integer.
template <class E>
int RawEnum(const E& field) {
  static_assert(sizeof(E) == sizeof(int));
  int v;
  std::memcpy(&v, &field, sizeof(v));
  return v;
}

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_INFO_RAW_ENUM_H_
