// The device conformance suite on real ConnectX ports: two mlx5 ports cabled
// back to back (or through a switch), named by environment variables.
// Hardware only: tagged `hw` and `manual`, skipped by `bazel test //...`.
// On a host with a ConnectX (as root, or with CAP_NET_RAW and a large enough
// `ulimit -l`):
//
//   bazel test --config=hw //driver/mlx5:mlx5_hw_conformance_test
//     --test_env=BYPASS_MLX5_A=mlx5:mlx5_0 --test_env=BYPASS_MLX5_B=mlx5:mlx5_1
//
// (ibv_devices lists the device names; add ,port=N for a second port and
// --test_env=BYPASS_MLX5_JUMBO=1 when both netdevs have MTU 9000.)
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "driver/device.h"
#include "driver/mlx5/mlx5_device.h"
#include "driver/options.h"
#include "driver/testing/conformance.h"
#include "driver/uri.h"
#include "gtest/gtest.h"

namespace bypass::driver::mlx5 {
namespace {

using ::bypass::driver::testing::BackendFactory;
using ::bypass::driver::testing::BackendFeatures;
using ::bypass::driver::testing::DeviceConformanceTest;
using ::bypass::driver::testing::EndpointPair;

absl::StatusOr<std::unique_ptr<Device>> OpenFromEnv(const char* var, const DeviceOptions& opts) {
  const char* text = std::getenv(var);
  if (text == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(var, " is not set: see the command in mlx5_hw_conformance_test.cc"));
  }
  absl::StatusOr<DeviceUri> uri = DeviceUri::Parse(text);
  if (!uri.ok()) return uri.status();
  DeviceOptions o = opts;
  if (absl::Status s = TakeUriOptions(*uri, o); !s.ok()) return s;
  return Open(*std::move(uri), o);
}

// Two real ports from BYPASS_MLX5_A and BYPASS_MLX5_B.
class HwFactory final : public BackendFactory {
 public:
  std::string Name() const override { return "mlx5_hw"; }
  BackendFeatures Features() const override {
    BackendFeatures f;
    f.jumbo = std::getenv("BYPASS_MLX5_JUMBO") != nullptr;
    f.steering = true;
    f.max_queues = 4;
    return f;
  }
  absl::StatusOr<EndpointPair> Open(const DeviceOptions& opts) override {
    absl::StatusOr<std::unique_ptr<Device>> a = OpenFromEnv("BYPASS_MLX5_A", opts);
    if (!a.ok()) return a.status();
    absl::StatusOr<std::unique_ptr<Device>> b = OpenFromEnv("BYPASS_MLX5_B", opts);
    if (!b.ok()) return b.status();
    return EndpointPair(*std::move(a), *std::move(b));
  }
};

HwFactory factory;

INSTANTIATE_TEST_SUITE_P(Mlx5Hw, DeviceConformanceTest, ::testing::Values(&factory),
                         ::bypass::driver::testing::BackendParamName);

}  // namespace
}  // namespace bypass::driver::mlx5
