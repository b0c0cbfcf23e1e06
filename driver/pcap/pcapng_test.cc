// pcapng output (`pcap=FILE.pcapng`, `pcap_format=pcapng`): what Debian's
// tshark reads from it, an interface per capturing device (its URI as the
// name) and each record's direction in its flags and in its comment.
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "driver/device.h"
#include "driver/net_headers.h"
#include "driver/pcap/capture_file.h"
#include "gtest/gtest.h"

namespace bypass::driver::pcap {
namespace {

constexpr char kTshark[] = "/usr/bin/tshark";

std::string TempPath(const std::string& name) {
  const char* dir = getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

// tshark's fields of every record, one line each (HOME in the test's
// directory: tshark writes its profile there).
std::vector<std::vector<std::string>> Tshark(const std::string& path,
                                             const std::vector<std::string>& fields) {
  std::string cmd = absl::StrCat("HOME=", TempPath(""), " ", kTshark, " -n -r ", path,
                                 " -T fields -E separator=/t");
  for (const std::string& f : fields) absl::StrAppend(&cmd, " -e ", f);
  FILE* p = popen((cmd + " 2>/dev/null").c_str(), "r");
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
  EXPECT_EQ(pclose(p), 0) << cmd;
  std::vector<std::vector<std::string>> rows;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    rows.push_back(absl::StrSplit(line, '\t'));
  }
  return rows;
}

std::unique_ptr<Device> MustOpen(const std::string& uri) {
  absl::StatusOr<std::unique_ptr<Device>> d = OpenDevice(uri);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *std::move(d) : nullptr;
}

// n frames from `from` to `to` (UDP 7000 -> 7001), sent in one burst.
void Send(Device& from, const Device& to, size_t n) {
  std::vector<Packet*> pkts(n);
  ASSERT_TRUE(from.queue(0).AllocBulk({pkts.data(), n}));
  const UdpFlow flow{from.info().mac, to.info().mac, from.info().ipv4, to.info().ipv4, 7000, 7001};
  const std::vector<uint8_t> payload(64, 0xab);
  for (Packet* p : pkts) {
    p->len = static_cast<uint32_t>(
        BuildUdpFrame(flow, payload, {p->data, p->capacity}, UdpChecksumFill::kCompute));
  }
  ASSERT_EQ(from.queue(0).TxBurst({pkts.data(), n}), n);
}

void Drain(Device& dev, size_t want) {
  Packet* pkts[32];
  size_t got = 0;
  for (int i = 0; i < 1000 && got < want; ++i) {
    const uint16_t n = dev.queue(0).RxBurst(pkts);
    got += n;
    dev.queue(0).FreeBulk({pkts, n});
  }
  EXPECT_EQ(got, want);
}

TEST(PcapngTest, TsharkReadsInterfacesDirectionsAndComments) {
  ASSERT_EQ(access(kTshark, X_OK), 0) << "tshark is missing: tools/setup.sh installs it";
  const std::string path = TempPath("two.pcapng");
  // Two devices capturing into one file: two interfaces.
  auto a = MustOpen(absl::StrCat("loopback:pcapng-seg,ip=10.1.0.1,pcap=", path));
  auto b = MustOpen(absl::StrCat("loopback:pcapng-seg,ip=10.1.0.2,pcap=", path));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  Send(*a, *b, 3);
  Drain(*b, 3);
  Send(*b, *a, 2);
  Drain(*a, 2);
  a.reset();
  b.reset();  // the last one closes the file
  const auto rows = Tshark(path, {"frame.interface_id", "frame.interface_name",
                                  "frame.packet_flags_direction", "frame.comment", "ip.src",
                                  "udp.dstport", "frame.len"});
  // a: 3 out; b: 3 in; b: 2 out; a: 2 in.
  ASSERT_EQ(rows.size(), 10u);
  size_t out_a = 0, in_a = 0, out_b = 0, in_b = 0;
  for (const auto& r : rows) {
    ASSERT_EQ(r.size(), 7u);
    const bool on_a = r[0] == "0";
    EXPECT_TRUE(r[0] == "0" || r[0] == "1") << r[0];
    EXPECT_EQ(r[1], on_a ? "loopback:pcapng-seg,ip=10.1.0.1" : "loopback:pcapng-seg,ip=10.1.0.2");
    // Wireshark prints the direction flag as 0x1 (inbound) / 0x2 (outbound).
    const bool inbound = r[2] == "0x00000001" || r[2] == "1" || r[2] == "0x1";
    const bool outbound = r[2] == "0x00000002" || r[2] == "2" || r[2] == "0x2";
    ASSERT_TRUE(inbound || outbound) << "direction '" << r[2] << "'";
    EXPECT_EQ(r[3], inbound ? "bypass rx queue 0" : "bypass tx queue 0");
    // Sent by a (10.1.0.1) or b: outbound on the sender's interface.
    EXPECT_EQ(outbound, (r[4] == "10.1.0.1") == on_a) << r[4];
    EXPECT_EQ(r[5], "7001");
    EXPECT_EQ(r[6], "106");  // 42 bytes of headers and 64 of payload
    (on_a ? (outbound ? out_a : in_a) : (outbound ? out_b : in_b))++;
  }
  EXPECT_EQ(out_a, 3u);
  EXPECT_EQ(in_b, 3u);
  EXPECT_EQ(out_b, 2u);
  EXPECT_EQ(in_a, 2u);
  std::remove(path.c_str());
}

TEST(PcapngTest, FormatOptionAndSnaplen) {
  ASSERT_EQ(access(kTshark, X_OK), 0) << "tshark is missing: tools/setup.sh installs it";
  // pcap_format=pcapng on a file not named .pcapng; snaplen cuts records.
  const std::string path = TempPath("named.cap");
  auto a = MustOpen(
      absl::StrCat("loopback:pcapng-fmt,pcap=", path, ",pcap_format=pcapng,pcap_snaplen=64"));
  auto b = MustOpen("loopback:pcapng-fmt");
  Send(*a, *b, 1);
  a.reset();
  const auto rows = Tshark(path, {"frame.cap_len", "frame.len", "frame.comment"});
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0], (std::vector<std::string>{"64", "106", "bypass tx queue 0"}));
  FILE* f = std::fopen(path.c_str(), "rb");
  uint32_t magic = 0;
  ASSERT_EQ(std::fread(&magic, 4, 1, f), 1u);
  std::fclose(f);
  EXPECT_EQ(magic, 0x0A0D0D0Au) << "a pcapng section header";
  std::remove(path.c_str());
  // And the other way: a .pcapng file forced to classic pcap.
  absl::StatusOr<CaptureOptions> o = ParseCaptureSpec("/tmp/x.pcapng,format=pcap");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->format, CaptureFormat::kPcap);
  EXPECT_EQ(ParseCaptureSpec("/tmp/x.pcapng")->format, CaptureFormat::kPcapng);
  const absl::StatusOr<std::unique_ptr<Device>> bad =
      OpenDevice("loopback:pcapng-bad,pcap=/tmp/x,pcap_format=pcap2");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "pcap_format=pcap2: expected pcap or pcapng");
}

}  // namespace
}  // namespace bypass::driver::pcap
