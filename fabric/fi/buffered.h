// Buffered receives (fi_msg(3) "Buffered Receives", the FI_BUFFERED_RECV
// mode bit of fi_getinfo(3)) on an FI_EP_RDM endpoint, over the engine's
// public peek and claim (rdm.h, kRecvPeek | kRecvClaim).
//
// A message that arrives with no posted receive waits in the engine's
// unexpected queue. After each engine pass of a buffered endpoint the
// facade peeks it with a claim (reserving it for a BufferedRecv record),
// then receives it whole into the record's provider buffer (the engine
// receives a message whole or not at all: it has no partial reception).
// Once there, the receive CQ gets the notification: op_context the
// record's struct fi_recv_context {ep, NULL}, buf the provider buffer,
// len the message's size, FI_MORE when it is larger than
// FI_OPT_BUFFERED_LIMIT (buf then holds the whole message, so at least
// FI_OPT_BUFFERED_MIN bytes). The application then posts fi_recvmsg or
// fi_trecvmsg with that fi_recv_context as context and FI_CLAIM (the
// bytes are copied into its buffers; a standard receive completion with
// FI_CLAIM and the fi_recv_context's `context`) or FI_DISCARD (the buffer
// is freed; no completion).
//
// Flow control: while the provider buffers hold total_buffered_recv bytes
// (the engine's unexpected budget) or more, nothing more is taken from the
// engine, whose unexpected queue then refuses senders as without
// FI_BUFFERED_RECV (receiver not ready). Order: a peer's messages of one
// kind (untagged, tagged) are notified in the order sent; where untagged
// and tagged messages arrive in the same pass, the untagged are notified
// first (the engine keeps one queue and matches each kind separately).
#ifndef BYPASS_FABRIC_FI_BUFFERED_H_
#define BYPASS_FABRIC_FI_BUFFERED_H_

#include <rdma/fabric.h>
#include <rdma/fi_endpoint.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "fabric/rdm/types.h"

namespace bypass::fi {

struct Ep;
struct BufferedRecv;

// An endpoint's buffered receives (Ep::buffered, FI_EP_RDM opened with the
// FI_BUFFERED_RECV mode bit).
struct BufferedRecvs {
  size_t limit = 0;  // FI_OPT_BUFFERED_LIMIT
  size_t min = 0;    // FI_OPT_BUFFERED_MIN
  size_t held_bytes = 0;  // in provider buffers, notified or landing
  uint64_t seen = 0;      // the engine's unexpected_msgs at the last scan
  bool again = false;     // scan on the next pass even with no new arrival
  // Every record, by address (the application hands them back).
  absl::flat_hash_map<const BufferedRecv*, std::unique_ptr<BufferedRecv>> live;
  std::vector<BufferedRecv*> to_claim;  // peeked; the claim answered kAgain
  BufferedRecvs();
  ~BufferedRecvs();
};

// The defaults of FI_OPT_BUFFERED_LIMIT and FI_OPT_BUFFERED_MIN for an
// endpoint with this engine inject size (REQUIRES: ep->buffered).
void InitBuffered(Ep* ep);
// After an engine pass of ep: takes what arrived unexpected (see above).
// REQUIRES: ep's lock; ep->buffered.
void ScanBuffered(Ep* ep);
// A completion or error whose context may be one of ep's buffered records:
// handled (true) or not one (false). REQUIRES: ep's lock.
bool BufferedCompletion(Ep* ep, const rdm::Completion& c);
bool BufferedError(Ep* ep, const rdm::ErrorCompletion& ec);
// fi_recvmsg/fi_trecvmsg with FI_CLAIM or FI_DISCARD (no FI_PEEK) on a
// buffered endpoint: -FI_EINVAL for a context that is not a notification
// of this endpoint still unclaimed, -FI_EAGAIN when the receive CQ is
// full. REQUIRES: ep's lock.
ssize_t ClaimBuffered(Ep* ep, const iovec* iov, size_t count, void* context, uint64_t flags);
// fi_getopt/fi_setopt of FI_OPT_BUFFERED_LIMIT and FI_OPT_BUFFERED_MIN.
// REQUIRES: ep's lock.
int GetBufferedOpt(const Ep* ep, int optname, void* optval, size_t* optlen);
int SetBufferedOpt(Ep* ep, int optname, const void* optval, size_t optlen);

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_BUFFERED_H_
