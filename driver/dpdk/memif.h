// memif between processes: DPDK's memif PMD behind a socket path, with the
// server/client role arbitrated by a lock file. Internal to driver/dpdk.
#ifndef BYPASS_DRIVER_DPDK_MEMIF_H_
#define BYPASS_DRIVER_DPDK_MEMIF_H_

#include <memory>

#include "absl/status/statusor.h"
#include "driver/device.h"
#include "driver/uri.h"

namespace bypass::driver::dpdk {

// memif:SOCKET[,role=server|client|auto][,id=N]. role=auto (the default)
// serves if no other process serves SOCKET, else connects; a client waits
// for its server to listen and returns with the link up.
absl::StatusOr<std::unique_ptr<Device>> OpenMemif(const DeviceUri& uri, const DeviceOptions& opts);

}  // namespace bypass::driver::dpdk

#endif  // BYPASS_DRIVER_DPDK_MEMIF_H_
