// A DPDK port behind the driver contract: configuration, pools, queues, flow
// steering, link and device info. Internal to driver/dpdk; the scheme
// dispatch (dpdk_device.cc), memif (memif.cc) and af_xdp (af_xdp.cc) open
// ports through it.
#ifndef BYPASS_DRIVER_DPDK_PORT_H_
#define BYPASS_DRIVER_DPDK_PORT_H_

#include <rte_flow.h>
#include <rte_mempool.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "driver/device.h"
#include "driver/uri.h"

namespace bypass::driver::dpdk {

// rte_strerror of an errno, negative (as ethdev returns them) or not.
std::string ErrnoText(int err);

// A number unique in this process, for the names DPDK objects need (pools,
// vdevs): DPDK refuses a second object of the same name.
int NextObjectSerial();

// Whether a DPDK device name is a PCI address (dddd:bb:dd.f or bb:dd.f)
// rather than a vdev name.
bool LooksLikePci(const std::string& name);

// A DPDK port behind the driver contract.
class DpdkDevice final : public Device {
 public:
  DpdkDevice() = default;
  DpdkDevice(const DpdkDevice&) = delete;
  DpdkDevice& operator=(const DpdkDevice&) = delete;
  ~DpdkDevice() override;

  const DeviceInfo& info() const override { return info_; }
  QueuePair& queue(uint16_t q) override { return *queues_[q]; }
  absl::Status SteerUdpPort(uint16_t udp_port, uint16_t q) override;
  LinkState link_state() const override;
  absl::Status SetLinkState(LinkState state) override;

  // Probes `devargs` (unless a PCI device of that name already has a port),
  // configures and starts it with opts.queues queue pairs; the device owns the
  // port and, when `lock_fd` >= 0, that descriptor (also when this fails).
  // `iface` names the kernel interface whose IPv4 address is the device's
  // when opts has none. A nonzero `start_retry_ms` (memif clients) retries
  // the start until the link is up for that long. af_xdp devargs get its
  // UMEM pools and queues; a failed af_xdp RX queue setup is kAborted, which
  // OpenAfXdp retries.
  static absl::StatusOr<std::unique_ptr<Device>> OpenOwned(const std::string& devargs,
                                                           const std::string& uri_text,
                                                           const DeviceOptions& opts,
                                                           int lock_fd,
                                                           std::optional<std::string> iface,
                                                           uint64_t start_retry_ms = 0);
  // dpdk:port=N[,queues=A-B]: queues of a port the application configured
  // and started; the device owns its pools only.
  static absl::StatusOr<std::unique_ptr<Device>> Attach(const DeviceUri& uri,
                                                        const DeviceOptions& opts);

 private:
  uint16_t queue_hw(uint16_t q) const;
  rte_flow* CreateUdpFlow(uint16_t udp_port, uint16_t hw_queue, rte_flow_error* err);
  // af_xdp: pools laid out as its PMD registers them as UMEM (see
  // kAfXdpFillReserve in af_xdp.h).
  absl::Status CreatePools(const DeviceOptions& opts, uint16_t n, uint32_t data_room,
                           int socket, bool af_xdp = false);
  void FillInfo(const DeviceOptions& opts, std::optional<std::string> iface);

  DeviceInfo info_;
  uint16_t port_ = 0;
  std::string dev_name_;  // set when bypass hotplugged the device
  bool started_ = false;
  int lock_fd_ = -1;
  // af_xdp: the AF_XDP sockets its queues opened (see CloseLeftXskSockets).
  std::vector<std::pair<int, ino_t>> xsk_fds_;
  std::vector<rte_mempool*> pools_;
  std::vector<std::unique_ptr<QueuePair>> queues_;
  std::vector<rte_flow*> flows_;
};

}  // namespace bypass::driver::dpdk

#endif  // BYPASS_DRIVER_DPDK_PORT_H_
