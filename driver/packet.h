// The backend-neutral packet descriptor every queue pair hands out.
#ifndef BYPASS_DRIVER_PACKET_H_
#define BYPASS_DRIVER_PACKET_H_

#include <cstddef>
#include <cstdint>

namespace bypass::driver {

// One frame in a driver-owned buffer. A Packet lives in memory owned by the
// queue pair's pool (the loopback pool header, DPDK's mbuf private area, an
// mlx5 buffer slot); its fields are plain data so the layers above read them
// without a call. The frame is [data, data + len), starting at the Ethernet
// header; the buffer can hold `capacity` bytes from `data`.
struct Packet {
  uint8_t* data;      // first byte of the Ethernet frame
  uint32_t len;       // frame length in bytes (without FCS)
  uint32_t capacity;  // bytes writable from data
  uint64_t backend;   // the backend's own handle (e.g. rte_mbuf*); opaque
  uint16_t rx_queue;  // queue the frame arrived on
  uint16_t ol_flags;  // OffloadFlags on receive (checksum verified) / transmit
  uint32_t reserved;
};
static_assert(sizeof(Packet) == 32, "Packet is half a cache line");

// Per-packet offload flags.
enum PacketOffload : uint16_t {
  kRxIpChecksumGood = 1u << 0,   // the NIC verified the IPv4 header checksum
  kRxL4ChecksumGood = 1u << 1,   // the NIC verified the UDP checksum
  // The frame came from a process of this host through memory only
  // processes of this user share (the intra-host device): what it says
  // about its sender's memory can be read in place (ReadPeerMemory).
  kRxSameHost = 1u << 2,
  // The frame came through memory only (a shared-memory ring between
  // processes, or in-process loopback), copied by the CPU: no bit of it can
  // have changed on the way, so the layer above may skip its own integrity
  // check (fabric/rdm/PROTOCOL.md, "Unchecked packets"). Set by the
  // intra-host device, memif and loopback on every frame they deliver;
  // never by a device with a wire; cleared by a decorator that changes
  // bytes (the fault device's corruption).
  kRxIntact = 1u << 3,
  kTxIpChecksum = 1u << 8,       // ask the NIC to fill the IPv4 checksum
  kTxUdpChecksum = 1u << 9,      // ask the NIC to fill the UDP checksum
};

}  // namespace bypass::driver

#endif  // BYPASS_DRIVER_PACKET_H_
