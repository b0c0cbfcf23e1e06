// The shm device's own behaviour: the registry (conflicts, rebinding, dead
// holders, stale areas), lane takeover, directory checks and messages, the
// composite-facing calls (Reaches, Send, Owns), drops, back-pressure, and
// RX over a corrupted area.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "driver/device.h"
#include "driver/net_headers.h"
#include "driver/shm/area.h"
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
    EXPECT_EQ(out[i]->ol_flags, kRxSameHost);
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

}  // namespace
}  // namespace bypass::driver::shm
