// Device queues for domains and for the contexts of scalable endpoints: a
// Lane is one queue of an open device, the rdm::Port that demultiplexes it
// by UDP port, and the lock that serializes both (every engine endpoint on
// the queue polls it). One lock per lane, none shared between lanes.
//
// Devices that deliver by frame (loopback, memif, DPDK, mlx5) cannot be
// opened twice: the process opens each URI once (a reference-counted
// SharedOpen), and each domain or context takes a free queue of it, its
// ports steered there (Device::SteerUdpPort). With no free queue a domain
// shares another domain's queue (one Port, one lock), and a context
// stays on its domain's lane (software demultiplexing). Devices that
// deliver by port (host_address: kernel UDP, the intra-host shm device,
// their composite) have one queue each, but open again costs a socket or a
// registry entry: every domain and every context opens its own instance,
// its own queue by construction.
#ifndef BYPASS_FABRIC_FI_LANE_H_
#define BYPASS_FABRIC_FI_LANE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "driver/device.h"
#include "fabric/fi/common.h"
#include "fabric/rdm/rdm.h"

namespace bypass::fi {

struct SharedOpen;

struct Lane {
  std::shared_ptr<SharedOpen> open;  // keeps the device open
  driver::Device* dev = nullptr;
  uint16_t queue = 0;
  std::unique_ptr<rdm::Port> port;
  DomainLock lock;
  ~Lane();  // the port goes first, then the queue is free again
};

// The lane of a new domain on uri (the domain's threading: whether its lock
// is taken). A URI LOCAL+REMOTE whose intra-host part cannot open falls
// back to REMOTE alone (*note says so, else it is cleared). FailedPrecondition
// when no queue is free and the domain whose queue others share takes no
// lock (FI_THREAD_DOMAIN), unless lock_unlocked: that queue's lock is then
// taken by every call from now on (a passive endpoint's domain: fi_listen,
// like the start of a progress thread, must not run while another thread
// is inside a call of that FI_THREAD_DOMAIN domain).
absl::StatusOr<std::shared_ptr<Lane>> OpenDomainLane(const std::string& uri, bool thread_safe,
                                                     bool lock_unlocked, std::string* note);
// A lane of its own for a context of a scalable endpoint on the domain
// whose lane is `of`, or null when the device has none to give (one
// queue, or every queue taken, and no new instance: the context then
// shares the domain's lane). *why says which on null.
std::shared_ptr<Lane> OpenContextLane(const Lane& of, bool thread_safe, std::string* why);
// Reserves udp_port on the lane's device for an engine endpoint on this
// lane, steering it to the lane's queue where the device has several:
// AlreadyExists when another lane of the device holds it. ReleasePort
// gives it back.
absl::Status ClaimPort(Lane& lane, uint16_t udp_port);
void ReleasePort(Lane& lane, uint16_t udp_port);

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_LANE_H_
