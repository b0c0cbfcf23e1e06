// The receive side's queues: posted receives and unexpected messages, each
// tagged and untagged, matched in order by source and tag with an ignore
// mask. Unexpected payloads live in a chunk arena sized at creation.
#ifndef BYPASS_FABRIC_RDM_MATCHING_H_
#define BYPASS_FABRIC_RDM_MATCHING_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/types/span.h"
#include "fabric/rdm/index_list.h"
#include "fabric/rdm/types.h"

namespace bypass::rdm {

// A posted receive, queued or bound to a message being received.
struct RecvSlot {
  RecvRequest req;
  uint32_t prev = kNone;
  uint32_t next = kNone;
};

// A message that arrived before a receive matched it: queued from its first
// segment on, complete when its last segment has arrived.
struct UnexpectedMsg {
  PeerId source;
  bool tagged = false;
  uint64_t tag = 0;
  uint64_t data = 0;
  uint16_t msg_flags = 0;
  uint64_t total = 0;
  uint64_t received = 0;
  bool complete = false;
  uint32_t first_chunk = kNone;
  uint32_t write_chunk = kNone;  // the chunk `received` falls in
  uint32_t chunks = 0;
  uint32_t prev = kNone;
  uint32_t next = kNone;
};

// Whether a receive takes a message: same kind, the source it asks for (or
// any), and for tagged ones the tag bits outside `ignore`.
inline bool Matches(const RecvRequest& r, bool tagged, PeerId source, uint64_t tag) {
  if (r.tagged != tagged) return false;
  if (!(r.source == kAnyPeer) && !(r.source == source)) return false;
  return !tagged || ((r.tag ^ tag) & ~r.ignore) == 0;
}

// Fixed pools of receive slots, unexpected entries and payload chunks, and
// the four FIFOs over them.
class MatchQueues {
 public:
  MatchQueues(uint32_t max_recvs, uint32_t max_unexpected, uint64_t unexpected_bytes,
              uint32_t chunk_bytes);
  MatchQueues(const MatchQueues&) = delete;
  MatchQueues& operator=(const MatchQueues&) = delete;

  // Posted receives.
  // A slot holding `r`, not queued; kNone when all are in use.
  uint32_t AllocRecv(const RecvRequest& r);
  void QueueRecv(uint32_t slot);  // at the tail of its kind's queue
  // The first queued receive that takes the message, removed from its queue.
  uint32_t MatchPosted(bool tagged, PeerId source, uint64_t tag);
  void FreeRecv(uint32_t slot);  // REQUIRES: not queued
  const RecvRequest& recv(uint32_t slot) const { return recvs_[slot].req; }
  uint32_t posted(bool tagged) const { return posted_[tagged].size(); }

  // Unexpected messages.
  // Queues a message of `total` bytes, with all its chunks; kNone when there
  // is no entry or not enough free chunks.
  uint32_t Admit(PeerId source, bool tagged, uint64_t tag, uint64_t data, uint16_t msg_flags,
                 uint64_t total);
  // Appends the next segment. REQUIRES: received + payload.size() <= total.
  void Append(uint32_t e, absl::Span<const uint8_t> payload);
  // The first queued message `r` takes (complete or not), left queued.
  uint32_t FindUnexpected(const RecvRequest& r) const;
  // Copies the first min(received, cap) bytes; returns how many.
  uint64_t CopyOut(uint32_t e, uint8_t* dst, uint64_t cap) const;
  // Removes it from its queue and frees its chunks.
  void Release(uint32_t e);
  UnexpectedMsg& unexpected(uint32_t e) { return msgs_[e]; }
  uint32_t unexpected_depth() const { return unexpected_[0].size() + unexpected_[1].size(); }
  uint64_t unexpected_bytes() const { return uint64_t{used_chunks_} * chunk_bytes_; }

 private:
  uint8_t* chunk(uint32_t c) { return arena_.get() + uint64_t{c} * chunk_bytes_; }
  const uint8_t* chunk(uint32_t c) const { return arena_.get() + uint64_t{c} * chunk_bytes_; }

  std::unique_ptr<RecvSlot[]> recvs_;
  FreeSlots free_recvs_;
  IndexList<RecvSlot> posted_[2];  // [tagged]

  std::unique_ptr<UnexpectedMsg[]> msgs_;
  FreeSlots free_msgs_;
  IndexList<UnexpectedMsg> unexpected_[2];  // [tagged]

  uint32_t chunk_bytes_;
  uint32_t num_chunks_;
  std::unique_ptr<uint8_t[]> arena_;
  std::unique_ptr<uint32_t[]> chunk_next_;  // chain links
  FreeSlots free_chunks_;
  uint32_t used_chunks_ = 0;
};

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_MATCHING_H_
