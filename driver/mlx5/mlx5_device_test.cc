// The real-device open path where there is no RDMA device (this machine, CI):
// opening fails with one clear line. On a ConnectX, see
// mlx5_hw_conformance_test.cc.
#include "driver/mlx5/mlx5_device.h"

#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "driver/device.h"
#include "driver/uri.h"
#include "gtest/gtest.h"

namespace bypass::driver::mlx5 {
namespace {

absl::StatusOr<std::unique_ptr<Device>> OpenText(const char* text) {
  absl::StatusOr<DeviceUri> uri = DeviceUri::Parse(text);
  if (!uri.ok()) return uri.status();
  return Open(*std::move(uri), DeviceOptions{});
}

TEST(Mlx5OpenTest, NoRdmaDevicesIsOneClearLine) {
  absl::StatusOr<std::unique_ptr<Device>> dev = OpenText("mlx5:mlx5_0,port=1");
  if (dev.ok()) GTEST_SKIP() << "this machine has an RDMA device";
  const std::string msg(dev.status().message());
  if (msg.find("no RDMA devices") == std::string::npos) {
    GTEST_SKIP() << "this machine has RDMA devices: " << msg;
  }
  std::printf("%s\n", msg.c_str());
  EXPECT_EQ(dev.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_EQ(msg.rfind("mlx5: no RDMA devices on this machine (ibv_get_device_list: ", 0), 0u)
      << msg;
  EXPECT_NE(msg.find("loopback:NAME"), std::string::npos) << msg;
}

TEST(Mlx5OpenTest, UriErrorsAreOneLine) {
  absl::StatusOr<std::unique_ptr<Device>> dev = OpenText("mlx5:mlx5_0,port=zero");
  ASSERT_FALSE(dev.ok());
  EXPECT_EQ(std::string(dev.status().message()),
            "mlx5: port=zero is not a port number (1, 2, ...)");
  dev = OpenText("mlx5:mlx5_0,colour=blue");
  ASSERT_FALSE(dev.ok());
  EXPECT_EQ(dev.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(dev.status().message()).find('\n'), std::string::npos);
}

}  // namespace
}  // namespace bypass::driver::mlx5
