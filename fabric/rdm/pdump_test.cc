// DPDK's pdump against bypass's own EAL (BYPASS_PDUMP=1, driver/dpdk/
// pdump.h): this process opens a net_ring port and runs two RDM endpoints
// over it; Debian's dpdk-pdump, a secondary process on this process's file
// prefix, captures the port's traffic into a pcap that tshark decodes with
// tools/wireshark/bypass.lua. Needs root, 2 MiB hugepages and dpdk-pdump
// (skipped, saying which, without them). Also: the hugepage files of a
// killed BYPASS_PDUMP process are removed, those held kept.
#include <signal.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "driver/clock.h"
#include "driver/device.h"
#include "fabric/rdm/rdm.h"
#include "gtest/gtest.h"
#include "tools/wireshark/tshark.h"

extern char** environ;

namespace bypass::rdm {
namespace {

constexpr char kPdump[] = "/usr/bin/dpdk-pdump";

off_t FileSize(const std::string& path) {
  struct stat st{};
  return stat(path.c_str(), &st) == 0 ? st.st_size : 0;
}

// Two endpoints on one port, messages both ways.
struct Exchange {
  std::unique_ptr<Endpoint> a, b;
  PeerId a_to_b, b_to_a;
  std::vector<uint8_t> in = std::vector<uint8_t>(4096);
  uint64_t received = 0;

  // One message each way, progressed until both arrived.
  void RoundTrip() {
    const std::vector<uint8_t> msg(1000, static_cast<uint8_t>(received));
    ASSERT_EQ(a->PostRecv({.buf = in.data(), .len = in.size()}), Result::kOk);
    ASSERT_EQ(b->PostRecv({.buf = in.data(), .len = in.size()}), Result::kOk);
    ASSERT_EQ(a->Send({.dest = a_to_b, .buf = msg.data(), .len = msg.size()}), Result::kOk);
    ASSERT_EQ(b->Send({.dest = b_to_a, .buf = msg.data(), .len = msg.size()}), Result::kOk);
    size_t done = 0;  // 2 sends and 2 receives
    for (int i = 0; i < 1'000'000 && done < 4; ++i) {
      a->Progress();
      b->Progress();
      Completion c[8];
      done += a->PollCompletions(c) + b->PollCompletions(c);
      ErrorCompletion e[2];
      ASSERT_EQ(a->PollErrors(e) + b->PollErrors(e), 0u) << e[0].message;
    }
    ASSERT_EQ(done, 4u);
    received += 2;
  }
};

TEST(PdumpTest, DpdkPdumpCapturesBypassPacketsThatTheDissectorDecodes) {
  if (getuid() != 0) GTEST_SKIP() << "dpdk-pdump needs root (DPDK's runtime directory)";
  if (access(kPdump, X_OK) != 0) GTEST_SKIP() << kPdump << " is missing (Debian's dpdk package)";
  const std::string tshark = wireshark::FindTshark();
  ASSERT_FALSE(tshark.empty()) << wireshark::kTsharkMissing;
  setenv("BYPASS_PDUMP", "1", 1);
  // Hugepage files as a killed BYPASS_PDUMP process leaves them (no one
  // holds them: removed when the EAL starts) and as a live one keeps them
  // (held with a shared flock, as DPDK holds its own: kept).
  const std::string stale = "/dev/hugepages/bypass-4000000001map_0";
  const std::string live = "/dev/hugepages/bypass-4000000002map_0";
  struct statfs fs{};
  const bool hugetlbfs = statfs("/dev/hugepages", &fs) == 0 && fs.f_type == 0x958458f6;  // HUGETLBFS_MAGIC
  int live_fd = -1;
  if (hugetlbfs) {
    close(open(stale.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600));
    live_fd = open(live.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    ASSERT_GE(live_fd, 0);
    ASSERT_EQ(flock(live_fd, LOCK_SH), 0);
  }
  absl::StatusOr<std::unique_ptr<driver::Device>> dev =
      driver::OpenDevice("dpdk:net_ring_pd0,ip=10.9.2.1");
  if (hugetlbfs) {
    if (dev.ok()) {
      EXPECT_NE(access(stale.c_str(), F_OK), 0) << "a dead process's hugepage file stayed";
      EXPECT_EQ(access(live.c_str(), F_OK), 0) << "a held hugepage file was removed";
    }
    close(live_fd);
    unlink(live.c_str());
    unlink(stale.c_str());
  }
  if (!dev.ok() && dev.status().message().find("hugepages") != std::string_view::npos) {
    GTEST_SKIP() << dev.status();
  }
  ASSERT_TRUE(dev.ok()) << dev.status();
  Port port((*dev)->queue(0), (*dev)->info());
  const driver::Clock& clock = driver::SteadyClock::Get();
  Exchange x;
  x.a = *Endpoint::Create(port, clock, {.udp_port = 7300});
  x.b = *Endpoint::Create(port, clock, {.udp_port = 7301});
  x.a_to_b = *x.a->InsertPeer(x.b->address());
  x.b_to_a = *x.b->InsertPeer(x.a->address());
  x.RoundTrip();  // the handshake, before the capture

  const char* tmp = getenv("TEST_TMPDIR");
  const std::string dir = tmp != nullptr ? tmp : "/tmp";
  // Short: dpdk-pdump cuts a longer rx-dev= path (TEST_TMPDIR's is).
  const std::string pcap = absl::StrCat("/tmp/bypass-pdump-", getpid(), ".pcap");
  const std::string log = dir + "/pdump.log";
  unlink(pcap.c_str());
  std::vector<std::string> args = {
      // An lcore id other than bypass's (0): the capture's mempool has a
      // cache per lcore id, and two processes on one id share it (run with
      // -l 0, 2 captures of 22 held a corrupt frame).
      kPdump, absl::StrCat("--file-prefix=bypass-", getpid()), "--lcores=1@0", "--log-level=*:info",
      "--", "--pdump",
      absl::StrCat("device_id=net_ring_pd0,queue=*,rx-dev=", pcap, ",tx-dev=", pcap)};
  std::vector<char*> argv;
  for (std::string& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&files, 1, 2);
  pid_t pdump = 0;
  ASSERT_EQ(posix_spawn(&pdump, kPdump, &files, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&files);

  // Round trips until the capture holds some (pdump attaches when its EAL
  // is up; net_pcap flushes after each burst), then as many again.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (FileSize(pcap) < 24 + 20 * 1000 && std::chrono::steady_clock::now() < deadline) {
    x.RoundTrip();
    if (waitpid(pdump, nullptr, WNOHANG) == pdump) {
      pdump = 0;
      break;
    }
  }
  for (int i = 0; i < 50; ++i) x.RoundTrip();
  usleep(200'000);  // pdump's loop drains its ring
  if (pdump != 0) {
    kill(pdump, SIGINT);  // pdump disables the capture and closes the file
    int status = 0;
    waitpid(pdump, &status, 0);
  }
  ASSERT_GT(FileSize(pcap), 24 + 20 * 1000) << "dpdk-pdump captured nothing; its log: " << log;

  // Every captured frame is a bypass packet the dissector decodes, its CRC
  // never bad; DATA (type 5) flows both ways.
  const wireshark::TsharkResult r = wireshark::RunTshark(
      tshark, pcap,
      {"-T", "fields", "-e", "udp.srcport", "-e", "bypass.type", "-e", "bypass.crc.status"});
  ASSERT_EQ(r.status, 0) << r.command;
  size_t frames = 0, data_a = 0, data_b = 0;
  for (absl::string_view line : absl::StrSplit(r.out, '\n', absl::SkipEmpty())) {
    const std::vector<std::string> f = absl::StrSplit(line, '\t');
    ASSERT_EQ(f.size(), 3u) << line;
    ++frames;
    EXPECT_TRUE(f[0] == "7300" || f[0] == "7301") << line;
    EXPECT_FALSE(f[1].empty()) << "not decoded as bypass: " << line;
    EXPECT_NE(f[2], "0") << "CRC bad: " << line;
    if (f[1] == "5") ++(f[0] == "7300" ? data_a : data_b);
  }
  EXPECT_GT(data_a, 20u) << r.out.substr(0, 2000);
  EXPECT_GT(data_b, 20u);
  // A frame is captured once on TX and once on RX (net_ring loops the
  // port's TX into its RX): at most twice what was sent.
  EXPECT_LE(frames, 2 * (x.a->counters().tx_packets + x.b->counters().tx_packets));
  if (!HasFailure()) unlink(pcap.c_str());  // else kept to look at
}

}  // namespace
}  // namespace bypass::rdm
