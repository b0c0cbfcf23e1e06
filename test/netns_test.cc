// The namespace helper of multi-host tests: it makes and removes two
// namespaces joined by veth, and without the privilege to do so it fails with
// one line that says what to do.
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/netns.h"

namespace bypass::test {
namespace {

using ::testing::HasSubstr;

TEST(VethPairTest, CreatesAndRemovesTwoHosts) {
  const std::string prefix = "bnt" + std::to_string(getpid() % 10000) + "_";
  {
    auto v = VethPair::Create(prefix);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_TRUE(bypass::test::Run("ip -n " + (*v)->ns_a() + " addr show " + (*v)->if_a() +
                                  " | grep -q 'inet " + (*v)->ip_a() + "/24'")
                    .ok());
    EXPECT_TRUE(bypass::test::Run("ip -n " + (*v)->ns_b() + " addr show " + (*v)->if_b() +
                                  " | grep -q 'inet " + (*v)->ip_b() + "/24'")
                    .ok());
    EXPECT_TRUE(bypass::test::Run("ip -n " + (*v)->ns_b() + " link show " + (*v)->if_b() +
                                  " | grep -q 'state UP'")
                    .ok());
  }
  EXPECT_FALSE(bypass::test::Run("ip netns list | grep -q " + prefix).ok())
      << "namespaces left behind";
}

TEST(VethPairTest, WithoutRootSaysWhatToDo) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    auto v = VethPair::Create("bnu_");
    const std::string msg = v.ok() ? "ok" : std::string(v.status().message());
    if (write(fds[1], msg.data(), msg.size()) < 0) _exit(3);
    _exit(0);
  }
  close(fds[1]);
  char buf[512] = {0};
  const ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "could not drop privileges";
  const std::string msg(buf, n > 0 ? static_cast<size_t>(n) : 0);
  EXPECT_THAT(msg, HasSubstr("root"));
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

}  // namespace
}  // namespace bypass::test
