// The device conformance suite over two fake ConnectX NICs joined by a wire:
// the mlx5 queue pair and ring code as they drive the hardware.
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "driver/device.h"
#include "driver/mlx5/fake_device.h"
#include "driver/testing/conformance.h"
#include "gtest/gtest.h"

namespace bypass::driver::mlx5 {
namespace {

using ::bypass::driver::testing::BackendFactory;
using ::bypass::driver::testing::BackendFeatures;
using ::bypass::driver::testing::DeviceConformanceTest;
using ::bypass::driver::testing::EndpointPair;

// Two fake NICs on a fresh wire per pair, stepped by their doorbells.
class FakeMlx5Factory final : public BackendFactory {
 public:
  std::string Name() const override { return "mlx5_fake_nic"; }
  BackendFeatures Features() const override {
    BackendFeatures f;
    f.jumbo = true;
    f.max_queues = 1;
    f.poll_budget = 100'000;  // the NICs step synchronously
    return f;
  }
  absl::StatusOr<EndpointPair> Open(const DeviceOptions& opts) override {
    auto wire = std::make_shared<Wire>();
    absl::StatusOr<std::unique_ptr<FakeMlx5Device>> a =
        FakeMlx5Device::Open(wire, 0, opts, FakeNic::Options{});
    if (!a.ok()) return a.status();
    absl::StatusOr<std::unique_ptr<FakeMlx5Device>> b =
        FakeMlx5Device::Open(wire, 1, opts, FakeNic::Options{});
    if (!b.ok()) return b.status();
    return EndpointPair(*std::move(a), *std::move(b));
  }
};

FakeMlx5Factory factory;

INSTANTIATE_TEST_SUITE_P(Mlx5, DeviceConformanceTest, ::testing::Values(&factory),
                         ::bypass::driver::testing::BackendParamName);

}  // namespace
}  // namespace bypass::driver::mlx5
