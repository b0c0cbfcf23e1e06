// FI_EP_DGRAM endpoints: plain UDP datagrams straight onto the device
// queue, with no engine in between (dgram.cc says how). An endpoint of type
// FI_EP_DGRAM holds a DgramState once enabled; ep.cc and ep_ops.cc hand it
// its calls.
#ifndef BYPASS_FABRIC_FI_DGRAM_H_
#define BYPASS_FABRIC_FI_DGRAM_H_

#include <rdma/fabric.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <cstdint>
#include <deque>
#include <vector>

#include "fabric/rdm/inbox.h"

namespace bypass::fi {

struct Ep;

// A posted datagram receive.
struct DgramPosted {
  std::vector<iovec> iov;
  void* context = nullptr;
  bool suppress = false;
};

// An FI_EP_DGRAM endpoint's state: datagrams straight onto the device
// queue, no engine (no reliability, no order).
struct DgramState {
  rdm::Inbox inbox{1024};
  std::deque<DgramPosted> posted;
  bool attached = false;
  uint32_t max_posted = 0;
  uint64_t dropped = 0;  // arrivals with no posted receive, or malformed
};

// REQUIRES (all): the domain guard is held.
int EnableDgram(Ep* ep);
void CloseDgram(Ep* ep);
void ProgressDgram(Ep* ep);
ssize_t DgramSend(Ep* ep, const iovec* iov, size_t count, fi_addr_t dest, void* context,
                  uint64_t flags, bool inject);
ssize_t DgramRecv(Ep* ep, const iovec* iov, size_t count, void* context, uint64_t flags);
bool DgramCancel(Ep* ep, void* context);

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_DGRAM_H_
