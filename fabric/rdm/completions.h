// The Completions stage: the one place where a finished operation becomes a
// completion record, queued once, with its op_context and its error. Room
// is reserved when an operation is posted (CompletionQueue), so a record
// never finds the rings full.
#ifndef BYPASS_FABRIC_RDM_COMPLETIONS_H_
#define BYPASS_FABRIC_RDM_COMPLETIONS_H_

#include <cstddef>
#include <cstdint>

#include "absl/types/span.h"
#include "fabric/rdm/completion_queue.h"
#include "fabric/rdm/ops.h"
#include "fabric/rdm/peer_table.h"
#include "fabric/rdm/types.h"

namespace bypass::rdm {

// What a completed receive reports of its message.
struct MessageInfo {
  uint64_t total = 0;  // the message's length (longer than the buffer: truncated)
  uint64_t tag = 0;
  uint64_t data = 0;
  bool remote_data = false;  // data is the sender's remote CQ data
};

// Builds and queues every completion and error record of one endpoint.
class Completions {
 public:
  // counters: where failures, truncations and dropped inject errors count.
  Completions(Counters& counters, const PeerTable& peers, uint32_t capacity,
              uint32_t extra_errors);
  Completions(const Completions&) = delete;
  Completions& operator=(const Completions&) = delete;

  // Room for one record, taken when an operation is posted; false: full.
  bool Reserve() { return cq_.Reserve(); }
  void Unreserve() { cq_.Unreserve(); }

  // The application's send, write or read ended well (nothing for an inject
  // or an abandoned send, which reported already).
  void OpDone(const SendOp& op) {
    RevokeOffer(op);
    if (!op.inject && !op.abandoned) cq_.Push(RecordOf(op));
  }
  // ... or failed: "peer <address> (incarnation ..) <why>".
  void OpFailed(const SendOp& op, int err, const char* why);
  // ... or failed with a message of its own.
  void OpFailedWith(const SendOp& op, int err, const char* message);

  // A message landed in receive r (a discarding receive reports nothing);
  // one longer than r.len is reported truncated (EMSGSIZE with olen).
  void Received(PeerId src, const RecvRequest& r, const MessageInfo& m, uint64_t extra_flags);
  // Receive r ended in error: len bytes of message m had landed. Failures
  // (not a cancel) count in ops_failed.
  void ReceiveFailed(PeerId src, const RecvRequest& r, const MessageInfo& m, uint64_t len,
                     uint64_t extra_flags, int err, const char* message, bool failure);
  // "peer <address> (incarnation ..) <what>" into out.
  void NamePeer(char* out, size_t size, uint32_t pi, const char* what) const;
  // A record made elsewhere (peeks, claims, remote writes). REQUIRES: a reservation.
  void Push(const Completion& c) { cq_.Push(c); }
  void PushError(const ErrorCompletion& e) { cq_.PushError(e); }

  size_t Poll(absl::Span<Completion> out) { return cq_.Poll(out); }
  size_t PollErrors(absl::Span<ErrorCompletion> out) { return cq_.PollErrors(out); }
  uint32_t ready() const { return cq_.ready(); }
  uint32_t errors_ready() const { return cq_.errors_ready(); }

 private:
  Completion RecordOf(const SendOp& op) const {
    Completion c;
    c.context = op.context;
    c.flags = op.comp_flags;
    c.len = op.len;
    c.source = peers_.Id(op.peer);
    return c;
  }
  void PushOpError(const SendOp& op, const ErrorCompletion& ec);

  Counters& counters_;
  const PeerTable& peers_;
  CompletionQueue cq_;
};

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_COMPLETIONS_H_
