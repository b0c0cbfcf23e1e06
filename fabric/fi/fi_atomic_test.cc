// fi_atomic(3) through the public API over two loopback domains: every
// (op, datatype) pair of every form (base, fetch, compare) executed
// against a local reference computation, and every pair not offered
// answered -FI_EOPNOTSUPP by the valid calls and fi_query_atomic; the v
// and msg forms with several buffers, inject, counters, completion flags,
// and the target's access rights.
#include <rdma/fi_atomic.h>

#include <complex>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fabric/fi/fi_test_util.h"
#include "gtest/gtest.h"

namespace bypass::fi {
namespace {

using testing::Pair;
using testing::RdmHints;

enum class Form { kBase, kFetch, kCompare };
enum class Kind { kInteger, kReal, kComplex };

// fi_atomic(3) read literally: the base calls take MIN..BXOR and
// ATOMIC_WRITE, the fetch calls those and ATOMIC_READ, the compare calls
// CSWAP..MSWAP; bitwise ops and MSWAP need integers, ordering comparisons
// (MIN, MAX, CSWAP_LE/LT/GE/GT) real numbers.
bool Offered(Form f, fi_op op, Kind k) {
  const bool form = f == Form::kBase    ? (op <= FI_BXOR || op == FI_ATOMIC_WRITE)
                    : f == Form::kFetch ? op <= FI_ATOMIC_WRITE
                                        : op >= FI_CSWAP;
  if (!form) return false;
  switch (op) {
    case FI_BOR:
    case FI_BAND:
    case FI_BXOR:
    case FI_MSWAP:
      return k == Kind::kInteger;
    case FI_MIN:
    case FI_MAX:
    case FI_CSWAP_LE:
    case FI_CSWAP_LT:
    case FI_CSWAP_GE:
    case FI_CSWAP_GT:
      return k != Kind::kComplex;
    default:
      return true;
  }
}

constexpr int kCount = 4;
// Per element: target, operand, compare. Chosen so that every comparison
// goes both ways and logical ops meet zero and non-zero on both sides.
constexpr int kTarget[kCount] = {5, 0, 0, 2};
constexpr int kOperand[kCount] = {3, 0, 7, 2};
constexpr int kCompare[kCount] = {5, 1, 9, 2};

template <class T>
T Make(int v) {
  if constexpr (requires { typename T::value_type; }) {
    return T(static_cast<typename T::value_type>(v), static_cast<typename T::value_type>(v % 3));
  } else {
    return static_cast<T>(v);
  }
}

// The man page's pseudo-code for one element, written out per op.
template <class T, Kind K>
T Reference(fi_op op, T t, T o, T c) {
  const bool tb = t != T{}, ob = o != T{};
  switch (op) {
    case FI_SUM: return t + o;
    case FI_PROD: return t * o;
    case FI_LOR: return T(tb || ob ? 1 : 0);
    case FI_LAND: return T(tb && ob ? 1 : 0);
    case FI_LXOR: return T((tb && !ob) || (!tb && ob) ? 1 : 0);
    case FI_ATOMIC_READ: return t;
    case FI_ATOMIC_WRITE: return o;
    case FI_CSWAP: return c == t ? o : t;
    case FI_CSWAP_NE: return c != t ? o : t;
    default: break;
  }
  if constexpr (K != Kind::kComplex) {
    switch (op) {
      case FI_MIN: return o < t ? o : t;
      case FI_MAX: return o > t ? o : t;
      case FI_CSWAP_LE: return c <= t ? o : t;
      case FI_CSWAP_LT: return c < t ? o : t;
      case FI_CSWAP_GE: return c >= t ? o : t;
      case FI_CSWAP_GT: return c > t ? o : t;
      default: break;
    }
  }
  if constexpr (K == Kind::kInteger) {
    switch (op) {
      case FI_BOR: return t | o;
      case FI_BAND: return t & o;
      case FI_BXOR: return t ^ o;
      case FI_MSWAP: return (o & c) | (t & ~c);
      default: break;
    }
  }
  ADD_FAILURE() << "no reference for op " << op;
  return t;
}

class AtomicTable : public ::testing::Test {
 protected:
  void SetUp() override {
    fi_info* hints = RdmHints(FI_MSG | FI_RMA | FI_ATOMIC);
    p_.Open(hints);
    fi_freeinfo(hints);
    ASSERT_TRUE(p_.a.info->caps & FI_ATOMIC);
    region_.assign(kCount * 32, 0);
    ASSERT_EQ(fi_mr_reg(p_.b.domain, region_.data(), region_.size(),
                        FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr_, nullptr),
              0);
    addr_ = reinterpret_cast<uint64_t>(region_.data());
    key_ = fi_mr_key(mr_);
  }
  void TearDown() override {
    if (mr_ != nullptr) {
      EXPECT_EQ(fi_close(&mr_->fid), 0);
    }
    p_.Close();
  }

  // The completion of the last posted atomic at a.
  void Complete(uint64_t want) {
    fi_cq_tagged_entry e{};
    ASSERT_TRUE(p_.Wait(p_.a.txcq, &e));
    EXPECT_EQ(e.flags, FI_ATOMIC | want);
  }

  // Every op of every form on T: the valid calls against Offered, each
  // offered pair executed against Reference.
  template <class T, Kind K>
  void RunType(fi_datatype dt) {
    for (int o = FI_MIN; o < FI_ATOMIC_OP_LAST; ++o) {
      const fi_op op = static_cast<fi_op>(o);
      for (Form f : {Form::kBase, Form::kFetch, Form::kCompare}) {
        SCOPED_TRACE(::testing::Message() << "datatype " << dt << " op " << op << " form "
                                          << static_cast<int>(f));
        size_t count = 0;
        const int valid = f == Form::kBase    ? fi_atomicvalid(p_.a.ep, dt, op, &count)
                          : f == Form::kFetch ? fi_fetch_atomicvalid(p_.a.ep, dt, op, &count)
                                              : fi_compare_atomicvalid(p_.a.ep, dt, op, &count);
        fi_atomic_attr attr{};
        const uint64_t qflags = f == Form::kBase    ? 0
                                : f == Form::kFetch ? FI_FETCH_ATOMIC
                                                    : FI_COMPARE_ATOMIC;
        const int query = fi_query_atomic(p_.a.domain, dt, op, &attr, qflags);
        if (!Offered(f, op, K)) {
          EXPECT_EQ(valid, -FI_EOPNOTSUPP);
          EXPECT_EQ(query, -FI_EOPNOTSUPP);
          continue;
        }
        ASSERT_EQ(valid, 0);
        ASSERT_EQ(query, 0);
        EXPECT_EQ(attr.count, count);
        EXPECT_EQ(attr.size, sizeof(T));
        EXPECT_EQ(count, 256 / sizeof(T));  // kMaxAtomicBytes per call (MTU 1500)
        Execute<T, K>(dt, op, f);
      }
    }
  }

  template <class T, Kind K>
  void Execute(fi_datatype dt, fi_op op, Form f) {
    T target[kCount], operand[kCount], compare[kCount], result[kCount];
    for (int i = 0; i < kCount; ++i) {
      target[i] = Make<T>(kTarget[i]);
      operand[i] = Make<T>(kOperand[i]);
      compare[i] = Make<T>(kCompare[i]);
      result[i] = Make<T>(99);
    }
    std::memcpy(region_.data(), target, sizeof(target));
    ssize_t ret;
    if (f == Form::kBase) {
      ret = fi_atomic(p_.a.ep, operand, kCount, nullptr, p_.a.peer, addr_, key_, dt, op, nullptr);
    } else if (f == Form::kFetch) {
      ret = fi_fetch_atomic(p_.a.ep, op == FI_ATOMIC_READ ? nullptr : operand, kCount, nullptr,
                            result, nullptr, p_.a.peer, addr_, key_, dt, op, nullptr);
    } else {
      ret = fi_compare_atomic(p_.a.ep, operand, kCount, nullptr, compare, nullptr, result, nullptr,
                              p_.a.peer, addr_, key_, dt, op, nullptr);
    }
    ASSERT_EQ(ret, 0);
    Complete(f == Form::kBase ? FI_WRITE : FI_READ);
    T now[kCount];
    std::memcpy(now, region_.data(), sizeof(now));
    for (int i = 0; i < kCount; ++i) {
      const T want = Reference<T, K>(op, target[i], operand[i], compare[i]);
      EXPECT_TRUE(now[i] == want) << "element " << i;
      if (f != Form::kBase) {
        EXPECT_TRUE(result[i] == target[i]) << "fetched element " << i;
      }
    }
  }

  Pair p_;
  std::vector<uint8_t> region_;
  fid_mr* mr_ = nullptr;
  uint64_t addr_ = 0;
  uint64_t key_ = 0;
};

// One endpoint pair for all of them (opening and closing one costs about
// a second here).
TEST_F(AtomicTable, EveryPairOfEveryDatatype) {
  RunType<int8_t, Kind::kInteger>(FI_INT8);
  RunType<uint8_t, Kind::kInteger>(FI_UINT8);
  RunType<int16_t, Kind::kInteger>(FI_INT16);
  RunType<uint16_t, Kind::kInteger>(FI_UINT16);
  RunType<int32_t, Kind::kInteger>(FI_INT32);
  RunType<uint32_t, Kind::kInteger>(FI_UINT32);
  RunType<int64_t, Kind::kInteger>(FI_INT64);
  RunType<uint64_t, Kind::kInteger>(FI_UINT64);
  RunType<__int128, Kind::kInteger>(FI_INT128);
  RunType<unsigned __int128, Kind::kInteger>(FI_UINT128);
  RunType<float, Kind::kReal>(FI_FLOAT);
  RunType<double, Kind::kReal>(FI_DOUBLE);
  RunType<long double, Kind::kReal>(FI_LONG_DOUBLE);
  RunType<std::complex<float>, Kind::kComplex>(FI_FLOAT_COMPLEX);
  RunType<std::complex<double>, Kind::kComplex>(FI_DOUBLE_COMPLEX);
  RunType<std::complex<long double>, Kind::kComplex>(FI_LONG_DOUBLE_COMPLEX);
}

TEST_F(AtomicTable, OutOfRangeEnumsAndFlagsAreRefused) {
  size_t count = 0;
  EXPECT_EQ(fi_atomicvalid(p_.a.ep, static_cast<fi_datatype>(FI_UINT128 + 1), FI_SUM, &count),
            -FI_EOPNOTSUPP);
  EXPECT_EQ(fi_atomicvalid(p_.a.ep, FI_UINT64, FI_ATOMIC_OP_LAST, &count), -FI_EOPNOTSUPP);
  EXPECT_EQ(fi_atomicvalid(p_.a.ep, FI_UINT64, FI_NOOP, &count), -FI_EOPNOTSUPP);
  fi_atomic_attr attr{};
  EXPECT_EQ(fi_query_atomic(p_.a.domain, FI_UINT64, FI_SUM, &attr,
                            FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC),
            -FI_EINVAL);
  EXPECT_EQ(fi_query_atomic(p_.a.domain, FI_UINT64, FI_SUM, &attr, FI_TAGGED), -FI_EOPNOTSUPP);
  // More elements than the valid call allows, and none at all.
  ASSERT_EQ(fi_atomicvalid(p_.a.ep, FI_UINT64, FI_SUM, &count), 0);
  std::vector<uint64_t> many(count + 1, 1);
  EXPECT_EQ(fi_atomic(p_.a.ep, many.data(), many.size(), nullptr, p_.a.peer, addr_, key_,
                      FI_UINT64, FI_SUM, nullptr),
            -FI_EMSGSIZE);
  EXPECT_EQ(fi_atomic(p_.a.ep, many.data(), 0, nullptr, p_.a.peer, addr_, key_, FI_UINT64,
                      FI_SUM, nullptr),
            -FI_EINVAL);
  // A pair the call does not take is refused at the call too.
  EXPECT_EQ(fi_atomic(p_.a.ep, many.data(), 1, nullptr, p_.a.peer, addr_, key_, FI_DOUBLE,
                      FI_BOR, nullptr),
            -FI_EOPNOTSUPP);
}

TEST_F(AtomicTable, VectorFormsScatterResultsAndMsgFormsTakeFlags) {
  uint64_t init[4] = {10, 20, 30, 40};
  std::memcpy(region_.data(), init, sizeof(init));
  uint64_t ops_a[3] = {1, 2, 3}, ops_b[1] = {4};
  uint64_t res_a[1], res_b[3];
  const fi_ioc iov[2] = {{ops_a, 3}, {ops_b, 1}};
  fi_ioc res[2] = {{res_a, 1}, {res_b, 3}};
  int ctx = 0;
  ASSERT_EQ(fi_fetch_atomicv(p_.a.ep, iov, nullptr, 2, res, nullptr, 2, p_.a.peer, addr_, key_,
                             FI_UINT64, FI_SUM, &ctx),
            0);
  fi_cq_tagged_entry e{};
  ASSERT_TRUE(p_.Wait(p_.a.txcq, &e));
  EXPECT_EQ(e.op_context, &ctx);
  EXPECT_EQ(e.flags, FI_ATOMIC | FI_READ);
  EXPECT_EQ(res_a[0], 10u);
  EXPECT_EQ(res_b[0], 20u);
  EXPECT_EQ(res_b[2], 40u);
  uint64_t now[4];
  std::memcpy(now, region_.data(), sizeof(now));
  EXPECT_EQ(now[0], 11u);
  EXPECT_EQ(now[3], 44u);
  // fi_compare_atomicmsg: swap element 1 (21 == 21), keep element 0.
  uint64_t swap[2] = {100, 200}, cmp[2] = {0, 22}, old[2] = {0, 0};
  const fi_ioc siov{swap, 2}, ciov{cmp, 2};
  fi_ioc oiov{old, 2};
  const fi_rma_ioc rma{addr_, 2, key_};
  fi_msg_atomic m{};
  m.msg_iov = &siov;
  m.iov_count = 1;
  m.addr = p_.a.peer;
  m.rma_iov = &rma;
  m.rma_iov_count = 1;
  m.datatype = FI_UINT64;
  m.op = FI_CSWAP;
  m.context = &ctx;
  ASSERT_EQ(fi_compare_atomicmsg(p_.a.ep, &m, &ciov, nullptr, 1, &oiov, nullptr, 1,
                                 FI_COMPLETION),
            0);
  ASSERT_TRUE(p_.Wait(p_.a.txcq, &e));
  EXPECT_EQ(old[0], 11u);
  EXPECT_EQ(old[1], 22u);
  std::memcpy(now, region_.data(), sizeof(now));
  EXPECT_EQ(now[0], 11u);
  EXPECT_EQ(now[1], 200u);
  // Atomics into tagged buffers and remote CQ data are refused.
  EXPECT_EQ(fi_atomicmsg(p_.a.ep, &m, FI_TAGGED), -FI_EBADFLAGS);
  EXPECT_EQ(fi_atomicmsg(p_.a.ep, &m, FI_REMOTE_CQ_DATA), -FI_EBADFLAGS);
  // fi_inject_atomic: no completion; the next atomic sees it (in order).
  const uint64_t seven = 7;
  ASSERT_EQ(fi_inject_atomic(p_.a.ep, &seven, 1, p_.a.peer, addr_ + 24, key_, FI_UINT64,
                             FI_ATOMIC_WRITE),
            0);
  uint64_t read = 0;
  ASSERT_EQ(fi_fetch_atomic(p_.a.ep, nullptr, 1, nullptr, &read, nullptr, p_.a.peer, addr_ + 24,
                            key_, FI_UINT64, FI_ATOMIC_READ, nullptr),
            0);
  ASSERT_TRUE(p_.Wait(p_.a.txcq, &e));
  EXPECT_EQ(e.flags, FI_ATOMIC | FI_READ);
  EXPECT_EQ(read, 7u);
}

TEST(AtomicAccess, TargetAccessRightsAreEnforced) {
  Pair p;
  fi_info* hints = RdmHints(FI_MSG | FI_RMA | FI_ATOMIC);
  p.Open(hints);
  fi_freeinfo(hints);
  uint64_t word = 5;
  fid_mr* mr = nullptr;
  ASSERT_EQ(fi_mr_reg(p.b.domain, &word, sizeof(word), FI_REMOTE_WRITE, 0, 0, 0, &mr, nullptr), 0);
  const uint64_t addr = reinterpret_cast<uint64_t>(&word);
  const uint64_t one = 1;
  uint64_t old = 0;
  // Write-only region: a fetch (which reads) fails at the initiator.
  ASSERT_EQ(fi_fetch_atomic(p.a.ep, &one, 1, nullptr, &old, nullptr, p.a.peer, addr,
                            fi_mr_key(mr), FI_UINT64, FI_SUM, nullptr),
            0);
  fi_cq_err_entry err{};
  ASSERT_TRUE(p.WaitError(p.a.txcq, &err));
  EXPECT_EQ(err.err, FI_EACCES);
  EXPECT_EQ(err.flags, FI_ATOMIC | FI_READ);
  EXPECT_EQ(word, 5u);
  // A base atomic is allowed.
  ASSERT_EQ(fi_atomic(p.a.ep, &one, 1, nullptr, p.a.peer, addr, fi_mr_key(mr), FI_UINT64, FI_SUM,
                      nullptr),
            0);
  fi_cq_tagged_entry e{};
  ASSERT_TRUE(p.Wait(p.a.txcq, &e));
  EXPECT_EQ(word, 6u);
  EXPECT_EQ(fi_close(&mr->fid), 0);
  p.Close();
}

}  // namespace
}  // namespace bypass::fi
