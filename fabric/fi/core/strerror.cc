// fi_strerror: libfabric's own errors (>= FI_ERRNO_OFFSET) by table, the
// rest through the C library, as libfabric does.
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <cstdlib>
#include <cstring>

namespace {

constexpr const char* kFabricErrors[] = {
    "Unspecified error",                                 // FI_EOTHER
    "Provided buffer is too small",                      // FI_ETOOSMALL
    "Operation not permitted in current state",          // FI_EOPBADSTATE
    "Error available",                                   // FI_EAVAIL
    "Flags not supported",                               // FI_EBADFLAGS
    "Missing or unavailable event queue",                // FI_ENOEQ
    "Invalid resource domain",                           // FI_EDOMAIN
    "Missing or unavailable completion queue",           // FI_ENOCQ
    "CRC error",                                         // FI_ECRC
    "Truncation error",                                  // FI_ETRUNC
    "Required key not available",                        // FI_ENOKEY
    "Missing or unavailable address vector",             // FI_ENOAV
    "Queue has been overrun",                            // FI_EOVERRUN
    "Receiver not ready, no receive buffers available",  // FI_ENORX
};
static_assert(sizeof(kFabricErrors) / sizeof(kFabricErrors[0]) == FI_ERRNO_MAX - FI_ERRNO_OFFSET);

}  // namespace

extern "C" const char* fi_strerror(int errnum) {
  const int e = std::abs(errnum);
  if (e < FI_ERRNO_OFFSET) return std::strerror(e);
  if (e < FI_ERRNO_MAX) return kFabricErrors[e - FI_ERRNO_OFFSET];
  return kFabricErrors[0];
}
