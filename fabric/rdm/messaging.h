// The Messaging stage: messages and tagged messages (fi_msg(3),
// fi_tagged(3)). Sending, it turns a send into an operation on the peer's
// stream: eager (the bytes in DATA segments) or, above the rendezvous
// threshold, a request to send whose bytes the receiver pulls. Receiving,
// it matches arriving messages with posted receives by source and tag,
// queues the unexpected ones, reassembles segments, and serves
// multi-receive buffers, peek / claim / discard and cancel.
#ifndef BYPASS_FABRIC_RDM_MESSAGING_H_
#define BYPASS_FABRIC_RDM_MESSAGING_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/types/span.h"
#include "fabric/rdm/completions.h"
#include "fabric/rdm/context.h"
#include "fabric/rdm/matching.h"
#include "fabric/rdm/ops.h"
#include "fabric/rdm/record_pool.h"
#include "fabric/rdm/reliability.h"
#include "fabric/rdm/session.h"
#include "fabric/rdm/shared_recv.h"
#include "fabric/rdm/types.h"
#include "fabric/rdm/wire.h"

namespace bypass::rdm {

// Where the message a peer is sending us goes (kDiscard: dropped by a peek
// or claim with kRecvDiscard while it was still arriving).
enum class RxSink : uint8_t { kPosted, kUnexpected, kDiscard };

// A message of several segments between its first and last (one of a
// single segment needs none: it starts and ends in one ConsumeData).
struct RxMessage {
  uint32_t msg_id = 0;
  uint64_t total = 0;
  uint64_t received = 0;
  uint16_t msg_flags = 0;
  uint64_t tag = 0;
  uint64_t data = 0;
  RxSink sink = RxSink::kPosted;
  uint32_t index = kNone;  // receive slot or unexpected entry
  uint64_t base = 0;       // where in a multi-receive buffer it lands
};

// One peer's messages, as the Messaging stage keeps them (20 B: what an
// idle peer costs the stage).
struct MsgPeer {
  uint32_t next_msg_id = 0;     // of our next message to it
  uint32_t rx_next_msg_id = 0;  // of its next message to us
  // The message it is sending us, in Messaging's pool, while one of
  // several segments is arriving; kNone: none.
  uint32_t rx = kNone;
  // What receives match its messages by: its PeerId, or in a shared queue
  // the queue's id for its address (SharedMatch::IdOf).
  PeerId match_source;
  // The sender abandoned message rx_next_msg_id - 1: its other segments are
  // acknowledged and dropped.
  bool rx_skip = false;
};

// Sends, receives, matching and rendezvous of one endpoint.
class Messaging {
 public:
  // shared: the receive queue it shares with other endpoints, or null for
  // its own (EndpointConfig::shared_recv).
  Messaging(Context& ctx, Session& session, OpTable& ops, Completions& completions,
            Reliability& reliability, SharedMatch* shared = nullptr);
  Messaging(const Messaging&) = delete;
  Messaging& operator=(const Messaging&) = delete;
  // With a shared queue: the receives its messages were landing in are
  // given back, its unexpected messages dropped.
  ~Messaging();

  void AddPeer(uint32_t pi) {
    EndRx(peers_[pi]);
    peers_[pi] = MsgPeer{};
    peers_[pi].match_source =
        shared_ != nullptr ? shared_->IdOf(session_.address(pi)) : session_.peers().Id(pi);
  }

  // ---- The application's calls.
  Result PostSend(const SendRequest& r);
  Result PostRecv(const RecvRequest& r);
  // Cancels the posted receive with this context (ECANCELED), directed to
  // `only` unless that is kAnyPeer; false if none.
  bool CancelRecv(void* context, PeerId only = kAnyPeer);
  // Cancels every queued receive (directed to `only` unless that is
  // kAnyPeer); returns how many.
  size_t CancelRecvs(PeerId only);
  uint32_t RecvSlotsFree() const { return matcher_.recv_slots_free(); }

  // ---- The shared queue's calls (SharedMatch).
  // Receives r into unexpected message e, which arrived here.
  Result ReceiveShared(const RecvRequest& r, uint32_t e);
  // kOk: canceled; kInvalid: no queued receive has this context; kAgain:
  // no room here for its error completion.
  Result CancelShared(void* context);
  void NoteFreedHere() { ctx_.NoteFreed(); }
  void SetMinMultiRecv(size_t bytes) { matcher_.set_min_multi_recv(bytes); }
  size_t min_multi_recv() const { return matcher_.min_multi_recv(); }

  // ---- Sequenced packets from peer pi, in order. False: refused (not
  // consumed; no receive resources now; it comes again after an RNR).
  bool ConsumeData(uint32_t pi, const wire::MsgFields& m, absl::Span<const uint8_t> payload);
  // A DATA packet that carries several whole messages (wire::kMsgBundle;
  // m and payload as Parse left them), each taken as ConsumeData takes
  // one. Refused at a message: the messages before it stay taken, and when
  // the packet comes again they are passed over by their msg_id.
  bool ConsumeBundle(uint32_t pi, const wire::MsgFields& m, absl::Span<const uint8_t> payload);
  // The msg_id of the next message we take from peer pi.
  uint32_t RxNextMsgId(uint32_t pi) const { return peers_[pi].rx_next_msg_id; }
  // A rendezvous pull of one of our messages (READ_REQ with kRmaFlagMessage).
  bool ConsumePullRequest(uint32_t pi, const wire::RmaFields& r);
  // The bytes of a message we pull (READ_DATA with kRmaFlagMessage).
  void ConsumePulledData(uint32_t pi, const wire::RmaFields& r, absl::Span<const uint8_t> payload);
  // The sender's word on our pull, or on our request to send
  // (RESPONSE with kRmaFlagMessage).
  void ConsumePullResponse(uint32_t pi, const wire::RmaFields& r);
  // A message from pi is between its first and last segment.
  bool Receiving(uint32_t pi) const { return peers_[pi].rx != kNone; }
  // Reads in place of matched requests to send, gathered while a burst is
  // handled so that one system call copies several messages (StartPull);
  // none is pending outside Engine::HandleRx.
  bool ReadsPending() const { return n_reads_ != 0; }
  // Reads every gathered message (one process_vm_readv for as many as it
  // can) and completes them in the order their requests arrived. Before
  // anything else is consumed, so nothing overtakes them.
  void FlushReads() {
    if (n_reads_ != 0) ReadGathered();
  }
  // A posted receive is directed to pi (FI_DIRECTED_RECV): pi is awaited.
  bool AwaitsFrom(uint32_t pi) const { return matcher_.HasPostedFrom(peers_[pi].match_source); }
  // Ends the message from pi being received (err, why) and spends its number.
  void AbortReceive(uint32_t pi, int err, const char* why);

  // ---- Failure.
  // Pull o failed (its session ended): the receive it pulls into completes
  // in error. The caller frees o.
  void PullFailed(uint32_t o, int err, const char* why);
  // Peer pi's session ended: the message arriving from it is aborted, its
  // rendezvous requests waiting unexpected are lost (nothing can pull them
  // any more), and both directions count messages from 0 again, our queued
  // messages renumbered.
  void EndSession(uint32_t pi, int err, const char* why);
  // Peer pi is forgotten: receives only it could satisfy are canceled, what
  // it sent that nobody took is dropped.
  void RemovePeer(uint32_t pi);
  // Peer pi is dead (timed out): the receives directed to it fail (err, why).
  void FailDirected(uint32_t pi, int err, const char* why);

 private:
  // Its message of several segments ended: the record goes back.
  void EndRx(MsgPeer& p) {
    if (p.rx == kNone) return;
    rx_.Give(p.rx);
    p.rx = kNone;
  }
  // Receive resources were freed: refused peers (of every endpoint sharing
  // the queue) retry.
  void NoteFreed() {
    if (shared_ != nullptr) {
      shared_->NoteFreed();
    } else {
      ctx_.NoteFreed();
    }
  }
  // Receives r into unexpected message e, or queues it (e kNone).
  // REQUIRES: a completion reserved for r.
  Result Receive(const RecvRequest& r, uint32_t e);
  Result PostMulti(const RecvRequest& r);
  Result Peek(const RecvRequest& r);
  Result Claim(const RecvRequest& r);
  void DeliverUnexpected(uint32_t e, const RecvRequest& r);
  // Receives unexpected message e (still arriving) into slot at base.
  void BindArriving(uint32_t e, uint32_t slot, uint64_t base);
  // Drops unexpected message e, complete or still arriving.
  void DropUnexpected(uint32_t e);
  // Drops e for a discarding peek or claim with this context (a rendezvous
  // message is pulled with no bytes so that its sender completes).
  Result DiscardMessage(uint32_t e, void* context);
  // A message into `slot` ended: where it landed (buf, len) and, for the
  // last one of a released multi-receive, kCompMultiRecv in *flags. Frees
  // the slot when nothing more will land in it.
  RecvRequest EndRecvSlot(uint32_t slot, uint64_t total, uint64_t base, uint64_t* flags);
  // Completes an unqueued receive with ECANCELED (a multi-receive with
  // messages still arriving only stops taking more).
  void CancelSlot(uint32_t slot, const char* why) { EndSlot(slot, ECANCELED, why, false); }
  // Ends queued receive `slot` in error (a multi-receive once its messages
  // landed); `failure` counts it in ops_failed.
  void EndSlot(uint32_t slot, int err, const char* why, bool failure);
  bool ConsumeRequestToSend(uint32_t pi, const wire::MsgFields& m);
  // Starts pulling rendezvous message msg_id (described by m) from peer pi
  // into receive slot `slot`: read in place first if its sender offered
  // (offer_pid; only ever set for frames with kRxSameHost), else by
  // READ_DATA. REQUIRES: CanPull().
  void StartPull(uint32_t pi, uint32_t slot, uint32_t msg_id, const MessageInfo& m,
                 uint16_t msg_flags, const wire::MsgFields& offer);
  enum class InPlace : uint8_t {
    kNotRead,  // pull the bytes (counted when a read failed)
    kCopied,   // read; the sender's RESPONSE vouches for them
    kVouched,  // read, and the sender's guard word still held the offer's value after
  };
  // Whether this endpoint reads offers in place (its config and device).
  bool ReadsInPlace() const {
    return ctx_.config.read_in_place && ctx_.dev.read_peer_memory != nullptr;
  }
  // Pull o (of peer pi) after its read in place (or its failure): its
  // READ_REQ is queued, and its receive completes if the guard vouched.
  void FinishPull(uint32_t pi, uint32_t o, InPlace read);
  void ReadGathered();  // FlushReads with reads gathered
  // A read in place gathered by StartPull, done by FlushReads: pull op o
  // of peer pi, and the offer's addresses in the sender's process.
  struct PendingRead {
    uint32_t o;
    uint32_t pi;
    uint64_t addr;
    uint64_t guard_addr;
    uint64_t guard;  // the value the offer's guard word holds (0: no guard read)
  };
  // At most this many messages, and this many bytes, per system call: the
  // call's fixed cost (about 2 us on a paravirtualized host) is shared by
  // the messages of one burst, and the first of them does not wait for
  // much more than a megabyte of copying (PROTOCOL.md, "Reading in place").
  static constexpr uint32_t kMaxBatchedReads = driver::kMaxPeerRanges / 2;
  static constexpr uint64_t kMaxBatchedReadBytes = 1u << 20;
  // Pull o has its bytes: the receive completes (unless it did already),
  // o ends.
  void EndPull(uint32_t pi, uint32_t o);
  // Completes pull o's receive; o lives on (delivered) until it ends.
  void DeliverPull(uint32_t pi, uint32_t o);
  // PostRecv found rendezvous message e unexpected: pull it into r.
  Result PullUnexpected(uint32_t e, const RecvRequest& r);
  // Pulls may hold at most this many engine ops: the rest stay for answers
  // to peers' requests, which always drain (PROTOCOL.md, Rendezvous).
  bool CanPull() const;
  uint64_t RxSessionId(uint32_t pi) const;
  void NoteUnexpectedDepth();

  Context& ctx_;
  Session& session_;
  OpTable& ops_;
  Completions& completions_;
  Reliability& reliability_;
  std::unique_ptr<MatchQueues> own_;  // null with a shared queue
  SharedMatch* const shared_;
  uint32_t owner_ = 0;  // its member number in shared_ (UnexpectedMsg::owner)
  MatchQueues& matcher_;  // *own_ or the shared queue's
  std::unique_ptr<MsgPeer[]> peers_;
  // The messages of several segments arriving now, one per peer at most
  // (MsgPeer::rx): max_active_peers made up front.
  RecordPool<RxMessage> rx_;
  // The reads gathered (FlushReads), all from one process.
  PendingRead reads_[kMaxBatchedReads];
  uint32_t n_reads_ = 0;
  uint32_t reads_pid_ = 0;
  uint64_t reads_bytes_ = 0;
};

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_MESSAGING_H_
