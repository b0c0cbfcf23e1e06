// A receive queue shared by two endpoints of one Port (SharedRecvQueue):
// messages from two peers to either endpoint land in the shared receives
// once each, in each peer's order, and complete at the endpoint they
// arrived at with that endpoint's peer as source; unexpected messages
// (eager, still arriving, rendezvous) are taken by later receives; the
// queue's size is enforced; cancel; an endpoint leaving gives back what it
// held; all of it also under loss, duplication and reordering.
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "fabric/rdm/rdm.h"
#include "fabric/rdm/test_util.h"
#include "gtest/gtest.h"

namespace bypass::rdm {
namespace {

using testing::Net;
using testing::NetOptions;

constexpr int kSenders = 2;  // nodes 0 and 2; node 1 holds the shared endpoints

// Nodes 0 and 2 send; node 1's port carries two extra endpoints, A and B,
// sharing one receive queue.
class SharedRecvTest : public ::testing::Test {
 protected:
  void Make(double loss, SharedRecvConfig qc = {}) {
    NetOptions o;
    o.nodes = 3;
    if (loss > 0) {
      o.faults.drop = loss;
      o.faults.dup = 0.02;
      o.faults.reorder = 0.10;
      o.faults.seed = 1818;
    }
    net_ = std::make_unique<Net>(o);
    absl::StatusOr<std::unique_ptr<SharedRecvQueue>> q =
        SharedRecvQueue::Create(net_->port(1), qc);
    ASSERT_TRUE(q.ok()) << q.status();
    srq_ = *std::move(q);
    for (int k = 0; k < 2; ++k) {
      EndpointConfig c;
      c.udp_port = static_cast<uint16_t>(6000 + k);
      c.shared_recv = srq_.get();
      absl::StatusOr<std::unique_ptr<Endpoint>> ep =
          Endpoint::Create(net_->port(1), net_->clock(), c);
      ASSERT_TRUE(ep.ok()) << ep.status();
      shared_[k] = *std::move(ep);
    }
    EXPECT_EQ(srq_->endpoints(), 2u);
    for (int s = 0; s < kSenders; ++s) {
      for (int k = 0; k < 2; ++k) {
        absl::StatusOr<PeerId> to = sender(s).InsertPeer(shared_[k]->address());
        ASSERT_TRUE(to.ok()) << to.status();
        to_[s][k] = *to;
        absl::StatusOr<PeerId> from = shared_[k]->InsertPeer(sender(s).address());
        ASSERT_TRUE(from.ok()) << from.status();
        from_[k][s] = *from;
      }
    }
  }

  Endpoint& sender(int s) { return net_->ep(s == 0 ? 0 : 2); }

  void Step() {
    for (auto& e : shared_) {
      if (e) e->Progress();
    }
    net_->Step();
    for (int k = 0; k < 2; ++k) {
      if (!shared_[k]) continue;
      Completion c[16];
      for (size_t n; (n = shared_[k]->PollCompletions(c)) > 0;) {
        for (size_t i = 0; i < n; ++i) got_[k].push_back(c[i]);
      }
      ErrorCompletion e;
      while (shared_[k]->PollErrors({&e, 1}) == 1) errors_[k].push_back(e);
    }
    for (int s = 0; s < kSenders; ++s) {
      Completion c[16];
      while (sender(s).PollCompletions(c) > 0) {
      }
      ErrorCompletion e;
      while (sender(s).PollErrors({&e, 1}) == 1) {
        ADD_FAILURE() << "send failed: " << e.message;
      }
    }
  }

  bool RunUntil(const std::function<bool()>& done, uint64_t steps = 1'000'000) {
    for (uint64_t i = 0; i < steps; ++i) {
      if (done()) return true;
      Step();
    }
    return done();
  }

  // Message m of sender s to endpoint k: its first 8 bytes say who and
  // which; the rest is a pattern.
  std::vector<uint8_t> Message(int s, int k, uint32_t seq, size_t len) {
    std::vector<uint8_t> b(std::max<size_t>(len, 8));
    testing::FillPattern(uint64_t{seq} * 8 + s * 2 + k, absl::MakeSpan(b));
    const uint32_t head[2] = {static_cast<uint32_t>(s * 2 + k), seq};
    std::memcpy(b.data(), head, 8);
    b.resize(len);
    return b;
  }

  void Send(int s, int k, uint32_t seq, size_t len) {
    out_.push_back(std::make_unique<std::vector<uint8_t>>(Message(s, k, seq, len)));
    const std::vector<uint8_t>& b = *out_.back();
    SendRequest r{.dest = to_[s][k], .buf = b.data(), .len = b.size()};
    while (sender(s).Send(r) == Result::kAgain) Step();
  }

  // Posts n receives of `len` bytes to the shared queue.
  void PostShared(int n, size_t len) {
    for (int i = 0; i < n; ++i) {
      in_.push_back(std::make_unique<std::vector<uint8_t>>(len));
      RecvRequest r{.buf = in_.back()->data(), .len = len, .context = in_.back().get()};
      Result res;
      while ((res = srq_->PostRecv(r)) == Result::kAgain) Step();
      ASSERT_EQ(res, Result::kOk);
    }
  }

  // Every completion: the bytes are the message its header names, at the
  // endpoint it was sent to, from that sender; each (sender, endpoint)
  // stream in order and without gaps; `want` messages per stream.
  void Verify(uint32_t want, const std::map<std::pair<int, int>, size_t>& len_of_first) {
    std::map<std::pair<int, int>, uint32_t> next;
    for (int k = 0; k < 2; ++k) {
      EXPECT_TRUE(errors_[k].empty()) << errors_[k][0].message;
      for (const Completion& c : got_[k]) {
        ASSERT_GE(c.len, 8u);
        uint32_t head[2];
        std::memcpy(head, c.buf, 8);
        const int s = static_cast<int>(head[0] / 2);
        ASSERT_LT(s, kSenders);
        EXPECT_EQ(static_cast<int>(head[0] % 2), k) << "completed at the other endpoint";
        EXPECT_EQ(c.source, from_[k][s]) << "source is not the sender, as endpoint " << k << " knows it";
        uint32_t& expected = next[std::make_pair(s, k)];
        EXPECT_EQ(head[1], expected) << "stream " << s << "->" << k << " out of order";
        expected = head[1] + 1;
        const std::vector<uint8_t> want_bytes = Message(s, k, head[1], c.len);
        EXPECT_EQ(std::memcmp(c.buf, want_bytes.data(), c.len), 0) << "bytes differ";
        EXPECT_EQ(c.flags & kCompRecv, kCompRecv);
      }
    }
    for (const auto& [stream, n] : len_of_first) {
      (void)n;
      EXPECT_EQ(next[stream], want) << "stream " << stream.first << "->" << stream.second;
    }
  }

  size_t Received() const { return got_[0].size() + got_[1].size(); }

  std::unique_ptr<Net> net_;
  std::unique_ptr<SharedRecvQueue> srq_;
  std::unique_ptr<Endpoint> shared_[2];
  PeerId to_[kSenders][2];
  PeerId from_[2][kSenders];
  std::vector<std::unique_ptr<std::vector<uint8_t>>> out_, in_;
  std::vector<Completion> got_[2];
  std::vector<ErrorCompletion> errors_[2];
};

const std::map<std::pair<int, int>, size_t> kAllStreams = {
    {{0, 0}, 0}, {{0, 1}, 0}, {{1, 0}, 0}, {{1, 1}, 0}};

TEST_F(SharedRecvTest, PostedReceivesTakeMessagesFromTwoPeersAtTwoEndpoints) {
  Make(0);
  constexpr uint32_t kEach = 10;
  PostShared(4 * kEach, 4096);
  for (uint32_t i = 0; i < kEach; ++i) {
    for (int s = 0; s < kSenders; ++s) {
      for (int k = 0; k < 2; ++k) Send(s, k, i, 8 + (i * 397) % 4000);
    }
  }
  ASSERT_TRUE(RunUntil([&] { return Received() == 4 * kEach; }));
  for (int i = 0; i < 2000; ++i) Step();
  Verify(kEach, kAllStreams);
  EXPECT_EQ(srq_->RecvSlotsFree(), srq_->config().max_posted_recvs);
}

TEST_F(SharedRecvTest, UnexpectedMessagesOfEitherEndpointAreTakenInArrivalOrder) {
  Make(0);
  // Eager of one and of several segments, and rendezvous (above 128 KiB).
  const size_t sizes[] = {64, 5000, 300'000};
  for (uint32_t i = 0; i < 3; ++i) {
    for (int s = 0; s < kSenders; ++s) {
      for (int k = 0; k < 2; ++k) Send(s, k, i, sizes[i]);
    }
  }
  for (int i = 0; i < 3000; ++i) Step();  // all arrive unexpected
  EXPECT_TRUE(got_[0].empty() && got_[1].empty());
  PostShared(12, 300'000);
  ASSERT_TRUE(RunUntil([&] { return Received() == 12; }));
  for (int i = 0; i < 2000; ++i) Step();
  Verify(3, kAllStreams);
}

TEST_F(SharedRecvTest, ExactlyOnceInOrderUnderLoss) {
  Make(0.05);
  constexpr uint32_t kEach = 30;
  PostShared(40, 20'000);
  for (uint32_t i = 0; i < kEach; ++i) {
    for (int s = 0; s < kSenders; ++s) {
      for (int k = 0; k < 2; ++k) Send(s, k, i, 8 + (i * 7919) % 20'000);
    }
    if (i % 10 == 9) PostShared(40, 20'000);
  }
  ASSERT_TRUE(RunUntil([&] { return Received() == 4 * kEach; }, 5'000'000));
  for (int i = 0; i < 5000; ++i) Step();
  Verify(kEach, kAllStreams);
  const Counters& a = shared_[0]->counters();
  EXPECT_GT(a.duplicates_dropped + a.retransmits_fast + a.retransmits_timeout +
                sender(0).counters().retransmits_fast + sender(0).counters().retransmits_timeout,
            0u)
      << "the faults did nothing: the test proves less than it says";
}

TEST_F(SharedRecvTest, TheQueueSizeIsEnforcedAndOnlyPlainReceivesAreShared) {
  SharedRecvConfig qc;
  qc.max_posted_recvs = 4;
  Make(0, qc);
  std::vector<uint8_t> buf(64);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(srq_->PostRecv({.buf = buf.data(), .len = buf.size()}), Result::kOk);
  }
  EXPECT_EQ(srq_->RecvSlotsFree(), 0u);
  EXPECT_EQ(srq_->PostRecv({.buf = buf.data(), .len = buf.size()}), Result::kAgain);
  // Through an endpoint it is the same queue.
  EXPECT_EQ(shared_[1]->PostRecv({.buf = buf.data(), .len = buf.size()}), Result::kAgain);
  EXPECT_EQ(shared_[0]->RecvSlotsFree(), 0u);
  EXPECT_EQ(srq_->PostRecv({.source = from_[0][0], .buf = buf.data(), .len = buf.size()}),
            Result::kInvalid);
  EXPECT_EQ(srq_->PostRecv({.buf = buf.data(), .len = buf.size(), .flags = kRecvMulti}),
            Result::kInvalid);
  EXPECT_EQ(shared_[0]->PostRecv({.buf = buf.data(), .len = buf.size(), .flags = kRecvPeek}),
            Result::kInvalid);
}

// A receive directed to a sender by its address takes that sender's
// message at whichever endpoint it arrives, not an earlier one of another
// sender: from the unexpected queue and when posted first.
TEST_F(SharedRecvTest, DirectedReceivesTakeTheirSendersMessagesAtEitherEndpoint) {
  Make(0);
  Send(0, 0, 0, 100);  // sender 0 -> A, arrives first
  Send(1, 1, 0, 100);  // sender 1 -> B
  for (int i = 0; i < 2000; ++i) Step();
  std::vector<uint8_t> first(4096), second(4096), third(4096), fourth(4096);
  ASSERT_EQ(srq_->PostRecvFrom({.buf = first.data(), .len = first.size(), .context = &first},
                               sender(1).address()),
            Result::kOk);
  ASSERT_TRUE(RunUntil([&] { return Received() == 1; }, 100'000));
  ASSERT_EQ(got_[1].size(), 1u) << "the directed receive did not take sender 1's message at B";
  EXPECT_EQ(got_[1][0].context, &first);
  EXPECT_EQ(got_[1][0].source, from_[1][1]);
  // Sender 0's message, still waiting at A, is the next one directed to it.
  ASSERT_EQ(srq_->PostRecvFrom({.buf = second.data(), .len = second.size(), .context = &second},
                               sender(0).address()),
            Result::kOk);
  ASSERT_TRUE(RunUntil([&] { return Received() == 2; }, 100'000));
  ASSERT_EQ(got_[0].size(), 1u);
  EXPECT_EQ(got_[0][0].context, &second);
  EXPECT_EQ(got_[0][0].source, from_[0][0]);
  // Posted first: directed to sender 1; sender 0's next message (to B)
  // passes it by, sender 1's (to A) lands in it.
  ASSERT_EQ(srq_->PostRecvFrom({.buf = third.data(), .len = third.size(), .context = &third},
                               sender(1).address()),
            Result::kOk);
  Send(0, 1, 0, 100);
  for (int i = 0; i < 2000; ++i) Step();
  EXPECT_EQ(Received(), 2u) << "a receive directed to sender 1 took sender 0's message";
  Send(1, 0, 0, 100);
  ASSERT_TRUE(RunUntil([&] { return Received() == 3; }, 100'000));
  ASSERT_EQ(got_[0].size(), 2u);
  EXPECT_EQ(got_[0][1].context, &third);
  EXPECT_EQ(got_[0][1].source, from_[0][1]);
  // A plain receive takes the one left.
  ASSERT_EQ(srq_->PostRecv({.buf = fourth.data(), .len = fourth.size()}), Result::kOk);
  ASSERT_TRUE(RunUntil([&] { return Received() == 4; }, 100'000));
  Verify(1, kAllStreams);
}

TEST_F(SharedRecvTest, CancelCompletesAtAnEndpoint) {
  Make(0);
  std::vector<uint8_t> buf(64);
  int ctx;
  ASSERT_EQ(srq_->PostRecv({.buf = buf.data(), .len = buf.size(), .context = &ctx}), Result::kOk);
  EXPECT_FALSE(srq_->CancelRecv(&buf));
  EXPECT_TRUE(srq_->CancelRecv(&ctx));
  EXPECT_FALSE(srq_->CancelRecv(&ctx));
  Step();
  ASSERT_EQ(errors_[0].size() + errors_[1].size(), 1u);
  const ErrorCompletion& e = errors_[0].empty() ? errors_[1][0] : errors_[0][0];
  EXPECT_EQ(e.err, ECANCELED);
  EXPECT_EQ(e.op.context, &ctx);
  EXPECT_EQ(srq_->RecvSlotsFree(), srq_->config().max_posted_recvs);
}

TEST_F(SharedRecvTest, AnEndpointLeavingGivesBackWhatItHeld) {
  SharedRecvConfig qc;
  qc.max_unexpected_msgs = 4;
  Make(0, qc);
  for (uint32_t i = 0; i < 4; ++i) Send(0, 0, i, 100);
  for (int i = 0; i < 2000; ++i) Step();
  // Endpoint A holds four unexpected messages: the queue is full for B too.
  Send(1, 1, 0, 100);
  for (int i = 0; i < 2000; ++i) Step();
  EXPECT_TRUE(got_[1].empty());
  shared_[0].reset();
  EXPECT_EQ(srq_->endpoints(), 1u);
  // B's message, refused until now, is taken once a receive is posted.
  PostShared(1, 4096);
  ASSERT_TRUE(RunUntil([&] { return got_[1].size() == 1; }, 200'000));
  Verify(1, {{{1, 1}, 0}});
}

TEST(SharedRecvQueueTest, EndpointsOfAnotherPortAreRefused) {
  Net net{NetOptions{}};
  absl::StatusOr<std::unique_ptr<SharedRecvQueue>> q = SharedRecvQueue::Create(net.port(0), {});
  ASSERT_TRUE(q.ok());
  EndpointConfig c;
  c.udp_port = 6100;
  c.shared_recv = q->get();
  absl::StatusOr<std::unique_ptr<Endpoint>> ep = Endpoint::Create(net.port(1), net.clock(), c);
  EXPECT_EQ(ep.status().code(), absl::StatusCode::kInvalidArgument);
  SharedRecvConfig none;
  none.max_posted_recvs = 0;
  EXPECT_FALSE(SharedRecvQueue::Create(net.port(0), none).ok());
}

}  // namespace
}  // namespace bypass::rdm
