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
  // A bundle (PROTOCOL.md, "Bundles"): the packet carries this many whole
  // messages, `op` and the ops after it in the peer's list; 0: one op's
  // segment (len bytes at offset).
  uint8_t msgs = 0;
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
// (Of size 1, the pool lends the streams' active parts: a record stays
// where it is while lent, so a peer's slot points at it.)
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

// A peer's streams are split by what an idle peer needs (PROTOCOL.md,
// "Memory per peer"): its slot keeps what persists across idle periods
// (PSNs, the RTT estimate, the congestion window, flags: TxStream and
// RxStream; 64 B together), and a record lent from a pool while anything is in flight,
// queued, waiting, held or timed (TxActive and RxActive) holds the rest.
// An idle peer has none: what it would hold reads as fresh
// (Reliability::tx_active).

// Our stream to one peer: what stays while the peer is idle.
struct TxStream {
  Psn next_psn;
  Psn snd_una;
  Psn window_end;  // may send PSNs before this
  // An op with holds_stream went out: the user's later ops wait until the
  // peer answers hold_id (ReleaseHold).
  uint32_t hold_id = 0;
  RttEstimator rtt;
  // Congestion control (only where CcOn): the window (what its flight
  // needs, pacing among it, is in TxActive::cc).
  CongestionWindow cc;
  bool acks_on_data : 1 = false;  // the last ACK that advanced came on a packet with data (a reply)
  bool window_stalled : 1 = false;
  bool cwnd_stalled : 1 = false;
  bool pace_wait : 1 = false;  // a timer at cc.next_send_ns() lets it go on
  bool hold : 1 = false;

  uint32_t inflight() const { return static_cast<uint32_t>(next_psn - snd_una); }
};

// Our stream to one peer: what it needs while busy.
struct TxActive {
  TxEntry* ring = nullptr;     // while packets are in flight (RingPool), else null
  IndexList<SendOp> ops;       // oldest first: started or queued
  uint32_t cursor_op = kNone;  // first operation with packets not yet sent
  uint64_t cursor_offset = 0;
  IndexList<SendOp> waiting;   // every packet acknowledged; the peer's answer to come
  uint32_t retx_queued = 0;
  uint32_t backoff = 0;
  uint64_t rto_deadline = 0;
  // Tail-loss probe: one early retransmission of the newest unacknowledged
  // packet at about two round trips, before the RTO.
  uint64_t tlp_deadline = 0;
  RnrState rnr;
  CcFlight cc;  // the congestion window's flight (fresh between flights)
  // A timeout's episode toward a peer of this host (OnRto until the ACK
  // that decides it, OnRtoAnswered): the RTO resent snd_una alone
  // (rto_psn); the packets before rto_end were sent before it, and an ACK
  // of the one after it, never resent, says the timeout was spurious.
  bool rto_pending = false;
  bool rto_hole = false;  // the peer held later packets (SACKed) at an RTO of the episode
  bool rto_second = false;  // the first answer stopped right after it; rto_psn moved on one
  Psn rto_psn;
  Psn rto_end;
};

// The peer's stream to us: what stays while the peer is idle. The
// delayed ACK is here: a ping-pong owes one on every request, and would
// otherwise take a record for it each round trip.
struct RxStream {
  uint64_t ack_deadline = 0;    // delayed ACK due; 0: none
  Psn rcv_nxt;
  // Packets consumed since we last acknowledged, a bundle counting as its
  // messages (< the window, 256, times 255).
  uint16_t unacked = 0;
  bool ack_now : 1 = false;         // acknowledge this pass (a DATA may carry it)
  bool ack_standalone : 1 = false;  // an ACK packet is needed (SACK, window update, probe)
  bool rnr_owed : 1 = false;        // an ACK with kFlagRnr is needed
  // An ACK_REQ waits for the owner's next call (defer_requested_acks):
  // a packet to the peer carries it, else ReleaseDeferredAcks makes it due.
  bool ack_deferred : 1 = false;
  bool refused : 1 = false;         // we refused rcv_nxt; owe a window update
};

// The peer's stream to us: what it needs while packets are held.
struct RxActive {
  Psn highest_held;
  uint32_t held_count = 0;
  HeldPacket* held = nullptr;  // while packets are held (RingPool), else null
};

// A peer's busy part, and its slot (which points at it while busy).
struct ActiveStreams {
  TxActive tx;
  RxActive rx;
};
struct PeerStreams {
  TxStream tx;
  RxStream rx;
  ActiveStreams* active = nullptr;  // lent from the pool while busy
};
static_assert(sizeof(TxStream) == 40 && sizeof(RxStream) == 16 && sizeof(PeerStreams) == 64,
              "a peer's slot: PROTOCOL.md, Memory per peer");

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
  ~Reliability();  // gives back the rings and records peers hold (the pools free only theirs)

  TxStream& tx(uint32_t pi) { return peers_[pi].tx; }
  const TxStream& tx(uint32_t pi) const { return peers_[pi].tx; }
  const RxStream& rx(uint32_t pi) const { return peers_[pi].rx; }
  RxStream& rx(uint32_t pi) { return peers_[pi].rx; }
  // The peer's busy part: its record, or while it is idle a fresh one
  // (kIdle). Good until the peer's next call into Reliability: a record
  // goes back to the pool when the peer is idle again.
  const TxActive& tx_active(uint32_t pi) const { return Peek(pi).tx; }
  const RxActive& rx_active(uint32_t pi) const { return Peek(pi).rx; }

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
    TxStream& t = tx(pi);
    if (t.hold && t.hold_id == hold_id) t.hold = false;
  }
  // An op in the waiting list got its answer (or its session ended).
  void Unpark(uint32_t pi, uint32_t o) {
    Act(pi).tx.waiting.Remove(ops_.base(), o);
    ops_[o].state = OpState::kIdle;
    Settle(pi);
  }
  // READ_DATA r from pi for a waiting op of `kind` (a read, a pull): lands
  // its payload at the op's dst; returns the op once every byte is in
  // (unparked: the caller ends it), else kNone. An answer no live op waits
  // for (stale, misdirected, forged) counts a protocol error.
  uint32_t LandReadData(uint32_t pi, const wire::RmaFields& r, absl::Span<const uint8_t> payload,
                        OpKind kind);
  // Takes op o off the stream (FailPeer). REQUIRES: queued on pi. The
  // cursor never names an op off the stream: one that took every op off
  // left it on a freed op, and an idle record keeps its cursor (Idle) for
  // the next op queued, which then went in before the freed one (a packet
  // built from a freed op's slot: packet_fuzz, seed
  // fail_peer_then_answer).
  void Unqueue(uint32_t pi, uint32_t o) {
    TxActive& t = Act(pi).tx;
    if (t.cursor_op == o) {
      t.cursor_op = ops_[o].next;
      t.cursor_offset = 0;
    }
    t.ops.Remove(ops_.base(), o);
    ops_[o].state = OpState::kIdle;
  }
  // After FailPeer took what failed off: the cursor restarts at the front
  // (and a peer left with nothing is idle).
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
    const RxStream& r = rx(pi);
    if (s.rx_known && (r.ack_now || r.ack_standalone || r.rnr_owed)) return true;
    if (!s.tx_ready) return false;
    const TxStream& t = tx(pi);
    const TxActive& a = tx_active(pi);
    if (a.retx_queued == 0 && (a.rnr.waiting || a.cursor_op == kNone || !WindowOpen(t) ||
                               !CwndOpen(pi, t) || CursorHeld(t, a))) {
      return false;
    }
    return !t.pace_wait;  // waiting for its pacing time: the timer queues it then
  }
  // Builds retransmissions, then new packets, then an ACK into bufs;
  // returns how many. An ACK goes if one is owed or *probe_owed (the
  // session's liveness probe: it asks for one back, and is then cleared).
  // A record the peer no longer needs goes back. rx_next_msg_id: the next
  // message we take from the peer, needed only when an RNR ACK is owed
  // (rx(pi).rnr_owed; the ACK says it: AckHeader).
  size_t Build(uint32_t pi, bool* probe_owed, absl::Span<driver::Packet* const> bufs,
               uint32_t rx_next_msg_id = 0);
  // The RTO of pi's stream after `backoff` expirations (a HELLO's retry
  // too: backoff is its tries).
  uint64_t Rto(uint32_t pi, uint32_t backoff) const { return Rto(tx(pi), backoff); }
  uint64_t Rto(const TxStream& t, uint32_t backoff) const {
    return t.rtt.rto(rto_bounds_, backoff);
  }
  // Congestion control applies to pi (config, and pi not on this host).
  bool CcOn(uint32_t pi) const { return ctx_.config.congestion_control && !session_[pi].local; }
  // Something of ours to pi is unfinished: queued, unacknowledged, held or waiting.
  bool Busy(uint32_t pi) const {
    const ActiveStreams& a = Peek(pi);
    return !a.tx.ops.empty() || !a.tx.waiting.empty() || a.rx.held_count > 0;
  }
  // Some peer is Busy (or has a record not settled yet), or is owed a
  // delayed ACK: the endpoint has something of its own unfinished that
  // only a later pass moves on (acknowledgements to take or to send,
  // retransmissions, queued data). Not a probe of a peer whose messages
  // are awaited: nothing is lost if nobody makes it.
  bool AnyBusy() const { return busy_peers_ > 0 || acks_delayed_ > 0; }
  // Only answers are awaited (nothing queued in flight): liveness probes.
  bool OnlyWaiting(uint32_t pi) const {
    return !tx_active(pi).waiting.empty() && tx(pi).inflight() == 0;
  }

  // ---- Acknowledgements (of our stream, on any packet from pi; sack on ACKs).
  // Completes what they acknowledge (kOpTraits' after_ack), and on a
  // refusal backs off or, after rnr_give_up_ns, gives the message up.
  // A packet with data keeps the peer's record (fresh, if the ACK made it
  // idle) for the answer it owes, which settles it (Build, or the delayed
  // ACK's timer): a ping-pong keeps its record across round trips rather
  // than give it back and take it again on every one.
  void OnAck(uint32_t pi, const wire::Common& c, const wire::AckFields* sack) {
    Acknowledged(pi, c, sack);
    if (c.type == wire::PacketType::kAck) Settle(pi);
  }
  // An ACK asking for one back (a probe): answer at once.
  void AckRequested(uint32_t pi);

  // ---- Receiving (pi's stream).
  // Files a sequenced packet (parsed into v, in pkt) by its PSN.
  Arrival Arrive(uint32_t pi, const wire::View& v, driver::Packet* pkt);
  // The packet at rcv_nxt was taken (consumed) or refused (not ready: it
  // comes again after an RNR). A bundle counts as the messages it carries
  // toward ack_every_packets: its sender waits for that many completions.
  void Consumed(uint32_t pi, uint32_t messages = 1);
  void Refused(uint32_t pi);
  // The held packet at rcv_nxt, if there is one: consume it, then DropHeld.
  HeldPacket* NextHeld(uint32_t pi);
  void DropHeld(uint32_t pi, HeldPacket* h) {
    Unhold(pi, h);
    Settle(pi);
  }
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
  void RunTimers(uint32_t pi, uint64_t* next, uint64_t* floor) {
    RunDeadlines(pi, next, floor);
    Settle(pi);
  }
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
  bool Paced(uint32_t pi) const {
    return CcOn(pi) && !CongestionWindow::PaceAllows(Peek(pi).tx.cc, ctx_.now);
  }
  // After Build: counts a full congestion window, notes that it is in use,
  // and arms the pacing timer if packets wait for it.
  void NoteCongestionLimits(uint32_t pi, const TxActive& a);
  // A loss signal: the window halves, once per round trip.
  void CcLoss(uint32_t pi);
  // Pacing spreads a window over SRTT, but never over more than twice the
  // smallest RTT: more is queueing that pacing should not add to, or a
  // sample inflated by a repair (a packet held behind a hole is
  // acknowledged late, by backoff) that would stall the sender.
  void SetPacing(const TxStream& t, TxActive& a) {
    if (t.rtt.has_sample()) t.cc.SetRtt(a.cc, std::min(t.rtt.srtt(), 2 * t.rtt.min_rtt()));
  }
  // Packet psn left (where CcOn): the first of a flight sets its pacing.
  void CcSent(const TxStream& t, TxActive& a, Psn psn) {
    if (!a.cc.started) SetPacing(t, a);
    CongestionWindow::OnSent(a.cc, psn, ctx_.now);
  }
  bool CursorHeld(const TxStream& t, const TxActive& a) const;
  // Peer pi's busy part to read: its record, or kIdle.
  const ActiveStreams& Peek(uint32_t pi) const {
    const ActiveStreams* a = peers_[pi].active;
    return a != nullptr ? *a : kIdle;
  }
  // ... to change: its record, taken from the pool if it had none.
  ActiveStreams& Act(uint32_t pi) {
    ActiveStreams*& a = peers_[pi].active;
    if (a == nullptr) {
      a = active_pool_.Take();
      ++busy_peers_;
    }
    return *a;
  }
  // The record of a peer that no longer needs it (nothing queued, waiting,
  // in flight, timed or held) goes back to the pool. Called where a peer
  // may have become idle, after the call's last use of the record.
  void Settle(uint32_t pi) {
    ActiveStreams* a = peers_[pi].active;
    if (a != nullptr && Idle(*a)) {
      a->tx.cc = CcFlight{};  // the flight's congestion state ends with it
      active_pool_.Give(a);
      peers_[pi].active = nullptr;
      --busy_peers_;
    }
  }
  static bool Idle(const ActiveStreams& a);
  void ClearAckDeadline(RxStream& r) {
    if (r.ack_deadline != 0) --acks_delayed_;
    r.ack_deadline = 0;
  }
  // New data needs a tx ring: peer pi's, or one from the pool.
  void NeedRing(TxActive& a) {
    if (a.ring != nullptr) return;
    const uint64_t allocated = tx_pool_.allocated();
    a.ring = tx_pool_.Take();
    ctx_.counters.tx_rings_allocated += tx_pool_.allocated() - allocated;
  }
  // Peer pi is done with its tx ring (nothing in flight) or held ring
  // (nothing held): back to the pool.
  void GiveTxRing(TxActive& a);
  void GiveHeldRing(RxActive& a);
  TxEntry& entry(const TxActive& a, Psn p) { return a.ring[p.value() & ring_mask_]; }
  HeldPacket& held_at(const RxActive& a, Psn p) const { return a.held[p.value() & ring_mask_]; }

  void BuildSegment(uint32_t pi, TxActive& a, driver::Packet* pkt);
  // How many whole messages from the cursor on go in one packet toward pi
  // (1: no bundle), each within max_seg bytes of payload.
  uint32_t BundleFrom(uint32_t pi, const TxActive& a, uint32_t max_seg) const;
  size_t WriteBundle(const driver::UdpFlow& flow, const wire::Common& c, const TxEntry& e,
                     driver::Packet* pkt);
  void BuildRetransmit(uint32_t pi, Psn psn, driver::Packet* pkt);
  void BuildAck(uint32_t pi, bool probe, uint32_t rx_next_msg_id, driver::Packet* pkt);
  // The peer refused the bundle at snd_una after taking its messages
  // before next_msg_id: those sends complete now.
  void TakenFromBundle(uint32_t pi, TxActive& a, uint32_t next_msg_id);
  void WritePacket(uint32_t pi, Psn psn, const TxEntry& e, uint16_t flags, driver::Packet* pkt);
  void ProcessSack(uint32_t pi, Psn ack, const wire::AckFields& sack);
  void CompleteAcked(uint32_t pi, TxActive& a);
  bool GiveUpRefused(uint32_t pi);
  void MarkRetx(TxActive& a, Psn psn, bool fast);
  void ArmRto(uint32_t pi);
  // A flight starts (or, not start, an ACK moved it on): the RTO from now
  // and the tail-loss probe, the peer's timer armed once (at a start, moved
  // later too: Context::MoveTimer).
  void ArmFlight(uint32_t pi, TxActive& a, bool start);
  // When the tail-loss probe of t's flight is due from now; 0: none (nothing
  // in flight, no RTT sample yet, backing off, refused, or not before the RTO).
  uint64_t TailProbeAt(const TxStream& t, const TxActive& a) const;
  void OnTailProbe(uint32_t pi);
  void OnRto(uint32_t pi);
  void OnRtoAnswered(TxActive& a, Psn ack);
  Arrival Hold(uint32_t pi, const wire::View& v, driver::Packet* pkt);
  // OnAck, DropHeld and RunTimers but for settling the record.
  void Acknowledged(uint32_t pi, const wire::Common& c, const wire::AckFields* sack);
  void Unhold(uint32_t pi, HeldPacket* h);
  void RunDeadlines(uint32_t pi, uint64_t* next, uint64_t* floor);
  // What a held ring holds goes (ResetRx, ReleaseAll).
  void DropAllHeld(uint32_t pi);

  Context& ctx_;
  Session& session_;
  OpTable& ops_;
  Completions& completions_;
  const uint32_t ring_mask_;
  const uint32_t held_budget_;
  const RtoBounds rto_bounds_;
  uint32_t held_total_ = 0;
  uint32_t refused_peers_ = 0;
  uint32_t busy_peers_ = 0;    // peers holding a record of active_pool_
  uint32_t acks_delayed_ = 0;  // peers whose RxStream::ack_deadline is set
  // What an idle peer's record reads as.
  static const ActiveStreams kIdle;
  std::unique_ptr<PeerStreams[]> peers_;
  RingPool<ActiveStreams> active_pool_;
  RingPool<TxEntry> tx_pool_;
  RingPool<HeldPacket> held_pool_;
  // Peers whose ACK is deferred (RxStream::ack_deferred when they went in;
  // a packet that carried it since clears the flag, not the entry).
  std::vector<uint32_t> deferred_;
  uint64_t deferred_since_ = 0;  // ctx_.now when deferred_ last became non-empty
};

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_RELIABILITY_H_
