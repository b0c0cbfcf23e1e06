// Key files (owner, mode, size: one-line errors), the per-user key (created
// once, shared by racing processes), and the modes of everything the
// intra-host device creates.
#include "driver/shm/keys.h"

#include <dirent.h>
#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "driver/shm/area.h"
#include "driver/shm/registry.h"
#include "driver/shm/shm_device.h"
#include "driver/uri.h"
#include "gtest/gtest.h"

namespace bypass::driver::shm {
namespace {

class KeysTest : public ::testing::Test {
 public:
  void SetUp() override {
    dir_ = absl::StrCat(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp", "/keys_XXXXXX");
    ASSERT_NE(mkdtemp(dir_.data()), nullptr);
  }

  // A file of `bytes` bytes with `mode`.
  std::string File(const std::string& name, size_t bytes, mode_t mode) {
    const std::string path = dir_ + "/" + name;
    const int fd = open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
    EXPECT_GE(fd, 0);
    const std::string content(bytes, 'k');
    EXPECT_EQ(write(fd, content.data(), content.size()), static_cast<ssize_t>(bytes));
    close(fd);
    EXPECT_EQ(chmod(path.c_str(), mode), 0);
    return path;
  }

  static void ExpectLine(const absl::Status& s, const std::string& what) {
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find(what), absl::string_view::npos) << s;
    EXPECT_EQ(s.message().find('\n'), absl::string_view::npos) << s;
  }

  std::string dir_;
};

mode_t ModeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

TEST_F(KeysTest, AKeyFileMustBeOursPrivateAndLongEnough) {
  const std::string good = File("good", 40, 0600);
  absl::StatusOr<std::string> bytes = ReadKeyFile(good, 32, kMaxKeyFileBytes, true);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, std::string(40, 'k'));

  ExpectLine(ReadKeyFile(File("open", 40, 0644), 32, kMaxKeyFileBytes, true).status(),
             "chmod 600");
  ExpectLine(ReadKeyFile(File("group", 40, 0640), 32, kMaxKeyFileBytes, true).status(),
             "mode 0640");
  ExpectLine(ReadKeyFile(File("short", 31, 0600), 32, kMaxKeyFileBytes, true).status(),
             "holds 31 bytes; a key is 32 to 4096 bytes");
  ExpectLine(ReadKeyFile(File("long", 5000, 0600), 32, kMaxKeyFileBytes, true).status(),
             "more than 4096 bytes");
  ExpectLine(ReadKeyFile(dir_, 32, kMaxKeyFileBytes, true).status(), "not a regular file");
  EXPECT_TRUE(
      absl::IsNotFound(ReadKeyFile(dir_ + "/none", 32, kMaxKeyFileBytes, true).status()));
  const std::string link = dir_ + "/link";
  ASSERT_EQ(symlink(good.c_str(), link.c_str()), 0);
  EXPECT_TRUE(ReadKeyFile(link, 32, kMaxKeyFileBytes, true).ok());
  ExpectLine(ReadKeyFile(link, 32, kMaxKeyFileBytes, false).status(), "is a symlink");

  const std::string theirs = File("theirs", 40, 0600);
  if (geteuid() == 0) {
    ASSERT_EQ(chown(theirs.c_str(), 65534, 65534), 0);
    ExpectLine(ReadKeyFile(theirs, 32, kMaxKeyFileBytes, true).status(), "owned by uid 65534");
  } else {
    // A file of root's we can read (owner is checked before mode).
    ExpectLine(ReadKeyFile("/etc/passwd", 32, kMaxKeyFileBytes, true).status(),
               "owned by uid 0");
  }
}

TEST_F(KeysTest, LongKeysAreHashedTo32Bytes) {
  std::vector<uint8_t> material(64);
  for (size_t i = 0; i < material.size(); ++i) material[i] = static_cast<uint8_t>(i);
  const Key exact = KeyFromBytes(absl::MakeConstSpan(material.data(), 32));
  EXPECT_EQ(0, std::memcmp(exact.data(), material.data(), 32)) << "32 bytes are the key";
  const Key hashed = KeyFromBytes(material);
  Key want;
  ASSERT_EQ(sodium_init() >= 0, true);
  crypto_generichash(want.data(), want.size(), material.data(), material.size(), nullptr, 0);
  EXPECT_EQ(hashed, want);
  EXPECT_NE(hashed, exact);
  material[63] ^= 1;
  EXPECT_NE(KeyFromBytes(material), hashed) << "every byte counts";
}

TEST_F(KeysTest, TheUserKeyIsCreatedOncePrivateAndNextToTheRegistry) {
  const std::string registry = dir_ + "/u.net.pid";
  ASSERT_EQ(mkdir(registry.c_str(), 0700), 0);
  EXPECT_EQ(UserKeyPath(registry), absl::StrCat(dir_, "/u", geteuid(), ".key"));
  EXPECT_EQ(UserKeyPath("/run/bypass/u5.net1.pid2/"), absl::StrCat("/run/bypass/u", geteuid(), ".key"));
  absl::StatusOr<Key> first = UserKey(registry);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_NE(*first, Key{}) << "random, not zero";
  EXPECT_EQ(ModeOf(UserKeyPath(registry)), 0600u);
  absl::StatusOr<Key> again = UserKey(registry);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *first);
  // No temporary file is left behind.
  DIR* d = opendir(registry.c_str());
  ASSERT_NE(d, nullptr);
  for (dirent* e; (e = readdir(d)) != nullptr;) {
    EXPECT_TRUE(std::string(e->d_name) == "." || std::string(e->d_name) == "..") << e->d_name;
  }
  closedir(d);

  // A key file another hand made is refused, not replaced.
  ASSERT_EQ(chmod(UserKeyPath(registry).c_str(), 0644), 0);
  ExpectLine(UserKey(registry).status(), "chmod 600");
  ASSERT_EQ(chmod(UserKeyPath(registry).c_str(), 0600), 0);
  ASSERT_EQ(truncate(UserKeyPath(registry).c_str(), 16), 0);
  ExpectLine(UserKey(registry).status(), "holds 16 bytes; a key is exactly 32 bytes");
  if (geteuid() == 0) {
    ASSERT_EQ(truncate(UserKeyPath(registry).c_str(), 32), 0);
    ASSERT_EQ(chown(UserKeyPath(registry).c_str(), 65534, 65534), 0);
    ExpectLine(UserKey(registry).status(), "owned by uid 65534");
  }
}

TEST_F(KeysTest, ProcessesRacingForTheUserKeyAllGetTheFirstOnes) {
  const std::string registry = dir_ + "/race";
  ASSERT_EQ(mkdir(registry.c_str(), 0700), 0);
  constexpr int kProcs = 8;
  int pipes[kProcs][2];
  std::vector<pid_t> pids;
  for (int i = 0; i < kProcs; ++i) {
    ASSERT_EQ(pipe(pipes[i]), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      absl::StatusOr<Key> k = UserKey(registry);
      if (!k.ok()) _exit(1);
      _exit(write(pipes[i][1], k->data(), k->size()) == static_cast<ssize_t>(k->size()) ? 0 : 2);
    }
    pids.push_back(pid);
  }
  std::vector<Key> keys(kProcs);
  for (int i = 0; i < kProcs; ++i) {
    int status = 0;
    ASSERT_EQ(waitpid(pids[i], &status, 0), pids[i]);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "process " << i;
    ASSERT_EQ(read(pipes[i][0], keys[i].data(), keys[i].size()),
              static_cast<ssize_t>(keys[i].size()));
    close(pipes[i][0]);
    close(pipes[i][1]);
  }
  for (int i = 1; i < kProcs; ++i) EXPECT_EQ(keys[i], keys[0]) << "process " << i;
  absl::StatusOr<Key> mine = UserKey(registry);
  ASSERT_TRUE(mine.ok());
  EXPECT_EQ(*mine, keys[0]);
}

// Everything an shm device creates: its directory 0700, the files in it,
// the key next to it and its area in /dev/shm 0600, all ours.
void ExpectPrivateFiles(const ShmDevice& dev) {
  const std::string& dir = dev.directory();
  EXPECT_EQ(ModeOf(dir), 0700u) << dir;
  DIR* d = opendir(dir.c_str());
  ASSERT_NE(d, nullptr);
  for (dirent* e; (e = readdir(d)) != nullptr;) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    const std::string path = dir + "/" + name;
    struct stat st;
    ASSERT_EQ(lstat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, geteuid()) << path;
    if (S_ISLNK(st.st_mode)) continue;  // a registry link: its mode means nothing
    EXPECT_EQ(st.st_mode & 07777, 0600u) << path;
  }
  closedir(d);
  EXPECT_EQ(ModeOf(UserKeyPath(dir)), 0600u);
  const std::string area = std::string(kShmDir) + "/" + dev.area_name();
  EXPECT_EQ(ModeOf(area), 0600u) << area;
  ASSERT_TRUE(dev.info().same_host_key.has_value());
  absl::StatusOr<Key> key = UserKey(dir);
  ASSERT_TRUE(key.ok());
  EXPECT_EQ(*dev.info().same_host_key, *key);
}

TEST_F(KeysTest, AnShmDeviceCreatesOnlyPrivateFilesAndCarriesTheUserKey) {
  absl::StatusOr<std::unique_ptr<ShmDevice>> a =
      shm::Open(*DeviceUri::Parse("shm:" + dir_ + "/reg"), {});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE((*a)->shm_queue().BindUdpPort(7000).ok());
  ExpectPrivateFiles(**a);
  absl::StatusOr<std::unique_ptr<ShmDevice>> b =
      shm::Open(*DeviceUri::Parse("shm:" + dir_ + "/reg"), {});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*(*b)->info().same_host_key, *(*a)->info().same_host_key);
}

// The default directory (the host's /run/bypass, or $XDG_RUNTIME_DIR's):
// its parent is not writable by others (unless sticky), its own entries
// are private.
TEST_F(KeysTest, TheDefaultDirectoryIsPrivateAndItsParentNotWorldWritable) {
  absl::StatusOr<std::unique_ptr<ShmDevice>> dev = shm::Open(*DeviceUri::Parse("shm:"), {});
  ASSERT_TRUE(dev.ok()) << dev.status()
                        << " (this test needs a writable /run/bypass or XDG_RUNTIME_DIR)";
  ExpectPrivateFiles(**dev);
  const std::string parent = UserKeyPath((*dev)->directory());
  const std::string base = parent.substr(0, parent.rfind('/'));
  const mode_t mode = ModeOf(base);
  EXPECT_TRUE((mode & 0022) == 0 || (mode & S_ISVTX) != 0)
      << base << " is writable by group or others and not sticky";
}

}  // namespace
}  // namespace bypass::driver::shm
