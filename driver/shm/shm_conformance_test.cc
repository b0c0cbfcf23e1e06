// The device conformance suite over two shm devices of one process, in a
// fresh registry directory per pair.
#include <stdlib.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "driver/device.h"
#include "driver/shm/shm_device.h"
#include "driver/testing/conformance.h"
#include "driver/uri.h"
#include "gtest/gtest.h"

namespace bypass::driver::shm {
namespace {

using ::bypass::driver::testing::BackendFactory;
using ::bypass::driver::testing::BackendFeatures;
using ::bypass::driver::testing::DeviceConformanceTest;
using ::bypass::driver::testing::EndpointPair;

class ShmFactory final : public BackendFactory {
 public:
  std::string Name() const override { return "shm"; }
  BackendFeatures Features() const override {
    BackendFeatures f;
    f.jumbo = true;
    f.steering = false;     // one queue: the registry delivers by port
    f.link_toggle = false;  // the link is always up
    f.max_queues = 1;
    f.tx_backpressure = true;  // a full lane makes TxBurst take fewer
    f.binds_udp_ports = true;
    f.poll_budget = 100'000;  // delivery is synchronous
    return f;
  }
  absl::StatusOr<EndpointPair> Open(const DeviceOptions& opts) override {
    std::string dir = absl::StrCat(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp",
                                   "/shm_conformance_XXXXXX");
    if (mkdtemp(dir.data()) == nullptr) return absl::InternalError("mkdtemp failed");
    auto a = shm::Open(*DeviceUri::Parse(absl::StrCat("shm:", dir, ",ip=10.88.0.1")), opts);
    if (!a.ok()) return a.status();
    auto b = shm::Open(*DeviceUri::Parse(absl::StrCat("shm:", dir, ",ip=10.88.0.2")), opts);
    if (!b.ok()) return b.status();
    return EndpointPair(*std::move(a), *std::move(b));
  }
};

ShmFactory factory;

INSTANTIATE_TEST_SUITE_P(Shm, DeviceConformanceTest, ::testing::Values(&factory),
                         ::bypass::driver::testing::BackendParamName);

}  // namespace
}  // namespace bypass::driver::shm
