// The mlx5 scheme: `mlx5:DEVICE[,port=N]` opens a ConnectX port through
// rdma-core direct verbs. No rdma-core types appear here.
#ifndef BYPASS_DRIVER_MLX5_MLX5_DEVICE_H_
#define BYPASS_DRIVER_MLX5_MLX5_DEVICE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "driver/device.h"
#include "driver/uri.h"

namespace bypass::driver::mlx5 {

// Opens DEVICE (an RDMA device name such as mlx5_0, as ibv_devices lists it)
// on port N (default 1): protection domain, per queue a hugepage pool
// registered with ibv_reg_mr, a send and a receive CQ (64-byte CQEs, no
// compression) and a raw-packet QP (scatter-to-CQE off) taken to RTS, whose
// rings bypass then drives itself. Frames to the port's MAC go to queue 0;
// SteerUdpPort adds UDP destination-port rules. REQUIRES: bypass's own URI
// keys already taken into opts (TakeUriOptions). Errors are one line.
absl::StatusOr<std::unique_ptr<Device>> Open(DeviceUri uri, const DeviceOptions& opts);

}  // namespace bypass::driver::mlx5

#endif  // BYPASS_DRIVER_MLX5_MLX5_DEVICE_H_
