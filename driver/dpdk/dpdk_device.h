// DPDK backends: any DPDK port (vdev string or PCI address), memif between
// processes, and attachment to a port an embedding application set up.
#ifndef BYPASS_DRIVER_DPDK_DPDK_DEVICE_H_
#define BYPASS_DRIVER_DPDK_DPDK_DEVICE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "driver/device.h"
#include "driver/uri.h"

namespace bypass::driver::dpdk {

// Opens a device for scheme "dpdk" or "memif" (see OpenDevice in
// driver/device.h). bypass's own URI keys are already taken out of `uri`.
absl::StatusOr<std::unique_ptr<Device>> Open(DeviceUri uri, const DeviceOptions& opts);

}  // namespace bypass::driver::dpdk

#endif  // BYPASS_DRIVER_DPDK_DPDK_DEVICE_H_
