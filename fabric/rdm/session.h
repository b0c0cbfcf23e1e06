// The Session stage: who the peers are (the peer table), the handshake that
// starts a session with each (HELLO / HELLO_ACK: incarnations and initial
// PSNs), restarts and RESETs, and liveness (activity, probes). It decides
// what a HELLO or RESET means; the engine tears down what it ends.
#ifndef BYPASS_FABRIC_RDM_SESSION_H_
#define BYPASS_FABRIC_RDM_SESSION_H_

#include <array>
#include <cstdint>
#include <memory>

#include "absl/functional/function_ref.h"
#include "absl/types/span.h"
#include "driver/net_headers.h"
#include "driver/packet.h"
#include "fabric/rdm/context.h"
#include "fabric/rdm/peer_table.h"
#include "fabric/rdm/psn.h"
#include "fabric/rdm/record_pool.h"
#include "fabric/rdm/wire.h"

namespace bypass::rdm {

// What only a handshake in progress needs (our HELLO unanswered, a
// HELLO_ACK owed, a probe), and a restarted peer's previous incarnations:
// in Session's pool (RecordPool), taken when one starts and given back when
// the handshake is over and nothing is retired (Session::Settle), so an
// established idle peer holds none. A peer that restarted keeps its record
// (its retired incarnations) until it is removed.
struct Handshake {
  // The proofs of a handshake (PROTOCOL.md, "Sessions"): our fresh nonce
  // (a HELLO_ACK or COOKIE counts only if it echoes it; drawn anew for
  // each record, session and probe), the nonce of the peer's HELLO our
  // HELLO_ACK echoes, and the cookie the peer gave us for our HELLO.
  uint64_t nonce = 0;
  uint64_t peer_nonce = 0;
  wire::Cookie cookie{};
  uint64_t hello_due_ns = 0;  // when the next HELLO goes
  uint32_t hello_tries = 0;
  std::array<uint32_t, 4> retired{};  // the peer's previous incarnations
  uint8_t retired_next = 0;

  bool IsRetired(uint32_t inc) const {
    for (uint32_t r : retired) {
      if (r != 0 && r == inc) return true;
    }
    return false;
  }
};

// One peer's session, as the Session stage keeps it: 48 B in its slot,
// widest fields first, the flags as bits (PROTOCOL.md, "Memory per peer").
// Our packets' flow to it is not kept: Session::Flow builds it from its
// address and ours.
struct SessionPeer {
  uint64_t born = 0;  // creation order: learned peers are evicted oldest first

  // Liveness.
  uint64_t activity_ns = 0;   // last heard from, or when work began
  uint64_t probe_due_ns = 0;  // next liveness probe while only waiting
  // The device's last answer about its process (Engine::CheckSilence), and
  // when it was asked: an answer older than activity_ns is of an earlier
  // silence and counts for nothing.
  uint64_t liveness_at_ns = 0;

  // Its handshake record in Session's pool, kNone: none (Handshake).
  uint32_t hs = kNone;
  // The two directions' initial PSNs: ours (tx_isn), and its, once known.
  Psn tx_isn;
  Psn rx_isn;

  uint16_t max_datagram = 0;  // its receive limit (from its HELLO)
  driver::PeerLiveness liveness = driver::PeerLiveness::kUnknown;
  bool probe_owed = false;  // the next ACK asks for one back (kFlagAckReq)

  bool inserted : 1 = false;     // by InsertPeer (else learned from a HELLO)
  bool mac_unknown : 1 = false;  // inserted without a MAC: broadcast until learned
  bool rx_known : 1 = false;     // we know its incarnation and initial PSN
  bool tx_ready : 1 = false;     // it acknowledged our initial PSN
  bool counted_established : 1 = false;

  // Handshake packets owed.
  // (hello_wanted && (!tx_ready || probing), or hello_ack_owed, or
  // probing: the peer has a Handshake record.)
  bool hello_wanted : 1 = false;  // we have something to send and no session
  bool hello_ack_owed : 1 = false;

  // A RESET said our session is gone: a HELLO (dst 0, our session's ISN)
  // asks whether it is; its proven answer decides, the RESET never does.
  bool probing : 1 = false;
  // Its frames came with kRxSameHost (or the device reaches it through
  // this host's shared memory): the intra-host key authenticates it.
  bool local : 1 = false;

  // Where it is: its frames came through memory this host's processes
  // share (kRxSameHost), so our rendezvous requests offer to be read in
  // place and messages above in_place_threshold go by rendezvous; unless
  // it pulled a message we offered (it cannot read us: ptrace rules,
  // another pid namespace), for the rest of the session.
  bool same_host : 1 = false;
  bool in_place_refused : 1 = false;
  // It has read a message of ours in place and vouched for it (a COPIED,
  // VOUCHED READ_REQ) in this session: our rendezvous requests that offer
  // to be read in place no longer hold our later messages back until it
  // answers (Reliability::BuildSegment; PROTOCOL.md, "Reading in place").
  bool reads_in_place : 1 = false;
  // Its handshake said our frames reach it through memory only
  // (wire::kCapUnchecked): our DATA, RMA and ACKs go without a CRC.
  bool sends_unchecked : 1 = false;
  // Its handshake said it takes DATA packets of several messages
  // (wire::kCapBundle): our small messages that wait together go in one
  // (Reliability::BuildSegment).
  bool takes_bundles : 1 = false;

  bool established() const { return rx_known && tx_ready; }
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
  // Peer pi's handshake record, or null while it has none (tests, tools).
  const Handshake* handshake(uint32_t pi) const {
    return state_[pi].hs == kNone ? nullptr : &handshakes_[state_[pi].hs];
  }
  // Handshake records taken now (an idle established peer holds none).
  uint32_t handshakes_taken() const { return handshakes_.taken(); }
  // Its HELLOs sent without an answer (the retry's backoff), 0 without a record.
  uint32_t hello_tries(uint32_t pi) const {
    return state_[pi].hs == kNone ? 0 : handshakes_[state_[pi].hs].hello_tries;
  }
  // inc is one of pi's retired incarnations: its packets are stale.
  bool IsRetired(uint32_t pi, uint32_t inc) const {
    return state_[pi].hs != kNone && handshakes_[state_[pi].hs].IsRetired(inc);
  }
  // A HELLO of pi's (its nonce) is answered by a HELLO_ACK echoing it.
  void OweHelloAck(uint32_t pi, uint64_t nonce) {
    Record(pi).peer_nonce = nonce;
    state_[pi].hello_ack_owed = true;
  }
  // A frame from pi came with kRxSameHost.
  void NoteSameHost(uint32_t pi) {
    state_[pi].same_host = !state_[pi].in_place_refused;
    state_[pi].local = true;
  }
  const SessionPeer& operator[](uint32_t pi) const { return state_[pi]; }
  const Address& address(uint32_t pi) const { return peers_.address(pi); }
  // Our packets to pi: to its address (the MAC it was inserted with or its
  // HELLO taught; broadcast while unknown) from ours, at the endpoint's DSCP.
  // Built per packet rather than kept: 28 B less in each peer's slot.
  driver::UdpFlow Flow(uint32_t pi) const {
    const Address& a = peers_.address(pi);
    return driver::UdpFlow{ctx_.dev.mac,
                           state_[pi].mac_unknown ? driver::kBroadcastMac : a.mac,
                           ctx_.dev.ip,
                           a.ip,
                           ctx_.config.udp_port,
                           a.udp_port,
                           ctx_.dscp};
  }

  // A slot for a peer the application names (marked inserted); kNone when
  // the table is full (the engine then evicts a learned peer and tries
  // again). *added: it is new (its stages need resetting).
  uint32_t Insert(const Address& addr, bool* added);
  // A proven HELLO (its cookie was valid) from an unknown source is the
  // only way a received packet creates a peer: at most a quarter of
  // max_peers (at least one) such learned peers at once (LearnedFull).
  // kNone when the table is full. REQUIRES: !LearnedFull().
  uint32_t AddFromHello(const wire::View& v, bool* added);
  bool LearnedFull() const { return learned_ >= learned_limit_ || peers_.full(); }
  // The oldest learned (not inserted) peer for which pred holds, or kNone.
  uint32_t OldestLearned(absl::FunctionRef<bool(uint32_t)> pred) const;
  void Remove(uint32_t pi);

  // ---- Proofs (PROTOCOL.md, "Sessions"; SECURITY.md).
  // The key that authenticates handshakes with a peer reached through this
  // host's shared memory (same_host) or not; null: none.
  const wire::MacKey* KeyFor(bool same_host) const;
  // Whether pi's packets take the intra-host key.
  bool Local(uint32_t pi) const;
  // Our receive limit toward pi, the most we announce it and send it: the
  // same-host one for a peer of this host (Local), else max_datagram.
  uint32_t OwnLimit(uint32_t pi) const;
  // A HELLO, HELLO_ACK, COOKIE or RESET's MAC is right for the key that
  // applies (counts handshake_auth_failed if not).
  bool Authentic(const wire::View& v, bool same_host);
  // A HELLO that would change state: one from an unknown source, or one
  // that starts, restarts or resets a session (anything but a copy of the
  // current session's HELLO). Such a HELLO is acted on only with a valid
  // cookie; REQUIRES: not from a retired incarnation.
  bool NeedsProof(uint32_t pi, const wire::View& v) const;
  // Its cookie is ours, for its source, incarnation, ISN and nonce, and at
  // most one to two cookie periods old (counts cookie_rejected if it
  // carried a wrong one).
  bool CookieValid(const wire::View& v);
  // Answers a HELLO that needs proof with a COOKIE (stateless: a bounded
  // queue, counts cookies_dropped when full): to pi's address if it is a
  // peer (never to where a frame claiming it came from), else to the
  // frame's source.
  void QueueCookie(uint32_t pi, const wire::View& v, bool same_host);
  // A HELLO_ACK or COOKIE echoes our nonce (counts handshake_unproven if not).
  bool EchoesNonce(uint32_t pi, const wire::View& v);
  // What a COOKIE echoing our nonce proves: the peer at pi's address
  // (incarnation src) has no session with this one of ours (a restart if
  // src is not the incarnation we know; a reset if it answers a probe of
  // an established session; else the handshake goes on).
  SessionEvent ClassifyCookie(uint32_t pi, const wire::View& v);
  // A COOKIE to our current HELLO: the HELLO goes again at once, echoing it.
  void TakeCookie(uint32_t pi, const wire::View& v);
  // A RESET says our session with pi is gone: ask (see `probing`).
  void Probe(uint32_t pi);
  // A proven HELLO or HELLO_ACK: heard from pi, and (inserted without a
  // MAC) its MAC learned, once.
  void Proven(uint32_t pi, const wire::View& v) {
    Heard(pi, v);
    if (state_[pi].mac_unknown) LearnMac(pi, v);
  }
  // A HELLO_ACK echoing our nonce: the peer has our session; a probe ends.
  void Answered(uint32_t pi) {
    SessionPeer& s = state_[pi];
    if (!s.probing) return;
    s.probing = false;
    if (s.tx_ready) s.hello_wanted = false;
    Settle(pi);
  }
  // A fresh initial PSN for our direction (a new session, or after a failure).
  void NewTxIsn(uint32_t pi) { state_[pi].tx_isn = Psn(static_cast<uint32_t>(ctx_.Random())); }

  // What a HELLO or HELLO_ACK from peer pi means. After the engine tore
  // down what a restart or reset ends, Accept takes the session on.
  SessionEvent ClassifyHello(uint32_t pi, const wire::View& v);
  // Heard from peer pi (its liveness).
  void Heard(uint32_t pi, const wire::View& /*v*/) {
    SessionPeer& s = state_[pi];
    s.activity_ns = ctx_.now;
    ctx_.ArmTimer(pi, ctx_.now + ctx_.config.peer_timeout_ns);
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
    if (s.probing) return;  // the probe's HELLO is on its way
    if (s.tx_ready || s.hello_wanted) return;
    s.hello_wanted = true;
    Handshake& h = Record(pi);
    h.hello_due_ns = ctx_.now;
    h.hello_tries = 0;
  }
  // What a RESET from peer pi would mean; in_session: its psn is one we
  // sent and it has not acknowledged. The engine probes on a restart or
  // reset rather than ending the session (PROTOCOL.md, "Sessions").
  SessionEvent ClassifyReset(uint32_t pi, const wire::View& v, bool in_session);
  // A session ended (FailPeer): its handshake state goes; a HELLO is wanted
  // if more is to be sent.
  void EndSession(uint32_t pi, bool more_to_send);

  // A HELLO or HELLO_ACK is owed to pi now.
  bool HandshakeOwed(uint32_t pi) const {
    const SessionPeer& s = state_[pi];
    return (HelloPending(s) && handshakes_[s.hs].hello_due_ns <= ctx_.now) || s.hello_ack_owed;
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
    if (probe || HelloPending(state_[pi])) RunDueTimers(pi, probe, next);
  }

  // RESETs owed to sources that have no session with us (rate-limited per
  // source); same_host: the packet came with kRxSameHost (which key MACs it).
  void QueueReset(const wire::View& v, wire::ResetReason reason, bool same_host = false);
  // RESETs and COOKIEs owed.
  bool HasResets() const { return reset_count_ > 0; }
  size_t BuildResets(absl::Span<driver::Packet* const> bufs);

 private:
  // A RESET or COOKIE owed to a source (stateless answers).
  struct PendingReset {
    wire::PacketType type;
    driver::UdpFlow flow;
    uint32_t dst_incarnation;
    uint32_t about_incarnation;
    Psn psn;
    wire::ResetReason reason;
    uint64_t echo;       // COOKIE: the HELLO's nonce
    wire::Cookie cookie;  // COOKIE
    bool same_host;
  };
  // Cookies are valid for the period (about a second) they were made in
  // and the next one.
  static constexpr int kCookiePeriodShift = 30;
  // When a RESET last went to a source (rate limit).
  struct ResetSent {
    bool valid = false;
    uint64_t key = 0;
    uint64_t at_ns = 0;
  };
  static constexpr uint32_t kMaxPendingResets = 16;
  static constexpr uint32_t kResetCacheSize = 32;

  static bool HelloPending(const SessionPeer& s) {
    return s.hello_wanted && (!s.tx_ready || s.probing);
  }
  void Init(uint32_t pi, const Address& addr);
  // What the incarnation a HELLO, HELLO_ACK or COOKIE comes from means
  // (counted): kStale (retired), kRestarted (not the one we know), else
  // kCurrent.
  SessionEvent ClassifyIncarnation(uint32_t pi, uint32_t src);
  wire::Cookie MakeCookie(const wire::View& v, uint64_t period) const;
  PendingReset* NextPending();
  uint64_t NewNonce();
  void LearnMac(uint32_t pi, const wire::View& v);
  // Pi's handshake record, taken (with a fresh nonce) if it has none.
  Handshake& Record(uint32_t pi);
  // Gives pi's record back once nothing needs it: no HELLO pending, no
  // HELLO_ACK owed, no probe, no incarnation retired.
  void Settle(uint32_t pi);
  void DropRecord(uint32_t pi);
  void MaybeEstablished(uint32_t pi);
  void RunDueTimers(uint32_t pi, bool probe, uint64_t* next);

  Context& ctx_;
  PeerTable peers_;
  std::unique_ptr<SessionPeer[]> state_;
  RecordPool<Handshake> handshakes_;
  PendingReset resets_[kMaxPendingResets];
  uint32_t reset_head_ = 0;
  uint32_t reset_count_ = 0;
  ResetSent reset_cache_[kResetCacheSize];
  // The key of our cookies: random per endpoint, never sent.
  wire::MacKey cookie_secret_{};
  uint32_t learned_ = 0;  // peers in use not inserted by the application
  uint32_t learned_limit_;
  uint64_t born_ = 0;
};

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_SESSION_H_
