// The device conformance suite over pairs of UDP devices on lo, with two
// addresses of 127.0.0.0/8 (every one of which is local).
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "driver/device.h"
#include "driver/testing/conformance.h"
#include "driver/testing/conformance_util.h"
#include "driver/udp/udp_device.h"
#include "driver/uri.h"
#include "gtest/gtest.h"

namespace bypass::driver::udp {
namespace {

using ::bypass::driver::testing::BackendFactory;
using ::bypass::driver::testing::BackendFeatures;
using ::bypass::driver::testing::DeviceConformanceTest;
using ::bypass::driver::testing::EndpointPair;
using ::bypass::driver::testing::LocalIp;

class UdpFactory final : public BackendFactory {
 public:
  std::string Name() const override { return "udp"; }
  BackendFeatures Features() const override {
    BackendFeatures f;
    f.jumbo = true;             // lo's MTU is 64 KiB
    f.steering = false;         // one queue
    f.link_toggle = false;      // no link of its own
    f.max_queues = 1;
    f.tx_backpressure = false;  // a full receiving socket drops; the sender never waits
    f.binds_udp_ports = true;
    f.rx_udp_checksum_zero = true;
    f.poll_budget = 1'000'000;
    return f;
  }
  absl::StatusOr<EndpointPair> Open(const DeviceOptions& opts) override {
    absl::StatusOr<std::unique_ptr<Device>> a =
        udp::Open(*DeviceUri::Parse(absl::StrCat("udp:lo,ip=", LocalIp(1))), opts);
    if (!a.ok()) return a.status();
    absl::StatusOr<std::unique_ptr<Device>> b =
        udp::Open(*DeviceUri::Parse(absl::StrCat("udp:lo,ip=", LocalIp(2))), opts);
    if (!b.ok()) return b.status();
    return EndpointPair(*std::move(a), *std::move(b));
  }
};

UdpFactory factory;

INSTANTIATE_TEST_SUITE_P(Udp, DeviceConformanceTest, ::testing::Values(&factory),
                         ::bypass::driver::testing::BackendParamName);

}  // namespace
}  // namespace bypass::driver::udp
