// The intra-host shared-memory device: processes of one user in one network
// namespace exchange frames through each other's areas in /dev/shm, found by
// (IPv4, UDP port) through a directory of symlinks. No server; a process
// that dies leaves nothing that blocks the others (every liveness question
// is answered by an flock its owner held). See docs/ARCHITECTURE.md.
#ifndef BYPASS_DRIVER_SHM_SHM_DEVICE_H_
#define BYPASS_DRIVER_SHM_SHM_DEVICE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "driver/device.h"
#include "driver/shm/area.h"
#include "driver/shm/registry.h"
#include "driver/shm/shm_queue.h"
#include "driver/uri.h"

namespace bypass::driver::shm {

inline constexpr uint32_t kDefaultLanes = 128;
inline constexpr uint32_t kDefaultSlots = 32;
inline constexpr uint32_t kMaxShmMtu = 65000;
// The MTU of a composite's intra-host part that names none (shm:+udp:, the
// default domain): a 4 KiB message and the engine's headers in one frame
// (4096 + 76 + 28 = 4200 bytes of IP packet), so messages up to 4 KiB go
// in one frame to a peer of this host (fabric/rdm/PROTOCOL.md, "The
// same-host path"). A slot is then 4672 bytes (mtu + 14, to 64): a lane of
// 32 slots reserves 152 KiB of /dev/shm per active sender instead of 52 KiB
// at 1500 (64 processes all-to-all: about 600 MB instead of 200 MB). Give
// mtu= to the shm part for another size (shm:,mtu=1500+udp:).
inline constexpr uint32_t kCompositeShmMtu = 4608;

class ShmDevice;

// Opens `shm:[DIR][,ip=..][,mtu=..][,lanes=N][,slots=N]`. DIR is the
// registry directory (default /run/bypass/u<uid>.net<netns>.pid<pidns>,
// else under $XDG_RUNTIME_DIR/bypass; devices of two pid namespaces given
// one DIR do not reach each other, as memory is read by pid); ip= the
// address it is reached at (default PrimaryIpv4()); mtu= up to 65000;
// lanes= senders this device can receive from at once (1..1024, default
// 128); slots= frames per lane (a power of two 2..4096, default 32). One
// queue, no steering (the registry delivers by port), link always up. Takes
// bypass's own keys itself, with its own MTU range. Stale areas of this uid
// and stale links are reclaimed here.
//
// Processes must open their devices after fork, not before: a child that
// inherits the area's descriptor shares its lock, and keeps it "alive".
absl::StatusOr<std::unique_ptr<ShmDevice>> Open(DeviceUri uri, const DeviceOptions& opts);

class ShmDevice final : public Device {
 public:
  ShmDevice(const ShmDevice&) = delete;
  ShmDevice& operator=(const ShmDevice&) = delete;
  // Unbinds every port, releases its lanes in peers, unlinks its area.
  ~ShmDevice() override;

  const DeviceInfo& info() const override { return info_; }
  QueuePair& queue(uint16_t /*q*/) override { return *queue_; }
  ShmQueue& shm_queue() { return *queue_; }
  absl::Status SteerUdpPort(uint16_t udp_port, uint16_t q) override;
  LinkState link_state() const override { return LinkState::kUp; }
  absl::Status SetLinkState(LinkState state) override;

  const std::string& directory() const { return registry_->dir(); }
  const std::string& area_name() const { return area_->name(); }
  // What this device writes into the owner word of the lanes it sends on.
  uint64_t owner_word() const { return area_->owner_word(); }

 private:
  friend absl::StatusOr<std::unique_ptr<ShmDevice>> Open(DeviceUri uri, const DeviceOptions& opts);
  ShmDevice() = default;

  DeviceInfo info_;
  // Destroyed in reverse: the queue (unbinds, releases lanes), the area
  // (unlinked while locked), then the registry.
  std::unique_ptr<Registry> registry_;
  std::unique_ptr<OwnArea> area_;
  std::unique_ptr<ShmQueue> queue_;
};

}  // namespace bypass::driver::shm

#endif  // BYPASS_DRIVER_SHM_SHM_DEVICE_H_
