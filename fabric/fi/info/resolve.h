// Name resolution for fi_getinfo: node and service into an IPv4 address
// and a UDP port, and a destination's MAC from the kernel neighbour table.
#ifndef BYPASS_FABRIC_FI_INFO_RESOLVE_H_
#define BYPASS_FABRIC_FI_INFO_RESOLVE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "driver/device.h"

namespace bypass::fi::internal {

// What node and service named; an absent part stays unset.
struct NodeService {
  std::optional<uint32_t> ip;  // host order
  std::optional<uint16_t> port;
};

// node: an IPv4 literal or a host name (getaddrinfo, AF_INET; numeric_only
// for FI_NUMERICHOST); service: a UDP port number or a service name.
// Returns the error text ("" on success).
std::string ResolveNodeService(const char* node, const char* service, bool numeric_only,
                               NodeService* out);

// The MAC of a complete entry for ip (host order) in the text of
// /proc/net/arp; nothing if there is none or it is incomplete.
std::optional<driver::MacAddress> FindNeighbour(std::string_view arp_table, uint32_t ip);

// Reads the table at path and looks ip up; nothing when unreadable.
std::optional<driver::MacAddress> LookupNeighbour(const char* path, uint32_t ip);

}  // namespace bypass::fi::internal

#endif  // BYPASS_FABRIC_FI_INFO_RESOLVE_H_
