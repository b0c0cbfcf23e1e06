// The device conformance suite: one set of tests every backend must pass.
//
// It is a value-parameterized suite over BackendFactory pointers rather than a
// TYPED_TEST_SUITE_P over backend types: what a backend supports (jumbo,
// steering, link toggling, queues) is a run-time property of a
// configuration, and one factory class can stand for several configurations
// (DPDK net_ring, memif, af_packet are one factory with different devargs).
// Unsupported features are skipped with a message, not silently passed.
//
// To run it for a backend, in a cc_test of any package that depends on
// //driver/testing:conformance (alwayslink) and @gtest_main:
//
//   #include "driver/testing/conformance.h"
//   namespace {
//   class MyFactory final : public bypass::driver::testing::BackendFactory {
//     ...  // Name(), Features(), Open(opts)
//   };
//   MyFactory factory;
//   INSTANTIATE_TEST_SUITE_P(My, DeviceConformanceTest,
//                            ::testing::Values(&factory),
//                            bypass::driver::testing::BackendParamName);
//   }  // namespace
//
// with `using bypass::driver::testing::DeviceConformanceTest;` (or the
// qualified name) in scope. Several factories may be listed in Values().
#ifndef BYPASS_DRIVER_TESTING_CONFORMANCE_H_
#define BYPASS_DRIVER_TESTING_CONFORMANCE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "driver/device.h"
#include "gtest/gtest.h"

namespace bypass::driver::testing {

// What a backend supports; tests of the rest are skipped.
struct BackendFeatures {
  bool jumbo = false;            // mtu 9000
  bool steering = false;         // SteerUdpPort with several queues
  bool link_toggle = false;      // SetLinkState drops while down, restores when up
  uint16_t max_queues = 1;       // queue pairs per device the suite may ask for
  bool tx_backpressure = false;  // an undrained receiver makes TxBurst take fewer
  // The device delivers by UDP port, not by frame (the kernel UDP device,
  // the intra-host device): OpenPair binds the suite's ports (kSuitePorts)
  // on queue 0 of both devices, which must then have distinct IPv4s.
  bool binds_udp_ports = false;
  // The device rebuilds a received frame's headers rather than carrying them
  // (the kernel UDP device writes them from the socket's addresses, after
  // the kernel checked the checksums): the UDP checksum arrives as 0 (none)
  // and every other byte as sent.
  bool rx_udp_checksum_zero = false;
  // RxBurst/TxBurst calls allowed for frames to arrive or a ring to drain: a
  // bound on work, not on time (no test asserts timing).
  uint64_t poll_budget = 10'000'000;
};

// Every UDP port the suite's frames use, as source or destination.
inline constexpr uint16_t kSuitePorts[] = {41000, 41001, 42000, 42001};

// Two endpoints that reach each other by MAC: frames A sends to B's MAC
// arrive at B and the reverse. For self-loopback backends (DPDK net_ring)
// `b` may be null: B is then A.
class EndpointPair {
 public:
  EndpointPair(std::unique_ptr<Device> a, std::unique_ptr<Device> b)
      : a_(std::move(a)), b_(std::move(b)) {}
  Device& a() { return *a_; }
  Device& b() { return b_ ? *b_ : *a_; }
  bool same() const { return b_ == nullptr; }

 private:
  std::unique_ptr<Device> a_;
  std::unique_ptr<Device> b_;
};

// Opens endpoint pairs of one backend configuration.
class BackendFactory {
 public:
  virtual ~BackendFactory() = default;
  // Used in test names: letters, digits and '_'.
  virtual std::string Name() const = 0;
  virtual BackendFeatures Features() const = 0;
  // Opens a fresh pair with `opts` (queues, ring_size, mtu, pool_buffers set
  // by the test); each call must give endpoints independent of earlier ones,
  // and return only once frames can flow (e.g. memif connected, link up).
  // Tests compare PoolAvailable before and after: a backend whose TX
  // completions return buffers lazily must count those (e.g. reclaim
  // completed TX descriptors in PoolAvailable) or report a leak.
  virtual absl::StatusOr<EndpointPair> Open(const DeviceOptions& opts) = 0;
};

// Names parameters by BackendFactory::Name().
std::string BackendParamName(const ::testing::TestParamInfo<BackendFactory*>& info);

// The fixture of the suite (tests in conformance.cc).
class DeviceConformanceTest : public ::testing::TestWithParam<BackendFactory*> {
 protected:
  BackendFeatures features() const { return GetParam()->Features(); }
  // Opens the pair; a failure fails the test (wrap in ASSERT_NO_FATAL_FAILURE).
  void OpenPair(const DeviceOptions& opts);
  Device& A() { return pair_->a(); }
  Device& B() { return pair_->b(); }
  bool Same() const { return pair_->same(); }
  // PoolAvailable of every queue of A and B, to compare before and after.
  std::vector<uint32_t> PoolLevels();

  std::optional<EndpointPair> pair_;
};

}  // namespace bypass::driver::testing

#endif  // BYPASS_DRIVER_TESTING_CONFORMANCE_H_
