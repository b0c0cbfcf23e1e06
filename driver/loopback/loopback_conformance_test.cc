// The device conformance suite over pairs of loopback ports.
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "driver/device.h"
#include "driver/loopback/loopback_device.h"
#include "driver/testing/conformance.h"
#include "driver/uri.h"
#include "gtest/gtest.h"

namespace bypass::driver::loopback {
namespace {

using ::bypass::driver::testing::BackendFactory;
using ::bypass::driver::testing::BackendFeatures;
using ::bypass::driver::testing::DeviceConformanceTest;
using ::bypass::driver::testing::EndpointPair;

// Two ports on a fresh segment per pair.
class LoopbackFactory final : public BackendFactory {
 public:
  std::string Name() const override { return "loopback"; }
  BackendFeatures Features() const override {
    BackendFeatures f;
    f.jumbo = true;
    f.steering = true;
    f.link_toggle = true;
    f.max_queues = LoopbackDevice::kMaxQueues;
    f.tx_backpressure = true;
    f.poll_budget = 100'000;  // delivery is synchronous: frames are there at once
    return f;
  }
  absl::StatusOr<EndpointPair> Open(const DeviceOptions& opts) override {
    const std::string uri = absl::StrCat("loopback:conformance", ++pairs_);
    absl::StatusOr<std::unique_ptr<LoopbackDevice>> a = loopback::Open(*DeviceUri::Parse(uri), opts);
    if (!a.ok()) return a.status();
    absl::StatusOr<std::unique_ptr<LoopbackDevice>> b = loopback::Open(*DeviceUri::Parse(uri), opts);
    if (!b.ok()) return b.status();
    return EndpointPair(*std::move(a), *std::move(b));
  }

 private:
  int pairs_ = 0;
};

LoopbackFactory factory;

INSTANTIATE_TEST_SUITE_P(Loopback, DeviceConformanceTest, ::testing::Values(&factory),
                         ::bypass::driver::testing::BackendParamName);

}  // namespace
}  // namespace bypass::driver::loopback
