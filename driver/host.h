// What this host (this network namespace) is on the network: its IPv4
// addresses and interfaces, read from the kernel at the time of the call
// (cold path; system calls). The kernel UDP device and the intra-host
// device both take their default address from PrimaryIpv4(), so that an
// endpoint has one address whichever path reaches it.
#ifndef BYPASS_DRIVER_HOST_H_
#define BYPASS_DRIVER_HOST_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "driver/device.h"

namespace bypass::driver {

struct HostInterface {
  std::string name;  // "eth0"
  Ipv4Address ipv4;
  MacAddress mac;    // zero for interfaces without one (lo)
  bool up = false;
  bool loopback = false;
};

// Every interface with an IPv4 address, in the kernel's order.
std::vector<HostInterface> HostInterfaces();

// The IPv4 of the interface that carries the default route, else of the
// first interface that is up and not loopback, else 127.0.0.1.
Ipv4Address PrimaryIpv4();

// The interface named `name`; NotFound with the names there are.
absl::StatusOr<HostInterface> FindInterface(std::string_view name);

// The MTU of interface `name` in this thread's network namespace
// (SIOCGIFMTU on a socket: /sys/class/net shows the namespace sysfs was
// mounted in, which a setns does not change), or 0 when it cannot be read.
uint32_t InterfaceMtu(std::string_view name);

// True for 127.0.0.0/8 and for every address of HostInterfaces().
bool IsLocalIpv4(Ipv4Address ip);

// True for 127.0.0.0/8.
inline bool IsLoopbackIpv4(Ipv4Address ip) { return (ip.value >> 24) == 127; }

// Copies len bytes at addr in process pid into dst with one
// process_vm_readv (cross-memory attach: the kernel copies once). Returns
// the bytes copied or a negative errno (-EPERM when ptrace rules, such as
// Yama's ptrace_scope, forbid it; -ESRCH for a process that is gone).
int64_t ReadProcessMemory(uint32_t pid, uint64_t addr, void* dst, size_t len);
// The same for up to kMaxPeerRanges ranges (device.h) in one
// process_vm_readv, copied in order (each range completely before the
// next); the bytes copied (a short count stops at the first range that
// failed, possibly inside it) or a negative errno.
int64_t ReadProcessMemoryV(uint32_t pid, absl::Span<const PeerRange> ranges);

// The network namespace this process is in, as the inode number of
// /proc/self/ns/net (0 if unreadable): processes in one namespace share it.
unsigned long NetNamespaceId();

// The pid namespace this process is in, as the inode number of
// /proc/self/ns/pid (0 if unreadable): a pid means the same process only to
// processes that share it (process_vm_readv takes a pid).
unsigned long PidNamespaceId();

}  // namespace bypass::driver

#endif  // BYPASS_DRIVER_HOST_H_
