// The endpoint's keys: the user's (auth_key, FI_BYPASS_AUTH_KEY_FILE), the
// intra-host device's per-user key, and the warning when neither covers
// peers on other hosts.
#include "fabric/fi/keys.h"

#include <rdma/fi_errno.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <cstdio>
#include <string>

#include "absl/types/span.h"
#include "driver/shm/keys.h"
#include "fabric/fi/common.h"
#include "fabric/fi/domain.h"
#include "fabric/fi/info/info.h"
#include "fabric/fi/services.h"

namespace bypass::fi {
namespace {

// One auth_key the application gave (fi_domain(3), fi_endpoint(3)): 4 bytes
// are the wire's 32-bit auth_key (as before handshake keys), 32 or more a
// handshake key; other sizes are refused.
int TakeAuthKey(const char* what, const uint8_t* bytes, size_t size, uint32_t* wire,
                UserKey* user) {
  if (bytes == nullptr || size == 0) return 0;
  if (size == kAuthKeySize) {
    std::memcpy(wire, bytes, kAuthKeySize);
    return 0;
  }
  if (size >= driver::shm::kKeyBytes) {
    user->key = driver::shm::KeyFromBytes(absl::MakeConstSpan(bytes, size));
    user->source = what;
    return 0;
  }
  BYPASS_FI_WARN(FI_LOG_DOMAIN,
                 "%s of %zu bytes: give 4 bytes (the wire's 32-bit auth_key) or at least 32 (a "
                 "key that authenticates handshakes)\n",
                 what, size);
  return -FI_EINVAL;
}

std::string Id(const std::optional<std::array<uint8_t, 32>>& key) {
  return key ? driver::shm::KeyId(*key) : std::string("none");
}

// Once per process, not per endpoint: the condition is the configuration's.
void WarnUnauthenticatedOnce(const std::string& driver) {
  static std::atomic<bool> warned{false};
  if (warned.exchange(true)) return;
  constexpr char kFormat[] =
      "handshakes with peers on other hosts (%s) are not authenticated: set "
      "FI_BYPASS_AUTH_KEY_FILE to a file of 32 or more secret bytes (chmod 600) that "
      "the job's processes share, or give the domain an auth_key of 32 bytes or more\n";
  // libfabric shows no warning unless FI_LOG_LEVEL asks; this one is said
  // regardless (SECURITY.md), once.
  if (LogEnabled(FI_LOG_WARN, FI_LOG_EP_CTRL)) {
    BYPASS_FI_WARN(FI_LOG_EP_CTRL, kFormat, driver.c_str());
  } else {
    std::fprintf(stderr, "bypass: warning: ");
    std::fprintf(stderr, kFormat, driver.c_str());
  }
}

}  // namespace

int DomainUserKey(const std::string& key_file, const fi_domain_attr* attr, UserKey* out) {
  *out = UserKey();
  if (!key_file.empty()) {
    absl::StatusOr<std::string> bytes =
        driver::shm::ReadKeyFile(key_file, driver::shm::kKeyBytes, driver::shm::kMaxKeyFileBytes,
                                 /*follow_symlink=*/true);
    if (!bytes.ok()) {
      BYPASS_FI_WARN(FI_LOG_DOMAIN, "FI_BYPASS_AUTH_KEY_FILE: %s\n",
                     std::string(bytes.status().message()).c_str());
      return FromStatus(bytes.status());
    }
    out->key = driver::shm::KeyFromBytes(
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()));
    out->source = "FI_BYPASS_AUTH_KEY_FILE";
    std::fill(bytes->begin(), bytes->end(), '\0');
  }
  if (attr == nullptr) return 0;
  uint32_t wire = 0;  // the endpoints take it (EndpointKeys)
  return TakeAuthKey("domain auth_key", attr->auth_key, attr->auth_key_size, &wire, out);
}

int EndpointKeys(const Domain* d, const fi_info* info, bool reliable, rdm::EndpointConfig* c) {
  UserKey user = d->user_key;
  const fi_domain_attr* da = info->domain_attr;
  const fi_ep_attr* ea = info->ep_attr;
  int ret = 0;
  if (da != nullptr) {
    ret = TakeAuthKey("domain auth_key", da->auth_key, da->auth_key_size, &c->auth_key, &user);
  }
  if (ret == 0 && ea != nullptr) {
    ret = TakeAuthKey("endpoint auth_key", ea->auth_key, ea->auth_key_size, &c->auth_key, &user);
  }
  if (ret != 0) return ret;
  const driver::DeviceInfo& dev = d->dev->info();
  c->handshake_key = user.key;
  // A user key covers this host's peers too (config.h: unset same_host_key).
  c->same_host_key = user.key ? std::nullopt : dev.same_host_key;
  // (Its port may still change at fi_enable: the line names none.)
  BYPASS_FI_INFO(FI_LOG_EP_CTRL, "new endpoint on %s: handshake key %s (%s), same-host key %s\n",
                 dev.uri.c_str(), Id(user.key).c_str(), user.source,
                 user.key ? "the handshake key" : Id(dev.same_host_key).c_str());
  const bool only_this_host = dev.same_host_key && dev.driver.find('+') == std::string::npos;
  if (reliable && !user.key && !only_this_host) WarnUnauthenticatedOnce(dev.driver);
  return 0;
}

}  // namespace bypass::fi
