// Copies the provider makes to and from the application's memory, through
// the domain's fi_hmem_override_ops when the application set them
// (fi_set_ops FI_SET_OPS_HMEM_OVERRIDE, fi_domain(3): "the memory movement
// functions a provider should use when accessing a user buffer").
//
// All memory here is FI_HMEM_SYSTEM (fi_getinfo offers no FI_HMEM: there is
// no device memory interface on these machines), so the override is called
// with iface FI_HMEM_SYSTEM and device 0. With an override set, the data
// paths copy every send, receive, RMA and atomic buffer of the
// application through a provider buffer (the engine never touches the
// application's memory), and registrations with remote access are refused
// (-FI_EOPNOTSUPP): the engine serves a peer's RMA from the region itself.
#ifndef BYPASS_FABRIC_FI_HMEM_H_
#define BYPASS_FABRIC_FI_HMEM_H_

#include <rdma/fi_ext.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

namespace bypass::fi {

struct Domain;

// fi_set_ops(FI_SET_OPS_HMEM_OVERRIDE): checks and copies ops into d
// (-FI_EINVAL: a short size or a null function). REQUIRES: d's lock.
int SetHmemOverride(Domain* d, const void* ops);
// Whether d has an override (the data paths then always copy).
bool HmemOverridden(const Domain* d);
// Copies len bytes of src into iov (at most its total), or the reverse;
// the bytes copied, or a negative fi_errno from the override.
ssize_t CopyToUser(const Domain* d, const iovec* iov, size_t count, const void* src, size_t len);
ssize_t CopyFromUser(const Domain* d, const iovec* iov, size_t count, void* dst, size_t len);

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_HMEM_H_
