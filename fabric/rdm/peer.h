// Per-peer protocol state: the session (incarnations, handshake), the send
// direction (PSNs, packets in flight, RTO, window) and the receive direction
// (cumulative ACK, out-of-order packets held, the message being reassembled).
#ifndef BYPASS_FABRIC_RDM_PEER_H_
#define BYPASS_FABRIC_RDM_PEER_H_

#include <array>
#include <cstdint>

#include "driver/net_headers.h"
#include "driver/packet.h"
#include "fabric/rdm/index_list.h"
#include "fabric/rdm/psn.h"
#include "fabric/rdm/rtt.h"
#include "fabric/rdm/types.h"
#include "fabric/rdm/wire.h"

namespace bypass::rdm {

// Bits of TxEntry::state.
inline constexpr uint8_t kTxSacked = 1u << 0;         // the receiver holds it
inline constexpr uint8_t kTxRetransmitted = 1u << 1;  // sent more than once (no RTT sample: Karn)
inline constexpr uint8_t kTxNeedsRetx = 1u << 2;      // queued for retransmission
inline constexpr uint8_t kTxFast = 1u << 3;           // ... because of a SACK gap (else the timer)

// One DATA packet sent and not yet cumulatively acknowledged: enough to
// build it again from its operation.
struct TxEntry {
  uint32_t op = kNone;
  uint32_t len = 0;
  uint64_t offset = 0;
  uint64_t first_sent_ns = 0;
  uint64_t last_sent_ns = 0;
  uint8_t state = 0;
};

// One DATA packet received out of order, held until the gap before it fills.
struct HeldPacket {
  driver::Packet* pkt = nullptr;
  wire::PacketType type = wire::PacketType::kData;
  wire::MsgFields msg;  // kData
  wire::RmaFields rma;  // kRma
  uint32_t payload_offset = 0;  // in pkt->data
  uint32_t payload_len = 0;
};

// Where the message a peer is sending us goes (kDiscard: dropped by a peek
// or claim with kRecvDiscard while it was still arriving).
enum class RxSink : uint8_t { kPosted, kUnexpected, kDiscard };

// The message between its first and last segment.
struct RxMessage {
  bool active = false;
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

// What a SendOp is. The first four are posted by the user (send slots);
// the others are the engine's own (max_rma_ops slots).
enum class OpKind : uint8_t {
  kMsg,        // an eager message: DATA segments
  kRndv,       // a rendezvous message: a request to send, then READ_DATA when pulled
  kWrite,      // RMA write: WRITE segments, then a RESPONSE from the target
  kRead,       // RMA read: a READ_REQ, then READ_DATA into buf
  kReadResp,   // (target) the READ_DATA answering a peer's read
  kResponse,   // (target) a RESPONSE to a peer's write or refused read
  kPull,       // (receiver) the READ_REQ pulling a rendezvous message, then its READ_DATA
};

// The RMA write a peer is applying to us, between its first and last segment.
struct RxRma {
  bool active = false;
  uint32_t rma_id = 0;
  uint64_t key = 0;
  uint64_t addr = 0;
  uint64_t total = 0;
  uint64_t received = 0;
  uint64_t data = 0;
  uint8_t flags = 0;
  wire::RmaStatus status = wire::RmaStatus::kOk;  // decided at offset 0
  uint32_t region = kNone;
  uint32_t region_generation = 0;
};

// One send operation, from post to acknowledgement (and, for RMA and
// rendezvous, to the peer's answer).
struct SendOp {
  const uint8_t* buf = nullptr;  // the caller's buffer, or the inject copy
  uint64_t len = 0;
  void* context = nullptr;
  uint64_t tag = 0;
  uint64_t data = 0;
  uint16_t msg_flags = 0;
  bool inject = false;   // no completion to come (kSendInject, or kSendBuffered's came at once)
  bool ack_now = false;  // kSendAckNow: the last packet asks for an ACK at once
  bool started = false;  // a segment went out (msg_id assigned)
  bool all_sent = false;
  // Given up (the receiver refused it for rnr_give_up_ns): completed in
  // error already; what is in flight goes as kMsgAbandoned, the rest never.
  bool abandoned = false;
  uint32_t msg_id = 0;
  uint32_t peer = kNone;
  // RMA and rendezvous (see OpKind).
  OpKind kind = OpKind::kMsg;
  bool pulled = false;     // kRndv: the receiver asked for the bytes (data phase)
  bool waiting = false;    // in Peer::waiting (else in Peer::ops)
  uint8_t rma_flags = 0;   // RmaFlag bits of what it sends
  wire::RmaStatus status = wire::RmaStatus::kOk;  // kResponse
  uint64_t wire_len = 0;   // bytes the current phase streams
  uint64_t key = 0;        // region key (kWrite, kRead); msg_id pulled (kPull)
  uint64_t addr = 0;       // in the target's region
  uint32_t rma_id = 0;     // kReadResp, kResponse, kRndv pulled: the initiator's id echoed
  uint64_t rx_done = 0;    // kRead, kPull: answer bytes arrived
  uint32_t aux = kNone;    // kPull: receive slot; kReadResp: region
  uint8_t* dst = nullptr;  // kRead: where the answer goes
  uint64_t total = 0;      // kPull: the message's length (len: the bytes pulled)
  Psn last_psn;
  uint32_t prev = kNone;
  uint32_t next = kNone;
};

// Everything the engine knows about one peer. `tx_ring` and `held` point
// into arrays the engine sized at creation (ring_mask + 1 entries each).
struct Peer {
  // Identity.
  bool in_use = false;
  bool inserted = false;              // by InsertPeer (else learned from a HELLO)
  Address addr;                       // addr.incarnation: the current one, 0 if unknown
  driver::UdpFlow flow;               // our packets to it
  bool mac_unknown = false;           // inserted without a MAC: broadcast until learned
  std::array<uint32_t, 4> retired{};  // its previous incarnations
  uint8_t retired_next = 0;
  uint16_t max_datagram = 0;  // its receive limit (from its HELLO)
  uint64_t activity_ns = 0;   // last heard from, or when work began

  // Session.
  bool rx_known = false;  // we know its incarnation and initial PSN
  bool tx_ready = false;  // it acknowledged our initial PSN
  bool counted_established = false;
  bool hello_ack_owed = false;
  bool hello_wanted = false;  // we have something to send and no session
  uint64_t hello_due_ns = 0;  // when the next HELLO goes
  uint32_t hello_tries = 0;

  // Send direction.
  Psn tx_isn;
  Psn next_psn;
  Psn snd_una;
  Psn window_end;  // may send PSNs before this
  uint32_t next_msg_id = 0;
  IndexList<SendOp> ops;       // oldest first
  uint32_t cursor_op = kNone;  // first operation with segments not yet sent
  uint64_t cursor_offset = 0;
  TxEntry* tx_ring = nullptr;
  uint32_t ring_mask = 0;
  uint32_t retx_queued = 0;
  RttEstimator rtt;
  uint32_t backoff = 0;
  uint64_t rto_deadline = 0;
  // Tail-loss probe (engine_timers.cc): one early retransmission of the
  // newest unacknowledged packet at about two round trips, before the RTO.
  uint64_t tlp_deadline = 0;
  bool acks_on_data = false;  // the last ACK that advanced came on a packet with data (a reply)
  bool rnr_wait = false;
  uint64_t rnr_until = 0;
  uint64_t rnr_delay = 0;
  uint64_t rnr_since = 0;  // first RNR for snd_una (0: none); see rnr_give_up_ns
  bool window_stalled = false;

  // Receive direction.
  Psn rx_isn;
  Psn rcv_nxt;
  HeldPacket* held = nullptr;
  uint32_t held_count = 0;
  Psn highest_held;
  uint32_t unacked_rx = 0;      // consumed since we last acknowledged
  uint64_t ack_deadline = 0;    // delayed ACK due; 0: none
  bool ack_now = false;         // acknowledge this pass (a DATA may carry it)
  bool ack_standalone = false;  // an ACK packet is needed (SACK, window update)
  bool rnr_owed = false;        // an ACK with kFlagRnr is needed
  bool rx_refused = false;      // we refused rcv_nxt; owe a window update
  uint32_t rx_next_msg_id = 0;
  RxMessage rx_msg;
  RxRma rx_rma;
  // Started RMA ops and rendezvous messages waiting for this peer's answer.
  IndexList<SendOp> waiting;
  uint64_t probe_due_ns = 0;  // next liveness probe while only waiting
  bool probe_owed = false;    // the next ACK asks for one back (kFlagAckReq)
  // A rendezvous request went out and the receiver has not answered it yet
  // (a pull, or "queued"): no more of the user's ops go until it does, so
  // that pulled bytes never wait behind a message the receiver refuses.
  bool rndv_hold = false;
  uint32_t rndv_hold_msg_id = 0;  // the request's: only its answer ends the hold
  // The sender abandoned message rx_next_msg_id - 1: its other segments are
  // acknowledged and dropped.
  bool rx_skip = false;

  // Scheduling.
  bool queued = false;

  uint32_t inflight() const { return static_cast<uint32_t>(next_psn - snd_una); }
  // The peer's window and our TX ring both have room for another PSN.
  bool WindowOpen() const { return next_psn.Before(window_end) && inflight() <= ring_mask; }
  TxEntry& entry(Psn p) { return tx_ring[p.value() & ring_mask]; }
  HeldPacket& held_at(Psn p) { return held[p.value() & ring_mask]; }
  bool busy() const {
    return !ops.empty() || !waiting.empty() || rx_msg.active || rx_rma.active || held_count > 0 ||
           hello_wanted;
  }
  bool IsRetired(uint32_t inc) const {
    for (uint32_t r : retired) {
      if (r != 0 && r == inc) return true;
    }
    return false;
  }
  void Retire(uint32_t inc) {
    retired[retired_next] = inc;
    retired_next = static_cast<uint8_t>((retired_next + 1) % retired.size());
  }
};

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_PEER_H_
