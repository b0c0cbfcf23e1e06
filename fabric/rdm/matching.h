// The receive side's queues: posted receives and unexpected messages, each
// tagged and untagged, matched in order by source and tag with an ignore
// mask. Unexpected payloads live in a chunk arena sized at creation.
#ifndef BYPASS_FABRIC_RDM_MATCHING_H_
#define BYPASS_FABRIC_RDM_MATCHING_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/types/span.h"
#include "fabric/rdm/config.h"
#include "fabric/rdm/index_list.h"
#include "fabric/rdm/types.h"

namespace bypass::rdm {

// A posted receive, queued or bound to a message being received.
struct RecvSlot {
  RecvRequest req;
  // Multi-receive (kRecvMulti) only: bytes handed out to messages, messages
  // still arriving into it, and whether it has left its queue for good.
  uint64_t used = 0;
  uint32_t active = 0;
  bool released = false;
  uint32_t prev = kNone;
  uint32_t next = kNone;
};

// A message that arrived before a receive matched it: queued from its first
// segment on, complete when its last segment has arrived.
struct UnexpectedMsg {
  PeerId source;
  // The endpoint it arrived at, when endpoints share the queues
  // (SharedMatch: its member number; 0 otherwise). source is that
  // endpoint's peer.
  uint32_t owner = 0;
  // What receives match it by: source, or in shared queues the queue's id
  // for the sender's address (SharedMatch::IdOf).
  PeerId match_source;
  bool tagged = false;
  uint64_t tag = 0;
  uint64_t data = 0;
  uint16_t msg_flags = 0;
  uint64_t total = 0;
  uint64_t received = 0;
  bool complete = false;
  // A rendezvous request to send: no bytes here; a receive pulls message
  // rndv_msg_id of the sender's session rndv_session (engine_rma.cc).
  bool rendezvous = false;
  uint32_t rndv_msg_id = 0;
  uint64_t rndv_session = 0;
  // Its sender's InPlaceOffer, if it came through memory of this host
  // (kRxSameHost); pid 0: none.
  uint32_t rndv_pid = 0;
  uint64_t rndv_addr = 0;
  uint64_t rndv_guard_addr = 0;  // and its guard word (0: none)
  uint64_t rndv_guard = 0;
  // Reserved by a peek with kRecvClaim for the receive with this context.
  bool claimed = false;
  void* claim_context = nullptr;
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

// The payload chunks of unexpected messages: an arena of fixed-size chunks
// chained into messages, its own per queue or shared by the queues of every
// endpoint of a domain (config.h's UnexpectedPool), so that the memory a domain
// spends on messages nobody has asked for yet is bounded however many
// endpoints and peers it has. Thread-safe: the endpoints sharing it may
// progress on different threads. The arena is allocated untouched: pages
// become resident as chunks are first used.
class ChunkPool {
 public:
  ChunkPool(uint64_t bytes, uint32_t chunk_bytes);
  ChunkPool(const ChunkPool&) = delete;
  ChunkPool& operator=(const ChunkPool&) = delete;

  // `need` chunks chained in order (*first -> ... -> kNone); false, taking
  // none, when fewer are free.
  bool Take(uint64_t need, uint32_t* first);
  // Gives back a chain Take made.
  void Give(uint32_t first);
  uint8_t* chunk(uint32_t c) { return arena_.get() + uint64_t{c} * chunk_bytes_; }
  const uint8_t* chunk(uint32_t c) const { return arena_.get() + uint64_t{c} * chunk_bytes_; }
  // The chunk after c in its chain (stable while the chain is taken).
  uint32_t next(uint32_t c) const { return next_[c]; }
  uint32_t chunk_bytes() const { return chunk_bytes_; }
  uint64_t capacity_bytes() const { return uint64_t{num_chunks_} * chunk_bytes_; }
  uint64_t used_bytes() const;
  uint64_t peak_bytes() const;

 private:
  const uint32_t chunk_bytes_;
  const uint32_t num_chunks_;
  std::unique_ptr<uint8_t[]> arena_;
  std::unique_ptr<uint32_t[]> next_;  // chain links
  mutable std::mutex mu_;
  FreeSlots free_;  // guarded by mu_
  uint32_t peak_ = 0;  // most chunks ever taken at once; guarded by mu_
};

// The inside of an UnexpectedPool (config.h), or null.
inline ChunkPool* PoolOf(UnexpectedPool* p) { return p != nullptr ? &p->impl() : nullptr; }

// Fixed pools of receive slots and unexpected entries, payload chunks from
// a ChunkPool, and the four FIFOs over them. Rendezvous requests (no
// payload) have entries of their own, as many as eager messages: an eager
// flood that fills the queue never refuses a rendezvous request.
class MatchQueues {
 public:
  // With `pool` (REQUIRES: it outlives the queues) unexpected_bytes and
  // chunk_bytes are unused: payloads take its chunks.
  MatchQueues(uint32_t max_recvs, uint32_t max_unexpected, uint64_t unexpected_bytes,
              uint32_t chunk_bytes, ChunkPool* pool = nullptr);
  MatchQueues(const MatchQueues&) = delete;
  MatchQueues& operator=(const MatchQueues&) = delete;

  // Posted receives.
  // A slot holding `r`, not queued; kNone when all are in use.
  uint32_t AllocRecv(const RecvRequest& r);
  void QueueRecv(uint32_t slot);  // at the tail of its kind's queue
  // The first queued receive that takes the message of `total` bytes,
  // removed from its queue. A multi-receive takes it if it fits the space
  // left and `multi` is kTake: it then hands out that space (*base: where
  // in its buffer), counts the message active, and leaves its queue
  // (released) once less than min_multi_recv, or nothing, is left. With
  // kSkip multi-receives are passed over; with kBlock (no completion room
  // for another message) the one that would take it makes the answer
  // kBlocked, so that no later receive takes the message out of its order.
  enum class Multi : uint8_t { kSkip, kTake, kBlock };
  static constexpr uint32_t kBlocked = kNone - 1;
  uint32_t MatchPosted(bool tagged, PeerId source, uint64_t tag, uint64_t total = 0,
                       Multi multi = Multi::kSkip, uint64_t* base = nullptr);
  // Whether MatchPosted(tagged, source, tag) would find a receive; takes none.
  bool HasPosted(bool tagged, PeerId source, uint64_t tag) const;
  // Hands out `total` bytes of multi-receive `slot` as MatchPosted does; the
  // caller has checked that they fit. REQUIRES: slot is queued, not released.
  uint64_t TakeMulti(uint32_t slot, uint64_t total);
  // The queued receive with this context (and directed to `only`, unless
  // that is kAnyPeer), removed from its queue; kNone.
  uint32_t TakePosted(void* context, PeerId only = kAnyPeer);
  // The first queued receive (directed to `only`, unless that is kAnyPeer),
  // removed from its queue; kNone.
  uint32_t TakeAnyPosted(PeerId only);
  // A queued receive directed to `source`, removed from its queue; kNone.
  uint32_t TakePostedFrom(PeerId source);
  // Some queued receive is directed to the peer in `source`'s slot.
  bool HasPostedFrom(PeerId source) const {
    return source.slot() < directed_.size() && directed_[source.slot()] > 0;
  }
  void FreeRecv(uint32_t slot);  // REQUIRES: not queued
  const RecvRequest& recv(uint32_t slot) const { return recvs_[slot].req; }
  RecvSlot& slot(uint32_t s) { return recvs_[s]; }
  uint32_t posted(bool tagged) const { return posted_[tagged].size(); }
  uint32_t recv_slots_free() const { return free_recvs_.available(); }
  void set_min_multi_recv(uint64_t bytes) { min_multi_recv_ = bytes; }
  uint64_t min_multi_recv() const { return min_multi_recv_; }

  // Unexpected messages.
  // Queues a message of `total` bytes, with all its chunks; kNone when there
  // is no entry or not enough free chunks.
  uint32_t Admit(PeerId source, bool tagged, uint64_t tag, uint64_t data, uint16_t msg_flags,
                 uint64_t total);
  // Queues a rendezvous message: an entry, no chunks, complete at once.
  uint32_t AdmitRendezvous(PeerId source, bool tagged, uint64_t tag, uint64_t data,
                           uint16_t msg_flags, uint64_t total, uint32_t msg_id, uint64_t session);
  // Appends the next segment. REQUIRES: received + payload.size() <= total.
  void Append(uint32_t e, absl::Span<const uint8_t> payload);
  // The first queued message `r` takes (complete or not, not claimed, at
  // most max_total bytes, not a rendezvous one if eager_only), after
  // `after` if given, left queued.
  uint32_t FindUnexpected(const RecvRequest& r, uint64_t max_total = UINT64_MAX,
                          bool eager_only = false, uint32_t after = kNone) const;
  // The message claimed for `context`, left queued; kNone.
  uint32_t FindClaimed(void* context) const;
  // A queued message from `source` of endpoint `owner` (claimed or not); kNone.
  uint32_t FindFrom(PeerId source, uint32_t owner = 0) const;
  // A queued rendezvous message from `source` of `owner` (claimed or not); kNone.
  uint32_t FindRendezvousFrom(PeerId source, uint32_t owner = 0) const;
  // A queued message that arrived at endpoint `owner`; kNone.
  uint32_t FindOwned(uint32_t owner) const;
  // Copies the first min(received, cap) bytes; returns how many.
  uint64_t CopyOut(uint32_t e, uint8_t* dst, uint64_t cap) const;
  // Removes it from its queue and frees its chunks.
  void Release(uint32_t e);
  UnexpectedMsg& unexpected(uint32_t e) { return msgs_[e]; }
  uint32_t unexpected_depth() const { return unexpected_[0].size() + unexpected_[1].size(); }
  // Payload bytes these queues hold (whole chunks).
  uint64_t unexpected_bytes() const { return uint64_t{used_chunks_} * pool_->chunk_bytes(); }

 private:
  // Takes queued receive s out of its queue.
  void Unqueue(uint32_t s);
  // The first queued receive (of both kinds) pred takes, out of its queue.
  uint32_t TakePostedIf(absl::FunctionRef<bool(const RecvRequest&)> pred);
  // The first queued message (of both kinds, in queue order) pred takes.
  uint32_t FindUnexpectedIf(absl::FunctionRef<bool(const UnexpectedMsg&)> pred) const;

  std::unique_ptr<RecvSlot[]> recvs_;
  FreeSlots free_recvs_;
  IndexList<RecvSlot> posted_[2];  // [tagged]
  // Queued receives directed to each peer slot (a peer awaited: its silence
  // times it out, see Engine::Busy).
  std::vector<uint32_t> directed_;
  uint64_t min_multi_recv_ = 0;

  // Entries [0, max_unexpected) for eager messages, the rest for
  // rendezvous requests; allocated untouched (a large queue costs memory
  // only as far as it is used), each assigned whole when taken.
  struct OperatorDelete {
    void operator()(UnexpectedMsg* p) const { ::operator delete(p); }
  };
  const uint32_t max_eager_;
  std::unique_ptr<UnexpectedMsg[], OperatorDelete> msgs_;
  FreeSlots free_msgs_;
  FreeSlots free_rndv_;
  IndexList<UnexpectedMsg> unexpected_[2];  // [tagged]

  std::unique_ptr<ChunkPool> own_pool_;  // null with a shared pool
  ChunkPool* pool_;
  uint32_t used_chunks_ = 0;
};

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_MATCHING_H_
