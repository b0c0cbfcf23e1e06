// 64 processes on one registry directory exchange frames all-to-all, with
// sequence numbers, while the parent SIGKILLs them one at a time; the
// survivors must still get everything from each other and an unbroken
// prefix from each of the dead. Each process checks what it received and
// exits 0 or 1; the parent checks the exits.
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "driver/device.h"
#include "driver/net_headers.h"
#include "driver/shm/area.h"
#include "driver/shm/shm_device.h"
#include "driver/uri.h"
#include "gtest/gtest.h"

namespace bypass::driver::shm {
namespace {

constexpr int kProcs = 64;
constexpr int kKilled = 56;  // children 0..kKilled-1 are killed, in order
constexpr uint16_t kBasePort = 20000;
constexpr Ipv4Address kIp{0x0a630001};  // 10.99.0.1: one host, one address
constexpr uint32_t kMagic = 0x6d616e79;  // "many"
constexpr useconds_t kRoundUs = 10'000;  // one frame to each peer per round

#pragma pack(push, 1)
struct Payload {
  uint32_t magic;
  uint16_t src;
  uint16_t end;  // 1: the last frame from src; seq = how many data frames came before
  uint64_t seq;
  uint8_t pad[8];
};
#pragma pack(pop)

volatile sig_atomic_t stopping = 0;
void OnStop(int) { stopping = 1; }

std::string ProcStatus(const char* key) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) == 0) return line;
  }
  return "";
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) names.emplace_back(e->d_name);
    closedir(d);
  }
  return names;
}

// One child's life. Returns its exit code.
int Child(int me, const std::string& dir, int ready_fd) {
  signal(SIGUSR1, OnStop);
  alarm(90);  // a hang kills the child; the parent reports it
  DeviceOptions opts;
  opts.pool_buffers = 512;
  auto opened = shm::Open(*DeviceUri::Parse(absl::StrCat("shm:", dir, ",ip=", kIp.ToString())),
                          opts);
  if (!opened.ok()) {
    std::fprintf(stderr, "child %d: %s\n", me, std::string(opened.status().message()).c_str());
    return 1;
  }
  std::unique_ptr<ShmDevice> dev = *std::move(opened);
  ShmQueue& q = dev->shm_queue();
  if (absl::Status s = q.BindUdpPort(kBasePort + me); !s.ok()) {
    std::fprintf(stderr, "child %d: %s\n", me, std::string(s.message()).c_str());
    return 1;
  }
  std::vector<uint64_t> next_seq(kProcs, 0), recv_next(kProcs, 0);
  std::vector<bool> end_sent(kProcs, false), end_seen(kProcs, false);
  int errors = 0;
  auto receive = [&] {
    Packet* out[64];
    for (uint16_t n; (n = q.RxBurst(absl::MakeSpan(out))) > 0;) {
      for (uint16_t k = 0; k < n; ++k) {
        std::optional<ParsedUdpFrame> f = ParseUdpFrame({out[k]->data, out[k]->len});
        Payload p;
        if (!f || f->payload.size() != sizeof(p)) {
          ++errors;
          continue;
        }
        std::memcpy(&p, f->payload.data(), sizeof(p));
        if (p.magic != kMagic || p.src >= kProcs || p.seq != recv_next[p.src] ||
            end_seen[p.src]) {
          if (errors++ < 5) {
            std::fprintf(stderr, "child %d: from %u seq %llu, expected %llu\n", me, p.src,
                         static_cast<unsigned long long>(p.seq),
                         static_cast<unsigned long long>(recv_next[p.src]));
          }
          continue;
        }
        if (p.end) {
          end_seen[p.src] = true;
        } else {
          ++recv_next[p.src];
        }
      }
      q.FreeBulk(absl::MakeConstSpan(out, n));
    }
  };
  // Sends one frame to `to`; true if it was taken.
  auto send = [&](int to, bool end) {
    Packet* pkt;
    if (!q.AllocBulk({&pkt, 1})) return false;
    const Payload p{kMagic, static_cast<uint16_t>(me), end, next_seq[to], {}};
    UdpFlow flow;
    flow.src_mac = dev->info().mac;
    flow.dst_mac = flow.src_mac;
    flow.src_ip = kIp;
    flow.dst_ip = kIp;
    flow.src_port = kBasePort + me;
    flow.dst_port = kBasePort + to;
    pkt->len = static_cast<uint32_t>(
        BuildUdpFrame(flow, {reinterpret_cast<const uint8_t*>(&p), sizeof(p)},
                      {pkt->data, pkt->capacity}, UdpChecksumFill::kNone));
    if (q.TxBurst({&pkt, 1}) == 1) return true;
    q.FreeBulk({&pkt, 1});
    return false;
  };

  // Everyone bound before anyone is killed.
  for (int j = 0; j < kProcs; ++j) {
    while (!q.Reaches(kIp, kBasePort + j)) {
      receive();
      usleep(1000);
    }
  }
  if (write(ready_fd, "r", 1) != 1) return 1;
  close(ready_fd);

  for (;;) {
    receive();
    if (!stopping) {
      for (int j = 0; j < kProcs; ++j) {
        if (j != me && q.Reaches(kIp, kBasePort + j) && send(j, false)) ++next_seq[j];
      }
    } else {
      bool all_sent = true;
      for (int j = 0; j < kProcs; ++j) {
        if (j == me || end_sent[j]) continue;
        if (!q.Reaches(kIp, kBasePort + j) || send(j, true)) {
          end_sent[j] = true;
        } else {
          all_sent = false;
        }
      }
      bool all_seen = true;
      for (int j = kKilled; j < kProcs; ++j) all_seen = all_seen && (j == me || end_seen[j]);
      if (all_sent && all_seen) break;
    }
    usleep(kRoundUs);
  }
  receive();
  for (int j = 0; j < kProcs; ++j) {
    if (j != me && recv_next[j] == 0) {
      std::fprintf(stderr, "child %d: nothing from %d\n", me, j);
      ++errors;
    }
  }
  if (me == kProcs - 1) {
    const ShmCounters& c = q.counters();
    std::fprintf(stderr,
                 "child %d: sent %llu, received %llu; dropped to dead peers %llu, unknown %llu, "
                 "no lane %llu; %s; %s; %s\n",
                 me, static_cast<unsigned long long>(q.stats().tx_packets),
                 static_cast<unsigned long long>(q.stats().rx_packets),
                 static_cast<unsigned long long>(c.tx_dead_peer),
                 static_cast<unsigned long long>(c.tx_unknown_dest),
                 static_cast<unsigned long long>(c.tx_no_lane), ProcStatus("VmRSS").c_str(),
                 ProcStatus("RssAnon").c_str(), ProcStatus("RssShmem").c_str());
  }
  return errors == 0 ? 0 : 1;
}

TEST(ShmManyTest, AllToAllWhileProcessesAreKilled) {
  std::string dir =
      absl::StrCat(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp", "/shm_many_XXXXXX");
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  std::vector<pid_t> pids;
  for (int i = 0; i < kProcs; ++i) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(ready[0]);
      _exit(Child(i, dir, ready[1]));
    }
    pids.push_back(pid);
  }
  close(ready[1]);
  int got = 0;
  while (got < kProcs) {
    pollfd p{ready[0], POLLIN, 0};
    if (poll(&p, 1, 30'000) != 1) break;
    char buf[kProcs];
    const ssize_t n = read(ready[0], buf, sizeof(buf));
    if (n <= 0) break;
    got += static_cast<int>(n);
  }
  close(ready[0]);
  EXPECT_EQ(got, kProcs) << "not every child bound and saw every other";
  usleep(200'000);
  for (int i = 0; i < kKilled; ++i) {
    kill(pids[i], SIGKILL);
    int status = 0;
    ASSERT_EQ(waitpid(pids[i], &status, 0), pids[i]);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "child " << i << " ended before it was killed: status " << status;
    usleep(40'000);
  }
  usleep(200'000);
  for (int i = kKilled; i < kProcs; ++i) kill(pids[i], SIGUSR1);
  for (int i = kKilled; i < kProcs; ++i) {
    int status = 0;
    ASSERT_EQ(waitpid(pids[i], &status, 0), pids[i]);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "survivor " << i << ": status " << status;
  }
  // Nothing of the children is left once one more device has opened.
  DeviceOptions opts;
  opts.pool_buffers = 8;
  auto last = shm::Open(*DeviceUri::Parse("shm:" + dir), opts);
  ASSERT_TRUE(last.ok()) << last.status();
  std::vector<std::string> left = Entries(kShmDir);
  for (pid_t pid : pids) {
    const std::string prefix = absl::StrCat(AreaPrefix(geteuid()), pid, ".");
    for (const std::string& name : left) {
      EXPECT_NE(name.rfind(prefix, 0), 0u) << "an area of pid " << pid << " is left: " << name;
    }
  }
  for (const std::string& name : Entries(dir)) {
    EXPECT_EQ(name.find(':'), std::string::npos) << "a link is left in " << dir << ": " << name;
  }
}

}  // namespace
}  // namespace bypass::driver::shm
