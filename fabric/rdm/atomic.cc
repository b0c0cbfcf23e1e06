// The atomic op table: one template per class of datatype (integer, real,
// complex), dispatched once per atomic on its datatype.
#include "fabric/rdm/atomic.h"

#include <algorithm>
#include <complex>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace bypass::rdm {
namespace {

using Int128 = __int128;
using Uint128 = unsigned __int128;

enum class Class { kInteger, kReal, kComplex };

template <class T>
struct TypeClass {
  static constexpr Class value = std::is_floating_point_v<T> ? Class::kReal : Class::kInteger;
};
template <class F>
struct TypeClass<std::complex<F>> {
  static constexpr Class value = Class::kComplex;
};

// The unsigned type integer arithmetic wraps in (signed overflow is
// undefined in C++; fi_atomic(3) means two's complement wrap-around).
template <class T>
struct Wrap {
  using type = T;
};
template <> struct Wrap<int8_t> { using type = uint8_t; };
template <> struct Wrap<int16_t> { using type = uint16_t; };
template <> struct Wrap<int32_t> { using type = uint32_t; };
template <> struct Wrap<int64_t> { using type = uint64_t; };
template <> struct Wrap<Int128> { using type = Uint128; };

template <class T>
constexpr bool Defined(AtomicOp op) {
  constexpr Class c = TypeClass<T>::value;
  switch (op) {
    case AtomicOp::kBor:
    case AtomicOp::kBand:
    case AtomicOp::kBxor:
    case AtomicOp::kMswap:
      return c == Class::kInteger;
    case AtomicOp::kMin:
    case AtomicOp::kMax:
    case AtomicOp::kCswapLe:
    case AtomicOp::kCswapLt:
    case AtomicOp::kCswapGe:
    case AtomicOp::kCswapGt:
      return c != Class::kComplex;
    default:
      return true;
  }
}

template <class T>
bool Truth(const T& v) {
  return v != T{};
}

// The target's new value from its old one t, operand o and compare value
// c; false when the target keeps t (a swap whose comparison failed, READ).
// Comparisons read as fi_atomic(3) writes them: `compare OP target`.
template <class T>
bool Compute(AtomicOp op, const T& t, const T& o, const T& c, T* out) {
  constexpr Class cls = TypeClass<T>::value;
  if constexpr (cls == Class::kInteger) {
    using W = typename Wrap<T>::type;
    switch (op) {
      case AtomicOp::kSum:
        *out = static_cast<T>(static_cast<W>(t) + static_cast<W>(o));
        return true;
      case AtomicOp::kProd:
        *out = static_cast<T>(static_cast<W>(t) * static_cast<W>(o));
        return true;
      case AtomicOp::kBor:
        *out = static_cast<T>(t | o);
        return true;
      case AtomicOp::kBand:
        *out = static_cast<T>(t & o);
        return true;
      case AtomicOp::kBxor:
        *out = static_cast<T>(t ^ o);
        return true;
      case AtomicOp::kMswap:
        *out = static_cast<T>((o & c) | (t & ~c));
        return true;
      default:
        break;
    }
  } else {
    switch (op) {
      case AtomicOp::kSum:
        *out = t + o;
        return true;
      case AtomicOp::kProd:
        *out = t * o;
        return true;
      default:
        break;
    }
  }
  if constexpr (cls != Class::kComplex) {
    switch (op) {
      case AtomicOp::kMin:
        *out = o < t ? o : t;
        return o < t;
      case AtomicOp::kMax:
        *out = o > t ? o : t;
        return o > t;
      case AtomicOp::kCswapLe:
        *out = o;
        return c <= t;
      case AtomicOp::kCswapLt:
        *out = o;
        return c < t;
      case AtomicOp::kCswapGe:
        *out = o;
        return c >= t;
      case AtomicOp::kCswapGt:
        *out = o;
        return c > t;
      default:
        break;
    }
  }
  switch (op) {
    case AtomicOp::kLor:
      *out = T(Truth(t) || Truth(o) ? 1 : 0);
      return true;
    case AtomicOp::kLand:
      *out = T(Truth(t) && Truth(o) ? 1 : 0);
      return true;
    case AtomicOp::kLxor:
      *out = T(Truth(t) != Truth(o) ? 1 : 0);
      return true;
    case AtomicOp::kWrite:
      *out = o;
      return true;
    case AtomicOp::kCswap:
      *out = o;
      return c == t;
    case AtomicOp::kCswapNe:
      *out = o;
      return c != t;
    default:  // kRead, and what Defined excludes
      return false;
  }
}

template <class T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <class T>
void Run(AtomicOp op, uint32_t count, uint8_t* target, const uint8_t* operand,
         const uint8_t* compare, uint8_t* old) {
  for (uint32_t i = 0; i < count; ++i) {
    uint8_t* at = target + size_t{i} * sizeof(T);
    const T t = Load<T>(at);
    if (old != nullptr) std::memcpy(old + size_t{i} * sizeof(T), at, sizeof(T));
    const T o = operand != nullptr ? Load<T>(operand + size_t{i} * sizeof(T)) : T{};
    const T c = compare != nullptr ? Load<T>(compare + size_t{i} * sizeof(T)) : T{};
    T n{};
    if (Compute(op, t, o, c, &n)) std::memcpy(at, &n, sizeof(T));
  }
}

template <class T>
struct Tag {
  using type = T;
};

// Calls f(Tag<T>{}) with the C++ type of t: the one dispatch on datatype.
template <class F>
auto WithType(AtomicType t, F&& f) {
  switch (t) {
    case AtomicType::kInt8: return f(Tag<int8_t>{});
    case AtomicType::kUint8: return f(Tag<uint8_t>{});
    case AtomicType::kInt16: return f(Tag<int16_t>{});
    case AtomicType::kUint16: return f(Tag<uint16_t>{});
    case AtomicType::kInt32: return f(Tag<int32_t>{});
    case AtomicType::kUint32: return f(Tag<uint32_t>{});
    case AtomicType::kInt64: return f(Tag<int64_t>{});
    case AtomicType::kUint64: return f(Tag<uint64_t>{});
    case AtomicType::kFloat: return f(Tag<float>{});
    case AtomicType::kDouble: return f(Tag<double>{});
    case AtomicType::kFloatComplex: return f(Tag<std::complex<float>>{});
    case AtomicType::kDoubleComplex: return f(Tag<std::complex<double>>{});
    case AtomicType::kLongDouble: return f(Tag<long double>{});
    case AtomicType::kLongDoubleComplex: return f(Tag<std::complex<long double>>{});
    case AtomicType::kInt128: return f(Tag<Int128>{});
    case AtomicType::kUint128: return f(Tag<Uint128>{});
  }
  return f(Tag<uint8_t>{});  // unreachable for a valid AtomicType
}

constexpr const char* kOpNames[kAtomicOps] = {
    "MIN",   "MAX",          "SUM",   "PROD",     "LOR",      "LAND",     "BOR",
    "BAND",  "LXOR",         "BXOR",  "ATOMIC_READ", "ATOMIC_WRITE", "CSWAP", "CSWAP_NE",
    "CSWAP_LE", "CSWAP_LT",  "CSWAP_GE", "CSWAP_GT", "MSWAP"};
constexpr const char* kTypeNames[kAtomicTypes] = {
    "INT8",  "UINT8",  "INT16",         "UINT16",         "INT32",       "UINT32",
    "INT64", "UINT64", "FLOAT",         "DOUBLE",         "FLOAT_COMPLEX", "DOUBLE_COMPLEX",
    "LONG_DOUBLE", "LONG_DOUBLE_COMPLEX", "INT128", "UINT128"};

}  // namespace

uint32_t AtomicTypeSize(AtomicType t) {
  if (static_cast<uint32_t>(t) >= kAtomicTypes) return 0;
  return WithType(t, [](auto tag) { return uint32_t{sizeof(typename decltype(tag)::type)}; });
}

bool AtomicDefined(AtomicOp op, AtomicType t) {
  if (static_cast<uint32_t>(op) >= kAtomicOps || static_cast<uint32_t>(t) >= kAtomicTypes) {
    return false;
  }
  return WithType(t, [op](auto tag) { return Defined<typename decltype(tag)::type>(op); });
}

uint32_t AtomicMaxCount(AtomicOp op, AtomicType t, uint32_t max_datagram) {
  const uint32_t size = AtomicTypeSize(t);
  if (size == 0 || max_datagram <= kAtomicHeaderBytes) return 0;
  uint32_t bytes = std::min(kMaxAtomicBytes, max_datagram - kAtomicHeaderBytes);
  if (AtomicCompares(op)) bytes = std::min(kMaxAtomicBytes, (max_datagram - kAtomicHeaderBytes) / 2);
  return bytes / size;
}

void ExecuteAtomic(AtomicOp op, AtomicType type, uint32_t count, uint8_t* target,
                   const uint8_t* operand, const uint8_t* compare, uint8_t* old) {
  WithType(type, [&](auto tag) {
    Run<typename decltype(tag)::type>(op, count, target, operand, compare, old);
  });
}

const char* AtomicOpName(AtomicOp op) {
  return static_cast<uint32_t>(op) < kAtomicOps ? kOpNames[static_cast<uint32_t>(op)] : "?";
}

const char* AtomicTypeName(AtomicType t) {
  return static_cast<uint32_t>(t) < kAtomicTypes ? kTypeNames[static_cast<uint32_t>(t)] : "?";
}

}  // namespace bypass::rdm
