// Multicast on FI_EP_DGRAM (fi_cm(3) fi_join, fi_mc_addr; FI_MULTICAST):
// an endpoint joins an IPv4 multicast group:port, its EQ gets
// FI_JOIN_COMPLETE with the fid_mc, and fi_mc_addr names the group as a
// destination of fi_send / fi_sendmsg. A datagram to the group reaches every
// endpoint joined to it: on a NIC-path device through the group's Ethernet
// address (01:00:5e + its low 23 bits), on the sender's own queue through
// the engine's loop (rdm::Port::LoopToGroup) or the kernel's
// (IP_MULTICAST_LOOP), the sender included when it joined. fi_close of the
// fid_mc leaves.
//
// Offered where the device joins groups (driver::QueuePair::JoinGroup):
// loopback domains (the segment carries multicast frames to every port),
// the kernel UDP device and the default domain shm:+udp: (a socket per
// group on each queue; the intra-host device has no groups: a group's
// frames go through the remote device, and the kernel loops them back to
// this host's members, which avoids a second copy through shared memory).
// Refused (no FI_MULTICAST; fi_join -FI_EOPNOTSUPP) on DPDK devices and
// mlx5 (README.md says why).
#ifndef BYPASS_FABRIC_FI_MCAST_H_
#define BYPASS_FABRIC_FI_MCAST_H_

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>

#include <cstdint>

#include "driver/device.h"
#include "fabric/rdm/types.h"

namespace bypass::fi {

struct Ep;

// Whether FI_EP_DGRAM on a domain of this device offers FI_MULTICAST.
bool DeviceCarriesMulticast(const driver::DeviceInfo& info);

// fi_join: addr is a struct sockaddr_in (AF_INET, 224.0.0.0/4, a non-zero
// port). flags 0 (send and receive), FI_SEND or FI_RECV. Errors, each with
// one FI_WARN line: -FI_EINVAL (a bad address, null mc, not FI_EP_DGRAM),
// -FI_EBADFLAGS, -FI_EOPNOTSUPP (the endpoint lacks FI_MULTICAST, or its
// device carries none), -FI_EADDRNOTAVAIL (the device could not join: a
// socket error, said in the line), -FI_EOPBADSTATE (not enabled), -FI_ENOEQ (no EQ
// bound), -FI_EALREADY (joined already), -FI_ENOSPC (too many
// memberships), -FI_EAGAIN (the EQ is full: nothing joined). The fid_mc
// holds the endpoint: fi_close of the endpoint is -FI_EBUSY until it goes.
int JoinGroup(fid_ep* ep, const void* addr, uint64_t flags, fid_mc** mc, void* context);

// The engine peer of a group's fi_addr (fi_mc_addr of a membership that
// may send); false for any other fi_addr. REQUIRES: the endpoint's lock.
bool FindGroupPeer(const Ep* ep, fi_addr_t fa, rdm::PeerId* out);

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_MCAST_H_
