// With every rate at zero the fault decorator must be invisible: the device
// conformance suite over fault-wrapped loopback ports (which also checks
// that its pass-through keeps buffer accounting exact).
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "driver/clock.h"
#include "driver/device.h"
#include "driver/fault/fault_device.h"
#include "driver/loopback/loopback_device.h"
#include "driver/testing/conformance.h"
#include "driver/uri.h"
#include "gtest/gtest.h"

namespace bypass::driver::fault {
namespace {

using ::bypass::driver::testing::BackendFactory;
using ::bypass::driver::testing::BackendFeatures;
using ::bypass::driver::testing::DeviceConformanceTest;
using ::bypass::driver::testing::EndpointPair;

// Two loopback ports on a fresh segment, each in a FaultDevice with no faults.
class FaultLoopbackFactory final : public BackendFactory {
 public:
  std::string Name() const override { return "fault_over_loopback"; }
  BackendFeatures Features() const override {
    BackendFeatures f;
    f.jumbo = true;
    f.steering = true;
    f.link_toggle = true;
    f.max_queues = loopback::LoopbackDevice::kMaxQueues;
    f.tx_backpressure = true;
    f.poll_budget = 100'000;
    return f;
  }
  absl::StatusOr<EndpointPair> Open(const DeviceOptions& opts) override {
    const std::string uri = absl::StrCat("loopback:fault_conformance", ++pairs_);
    std::unique_ptr<Device> ends[2];
    for (auto& end : ends) {
      absl::StatusOr<std::unique_ptr<loopback::LoopbackDevice>> port =
          loopback::Open(*DeviceUri::Parse(uri), opts);
      if (!port.ok()) return port.status();
      absl::StatusOr<std::unique_ptr<FaultDevice>> dev =
          FaultDevice::Create(*std::move(port), FaultOptions{}, clock_);
      if (!dev.ok()) return dev.status();
      end = *std::move(dev);
    }
    return EndpointPair(std::move(ends[0]), std::move(ends[1]));
  }

 private:
  ManualClock clock_;
  int pairs_ = 0;
};

FaultLoopbackFactory factory;

INSTANTIATE_TEST_SUITE_P(FaultOverLoopback, DeviceConformanceTest, ::testing::Values(&factory),
                         ::bypass::driver::testing::BackendParamName);

}  // namespace
}  // namespace bypass::driver::fault
