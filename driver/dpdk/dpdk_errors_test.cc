// Bad configuration of the DPDK backends fails with one line that says what
// to do, and leaves the process able to open good devices afterwards.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "driver/device.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bypass::driver {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

void ExpectOneLine(const absl::Status& s) {
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), Not(HasSubstr("\n"))) << s;
  EXPECT_FALSE(s.message().empty());
}

TEST(DpdkErrorsTest, MissingMemifSocketDirectory) {
  auto dev = OpenDevice("memif:/nonexistent-bypass-dir/x.sock");
  ASSERT_FALSE(dev.ok());
  ExpectOneLine(dev.status());
  EXPECT_THAT(std::string(dev.status().message()), HasSubstr("mkdir -p /nonexistent-bypass-dir"));
}

TEST(DpdkErrorsTest, MemifSocketMustBeAbsolute) {
  auto dev = OpenDevice("memif:relative.sock");
  ASSERT_FALSE(dev.ok());
  ExpectOneLine(dev.status());
}

TEST(DpdkErrorsTest, MemifBadRole) {
  auto dev = OpenDevice("memif:/tmp/x.sock,role=boss");
  ASSERT_FALSE(dev.ok());
  EXPECT_THAT(std::string(dev.status().message()), HasSubstr("role=boss"));
}

TEST(DpdkErrorsTest, MemifServerTakenByAnotherProcess) {
  const std::string sock = "/tmp/bypass-errors-" + std::to_string(getpid()) + ".sock";
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // another process serving the socket: it holds the lock
    int fd = open((sock + ".lock").c_str(), O_CREAT | O_RDWR, 0600);
    if (fd < 0 || flock(fd, LOCK_EX) != 0) _exit(1);
    char c = 'x';
    if (write(pipefd[1], &c, 1) != 1) _exit(1);
    pause();
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(pipefd[0], &c, 1), 1);
  auto dev = OpenDevice("memif:" + sock + ",role=server");
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ASSERT_FALSE(dev.ok());
  ExpectOneLine(dev.status());
  EXPECT_THAT(std::string(dev.status().message()), HasSubstr("already served by another process"));
  unlink((sock + ".lock").c_str());
}

TEST(DpdkErrorsTest, UnknownVdev) {
  auto dev = OpenDevice("dpdk:net_nosuchdriver0");
  ASSERT_FALSE(dev.ok());
  ExpectOneLine(dev.status());
  EXPECT_THAT(std::string(dev.status().message()), HasSubstr("net_nosuchdriver0"));
}

TEST(DpdkErrorsTest, AttachToAPortThatIsNotThere) {
  auto dev = OpenDevice("dpdk:port=77,queues=0-0");
  ASSERT_FALSE(dev.ok());
  ExpectOneLine(dev.status());
}

TEST(DpdkErrorsTest, SameVdevTwice) {
  auto a = OpenDevice("dpdk:net_ring_errtest0");
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = OpenDevice("dpdk:net_ring_errtest0");
  ASSERT_FALSE(b.ok());
  ExpectOneLine(b.status());
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("already open"));
}

TEST(DpdkErrorsTest, TooManyQueuesAndTooLargeMtu) {
  DeviceOptions opts;
  opts.queues = 200;
  auto a = OpenDevice("dpdk:net_ring_errtest1", opts);
  ASSERT_FALSE(a.ok());
  ExpectOneLine(a.status());
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("queue pairs"));
  // The failed open left nothing behind: the same name opens now.
  auto b = OpenDevice("dpdk:net_ring_errtest1");
  EXPECT_TRUE(b.ok()) << b.status();
}

TEST(DpdkErrorsTest, JumboOnAPortThatCannotSaysTheLimit) {
  DeviceOptions opts;
  opts.mtu = 9000;
  auto dev = OpenDevice("memif:/tmp/bypass-jumbo-" + std::to_string(getpid()) + ".sock,role=server",
                        opts);
  ASSERT_FALSE(dev.ok());
  ExpectOneLine(dev.status());
  EXPECT_THAT(std::string(dev.status().message()), HasSubstr("supports MTU up to 1500"));
}

TEST(DpdkErrorsTest, Mlx5IsNamedAsNotBuilt) {
  auto dev = OpenDevice("mlx5:mlx5_0");
  ASSERT_FALSE(dev.ok());
  ExpectOneLine(dev.status());
}

}  // namespace
}  // namespace bypass::driver
