// The capture decorator: the file's format, what is recorded (frames sent
// that the device took, frames received), the size budget, snaplen, and the
// errors of the URI keys and of a file that cannot be written.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "driver/device.h"
#include "driver/net_headers.h"
#include "driver/pcap/capture_file.h"
#include "driver/pcap/pcap_device.h"
#include "gtest/gtest.h"

namespace bypass::driver::pcap {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

uint32_t U32(const std::vector<uint8_t>& b, size_t at) {
  uint32_t v;
  std::memcpy(&v, b.data() + at, 4);
  return v;
}

// A record of a capture file, as the test reads it back.
struct Record {
  uint32_t orig_len = 0;
  std::vector<uint8_t> bytes;
};

// Checks the global header and returns the records.
std::vector<Record> ReadCapture(const std::string& path, uint32_t snaplen = kMaxSnaplen) {
  const std::vector<uint8_t> b = ReadFile(path);
  EXPECT_GE(b.size(), kPcapHeaderBytes);
  if (b.size() < kPcapHeaderBytes) return {};
  EXPECT_EQ(U32(b, 0), 0xa1b23c4du);       // nanosecond timestamps, host order
  EXPECT_EQ(U32(b, 4), 2u | (4u << 16));  // version 2.4
  EXPECT_EQ(U32(b, 16), snaplen);
  EXPECT_EQ(U32(b, 20), 1u);  // LINKTYPE_ETHERNET
  std::vector<Record> out;
  size_t at = kPcapHeaderBytes;
  while (at + kRecordHeaderBytes <= b.size()) {
    const uint32_t caplen = U32(b, at + 8);
    Record r;
    r.orig_len = U32(b, at + 12);
    EXPECT_GE(U32(b, at), 1'000'000'000u);  // a wall-clock time
    EXPECT_LT(U32(b, at + 4), 1'000'000'000u);
    at += kRecordHeaderBytes;
    EXPECT_LE(at + caplen, b.size());
    if (at + caplen > b.size()) break;
    r.bytes.assign(b.begin() + at, b.begin() + at + caplen);
    out.push_back(std::move(r));
    at += caplen;
  }
  EXPECT_EQ(at, b.size()) << "trailing bytes";
  return out;
}

std::unique_ptr<Device> MustOpen(const std::string& uri, DeviceOptions opts = {}) {
  absl::StatusOr<std::unique_ptr<Device>> d = OpenDevice(uri, opts);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *std::move(d) : nullptr;
}

// Builds n frames from `from` to `to` whose payload is `fill`+i, and sends
// them in one burst; returns what TxBurst took (the rest are freed).
uint16_t SendBurst(Device& from, const Device& to, size_t n, size_t payload_len, uint8_t fill) {
  std::vector<Packet*> pkts(n);
  EXPECT_TRUE(from.queue(0).AllocBulk({pkts.data(), n}));
  for (size_t i = 0; i < n; ++i) {
    const UdpFlow flow{from.info().mac, to.info().mac, from.info().ipv4, to.info().ipv4, 7000,
                       7001};
    std::vector<uint8_t> payload(payload_len, static_cast<uint8_t>(fill + i));
    pkts[i]->len = static_cast<uint32_t>(BuildUdpFrame(flow, payload, {pkts[i]->data,
                                                                       pkts[i]->capacity},
                                                       UdpChecksumFill::kCompute));
  }
  const uint16_t took = from.queue(0).TxBurst({pkts.data(), n});
  if (took < n) from.queue(0).FreeBulk({pkts.data() + took, n - took});
  return took;
}

size_t Drain(Device& dev) {
  size_t total = 0;
  Packet* pkts[32];
  while (uint16_t n = dev.queue(0).RxBurst(pkts)) {
    total += n;
    dev.queue(0).FreeBulk({pkts, n});
  }
  return total;
}

// The byte a frame's payload is filled with (after 42 bytes of headers).
uint8_t Fill(const Record& r) { return r.bytes.size() > kUdpFrameHeaderBytes ? r.bytes[42] : 0; }

TEST(PcapTest, RecordsWhatIsSentAndReceivedInOrder) {
  const std::string path = TempPath("order.pcap");
  auto a = MustOpen(absl::StrCat("loopback:pcap-order,pcap=", path));
  auto b = MustOpen("loopback:pcap-order");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(SendBurst(*a, *b, 3, 100, 0x10), 3);
  EXPECT_EQ(Drain(*b), 3u);
  EXPECT_EQ(SendBurst(*b, *a, 2, 200, 0x20), 2);
  EXPECT_EQ(Drain(*a), 2u);
  EXPECT_EQ(SendBurst(*a, *b, 1, 50, 0x30), 1);
  a.reset();  // flushes and closes
  const std::vector<Record> recs = ReadCapture(path);
  ASSERT_EQ(recs.size(), 6u);
  const uint8_t fills[] = {0x10, 0x11, 0x12, 0x20, 0x21, 0x30};
  const uint32_t lens[] = {142, 142, 142, 242, 242, 92};
  for (size_t i = 0; i < recs.size(); ++i) {
    EXPECT_EQ(Fill(recs[i]), fills[i]) << i;
    EXPECT_EQ(recs[i].orig_len, lens[i]) << i;
    EXPECT_EQ(recs[i].bytes.size(), lens[i]) << i;
    const std::optional<ParsedUdpFrame> f = ParseUdpFrame(recs[i].bytes);
    ASSERT_TRUE(f.has_value()) << i;
  }
  std::remove(path.c_str());
}

TEST(PcapTest, FramesTheDeviceDidNotTakeAreNotRecorded) {
  const std::string path = TempPath("full.pcap");
  DeviceOptions small;
  small.ring_size = 8;
  auto a = MustOpen(absl::StrCat("loopback:pcap-full,pcap=", path), small);
  auto b = MustOpen("loopback:pcap-full", small);
  ASSERT_NE(b, nullptr);
  const uint16_t took = SendBurst(*a, *b, 20, 64, 0x40);
  EXPECT_GT(took, 0);
  EXPECT_LT(took, 20);
  const size_t got = Drain(*b);
  EXPECT_EQ(got, took);
  a.reset();
  const std::vector<Record> recs = ReadCapture(path);
  ASSERT_EQ(recs.size(), took);
  for (size_t i = 0; i < recs.size(); ++i) EXPECT_EQ(Fill(recs[i]), 0x40 + i);
  std::remove(path.c_str());
}

TEST(PcapTest, TheFileStaysWithinItsBudget) {
  const std::string path = TempPath("budget.pcap");
  auto a = MustOpen(absl::StrCat("loopback:pcap-budget,pcap=", path, ",pcap_max_mb=1"));
  auto b = MustOpen("loopback:pcap-budget");
  ASSERT_NE(a, nullptr);
  // About 1.5 MiB of frames.
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(SendBurst(*a, *b, 32, 1000, 0), 32);
    Drain(*b);
  }
  auto* cap = static_cast<CaptureDevice*>(a.get());
  cap->capture_queue(0).Flush();
  cap->file().Drain();
  const CaptureCounters c = cap->file().counters();
  EXPECT_GT(c.records, 0u);
  EXPECT_GT(c.dropped_full, 0u);
  EXPECT_EQ(c.records + c.dropped_full, 50u * 32);
  a.reset();
  const std::vector<Record> recs = ReadCapture(path);
  EXPECT_EQ(recs.size(), c.records);
  EXPECT_LE(ReadFile(path).size(), 1u << 20);
  EXPECT_GT(ReadFile(path).size(), (1u << 20) - 1100);
  std::remove(path.c_str());
}

TEST(PcapTest, SnaplenCutsRecordsAndKeepsTheFrameLength) {
  const std::string path = TempPath("snap.pcap");
  auto a = MustOpen(absl::StrCat("loopback:pcap-snap,pcap=", path, ",pcap_snaplen=100"));
  auto b = MustOpen("loopback:pcap-snap");
  EXPECT_EQ(SendBurst(*a, *b, 2, 500, 0x50), 2);
  a.reset();
  const std::vector<Record> recs = ReadCapture(path, 100);
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].bytes.size(), 100u);
  EXPECT_EQ(recs[0].orig_len, 542u);
  std::remove(path.c_str());
}

TEST(PcapTest, OneFilePerPathInAProcessAndPidExpansion) {
  const std::string pattern = TempPath("shared-%p.pcap");
  const std::string path = TempPath(absl::StrCat("shared-", getpid(), ".pcap"));
  auto a = MustOpen(absl::StrCat("loopback:pcap-shared,pcap=", pattern));
  auto b = MustOpen(absl::StrCat("loopback:pcap-shared,pcap=", pattern));
  EXPECT_EQ(SendBurst(*a, *b, 1, 10, 0x60), 1);
  EXPECT_EQ(Drain(*b), 1u);
  a.reset();
  b.reset();
  // a's send and b's receive of it, in one file.
  const std::vector<Record> recs = ReadCapture(path);
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].bytes, recs[1].bytes);
  std::remove(path.c_str());
}

TEST(PcapTest, ErrorsAreOneLine) {
  const struct {
    std::string uri;
    std::string says;
  } cases[] = {
      {"loopback:pcap-err,pcap=/nonexistent-dir/x.pcap",
       "pcap=/nonexistent-dir/x.pcap: cannot open for writing: No such file or directory"},
      {"loopback:pcap-err,pcap=", "needs both a key and a value"},
      {"loopback:pcap-err,pcap_max_mb=3", "need pcap=FILE"},
      {"loopback:pcap-err,pcap=/tmp/x.pcap,pcap_max_mb=0", "pcap_max_mb=0: expected"},
      {"loopback:pcap-err,pcap=/tmp/x.pcap,pcap_snaplen=10", "pcap_snaplen=10: expected"},
      {"loopback:pcap-err,pcap=/tmp/x.pcap,pcap_snaplen=x", "pcap_snaplen=x: expected"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<std::unique_ptr<Device>> d = OpenDevice(c.uri);
    ASSERT_FALSE(d.ok()) << c.uri;
    const std::string msg(d.status().message());
    EXPECT_NE(msg.find(c.says), std::string::npos) << c.uri << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

// The kernel UDP device carries payloads only: what it receives is recorded
// with the headers it synthesizes, the real addresses and ports.
TEST(PcapTest, KernelUdpFramesCarryTheRealAddressesAndPorts) {
  const std::string path = TempPath("udp.pcap");
  auto a = MustOpen(absl::StrCat("udp:127.0.0.1,pcap=", path));
  auto b = MustOpen("udp:127.0.0.1");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  // Ports of this process alone (another process may hold any fixed one).
  const uint16_t pa = static_cast<uint16_t>(20000 + (getpid() % 20000) * 2);
  const uint16_t pb = static_cast<uint16_t>(pa + 1);
  ASSERT_TRUE(a->queue(0).BindUdpPort(pa).ok());
  ASSERT_TRUE(b->queue(0).BindUdpPort(pb).ok());
  const auto send = [](Device& from, uint16_t sport, uint16_t dport, uint8_t fill) {
    Packet* p = nullptr;
    ASSERT_TRUE(from.queue(0).AllocBulk({&p, 1}));
    const UdpFlow flow{from.info().mac, MacAddress{}, from.info().ipv4, from.info().ipv4, sport,
                       dport};
    const std::vector<uint8_t> payload(40, fill);
    p->len = static_cast<uint32_t>(
        BuildUdpFrame(flow, payload, {p->data, p->capacity}, UdpChecksumFill::kNone));
    ASSERT_EQ(from.queue(0).TxBurst({&p, 1}), 1);
  };
  const auto receive = [](Device& at) {
    Packet* p = nullptr;
    for (int i = 0; i < 1'000'000; ++i) {
      if (at.queue(0).RxBurst({&p, 1}) == 1) {
        at.queue(0).FreeBulk({&p, 1});
        return true;
      }
    }
    return false;
  };
  send(*a, pa, pb, 0x70);
  ASSERT_TRUE(receive(*b));
  send(*b, pb, pa, 0x71);
  ASSERT_TRUE(receive(*a));
  a.reset();
  const std::vector<Record> recs = ReadCapture(path);
  ASSERT_EQ(recs.size(), 2u);
  const uint16_t ports[2][2] = {{pa, pb}, {pb, pa}};
  for (size_t i = 0; i < 2; ++i) {
    const std::optional<ParsedUdpFrame> f = ParseUdpFrame(recs[i].bytes);
    ASSERT_TRUE(f.has_value()) << i;
    EXPECT_EQ(f->flow.src_ip.ToString(), "127.0.0.1");
    EXPECT_EQ(f->flow.dst_ip.ToString(), "127.0.0.1");
    EXPECT_EQ(f->flow.src_port, ports[i][0]) << i;
    EXPECT_EQ(f->flow.dst_port, ports[i][1]) << i;
    EXPECT_EQ(f->payload.size(), 40u);
    EXPECT_EQ(f->payload[0], 0x70 + i);
  }
  std::remove(path.c_str());
}

TEST(PcapTest, ACompositeIsCapturedOnce) {
  absl::StatusOr<std::unique_ptr<Device>> d =
      OpenDevice("shm:pcap=/tmp/a.pcap+udp:pcap=/tmp/b.pcap");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(std::string(d.status().message()).find("pcap= in both parts"), std::string::npos)
      << d.status();
}

TEST(PcapTest, ParseCaptureSpec) {
  absl::StatusOr<CaptureOptions> o = ParseCaptureSpec("/tmp/a.pcap,max_mb=5,snaplen=128");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->path, "/tmp/a.pcap");
  EXPECT_EQ(o->max_bytes, 5u << 20);
  EXPECT_EQ(o->snaplen, 128u);
  o = ParseCaptureSpec("/tmp/b.pcap");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->max_bytes, kDefaultMaxBytes);
  EXPECT_EQ(o->snaplen, kMaxSnaplen);
  EXPECT_FALSE(ParseCaptureSpec("").ok());
  EXPECT_FALSE(ParseCaptureSpec("/tmp/a,max_mb").ok());
  EXPECT_FALSE(ParseCaptureSpec("/tmp/a,foo=1").ok());
  EXPECT_FALSE(ParseCaptureSpec("/tmp/a,max_mb=0").ok());
}

}  // namespace
}  // namespace bypass::driver::pcap
