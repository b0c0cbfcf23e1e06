// Collectives (fi_collective(3)) among 2 to 8 processes of this host on the
// default domain: every operation with several datatypes and ops, at sizes
// that take the tree algorithms and sizes that take the rings, each result
// checked against a reference every member computes locally from the
// inputs all members derive from (rank, index). Members wait by polling
// fi_cq_read, by sleeping in fi_cq_sread, or with FI_PROGRESS_AUTO.
#include <rdma/fi_collective.h>
#include <rdma/fi_tagged.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

#include "fabric/fi/fi_coll_util.h"
#include "gtest/gtest.h"

namespace bypass::fi {
namespace {

using coll_testing::Member;
using coll_testing::RunMembers;
using coll_testing::Wait;

// Member r's input element i (small positive values: products of 8 stay
// exact in a double, sums exact in a float).
template <class T>
T Input(int rank, size_t i, int salt) {
  return static_cast<T>((rank * 7 + i * 3 + salt) % 11 + 1);
}

template <class T>
T Apply(fi_op op, T a, T b) {
  switch (op) {
    case FI_MIN: return std::min(a, b);
    case FI_MAX: return std::max(a, b);
    case FI_SUM: return static_cast<T>(a + b);
    case FI_PROD: return static_cast<T>(a * b);
    case FI_LOR: return static_cast<T>((a != 0) || (b != 0));
    case FI_LAND: return static_cast<T>((a != 0) && (b != 0));
    case FI_LXOR: return static_cast<T>((a != 0) != (b != 0));
    default: break;
  }
  if constexpr (std::is_integral_v<T>) {
    if (op == FI_BOR) return a | b;
    if (op == FI_BAND) return a & b;
    if (op == FI_BXOR) return a ^ b;
  }
  std::abort();
}

// Element i of the reduction over every member's input.
template <class T>
T Reduced(int n, fi_op op, size_t i, int salt) {
  T v = Input<T>(0, i, salt);
  for (int r = 1; r < n; ++r) v = Apply(op, v, Input<T>(r, i, salt));
  return v;
}

template <class T>
std::vector<T> Inputs(int rank, size_t count, int salt) {
  std::vector<T> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = Input<T>(rank, i, salt);
  return v;
}

// Counts mismatches, printing the first.
template <class T>
int Check(const Member& m, const char* what, const std::vector<T>& got, const std::vector<T>& want) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i]) {
      std::fprintf(stderr, "member %d of %d: %s: element %zu is %g, want %g\n", m.rank, m.n, what, i,
                   static_cast<double>(got[i]), static_cast<double>(want[i]));
      return 1;
    }
  }
  return 0;
}

template <class T>
int Allreduce(Member& m, fi_datatype dt, fi_op op, size_t count, int salt) {
  const std::vector<T> in = Inputs<T>(m.rank, count, salt);
  std::vector<T> out(count);
  m.Run("fi_allreduce", &out, [&] {
    return fi_allreduce(m.ep, in.data(), count, nullptr, out.data(), nullptr, m.coll, dt, op, 0, &out);
  });
  std::vector<T> want(count);
  for (size_t i = 0; i < count; ++i) want[i] = Reduced<T>(m.n, op, i, salt);
  return Check(m, "fi_allreduce", out, want);
}

template <class T>
int Reduce(Member& m, fi_datatype dt, fi_op op, size_t count, int root, int salt) {
  const std::vector<T> in = Inputs<T>(m.rank, count, salt);
  std::vector<T> out(count);
  m.Run("fi_reduce", &out, [&] {
    return fi_reduce(m.ep, in.data(), count, nullptr, out.data(), nullptr, m.coll, m.addrs[root], dt,
                     op, 0, &out);
  });
  if (m.rank != root) return 0;
  std::vector<T> want(count);
  for (size_t i = 0; i < count; ++i) want[i] = Reduced<T>(m.n, op, i, salt);
  return Check(m, "fi_reduce", out, want);
}

template <class T>
int Broadcast(Member& m, fi_datatype dt, size_t count, int root, int salt) {
  std::vector<T> buf = m.rank == root ? Inputs<T>(root, count, salt) : std::vector<T>(count);
  m.Run("fi_broadcast", &buf, [&] {
    return fi_broadcast(m.ep, buf.data(), count, nullptr, m.coll, m.addrs[root], dt, 0, &buf);
  });
  return Check(m, "fi_broadcast", buf, Inputs<T>(root, count, salt));
}

template <class T>
int Allgather(Member& m, fi_datatype dt, size_t block, int salt) {
  const std::vector<T> in = Inputs<T>(m.rank, block, salt);
  std::vector<T> out(block * m.n);
  m.Run("fi_allgather", &out, [&] {
    return fi_allgather(m.ep, in.data(), block, nullptr, out.data(), nullptr, m.coll, dt, 0, &out);
  });
  std::vector<T> want;
  for (int r = 0; r < m.n; ++r) {
    const std::vector<T> part = Inputs<T>(r, block, salt);
    want.insert(want.end(), part.begin(), part.end());
  }
  return Check(m, "fi_allgather", out, want);
}

template <class T>
int ReduceScatter(Member& m, fi_datatype dt, fi_op op, size_t block, int salt) {
  const std::vector<T> in = Inputs<T>(m.rank, block * m.n, salt);
  std::vector<T> out(block);
  m.Run("fi_reduce_scatter", &out, [&] {
    return fi_reduce_scatter(m.ep, in.data(), block, nullptr, out.data(), nullptr, m.coll, dt, op, 0,
                             &out);
  });
  std::vector<T> want(block);
  for (size_t i = 0; i < block; ++i) want[i] = Reduced<T>(m.n, op, m.rank * block + i, salt);
  return Check(m, "fi_reduce_scatter", out, want);
}

// Member r's block for member d: its input at salt + d.
template <class T>
int Alltoall(Member& m, fi_datatype dt, size_t block, int salt) {
  std::vector<T> in;
  for (int d = 0; d < m.n; ++d) {
    const std::vector<T> part = Inputs<T>(m.rank, block, salt + d);
    in.insert(in.end(), part.begin(), part.end());
  }
  std::vector<T> out(block * m.n);
  m.Run("fi_alltoall", &out, [&] {
    return fi_alltoall(m.ep, in.data(), block, nullptr, out.data(), nullptr, m.coll, dt, 0, &out);
  });
  std::vector<T> want;
  for (int s = 0; s < m.n; ++s) {
    const std::vector<T> part = Inputs<T>(s, block, salt + m.rank);
    want.insert(want.end(), part.begin(), part.end());
  }
  return Check(m, "fi_alltoall", out, want);
}

template <class T>
int Scatter(Member& m, fi_datatype dt, size_t block, int root, int salt) {
  std::vector<T> in = m.rank == root ? Inputs<T>(root, block * m.n, salt) : std::vector<T>();
  std::vector<T> out(block);
  m.Run("fi_scatter", &out, [&] {
    return fi_scatter(m.ep, in.empty() ? nullptr : in.data(), block, nullptr, out.data(), nullptr,
                      m.coll, m.addrs[root], dt, 0, &out);
  });
  const std::vector<T> all = Inputs<T>(root, block * m.n, salt);
  return Check(m, "fi_scatter", out,
               std::vector<T>(all.begin() + m.rank * block, all.begin() + (m.rank + 1) * block));
}

template <class T>
int Gather(Member& m, fi_datatype dt, size_t block, int root, int salt) {
  const std::vector<T> in = Inputs<T>(m.rank, block, salt);
  std::vector<T> out(m.rank == root ? block * m.n : 0);
  m.Run("fi_gather", &out, [&] {
    return fi_gather(m.ep, in.data(), block, nullptr, out.empty() ? nullptr : out.data(), nullptr,
                     m.coll, m.addrs[root], dt, 0, &out);
  });
  if (m.rank != root) return 0;
  std::vector<T> want;
  for (int r = 0; r < m.n; ++r) {
    const std::vector<T> part = Inputs<T>(r, block, salt);
    want.insert(want.end(), part.begin(), part.end());
  }
  return Check(m, "fi_gather", out, want);
}

// Two allreduces in flight at once, completed in any order.
int Overlapped(Member& m) {
  const std::vector<int32_t> a = Inputs<int32_t>(m.rank, 6, 1), b = Inputs<int32_t>(m.rank, 6, 2);
  std::vector<int32_t> ra(6), rb(6);
  COLL_CHECK(m, fi_allreduce(m.ep, a.data(), 6, nullptr, ra.data(), nullptr, m.coll, FI_INT32,
                             FI_SUM, 0, &ra));
  COLL_CHECK(m, fi_allreduce(m.ep, b.data(), 6, nullptr, rb.data(), nullptr, m.coll, FI_INT32,
                             FI_MAX, 0, &rb));
  void* first = m.WaitOne();
  void* second = m.WaitOne();
  if (!((first == &ra && second == &rb) || (first == &rb && second == &ra))) return 1;
  std::vector<int32_t> wa(6), wb(6);
  for (size_t i = 0; i < 6; ++i) {
    wa[i] = Reduced<int32_t>(m.n, FI_SUM, i, 1);
    wb[i] = Reduced<int32_t>(m.n, FI_MAX, i, 2);
  }
  return Check(m, "overlapped SUM", ra, wa) + Check(m, "overlapped MAX", rb, wb);
}

// Every operation: small sizes (binomial trees) and large ones (rings).
int Everything(Member& m) {
  const int n = m.n, last = n - 1;
  constexpr size_t kBig = 20000;  // elements: 80 KiB of int32, past the ring threshold
  int bad = 0;
  for (int i = 0; i < 3; ++i) m.Run("fi_barrier", &m, [&] { return fi_barrier(m.ep, m.coll, &m); });
  bad += Broadcast<int32_t>(m, FI_INT32, 5, last, 1);
  bad += Broadcast<double>(m, FI_DOUBLE, kBig, 1 % n, 2);
  bad += Allreduce<int32_t>(m, FI_INT32, FI_SUM, 7, 3);
  bad += Allreduce<int32_t>(m, FI_INT32, FI_SUM, kBig, 4);
  bad += Allreduce<double>(m, FI_DOUBLE, FI_PROD, 5, 5);
  bad += Allreduce<uint64_t>(m, FI_UINT64, FI_BXOR, kBig, 6);
  bad += Allreduce<int8_t>(m, FI_INT8, FI_MAX, 9, 7);
  bad += Allreduce<float>(m, FI_FLOAT, FI_SUM, kBig, 8);
  bad += Allreduce<uint16_t>(m, FI_UINT16, FI_MIN, 3, 9);
  bad += Allreduce<int64_t>(m, FI_INT64, FI_LXOR, 4, 10);
  bad += Allreduce<uint32_t>(m, FI_UINT32, FI_BOR, 1, 11);
  bad += Reduce<int32_t>(m, FI_INT32, FI_SUM, 6, 1 % n, 12);
  bad += Reduce<double>(m, FI_DOUBLE, FI_MAX, kBig, 0, 13);
  bad += Allgather<int32_t>(m, FI_INT32, 3, 14);
  bad += Allgather<uint8_t>(m, FI_UINT8, 4 * kBig, 15);
  bad += ReduceScatter<int32_t>(m, FI_INT32, FI_SUM, 2, 16);
  bad += ReduceScatter<double>(m, FI_DOUBLE, FI_SUM, kBig / 2, 17);
  bad += Alltoall<int64_t>(m, FI_INT64, 2, 18);
  bad += Alltoall<int32_t>(m, FI_INT32, kBig, 19);
  bad += Scatter<uint32_t>(m, FI_UINT32, 3, 0, 20);
  bad += Scatter<int16_t>(m, FI_INT16, kBig, last, 21);
  bad += Gather<int32_t>(m, FI_INT32, 4, n / 2, 22);
  bad += Gather<double>(m, FI_DOUBLE, kBig, 0, 23);
  bad += Overlapped(m);
  m.Run("fi_barrier", &m, [&] { return fi_barrier(m.ep, m.coll, &m); });
  return bad == 0 ? 0 : 1;
}

// One member: every collective completes alone; bad calls answer their
// errors and change nothing.
int AloneAndBadCalls(Member& m) {
  int bad = Everything(m);
  int32_t in[3] = {1, 2, 3}, out[3] = {};
  auto expect = [&](const char* what, long got, long want) {
    if (got == want) return;
    std::fprintf(stderr, "%s returned %ld, want %ld\n", what, got, want);
    ++bad;
  };
  expect("allreduce to no group",
         fi_allreduce(m.ep, in, 3, nullptr, out, nullptr, 12345, FI_INT32, FI_SUM, 0, nullptr),
         -FI_EINVAL);
  expect("allreduce FI_CSWAP",
         fi_allreduce(m.ep, in, 3, nullptr, out, nullptr, m.coll, FI_INT32, FI_CSWAP, 0, nullptr),
         -FI_EOPNOTSUPP);
  double d = 1;
  expect("allreduce FI_BOR of FI_DOUBLE",
         fi_allreduce(m.ep, &d, 1, nullptr, &d, nullptr, m.coll, FI_DOUBLE, FI_BOR, 0, nullptr),
         -FI_EOPNOTSUPP);
  expect("broadcast from a non-member",
         fi_broadcast(m.ep, in, 3, nullptr, m.coll, 77, FI_INT32, 0, nullptr), -FI_EINVAL);
  expect("allreduce into null", fi_allreduce(m.ep, in, 3, nullptr, nullptr, nullptr, m.coll,
                                             FI_INT32, FI_SUM, 0, nullptr),
         -FI_EINVAL);
  expect("tagged send with the top bit", fi_tinject(m.ep, in, 4, m.addrs[0], 1ull << 63), -FI_EINVAL);
  expect("fi_close of the endpoint with a group", fi_close(&m.ep->fid), -FI_EBUSY);
  fi_collective_attr attr{};
  attr.op = FI_SUM;
  attr.datatype = FI_INT32;
  expect("query reduce-scatter", fi_query_collective(m.domain, FI_ALLREDUCE, &attr, FI_SCATTER), 0);
  if (attr.datatype_attr.size != 4 || attr.datatype_attr.count == 0) ++bad;
  attr.op = FI_NOOP;
  attr.datatype = FI_VOID;
  expect("query barrier", fi_query_collective(m.domain, FI_BARRIER, &attr, 0), 0);
  attr.op = FI_SUM;
  attr.datatype = FI_DOUBLE;
  expect("query allgather with FI_SUM", fi_query_collective(m.domain, FI_ALLGATHER, &attr, 0),
         -FI_EOPNOTSUPP);
  // An endpoint without an EQ cannot join (fi_collective(3)).
  fid_ep* bare = nullptr;
  COLL_CHECK(m, fi_endpoint(m.domain, m.info, &bare, nullptr));
  COLL_CHECK(m, fi_ep_bind(bare, &m.av->fid, 0));
  COLL_CHECK(m, fi_ep_bind(bare, &m.cq->fid, FI_TRANSMIT | FI_RECV));
  COLL_CHECK(m, fi_enable(bare));
  fid_mc* mc = nullptr;
  expect("join without an EQ", fi_join_collective(bare, FI_ADDR_NOTAVAIL, m.set, 0, &mc, nullptr),
         -FI_ENOEQ);
  COLL_CHECK(m, fi_close(&bare->fid));
  // The group still works.
  m.Run("fi_allreduce", out, [&] {
    return fi_allreduce(m.ep, in, 3, nullptr, out, nullptr, m.coll, FI_INT32, FI_SUM, 0, out);
  });
  if (out[0] != 1 || out[1] != 2 || out[2] != 3) ++bad;
  return bad == 0 ? 0 : 1;
}

TEST(CollTest, OneMemberAndBadCalls) { EXPECT_EQ(RunMembers(1, Wait::kPoll, AloneAndBadCalls), 0); }
TEST(CollTest, TwoMembersPolling) { EXPECT_EQ(RunMembers(2, Wait::kPoll, Everything), 0); }
TEST(CollTest, ThreeMembersPolling) { EXPECT_EQ(RunMembers(3, Wait::kPoll, Everything), 0); }
TEST(CollTest, FourMembersSleepInSread) { EXPECT_EQ(RunMembers(4, Wait::kSread, Everything), 0); }
TEST(CollTest, EightMembersAutoProgress) { EXPECT_EQ(RunMembers(8, Wait::kAuto, Everything), 0); }

}  // namespace
}  // namespace bypass::fi
