// Posted and unexpected queues: matching rules, FIFO order, and the chunk
// arena that holds unexpected payloads.
#include "fabric/rdm/matching.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace bypass::rdm {
namespace {

TEST(MatchingTest, Rules) {
  RecvRequest any;
  EXPECT_TRUE(Matches(any, false, PeerId{3}, 0));
  EXPECT_FALSE(Matches(any, true, PeerId{3}, 0)) << "untagged takes no tagged message";
  RecvRequest from2{.source = PeerId{2}, .tagged = true, .tag = 0xab00, .ignore = 0xff};
  EXPECT_TRUE(Matches(from2, true, PeerId{2}, 0xab42));
  EXPECT_FALSE(Matches(from2, true, PeerId{3}, 0xab42));
  EXPECT_FALSE(Matches(from2, true, PeerId{2}, 0xac42));
  EXPECT_FALSE(Matches(from2, false, PeerId{2}, 0xab00));
}

TEST(MatchingTest, PostedQueueIsFifoPerKind) {
  MatchQueues q(4, 2, 4096, 1024);
  int a, b, c;
  const uint32_t sa = q.AllocRecv({.context = &a, .tagged = true, .tag = 1});
  const uint32_t sb = q.AllocRecv({.context = &b, .tagged = true, .ignore = ~0ull});
  const uint32_t sc = q.AllocRecv({.context = &c});
  q.QueueRecv(sa);
  q.QueueRecv(sb);
  q.QueueRecv(sc);
  EXPECT_EQ(q.posted(true), 2u);
  EXPECT_EQ(q.MatchPosted(true, PeerId{0}, 5), sb) << "a wants tag 1; b takes any";
  EXPECT_EQ(q.MatchPosted(true, PeerId{0}, 5), kNone);
  EXPECT_EQ(q.MatchPosted(true, PeerId{0}, 1), sa);
  EXPECT_EQ(q.MatchPosted(false, PeerId{0}, 0), sc);
  q.FreeRecv(sa);
  q.FreeRecv(sb);
  q.FreeRecv(sc);
  int n = 0;
  while (q.AllocRecv({}) != kNone) ++n;
  EXPECT_EQ(n, 4);
}

// Cancel by context with a source (connections sharing an endpoint may use
// one context) and cancel-all for a source or for everyone (fi_shutdown).
TEST(MatchingTest, TakePostedBySource) {
  MatchQueues q(4, 2, 4096, 1024);
  int ctx;
  const uint32_t s1 = q.AllocRecv({.source = PeerId{1}, .context = &ctx});
  const uint32_t s2 = q.AllocRecv({.source = PeerId{2}, .context = &ctx, .tagged = true});
  const uint32_t any = q.AllocRecv({.context = &ctx});
  q.QueueRecv(s1);
  q.QueueRecv(s2);
  q.QueueRecv(any);
  EXPECT_EQ(q.TakePosted(&ctx, PeerId{2}), s2);
  EXPECT_EQ(q.TakePosted(&ctx, PeerId{3}), kNone);
  EXPECT_EQ(q.TakeAnyPosted(PeerId{1}), s1);
  EXPECT_EQ(q.TakeAnyPosted(PeerId{1}), kNone) << "a receive from any source is not peer 1's";
  EXPECT_EQ(q.TakeAnyPosted(kAnyPeer), any);
  EXPECT_EQ(q.TakeAnyPosted(kAnyPeer), kNone);
}

TEST(MatchingTest, UnexpectedArenaChainsChunksAndBounds) {
  MatchQueues q(2, 3, 4 * 64, 64);  // four 64-byte chunks
  std::vector<uint8_t> msg(150);
  for (size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<uint8_t>(i + 1);
  const uint32_t e = q.Admit(PeerId{1}, false, 0, 0, 0, msg.size());
  ASSERT_NE(e, kNone);
  EXPECT_EQ(q.unexpected_bytes(), 3u * 64);
  // Two chunks would be needed for another 100 bytes; one is left.
  EXPECT_EQ(q.Admit(PeerId{1}, false, 0, 0, 0, 100), kNone);
  const uint32_t z = q.Admit(PeerId{2}, true, 7, 0, 0, 0);
  ASSERT_NE(z, kNone) << "an empty message takes one chunk";
  EXPECT_EQ(q.Admit(PeerId{1}, false, 0, 0, 0, 1), kNone) << "no chunk left";
  EXPECT_EQ(q.Admit(PeerId{1}, false, 0, 0, 0, ~uint64_t{0}), kNone) << "no overflow";
  q.Append(e, {msg.data(), 63});
  q.Append(e, {msg.data() + 63, 2});
  q.Append(e, {msg.data() + 65, 85});
  std::vector<uint8_t> out(200, 0);
  EXPECT_EQ(q.CopyOut(e, out.data(), out.size()), 150u);
  EXPECT_EQ(std::vector<uint8_t>(out.begin(), out.begin() + 150), msg);
  EXPECT_EQ(q.CopyOut(e, out.data(), 10), 10u) << "truncated copy";
  EXPECT_EQ(q.FindUnexpected({.source = PeerId{2}}), kNone);
  EXPECT_EQ(q.FindUnexpected({.tagged = true, .tag = 7}), z);
  EXPECT_EQ(q.FindUnexpected({}), e);
  EXPECT_EQ(q.unexpected_depth(), 2u);
  q.Release(e);
  q.Release(z);
  EXPECT_EQ(q.unexpected_depth(), 0u);
  EXPECT_EQ(q.unexpected_bytes(), 0u);
  EXPECT_NE(q.Admit(PeerId{1}, false, 0, 0, 0, 256), kNone) << "all four chunks are back";
}

}  // namespace
}  // namespace bypass::rdm
