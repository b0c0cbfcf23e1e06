// BufferPool: bulk and burst, exhaustion, no allocation after Create, and
// aborts on double put and foreign pointers.
#include "hugepage/pool.h"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

// Counts every operator new in this binary, to prove the pool never calls it
// after Create.
namespace {
long g_allocations = 0;
}  // namespace

void* operator new(std::size_t n) {
  ++g_allocations;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace bypass::hugepage {
namespace {

constexpr uint32_t kCount = 64;

std::unique_ptr<BufferPool> MakePool(Bytes buffer_size = Bytes(1000), uint32_t count = kCount) {
  PoolOptions o;
  o.buffer_size = buffer_size;
  o.count = count;
  o.region.best = Backing::kSmall;  // no root or hugepages needed here
  o.region.lock = false;
  auto pool = BufferPool::Create(o);
  EXPECT_TRUE(pool.ok()) << pool.status();
  return pool.ok() ? *std::move(pool) : nullptr;
}

// Every buffer is in the pool, on a buffer boundary, and distinct.
void ExpectDistinctAndInRange(const BufferPool& pool, const std::vector<void*>& bufs) {
  std::set<void*> seen;
  for (void* b : bufs) {
    EXPECT_TRUE(pool.Owns(b)) << b;
    EXPECT_TRUE(pool.region().Contains(b)) << b;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 64, 0u) << b;
    EXPECT_TRUE(seen.insert(b).second) << "handed out twice: " << b;
  }
}

TEST(BufferPoolTest, CreateRoundsTheStrideUpToAlign) {
  auto pool = MakePool(Bytes(1000));
  ASSERT_NE(pool, nullptr);
  EXPECT_EQ(pool->buffer_size(), Bytes(1024));
  EXPECT_EQ(pool->capacity(), kCount);
  EXPECT_EQ(pool->available(), kCount);
  EXPECT_EQ(pool->region().backing(), Backing::kSmall);
  void* a = pool->Get();
  void* b = pool->Get();
  EXPECT_EQ(static_cast<char*>(b) - static_cast<char*>(a), 1024);
  EXPECT_EQ(pool->IndexOf(a), 0u);
  EXPECT_EQ(pool->IndexOf(b), 1u);
  EXPECT_EQ(pool->Iova(a), reinterpret_cast<uintptr_t>(a));  // small pages: IOVA = VA
  EXPECT_FALSE(pool->Owns(static_cast<char*>(a) + 1));
}

TEST(BufferPoolTest, CreateRejectsBadOptions) {
  PoolOptions o;
  o.buffer_size = Bytes(64);
  o.region.best = Backing::kSmall;
  EXPECT_EQ(BufferPool::Create(o).status().code(), absl::StatusCode::kInvalidArgument);  // count 0
  o.count = 4;
  o.align = Bytes(48);
  auto bad_align = BufferPool::Create(o);
  EXPECT_EQ(bad_align.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_align.status().message(), ::testing::HasSubstr("power of two"));
}

TEST(BufferPoolTest, BulkIsAllOrNothing) {
  auto pool = MakePool();
  std::vector<void*> bufs(kCount - 4);
  ASSERT_TRUE(pool->GetBulk(absl::MakeSpan(bufs)));
  EXPECT_EQ(pool->available(), 4u);
  void* more[5] = {};
  EXPECT_FALSE(pool->GetBulk(absl::MakeSpan(more)));
  EXPECT_EQ(pool->available(), 4u) << "a failed bulk takes nothing";
  EXPECT_EQ(more[0], nullptr);
  ASSERT_TRUE(pool->GetBulk(absl::MakeSpan(more, 4)));
  bufs.insert(bufs.end(), more, more + 4);
  ExpectDistinctAndInRange(*pool, bufs);
  EXPECT_EQ(pool->available(), 0u);
  pool->PutBulk(bufs);
  EXPECT_EQ(pool->available(), kCount);
}

TEST(BufferPoolTest, BurstTakesWhatIsThere) {
  auto pool = MakePool();
  std::vector<void*> bufs(kCount + 10);
  EXPECT_EQ(pool->GetBurst(absl::MakeSpan(bufs)), kCount);
  bufs.resize(kCount);
  ExpectDistinctAndInRange(*pool, bufs);
  void* none[3] = {};
  EXPECT_EQ(pool->GetBurst(absl::MakeSpan(none)), 0u);
  EXPECT_EQ(pool->Get(), nullptr);
  pool->PutBulk(absl::MakeConstSpan(bufs).subspan(0, 2));
  EXPECT_EQ(pool->GetBurst(absl::MakeSpan(none)), 2u);
}

TEST(BufferPoolTest, ExhaustionLeavesThePoolIntact) {
  auto pool = MakePool();
  std::vector<void*> all(kCount);
  ASSERT_TRUE(pool->GetBulk(absl::MakeSpan(all)));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(pool->Get(), nullptr);
    void* one[1];
    EXPECT_FALSE(pool->GetBulk(absl::MakeSpan(one)));
  }
  EXPECT_EQ(pool->capacity(), kCount);
  pool->PutBulk(all);
  std::vector<void*> again(kCount);
  ASSERT_TRUE(pool->GetBulk(absl::MakeSpan(again)));
  ExpectDistinctAndInRange(*pool, again);
  std::sort(all.begin(), all.end());
  std::sort(again.begin(), again.end());
  EXPECT_EQ(all, again);
  pool->PutBulk(again);
}

TEST(BufferPoolTest, LifoHandsBackTheLastBufferPut) {
  auto pool = MakePool();
  void* a = pool->Get();
  void* b = pool->Get();
  pool->Put(a);
  pool->Put(b);
  EXPECT_EQ(pool->Get(), b);
  EXPECT_EQ(pool->Get(), a);
}

TEST(BufferPoolTest, NothingAllocatesAfterCreate) {
  auto pool = MakePool();
  void* bufs[32];
  const long before = g_allocations;
  for (int round = 0; round < 1000; ++round) {
    if (!pool->GetBulk(absl::MakeSpan(bufs))) std::abort();
    pool->PutBulk(bufs);
    void* b = pool->Get();
    pool->Put(b);
    if (pool->GetBurst(absl::MakeSpan(bufs)) != 32) std::abort();
    pool->PutBulk(bufs);
  }
  EXPECT_EQ(g_allocations, before);
}

using BufferPoolDeathTest = ::testing::Test;

TEST(BufferPoolDeathTest, DoublePutAborts) {
  auto pool = MakePool();
  void* b = pool->Get();
  pool->Put(b);
  EXPECT_DEATH(pool->Put(b), R"(pool\.cc:[0-9]+: .*buffer 0 .* is already free: double put)");
}

TEST(BufferPoolDeathTest, DoublePutInOneBulkAborts) {
  auto pool = MakePool();
  void* b = pool->Get();
  void* twice[2] = {b, b};
  EXPECT_DEATH(pool->PutBulk(twice), "already free: double put");
}

TEST(BufferPoolDeathTest, ForeignPointerAborts) {
  auto pool = MakePool();
  int local = 0;
  EXPECT_DEATH(pool->Put(&local), "is not from this pool .*: foreign pointer");
  auto other = MakePool();
  EXPECT_DEATH(pool->Put(other->Get()), "foreign pointer");
}

TEST(BufferPoolDeathTest, PointerInsideABufferAborts) {
  auto pool = MakePool();
  char* b = static_cast<char*>(pool->Get());
  EXPECT_DEATH(pool->Put(b + 8), "8 bytes into buffer 0 .*not a buffer start");
}

}  // namespace
}  // namespace bypass::hugepage
