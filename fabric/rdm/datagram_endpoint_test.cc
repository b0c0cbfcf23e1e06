// DatagramEndpoint over loopback ports: unreliable datagrams on the same
// demultiplexer as reliable endpoints, completions through the same records.
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "driver/clock.h"
#include "driver/loopback/loopback_device.h"
#include "driver/uri.h"
#include "fabric/rdm/rdm.h"
#include "fabric/rdm/test_util.h"
#include "gtest/gtest.h"

namespace bypass::rdm {
namespace {

// Two loopback ports on one segment, a datagram endpoint on each.
struct Pair {
  explicit Pair(DatagramConfig ca = {.udp_port = 7000}, DatagramConfig cb = {.udp_port = 7001}) {
    const std::string seg = testing::UniqueSegment();
    da = *driver::loopback::Open(*driver::DeviceUri::Parse("loopback:" + seg), {});
    db = *driver::loopback::Open(*driver::DeviceUri::Parse("loopback:" + seg), {});
    pa = std::make_unique<Port>(da->queue(0), da->info());
    pb = std::make_unique<Port>(db->queue(0), db->info());
    a = *DatagramEndpoint::Create(*pa, ca);
    b = *DatagramEndpoint::Create(*pb, cb);
    a_to_b = *a->InsertPeer(b->address());
    b_to_a = *b->InsertPeer(a->address());
  }
  // Progresses b until it has taken n datagrams (or gives up).
  void Pump(size_t n) {
    size_t got = 0;
    for (int i = 0; i < 1000 && got < n; ++i) got += b->Progress();
  }
  std::unique_ptr<driver::Device> da, db;
  std::unique_ptr<Port> pa, pb;
  std::unique_ptr<DatagramEndpoint> a, b;
  PeerId a_to_b, b_to_a;
};

TEST(DatagramEndpointTest, DatagramsArriveWithTheirSourceAndComplete) {
  Pair p;
  char in[2][64] = {};
  int ctx[2];
  ASSERT_EQ(p.b->PostRecv({.buf = in[0], .len = 64, .context = &ctx[0]}), Result::kOk);
  ASSERT_EQ(p.b->PostRecv({.buf = in[1], .len = 64, .context = &ctx[1]}), Result::kOk);
  int sent;
  ASSERT_EQ(p.a->Send({.dest = p.a_to_b, .buf = "hello", .len = 6, .context = &sent}),
            Result::kOk);
  ASSERT_EQ(p.a->Send({.dest = p.a_to_b, .buf = "world", .len = 6, .flags = kSendInject}),
            Result::kOk);
  Completion c[4];
  ASSERT_EQ(p.a->PollCompletions(c), 1u) << "an inject has no completion";
  EXPECT_EQ(c[0].context, &sent);
  EXPECT_EQ(c[0].flags, kCompSend | kCompMsg);
  EXPECT_EQ(c[0].len, 6u);
  p.Pump(2);
  ASSERT_EQ(p.b->PollCompletions(c), 2u);
  EXPECT_EQ(c[0].context, &ctx[0]);
  EXPECT_EQ(c[0].flags, kCompRecv | kCompMsg);
  EXPECT_EQ(c[0].len, 6u);
  EXPECT_EQ(c[0].buf, in[0]);
  EXPECT_EQ(c[0].source, p.b_to_a) << "the source, found among the inserted peers";
  EXPECT_STREQ(in[0], "hello");
  EXPECT_STREQ(in[1], "world");
  EXPECT_EQ(p.b->counters().received, 2u);
  EXPECT_EQ(p.a->counters().sent, 2u);
}

TEST(DatagramEndpointTest, AnUnknownSourceIsReportedAsNoPeer) {
  Pair p;
  ASSERT_TRUE(p.b->RemovePeer(p.b_to_a).ok());
  EXPECT_FALSE(p.b->PeerAddress(p.b_to_a).has_value());
  char in[16];
  ASSERT_EQ(p.b->PostRecv({.buf = in, .len = sizeof(in)}), Result::kOk);
  ASSERT_EQ(p.a->Send({.dest = p.a_to_b, .buf = "x", .len = 1, .flags = kSendInject}),
            Result::kOk);
  p.Pump(1);
  Completion c;
  ASSERT_EQ(p.b->PollCompletions({&c, 1}), 1u);
  EXPECT_EQ(c.source, PeerId{});
}

TEST(DatagramEndpointTest, WithoutAReceiveADatagramIsDroppedAndALongOneTruncated) {
  Pair p;
  ASSERT_EQ(p.a->Send({.dest = p.a_to_b, .buf = "lost", .len = 4, .flags = kSendInject}),
            Result::kOk);
  p.Pump(1);
  EXPECT_EQ(p.b->counters().no_receive_dropped, 1u);
  char small[4];
  int ctx;
  ASSERT_EQ(p.b->PostRecv({.buf = small, .len = sizeof(small), .context = &ctx}), Result::kOk);
  ASSERT_EQ(p.a->Send({.dest = p.a_to_b, .buf = "too long", .len = 8, .flags = kSendInject}),
            Result::kOk);
  p.Pump(1);
  Completion c;
  EXPECT_EQ(p.b->PollCompletions({&c, 1}), 0u);
  ErrorCompletion e;
  ASSERT_EQ(p.b->PollErrors({&e, 1}), 1u);
  EXPECT_EQ(e.op.context, &ctx);
  EXPECT_EQ(e.err, EMSGSIZE);
  EXPECT_EQ(e.olen, 4u);
  EXPECT_EQ(std::memcmp(small, "too ", 4), 0);
  EXPECT_EQ(p.b->counters().truncated, 1u);
}

TEST(DatagramEndpointTest, CancelBadArgumentsAndFullQueues) {
  Pair p({.udp_port = 7000, .max_posted_recvs = 1, .max_unread_sends = 1},
         {.udp_port = 7001, .max_posted_recvs = 1});
  char buf[8];
  int ctx;
  EXPECT_EQ(p.b->RecvSlotsFree(), 1u);
  ASSERT_EQ(p.b->PostRecv({.buf = buf, .len = 8, .context = &ctx}), Result::kOk);
  EXPECT_EQ(p.b->PostRecv({.buf = buf, .len = 8}), Result::kAgain) << "one receive at most";
  EXPECT_TRUE(p.b->CancelRecv(&ctx));
  EXPECT_FALSE(p.b->CancelRecv(&ctx));
  ErrorCompletion e;
  ASSERT_EQ(p.b->PollErrors({&e, 1}), 1u);
  EXPECT_EQ(e.op.context, &ctx);
  EXPECT_EQ(e.err, ECANCELED);
  EXPECT_EQ(p.b->PostRecv({.buf = buf, .len = 8, .tagged = true}), Result::kInvalid);
  EXPECT_EQ(p.b->PostRecv({.buf = buf, .len = 8, .flags = kRecvMulti}), Result::kInvalid);

  EXPECT_EQ(p.a->Send({.dest = p.a_to_b, .buf = "x", .len = 1, .flags = kSendTagged}),
            Result::kInvalid);
  EXPECT_EQ(p.a->Send({.dest = PeerId{12345}, .buf = "x", .len = 1}), Result::kInvalid);
  std::vector<char> big(p.a->max_payload() + 1);
  EXPECT_EQ(p.a->Send({.dest = p.a_to_b, .buf = big.data(), .len = big.size()}),
            Result::kTooLong);
  ASSERT_EQ(p.a->Send({.dest = p.a_to_b, .buf = big.data(), .len = big.size() - 1}),
            Result::kOk)
      << "max_payload() fits";
  // Room for one unread send completion, and one for the receive a may post.
  ASSERT_EQ(p.a->Send({.dest = p.a_to_b, .buf = "x", .len = 1}), Result::kOk);
  EXPECT_EQ(p.a->Send({.dest = p.a_to_b, .buf = "x", .len = 1}), Result::kAgain)
      << "its completion has no room until one is polled";
  Completion c;
  ASSERT_EQ(p.a->PollCompletions({&c, 1}), 1u);
  EXPECT_EQ(p.a->Send({.dest = p.a_to_b, .buf = "x", .len = 1}), Result::kOk);
  EXPECT_FALSE(DatagramEndpoint::Create(*p.pa, {.udp_port = 7000}).ok()) << "the port is taken";
  EXPECT_FALSE(DatagramEndpoint::Create(*p.pa, {.udp_port = 0}).ok());
}

// The datagram endpoint shares its port's demultiplexer with a reliable
// endpoint: each gets its own traffic, neither loses any.
TEST(DatagramEndpointTest, SharesAPortWithAReliableEndpoint) {
  Pair p;
  driver::ManualClock clock;
  auto ra = *Endpoint::Create(*p.pa, clock, {.udp_port = 8000});
  auto rb = *Endpoint::Create(*p.pb, clock, {.udp_port = 8001});
  const PeerId to_rb = *ra->InsertPeer(rb->address());
  std::vector<uint8_t> out(5000, 7), in(5000);
  ASSERT_EQ(rb->PostRecv({.buf = in.data(), .len = in.size()}), Result::kOk);
  ASSERT_EQ(ra->Send({.dest = to_rb, .buf = out.data(), .len = out.size()}), Result::kOk);
  char dg[16];
  ASSERT_EQ(p.b->PostRecv({.buf = dg, .len = sizeof(dg)}), Result::kOk);
  ASSERT_EQ(p.a->Send({.dest = p.a_to_b, .buf = "dgram", .len = 6, .flags = kSendInject}),
            Result::kOk);
  Completion c;
  bool reliable_done = false, dgram_done = false;
  for (int i = 0; i < 10000 && !(reliable_done && dgram_done); ++i) {
    ra->Progress();
    rb->Progress();
    p.b->Progress();
    reliable_done = reliable_done || rb->PollCompletions({&c, 1}) == 1;
    dgram_done = dgram_done || p.b->PollCompletions({&c, 1}) == 1;
    clock.Advance(1000);
  }
  EXPECT_TRUE(reliable_done);
  EXPECT_TRUE(dgram_done);
  EXPECT_EQ(in, out);
  EXPECT_STREQ(dg, "dgram");
  EXPECT_EQ(p.pb->counters().no_endpoint, 0u);
}

}  // namespace
}  // namespace bypass::rdm
