// The Reliability stage: each peer's two sequenced streams. Sending, it
// cuts the peer's queue of operations into PSN-numbered packets within the
// peer's window (and, toward peers that can congest, a congestion window,
// paced: congestion.h), keeps what is unacknowledged, and resends it on a SACK gap
// (fast retransmit), a tail-loss probe or the RTO; it backs off when the
// receiver refuses (RNR), retrying while it answers (and, opt-in, giving
// a message up after rnr_give_up_ns).
// Receiving, it takes packets in PSN order, holds what arrives early,
// drops duplicates, and acknowledges (piggy-backed, delayed, or at once
// with a SACK bitmap), granting credit. It knows nothing of tags, messages
// or regions: an operation is a header template and bytes (ops.h).
#ifndef BYPASS_FABRIC_RDM_RELIABILITY_H_
#define BYPASS_FABRIC_RDM_RELIABILITY_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "driver/packet.h"
#include "fabric/rdm/completions.h"
#include "fabric/rdm/congestion.h"
#include "fabric/rdm/context.h"
#include "fabric/rdm/index_list.h"
#include "fabric/rdm/ops.h"
#include "fabric/rdm/psn.h"
#include "fabric/rdm/rtt.h"
#include "fabric/rdm/session.h"
#include "fabric/rdm/wire.h"

namespace bypass::rdm {

// Bits of TxEntry::state.
inline constexpr uint8_t kTxSacked = 1u << 0;         // the receiver holds it
inline constexpr uint8_t kTxRetransmitted = 1u << 1;  // sent more than once (no RTT sample: Karn)
inline constexpr uint8_t kTxNeedsRetx = 1u << 2;      // queued for retransmission
inline constexpr uint8_t kTxFast = 1u << 3;           // ... because of a SACK gap (else the timer)

// One packet sent and not yet cumulatively acknowledged: enough to build it
// again from its operation.
struct TxEntry {
  uint32_t op = kNone;
  uint32_t len = 0;
  uint64_t offset = 0;
  uint64_t first_sent_ns = 0;
  uint64_t last_sent_ns = 0;
  uint8_t state = 0;
};

// One packet received out of order, held until the gap before it fills.
struct HeldPacket {
  driver::Packet* pkt = nullptr;
  wire::PacketType type = wire::PacketType::kData;
  wire::MsgFields msg;  // kData
  wire::RmaFields rma;  // kRma
  uint32_t payload_offset = 0;  // in pkt->data
  uint32_t payload_len = 0;
  absl::Span<const uint8_t> payload() const { return {pkt->data + payload_offset, payload_len}; }
};

// "Receiver not ready": the peer refused our packet at snd_una.
struct RnrState {
  bool waiting = false;  // retry at `until`, not before
  uint64_t until = 0;
  uint64_t delay = 0;    // the backoff, doubled per refusal
  uint64_t since = 0;    // first refusal of the packet at snd_una (0: none); rnr_give_up_ns
};

// Rings of ring_size entries that peers take while they need one (packets
// of ours in flight; packets of theirs held out of order) and give back
// when done: an idle peer holds none, and the rings' memory is the
// endpoint's, sized by EndpointConfig::max_active_peers, not per peer.
// Take never fails: with every pooled ring taken, a ring is allocated for
// the peer and freed when it gives it back (send rings: PROTOCOL.md,
// "Scale": a ring comes back only when its peer acknowledges, and a peer
// may stop progressing for as long as it likes, so a sender waiting for one
// could wait forever). TryTake takes pooled rings only (held rings: an
// early packet that finds none is dropped and sent again).
template <class T>
class RingPool {
 public:
  RingPool(uint32_t rings, uint32_t ring_size)
      : storage_(new T[uint64_t{rings} * ring_size]),
        free_(rings),
        rings_(rings),
        ring_size_(ring_size) {}
  RingPool(const RingPool&) = delete;
  RingPool& operator=(const RingPool&) = delete;
  // A ring whose entries are as RingPool made them or as the last user left
  // them (emptied): a pooled one while any is free, else a new one.
  T* TryTake() { return free_.empty() ? nullptr : &storage_[uint64_t{free_.Pop()} * ring_size_]; }
  T* Take() {
    if (T* ring = TryTake()) return ring;
    ++extra_;
    ++allocated_;
    return new T[ring_size_];
  }
  void Give(T* ring) {
    if (Pooled(ring)) {
      free_.Push(static_cast<uint32_t>((ring - storage_.get()) / ring_size_));
    } else {
      --extra_;
      delete[] ring;
    }
  }
  // Rings allocated because the pool was empty: ever, and not yet given back.
  uint64_t allocated() const { return allocated_; }
  uint32_t extra() const { return extra_; }

 private:
  bool Pooled(const T* ring) const {
    return ring >= storage_.get() && ring < storage_.get() + uint64_t{rings_} * ring_size_;
  }

  std::unique_ptr<T[]> storage_;
  FreeSlots free_;
  uint32_t rings_;
  uint32_t ring_size_;
  uint32_t extra_ = 0;
  uint64_t allocated_ = 0;
};

// Our stream to one peer.
struct TxStream {
  Psn next_psn;
  Psn snd_una;
  Psn window_end;  // may send PSNs before this
  TxEntry* ring = nullptr;     // while packets are in flight (RingPool), else null
  IndexList<SendOp> ops;       // oldest first: started or queued
  uint32_t cursor_op = kNone;  // first operation with packets not yet sent
  uint64_t cursor_offset = 0;
  IndexList<SendOp> waiting;   // every packet acknowledged; the peer's answer to come
  uint32_t retx_queued = 0;
  RttEstimator rtt;
  uint32_t backoff = 0;
  uint64_t rto_deadline = 0;
  // Tail-loss probe: one early retransmission of the newest unacknowledged
  // packet at about two round trips, before the RTO.
  uint64_t tlp_deadline = 0;
  bool acks_on_data = false;  // the last ACK that advanced came on a packet with data (a reply)
  RnrState rnr;
  bool window_stalled = false;
  // Congestion control (only where CcOn): the window, pacing, and whether
  // the sender waits for either.
  CongestionWindow cc;
  bool cwnd_stalled = false;
  bool pace_wait = false;  // a timer at cc.next_send_ns() lets it go on
  // An op with holds_stream went out: the user's later ops wait until the
  // peer answers hold_id (ReleaseHold).
  bool hold = false;
  uint32_t hold_id = 0;

  uint32_t inflight() const { return static_cast<uint32_t>(next_psn - snd_una); }
};

// The peer's stream to us.
struct RxStream {
  Psn rcv_nxt;
  Psn highest_held;
  HeldPacket* held = nullptr;  // while packets are held (RingPool), else null
  uint32_t held_count = 0;
  uint32_t unacked = 0;         // consumed since we last acknowledged
  uint64_t ack_deadline = 0;    // delayed ACK due; 0: none
  bool ack_now = false;         // acknowledge this pass (a DATA may carry it)
  bool ack_standalone = false;  // an ACK packet is needed (SACK, window update, probe)
  bool rnr_owed = false;        // an ACK with kFlagRnr is needed
  // An ACK_REQ waits for the owner's next call (defer_requested_acks):
  // a packet to the peer carries it, else ReleaseDeferredAcks makes it due.
  bool ack_deferred = false;
  bool refused = false;         // we refused rcv_nxt; owe a window update
};

// What became of a sequenced packet that arrived.
enum class Arrival : uint8_t {
  kInOrder,  // rcv_nxt: consume it (then Consumed or Refused)
  kHeld,     // early: held (the packet is the stream's now)
  kDropped,  // a duplicate or out of the window (the caller frees the packet)
};

// Every peer's streams.
class Reliability {
 public:
  // ring_size: a power of two, at least window_packets. held_budget: early
  // packets held across all peers.
  Reliability(Context& ctx, Session& session, OpTable& ops, Completions& completions,
              uint32_t ring_size, uint32_t held_budget);
  Reliability(const Reliability&) = delete;
  Reliability& operator=(const Reliability&) = delete;
  ~Reliability();  // gives back the rings peers still hold (the pools free only theirs)

  TxStream& tx(uint32_t pi) { return tx_[pi]; }
  const TxStream& tx(uint32_t pi) const { return tx_[pi]; }
  const RxStream& rx(uint32_t pi) const { return rx_[pi]; }

  // A new peer in slot pi: fresh streams (our initial PSN is the session's).
  void AddPeer(uint32_t pi);
  // A new session of our direction after a failure (Session::EndSession
  // chose a new initial PSN): what was in flight is forgotten.
  void RestartTx(uint32_t pi);
  // Its direction became known (Session::Accept): we expect its initial PSN;
  // credit is the window its HELLO granted (used until it acknowledges).
  void StartRx(uint32_t pi, uint16_t credit);
  // Drops everything the peer's direction holds (FailPeer, RemovePeer).
  void ResetRx(uint32_t pi);

  // ---- Sending.
  // Queues op o (set up, of the peer) on the stream: at the tail, or for
  // ops that jump the queue before the user's ops not yet started. Wants a
  // HELLO if the session is not up.
  void Queue(uint32_t pi, uint32_t o);
  // The peer answered the op that holds the stream: the user's ops go on.
  void ReleaseHold(uint32_t pi, uint32_t hold_id) {
    if (tx_[pi].hold && tx_[pi].hold_id == hold_id) tx_[pi].hold = false;
  }
  // An op in the waiting list got its answer (or its session ended).
  void Unpark(uint32_t pi, uint32_t o) {
    tx_[pi].waiting.Remove(ops_.base(), o);
    ops_[o].state = OpState::kIdle;
  }
  // READ_DATA r from pi for a waiting op of `kind` (a read, a pull): lands
  // its payload at the op's dst; returns the op once every byte is in
  // (unparked: the caller ends it), else kNone. An answer no live op waits
  // for (stale, misdirected, forged) counts a protocol error.
  uint32_t LandReadData(uint32_t pi, const wire::RmaFields& r, absl::Span<const uint8_t> payload,
                        OpKind kind);
  // Takes op o off the stream (FailPeer). REQUIRES: queued on pi.
  void Unqueue(uint32_t pi, uint32_t o) {
    tx_[pi].ops.Remove(ops_.base(), o);
    ops_[o].state = OpState::kIdle;
  }
  // After FailPeer took what failed off: the cursor restarts at the front.
  void Rewind(uint32_t pi);
  // The header of a packet to pi: incarnations, key, next PSN, and the
  // acknowledgement of its stream once it is known.
  wire::Common Header(uint32_t pi, wire::PacketType type, uint16_t flags) const;
  // Credit we grant pi: rcv_nxt, and what can be held beyond it.
  uint16_t Grant(uint32_t pi) const;
  // An acknowledgement of pi's stream left (piggy-backed unless standalone).
  void NoteAckSent(uint32_t pi, bool standalone);
  // Packets are owed to pi (acknowledgements, retransmissions, new data).
  // Inline: asked after every packet received and every turn built.
  bool HasWork(uint32_t pi) const {
    const SessionPeer& s = session_[pi];
    const RxStream& r = rx_[pi];
    if (s.rx_known && (r.ack_now || r.ack_standalone || r.rnr_owed)) return true;
    if (!s.tx_ready) return false;
    const TxStream& t = tx_[pi];
    if (t.retx_queued == 0 && (t.rnr.waiting || t.cursor_op == kNone || !WindowOpen(t) ||
                               !CwndOpen(pi, t) || CursorHeld(t))) {
      return false;
    }
    return !t.pace_wait;  // waiting for its pacing time: the timer queues it then
  }
  // Builds retransmissions, then new packets, then an ACK into bufs;
  // returns how many. An ACK goes if one is owed or *probe_owed (the
  // session's liveness probe: it asks for one back, and is then cleared).
  size_t Build(uint32_t pi, bool* probe_owed, absl::Span<driver::Packet* const> bufs);
  // Congestion control applies to pi (config, and pi not on this host).
  bool CcOn(uint32_t pi) const { return ctx_.config.congestion_control && !session_[pi].local; }
  // Something of ours to pi is unfinished: queued, unacknowledged, held or waiting.
  bool Busy(uint32_t pi) const {
    const TxStream& t = tx_[pi];
    return !t.ops.empty() || !t.waiting.empty() || rx_[pi].held_count > 0;
  }
  // Only answers are awaited (nothing queued in flight): liveness probes.
  bool OnlyWaiting(uint32_t pi) const {
    return !tx_[pi].waiting.empty() && tx_[pi].inflight() == 0;
  }

  // ---- Acknowledgements (of our stream, on any packet from pi; sack on ACKs).
  // Completes what they acknowledge (kOpTraits' after_ack), and on a
  // refusal backs off or, after rnr_give_up_ns, gives the message up.
  void OnAck(uint32_t pi, const wire::Common& c, const wire::AckFields* sack);
  // An ACK asking for one back (a probe): answer at once.
  void AckRequested(uint32_t pi);

  // ---- Receiving (pi's stream).
  // Files a sequenced packet (parsed into v, in pkt) by its PSN.
  Arrival Arrive(uint32_t pi, const wire::View& v, driver::Packet* pkt);
  // The packet at rcv_nxt was taken (consumed) or refused (not ready: it
  // comes again after an RNR).
  void Consumed(uint32_t pi);
  void Refused(uint32_t pi);
  // The held packet at rcv_nxt, if there is one: consume it, then DropHeld.
  HeldPacket* NextHeld(uint32_t pi);
  void DropHeld(uint32_t pi, HeldPacket* h);
  // After a packet was consumed: acknowledge now, after ack_delay_ns, or
  // with the next packet back (flags: the packet's, kFlagAckReq asks: at
  // once, or with defer_requested_acks at the owner's next call).
  void AfterReceive(uint32_t pi, uint16_t flags);
  // Receive resources were freed: peers we refused get a window update.
  void RetryRefused();
  // ACKs asked for (ACK_REQ) and deferred to the owner's next call
  // (EndpointConfig::defer_requested_acks) that no packet has carried
  // since: due now, they leave with the next Build.
  bool HasDeferredAcks() const { return !deferred_.empty(); }
  void ReleaseDeferredAcks();
  // From a progress pass: releases them once the oldest has waited
  // deferred_ack_hold_ns for a reply to carry it.
  void ReleaseHeldDeferredAcks() {
    if (ctx_.now - deferred_since_ >= ctx_.config.deferred_ack_hold_ns) ReleaseDeferredAcks();
  }

  // Delayed ACKs, RNR retries, tail-loss probes and the RTO of peer pi;
  // *next: the earliest of its deadlines still ahead; *floor: of those but
  // the three kept exactly (the delayed ACK, the probe, the RTO: Context's
  // timer floor).
  void RunTimers(uint32_t pi, uint64_t* next, uint64_t* floor);
  void RunTimers(uint32_t pi, uint64_t* next) {
    uint64_t floor = UINT64_MAX;
    RunTimers(pi, next, &floor);
  }
  // Gives every held packet back (closing).
  void ReleaseAll();

 private:
  // The peer's credit (and our ring) let another new packet go.
  bool WindowOpen(const TxStream& t) const {
    return t.next_psn.Before(t.window_end) && t.inflight() <= ring_mask_;
  }
  // ... and, where congestion control applies, the congestion window.
  bool CwndOpen(uint32_t pi, const TxStream& t) const {
    return !CcOn(pi) || t.inflight() < t.cc.cwnd();
  }
  // A packet may leave now (pacing, where congestion control applies).
  bool Paced(uint32_t pi, const TxStream& t) const {
    return CcOn(pi) && !t.cc.PaceAllows(ctx_.now);
  }
  // After Build: counts a full congestion window, notes that it is in use,
  // and arms the pacing timer if packets wait for it.
  void NoteCongestionLimits(uint32_t pi);
  // A loss signal: the window halves, once per round trip.
  void CcLoss(uint32_t pi);
  // Pacing spreads a window over SRTT, but never over more than twice the
  // smallest RTT: more is queueing that pacing should not add to, or a
  // sample inflated by a repair (a packet held behind a hole is
  // acknowledged late, by backoff) that would stall the sender.
  void SetPacing(TxStream& t) {
    if (t.rtt.has_sample()) t.cc.SetRtt(std::min(t.rtt.srtt(), 2 * t.rtt.min_rtt()));
  }
  bool CursorHeld(const TxStream& t) const;
  // New data needs a tx ring: peer pi's, or one from the pool.
  void NeedRing(uint32_t pi) {
    if (tx_[pi].ring != nullptr) return;
    const uint64_t allocated = tx_pool_.allocated();
    tx_[pi].ring = tx_pool_.Take();
    ctx_.counters.tx_rings_allocated += tx_pool_.allocated() - allocated;
  }
  // Peer pi is done with its tx ring (nothing in flight) or held ring
  // (nothing held): back to the pool.
  void GiveTxRing(uint32_t pi);
  void GiveHeldRing(uint32_t pi);
  TxEntry& entry(TxStream& t, Psn p) { return t.ring[p.value() & ring_mask_]; }
  HeldPacket& held_at(RxStream& r, Psn p) { return r.held[p.value() & ring_mask_]; }
  const HeldPacket& held_at(const RxStream& r, Psn p) const {
    return r.held[p.value() & ring_mask_];
  }

  void BuildSegment(uint32_t pi, driver::Packet* pkt);
  void BuildRetransmit(uint32_t pi, Psn psn, driver::Packet* pkt);
  void BuildAck(uint32_t pi, bool probe, driver::Packet* pkt);
  void WritePacket(uint32_t pi, Psn psn, const TxEntry& e, uint16_t flags, driver::Packet* pkt);
  void ProcessSack(uint32_t pi, Psn ack, const wire::AckFields& sack);
  void CompleteAcked(uint32_t pi);
  bool GiveUpRefused(uint32_t pi);
  void MarkRetx(TxStream& t, Psn psn, bool fast);
  void ArmRto(uint32_t pi);
  // A flight starts (or, not start, an ACK moved it on): the RTO from now
  // and the tail-loss probe, the peer's timer armed once (at a start, moved
  // later too: Context::MoveTimer).
  void ArmFlight(uint32_t pi, bool start);
  // When the tail-loss probe of t's flight is due from now; 0: none (nothing
  // in flight, no RTT sample yet, backing off, refused, or not before the RTO).
  uint64_t TailProbeAt(const TxStream& t) const;
  void OnTailProbe(uint32_t pi);
  void OnRto(uint32_t pi);
  Arrival Hold(uint32_t pi, const wire::View& v, driver::Packet* pkt);

  Context& ctx_;
  Session& session_;
  OpTable& ops_;
  Completions& completions_;
  const uint32_t ring_mask_;
  const uint32_t held_budget_;
  uint32_t held_total_ = 0;
  uint32_t refused_peers_ = 0;
  std::unique_ptr<TxStream[]> tx_;
  std::unique_ptr<RxStream[]> rx_;
  RingPool<TxEntry> tx_pool_;
  RingPool<HeldPacket> held_pool_;
  // Peers whose ACK is deferred (RxStream::ack_deferred when they went in;
  // a packet that carried it since clears the flag, not the entry).
  std::vector<uint32_t> deferred_;
  uint64_t deferred_since_ = 0;  // ctx_.now when deferred_ last became non-empty
};

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_RELIABILITY_H_
