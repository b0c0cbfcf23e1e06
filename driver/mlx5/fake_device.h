// A Device of one queue pair over a FakeNic: the mlx5 queue pair, ring code
// and doorbells exactly as on a ConnectX, with the fake NIC in the device's
// place. Two of them on one Wire run the driver conformance suite.
#ifndef BYPASS_DRIVER_MLX5_FAKE_DEVICE_H_
#define BYPASS_DRIVER_MLX5_FAKE_DEVICE_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "driver/device.h"
#include "driver/mlx5/fake_nic.h"
#include "driver/mlx5/queue_pair.h"

namespace bypass::driver::mlx5 {

// One port of a fake ConnectX: MAC 02:00:00:00:5f:0P, IPv4 10.95.0.P
// (P = port + 1) unless opts.ipv4 is set. One queue; no steering, no link
// control.
class FakeMlx5Device final : public Device, private QpControl {
 public:
  // With nic_opts.step_on_doorbell the NIC steps on each doorbell and at each
  // RxBurst; otherwise call nic().Start().
  static absl::StatusOr<std::unique_ptr<FakeMlx5Device>> Open(std::shared_ptr<Wire> wire,
                                                              int port,
                                                              const DeviceOptions& opts,
                                                              FakeNic::Options nic_opts);
  FakeMlx5Device(const FakeMlx5Device&) = delete;
  FakeMlx5Device& operator=(const FakeMlx5Device&) = delete;
  ~FakeMlx5Device() override;

  const DeviceInfo& info() const override { return info_; }
  QueuePair& queue(uint16_t) override { return *qp_; }
  absl::Status SteerUdpPort(uint16_t udp_port, uint16_t q) override;
  LinkState link_state() const override { return LinkState::kUp; }
  absl::Status SetLinkState(LinkState state) override;

  FakeNic& nic() { return *nic_; }
  Mlx5QueuePair& qp() { return *qp_; }

 private:
  FakeMlx5Device() = default;
  absl::Status Recover() override;

  DeviceInfo info_;
  std::shared_ptr<Wire> wire_;
  std::unique_ptr<FakeNic> nic_;
  std::unique_ptr<Mlx5QueuePair> qp_;
};

}  // namespace bypass::driver::mlx5

#endif  // BYPASS_DRIVER_MLX5_FAKE_DEVICE_H_
