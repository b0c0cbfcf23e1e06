#include "fabric/fi/info/resolve.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace bypass::fi::internal {
namespace {

// A port number, or a service name known to the system for UDP.
std::string ResolveService(const char* service, uint16_t* port) {
  uint32_t value = 0;
  if (absl::SimpleAtoi(service, &value)) {
    if (value > 65535) {
      return absl::StrCat("service \"", service, "\" is not a UDP port (0..65535)");
    }
    *port = static_cast<uint16_t>(value);
    return "";
  }
  addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(nullptr, service, &hints, &res);
  if (rc != 0 || res == nullptr) {
    return absl::StrCat("service \"", service,
                        "\" is neither a port number nor a UDP service name (", gai_strerror(rc),
                        ")");
  }
  sockaddr_in sin;
  std::memcpy(&sin, res->ai_addr, sizeof(sin));
  *port = ntohs(sin.sin_port);
  freeaddrinfo(res);
  return "";
}

}  // namespace

std::string ResolveNodeService(const char* node, const char* service, bool numeric_only,
                               NodeService* out) {
  *out = NodeService{};
  // fi_getinfo(3): node may be an FI_ADDR_STR address, then with no service:
  // "fi_sockaddr_in://10.0.0.2:7000" (the only string form bypass reads).
  constexpr char kStrPrefix[] = "fi_sockaddr_in://";
  if (node != nullptr && std::strncmp(node, kStrPrefix, sizeof(kStrPrefix) - 1) == 0) {
    if (service != nullptr && service[0] != '\0') {
      return absl::StrCat("node \"", node,
                          "\" is an FI_ADDR_STR address; service must then be null");
    }
    const std::string rest(node + sizeof(kStrPrefix) - 1);
    const size_t colon = rest.rfind(':');
    const std::string host = rest.substr(0, colon);
    in_addr a;
    uint32_t port = 0;
    if (colon == std::string::npos || inet_pton(AF_INET, host.c_str(), &a) != 1 ||
        !absl::SimpleAtoi(rest.substr(colon + 1), &port) || port > 65535) {
      return absl::StrCat("node \"", node, "\" is not fi_sockaddr_in://<IPv4>:<port>");
    }
    out->ip = ntohl(a.s_addr);
    out->port = static_cast<uint16_t>(port);
    return "";
  }
  if (service != nullptr && service[0] != '\0') {
    uint16_t port = 0;
    std::string err = ResolveService(service, &port);
    if (!err.empty()) return err;
    out->port = port;
  }
  if (node == nullptr || node[0] == '\0') return "";
  in_addr literal;
  if (inet_pton(AF_INET, node, &literal) == 1) {
    out->ip = ntohl(literal.s_addr);
    return "";
  }
  addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  if (numeric_only) hints.ai_flags |= AI_NUMERICHOST;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(node, nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    return absl::StrCat("node \"", node, "\" does not resolve to an IPv4 address (",
                        gai_strerror(rc),
                        numeric_only ? "; FI_NUMERICHOST wants a dotted IPv4 literal" : "", ")");
  }
  sockaddr_in sin;
  std::memcpy(&sin, res->ai_addr, sizeof(sin));
  out->ip = ntohl(sin.sin_addr.s_addr);
  freeaddrinfo(res);
  return "";
}

std::optional<driver::MacAddress> FindNeighbour(std::string_view arp_table, uint32_t ip) {
  // Lines after the header: "IP address  HW type  Flags  HW address  Mask  Device".
  bool header = true;
  const absl::string_view table(arp_table.data(), arp_table.size());
  for (absl::string_view line : absl::StrSplit(table, '\n')) {
    if (header) {
      header = false;
      continue;
    }
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() < 4) continue;
    in_addr a;
    const std::string ip_text(f[0]);
    if (inet_pton(AF_INET, ip_text.c_str(), &a) != 1 || ntohl(a.s_addr) != ip) continue;
    // ATF_COM (0x2): the entry is complete; others carry a zero MAC.
    const std::string flags_text(f[2]);
    char* end = nullptr;
    const unsigned long flags = std::strtoul(flags_text.c_str(), &end, 16);
    if (end == flags_text.c_str() || (flags & 0x2) == 0) continue;
    absl::StatusOr<driver::MacAddress> mac =
        driver::MacAddress::Parse(std::string_view(f[3].data(), f[3].size()));
    if (!mac.ok() || *mac == driver::MacAddress{}) continue;
    return *mac;
  }
  return std::nullopt;
}

std::optional<driver::MacAddress> LookupNeighbour(const char* path, uint32_t ip) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return FindNeighbour(text.str(), ip);
}

}  // namespace bypass::fi::internal
