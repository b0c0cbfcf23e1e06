// The engine between two processes over DPDK memif: this binary runs the
// test and, re-executed with BYPASS_RDM_PEER set, the peer. Each side sends
// the other a few hundred tagged and untagged messages of mixed sizes (one
// to many packets) while receiving the other's, posted ahead or arriving
// unexpected, and verifies every payload byte.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "driver/clock.h"
#include "driver/device.h"
#include "fabric/rdm/rdm.h"
#include "gtest/gtest.h"

namespace bypass::rdm {
namespace {

constexpr int kMessages = 300;  // each way
constexpr uint16_t kUdpPort = 4791;
constexpr size_t kSizes[] = {0, 1, 64, 1000, 1400, 1500, 4000, 9000, 30000, 70000, 17};
constexpr const char* kIp[2] = {"10.79.254.1", "10.79.254.2"};  // side 0: the peer process
constexpr uint64_t kTimeoutNs = 60'000'000'000;

// Message i sent by `side`.
size_t SizeOf(int side, int i) { return kSizes[(i * 5 + side * 3) % std::size(kSizes)]; }
bool Tagged(int side, int i) { return (i + side) % 3 == 0; }
uint64_t TagOf(int side, int i) { return (static_cast<uint64_t>(side) << 32) | static_cast<uint64_t>(1000 + i); }
uint8_t ByteOf(int side, int i, size_t k) {
  return static_cast<uint8_t>((side + 1) * 131 + i * 17 + k * 7 + (k >> 8));
}

absl::Status WaitUp(driver::Device& dev) {
  const uint64_t deadline = driver::SteadyClock::Get().NowNs() + 10'000'000'000ull;
  while (dev.link_state() != driver::LinkState::kUp) {
    if (driver::SteadyClock::Get().NowNs() > deadline) {
      return absl::DeadlineExceededError("the memif link did not come up in 10 s");
    }
    usleep(1000);
  }
  return absl::OkStatus();
}

// One side of the exchange: opens the device, sends its messages, receives
// and verifies the other's, then lingers so its last ACKs get out.
absl::Status Exchange(int side, const std::string& sock) {
  driver::DeviceOptions o;
  o.ipv4 = *driver::Ipv4Address::Parse(kIp[side]);
  auto dev = driver::OpenDevice(
      absl::StrCat("memif:", sock, ",role=", side == 0 ? "server" : "client"), o);
  if (!dev.ok()) return dev.status();
  if (absl::Status s = WaitUp(**dev); !s.ok()) return s;
  Port port((*dev)->queue(0), (*dev)->info());
  EndpointConfig c;
  c.udp_port = kUdpPort;
  c.max_posted_recvs = 2 * kMessages;
  auto ep_or = Endpoint::Create(port, driver::SteadyClock::Get(), c);
  if (!ep_or.ok()) return ep_or.status();
  Endpoint& ep = **ep_or;
  // memif never drops for want of room: no congestion window on it.
  if (!(*dev)->info().lossless || ep.config().congestion_control) {
    return absl::InternalError("memif: the engine runs congestion control on a lossless device");
  }
  Address other;
  other.mac = driver::kBroadcastMac;  // memif is point to point
  other.ip = *driver::Ipv4Address::Parse(kIp[1 - side]);
  other.udp_port = kUdpPort;
  auto peer_or = ep.InsertPeer(other);
  if (!peer_or.ok()) return peer_or.status();
  const PeerId peer = *peer_or;

  std::vector<std::vector<uint8_t>> out(kMessages), in(kMessages);
  for (int i = 0; i < kMessages; ++i) {
    out[i].resize(SizeOf(side, i));
    for (size_t k = 0; k < out[i].size(); ++k) out[i][k] = ByteOf(side, i, k);
    in[i].assign(SizeOf(1 - side, i) + 1, 0xee);  // one byte to spare: no overrun
  }
  // Context: index + 1 for receives, -(index + 1) for sends.
  auto ctx = [](intptr_t v) { return reinterpret_cast<void*>(v); };
  // Half the receives are posted now; the rest once those completed, so
  // later messages arrive unexpected (or are refused and retried).
  int posted = 0;
  auto post = [&](int upto) -> absl::Status {
    for (; posted < upto; ++posted) {
      const int i = posted;
      RecvRequest r{.buf = in[i].data(), .len = in[i].size(), .context = ctx(i + 1)};
      if (Tagged(1 - side, i)) {
        r.tagged = true;
        r.tag = TagOf(1 - side, i);
      }
      if (ep.PostRecv(r) != Result::kOk) return absl::InternalError("PostRecv refused");
    }
    return absl::OkStatus();
  };
  if (absl::Status s = post(kMessages / 2); !s.ok()) return s;

  int sent = 0, send_done = 0, recv_done = 0;
  const uint64_t start = driver::SteadyClock::Get().NowNs();
  Completion comps[64];
  ErrorCompletion err;
  while (send_done < kMessages || recv_done < kMessages) {
    while (sent < kMessages) {
      SendRequest r{.dest = peer, .buf = out[sent].data(), .len = out[sent].size(),
                    .context = ctx(-(sent + 1))};
      if (Tagged(side, sent)) {
        r.flags = kSendTagged;
        r.tag = TagOf(side, sent);
      }
      if (ep.Send(r) != Result::kOk) break;
      ++sent;
    }
    ep.Progress();
    if (ep.PollErrors({&err, 1}) > 0) {
      return absl::InternalError(absl::StrCat("error completion: ", err.err, " ", err.message));
    }
    const size_t n = ep.PollCompletions(comps);
    for (size_t k = 0; k < n; ++k) {
      const intptr_t v = reinterpret_cast<intptr_t>(comps[k].context);
      if (v < 0) {
        ++send_done;
        continue;
      }
      const int i = static_cast<int>(v - 1);
      const size_t want = SizeOf(1 - side, i);
      if (comps[k].len != want) {
        return absl::DataLossError(absl::StrCat("message ", i, ": ", comps[k].len, " bytes, not ", want));
      }
      if (((comps[k].flags & kCompTagged) != 0) != Tagged(1 - side, i) ||
          (Tagged(1 - side, i) && comps[k].tag != TagOf(1 - side, i))) {
        return absl::DataLossError(absl::StrCat("message ", i, ": wrong tag or flags"));
      }
      for (size_t b = 0; b < want; ++b) {
        if (in[i][b] != ByteOf(1 - side, i, b)) {
          return absl::DataLossError(absl::StrCat("message ", i, ": byte ", b, " differs"));
        }
      }
      if (in[i][want] != 0xee) return absl::DataLossError(absl::StrCat("message ", i, ": overrun"));
      ++recv_done;
    }
    if (recv_done >= kMessages / 2) {
      if (absl::Status s = post(kMessages); !s.ok()) return s;
    }
    if (driver::SteadyClock::Get().NowNs() - start > kTimeoutNs) {
      return absl::DeadlineExceededError(absl::StrCat("side ", side, ": sent ", send_done,
                                                      " received ", recv_done, " of ", kMessages,
                                                      "; ", ep.counters().ToString()));
    }
  }
  // Linger so the other side's last messages get their ACKs.
  const uint64_t until = driver::SteadyClock::Get().NowNs() + 200'000'000;
  while (driver::SteadyClock::Get().NowNs() < until) ep.Progress();
  std::fprintf(stderr, "side %d: %s\n", side, ep.counters().ToString().c_str());
  return absl::OkStatus();
}

TEST(RdmMemif, TwoProcessesExchangeTaggedAndUntagged) {
  const std::string sock = absl::StrCat("/tmp/bypass-rdm-memif-", getpid(), ".sock");
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    setenv("BYPASS_RDM_PEER", sock.c_str(), 1);
    char* argv[] = {const_cast<char*>("rdm_memif_peer"), nullptr};
    execv("/proc/self/exe", argv);
    std::perror("exec of the peer");
    _exit(127);
  }
  const absl::Status s = Exchange(1, sock);
  int status = 0;
  bool exited = false;
  for (int i = 0; i < 1000 && !exited; ++i) {
    exited = waitpid(child, &status, WNOHANG) == child;
    if (!exited) usleep(10000);
  }
  if (!exited) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
  }
  unlink(sock.c_str());
  unlink((sock + ".lock").c_str());
  EXPECT_TRUE(s.ok()) << s;
  ASSERT_TRUE(exited) << "the peer did not finish";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the peer failed: "
      << (WIFSIGNALED(status) ? absl::StrCat("killed by signal ", WTERMSIG(status))
                              : absl::StrCat("exit status ", WEXITSTATUS(status)))
      << " (see its stderr above)";
}

}  // namespace
}  // namespace bypass::rdm

int main(int argc, char** argv) {
  if (const char* sock = std::getenv("BYPASS_RDM_PEER")) {
    const absl::Status s = bypass::rdm::Exchange(0, sock);
    if (!s.ok()) std::fprintf(stderr, "peer: %s\n", s.ToString().c_str());
    return s.ok() ? 0 : 1;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
