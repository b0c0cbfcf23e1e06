// The shm device's own behaviour: the registry (conflicts, rebinding, dead
// holders, stale areas, files of others under area names), lane takeover,
// directory checks and messages, the composite-facing calls (Reaches, Send,
// Owns) and their lane claims, drops, back-pressure and receivers that stop
// reading, a full /dev/shm, pid namespaces, and RX over a corrupted area.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "driver/device.h"
#include "driver/host.h"
#include "driver/net_headers.h"
#include "driver/shm/area.h"
#include "driver/shm/registry.h"
#include "driver/shm/shm_device.h"
#include "driver/uri.h"
#include "gtest/gtest.h"

namespace bypass::driver::shm {
namespace {

constexpr Ipv4Address kIpA{0x0a580001};  // 10.88.0.1
constexpr Ipv4Address kIpB{0x0a580002};

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

class ShmTest : public ::testing::Test {
 public:
  void SetUp() override {
    dir_ = absl::StrCat(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp", "/shm_test_XXXXXX");
    ASSERT_NE(mkdtemp(dir_.data()), nullptr);
  }

  std::unique_ptr<ShmDevice> OpenAt(Ipv4Address ip, const std::string& extra = "") {
    absl::StatusOr<DeviceUri> uri =
        DeviceUri::Parse(absl::StrCat("shm:", dir_, ",ip=", ip.ToString(), extra));
    EXPECT_TRUE(uri.ok());
    DeviceOptions opts;
    opts.pool_buffers = 256;
    absl::StatusOr<std::unique_ptr<ShmDevice>> dev = shm::Open(*uri, opts);
    EXPECT_TRUE(dev.ok()) << dev.status();
    return dev.ok() ? *std::move(dev) : nullptr;
  }

  // n frames from `from` to ip:port, payload byte = first + i.
  std::vector<Packet*> Frames(ShmDevice& from, Ipv4Address ip, uint16_t port, size_t n,
                              uint8_t first = 0) {
    std::vector<Packet*> pkts(n);
    EXPECT_TRUE(from.queue(0).AllocBulk(absl::MakeSpan(pkts)));
    UdpFlow flow;
    flow.src_mac = from.info().mac;
    flow.dst_mac = MacAddress{{0x02, 0, 0, 0, 0, 9}};
    flow.src_ip = from.info().ipv4;
    flow.dst_ip = ip;
    flow.src_port = 1234;
    flow.dst_port = port;
    for (size_t i = 0; i < n; ++i) {
      uint8_t payload[32];
      std::memset(payload, static_cast<uint8_t>(first + i), sizeof(payload));
      pkts[i]->len = static_cast<uint32_t>(BuildUdpFrame(
          flow, payload, {pkts[i]->data, pkts[i]->capacity}, UdpChecksumFill::kNone));
    }
    return pkts;
  }

  // Everything q has now (payload first bytes), freed.
  // Devices at kIpA and kIpB, a's `port` bound (b sends to it).
  void OpenBound(uint16_t port, std::unique_ptr<ShmDevice>* a, std::unique_ptr<ShmDevice>* b) {
    *a = OpenAt(kIpA);
    *b = OpenAt(kIpB);
    ASSERT_TRUE(*a && *b);
    ASSERT_TRUE((*a)->queue(0).BindUdpPort(port).ok());
  }

  std::vector<uint8_t> Drain(QueuePair& q) {
    std::vector<uint8_t> got;
    Packet* out[64];
    for (uint16_t n; (n = q.RxBurst(absl::MakeSpan(out))) > 0;) {
      for (uint16_t i = 0; i < n; ++i) got.push_back(out[i]->data[kUdpFrameHeaderBytes]);
      q.FreeBulk(absl::MakeConstSpan(out, n));
    }
    return got;
  }

  std::string dir_;
};

TEST_F(ShmTest, BindConflictNamesTheHolderAndRebindAfterUnbind) {
  auto a = OpenAt(kIpA);
  auto b = OpenAt(kIpA);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->queue(0).BindUdpPort(5000).ok());
  EXPECT_TRUE(a->queue(0).BindUdpPort(5000).ok()) << "binding our own port again";
  const absl::Status s = b->queue(0).BindUdpPort(5000);
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
  EXPECT_NE(s.message().find(absl::StrCat("pid ", getpid())), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("10.88.0.1:5000"), absl::string_view::npos) << s;
  EXPECT_EQ(s.message().find('\n'), absl::string_view::npos);
  EXPECT_TRUE(Exists(dir_ + "/10.88.0.1:5000"));
  a->queue(0).UnbindUdpPort(5000);
  EXPECT_FALSE(Exists(dir_ + "/10.88.0.1:5000"));
  EXPECT_TRUE(b->queue(0).BindUdpPort(5000).ok());
  // Closing unbinds everything and removes the area.
  const std::string area = AreaPath(b->area_name());
  EXPECT_TRUE(Exists(area));
  b.reset();
  EXPECT_FALSE(Exists(dir_ + "/10.88.0.1:5000"));
  EXPECT_FALSE(Exists(area));
  EXPECT_TRUE(a->queue(0).BindUdpPort(5000).ok());
}

// A child opens a device, binds, reports its area and dies (by _exit or by
// SIGKILL): the port is free to bind and its area is gone.
void DeadHolder(const std::string& dir, bool kill_it, ShmTest* t) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    DeviceOptions opts;
    opts.pool_buffers = 64;
    auto dev = shm::Open(*DeviceUri::Parse(absl::StrCat("shm:", dir, ",ip=10.88.0.1")), opts);
    if (!dev.ok() || !(*dev)->queue(0).BindUdpPort(6000).ok()) _exit(1);
    const std::string name = (*dev)->area_name();
    if (write(fds[1], name.data(), name.size()) != static_cast<ssize_t>(name.size())) _exit(1);
    close(fds[1]);
    if (kill_it) pause();
    _exit(0);  // no destructors: as if it crashed
  }
  close(fds[1]);
  char buf[256];
  const ssize_t n = read(fds[0], buf, sizeof(buf));
  close(fds[0]);
  ASSERT_GT(n, 0);
  const std::string area(buf, static_cast<size_t>(n));
  if (kill_it) kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(Exists(AreaPath(area)));
  auto dev = t->OpenAt(kIpA);
  ASSERT_TRUE(dev);
  // Open's reclaim already removed the dead area and its link.
  EXPECT_FALSE(Exists(AreaPath(area)));
  EXPECT_TRUE(dev->queue(0).BindUdpPort(6000).ok());
}

TEST_F(ShmTest, DeadHolderByExitIsReclaimed) { DeadHolder(dir_, false, this); }
TEST_F(ShmTest, DeadHolderBySigkillIsReclaimed) { DeadHolder(dir_, true, this); }

TEST_F(ShmTest, DeadHolderIsReplacedAtBind) {
  // The holder dies after the binder opened: Bind itself finds it dead.
  auto a = OpenAt(kIpA);
  ASSERT_TRUE(a);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    DeviceOptions opts;
    opts.pool_buffers = 64;
    auto dev = shm::Open(*DeviceUri::Parse(absl::StrCat("shm:", dir_, ",ip=10.88.0.1")), opts);
    if (!dev.ok() || !(*dev)->queue(0).BindUdpPort(6001).ok()) _exit(1);
    const std::string name = (*dev)->area_name();
    if (write(fds[1], name.data(), name.size()) != static_cast<ssize_t>(name.size())) _exit(1);
    pause();
    _exit(0);
  }
  close(fds[1]);
  char buf[256];
  const ssize_t n = read(fds[0], buf, sizeof(buf));
  close(fds[0]);
  ASSERT_GT(n, 0);
  const std::string area(buf, static_cast<size_t>(n));
  EXPECT_EQ(a->queue(0).BindUdpPort(6001).code(), absl::StatusCode::kAlreadyExists);
  kill(child, SIGKILL);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  EXPECT_TRUE(a->queue(0).BindUdpPort(6001).ok());
  EXPECT_FALSE(Exists(AreaPath(area)));
}

// PeerAlive: a bound port whose process lives is kAlive however long it
// sleeps; kDead once it is killed (its area's lock is free, its link still
// there); kUnknown for a port nobody bound.
TEST_F(ShmTest, PeerAliveFollowsTheHoldersLock) {
  auto a = OpenAt(kIpA);
  ASSERT_TRUE(a);
  const Ipv4Address child_ip = *Ipv4Address::Parse("10.88.0.1");
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    DeviceOptions opts;
    opts.pool_buffers = 64;
    auto dev = shm::Open(*DeviceUri::Parse(absl::StrCat("shm:", dir_, ",ip=10.88.0.1")), opts);
    if (!dev.ok() || !(*dev)->queue(0).BindUdpPort(6002).ok()) _exit(1);
    if (write(fds[1], "b", 1) != 1) _exit(1);
    pause();  // silent: no call into the device at all
    _exit(0);
  }
  close(fds[1]);
  char c;
  ASSERT_EQ(read(fds[0], &c, 1), 1);
  close(fds[0]);
  EXPECT_EQ(a->queue(0).PeerAlive(child_ip, 6002), PeerLiveness::kAlive);
  EXPECT_EQ(a->queue(0).PeerAlive(child_ip, 6003), PeerLiveness::kUnknown);
  kill(child, SIGKILL);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  EXPECT_EQ(a->queue(0).PeerAlive(child_ip, 6002), PeerLiveness::kDead);
}

TEST_F(ShmTest, StaleAreaFilesAndLinksAreReclaimedAtOpen) {
  // An area file of ours nobody holds a lock on, and a link to it.
  const std::string stale = AreaName(geteuid(), 0x7ffffff0, 0x12345678);
  const int fd = open(AreaPath(stale).c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  ASSERT_EQ(symlink(stale.c_str(), (dir_ + "/10.88.0.9:7000").c_str()), 0);
  auto dev = OpenAt(kIpA);
  ASSERT_TRUE(dev);
  EXPECT_FALSE(Exists(AreaPath(stale)));
  EXPECT_FALSE(Exists(dir_ + "/10.88.0.9:7000"));
  // Our own area, alive and locked, stays.
  EXPECT_TRUE(Exists(AreaPath(dev->area_name())));
}

TEST_F(ShmTest, LaneOfADeadSenderIsTakenOver) {
  auto r = OpenAt(kIpA, ",lanes=1");
  ASSERT_TRUE(r);
  ASSERT_TRUE(r->queue(0).BindUdpPort(7000).ok());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto s = OpenAt(kIpB);
    if (!s) _exit(1);
    std::vector<Packet*> pkts = Frames(*s, kIpA, 7000, 3, 10);
    _exit(s->queue(0).TxBurst(pkts) == 3 ? 0 : 1);  // dies holding the only lane
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  auto s2 = OpenAt(kIpB);
  ASSERT_TRUE(s2);
  // s2's open reclaimed the dead sender's area; its lane is still marked owned.
  EXPECT_TRUE(s2->shm_queue().Reaches(kIpA, 7000));
  std::vector<Packet*> pkts = Frames(*s2, kIpA, 7000, 2, 20);
  EXPECT_EQ(s2->queue(0).TxBurst(pkts), 2);
  EXPECT_EQ(s2->shm_queue().counters().tx_no_lane, 0u);
  EXPECT_EQ(Drain(r->queue(0)), (std::vector<uint8_t>{10, 11, 12, 20, 21}));
  // A live owner's lane is not taken: a third sender finds none.
  auto s3 = OpenAt(kIpB);
  ASSERT_TRUE(s3);
  EXPECT_FALSE(s3->shm_queue().Reaches(kIpA, 7000));
  pkts = Frames(*s3, kIpA, 7000, 1);
  EXPECT_EQ(s3->queue(0).TxBurst(pkts), 1);
  EXPECT_EQ(s3->shm_queue().counters().tx_no_lane, 1u);
  EXPECT_TRUE(Drain(r->queue(0)).empty());
}

TEST_F(ShmTest, DirectoryIsCreatedPrivateAndCheckedWithOneLineErrors) {
  const std::string fresh = dir_ + "/fresh";
  {
    auto dev = shm::Open(*DeviceUri::Parse("shm:" + fresh), {});
    ASSERT_TRUE(dev.ok()) << dev.status();
    struct stat st;
    ASSERT_EQ(stat(fresh.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    EXPECT_EQ((*dev)->info().driver, "shm");
    EXPECT_EQ((*dev)->info().num_queues, 1);
    EXPECT_FALSE((*dev)->info().can_steer);
    EXPECT_EQ((*dev)->info().mac.bytes[0] & 0x03, 0x02) << "locally administered unicast";
  }
  auto expect_line = [](const absl::Status& s, const std::string& what) {
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find(what), absl::string_view::npos) << s;
    EXPECT_EQ(s.message().find('\n'), absl::string_view::npos) << s;
  };
  const std::string open_dir = dir_ + "/open";
  ASSERT_EQ(mkdir(open_dir.c_str(), 0755), 0);
  ASSERT_EQ(chmod(open_dir.c_str(), 0755), 0);
  expect_line(shm::Open(*DeviceUri::Parse("shm:" + open_dir), {}).status(), "mode 0755");
  const std::string file = dir_ + "/file";
  ASSERT_EQ(close(open(file.c_str(), O_CREAT | O_WRONLY, 0600)), 0);
  expect_line(shm::Open(*DeviceUri::Parse("shm:" + file + "/sub"), {}).status(),
              "cannot create directory " + file + "/sub");
  expect_line(shm::Open(*DeviceUri::Parse("shm:" + file), {}).status(), "is not a directory");
  if (geteuid() == 0) {
    const std::string theirs = dir_ + "/theirs";
    ASSERT_EQ(mkdir(theirs.c_str(), 0700), 0);
    ASSERT_EQ(chown(theirs.c_str(), 65534, 65534), 0);
    expect_line(shm::Open(*DeviceUri::Parse("shm:" + theirs), {}).status(), "owned by uid 65534");
  } else {
    const std::string ro = dir_ + "/ro";
    ASSERT_EQ(mkdir(ro.c_str(), 0500), 0);
    expect_line(shm::Open(*DeviceUri::Parse("shm:" + ro), {}).status(), "cannot write");
  }
  expect_line(shm::Open(*DeviceUri::Parse("shm:" + fresh + ",lanes=0"), {}).status(), "lanes=0");
  expect_line(shm::Open(*DeviceUri::Parse("shm:" + fresh + ",slots=3"), {}).status(),
              "power of two");
  expect_line(shm::Open(*DeviceUri::Parse("shm:" + fresh + ",bogus=1"), {}).status(), "bogus");
  DeviceOptions few;
  few.pool_buffers = 8;
  auto big = shm::Open(*DeviceUri::Parse("shm:" + fresh + ",mtu=65000"), few);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ((*big)->info().mtu, 65000u);
}

TEST_F(ShmTest, ReachesSendAndOwns) {
  auto a = OpenAt(kIpA);
  auto b = OpenAt(kIpB);
  ASSERT_TRUE(a && b);
  ShmQueue& bq = b->shm_queue();
  EXPECT_FALSE(bq.Reaches(kIpA, 8000));
  ASSERT_TRUE(a->queue(0).BindUdpPort(8000).ok());
  EXPECT_TRUE(bq.Reaches(kIpA, 8000)) << "a bind moves the generation";
  EXPECT_FALSE(bq.Reaches(kIpA, 8001));
  EXPECT_FALSE(bq.Reaches(kIpB, 8000));

  const uint32_t level = b->queue(0).PoolAvailable();
  std::vector<Packet*> pkts = Frames(*b, kIpA, 8000, 4, 30);
  for (Packet* p : pkts) {
    EXPECT_TRUE(bq.Owns(p));
    EXPECT_FALSE(a->shm_queue().Owns(p));
  }
  EXPECT_EQ(bq.Send(pkts), 4);
  EXPECT_EQ(b->queue(0).PoolAvailable(), level - 4) << "Send does not take the packets";
  b->queue(0).FreeBulk(pkts);
  EXPECT_EQ(b->queue(0).PoolAvailable(), level);

  Packet* out[8];
  ASSERT_EQ(a->queue(0).RxBurst(absl::MakeSpan(out)), 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(a->shm_queue().Owns(out[i]));
    EXPECT_FALSE(bq.Owns(out[i]));
    EXPECT_EQ(out[i]->data[kUdpFrameHeaderBytes], 30 + i);
    // From a process of this host; checksums are not verified.
    EXPECT_EQ(out[i]->ol_flags, kRxSameHost | kRxIntact);  // through memory only
  }
  a->queue(0).FreeBulk(absl::MakeConstSpan(out, 4));

  a->queue(0).UnbindUdpPort(8000);
  EXPECT_FALSE(bq.Reaches(kIpA, 8000)) << "an unbind moves the generation";
}

TEST_F(ShmTest, UnknownDestinationsAreDroppedAndCounted) {
  auto b = OpenAt(kIpB);
  ASSERT_TRUE(b);
  const uint32_t level = b->queue(0).PoolAvailable();
  std::vector<Packet*> pkts = Frames(*b, kIpA, 9999, 5);
  pkts[4]->len = 20;  // not even a UDP frame
  EXPECT_EQ(b->queue(0).TxBurst(pkts), 5) << "dropped frames are taken";
  EXPECT_EQ(b->shm_queue().counters().tx_unknown_dest, 4u);
  EXPECT_EQ(b->shm_queue().counters().tx_not_udp, 1u);
  EXPECT_EQ(b->queue(0).stats().tx_packets, 0u);
  EXPECT_EQ(b->queue(0).PoolAvailable(), level);
}

// SendRouted (the composite's one lookup per frame): what Reaches would
// refuse (an unknown destination, not a UDP frame) stops the burst, is not
// counted as a drop, and stays the caller's; what it reaches is copied.
TEST_F(ShmTest, SendRoutedStopsAtWhatItDoesNotReach) {
  std::unique_ptr<ShmDevice> a, b;
  ASSERT_NO_FATAL_FAILURE(OpenBound(8000, &a, &b));
  ShmQueue& bq = b->shm_queue();
  std::vector<Packet*> pkts = Frames(*b, kIpA, 8000, 2, 50);
  std::vector<Packet*> away = Frames(*b, kIpA, 9999, 1);
  std::vector<Packet*> junk = Frames(*b, kIpA, 8000, 1);
  junk[0]->len = 20;
  pkts.push_back(away[0]);
  pkts.push_back(junk[0]);
  bool unrouted = false;
  EXPECT_EQ(bq.SendRouted(pkts, &unrouted), 2);
  EXPECT_TRUE(unrouted);
  EXPECT_EQ(bq.SendRouted(absl::MakeConstSpan(pkts).subspan(3), &unrouted), 0);
  EXPECT_TRUE(unrouted);
  EXPECT_EQ(bq.counters().tx_unknown_dest, 0u);
  EXPECT_EQ(bq.counters().tx_not_udp, 0u);
  EXPECT_EQ(bq.stats().tx_ring_full, 0u) << "a frame for another route is no full lane";
  EXPECT_EQ(bq.SendRouted(absl::MakeConstSpan(pkts).first(1), &unrouted), 1);
  EXPECT_FALSE(unrouted);
  EXPECT_EQ(Drain(a->queue(0)), (std::vector<uint8_t>{50, 51, 50}));
  b->queue(0).FreeBulk(pkts);
}

TEST_F(ShmTest, FullLaneBackPressuresThenDrains) {
  auto a = OpenAt(kIpA, ",slots=4");
  auto b = OpenAt(kIpB);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->queue(0).BindUdpPort(8100).ok());
  std::vector<Packet*> pkts = Frames(*b, kIpA, 8100, 10);
  EXPECT_EQ(b->queue(0).TxBurst(pkts), 4);
  EXPECT_EQ(b->queue(0).stats().tx_ring_full, 6u);
  EXPECT_EQ(Drain(a->queue(0)), (std::vector<uint8_t>{0, 1, 2, 3}));
  EXPECT_EQ(b->queue(0).TxBurst(absl::MakeConstSpan(pkts).subspan(4)), 4);
  EXPECT_EQ(b->queue(0).TxBurst(absl::MakeConstSpan(pkts).subspan(8)), 0);
  EXPECT_EQ(Drain(a->queue(0)), (std::vector<uint8_t>{4, 5, 6, 7}));
  EXPECT_EQ(b->queue(0).TxBurst(absl::MakeConstSpan(pkts).subspan(8)), 2);
  EXPECT_EQ(Drain(a->queue(0)), (std::vector<uint8_t>{8, 9}));
}

// Maps an area as a misbehaving peer would, and finds the lane `owner` holds.
struct Vandal {
  explicit Vandal(const std::string& area) {
    fd = open(AreaPath(area).c_str(), O_RDWR);
    struct stat st;
    fstat(fd, &st);
    bytes = static_cast<size_t>(st.st_size);
    base = static_cast<uint8_t*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    layout = *AreaLayout::FromHeader(*reinterpret_cast<AreaHeader*>(base));
  }
  ~Vandal() {
    munmap(base, bytes);
    close(fd);
  }
  LaneHeader* LaneOf(uint64_t owner) {
    for (uint32_t i = 0; i < layout.lanes; ++i) {
      if (LaneAt(base, layout, i)->owner == owner) return LaneAt(base, layout, i);
    }
    return nullptr;
  }
  int fd;
  size_t bytes;
  uint8_t* base;
  AreaLayout layout;
};

TEST_F(ShmTest, RxDropsWhatACorruptPeerWroteAndDoesNotCrash) {
  auto a = OpenAt(kIpA);
  auto b = OpenAt(kIpB);
  auto c = OpenAt(kIpB);
  auto d = OpenAt(kIpB);
  ASSERT_TRUE(a && b && c && d);
  ASSERT_TRUE(a->queue(0).BindUdpPort(8200).ok());
  Vandal v(a->area_name());

  // A tail far past the head: the lane's claimed frames are dropped.
  std::vector<Packet*> pkts = Frames(*b, kIpA, 8200, 2);
  ASSERT_EQ(b->queue(0).TxBurst(pkts), 2);
  LaneHeader* lb = v.LaneOf(b->owner_word());
  ASSERT_NE(lb, nullptr);
  lb->tail += 100000;
  EXPECT_TRUE(Drain(a->queue(0)).empty());
  EXPECT_EQ(a->shm_queue().counters().rx_bad_lane, 1u);
  // The sender sees the receiver's indices as corrupt and drops, not hangs.
  pkts = Frames(*b, kIpA, 8200, 1);
  EXPECT_EQ(b->queue(0).TxBurst(pkts), 1);

  // Lengths out of range: 0, 13, huge.
  pkts = Frames(*c, kIpA, 8200, 4, 40);
  ASSERT_EQ(c->queue(0).TxBurst(pkts), 4);
  LaneHeader* lc = v.LaneOf(c->owner_word());
  ASSERT_NE(lc, nullptr);
  uint32_t* lens = reinterpret_cast<uint32_t*>(reinterpret_cast<uint8_t*>(lc) + kLensOffset);
  const uint32_t mask = v.layout.slots - 1;
  lens[(lc->tail - 4) & mask] = 0;
  lens[(lc->tail - 3) & mask] = 13;
  lens[(lc->tail - 2) & mask] = 0xffffffff;
  EXPECT_EQ(Drain(a->queue(0)), (std::vector<uint8_t>{43}));
  EXPECT_EQ(a->shm_queue().counters().rx_bad_length, 3u);
  EXPECT_EQ(a->queue(0).stats().rx_dropped, 3u);

  // Stray active bits past the lane count, and garbage in the header, are
  // ignored by the receiver; a new sender refuses the area.
  ActiveWords(v.base)[(v.layout.lanes - 1) / 64] |= ~uint64_t{0};
  reinterpret_cast<AreaHeader*>(v.base)->slot_bytes = 7;
  EXPECT_TRUE(Drain(a->queue(0)).empty());
  pkts = Frames(*d, kIpA, 8200, 1);
  EXPECT_EQ(d->queue(0).TxBurst(pkts), 1);
  EXPECT_EQ(d->shm_queue().counters().tx_unknown_dest, 1u);
  // Good traffic from a sender still works.
  pkts = Frames(*c, kIpA, 8200, 1, 50);
  ASSERT_EQ(c->queue(0).TxBurst(pkts), 1);
  EXPECT_EQ(Drain(a->queue(0)), (std::vector<uint8_t>{50}));
}

// Every reservation fails (as on a full /dev/shm) while one of these lives.
struct FailReservations {
  FailReservations() { FailReservationsForTesting(ENOSPC); }
  ~FailReservations() { FailReservationsForTesting(0); }
};

TEST_F(ShmTest, ALaneThatCannotBeReservedIsNoLaneUntilItCan) {
  std::unique_ptr<ShmDevice> a, b;
  ASSERT_NO_FATAL_FAILURE(OpenBound(8300, &a, &b));
  ShmQueue& bq = b->shm_queue();
  {
    FailReservations full;
    EXPECT_FALSE(bq.Reaches(kIpA, 8300)) << "no lane while /dev/shm cannot hold one";
    std::vector<Packet*> pkts = Frames(*b, kIpA, 8300, 3);
    EXPECT_EQ(b->queue(0).TxBurst(pkts), 3) << "dropped, not held";
    EXPECT_EQ(bq.counters().tx_no_memory, 3u);
    EXPECT_EQ(bq.counters().tx_no_lane, 0u);
    EXPECT_EQ(b->queue(0).stats().tx_packets, 0u);
    // Nor can a device open: its area's header is reserved first.
    const absl::Status s =
        shm::Open(*DeviceUri::Parse(absl::StrCat("shm:", dir_, ",ip=10.88.0.3")), {}).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_NE(s.message().find("No space left"), absl::string_view::npos) << s;
    EXPECT_EQ(s.message().find('\n'), absl::string_view::npos) << s;
  }
  // Room again: a later call claims the lane (the claim is retried).
  int calls = 1;
  while (!bq.Reaches(kIpA, 8300) && calls < 4096) ++calls;
  EXPECT_LT(calls, 4096);
  std::vector<Packet*> pkts = Frames(*b, kIpA, 8300, 2, 10);
  EXPECT_EQ(b->queue(0).TxBurst(pkts), 2);
  EXPECT_EQ(Drain(a->queue(0)), (std::vector<uint8_t>{10, 11}));
}

// Runs body in a child process in a private mount namespace with a tmpfs at
// `where` (mount options `options`); body's return is the child's exit
// code, 0 for success. Skips the test where there is no such namespace.
void InPrivateTmpfs(const char* where, const char* options, const std::function<int()>& body) {
  if (geteuid() != 0) GTEST_SKIP() << "mounting a tmpfs needs root";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (unshare(CLONE_NEWNS) != 0 ||
        mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount("tmpfs", where, "tmpfs", 0, options) != 0) {
      _exit(2);
    }
    _exit(body());
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_FALSE(WIFSIGNALED(status)) << "killed by signal " << WTERMSIG(status);
  if (WEXITSTATUS(status) == 2) GTEST_SKIP() << "no private mount namespace here";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's step that failed";
}

// The real thing, as root: a private mount namespace with a tiny tmpfs on
// /dev/shm, filled by senders' lanes. Those that find no room get no lane
// (and Reaches false); without the reservation they would die of SIGBUS.
TEST_F(ShmTest, AFullDevShmIsNoLaneNotSigbus) {
  constexpr int kSenders = 40;
  InPrivateTmpfs(kShmDir, "size=512k,mode=1777", [&] {
    // Receiver: 8 slots of 1536 bytes, 16 KiB a lane; every header 4 KiB.
    auto r = OpenAt(kIpA, ",slots=8");
    if (!r || !r->queue(0).BindUdpPort(8350).ok()) return 3;
    std::vector<std::unique_ptr<ShmDevice>> senders;
    for (int i = 0; i < kSenders; ++i) {
      senders.push_back(OpenAt(kIpB));
      if (!senders.back()) return 4;
    }
    int reached = 0;
    int refused = 0;
    for (auto& s : senders) {
      std::vector<Packet*> pkts = Frames(*s, kIpA, 8350, 8);  // every slot: every page
      if (s->queue(0).TxBurst(pkts) != 8) return 5;
      const ShmCounters& c = s->shm_queue().counters();
      if (c.tx_no_memory == 8 && s->queue(0).stats().tx_packets == 0 &&
          !s->shm_queue().Reaches(kIpA, 8350)) {
        ++refused;
      } else if (c.tx_no_memory == 0 && s->queue(0).stats().tx_packets == 8) {
        ++reached;
      } else {
        return 6;
      }
    }
    if (reached == 0 || refused == 0) return 7;
    if (Drain(r->queue(0)).size() != 8u * static_cast<size_t>(reached)) return 8;
    return 0;
  });
}

// A /run/bypass others may write in (and not sticky) is refused with one
// line; 0755 and 1777 are fine. On a tmpfs over /run: the host's is not
// touched.
TEST_F(ShmTest, ARunDirectoryOthersMayWriteInIsRefused) {
  InPrivateTmpfs("/run", "size=64k,mode=0755", [] {
    if (mkdir("/run/bypass", 0755) != 0 || chmod("/run/bypass", 0777) != 0) return 3;
    absl::StatusOr<std::string> open_dir = DefaultDirectory();
    if (open_dir.ok() ||
        open_dir.status().message().find(
            "has mode 0777: others may replace what is in it; chmod 755") ==
            absl::string_view::npos) {
      return 4;
    }
    if (chmod("/run/bypass", 01777) != 0 || !DefaultDirectory().ok()) return 5;
    if (chmod("/run/bypass", 0755) != 0) return 6;
    absl::StatusOr<std::string> dir = DefaultDirectory();
    if (!dir.ok() || !Registry::Open(*dir).ok()) return 7;
    return 0;
  });
}

TEST_F(ShmTest, AReceiverThatStopsReadingDoesNotHoldTxToOthers) {
  auto idle = OpenAt(kIpA, ",slots=4");
  auto live = OpenAt(kIpA);
  auto s = OpenAt(kIpB);
  ASSERT_TRUE(idle && live && s);
  ASSERT_TRUE(idle->queue(0).BindUdpPort(8400).ok());
  ASSERT_TRUE(live->queue(0).BindUdpPort(8401).ok());
  std::vector<Packet*> pkts = Frames(*s, kIpA, 8400, 4);
  ASSERT_EQ(s->queue(0).TxBurst(pkts), 4);
  // A frame to the full lane ahead of one to the live receiver: held back
  // while the idle one might just be slow (256 tries and 10 ms: a
  // receiver descheduled on a busy host is not dropped from), then dropped.
  auto both = [&](uint8_t first) {
    std::vector<Packet*> two = Frames(*s, kIpA, 8400, 1, first);
    two.push_back(Frames(*s, kIpA, 8401, 1, static_cast<uint8_t>(first + 1))[0]);
    const uint16_t n = s->queue(0).TxBurst(two);
    s->queue(0).FreeBulk(absl::MakeConstSpan(two).subspan(n));
    return n;
  };
  int attempts = 0;
  const auto start = std::chrono::steady_clock::now();
  while (both(50) == 0 && std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
    ++attempts;
  }
  const auto held = std::chrono::steady_clock::now() - start;
  EXPECT_GE(attempts, 256) << "back-pressure first";
  EXPECT_GE(held, std::chrono::milliseconds(10)) << "for 10 ms at least";
  EXPECT_LT(held, std::chrono::seconds(10));
  const ShmCounters& c = s->shm_queue().counters();
  EXPECT_EQ(c.tx_lane_stuck, 1u);
  EXPECT_EQ(c.tx_dead_peer, 0u) << "it is alive";
  EXPECT_EQ(Drain(live->queue(0)), (std::vector<uint8_t>{51}));
  // While it stays stuck its frames are dropped at once.
  EXPECT_EQ(both(60), 2);
  EXPECT_EQ(c.tx_lane_stuck, 2u);
  EXPECT_EQ(Drain(live->queue(0)), (std::vector<uint8_t>{61}));
  // It reads again: back-pressure, not drops.
  EXPECT_EQ(Drain(idle->queue(0)), (std::vector<uint8_t>{0, 1, 2, 3}));
  pkts = Frames(*s, kIpA, 8400, 6, 70);
  EXPECT_EQ(s->queue(0).TxBurst(pkts), 4);
  s->queue(0).FreeBulk(absl::MakeConstSpan(pkts).subspan(4));
  EXPECT_EQ(c.tx_lane_stuck, 2u);
  EXPECT_EQ(Drain(idle->queue(0)), (std::vector<uint8_t>{70, 71, 72, 73}));
}

TEST_F(ShmTest, ReachesRetriesTheLaneClaim) {
  auto r = OpenAt(kIpA, ",lanes=1");
  auto s1 = OpenAt(kIpB);
  auto s2 = OpenAt(kIpB);
  ASSERT_TRUE(r && s1 && s2);
  ASSERT_TRUE(r->queue(0).BindUdpPort(8500).ok());
  EXPECT_TRUE(s1->shm_queue().Reaches(kIpA, 8500));
  EXPECT_FALSE(s2->shm_queue().Reaches(kIpA, 8500)) << "the only lane is s1's";
  // s1 closes having bound nothing: the generation stays, and s2 finds the
  // lane free at a later retry.
  s1.reset();
  int calls = 1;
  while (!s2->shm_queue().Reaches(kIpA, 8500) && calls < 4096) ++calls;
  EXPECT_GT(calls, 1) << "answered from the cache meanwhile";
  EXPECT_LT(calls, 4096);
  // When the generation moves (s2 unbinds as it closes), at once.
  auto s3 = OpenAt(kIpB);
  ASSERT_TRUE(s3);
  ASSERT_TRUE(s2->queue(0).BindUdpPort(8501).ok());
  EXPECT_FALSE(s3->shm_queue().Reaches(kIpA, 8500));
  s2.reset();
  EXPECT_TRUE(s3->shm_queue().Reaches(kIpA, 8500));
  std::vector<Packet*> pkts = Frames(*s3, kIpA, 8500, 1, 7);
  EXPECT_EQ(s3->queue(0).TxBurst(pkts), 1);
  EXPECT_EQ(Drain(r->queue(0)), (std::vector<uint8_t>{7}));
}

TEST_F(ShmTest, AFileNotOursUnderAnAreaNameIsNotALiveOwner) {
  // A FIFO: not an area (and opening it to look must not hang).
  const std::string fifo = AreaName(geteuid(), 0x7ffffff1, 0x0badf00d);
  ASSERT_EQ(mkfifo(AreaPath(fifo).c_str(), 0600), 0);
  EXPECT_FALSE(AreaAlive(fifo));
  EXPECT_TRUE(ReclaimArea(fifo));
  EXPECT_FALSE(Exists(AreaPath(fifo)));
  if (geteuid() != 0) GTEST_SKIP() << "a file of another uid needs root to make";
  // Another user's file under a dead area's name, holding its flock, with a
  // link to it: the link does not hold the port, and the file is removed
  // (root may).
  auto a = OpenAt(kIpA);
  ASSERT_TRUE(a);
  const std::string squat = AreaName(geteuid(), 0x7ffffff2, 0x0badf00d);
  const int fd = open(AreaPath(squat).c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(fchown(fd, 65534, 65534), 0);
  ASSERT_EQ(flock(fd, LOCK_EX), 0);
  ASSERT_EQ(symlink(squat.c_str(), (dir_ + "/10.88.0.1:8600").c_str()), 0);
  EXPECT_FALSE(AreaAlive(squat));
  EXPECT_TRUE(a->queue(0).BindUdpPort(8600).ok());
  EXPECT_FALSE(Exists(AreaPath(squat)));
  close(fd);
}

TEST_F(ShmTest, AnAreaOfAnotherPidNamespaceIsRefused) {
  EXPECT_NE(PidNamespaceId(), 0u);
  absl::StatusOr<std::string> def = DefaultDirectory();
  ASSERT_TRUE(def.ok()) << def.status();
  EXPECT_NE(def->find(absl::StrCat(".net", NetNamespaceId(), ".pid", PidNamespaceId())),
            std::string::npos)
      << *def;
  auto a = OpenAt(kIpA);
  auto b = OpenAt(kIpB);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->queue(0).BindUdpPort(8700).ok());
  {
    Vandal v(a->area_name());
    reinterpret_cast<AreaHeader*>(v.base)->pid_ns = PidNamespaceId() + 1;
    EXPECT_FALSE(b->shm_queue().Reaches(kIpA, 8700));
    reinterpret_cast<AreaHeader*>(v.base)->pid_ns = PidNamespaceId();
  }
  if (geteuid() != 0) GTEST_SKIP() << "a pid namespace needs root to make";
  // A device in a child pid namespace on the same DIR: neither reaches the
  // other. The child unshares, its child (pid 1 there) opens and answers.
  int up[2];
  int down[2];
  ASSERT_EQ(pipe(up), 0);
  ASSERT_EQ(pipe(down), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Only the parent writes `down`: its close is the inner device's cue.
    close(up[0]);
    close(down[1]);
    if (unshare(CLONE_NEWPID) != 0) _exit(2);
    const pid_t inner = fork();
    if (inner < 0) _exit(1);
    if (inner == 0) {
      auto c = OpenAt(kIpB);
      const char ok = c && c->queue(0).BindUdpPort(8701).ok() &&
                              !c->shm_queue().Reaches(kIpA, 8700) && getpid() == 1
                          ? 'y'
                          : 'n';
      if (write(up[1], &ok, 1) != 1) _exit(1);
      char done;
      (void)!read(down[0], &done, 1);  // end of file: the parent has looked
      _exit(0);
    }
    int status = 0;
    _exit(waitpid(inner, &status, 0) == inner && WIFEXITED(status) ? WEXITSTATUS(status) : 1);
  }
  close(up[1]);
  close(down[0]);
  char ok = 0;
  const bool answered = read(up[0], &ok, 1) == 1;
  if (answered) {
    EXPECT_EQ(ok, 'y') << "the child's device reached ours, or failed to open";
    EXPECT_FALSE(b->shm_queue().Reaches(kIpB, 8701)) << "ours reached the child's";
  }
  close(down[1]);
  close(up[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  if (!answered && WIFEXITED(status) && WEXITSTATUS(status) == 2) {
    GTEST_SKIP() << "no pid namespace here";
  }
  EXPECT_TRUE(answered);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace bypass::driver::shm
