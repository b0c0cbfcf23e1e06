// The address of a bypass endpoint as libfabric applications see it:
// FI_SOCKADDR_IN (struct sockaddr_in, 16 bytes), so any code that
// understands IPv4 addresses understands ours. The Ethernet MAC rides in the
// first six bytes of sin_zero; all zeros there means "not known", and the
// facade finds it (kernel neighbour table, or an exchange on the port) when
// the address is inserted into an AV.
#ifndef BYPASS_FABRIC_FI_ADDRESS_ADDRESS_H_
#define BYPASS_FABRIC_FI_ADDRESS_ADDRESS_H_

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdint>
#include <cstring>
#include <optional>

#include "driver/device.h"
#include "fabric/rdm/types.h"

namespace bypass::fi {

inline constexpr size_t kAddrLen = sizeof(sockaddr_in);

// The sockaddr_in for an engine address (the incarnation is not carried:
// the engine learns it at first contact).
inline sockaddr_in ToSockaddr(const rdm::Address& a) {
  sockaddr_in s;
  std::memset(&s, 0, sizeof(s));
  s.sin_family = AF_INET;
  s.sin_port = htons(a.udp_port);
  s.sin_addr.s_addr = htonl(a.ip.value);
  std::memcpy(s.sin_zero, a.mac.bytes.data(), 6);
  return s;
}

// The engine address in `bytes` (len bytes of an application's address);
// nothing if it is not an AF_INET sockaddr_in with a non-zero port. A zero
// MAC comes back as zero: the caller resolves it.
inline std::optional<rdm::Address> FromSockaddr(const void* bytes, size_t len) {
  if (bytes == nullptr || len < sizeof(sockaddr_in)) return std::nullopt;
  sockaddr_in s;
  std::memcpy(&s, bytes, sizeof(s));
  if (s.sin_family != AF_INET || s.sin_port == 0) return std::nullopt;
  rdm::Address a;
  a.udp_port = ntohs(s.sin_port);
  a.ip.value = ntohl(s.sin_addr.s_addr);
  std::memcpy(a.mac.bytes.data(), s.sin_zero, 6);
  return a;
}

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_ADDRESS_ADDRESS_H_
