// OpenDevice: dispatch by scheme and bypass's own URI keys.
#include <stdlib.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "driver/device.h"
#include "gtest/gtest.h"

namespace bypass::driver {
namespace {

std::string OneLine(const absl::Status& s) {
  const std::string msg(s.message());
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  return msg;
}

TEST(OpenDeviceTest, UnknownSchemeListsTheKnownOnes) {
  absl::StatusOr<std::unique_ptr<Device>> dev = OpenDevice("ethernet:eth0");
  ASSERT_EQ(dev.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg = OneLine(dev.status());
  for (const char* scheme : {"'ethernet'", "loopback", "memif", "dpdk", "mlx5", "udp:", "shm"}) {
    EXPECT_NE(msg.find(scheme), std::string::npos) << msg;
  }
}

TEST(OpenDeviceTest, Mlx5WithoutRdmaDevicesIsOneLine) {
  for (const char* uri : {"mlx5:mlx5_0", "mlx5:mlx5_0,port=1,ip=10.0.0.1"}) {
    absl::StatusOr<std::unique_ptr<Device>> dev = OpenDevice(uri);
    if (dev.ok()) GTEST_SKIP() << "this machine has an RDMA device";
    const std::string msg = OneLine(dev.status());
    EXPECT_EQ(msg.rfind("mlx5: no RDMA devices on this machine (ibv_get_device_list: ", 0), 0u)
        << msg;
  }
}

TEST(OpenDeviceTest, MalformedUriIsOneLine) {
  absl::StatusOr<std::unique_ptr<Device>> dev = OpenDevice("loopback");
  EXPECT_EQ(dev.status().code(), absl::StatusCode::kInvalidArgument);
  OneLine(dev.status());
}

TEST(OpenDeviceTest, BadBypassKeysSayWhatIsAccepted) {
  // A bad input and a phrase its error must contain.
  struct Case {
    const char* uri;
    const char* expect;
  };
  for (const Case& c : {Case{"loopback:open_test,ip=1.2.3", "ip=1.2.3: expected an IPv4 address"},
                        Case{"loopback:open_test,ip=300.0.0.1", "expected an IPv4 address"},
                        Case{"loopback:open_test,mtu=big", "mtu=big: expected a number from 68"},
                        Case{"loopback:open_test,mtu=10000", "from 68 to 9000"},
                        Case{"loopback:open_test,queues=0", "queues=0: expected a number"},
                        Case{"loopback:open_test,ring=1000", "ring=1000: expected a power of two"},
                        Case{"memif:/tmp/x.sock,mtu=1", "from 68 to 9000"}}) {
    absl::StatusOr<std::unique_ptr<Device>> dev = OpenDevice(c.uri);
    ASSERT_EQ(dev.status().code(), absl::StatusCode::kInvalidArgument) << c.uri;
    const std::string msg = OneLine(dev.status());
    EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
  }
}

TEST(OpenDeviceTest, BadDefaultsAreRejected) {
  DeviceOptions opts;
  opts.ring_size = 100;
  absl::StatusOr<std::unique_ptr<Device>> dev = OpenDevice("loopback:open_test", opts);
  EXPECT_EQ(dev.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(OneLine(dev.status()).find("power of two"), std::string::npos);
}

TEST(OpenDeviceTest, OpensLoopbackWithUriKeysOverridingOptions) {
  DeviceOptions opts;
  opts.mtu = 1500;
  opts.ring_size = 256;
  absl::StatusOr<std::unique_ptr<Device>> dev =
      OpenDevice("loopback:open_test,ip=192.168.7.9,mtu=9000,queues=2,ring=64", opts);
  ASSERT_TRUE(dev.ok()) << dev.status();
  const DeviceInfo& info = (*dev)->info();
  EXPECT_EQ(info.driver, "loopback");
  EXPECT_EQ(info.uri, "loopback:open_test,ip=192.168.7.9,mtu=9000,queues=2,ring=64");
  EXPECT_EQ(info.ipv4.ToString(), "192.168.7.9");
  EXPECT_EQ(info.mtu, 9000u);
  EXPECT_EQ(info.num_queues, 2);
  EXPECT_EQ(info.ring_size, 64);
  EXPECT_EQ((*dev)->queue(1).PoolCapacity(), 4u * 64);
}

TEST(OpenDeviceTest, OpensShmWithItsOwnMtuRange) {
  std::string dir = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") +
                    "/open_test_shm_XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  DeviceOptions opts;
  opts.pool_buffers = 8;
  absl::StatusOr<std::unique_ptr<Device>> dev =
      OpenDevice("shm:" + dir + ",ip=10.5.0.1,mtu=65000,slots=8", opts);
  ASSERT_TRUE(dev.ok()) << dev.status();
  EXPECT_EQ((*dev)->info().driver, "shm");
  EXPECT_EQ((*dev)->info().mtu, 65000u);
  EXPECT_EQ((*dev)->info().ipv4.ToString(), "10.5.0.1");
  EXPECT_EQ((*dev)->info().ring_size, 8);
  dev = OpenDevice("shm:" + dir + ",mtu=65001", opts);
  EXPECT_NE(OneLine(dev.status()).find("65000"), std::string::npos);
}

TEST(OpenDeviceTest, BackendErrorsComeThrough) {
  absl::StatusOr<std::unique_ptr<Device>> dev = OpenDevice("loopback:");
  EXPECT_EQ(dev.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(OneLine(dev.status()).find("segment name"), std::string::npos);
  dev = OpenDevice("loopback:x,colour=blue");
  EXPECT_EQ(dev.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(OneLine(dev.status()).find("'colour'"), std::string::npos);
}

}  // namespace
}  // namespace bypass::driver
