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
  wire::MsgFields msg;
  uint32_t payload_offset = 0;  // in pkt->data
  uint32_t payload_len = 0;
};

// Where the message a peer is sending us goes.
enum class RxSink : uint8_t { kPosted, kUnexpected };

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
};

// One send operation, from post to acknowledgement.
struct SendOp {
  const uint8_t* buf = nullptr;  // the caller's buffer, or the inject copy
  uint64_t len = 0;
  void* context = nullptr;
  uint64_t tag = 0;
  uint64_t data = 0;
  uint16_t msg_flags = 0;
  bool inject = false;
  bool started = false;  // a segment went out (msg_id assigned)
  bool all_sent = false;
  uint32_t msg_id = 0;
  uint32_t peer = kNone;
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
  bool rnr_wait = false;
  uint64_t rnr_until = 0;
  uint64_t rnr_delay = 0;
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

  // Scheduling.
  bool queued = false;

  uint32_t inflight() const { return static_cast<uint32_t>(next_psn - snd_una); }
  // The peer's window and our TX ring both have room for another PSN.
  bool WindowOpen() const { return next_psn.Before(window_end) && inflight() <= ring_mask; }
  TxEntry& entry(Psn p) { return tx_ring[p.value() & ring_mask]; }
  HeldPacket& held_at(Psn p) { return held[p.value() & ring_mask]; }
  bool busy() const { return !ops.empty() || rx_msg.active || held_count > 0 || hello_wanted; }
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
