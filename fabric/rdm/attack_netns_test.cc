// Issue 17's attacker, for real: two bypass endpoints (the kernel UDP
// device) in two network namespaces on a bridge, and an attacker in a third
// namespace on the same bridge with a raw AF_PACKET socket, rp_filter off.
// The bridge forgets what it learns at once (ageing_time 0) so it floods
// every frame: the attacker reads the real peers' traffic (an on-path
// reader), and forges HELLOs, RESETs, ACKs and DATA with guessed fields
// and with fields it observed (including replays of whole packets), plus a
// flood of 100,000 HELLOs from random sources at one of them, during which
// that one's application inserts a peer. The two exchange 1,000 messages
// and one of 1 MiB each way (udp_exchange), checking every byte: no
// redirect, no reset, no loss. Without a key and with one (the attacker
// has none). Needs root (CI runs as root); otherwise it fails saying so.
#include <arpa/inet.h>
#include <fcntl.h>
#include <sched.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "driver/clock.h"
#include "driver/device.h"
#include "driver/net_headers.h"
#include "fabric/rdm/udp_exchange.h"
#include "fabric/rdm/wire.h"
#include "gtest/gtest.h"
#include "test/netns.h"

namespace bypass::rdm::udp_exchange {
namespace {

constexpr uint16_t kUdpPort = 4791;
constexpr uint64_t kDeadlineNs = 180'000'000'000;
constexpr uint64_t kFlood = 100'000;

// Three namespaces "<p>a", "<p>b", "<p>x" joined through veths to a bridge
// in "<p>br" that floods every frame; addresses 10.203.0.1/.2/.3.
class Segment {
 public:
  static absl::StatusOr<std::unique_ptr<Segment>> Create(const std::string& p) {
    auto s = std::unique_ptr<Segment>(new Segment(p));
    s->Teardown();
    std::vector<std::string> cmds = {
        "ip netns add " + p + "br",
        "ip -n " + p + "br link add br0 type bridge ageing_time 0",
        "ip -n " + p + "br link set br0 up",
    };
    for (int i = 0; i < 3; ++i) {
      const std::string ns = s->ns(i), in = s->iface(i), out = p + "p" + std::to_string(i);
      for (const std::string& c : {
               "ip netns add " + ns,
               "ip link add " + in + " netns " + ns + " type veth peer name " + out + " netns " +
                   p + "br",
               "ip -n " + p + "br link set " + out + " master br0",
               "ip -n " + p + "br link set " + out + " up",
               "ip -n " + ns + " addr add " + s->ip(i) + "/24 dev " + in,
               "ip -n " + ns + " link set " + in + " up",
               "ip -n " + ns + " link set lo up",
               Sysctl(ns, "ipv4/conf/all/rp_filter", 0),
               Sysctl(ns, "ipv4/conf/default/rp_filter", 0),
               Sysctl(ns, "ipv4/conf/" + in + "/rp_filter", 0),
               Sysctl(ns, "ipv6/conf/all/disable_ipv6", 1),
           }) {
        cmds.push_back(c);
      }
    }
    for (const std::string& c : cmds) {
      if (absl::Status st = test::Run(c); !st.ok()) {
        return absl::FailedPreconditionError(absl::StrCat(
            st.message(), " (", c, "): the test needs root, iproute2 and a kernel with netns, "
            "veth and bridges; run it as root"));
      }
    }
    return s;
  }
  ~Segment() { Teardown(); }

  // Sets /proc/sys/net/<key> in namespace ns (sysctl(8) may be missing).
  static std::string Sysctl(const std::string& ns, const std::string& key, int value) {
    return absl::StrCat("ip netns exec ", ns, " sh -c 'echo ", value, " > /proc/sys/net/", key,
                        "'");
  }

  std::string ns(int i) const { return prefix_ + "abx"[i]; }
  std::string iface(int i) const { return prefix_ + "v" + std::to_string(i); }
  std::string ip(int i) const { return "10.203.0." + std::to_string(i + 1); }
  // Moves the calling thread into namespace i.
  absl::Status Enter(int i) const {
    const std::string path = "/var/run/netns/" + ns(i);
    FILE* f = std::fopen(path.c_str(), "r");
    if (f == nullptr) return absl::FailedPreconditionError("no namespace " + ns(i));
    const int rc = setns(fileno(f), CLONE_NEWNET);
    std::fclose(f);
    if (rc != 0) return absl::FailedPreconditionError("setns " + ns(i) + ": run as root");
    return absl::OkStatus();
  }

 private:
  explicit Segment(std::string p) : prefix_(std::move(p)) {}
  void Teardown() {
    for (int i = 0; i < 3; ++i) test::Run("ip netns del " + ns(i)).IgnoreError();
    test::Run("ip netns del " + prefix_ + "br").IgnoreError();
  }
  std::string prefix_;
};

// What the attacker did, for the checks.
struct AttackStats {
  uint64_t sniffed = 0;          // bypass frames between the real peers it read
  uint64_t guessed = 0;          // forgeries with guessed fields
  uint64_t observed = 0;         // forgeries built from observed fields
  uint64_t replayed = 0;         // captured frames sent again
  uint64_t flood = 0;            // HELLOs from random sources
  std::string error;
};

// The attacker: a raw socket on its veth, reading and forging until told
// to stop (and the flood is all sent).
class Attacker {
 public:
  Attacker(const Segment& seg, std::atomic<bool>& stop, std::atomic<uint64_t>& flood_sent)
      : seg_(seg), stop_(stop), flood_sent_(flood_sent) {}

  AttackStats Run() {
    if (absl::Status s = Open(); !s.ok()) {
      stats_.error = std::string(s.message());
      flood_sent_ = kFlood;
      return stats_;
    }
    std::mt19937_64 rng(17);
    while (!stop_.load() || stats_.flood < kFlood) {
      Sniff();
      if (!stop_.load()) Forge(rng);
      for (int i = 0; i < 500 && stats_.flood < kFlood; ++i) FloodOne(rng);
      flood_sent_ = stats_.flood;
      usleep(200);
    }
    close(fd_);
    return stats_;
  }

 private:
  // A real peer as seen on the wire.
  struct Seen {
    driver::MacAddress mac{};
    driver::Ipv4Address ip{};
    uint32_t incarnation = 0;
    uint32_t last_psn = 0;     // of its latest DATA
    bool known = false;
    std::vector<uint8_t> hello, ack, data;  // its latest frames of these types
  };

  absl::Status Open() {
    if (absl::Status s = seg_.Enter(2); !s.ok()) return s;
    fd_ = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK, htons(ETH_P_ALL));
    if (fd_ < 0) return absl::FailedPreconditionError("AF_PACKET socket: run as root");
    ifindex_ = static_cast<int>(if_nametoindex(seg_.iface(2).c_str()));
    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    sll.sll_ifindex = ifindex_;
    if (bind(fd_, reinterpret_cast<sockaddr*>(&sll), sizeof(sll)) != 0) {
      return absl::FailedPreconditionError("bind AF_PACKET");
    }
    for (int i = 0; i < 2; ++i) peers_[i].ip = *driver::Ipv4Address::Parse(seg_.ip(i));
    my_mac_ = driver::MacAddress{{{0x02, 0x66, 0x66, 0x66, 0x66, 0x66}}};
    return absl::OkStatus();
  }

  void Sniff() {
    uint8_t buf[10000];
    for (int n = 0; n < 256; ++n) {
      const ssize_t len = recv(fd_, buf, sizeof(buf), 0);
      if (len <= 0) return;
      // Frames read on a veth carry a partial UDP checksum (offloaded):
      // the attacker clears it, as a receiver that ignores it would.
      if (len >= 42 && buf[12] == 0x08 && buf[13] == 0x00 && buf[23] == 17) {
        const size_t ihl = (buf[14] & 0xf) * 4u;
        if (14 + ihl + 8 <= static_cast<size_t>(len)) buf[14 + ihl + 6] = buf[14 + ihl + 7] = 0;
      }
      wire::View v;
      if (wire::Parse({buf, static_cast<size_t>(len)}, &v) != wire::ParseStatus::kOk) continue;
      if (v.flow.src_mac == my_mac_) continue;
      for (Seen& p : peers_) {
        if (v.flow.src_ip != p.ip || v.flow.src_port != kUdpPort) continue;
        ++stats_.sniffed;
        p.mac = v.flow.src_mac;
        p.incarnation = v.common.src_incarnation;
        p.known = true;
        std::vector<uint8_t>* keep = nullptr;
        switch (v.common.type) {
          case wire::PacketType::kHello:
          case wire::PacketType::kHelloAck:
            keep = &p.hello;
            break;
          case wire::PacketType::kAck:
            keep = &p.ack;
            break;
          case wire::PacketType::kData:
            keep = &p.data;
            p.last_psn = v.common.psn.value();
            break;
          default:
            break;
        }
        if (keep != nullptr) keep->assign(buf, buf + len);
      }
    }
  }

  void Send(const uint8_t* frame, size_t len) {
    sockaddr_ll to{};
    to.sll_family = AF_PACKET;
    to.sll_ifindex = ifindex_;
    to.sll_halen = 6;
    std::memcpy(to.sll_addr, frame, 6);
    sendto(fd_, frame, len, 0, reinterpret_cast<sockaddr*>(&to), sizeof(to));
  }

  // A frame to peer `to` claiming to come from peer `from`.
  driver::UdpFlow Claim(int from, int to) const {
    const driver::MacAddress dst = peers_[to].known ? peers_[to].mac : driver::kBroadcastMac;
    return driver::UdpFlow{my_mac_, dst, peers_[from].ip, peers_[to].ip, kUdpPort, kUdpPort, 0};
  }

  void Emit(const driver::UdpFlow& f, wire::Common c, const std::function<size_t(
      const driver::UdpFlow&, const wire::Common&, absl::Span<uint8_t>)>& build) {
    uint8_t frame[1514];
    const size_t n = build(f, c, absl::MakeSpan(frame));
    if (n > 0) Send(frame, n);
  }

  static size_t Hello(const driver::UdpFlow& f, const wire::Common& c, uint64_t nonce,
                      absl::Span<uint8_t> out) {
    wire::HelloFields h;
    h.max_datagram = 1472;
    h.nonce = nonce | 1;
    return wire::BuildHello(f, c, h, nullptr, out);
  }

  void Forge(std::mt19937_64& rng) {
    for (int from = 0; from < 2; ++from) {
      const int to = 1 - from;
      const driver::UdpFlow f = Claim(from, to);
      const Seen& src = peers_[from];
      const Seen& dst = peers_[to];
      // Guessed: incarnations and PSNs at random.
      wire::Common c;
      c.src_incarnation = static_cast<uint32_t>(rng()) | 1;
      c.dst_incarnation = static_cast<uint32_t>(rng());
      c.psn = Psn(static_cast<uint32_t>(rng()));
      c.ack_psn = Psn(static_cast<uint32_t>(rng()));
      c.credit = 200;
      c.type = wire::PacketType::kHello;
      c.dst_incarnation = 0;
      uint8_t frame[1514];
      Send(frame, Hello(f, c, rng(), absl::MakeSpan(frame)));
      c.dst_incarnation = static_cast<uint32_t>(rng());
      c.type = wire::PacketType::kReset;
      wire::ResetFields r;
      r.reason = (rng() & 1) ? wire::ResetReason::kNoSession : wire::ResetReason::kUnknownIncarnation;
      r.incarnation = static_cast<uint32_t>(rng());
      Send(frame, wire::BuildReset(f, c, r, nullptr, absl::MakeSpan(frame)));
      c.type = wire::PacketType::kAck;
      c.flags = wire::kFlagAckValid;
      Send(frame, wire::BuildAck(f, c, wire::AckFields{}, absl::MakeSpan(frame)));
      c.type = wire::PacketType::kData;
      wire::MsgFields m;
      m.total_length = 8;
      const uint8_t junk[8] = {0xde, 0xad, 0xbe, 0xef, 0xde, 0xad, 0xbe, 0xef};
      Send(frame, wire::BuildData(f, c, m, junk, absl::MakeSpan(frame)));
      stats_.guessed += 4;
      if (!src.known || !dst.known) continue;
      // Observed: the real incarnations, PSNs in flight.
      c = wire::Common{};
      c.src_incarnation = src.incarnation;
      c.dst_incarnation = dst.incarnation;
      c.type = wire::PacketType::kReset;  // "I have no session": names dst's PSN in flight
      c.psn = Psn(dst.last_psn);
      r.reason = wire::ResetReason::kNoSession;
      r.incarnation = dst.incarnation;
      Send(frame, wire::BuildReset(f, c, r, nullptr, absl::MakeSpan(frame)));
      r.reason = wire::ResetReason::kUnknownIncarnation;  // "I restarted"
      c.src_incarnation = static_cast<uint32_t>(rng()) | 1;
      r.incarnation = src.incarnation;
      Send(frame, wire::BuildReset(f, c, r, nullptr, absl::MakeSpan(frame)));
      c.src_incarnation = src.incarnation;  // "a new session" from the real incarnation
      c.type = wire::PacketType::kHello;
      c.psn = Psn(static_cast<uint32_t>(rng()));
      Send(frame, Hello(f, c, rng(), absl::MakeSpan(frame)));
      c.type = wire::PacketType::kAck;  // acknowledging a PSN far ahead of what dst sent
      c.flags = wire::kFlagAckValid;
      c.ack_psn = Psn(dst.last_psn + 100'000);
      Send(frame, wire::BuildAck(f, c, wire::AckFields{}, absl::MakeSpan(frame)));
      stats_.observed += 4;
      // Replays of whole frames, from the attacker's MAC.
      for (const std::vector<uint8_t>* old : {&src.hello, &src.ack, &src.data}) {
        if (old->empty()) continue;
        std::vector<uint8_t> again = *old;
        std::memcpy(&again[6], my_mac_.bytes.data(), 6);
        Send(again.data(), again.size());
        ++stats_.replayed;
      }
    }
  }

  // A HELLO to peer 0 from a random IPv4, port and MAC of the segment's
  // /16 (so it is delivered, and a COOKIE may go back out).
  void FloodOne(std::mt19937_64& rng) {
    const uint64_t r = rng();
    const driver::UdpFlow f{
        driver::MacAddress{{{0x02, 0x77, uint8_t(r), uint8_t(r >> 8), uint8_t(r >> 16), 1}}},
        peers_[0].known ? peers_[0].mac : driver::kBroadcastMac,
        driver::Ipv4Address{0x0acb0000u | static_cast<uint32_t>((r >> 24) & 0xffff)},
        peers_[0].ip,
        static_cast<uint16_t>(r >> 40 | 1),
        kUdpPort,
        0};
    wire::Common c;
    c.type = wire::PacketType::kHello;
    c.src_incarnation = static_cast<uint32_t>(r >> 32) | 1;
    c.psn = Psn(static_cast<uint32_t>(r));
    c.credit = 64;
    uint8_t frame[256];
    Send(frame, Hello(f, c, r, absl::MakeSpan(frame)));
    ++stats_.flood;
  }

  const Segment& seg_;
  std::atomic<bool>& stop_;
  std::atomic<uint64_t>& flood_sent_;
  int fd_ = -1;
  int ifindex_ = 0;
  driver::MacAddress my_mac_{};
  Seen peers_[2];
  AttackStats stats_;
};

// What one real peer ended with.
struct SideResult {
  absl::Status status;
  std::string report;
  Counters counters;
  std::optional<Address> peer;         // its view of the other's address at the end
  std::optional<uint32_t> peer_incarnation;
  absl::Status insert = absl::OkStatus();  // side 0's insert during the flood
};

SideResult RunSide(const Segment& seg, int side, const std::optional<wire::MacKey>& key,
                   std::atomic<int>& done, std::atomic<uint64_t>& flood_sent,
                   std::atomic<bool>& stop) {
  SideResult out;
  if (absl::Status s = seg.Enter(side); !s.ok()) {
    out.status = s;
    done.fetch_add(1);
    return out;
  }
  absl::StatusOr<std::unique_ptr<Side>> me =
      Side::Create("udp:" + seg.iface(side), kUdpPort, side, [&](EndpointConfig* c) {
        c->handshake_key = key;
        c->max_peers = 4;  // a flood that took slots would keep the insert out
      });
  if (!me.ok()) {
    out.status = me.status();
    done.fetch_add(1);
    return out;
  }
  Address other;
  other.ip = *driver::Ipv4Address::Parse(seg.ip(1 - side));
  other.udp_port = kUdpPort;
  if (absl::Status s = (*me)->Connect(other); !s.ok()) {
    out.status = s;
    done.fetch_add(1);
    return out;
  }
  const uint64_t start = driver::SteadyClock::Get().NowNs();
  bool counted = false, inserted = side != 0;
  // Step until both sides are done, the flood is over and (side 0) the
  // insert is made: the other's last messages need our ACKs meanwhile.
  while (done.load() < 2 || !inserted || flood_sent.load() < kFlood) {
    if (absl::Status s = (*me)->Step(); !s.ok()) {
      out.status = s;
      break;
    }
    if (!inserted && flood_sent.load() >= kFlood / 2) {
      Address x;
      x.ip = *driver::Ipv4Address::Parse(seg.ip(2));
      x.udp_port = kUdpPort;
      absl::StatusOr<PeerId> id = (*me)->endpoint().InsertPeer(x);
      out.insert = id.status();
      inserted = true;
    }
    if (!counted && (*me)->Done()) {
      counted = true;
      done.fetch_add(1);
      if (done.load() == 2) stop = true;
    }
    if (driver::SteadyClock::Get().NowNs() - start > kDeadlineNs) {
      out.status = absl::DeadlineExceededError("unfinished");
      break;
    }
  }
  if (!counted) done.fetch_add(1);
  stop = true;
  out.report = (*me)->Report();
  out.counters = (*me)->endpoint().counters();
  out.peer = (*me)->endpoint().PeerAddress((*me)->peer());
  if (std::optional<PeerStats> st = (*me)->endpoint().peer_stats((*me)->peer())) {
    out.peer_incarnation = st->incarnation;
  }
  return out;
}

void RunAttack(const std::string& prefix, const std::optional<wire::MacKey>& key) {
  absl::StatusOr<std::unique_ptr<Segment>> seg = Segment::Create(prefix);
  ASSERT_TRUE(seg.ok()) << seg.status();
  std::atomic<int> done{0};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> flood_sent{0};
  SideResult res[2];
  AttackStats attack;
  std::thread x([&] { attack = Attacker(**seg, stop, flood_sent).Run(); });
  std::thread b([&] { res[1] = RunSide(**seg, 1, key, done, flood_sent, stop); });
  res[0] = RunSide(**seg, 0, key, done, flood_sent, stop);
  b.join();
  x.join();
  std::fprintf(stderr,
               "attacker: sniffed %lu, guessed %lu, observed %lu, replayed %lu, flood %lu\n"
               "a: %s\n   %s\nb: %s\n   %s\n",
               attack.sniffed, attack.guessed, attack.observed, attack.replayed, attack.flood,
               res[0].report.c_str(), res[0].counters.ToString().c_str(), res[1].report.c_str(),
               res[1].counters.ToString().c_str());
  ASSERT_EQ(attack.error, "");
  EXPECT_GT(attack.observed, 0u) << "the attacker read the real peers' traffic";
  EXPECT_GT(attack.replayed, 0u);
  EXPECT_EQ(attack.flood, kFlood);
  for (int side = 0; side < 2; ++side) {
    const SideResult& r = res[side];
    EXPECT_TRUE(r.status.ok()) << "side " << side << ": " << r.status << " " << r.report;
    EXPECT_EQ(r.counters.peer_restarts, 0u) << "side " << side;
    EXPECT_EQ(r.counters.peer_resets, 0u) << "side " << side;
    EXPECT_EQ(r.counters.ops_failed, 0u) << "side " << side;
    EXPECT_EQ(r.counters.handshakes, 1u) << "side " << side << ": only the real peer's";
    ASSERT_TRUE(r.peer.has_value());
    EXPECT_EQ(r.peer->ip, *driver::Ipv4Address::Parse((*seg)->ip(1 - side)));
    EXPECT_NE(r.peer->mac, (driver::MacAddress{{{0x02, 0x66, 0x66, 0x66, 0x66, 0x66}}}))
        << "side " << side << " redirected to the attacker";
  }
  EXPECT_TRUE(res[0].insert.ok()) << "insert during the flood: " << res[0].insert;
  // (The kernel drops much of the flood when the socket's buffer is full.)
  EXPECT_GT(res[0].counters.cookies_sent + res[0].counters.cookies_dropped +
                res[0].counters.handshake_auth_failed,
            1000u)
      << "the flood reached side 0";
  if (key) {
    EXPECT_GT(res[0].counters.handshake_auth_failed, 0u) << "forgeries without the key refused";
  }
}

TEST(AttackNetns, WithoutAKeyForgeriesAndAFloodChangeNothing) { RunAttack("bpatk", std::nullopt); }

TEST(AttackNetns, WithAKeyForgeriesAndAFloodChangeNothing) {
  wire::MacKey key{};
  key.fill(0x5a);
  RunAttack("bpatkk", key);
}

}  // namespace
}  // namespace bypass::rdm::udp_exchange
