// Copies to and from the application's memory: see hmem.h.
#include "fabric/fi/hmem.h"

#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstring>

#include "fabric/fi/domain.h"
#include "fabric/fi/services.h"

namespace bypass::fi {

int SetHmemOverride(Domain* d, const void* ops) {
  const auto* o = static_cast<const fi_hmem_override_ops*>(ops);
  if (o->size < sizeof(fi_hmem_override_ops) || o->copy_from_hmem_iov == nullptr ||
      o->copy_to_hmem_iov == nullptr) {
    BYPASS_FI_WARN(FI_LOG_DOMAIN, "FI_SET_OPS_HMEM_OVERRIDE: size must be sizeof(struct "
                   "fi_hmem_override_ops) and both copy functions set\n");
    return -FI_EINVAL;
  }
  d->hmem_override = *o;
  d->hmem_overridden.store(true, std::memory_order_release);
  return 0;
}

bool HmemOverridden(const Domain* d) {
  return d->hmem_overridden.load(std::memory_order_acquire);
}

ssize_t CopyToUser(const Domain* d, const iovec* iov, size_t count, const void* src, size_t len) {
  if (HmemOverridden(d)) {
    return d->hmem_override.copy_to_hmem_iov(FI_HMEM_SYSTEM, 0, iov, count, 0, src, len);
  }
  size_t done = 0;
  for (size_t i = 0; i < count && done < len; ++i) {
    const size_t n = std::min(iov[i].iov_len, len - done);
    if (n > 0) std::memcpy(iov[i].iov_base, static_cast<const uint8_t*>(src) + done, n);
    done += n;
  }
  return static_cast<ssize_t>(done);
}

ssize_t CopyFromUser(const Domain* d, const iovec* iov, size_t count, void* dst, size_t len) {
  if (HmemOverridden(d)) {
    return d->hmem_override.copy_from_hmem_iov(dst, len, FI_HMEM_SYSTEM, 0, iov, count, 0);
  }
  size_t done = 0;
  for (size_t i = 0; i < count && done < len; ++i) {
    const size_t n = std::min(iov[i].iov_len, len - done);
    if (n > 0) std::memcpy(static_cast<uint8_t*>(dst) + done, iov[i].iov_base, n);
    done += n;
  }
  return static_cast<ssize_t>(done);
}

}  // namespace bypass::fi
