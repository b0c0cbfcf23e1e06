// The host's interfaces and addresses (getifaddrs, /proc/net/route).
#include "driver/host.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include <cerrno>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace bypass::driver {
namespace {

// The interface of the default route (destination 0) in /proc/net/route.
std::string DefaultRouteInterface() {
  std::ifstream in("/proc/net/route");
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string iface;
    std::string dest;
    if (fields >> iface >> dest && dest == "00000000") return iface;
  }
  return "";
}

}  // namespace

std::vector<HostInterface> HostInterfaces() {
  std::vector<HostInterface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (const ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    HostInterface h;
    h.name = a->ifa_name;
    h.ipv4.value = ntohl(reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr);
    h.up = (a->ifa_flags & IFF_UP) != 0;
    h.loopback = (a->ifa_flags & IFF_LOOPBACK) != 0;
    out.push_back(h);
  }
  for (const ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_PACKET) continue;
    const auto* ll = reinterpret_cast<const sockaddr_ll*>(a->ifa_addr);
    if (ll->sll_halen != 6) continue;
    for (HostInterface& h : out) {
      if (h.name == a->ifa_name) std::memcpy(h.mac.bytes.data(), ll->sll_addr, 6);
    }
  }
  freeifaddrs(list);
  return out;
}

Ipv4Address PrimaryIpv4() {
  const std::vector<HostInterface> all = HostInterfaces();
  const std::string def = DefaultRouteInterface();
  for (const HostInterface& h : all) {
    if (!def.empty() && h.name == def && h.up) return h.ipv4;
  }
  for (const HostInterface& h : all) {
    if (h.up && !h.loopback) return h.ipv4;
  }
  return Ipv4Address{0x7f000001};
}

absl::StatusOr<HostInterface> FindInterface(std::string_view name) {
  const std::vector<HostInterface> all = HostInterfaces();
  std::vector<std::string> names;
  for (const HostInterface& h : all) {
    if (h.name == name) return h;
    names.push_back(h.name);
  }
  return absl::NotFoundError(absl::StrCat("no interface '", absl::string_view(name.data(), name.size()),
                                          "' with an IPv4 address here; there are: ",
                                          names.empty() ? "none" : absl::StrJoin(names, ", ")));
}

bool IsLocalIpv4(Ipv4Address ip) {
  if ((ip.value >> 24) == 127) return true;
  for (const HostInterface& h : HostInterfaces()) {
    if (h.ipv4 == ip) return true;
  }
  return false;
}

int64_t ReadProcessMemory(uint32_t pid, uint64_t addr, void* dst, size_t len) {
  const iovec local{dst, len};
  const iovec remote{reinterpret_cast<void*>(static_cast<uintptr_t>(addr)), len};
  const ssize_t n = process_vm_readv(static_cast<pid_t>(pid), &local, 1, &remote, 1, 0);
  return n < 0 ? -errno : n;
}

int64_t ReadProcessMemoryV(uint32_t pid, absl::Span<const PeerRange> ranges) {
  if (ranges.size() > kMaxPeerRanges) return -EINVAL;
  iovec local[kMaxPeerRanges];
  iovec remote[kMaxPeerRanges];
  for (size_t i = 0; i < ranges.size(); ++i) {
    local[i] = {ranges[i].dst, ranges[i].len};
    remote[i] = {reinterpret_cast<void*>(static_cast<uintptr_t>(ranges[i].addr)), ranges[i].len};
  }
  const ssize_t n = process_vm_readv(static_cast<pid_t>(pid), local, ranges.size(), remote,
                                     ranges.size(), 0);
  return n < 0 ? -errno : n;
}

unsigned long NetNamespaceId() {
  struct stat st;
  if (stat("/proc/self/ns/net", &st) != 0) return 0;
  return static_cast<unsigned long>(st.st_ino);
}

unsigned long PidNamespaceId() {
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<unsigned long>(st.st_ino);
}

uint32_t InterfaceMtu(std::string_view name) {
  if (name.empty() || name.size() >= IFNAMSIZ) return 0;
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  ifreq req{};
  std::memcpy(req.ifr_name, name.data(), name.size());
  const int r = ioctl(fd, SIOCGIFMTU, &req);
  close(fd);
  return r == 0 && req.ifr_mtu > 0 ? static_cast<uint32_t>(req.ifr_mtu) : 0;
}

}  // namespace bypass::driver
