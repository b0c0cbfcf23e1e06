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

namespace bypass::rdm {
namespace {

// Multicast: members on another port (through the group's Ethernet
// address), two members on one port (a copy each), the sender's own port
// (the loop); leaving stops delivery; buffers all come back.
TEST(DatagramMulticastTest, EveryMemberOnceAndLeavingStops) {
  Pair p;
  auto b2 = *DatagramEndpoint::Create(*p.pb, {.udp_port = 7002});
  const driver::Ipv4Address group = *driver::Ipv4Address::Parse("239.9.9.9");
  ASSERT_TRUE(p.b->JoinGroup(group, 7100).ok());
  ASSERT_TRUE(b2->JoinGroup(group, 7100).ok());
  ASSERT_TRUE(p.a->JoinGroup(group, 7100).ok());
  EXPECT_EQ(p.a->JoinGroup(group, 7100).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(p.a->JoinGroup(*driver::Ipv4Address::Parse("10.0.0.1"), 7100).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.a->JoinGroup(group, 0).code(), absl::StatusCode::kInvalidArgument);
  const PeerId to_group = *p.a->InsertPeer(Address{driver::MulticastMac(group), group, 7100, 0});
  const uint32_t pool_b = p.db->queue(0).PoolAvailable();
  char in[3][2][16] = {};
  DatagramEndpoint* members[3] = {p.a.get(), p.b.get(), b2.get()};
  for (int m = 0; m < 3; ++m) {
    for (int k = 0; k < 2; ++k) {
      ASSERT_EQ(members[m]->PostRecv({.buf = in[m][k], .len = 16}), Result::kOk);
    }
  }
  auto pump = [&] {
    for (int i = 0; i < 200; ++i) {
      for (DatagramEndpoint* m : members) {
        if (m != nullptr) m->Progress();
      }
    }
  };
  auto received = [&](DatagramEndpoint* m) {
    Completion c[4];
    const size_t n = m->PollCompletions(c);
    size_t recvs = 0;
    for (size_t i = 0; i < n; ++i) {
      if (!(c[i].flags & kCompRecv)) continue;
      EXPECT_EQ(c[i].flags, kCompRecv | kCompMsg | kCompMulticast);
      ++recvs;
    }
    return recvs;
  };
  ASSERT_EQ(p.a->Send({.dest = to_group, .buf = "one", .len = 4, .flags = kSendInject}),
            Result::kOk);
  pump();
  for (int m = 0; m < 3; ++m) {
    EXPECT_EQ(received(members[m]), 1u) << "member " << m;
    EXPECT_STREQ(in[m][0], "one");
  }
  EXPECT_EQ(p.pb->counters().group_copies, 1u);  // b2's
  EXPECT_EQ(p.pa->counters().group_copies, 1u);  // a's own, looped
  ASSERT_TRUE(p.b->LeaveGroup(group, 7100).ok());
  EXPECT_EQ(p.b->LeaveGroup(group, 7100).code(), absl::StatusCode::kNotFound);
  ASSERT_EQ(p.a->Send({.dest = to_group, .buf = "two", .len = 4, .flags = kSendInject}),
            Result::kOk);
  pump();
  EXPECT_EQ(received(p.b.get()), 0u) << "b left";
  EXPECT_EQ(received(b2.get()), 1u);
  EXPECT_EQ(received(p.a.get()), 1u);
  EXPECT_STREQ(in[2][1], "two");
  b2.reset();  // leaves its group as it goes
  members[2] = nullptr;
  ASSERT_EQ(p.a->Send({.dest = to_group, .buf = "three", .len = 6, .flags = kSendInject}),
            Result::kOk);
  pump();
  // No member left on b's port: the frame takes the port's unicast path to
  // b, which drops it (not its address).
  EXPECT_EQ(received(p.b.get()), 0u);
  EXPECT_EQ(p.b->counters().not_for_us_dropped, 1u);
  EXPECT_EQ(p.db->queue(0).PoolAvailable(), pool_b) << "every copy went back to the pool";
}

}  // namespace
}  // namespace bypass::rdm
