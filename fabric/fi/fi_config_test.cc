// Bad configuration gets one clear line: a device URI that does not parse,
// an interface that does not exist, a directory that cannot be used. Each
// is caught where an application meets it (fi_domain), which fails with an
// error code, and the provider's log (FI_LOG_LEVEL=warn) says what to do.
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace {

// Runs fi_getinfo, fi_fabric and fi_domain with FI_BYPASS_DEVICES=devices,
// stderr captured; returns fi_domain's result (or the first failure) and
// the log text.
int OpenDomain(const std::string& devices, std::string* log) {
  setenv("FI_BYPASS_DEVICES", devices.c_str(), 1);
  setenv("FI_LOG_LEVEL", "warn", 1);
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
  if (ret == 0) ret = fi_fabric(info->fabric_attr, &fabric, nullptr);
  if (ret == 0) ret = fi_domain(fabric, info, &domain, nullptr);
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

}  // namespace
