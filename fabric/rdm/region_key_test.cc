// Region keys (RandomRegionKey: the engine's and the provider's MR keys)
// look random to someone who has seen many: 1,000,000 keys without a
// duplicate, each bit set half the time, and each bit's stream of linear
// complexity n/2 (Berlekamp-Massey over GF(2)), which a linear generator
// such as MT19937-64 (the old generator: 312 keys gave away the rest) fails
// once the stream is longer than twice its state.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "fabric/rdm/types.h"
#include "gtest/gtest.h"

namespace bypass::rdm {
namespace {

// A bit stream packed 64 to a word, bit i at word i / 64, bit i % 64.
class Bits {
 public:
  explicit Bits(size_t n) : words_((n + 127) / 64 + 1, 0) {}
  bool Get(size_t i) const { return (words_[i >> 6] >> (i & 63)) & 1; }
  void Set(size_t i) { words_[i >> 6] |= uint64_t{1} << (i & 63); }
  // 64 bits from bit i on.
  uint64_t Word(size_t i) const {
    const size_t w = i >> 6;
    const unsigned sh = i & 63;
    return sh == 0 ? words_[w] : (words_[w] >> sh) | (words_[w + 1] << (64 - sh));
  }
  // Bits [0, len) of other (and whatever follows in their last word).
  void CopyPrefix(const Bits& other, size_t len) {
    std::copy_n(other.words_.begin(), len / 64 + 1, words_.begin());
  }
  // this ^= other << shift, for other's bits below `len`.
  void XorShifted(const Bits& other, size_t shift, size_t len) {
    for (size_t i = 0; i < len; i += 64) {
      uint64_t v = other.Word(i);
      if (len - i < 64) v &= (uint64_t{1} << (len - i)) - 1;
      const size_t at = i + shift;
      const unsigned sh = at & 63;
      words_[at >> 6] ^= v << sh;
      if (sh != 0) words_[(at >> 6) + 1] ^= v >> (64 - sh);
    }
  }

 private:
  std::vector<uint64_t> words_;
};

// The linear complexity of s[0..n): the length of the shortest LFSR that
// generates it (Berlekamp-Massey over GF(2)). The discrepancy of step k is
// the parity of C & (s[k], s[k-1], ..., s[k-L]): s is kept reversed so the
// window is one run of words.
size_t LinearComplexity(const std::vector<bool>& s) {
  const size_t n = s.size();
  Bits rev(n);  // rev[j] = s[n - 1 - j]
  for (size_t i = 0; i < n; ++i) {
    if (s[i]) rev.Set(n - 1 - i);
  }
  Bits c(2 * n), b(2 * n), t(2 * n);
  c.Set(0);
  b.Set(0);
  size_t l = 0, b_len = 1, m = 1;
  for (size_t k = 0; k < n; ++k) {
    const size_t at = n - 1 - k;  // s[k - i] = rev[at + i]
    uint64_t acc = 0;
    for (size_t i = 0; i <= l; i += 64) {
      uint64_t v = c.Word(i) & rev.Word(at + i);
      if (l + 1 - i < 64) v &= (uint64_t{1} << (l + 1 - i)) - 1;
      acc ^= v;
    }
    if ((__builtin_popcountll(acc) & 1) == 0) {
      ++m;
    } else if (2 * l <= k) {
      const size_t c_len = l + 1;
      t.CopyPrefix(c, c_len);
      c.XorShifted(b, m, b_len);
      std::swap(b, t);
      b_len = c_len;
      l = k + 1 - l;
      m = 1;
    } else {
      c.XorShifted(b, m, b_len);
      ++m;
    }
  }
  return l;
}

// Bit `bit` of keys[0..n).
std::vector<bool> Stream(const std::vector<uint64_t>& keys, int bit, size_t n) {
  std::vector<bool> s(n);
  for (size_t i = 0; i < n; ++i) s[i] = (keys[i] >> bit) & 1;
  return s;
}

// For a random stream L = n/2 + O(1): |L - n/2| > k has probability about
// 2^-2k, so 16 is never exceeded by chance (64 streams: about 2^-26).
constexpr size_t kSlack = 16;
// Longer than 2 * 19937 (MT19937's degree): long enough to expose it.
constexpr size_t kStreamBits = 40'000;

bool LooksRandom(size_t l, size_t n) {
  const size_t half = n / 2;
  return l + kSlack >= half && l <= half + kSlack;
}

TEST(RegionKeyTest, BerlekampMasseyFindsKnownComplexities) {
  EXPECT_EQ(LinearComplexity(std::vector<bool>(100, false)), 0u);
  std::vector<bool> one(100, false);
  one[99] = true;
  EXPECT_EQ(LinearComplexity(one), 100u);
  // s[k] = s[k-3] ^ s[k-5]: an LFSR of length 5.
  std::vector<bool> lfsr = {true, false, false, true, true};
  while (lfsr.size() < 1000) lfsr.push_back(lfsr[lfsr.size() - 3] ^ lfsr[lfsr.size() - 5]);
  EXPECT_EQ(LinearComplexity(lfsr), 5u);
}

TEST(RegionKeyTest, AMillionKeysLookRandom) {
  constexpr size_t kKeys = 1'000'000;
  std::vector<uint64_t> keys(kKeys);
  for (uint64_t& k : keys) k = RandomRegionKey();

  int ones[64] = {};
  for (uint64_t k : keys) {
    ASSERT_NE(k, 0u);
    for (int b = 0; b < 64; ++b) ones[b] += (k >> b) & 1;
  }
  for (int b = 0; b < 64; ++b) {
    // sigma = 0.0005: 10 sigma.
    const double p = static_cast<double>(ones[b]) / kKeys;
    EXPECT_LT(std::abs(p - 0.5), 0.005) << "bit " << b << " is set in a fraction " << p;
  }
  for (int b = 0; b < 64; ++b) {
    const size_t l = LinearComplexity(Stream(keys, b, kStreamBits));
    EXPECT_TRUE(LooksRandom(l, kStreamBits))
        << "bit " << b << ": linear complexity " << l << " of " << kStreamBits << " bits";
  }

  std::vector<uint64_t> sorted = keys;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << "a duplicate key";
}

// The criterion can fail: the old generator's bit streams are an LFSR's of
// degree 19937, far below n/2 at 40,000 bits.
TEST(RegionKeyTest, MersenneTwisterFailsTheLinearComplexityCriterion) {
  std::mt19937_64 mt(12345);
  std::vector<uint64_t> keys(kStreamBits);
  for (uint64_t& k : keys) k = mt();
  for (int b : {0, 31, 63}) {
    const size_t l = LinearComplexity(Stream(keys, b, kStreamBits));
    EXPECT_LE(l, 19937u) << "bit " << b;
    EXPECT_FALSE(LooksRandom(l, kStreamBits)) << "bit " << b << ": " << l;
  }
}

}  // namespace
}  // namespace bypass::rdm
