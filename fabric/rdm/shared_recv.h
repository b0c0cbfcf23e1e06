// The inside of a SharedRecvQueue (rdm.h): one set of match queues (posted
// receives, unexpected messages) that several endpoints of one Port match
// against, and those endpoints' Messaging stages, so that a receive posted
// to the queue can be handed to the endpoint a waiting message arrived at.
// Single-threaded, like the Port.
#ifndef BYPASS_FABRIC_RDM_SHARED_RECV_H_
#define BYPASS_FABRIC_RDM_SHARED_RECV_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"

#include "fabric/rdm/config.h"
#include "fabric/rdm/matching.h"
#include "fabric/rdm/types.h"

namespace bypass::rdm {

class Messaging;

// What the endpoints share. A message is matched by the endpoint it arrives
// at (its peer's order kept: that endpoint consumes the peer's messages in
// order against one FIFO of receives) and completes there; an unexpected
// one remembers that endpoint (UnexpectedMsg::owner), which takes the
// receive that later claims it. Each completion is reserved in the
// completing endpoint's queue when it takes the receive, not at post.
class SharedMatch {
 public:
  explicit SharedMatch(const SharedRecvConfig& c);
  SharedMatch(const SharedMatch&) = delete;
  SharedMatch& operator=(const SharedMatch&) = delete;

  MatchQueues& queues() { return queues_; }

  // A Messaging stage joins (its member number, 1..) and leaves.
  uint32_t Join(Messaging* m);
  void Leave(uint32_t member);
  uint32_t members() const { return live_; }

  // The id receives in the queue name a sender by (its IPv4 and UDP port):
  // the same for every endpoint that has it as a peer, whatever its PeerId
  // there (UnexpectedMsg::match_source, a directed receive's source).
  PeerId IdOf(const Address& a);
  // The application's receive (no flags; the caller checked; source any,
  // or an IdOf): handed to the endpoint holding the first message it
  // takes, or queued.
  Result PostRecv(const RecvRequest& r);
  // Cancels the queued receive with this context through an endpoint with
  // room for its error completion; false when there is none to cancel (or,
  // rarely, no endpoint has room: retry after reading completions).
  bool CancelRecv(void* context);
  // Every member may retry what it refused: receive resources were freed.
  void NoteFreed();

 private:
  MatchQueues queues_;
  std::vector<Messaging*> members_;  // [member - 1]; null once it left
  uint32_t live_ = 0;
  absl::flat_hash_map<uint64_t, PeerId> ids_;  // (IPv4 << 16 | port) -> IdOf
};

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_SHARED_RECV_H_
