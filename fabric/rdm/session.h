// The Session stage: who the peers are (the peer table), the handshake that
// starts a session with each (HELLO / HELLO_ACK: incarnations and initial
// PSNs), restarts and RESETs, and liveness (activity, probes). It decides
// what a HELLO or RESET means; the engine tears down what it ends.
#ifndef BYPASS_FABRIC_RDM_SESSION_H_
#define BYPASS_FABRIC_RDM_SESSION_H_

#include <array>
#include <cstdint>
#include <memory>

#include "absl/types/span.h"
#include "driver/net_headers.h"
#include "driver/packet.h"
#include "fabric/rdm/context.h"
#include "fabric/rdm/peer_table.h"
#include "fabric/rdm/psn.h"
#include "fabric/rdm/wire.h"

namespace bypass::rdm {

// One peer's session, as the Session stage keeps it.
struct SessionPeer {
  bool inserted = false;      // by InsertPeer (else learned from a HELLO)
  driver::UdpFlow flow;       // our packets to it
  bool mac_unknown = false;   // inserted without a MAC: broadcast until learned
  uint16_t max_datagram = 0;  // its receive limit (from its HELLO)
  std::array<uint32_t, 4> retired{};  // its previous incarnations
  uint8_t retired_next = 0;

  // The two directions' initial PSNs: ours (tx_isn), and its, once known.
  Psn tx_isn;
  Psn rx_isn;
  bool rx_known = false;  // we know its incarnation and initial PSN
  bool tx_ready = false;  // it acknowledged our initial PSN
  bool counted_established = false;

  // Handshake packets owed.
  bool hello_wanted = false;  // we have something to send and no session
  uint64_t hello_due_ns = 0;  // when the next HELLO goes
  uint32_t hello_tries = 0;
  bool hello_ack_owed = false;

  // Liveness.
  uint64_t activity_ns = 0;   // last heard from, or when work began
  uint64_t probe_due_ns = 0;  // next liveness probe while only waiting
  bool probe_owed = false;    // the next ACK asks for one back (kFlagAckReq)

  // Where it is: its frames came through memory this host's processes
  // share (kRxSameHost), so our rendezvous requests offer to be read in
  // place and messages above in_place_threshold go by rendezvous; unless
  // it pulled a message we offered (it cannot read us: ptrace rules,
  // another pid namespace), for the rest of the session.
  bool same_host = false;
  bool in_place_refused = false;

  bool established() const { return rx_known && tx_ready; }
  bool IsRetired(uint32_t inc) const {
    for (uint32_t r : retired) {
      if (r != 0 && r == inc) return true;
    }
    return false;
  }
};

// What a HELLO, HELLO_ACK or RESET means for the session with its sender.
enum class SessionEvent : uint8_t {
  kStale,      // from or about an incarnation that is not current: dropped
  kRestarted,  // the peer came back with a new incarnation
  kReset,      // the peer dropped our session (same incarnation, new one of its own)
  kCurrent,    // news within the current session (or the first contact)
};

// The peer table and each peer's session.
class Session {
 public:
  Session(Context& ctx, uint32_t max_peers);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  PeerTable& peers() { return peers_; }
  const PeerTable& peers() const { return peers_; }
  SessionPeer& operator[](uint32_t pi) { return state_[pi]; }
  // A frame from pi came with kRxSameHost.
  void NoteSameHost(uint32_t pi) { state_[pi].same_host = !state_[pi].in_place_refused; }
  const SessionPeer& operator[](uint32_t pi) const { return state_[pi]; }
  const Address& address(uint32_t pi) const { return peers_.address(pi); }

  // A slot for a peer the application names (marked inserted) or that sent
  // a HELLO; kNone when the table is full. *added: it is new (its stages
  // need resetting).
  uint32_t Insert(const Address& addr, bool* added);
  // A HELLO from an unknown source is the only way a received packet
  // creates a peer: the bound on such peers (today only max_peers, shared
  // with inserted ones) and the rule for evicting them belong here.
  uint32_t AddFromHello(const wire::View& v, bool* added);
  void Remove(uint32_t pi);
  // A fresh initial PSN for our direction (a new session, or after a failure).
  void NewTxIsn(uint32_t pi) { state_[pi].tx_isn = Psn(static_cast<uint32_t>(ctx_.Random())); }

  // What a HELLO or HELLO_ACK from peer pi means. After the engine tore
  // down what a restart or reset ends, Accept takes the session on.
  SessionEvent ClassifyHello(uint32_t pi, const wire::View& v);
  // Heard from peer pi: its liveness, and (inserted without a MAC) its MAC
  // from a HELLO or HELLO_ACK that passed every check.
  void Heard(uint32_t pi, const wire::View& v) {
    SessionPeer& s = state_[pi];
    s.activity_ns = ctx_.now;
    ctx_.ArmTimer(ctx_.now + ctx_.config.peer_timeout_ns);
    if (s.mac_unknown) LearnMac(pi, v);
  }
  // A restarted peer's old incarnation is retired: its packets are stale.
  void Retire(uint32_t pi, uint32_t incarnation);
  // Takes the peer's incarnation and initial PSN from its HELLO(_ACK);
  // true if this starts our knowledge of its direction.
  bool Accept(uint32_t pi, const wire::View& v);
  // It acknowledged our initial PSN: our direction is ready.
  void TxReady(uint32_t pi);
  // We have something to send: a HELLO goes unless the session is up.
  void WantHello(uint32_t pi) {
    SessionPeer& s = state_[pi];
    if (s.tx_ready || s.hello_wanted) return;
    s.hello_wanted = true;
    s.hello_due_ns = ctx_.now;
    s.hello_tries = 0;
  }
  // What a RESET from peer pi means; in_session: its psn is one we sent and
  // it has not acknowledged.
  SessionEvent ClassifyReset(uint32_t pi, const wire::View& v, bool in_session);
  // A session ended (FailPeer): its handshake state goes; a HELLO is wanted
  // if more is to be sent.
  void EndSession(uint32_t pi, bool more_to_send);

  // A HELLO or HELLO_ACK is owed to pi now.
  bool HandshakeOwed(uint32_t pi) const {
    const SessionPeer& s = state_[pi];
    return (!s.tx_ready && s.hello_wanted && s.hello_due_ns <= ctx_.now) || s.hello_ack_owed;
  }
  // ... or a probe (in an ACK).
  bool HasWork(uint32_t pi) const {
    return HandshakeOwed(pi) || (state_[pi].probe_owed && state_[pi].rx_known);
  }
  // Builds what HasWork owes into bufs (at most two packets) with header
  // `c` (its psn and credit set here); `retry_ns`: when an unanswered HELLO
  // goes again. Returns the packets built.
  size_t BuildHandshake(uint32_t pi, wire::Common c, uint16_t credit, uint64_t retry_ns,
                        absl::Span<driver::Packet* const> bufs);
  // The HELLO timer and the liveness probe of peer pi (probe: it has ops
  // waiting for answers and nothing in flight); *next: the earliest of its
  // deadlines still ahead.
  void RunTimers(uint32_t pi, bool probe, uint64_t* next) {
    if (probe || (state_[pi].hello_wanted && !state_[pi].tx_ready)) RunDueTimers(pi, probe, next);
  }

  // RESETs owed to sources that have no session with us (rate-limited per
  // source).
  void QueueReset(const wire::View& v, wire::ResetReason reason);
  bool HasResets() const { return reset_count_ > 0; }
  size_t BuildResets(absl::Span<driver::Packet* const> bufs);

 private:
  // A RESET owed to a source that has no session with us.
  struct PendingReset {
    driver::UdpFlow flow;
    uint32_t dst_incarnation;
    uint32_t about_incarnation;
    Psn psn;
    wire::ResetReason reason;
  };
  // When a RESET last went to a source (rate limit).
  struct ResetSent {
    bool valid = false;
    uint64_t key = 0;
    uint64_t at_ns = 0;
  };
  static constexpr uint32_t kMaxPendingResets = 16;
  static constexpr uint32_t kResetCacheSize = 32;

  void Init(uint32_t pi, const Address& addr);
  void LearnMac(uint32_t pi, const wire::View& v);
  void MaybeEstablished(SessionPeer& s);
  void RunDueTimers(uint32_t pi, bool probe, uint64_t* next);

  Context& ctx_;
  PeerTable peers_;
  std::unique_ptr<SessionPeer[]> state_;
  PendingReset resets_[kMaxPendingResets];
  uint32_t reset_head_ = 0;
  uint32_t reset_count_ = 0;
  ResetSent reset_cache_[kResetCacheSize];
};

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_SESSION_H_
