// The RDM protocol engine of one endpoint: the stages (README.md) wired
// together, the packet dispatcher and the progress steps. It never calls
// the device: received packets are handed in, frames are built into
// buffers handed in, and packets it is done with are handed back, a burst
// at a time (Endpoint in rdm.h does the device calls). Nothing here
// allocates after Create.
#ifndef BYPASS_FABRIC_RDM_ENGINE_H_
#define BYPASS_FABRIC_RDM_ENGINE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "driver/packet.h"
#include "fabric/rdm/config.h"
#include "fabric/rdm/stages.h"
#include "fabric/rdm/types.h"
#include "fabric/rdm/wire.h"

namespace bypass::rdm {

// The stages of one endpoint (it is its Stages), composed and run.
// Single-threaded: one owner calls everything (FI_THREAD_DOMAIN).
class Engine : private Stages {
 public:
  // shared: the inside of config.shared_recv (rdm.h), or null.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const DeviceParams& dev,
                                                        const EndpointConfig& config,
                                                        SharedMatch* shared = nullptr);
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  ~Engine();

  // Cold path (rdm.h says what each does).
  Address address() const;
  const EndpointConfig& config() const { return ctx.config; }
  uint32_t max_segment() const { return wire::MaxDataPayload(ctx.max_datagram); }
  absl::StatusOr<PeerId> InsertPeer(const Address& addr);
  absl::Status RemovePeer(PeerId id);
  // Before RemovePeer: queues an ACK for what was consumed from the peer
  // and not acknowledged yet; true if there is one (the caller flushes).
  bool OweFinalAck(PeerId id);
  std::optional<Address> PeerAddress(PeerId id) const;
  std::optional<PeerStats> peer_stats(PeerId id) const;
  std::optional<PeerCounters> peer_counters(PeerId id) const;
  // Every peer, in slot order, into *out (cleared first; its capacity kept).
  void SnapshotPeers(std::vector<PeerSnapshot>* out) const;
  absl::StatusOr<uint64_t> RegisterRegion(const RegionRequest& r) {
    return rma.RegisterRegion(r);
  }
  absl::Status DeregisterRegion(uint64_t key) { return rma.DeregisterRegion(key); }
  absl::Status SetDscp(uint8_t dscp);
  void SetMinMultiRecv(size_t bytes) { messaging.SetMinMultiRecv(bytes); }
  size_t min_multi_recv() const { return messaging.min_multi_recv(); }
  uint32_t SendSlotsFree() const { return ops.user_free(); }
  uint32_t RecvSlotsFree() const { return messaging.RecvSlotsFree(); }
  const Counters& counters() const { return ctx.counters; }
  Counters& mutable_counters() { return ctx.counters; }

  // Hot path. The time for everything until the next SetNow.
  void SetNow(uint64_t now_ns) { ctx.now = now_ns; }
  uint64_t now() const { return ctx.now; }
  Result PostSend(const SendRequest& r);
  Result PostRecv(const RecvRequest& r);
  Result PostWrite(const RmaRequest& r);
  Result PostRead(const RmaRequest& r);
  Result PostAtomic(const AtomicRequest& r);
  bool CancelRecv(void* context, PeerId only = kAnyPeer) {
    return messaging.CancelRecv(context, only);
  }
  size_t CancelRecvs(PeerId only) { return messaging.CancelRecvs(only); }
  // Takes the packets; those it does not hold go to released().
  void HandleRx(absl::Span<driver::Packet* const> pkts);
  // Delayed ACKs, retransmit timers, RNR retries, handshake retries, probes
  // and peer timeouts. Inline: a pass with nothing due (most) ends at the
  // compare, without RunDueTimers' frame.
  void RunTimers() {
    if (ctx.now >= ctx.next_timer_ns) RunDueTimers();
  }
  bool HasTxWork() const { return ctx.queued_peers() > 0 || session.HasResets(); }
  // Something only a later pass finishes (rdm.h, Unfinished): a peer busy
  // or owed a delayed ACK, an ACK deferred, a frame to build.
  bool Unfinished() const { return reliability.AnyBusy() || HasDeferredAcks() || HasTxWork(); }
  // ACKs deferred to the owner's next call (defer_requested_acks): due now.
  bool HasDeferredAcks() const { return reliability.HasDeferredAcks(); }
  void ReleaseDeferredAcks() {
    if (reliability.HasDeferredAcks()) reliability.ReleaseDeferredAcks();
  }
  // Those that have waited deferred_ack_hold_ns for a reply (a pass).
  void ReleaseHeldDeferredAcks() {
    if (reliability.HasDeferredAcks()) reliability.ReleaseHeldDeferredAcks();
  }
  // Builds frames into bufs[0, n) (setting their len) and returns n.
  size_t BuildTx(absl::Span<driver::Packet* const> bufs);
  // Packets to give back to the device's pool, then ClearReleased.
  absl::Span<driver::Packet* const> released() const { return ctx.released(); }
  void ClearReleased() { ctx.ClearReleased(); }
  // Hands every held packet to released() (before closing).
  void ReleaseAll() { reliability.ReleaseAll(); }

  size_t PollCompletions(absl::Span<Completion> out) { return completions.Poll(out); }
  size_t PollErrors(absl::Span<ErrorCompletion> out) { return completions.PollErrors(out); }
  size_t PollPeerFailures(absl::Span<PeerFailure> out);

 private:
  static constexpr uint32_t kPacketsPerTurn = 16;

  Engine(const DeviceParams& dev, const EndpointConfig& config, uint32_t max_datagram,
         uint32_t ring_size, uint32_t held_budget, uint64_t seed, uint32_t incarnation,
         SharedMatch* shared);

  // After every call that may free receive resources: refused peers retry.
  void AfterFreeing() {
    if (ctx.TakeFreed()) reliability.RetryRefused();
  }

  // The dispatcher: the one switch over packet types.
  void HandleFrame(driver::Packet* pkt);
  // Handshakes (PROTOCOL.md, "Sessions"): same_host: the frame came with
  // kRxSameHost (which key authenticates it).
  // HELLO, HELLO_ACK, COOKIE and RESET, to the handler below for each;
  // counts the checks they failed for the peer (PeerCounters).
  void OnHandshake(uint32_t pi, const wire::View& v, bool same_host);
  void OnHello(uint32_t pi, const wire::View& v, bool same_host);
  void OnHelloAck(uint32_t pi, const wire::View& v, bool same_host);
  void OnCookie(uint32_t pi, const wire::View& v, bool same_host);
  // A proven HELLO or HELLO_ACK: what it means for the session, acted on.
  // False: stale.
  bool TakeHandshake(uint32_t pi, const wire::View& v);
  // A slot for the source of a proven HELLO, evicting the oldest
  // unconfirmed learned peer if learned ones fill their share; kNone: none.
  uint32_t AddLearned(const wire::View& v);
  // Room for an application's insert: evicts a learned peer (unconfirmed
  // first, then idle, then any); false if there is none.
  bool EvictLearnedForInsert();
  // The peer goes: its operations fail with err (why), its slot is freed.
  void DropPeer(uint32_t pi, int err, const char* why);
  void OnReset(uint32_t pi, const wire::View& v, bool same_host);
  void OnAck(uint32_t pi, const wire::View& v);
  // DATA and RMA: true if the packet is held (out of order).
  bool OnSequenced(uint32_t pi, const wire::View& v, driver::Packet* pkt);
  // A sequenced packet in order, to the stage it is for. False: refused.
  bool Consume(uint32_t pi, wire::PacketType type, const wire::MsgFields& m,
               const wire::RmaFields& r, absl::Span<const uint8_t> payload);

  // Peer pi's timer fired: its delayed ACK, RNR retry, pacing, tail-loss
  // probe, RTO, HELLO retry, liveness probe and timeout, each if due; its
  // timer is armed again at the earliest still ahead.
  void RunDueTimers();
  void RunPeerTimers(uint32_t pi);
  // Something of ours to or from pi is unfinished (its silence times it out).
  bool Busy(uint32_t pi) const;
  bool HasWork(uint32_t pi) const {
    return session.HasWork(pi) || reliability.HasWork(pi);
  }
  size_t BuildForPeer(uint32_t pi, absl::Span<driver::Packet* const> bufs);

  // Fails what was sent to the peer's session (everything unless
  // keep_unsent, which keeps operations not yet started for the next
  // session) and forgets the session.
  void FailPeer(uint32_t pi, int err, const char* why, bool keep_unsent);
  // Ends op o (in no list) because its session ended (kOpTraits' on_fail).
  void FailOp(uint32_t o, int err, const char* why);
  // A busy peer's silence (PROTOCOL.md, "Peer liveness"): the device is
  // asked whether its process lives once per LivenessInterval of silence;
  // gone: it fails at once (ECONNRESET); alive: never timed out; otherwise
  // timed out (ETIMEDOUT) after peer_timeout_ns, or silent_peer_timeout_ns
  // when the device would have seen its death. Lowers *next to its
  // deadlines.
  void CheckSilence(uint32_t pi, uint64_t* next);
  uint64_t LivenessInterval() const;
  // Peer pi is given up (err: ETIMEDOUT, ECONNRESET): its directed receives
  // fail too, and the failure is queued for PollPeerFailures (at most
  // max_peers; the oldest go first).
  void PeerGone(uint32_t pi, int err, const char* why);

  std::deque<PeerFailure> peer_failures_;
  // HandleFrame's parsed packet: only the fields of its type are its own
  // (wire::Parse), the rest are an earlier packet's.
  wire::View rx_view_;
};

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_ENGINE_H_
