// A real exchange between two engines captured with `pcap=FILE`, read back
// by tshark with tools/wireshark/bypass.lua, field by field against what
// the engine's own parser (wire::Parse) logged for each packet endpoint A
// sent and received: a handshake with cookie and MACs, tagged messages
// with remote data, a lost DATA packet (a SACK, a retransmission), a
// rendezvous message read in place, small messages in one packet (a
// bundle), an RMA write and read, a fetching
// atomic, a connection-manager message of the fi provider, and a peer's
// restart (a RESET).
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "driver/clock.h"
#include "driver/device.h"
#include "fabric/fi/cm.h"
#include "fabric/rdm/rdm.h"
#include "fabric/rdm/test_util.h"
#include "fabric/rdm/wire.h"
#include "gtest/gtest.h"
#include "tools/wireshark/tshark.h"

namespace bypass::rdm {
namespace {

// What tshark is asked for, in this order (bypass.lua's field names).
const char* const kFields[] = {
    "bypass.type",           "bypass.flags",           "bypass.credit",
    "bypass.src_incarnation", "bypass.dst_incarnation", "bypass.auth_key",
    "bypass.psn",            "bypass.ack_psn",         "bypass.length",
    "bypass.crc",            "bypass.crc.status",      "bypass.payload_length",
    "bypass.hello.max_datagram", "bypass.hello.capabilities", "bypass.hello.nonce",
    "bypass.hello.echo",     "bypass.hello.cookie",    "bypass.hello.mac",
    "bypass.reset.reason",   "bypass.reset.incarnation", "bypass.reset.mac",
    "bypass.ack.sack",       "bypass.ack.next_msg_id", "bypass.msg.id",          "bypass.msg.flags",
    "bypass.msg.protocol",   "bypass.msg.total_length", "bypass.msg.offset",
    "bypass.msg.tag",        "bypass.msg.data",        "bypass.offer.pid",
    "bypass.offer.addr",     "bypass.offer.length",    "bypass.offer.guard_addr",
    "bypass.offer.guard",    "bypass.rma.op",
    "bypass.rma.flags",      "bypass.rma.status",      "bypass.rma.id",
    "bypass.rma.key",        "bypass.rma.addr",        "bypass.rma.total_length",
    "bypass.rma.offset",     "bypass.rma.data",        "bypass.rma.atomic.op",
    "bypass.rma.atomic.datatype", "bypass.rma.atomic.count", "bypass.cm.type",
    "bypass.cm.conn_id",     "bypass.cm.ip",           "bypass.cm.port",
    "bypass.cm.incarnation", "bypass.cm.data_len",
};
constexpr size_t kNumFields = sizeof(kFields) / sizeof(kFields[0]);
// Fields whose values are bytes (compared as hex) or text, not numbers.
bool IsText(const std::string& field) {
  return field == "bypass.hello.cookie" || field == "bypass.hello.mac" ||
         field == "bypass.reset.mac" || field == "bypass.cm.ip";
}

using Row = std::array<std::string, kNumFields>;

std::string Hex(absl::Span<const uint8_t> b) {
  std::string s;
  for (uint8_t c : b) absl::StrAppend(&s, absl::Hex(c, absl::kZeroPad2));
  return s;
}

// One packet's fields, as the engine's parser decodes it.
Row Expect(const wire::View& v) {
  Row r;
  const auto set = [&](const char* field, std::string value) {
    for (size_t i = 0; i < kNumFields; ++i) {
      if (std::string(kFields[i]) == field) r[i] = std::move(value);
    }
  };
  const auto num = [&](const char* field, uint64_t value) { set(field, absl::StrCat(value)); };
  const wire::Common& c = v.common;
  const auto d = v.datagram;
  const std::optional<wire::TypeInfo> info = wire::DescribeType(static_cast<uint8_t>(c.type));
  num("bypass.type", static_cast<uint8_t>(c.type));
  num("bypass.flags", c.flags);
  num("bypass.credit", c.credit);
  num("bypass.src_incarnation", c.src_incarnation);
  num("bypass.dst_incarnation", c.dst_incarnation);
  num("bypass.auth_key", c.auth_key);
  num("bypass.psn", c.psn.value());
  num("bypass.ack_psn", c.ack_psn.value());
  num("bypass.length", d.size() - sizeof(wire::CommonHeader));
  num("bypass.crc", uint32_t{d[32]} << 24 | uint32_t{d[33]} << 16 | uint32_t{d[34]} << 8 | d[35]);
  // Good: Parse checked it; Unverified: an UNCHECKED packet carries none.
  num("bypass.crc.status", (c.flags & wire::kFlagUnchecked) != 0 ? 2 : 1);
  num("bypass.payload_length", d.size() - sizeof(wire::CommonHeader) - info->ext_bytes);
  switch (c.type) {
    case wire::PacketType::kHello:
    case wire::PacketType::kHelloAck:
    case wire::PacketType::kCookie:
      num("bypass.hello.max_datagram", v.hello.max_datagram);
      num("bypass.hello.capabilities", v.hello.capabilities);
      num("bypass.hello.nonce", v.hello.nonce);
      num("bypass.hello.echo", v.hello.echo);
      set("bypass.hello.cookie", Hex(v.hello.cookie));
      set("bypass.hello.mac", Hex(v.hello.mac));
      break;
    case wire::PacketType::kReset:
      num("bypass.reset.reason", static_cast<uint8_t>(v.reset.reason));
      num("bypass.reset.incarnation", v.reset.incarnation);
      set("bypass.reset.mac", Hex(v.reset.mac));
      break;
    case wire::PacketType::kAck:
      set("bypass.ack.sack", absl::StrJoin(v.ack.sack, ","));
      num("bypass.ack.next_msg_id", v.ack.next_msg_id);
      break;
    case wire::PacketType::kData: {
      // Every message of a bundle, each field's values in order (tshark
      // joins a field's occurrences with commas), its flags as on the wire.
      std::vector<std::pair<wire::MsgFields, absl::Span<const uint8_t>>> msgs;
      if (v.msg.msg_flags & wire::kMsgBundle) {
        wire::BundleReader bundle(v.msg, v.payload);
        wire::MsgFields m;
        absl::Span<const uint8_t> bytes;
        while (bundle.Next(&m, &bytes)) {
          if (!msgs.empty()) msgs.back().first.msg_flags |= wire::kMsgBundle;
          msgs.emplace_back(m, bytes);
        }
      } else {
        msgs.emplace_back(v.msg, v.payload);
      }
      const auto add = [&](const char* field, uint64_t value) {
        for (size_t i = 0; i < kNumFields; ++i) {
          if (std::string(kFields[i]) == field) {
            r[i] = r[i].empty() ? absl::StrCat(value) : absl::StrCat(r[i], ",", value);
          }
        }
      };
      for (const auto& [m, bytes] : msgs) {
        add("bypass.msg.id", m.msg_id);
        add("bypass.msg.flags", m.msg_flags);
        add("bypass.msg.protocol", static_cast<uint8_t>(m.protocol));
        add("bypass.msg.total_length", m.total_length);
        add("bypass.msg.offset", m.offset);
        add("bypass.msg.tag", m.tag);
        add("bypass.msg.data", m.data);
        if (m.offer_pid != 0) {
          num("bypass.offer.pid", m.offer_pid);
          num("bypass.offer.addr", m.offer_addr);
          num("bypass.offer.length", m.total_length);
          num("bypass.offer.guard_addr", m.offer_guard_addr);
          num("bypass.offer.guard", m.offer_guard);
        }
        if ((m.msg_flags & wire::kMsgTagged) != 0 && (m.tag & fi::kCmTagBit) != 0) {
          if (std::optional<fi::CmMessage> cm = fi::ParseCm(bytes.data(), bytes.size())) {
            num("bypass.cm.type", static_cast<uint8_t>(cm->type));
            num("bypass.cm.conn_id", cm->conn_id);
            set("bypass.cm.ip", cm->addr.ip.ToString());
            num("bypass.cm.port", cm->addr.udp_port);
            num("bypass.cm.incarnation", cm->addr.incarnation);
            num("bypass.cm.data_len", cm->data_len);
          }
        }
      }
      break;
    }
    case wire::PacketType::kRma: {
      const wire::RmaFields& m = v.rma;
      num("bypass.rma.op", static_cast<uint8_t>(m.op));
      num("bypass.rma.flags", m.flags);
      num("bypass.rma.status", static_cast<uint8_t>(m.status));
      num("bypass.rma.id", m.rma_id);
      num("bypass.rma.key", m.key);
      num("bypass.rma.addr", m.addr);
      num("bypass.rma.total_length", m.total_length);
      num("bypass.rma.offset", m.offset);
      const bool atomic = m.op == wire::RmaOp::kAtomic || m.op == wire::RmaOp::kAtomicResp;
      num("bypass.rma.data", atomic ? wire::PackAtomic(m.atomic) : m.data);
      if (atomic) {
        num("bypass.rma.atomic.op", static_cast<uint8_t>(m.atomic.op));
        num("bypass.rma.atomic.datatype", static_cast<uint8_t>(m.atomic.type));
        num("bypass.rma.atomic.count", m.atomic.count);
      }
      break;
    }
  }
  return r;
}

// A queue decorator that logs every frame its inner queue takes to send
// and every frame it receives, decoded by wire::Parse, in the order the
// capture below it records them.
class WireLog final : public driver::QueuePair {
 public:
  explicit WireLog(driver::QueuePair& inner) : inner_(inner) {}
  uint16_t RxBurst(absl::Span<driver::Packet*> out) override {
    const uint16_t n = inner_.RxBurst(out);
    for (uint16_t i = 0; i < n; ++i) Log(*out[i]);
    return n;
  }
  uint16_t TxBurst(absl::Span<driver::Packet* const> pkts) override {
    // Decoded before: once taken, a frame is no longer ours to read.
    std::vector<wire::View> views(pkts.size());
    std::vector<bool> ok(pkts.size());
    std::vector<Row> rows(pkts.size());
    for (size_t i = 0; i < pkts.size(); ++i) {
      // Loopback's frames go through memory only: UNCHECKED packets parse.
      ok[i] = wire::Parse({pkts[i]->data, pkts[i]->len}, &views[i], /*intact=*/true) ==
              wire::ParseStatus::kOk;
      if (ok[i]) rows[i] = Expect(views[i]);
    }
    const uint16_t n = inner_.TxBurst(pkts);
    for (uint16_t i = 0; i < n; ++i) Add(ok[i], rows[i], views[i]);
    return n;
  }
  bool AllocBulk(absl::Span<driver::Packet*> out) override { return inner_.AllocBulk(out); }
  void FreeBulk(absl::Span<driver::Packet* const> pkts) override { inner_.FreeBulk(pkts); }
  uint32_t PoolAvailable() const override { return inner_.PoolAvailable(); }
  uint32_t PoolCapacity() const override { return inner_.PoolCapacity(); }
  driver::QueueStats stats() const override { return inner_.stats(); }
  uint16_t id() const override { return inner_.id(); }
  int64_t ReadPeerMemory(uint32_t pid, uint64_t addr, void* dst, size_t len) override {
    return inner_.ReadPeerMemory(pid, addr, dst, len);
  }
  bool ReachesSameHost(driver::Ipv4Address ip, uint16_t port) override {
    return inner_.ReachesSameHost(ip, port);
  }

  const std::vector<Row>& rows() const { return rows_; }
  // Whether some logged packet satisfies `pred`.
  bool Saw(const std::function<bool(const wire::View&)>& pred) const {
    for (const wire::View& v : views_) {
      if (pred(v)) return true;
    }
    return false;
  }

 private:
  void Log(const driver::Packet& p) {
    wire::View v;
    // Loopback's frames come through memory: UNCHECKED packets parse.
    // Loopback's frames come through memory: UNCHECKED packets parse.
    const bool ok = wire::Parse({p.data, p.len}, &v, /*intact=*/true) == wire::ParseStatus::kOk;
    Add(ok, ok ? Expect(v) : Row{}, v);
  }
  void Add(bool ok, const Row& row, const wire::View& v) {
    EXPECT_TRUE(ok) << "a frame the engine handled did not parse";
    rows_.push_back(row);
    wire::View copy = v;
    copy.payload = {};  // the frame is gone
    copy.datagram = {};
    views_.push_back(copy);
  }

  driver::QueuePair& inner_;
  std::vector<Row> rows_;
  std::vector<wire::View> views_;
};

// Compares one value of tshark's with the engine's: numbers by value (tshark
// prints hex fields as 0x...), bytes without separators, each occurrence.
bool Same(const std::string& field, const std::string& want, const std::string& got) {
  if (IsText(field)) {
    std::string g = got;
    g.erase(std::remove(g.begin(), g.end(), ':'), g.end());
    return g == want;
  }
  const std::vector<std::string> w = absl::StrSplit(want, ',', absl::SkipEmpty());
  const std::vector<std::string> g = absl::StrSplit(got, ',', absl::SkipEmpty());
  if (w.size() != g.size()) return false;
  for (size_t i = 0; i < w.size(); ++i) {
    errno = 0;
    char* end = nullptr;
    const unsigned long long gv = strtoull(g[i].c_str(), &end, 0);
    if (errno != 0 || *end != '\0' || gv != strtoull(w[i].c_str(), nullptr, 10)) return false;
  }
  return true;
}

TEST(CaptureDissectorTest, TsharkDecodesEveryFieldAsTheEngineDoes) {
  const std::string tshark = wireshark::FindTshark();
  ASSERT_FALSE(tshark.empty()) << wireshark::kTsharkMissing;
  // Kept among the test's outputs (bazel-testlogs/.../test.outputs) for a
  // look in Wireshark.
  const char* outputs = getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  const char* tmp = getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(outputs != nullptr ? outputs
                                        : tmp != nullptr   ? tmp
                                                           : "/tmp",
                                        "/exchange.pcap");
  const std::string segment = testing::UniqueSegment();

  // A captures (and logs); B drops the third DATA packet the first time.
  absl::StatusOr<std::unique_ptr<driver::Device>> dev_a =
      driver::OpenDevice(absl::StrCat("loopback:", segment, ",same_host=1,pcap=", path));
  ASSERT_TRUE(dev_a.ok()) << dev_a.status();
  absl::StatusOr<std::unique_ptr<driver::Device>> dev_b =
      driver::OpenDevice(absl::StrCat("loopback:", segment, ",same_host=1"));
  ASSERT_TRUE(dev_b.ok()) << dev_b.status();
  auto log = std::make_unique<WireLog>((*dev_a)->queue(0));
  testing::TapQueue tap((*dev_b)->queue(0));
  int data_seen = 0;
  tap.set_filter([&](const wire::View* v) {
    return v == nullptr || v->common.type != wire::PacketType::kData || ++data_seen != 3;
  });
  auto port_a = std::make_unique<Port>(*log, (*dev_a)->info());
  Port port_b(tap, (*dev_b)->info());

  driver::ManualClock clock(1'000'000'000);
  EndpointConfig config;
  config.auth_key = 0x5eed1234;
  config.handshake_key = std::array<uint8_t, 32>{1, 2, 3, 4, 5, 6, 7, 8};
  config.rendezvous_threshold = 16 << 10;
  config.incarnation = 0xa0000001;
  config.random_seed = 11;
  config.udp_port = 7411;
  absl::StatusOr<std::unique_ptr<Endpoint>> a = Endpoint::Create(*port_a, clock, config);
  ASSERT_TRUE(a.ok()) << a.status();
  config.udp_port = 7412;
  config.incarnation = 0xb0000001;
  config.random_seed = 12;
  absl::StatusOr<std::unique_ptr<Endpoint>> b = Endpoint::Create(port_b, clock, config);
  ASSERT_TRUE(b.ok()) << b.status();
  const PeerId a_to_b = *(*a)->InsertPeer((*b)->address());
  ASSERT_TRUE((*b)->InsertPeer((*a)->address()).ok());

  std::vector<uint8_t> region(8192, 0);
  RegionRequest reg;
  reg.addr = region.data();
  reg.len = region.size();
  reg.access = kAccessRemoteRead | kAccessRemoteWrite;
  absl::StatusOr<uint64_t> key = (*b)->RegisterRegion(reg);
  ASSERT_TRUE(key.ok()) << key.status();

  // Six tagged messages of two packets each, the third with remote data;
  // a rendezvous message (read in place: the devices say same host); a
  // connection-manager message.
  constexpr int kTagged = 6;
  std::vector<std::vector<uint8_t>> in(kTagged + 2, std::vector<uint8_t>(40000));
  std::vector<std::vector<uint8_t>> out(kTagged + 2);
  int expected = 0;
  for (int i = 0; i < kTagged; ++i) {
    RecvRequest r;
    r.buf = in[i].data();
    r.len = in[i].size();
    r.tagged = true;
    r.tag = 0x1000 + i;
    ASSERT_EQ((*b)->PostRecv(r), Result::kOk);
    out[i].resize(2000);
    testing::FillPattern(i, absl::MakeSpan(out[i]));
    SendRequest s;
    s.dest = a_to_b;
    s.buf = out[i].data();
    s.len = out[i].size();
    s.tag = 0x1000 + i;
    s.flags = kSendTagged | (i == 2 ? kSendRemoteData : 0);
    s.data = 0xdada;
    ASSERT_EQ((*a)->Send(s), Result::kOk);
    expected += 2;
  }
  // Three small tagged messages, queued behind the handshake with the
  // others: one packet carries them (a bundle).
  constexpr int kSmall = 3;
  std::vector<std::vector<uint8_t>> small_in(kSmall, std::vector<uint8_t>(64));
  std::vector<std::vector<uint8_t>> small_out(kSmall);
  for (int i = 0; i < kSmall; ++i) {
    RecvRequest r;
    r.buf = small_in[i].data();
    r.len = small_in[i].size();
    r.tagged = true;
    r.tag = 0x2000 + i;
    ASSERT_EQ((*b)->PostRecv(r), Result::kOk);
    small_out[i].resize(16 + 8 * i);
    testing::FillPattern(50 + i, absl::MakeSpan(small_out[i]));
    SendRequest s;
    s.dest = a_to_b;
    s.buf = small_out[i].data();
    s.len = small_out[i].size();
    s.tag = 0x2000 + i;
    s.flags = kSendTagged;
    ASSERT_EQ((*a)->Send(s), Result::kOk);
    expected += 2;
  }
  {
    RecvRequest r;
    r.buf = in[kTagged].data();
    r.len = in[kTagged].size();
    ASSERT_EQ((*b)->PostRecv(r), Result::kOk);
    out[kTagged].resize(30000);
    testing::FillPattern(99, absl::MakeSpan(out[kTagged]));
    SendRequest s;
    s.dest = a_to_b;
    s.buf = out[kTagged].data();
    s.len = out[kTagged].size();
    ASSERT_EQ((*a)->Send(s), Result::kOk);
    expected += 2;
  }
  fi::CmMessage cm;
  cm.type = fi::CmType::kConnReq;
  cm.conn_id = 0x77;
  cm.addr = (*a)->address();
  cm.data_len = 5;
  std::memcpy(cm.data, "hello", 5);
  {
    RecvRequest r;
    r.buf = in[kTagged + 1].data();
    r.len = in[kTagged + 1].size();
    r.tagged = true;
    r.tag = fi::kCmTagBit | fi::kCmListenerBit;
    ASSERT_EQ((*b)->PostRecv(r), Result::kOk);
    out[kTagged + 1].resize(fi::kCmMaxPacket);
    out[kTagged + 1].resize(fi::EncodeCm(cm, out[kTagged + 1].data()));
    SendRequest s;
    s.dest = a_to_b;
    s.buf = out[kTagged + 1].data();
    s.len = out[kTagged + 1].size();
    s.tag = fi::kCmTagBit | fi::kCmListenerBit;
    s.flags = kSendTagged;
    ASSERT_EQ((*a)->Send(s), Result::kOk);
    expected += 2;
  }
  // An RMA write with remote data, a read, a fetching atomic.
  std::vector<uint8_t> wbuf(3000, 0x5a), rbuf(100);
  RmaRequest w;
  w.dest = a_to_b;
  w.buf = wbuf.data();
  w.len = wbuf.size();
  w.addr = 0;
  w.key = *key;
  w.data = 0xfeed;
  w.flags = kRmaRemoteData;
  ASSERT_EQ((*a)->Write(w), Result::kOk);
  expected += 2;
  RmaRequest rd;
  rd.dest = a_to_b;
  rd.buf = rbuf.data();
  rd.len = rbuf.size();
  rd.addr = 100;
  rd.key = *key;
  ASSERT_EQ((*a)->Read(rd), Result::kOk);
  expected += 1;
  uint64_t operand[2] = {5, 7}, result[2] = {};
  AtomicRequest at;
  at.dest = a_to_b;
  at.op = AtomicOp::kSum;
  at.type = AtomicType::kUint64;
  at.count = 2;
  at.operand = operand;
  at.result = result;
  at.fetch = true;
  at.addr = 4096;
  at.key = *key;
  ASSERT_EQ((*a)->Atomic(at), Result::kOk);
  expected += 1;

  int done = 0;
  const auto step = [&] {
    (*a)->Progress();
    (*b)->Progress();
    clock.Advance(1000);
    Completion comps[16];
    ErrorCompletion errs[4];
    for (Endpoint* ep : {a->get(), b->get()}) {
      done += static_cast<int>(ep->PollCompletions(comps));
      const size_t e = ep->PollErrors(errs);
      for (size_t i = 0; i < e; ++i) ADD_FAILURE() << errs[i].message;
    }
  };
  for (int i = 0; i < 2'000'000 && done < expected; ++i) step();
  ASSERT_EQ(done, expected);
  for (int i = 0; i < kTagged; ++i) {
    EXPECT_EQ(testing::CheckPattern(i, absl::MakeSpan(in[i]).first(2000)), -1) << i;
  }
  for (int i = 0; i < kSmall; ++i) {
    EXPECT_EQ(testing::CheckPattern(50 + i, absl::MakeSpan(small_in[i]).first(16 + 8 * i)), -1)
        << i;
  }
  EXPECT_EQ(result[0], 0u);
  EXPECT_EQ(region[4096], 5);

  // B restarts: A's next message reaches an incarnation that is not B's.
  b->reset();
  config.incarnation = 0xb0000002;
  b = Endpoint::Create(port_b, clock, config);
  ASSERT_TRUE(b.ok()) << b.status();
  SendRequest s;
  s.dest = a_to_b;
  s.buf = out[0].data();
  s.len = 100;
  ASSERT_EQ((*a)->Send(s), Result::kOk);
  const auto saw_reset = [&] {
    return log->Saw([](const wire::View& v) { return v.common.type == wire::PacketType::kReset; });
  };
  for (int i = 0; i < 200'000 && !saw_reset(); ++i) step();
  EXPECT_TRUE(saw_reset());

  // What the exchange must have shown.
  for (uint8_t t = 1; t <= 7; ++t) {
    EXPECT_TRUE(log->Saw([t](const wire::View& v) { return static_cast<uint8_t>(v.common.type) == t; }))
        << "no packet of type " << int{t};
  }
  EXPECT_TRUE(log->Saw([](const wire::View& v) { return (v.common.flags & wire::kFlagRetransmit) != 0; }));
  EXPECT_TRUE(log->Saw([](const wire::View& v) {
    return v.common.type == wire::PacketType::kAck && (v.ack.sack[0] | v.ack.sack[1]) != 0;
  }));
  EXPECT_TRUE(log->Saw([](const wire::View& v) { return v.msg.offer_pid != 0; }));
  EXPECT_TRUE(log->Saw([](const wire::View& v) {
    return v.common.type == wire::PacketType::kData && (v.msg.msg_flags & wire::kMsgBundle) != 0;
  })) << "no bundle";
  for (uint8_t op = 1; op <= 6; ++op) {
    EXPECT_TRUE(log->Saw([op](const wire::View& v) {
      return v.common.type == wire::PacketType::kRma && static_cast<uint8_t>(v.rma.op) == op;
    })) << "no RMA op " << int{op};
  }

  // Closing A's device writes the rest of the capture.
  a->reset();
  b->reset();
  port_a.reset();
  const std::vector<Row> want = log->rows();
  log.reset();
  dev_a->reset();

  std::vector<std::string> args = {"-T", "fields", "-E", "separator=/t", "-E", "occurrence=a",
                                   "-E", "aggregator=,"};
  for (const char* f : kFields) {
    args.push_back("-e");
    args.push_back(f);
  }
  const wireshark::TsharkResult got = wireshark::RunTshark(tshark, path, args);
  ASSERT_EQ(got.status, 0) << got.command;
  std::vector<std::string> lines = absl::StrSplit(got.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), want.size()) << "packets: tshark read " << lines.size()
                                       << ", the engine logged " << want.size();
  int mismatches = 0;
  for (size_t p = 0; p < lines.size() && mismatches < 20; ++p) {
    const std::vector<std::string> cols = absl::StrSplit(lines[p], '\t');
    ASSERT_EQ(cols.size(), kNumFields) << lines[p];
    for (size_t i = 0; i < kNumFields; ++i) {
      if (!Same(kFields[i], want[p][i], cols[i])) {
        ++mismatches;
        ADD_FAILURE() << "packet " << p + 1 << " " << kFields[i] << ": tshark '" << cols[i]
                      << "', the engine '" << want[p][i] << "'";
      }
    }
  }

  // A byte after the common header of the first checksummed packet flipped
  // in a copy of the capture: the dissector's CRC-32C says Bad there, and
  // what it said before elsewhere (over loopback, whose frames come through
  // memory, the packets after the handshake are UNCHECKED: Unverified).
  const size_t kCrcStatus = static_cast<size_t>(
      std::find(kFields, kFields + kNumFields, std::string_view("bypass.crc.status")) - kFields);
  ASSERT_LT(kCrcStatus, kNumFields);
  std::ifstream in_file(path, std::ios::binary);
  std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in_file),
                             std::istreambuf_iterator<char>()};
  size_t off = 24;  // the file's header
  size_t bad = 0;
  for (size_t p = 0; p < want.size(); ++p) {
    uint32_t caplen;
    ASSERT_LE(off + 16, bytes.size());
    std::memcpy(&caplen, bytes.data() + off + 8, 4);
    if (bad == 0 && want[p][kCrcStatus] == "1" && caplen > wire::kExtOffset) {
      bytes[off + 16 + wire::kExtOffset] ^= 0x40;
      bad = p + 1;
    }
    off += 16 + caplen;
  }
  ASSERT_NE(bad, 0u);
  const std::string corrupt_path = path + ".corrupt";
  std::ofstream(corrupt_path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  const wireshark::TsharkResult crc =
      wireshark::RunTshark(tshark, corrupt_path, {"-T", "fields", "-e", "bypass.crc.status"});
  ASSERT_EQ(crc.status, 0) << crc.command;
  const std::vector<std::string> statuses = absl::StrSplit(crc.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(statuses.size(), want.size());
  for (size_t p = 0; p < statuses.size(); ++p) {
    if (p + 1 == bad) {
      EXPECT_EQ(statuses[p], "0") << "packet " << p + 1;
    } else if (!want[p][kCrcStatus].empty()) {
      EXPECT_EQ(statuses[p], want[p][kCrcStatus]) << "packet " << p + 1;
    } else {
      EXPECT_NE(statuses[p], "0") << "packet " << p + 1;
    }
  }
  std::remove(corrupt_path.c_str());

  // The dissector on hostile bytes: each record again ten times with a few
  // bytes after the magic and length set at random (the heuristic still
  // takes them), some cut short. tshark decodes them all without a Lua error.
  std::vector<uint8_t> mutated(bytes.begin(), bytes.begin() + 24);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  const auto next = [&x](uint64_t below) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x % below;
  };
  size_t records = 0;
  for (size_t rec = 24; rec + 16 <= bytes.size();) {
    uint32_t caplen;
    std::memcpy(&caplen, bytes.data() + rec + 8, 4);
    const uint8_t* frame = bytes.data() + rec + 16;
    rec += 16 + caplen;
    for (int k = 0; k < 10; ++k) {
      std::vector<uint8_t> m(frame, frame + caplen);
      for (uint64_t flips = 1 + next(6); flips > 0; --flips) {
        const size_t i = wire::kCommonOffset + 2 + next(m.size() - wire::kCommonOffset - 2);
        if (i < wire::kCommonOffset + 28 || i >= wire::kCommonOffset + 30) m[i] = next(256);
      }
      if (next(4) == 0) m.resize(wire::kExtOffset + next(m.size() - wire::kExtOffset + 1));
      const uint32_t header[4] = {1'800'000'000, 0, static_cast<uint32_t>(m.size()),
                                  static_cast<uint32_t>(m.size())};
      const auto* h = reinterpret_cast<const uint8_t*>(header);
      mutated.insert(mutated.end(), h, h + sizeof(header));
      mutated.insert(mutated.end(), m.begin(), m.end());
      ++records;
    }
  }
  const std::string mutated_path = path + ".mutated";
  std::ofstream(mutated_path, std::ios::binary)
      .write(reinterpret_cast<const char*>(mutated.data()),
             static_cast<std::streamsize>(mutated.size()));
  const wireshark::TsharkResult verbose = wireshark::RunTshark(tshark, mutated_path, {"-V"});
  ASSERT_EQ(verbose.status, 0) << verbose.command;
  const size_t lua_error = verbose.out.find("Lua Error");
  EXPECT_EQ(lua_error, std::string::npos)
      << verbose.out.substr(lua_error == std::string::npos ? 0 : lua_error, 400);
  size_t frames = verbose.out.rfind("Frame ", 0) == 0 ? 1 : 0;
  for (size_t f = verbose.out.find("\nFrame "); f != std::string::npos;
       f = verbose.out.find("\nFrame ", f + 1)) {
    ++frames;
  }
  EXPECT_EQ(frames, records);
  EXPECT_EQ(records, want.size() * 10);
  std::remove(mutated_path.c_str());
  if (outputs == nullptr) std::remove(path.c_str());
}

}  // namespace
}  // namespace bypass::rdm
