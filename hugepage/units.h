// Strong types for byte sizes and page counts, so the two never mix.
#ifndef BYPASS_HUGEPAGE_UNITS_H_
#define BYPASS_HUGEPAGE_UNITS_H_

#include <compare>
#include <cstdint>
#include <string>

namespace bypass::hugepage {

// A size in bytes.
class Bytes {
 public:
  constexpr Bytes() = default;
  constexpr explicit Bytes(uint64_t n) : n_(n) {}

  static constexpr Bytes KiB(uint64_t n) { return Bytes(n << 10); }
  static constexpr Bytes MiB(uint64_t n) { return Bytes(n << 20); }
  static constexpr Bytes GiB(uint64_t n) { return Bytes(n << 30); }

  constexpr uint64_t value() const { return n_; }

  constexpr Bytes operator+(Bytes o) const { return Bytes(n_ + o.n_); }
  constexpr Bytes operator-(Bytes o) const { return Bytes(n_ - o.n_); }
  constexpr Bytes operator*(uint64_t k) const { return Bytes(n_ * k); }
  constexpr Bytes& operator+=(Bytes o) {
    n_ += o.n_;
    return *this;
  }
  constexpr auto operator<=>(const Bytes&) const = default;

  // REQUIRES: unit is a power of two.
  constexpr Bytes RoundUpTo(Bytes unit) const {
    return Bytes((n_ + unit.n_ - 1) & ~(unit.n_ - 1));
  }

  // "2 MiB", "1 GiB", "4 KiB", "1536 B".
  std::string ToString() const;

 private:
  uint64_t n_ = 0;
};

// A number of pages of some page size.
class PageCount {
 public:
  constexpr PageCount() = default;
  constexpr explicit PageCount(uint64_t n) : n_(n) {}
  constexpr uint64_t value() const { return n_; }
  constexpr Bytes InBytes(Bytes page_size) const { return page_size * n_; }
  constexpr auto operator<=>(const PageCount&) const = default;

  // The pages of page_size needed to hold size.
  static constexpr PageCount Covering(Bytes size, Bytes page_size) {
    return PageCount((size.value() + page_size.value() - 1) / page_size.value());
  }

 private:
  uint64_t n_ = 0;
};

}  // namespace bypass::hugepage

#endif  // BYPASS_HUGEPAGE_UNITS_H_
