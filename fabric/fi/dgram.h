// FI_EP_DGRAM endpoints: an rdm::DatagramEndpoint on the domain's port,
// beside the reliable endpoints on its demultiplexer and with the same
// completion records, so receives, cancel, progress and delivery into CQs
// and counters are the FI_EP_RDM paths (ep_ops.cc, ep.cc, progress.cc);
// this file makes the endpoint and sends on it.
#ifndef BYPASS_FABRIC_FI_DGRAM_H_
#define BYPASS_FABRIC_FI_DGRAM_H_

#include <rdma/fabric.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "fabric/rdm/rdm.h"

namespace bypass::fi {

struct Ep;

// The datagram endpoint of ep (its UDP port, sizes and DSCP from ep).
absl::StatusOr<std::unique_ptr<rdm::DatagramEndpoint>> CreateDgram(Ep* ep);
// One datagram of the bytes of iov to dest (after the FI_MSG_PREFIX space,
// where the endpoint has one). REQUIRES: the domain guard is held.
ssize_t DgramSend(Ep* ep, const iovec* iov, size_t count, fi_addr_t dest, void* context,
                  uint64_t flags, bool inject_call);
// FI_MSG_PREFIX (fi_msg(3) NOTES): the prefix is the first `prefix` bytes
// of the first buffer, never split across buffers; out gets the buffers
// after it (count of them). False when the first buffer is shorter.
bool SkipPrefix(const iovec* iov, size_t count, size_t prefix, iovec* out);
// Logs what the endpoint dropped and closes it.
void CloseDgram(Ep* ep);

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_DGRAM_H_
