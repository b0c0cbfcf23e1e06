// The keys an endpoint's engine authenticates handshakes with (README.md,
// "Keys and access"): the user's key (the domain's auth_key of 32 bytes or
// more, else FI_BYPASS_AUTH_KEY_FILE), and for peers of this host the
// intra-host device's per-user key when the user gave none.
#ifndef BYPASS_FABRIC_FI_KEYS_H_
#define BYPASS_FABRIC_FI_KEYS_H_

#include <rdma/fabric.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "fabric/rdm/config.h"

namespace bypass::fi {

struct Domain;

// A key the user gave, and where it came from (for logs).
struct UserKey {
  std::optional<std::array<uint8_t, 32>> key;
  const char* source = "none";
};

// The domain's user key: attr's auth_key when it has 32 bytes or more,
// else FI_BYPASS_AUTH_KEY_FILE's (`key_file`, when set: read and checked
// even when the auth_key wins, so a bad file is never silently ignored).
// 0, or -FI_* after one log line saying what to do.
int DomainUserKey(const std::string& key_file, const fi_domain_attr* attr, UserKey* out);

// Fills the endpoint's keys from the domain, the endpoint's info (its
// domain_attr and ep_attr auth_keys: 4 bytes are the wire's 32-bit
// auth_key, 32 or more a handshake key) and the domain's device (the
// same-host key). Warns once per process when peers on other hosts would
// be unauthenticated. 0, or -FI_EINVAL after one log line.
int EndpointKeys(const Domain* d, const fi_info* info, bool reliable, rdm::EndpointConfig* c);

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_KEYS_H_
