// Bad configuration gets one clear line: a device URI that does not parse,
// an interface that does not exist, a directory that cannot be used. Each
// is caught where an application meets it (fi_domain), which fails with an
// error code, and the provider's log (FI_LOG_LEVEL=warn) says what to do.
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "driver/shm/keys.h"
#include "driver/shm/registry.h"
#include "fabric/fi/fabric.h"
#include "gtest/gtest.h"

namespace {

// What Open sets up: FI_BYPASS_DEVICES, the domain's auth_key (bytes; empty:
// none) and how many endpoints to open on it.
struct Setup {
  std::string devices;
  std::string auth_key;
  int endpoints = 0;
};

// Runs fi_getinfo, fi_fabric, fi_domain and s.endpoints fi_endpoint calls,
// stderr captured (FI_LOG_LEVEL=info); returns the first failure (or 0) and
// the log text.
int Open(const Setup& s, std::string* log) {
  setenv("FI_BYPASS_DEVICES", s.devices.c_str(), 1);
  setenv("FI_LOG_LEVEL", "info", 1);
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/stderr.txt";
  std::fflush(stderr);
  const int saved = dup(2);
  FILE* f = std::fopen(path.c_str(), "w");
  dup2(fileno(f), 2);
  fi_info* hints = fi_allocinfo();
  hints->ep_attr->type = FI_EP_RDM;
  fi_info* info = nullptr;
  int ret = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info);
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  std::vector<fid_ep*> eps;
  if (ret == 0 && !s.auth_key.empty()) {
    std::free(info->domain_attr->auth_key);
    info->domain_attr->auth_key = static_cast<uint8_t*>(std::malloc(s.auth_key.size()));
    std::memcpy(info->domain_attr->auth_key, s.auth_key.data(), s.auth_key.size());
    info->domain_attr->auth_key_size = s.auth_key.size();
  }
  if (ret == 0) ret = fi_fabric(info->fabric_attr, &fabric, nullptr);
  if (ret == 0) ret = fi_domain(fabric, info, &domain, nullptr);
  for (int i = 0; ret == 0 && i < s.endpoints; ++i) {
    fid_ep* ep = nullptr;
    ret = fi_endpoint(domain, info, &ep, nullptr);
    if (ret == 0) eps.push_back(ep);
  }
  for (fid_ep* ep : eps) fi_close(&ep->fid);
  if (domain != nullptr) fi_close(&domain->fid);
  if (fabric != nullptr) fi_close(&fabric->fid);
  fi_freeinfo(info);
  fi_freeinfo(hints);
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::fclose(f);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  *log = text.str();
  return ret;
}

int OpenDomain(const std::string& devices, std::string* log) { return Open({devices, "", 0}, log); }

TEST(ConfigTest, UnknownSchemeSaysWhichAreKnown) {
  std::string log;
  EXPECT_NE(OpenDomain("ethernet:eth0", &log), 0);
  EXPECT_NE(log.find("unknown scheme 'ethernet'"), std::string::npos) << log;
  EXPECT_NE(log.find("shm:+udp:"), std::string::npos) << log;
}

TEST(ConfigTest, MissingInterfaceSaysWhichExist) {
  std::string log;
  EXPECT_NE(OpenDomain("shm:+udp:nosuch0", &log), 0);
  EXPECT_NE(log.find("nosuch0"), std::string::npos) << log;
  EXPECT_NE(log.find("lo"), std::string::npos) << log;
}

// The intra-host part of LOCAL+REMOTE cannot open: the domain runs on the
// remote device alone (it reaches this host's processes too), and says so.
TEST(ConfigTest, UnusableDirectorySaysWhatAndFallsBackToTheRemoteDevice) {
  std::string log;
  EXPECT_EQ(OpenDomain("shm:/proc/bypass-cannot-be-here+udp:", &log), 0);
  EXPECT_NE(log.find("/proc/bypass-cannot-be-here"), std::string::npos) << log;
  EXPECT_NE(log.find("using udp: alone"), std::string::npos) << log;
  // Alone, it is an error.
  EXPECT_NE(OpenDomain("shm:/proc/bypass-cannot-be-here", &log), 0);
  EXPECT_NE(log.find("/proc/bypass-cannot-be-here"), std::string::npos) << log;
}

TEST(ConfigTest, TheDefaultOpens) {
  std::string log;
  unsetenv("FI_BYPASS_DEVICES");
  fi_info* info = nullptr;
  fi_info* hints = fi_allocinfo();
  hints->caps = FI_TAGGED | FI_LOCAL_COMM | FI_REMOTE_COMM | FI_DIRECTED_RECV;  // Open MPI's ask
  hints->ep_attr->type = FI_EP_RDM;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", "5000", 0, hints, &info), 0);
  EXPECT_STREQ(info->domain_attr->name, "shm:+udp:");
  EXPECT_EQ(info->caps & (FI_LOCAL_COMM | FI_REMOTE_COMM), FI_LOCAL_COMM | FI_REMOTE_COMM);
  fi_freeinfo(info);
  fi_freeinfo(hints);
}

// The receiver-not-ready intervals come from FI_BYPASS_RNR_* (an MPI job
// whose receiver computes for long raises the give-up).
TEST(ConfigTest, ReceiverNotReadyIntervalsAreParameters) {
  setenv("FI_BYPASS_RNR_GIVE_UP_MS", "60000", 1);
  setenv("FI_BYPASS_RNR_RETRY_MAX_US", "2000", 1);
  const bypass::fi::Settings s = bypass::fi::ReadSettings();
  unsetenv("FI_BYPASS_RNR_GIVE_UP_MS");
  unsetenv("FI_BYPASS_RNR_RETRY_MAX_US");
  EXPECT_EQ(s.engine.rnr_give_up_ns, 60'000'000'000u);
  EXPECT_EQ(s.engine.rnr_retry_max_ns, 2'000'000u);
  const bypass::fi::Settings d = bypass::fi::ReadSettings();
  EXPECT_EQ(d.engine.rnr_give_up_ns, 5'000'000'000u);
}

// ---- Keys (README.md, "Keys and access").

std::string TmpDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

// A key file of `bytes` with `mode`.
std::string KeyFile(const std::string& name, const std::string& bytes, mode_t mode) {
  const std::string path = TmpDir() + "/" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  EXPECT_EQ(chmod(path.c_str(), mode), 0);
  return path;
}

std::string Material(size_t n, char seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(seed + 7 * i);
  return s;
}

std::string IdOf(const std::string& material) {
  return bypass::driver::shm::KeyId(bypass::driver::shm::KeyFromBytes(absl::MakeConstSpan(
      reinterpret_cast<const uint8_t*>(material.data()), material.size())));
}

// Lines of log holding `what`.
int Lines(const std::string& log, const std::string& what) {
  int n = 0;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) n += line.find(what) != std::string::npos;
  return n;
}

// The ids after `label` in the endpoints' key lines ("handshake key ",
// "same-host key "), in order.
std::vector<std::string> Ids(const std::string& log, const std::string& label) {
  std::vector<std::string> ids;
  for (size_t at = log.find(label); at != std::string::npos; at = log.find(label, at + 1)) {
    ids.push_back(log.substr(at + label.size(), log.find_first_of(" ,\n", at + label.size()) -
                                                     at - label.size()));
  }
  return ids;
}

class KeyConfigTest : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv("FI_BYPASS_AUTH_KEY_FILE"); }
};

TEST_F(KeyConfigTest, AKeyFileMustBeOursPrivateAndLongEnough) {
  std::string log;
  setenv("FI_BYPASS_AUTH_KEY_FILE", KeyFile("open.key", Material(40, 1), 0644).c_str(), 1);
  EXPECT_EQ(Open({"shm:+udp:", "", 1}, &log), -FI_EPERM);
  EXPECT_EQ(Lines(log, "FI_BYPASS_AUTH_KEY_FILE: key file"), 1) << log;
  EXPECT_NE(log.find("has mode 0644, open to group or others; chmod 600"), std::string::npos)
      << log;

  setenv("FI_BYPASS_AUTH_KEY_FILE", KeyFile("short.key", Material(10, 1), 0600).c_str(), 1);
  EXPECT_EQ(Open({"shm:+udp:", "", 1}, &log), -FI_EINVAL);
  EXPECT_EQ(Lines(log, "FI_BYPASS_AUTH_KEY_FILE: key file"), 1) << log;
  EXPECT_NE(log.find("holds 10 bytes; a key is 32 to 4096 bytes"), std::string::npos) << log;

  if (geteuid() == 0) {
    const std::string theirs = KeyFile("theirs.key", Material(40, 1), 0600);
    ASSERT_EQ(chown(theirs.c_str(), 65534, 65534), 0);
    setenv("FI_BYPASS_AUTH_KEY_FILE", theirs.c_str(), 1);
    EXPECT_EQ(Open({"shm:+udp:", "", 1}, &log), -FI_EPERM);
    EXPECT_NE(log.find("owned by uid 65534"), std::string::npos) << log;
  }

  setenv("FI_BYPASS_AUTH_KEY_FILE", (TmpDir() + "/none.key").c_str(), 1);
  EXPECT_NE(Open({"shm:+udp:", "", 1}, &log), 0);
  EXPECT_NE(log.find("does not exist"), std::string::npos) << log;

  // A good one is every endpoint's key, this host's peers included.
  const std::string material = Material(100, 3);
  setenv("FI_BYPASS_AUTH_KEY_FILE", KeyFile("good.key", material, 0600).c_str(), 1);
  ASSERT_EQ(Open({"shm:+udp:", "", 2}, &log), 0) << log;
  EXPECT_EQ(Ids(log, "handshake key "), std::vector<std::string>(2, IdOf(material))) << log;
  EXPECT_EQ(Lines(log, "(FI_BYPASS_AUTH_KEY_FILE), same-host key the handshake key"), 2) << log;
}

TEST_F(KeyConfigTest, DomainAuthKeysOfFourOr32BytesAndMore) {
  std::string log;
  for (size_t bad : {1u, 5u, 8u, 31u}) {
    EXPECT_EQ(Open({"shm:+udp:", Material(bad, 1), 1}, &log), -FI_EINVAL) << bad;
    EXPECT_EQ(Lines(log, "domain auth_key of " + std::to_string(bad) +
                             " bytes: give 4 bytes (the wire's 32-bit auth_key) or at least 32"),
              1)
        << log;
  }
  // 4 bytes: the wire's auth_key, no handshake key.
  ASSERT_EQ(Open({"shm:+udp:", Material(4, 1), 1}, &log), 0) << log;
  EXPECT_EQ(Ids(log, "handshake key "), std::vector<std::string>{"none"}) << log;
  // 32 bytes are the key; more are hashed to 32.
  for (size_t n : {32u, 33u, 64u, 1000u}) {
    const std::string material = Material(n, 5);
    ASSERT_EQ(Open({"shm:+udp:", material, 1}, &log), 0) << log;
    EXPECT_EQ(Ids(log, "handshake key "), std::vector<std::string>{IdOf(material)}) << n << log;
    EXPECT_EQ(Lines(log, "(domain auth_key), same-host key the handshake key"), 1) << log;
  }
  // The domain's auth_key wins over the file (which is still checked).
  setenv("FI_BYPASS_AUTH_KEY_FILE", KeyFile("file.key", Material(32, 9), 0600).c_str(), 1);
  ASSERT_EQ(Open({"shm:+udp:", Material(48, 2), 1}, &log), 0) << log;
  EXPECT_EQ(Ids(log, "handshake key "), std::vector<std::string>{IdOf(Material(48, 2))}) << log;
}

// Without a user key, this host's peers share the per-user key next to the
// registry: every endpoint of every domain (and process) has the same.
TEST_F(KeyConfigTest, WithoutAUserKeyThisHostsPeersShareThePerUserKey) {
  absl::StatusOr<std::string> dir = bypass::driver::shm::DefaultDirectory();
  ASSERT_TRUE(dir.ok()) << dir.status();
  std::string log;
  ASSERT_EQ(Open({"shm:", "", 2}, &log), 0) << log;
  std::vector<std::string> ids = Ids(log, "same-host key ");
  ASSERT_EQ(Open({"shm:+udp:", "", 1}, &log), 0) << log;
  for (const std::string& id : Ids(log, "same-host key ")) ids.push_back(id);
  absl::StatusOr<bypass::driver::shm::Key> key = bypass::driver::shm::UserKey(*dir);
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(ids, std::vector<std::string>(3, bypass::driver::shm::KeyId(*key))) << log;
}

// The warning about peers on other hosts, once per process: run in a fresh
// process (this binary again, this test only) so no earlier test has used it.
TEST_F(KeyConfigTest, UnauthenticatedRemotePeersAreWarnedAboutOncePerProcess) {
  if (std::getenv("BYPASS_KEY_WARNING_CHILD") == nullptr) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      setenv("BYPASS_KEY_WARNING_CHILD", "1", 1);
      unsetenv("XML_OUTPUT_FILE");  // the parent's report
      unsetenv("TEST_PREMATURE_EXIT_FILE");
      execl("/proc/self/exe", "fi_config_test",
            "--gtest_filter=KeyConfigTest.UnauthenticatedRemotePeersAreWarnedAboutOncePerProcess",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "see the child's output above";
    return;
  }
  const std::string warning = "are not authenticated: set FI_BYPASS_AUTH_KEY_FILE";
  std::string log;
  // Only this host's peers (shm alone): nothing to warn about.
  ASSERT_EQ(Open({"shm:", "", 2}, &log), 0) << log;
  EXPECT_EQ(Lines(log, warning), 0) << log;
  // A user key covers other hosts.
  ASSERT_EQ(Open({"shm:+udp:", Material(32, 1), 2}, &log), 0) << log;
  EXPECT_EQ(Lines(log, warning), 0) << log;
  // None: one line for the first endpoint, none for the others.
  int lines = 0;
  for (const char* devices : {"udp:", "shm:+udp:", "udp:"}) {
    ASSERT_EQ(Open({devices, "", 2}, &log), 0) << log;
    lines += Lines(log, warning);
  }
  EXPECT_EQ(lines, 1);
}

// Congestion control is a parameter (FI_BYPASS_CONGESTION_CONTROL, on by
// default), and so is the first flight; a bad one is refused with the rest.
TEST(ConfigTest, CongestionControlIsAParameter) {
  const bypass::fi::Settings d = bypass::fi::ReadSettings();
  EXPECT_TRUE(d.engine.congestion_control);
  EXPECT_EQ(d.engine.cc_initial_window, 16u);
  setenv("FI_BYPASS_CONGESTION_CONTROL", "0", 1);
  setenv("FI_BYPASS_CC_INITIAL_WINDOW", "32", 1);
  const bypass::fi::Settings s = bypass::fi::ReadSettings();
  EXPECT_FALSE(s.engine.congestion_control);
  EXPECT_EQ(s.engine.cc_initial_window, 32u);
  setenv("FI_BYPASS_CC_INITIAL_WINDOW", "1", 1);
  const bypass::fi::Settings bad = bypass::fi::ReadSettings();
  unsetenv("FI_BYPASS_CONGESTION_CONTROL");
  unsetenv("FI_BYPASS_CC_INITIAL_WINDOW");
  EXPECT_EQ(bad.engine.cc_initial_window, 16u) << "rejected (with a warning): the defaults";
  EXPECT_TRUE(bad.engine.congestion_control);
}

}  // namespace
