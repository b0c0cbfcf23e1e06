// The RDM protocol engine: reliable, ordered, exactly-once messages and
// tagged messages between endpoints over a lossy datagram device. It never
// calls the device: received packets are handed in, frames are built into
// buffers handed in, and packets it is done with are handed back, a burst at
// a time (Endpoint<QP> in endpoint.h does the device calls). Nothing here
// allocates after Create.
#ifndef BYPASS_FABRIC_RDM_ENGINE_H_
#define BYPASS_FABRIC_RDM_ENGINE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "driver/device.h"
#include "driver/packet.h"
#include "fabric/rdm/completion_queue.h"
#include "fabric/rdm/config.h"
#include "fabric/rdm/index_list.h"
#include "fabric/rdm/matching.h"
#include "fabric/rdm/peer.h"
#include "fabric/rdm/peer_table.h"
#include "fabric/rdm/types.h"
#include "fabric/rdm/wire.h"

namespace bypass::rdm {

// What the engine needs to know of the device queue it runs on.
struct DeviceParams {
  driver::MacAddress mac;
  driver::Ipv4Address ip;
  uint32_t mtu = 1500;
  uint32_t frame_capacity = 0;  // bytes a TX buffer holds; 0: mtu + 14
  uint32_t pool_capacity = 0;   // buffers of the queue's pool (bounds held packets)
};

// The protocol state machine of one endpoint. Single-threaded: one owner
// calls everything (FI_THREAD_DOMAIN).
class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const DeviceParams& dev,
                                                        const EndpointConfig& config);
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  ~Engine();

  // Cold path.
  Address address() const;
  // Adds (or finds) the peer at addr's IPv4 and UDP port. A non-zero
  // addr.incarnation is the one expected; if the peer has restarted since,
  // the first contact finds out and goes on with the new one. An all-zero
  // addr.mac is learned: packets go to the broadcast MAC until the peer's
  // HELLO or HELLO_ACK passes every check (PROTOCOL.md, Addressing).
  absl::StatusOr<PeerId> InsertPeer(const Address& addr);
  std::optional<Address> PeerAddress(PeerId id) const;
  // Forgets a peer (fi_av_remove): its send operations, the message being
  // received from it and the receives directed to it complete in error
  // (ECANCELED); its unexpected messages are dropped; its session ends
  // without a word to it (a later InsertPeer of it starts a new session,
  // which resets the old one at its end). The slot is reused by a later
  // InsertPeer under a new id: the removed id stays invalid (post calls
  // return kInvalid, PeerAddress and peer_stats nullopt, RemovePeer
  // NotFound) until the slot has been reused 4095 times (PeerTable).
  absl::Status RemovePeer(PeerId id);
  // Regions peers may read and write; the key is the one to give them.
  absl::StatusOr<uint64_t> RegisterRegion(const RegionRequest& r);
  // NotFound for an unknown key. Accesses arriving later fail at the initiator.
  absl::Status DeregisterRegion(uint64_t key);
  // DSCP (0..63) for the IPv4 header of every packet sent from now on.
  absl::Status SetDscp(uint8_t dscp);
  std::optional<PeerStats> peer_stats(PeerId id) const;
  const Counters& counters() const { return counters_; }
  Counters& mutable_counters() { return counters_; }
  const EndpointConfig& config() const { return config_; }
  // Payload bytes of one DATA packet to a peer with the same MTU.
  uint32_t max_segment() const { return wire::MaxDataPayload(max_datagram_); }

  // Hot path. The time for everything until the next SetNow.
  void SetNow(uint64_t now_ns) { now_ = now_ns; }
  uint64_t now() const { return now_; }
  Result PostSend(const SendRequest& r);
  Result PostRecv(const RecvRequest& r);
  // RMA (fi_rma(3)). Errors of the target (unknown key, missing access
  // right, out of the region) complete the operation in error here and
  // touch nothing there.
  Result PostWrite(const RmaRequest& r);
  Result PostRead(const RmaRequest& r);
  // Cancels the posted receive with this context (fi_cancel): an error
  // completion with ECANCELED. False when there is none to cancel.
  bool CancelRecv(void* context);
  // Free send operation and receive slots (fi_tx_size_left, fi_rx_size_left).
  uint32_t SendSlotsFree() const;
  uint32_t RecvSlotsFree() const;
  // FI_OPT_MIN_MULTI_RECV: a multi-receive buffer with less left is released.
  void SetMinMultiRecv(size_t bytes);
  size_t min_multi_recv() const;
  // Takes the packets; those it does not hold go to released().
  void HandleRx(absl::Span<driver::Packet* const> pkts);
  // Delayed ACKs, retransmit timers, RNR retries, handshake retries, peer timeouts.
  void RunTimers();
  bool HasTxWork() const { return work_count_ > 0 || reset_count_ > 0; }
  // Builds frames into bufs[0, n) (setting their len) and returns n.
  size_t BuildTx(absl::Span<driver::Packet* const> bufs);
  // Packets to give back to the device's pool, then ClearReleased.
  absl::Span<driver::Packet* const> released() const { return {released_.get(), released_count_}; }
  void ClearReleased() { released_count_ = 0; }
  // Hands every held packet to released() (before closing).
  void ReleaseAll();

  size_t PollCompletions(absl::Span<Completion> out) { return cq_.Poll(out); }
  size_t PollErrors(absl::Span<ErrorCompletion> out) { return cq_.PollErrors(out); }

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
  static constexpr uint32_t kResetCacheSize = 16;
  static constexpr uint32_t kPacketsPerTurn = 16;

  Engine(const DeviceParams& dev, const EndpointConfig& config, uint32_t max_datagram,
         uint32_t ring_size, uint32_t held_budget, uint64_t seed, uint32_t incarnation);

  // engine.cc: setup, posting, completions.
  uint64_t Random();
  void InitPeer(uint32_t pi, const driver::MacAddress& mac, driver::Ipv4Address ip, uint16_t port,
                uint32_t incarnation);
  void NewTxSession(Peer& p);
  void Enqueue(uint32_t pi);
  void ArmTimer(uint64_t when) { next_timer_ns_ = when < next_timer_ns_ ? when : next_timer_ns_; }
  void Release(driver::Packet* pkt);
  void ResourcesFreed();
  void CompleteSend(uint32_t o);
  void FailSend(uint32_t o, int err, const char* why);
  void CompleteRecv(PeerId src, const RecvRequest& r, const RxMessage& m, uint64_t extra_flags = 0);
  void DeliverUnexpected(uint32_t e, const RecvRequest& r);
  // The error record of a send, to the error queue; the op stays.
  void ReportSendError(uint32_t o, int err, const char* why);

  // engine_recv.cc: multi-receive, peek/claim/discard, cancel.
  Result PostMulti(const RecvRequest& r);
  Result Peek(const RecvRequest& r);
  Result Claim(const RecvRequest& r);
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
  RecvRequest EndRecvSlot(uint32_t slot, const RxMessage& m, uint64_t* flags);
  // Completes an unqueued receive with ECANCELED (a multi-receive with
  // messages still arriving only stops taking more).
  void CancelSlot(uint32_t slot, const char* why);
  // The receiver refused the message at snd_una for rnr_give_up_ns: fails it
  // and sends what is in flight of it as abandoned. False if it cannot.
  bool GiveUpRefused(uint32_t pi, Peer& p);
  void NoteUnexpectedDepth();
  void FormatPeerError(ErrorCompletion* ec, uint32_t pi, const char* what) const;

  // engine_rx.cc: the dispatcher and the DATA path.
  void HandleFrame(driver::Packet* pkt);
  bool OnData(uint32_t pi, const wire::View& v, driver::Packet* pkt);
  bool HoldOutOfOrder(uint32_t pi, Peer& p, const wire::View& v, driver::Packet* pkt);
  bool ConsumeData(uint32_t pi, Peer& p, const wire::MsgFields& m,
                   absl::Span<const uint8_t> payload);
  void DrainHeld(uint32_t pi, Peer& p);
  void Refuse(uint32_t pi, Peer& p);
  void AfterReceive(uint32_t pi, Peer& p, uint16_t flags);
  void AbortRxMessage(uint32_t pi, Peer& p, int err, const char* why);

  // engine_ack.cc: acknowledgements, as the sender sees them.
  void OnAckPacket(uint32_t pi, const wire::View& v);
  void OnAck(uint32_t pi, Peer& p, const wire::Common& c, const wire::AckFields* sack);
  void ProcessSack(uint32_t pi, Peer& p, Psn ack, const wire::AckFields& sack);
  void CompleteAckedOps(Peer& p);

  // engine_session.cc: handshakes, incarnations, RESETs.
  void OnHello(uint32_t pi, const wire::View& v);
  void OnHelloAck(uint32_t pi, const wire::View& v);
  void OnReset(uint32_t pi, const wire::View& v);
  // A HELLO or HELLO_ACK: a new incarnation or session of the peer, if it is one.
  bool SessionFromHello(uint32_t pi, const wire::View& v);
  void AcceptSession(Peer& p, const wire::View& v);
  void MaybeEstablished(Peer& p);
  void QueueReset(const wire::View& v, wire::ResetReason reason);

  // engine_tx.cc: building packets.
  bool HasWork(const Peer& p) const;
  size_t BuildForPeer(Peer& p, absl::Span<driver::Packet* const> bufs);
  wire::Common CommonFor(Peer& p, wire::PacketType type, uint16_t flags);
  uint16_t Grant(const Peer& p) const;
  void NoteAckSent(Peer& p, bool standalone);
  void BuildHello(Peer& p, wire::PacketType type, driver::Packet* pkt);
  void BuildAckPacket(Peer& p, driver::Packet* pkt);
  void BuildSegment(Peer& p, driver::Packet* pkt);
  void BuildRetransmit(Peer& p, Psn psn, driver::Packet* pkt);
  void WriteData(Peer& p, Psn psn, const TxEntry& e, uint16_t flags, driver::Packet* pkt);
  void BuildResetPacket(const PendingReset& r, driver::Packet* pkt);

  // engine_rma.cc: RMA, rendezvous and the engine's own answers.
  // A region peers may access.
  struct Region {
    bool in_use = false;
    uint32_t generation = 0;  // +1 per registration of the slot
    uint8_t* addr = nullptr;
    uint64_t len = 0;
    uint32_t access = 0;
    uint64_t base = 0;
    uint64_t key = 0;
    void* context = nullptr;
    uint32_t reads = 0;  // READ_DATA answers streaming from it
  };
  bool IsUserOp(uint32_t o) const { return o < config_.max_send_ops; }
  // An op's name on the wire (RmaHeader::rma_id): its slot in the low bits
  // (at most 2^21 slots: config.cc), the slot's generation above, so that an
  // answer to an op that ended is not taken for one that reuses its slot.
  static constexpr uint32_t kRmaIdSlotBits = 21;
  uint32_t RmaId(uint32_t o) const { return uint32_t{op_gen_[o]} << kRmaIdSlotBits | o; }
  // The op an answer names, if it is still that op's; else kNone.
  uint32_t RmaOp(uint32_t rma_id) const {
    const uint32_t o = rma_id & ((1u << kRmaIdSlotBits) - 1);
    if (o >= uint64_t{config_.max_send_ops} + config_.max_rma_ops) return kNone;
    return rma_id >> kRmaIdSlotBits == op_gen_[o] ? o : kNone;
  }
  // The next op to send is the user's and waits for a rendezvous answer.
  bool CursorHeld(const Peer& p) const {
    return p.rndv_hold && IsUserOp(p.cursor_op) && !ops_[p.cursor_op].pulled;
  }
  // An engine-owned op slot (kNone when all max_rma_ops are busy).
  uint32_t AllocCtl();
  // Pulls may hold at most this many engine ops: the rest stay for answers
  // to peers' requests, which always drain (PROTOCOL.md, Rendezvous).
  uint32_t PullCap() const { return config_.max_rma_ops - std::max(1u, config_.max_rma_ops / 4); }
  bool CanPull() const { return !free_ctl_.empty() && pulls_ < PullCap(); }
  void FreeOp(uint32_t o);
  // Queues op o (kind and fields set) at the tail of the peer's stream.
  void QueueOp(uint32_t pi, uint32_t o);
  // A sequenced packet, in order: DATA to ConsumeData, the others here.
  // False: refused (not consumed; the sender retries after an RNR).
  bool ConsumeSequenced(uint32_t pi, Peer& p, wire::PacketType type, const wire::MsgFields& m,
                        const wire::RmaFields& r, absl::Span<const uint8_t> payload);
  bool ConsumeRts(uint32_t pi, Peer& p, const wire::MsgFields& m);
  bool ConsumeWrite(uint32_t pi, Peer& p, const wire::RmaFields& r,
                    absl::Span<const uint8_t> payload);
  bool ConsumeReadReq(uint32_t pi, Peer& p, const wire::RmaFields& r);
  // False: refused (no op to answer a pull naming no message with).
  bool ConsumePullReq(uint32_t pi, Peer& p, const wire::RmaFields& r);
  void ConsumeReadData(uint32_t pi, Peer& p, const wire::RmaFields& r,
                       absl::Span<const uint8_t> payload);
  void ConsumeResponse(uint32_t pi, Peer& p, const wire::RmaFields& r);
  // Starts pulling rendezvous message (msg_id, fields) from peer pi into
  // receive slot `slot`. REQUIRES: a free engine op (AllocCtl).
  void StartPull(uint32_t pi, uint32_t o, uint32_t slot, uint32_t msg_id, uint64_t total,
                 uint16_t msg_flags, uint64_t tag, uint64_t data);
  // PostRecv found rendezvous message e unexpected: pull it into r.
  Result PullUnexpected(uint32_t e, const RecvRequest& r);
  // A queued op's packets are all acknowledged: complete it, free it, or
  // park it in Peer::waiting for the peer's answer.
  void OpAcked(Peer& p, uint32_t o);
  // Ends op o (in no list) in error: its error completion, if any.
  void FailOp(uint32_t o, int err, const char* why);
  void CompleteRma(uint32_t o);
  uint32_t SegmentMax(const Peer& p, const SendOp& op) const;
  void WriteRmaPacket(Peer& p, Psn psn, const TxEntry& e, uint16_t flags, driver::Packet* pkt);
  wire::RmaStatus CheckAccess(uint64_t key, uint64_t addr, uint64_t len, uint32_t access,
                              uint32_t* region) const;
  // region_index_: the registered region with this key (kNone), and upkeep.
  uint32_t FindRegion(uint64_t key) const;
  void IndexRegion(uint32_t i);
  void UnindexRegion(uint32_t i);
  void RunProbe(uint32_t pi, Peer& p, uint64_t* next);
  uint64_t RxSession(const Peer& p) const {
    return uint64_t{p.addr.incarnation} << 32 | p.rx_isn.value();
  }

  // engine_timers.cc: timers and tearing sessions down.
  void OnRto(uint32_t pi, Peer& p);
  void ArmTailProbe(Peer& p);
  void OnTailProbe(uint32_t pi, Peer& p);
  void MarkRetx(Peer& p, Psn psn, bool fast);
  // Fails what was sent to the peer's session (everything unless
  // keep_unsent, which keeps operations not yet started for the next
  // session) and forgets the session.
  void FailPeer(uint32_t pi, int err, const char* why, bool keep_unsent);

  const EndpointConfig config_;
  const DeviceParams dev_;
  const uint32_t max_datagram_;
  const uint32_t held_budget_;
  const uint32_t incarnation_;
  uint64_t rng_state_;
  uint64_t now_ = 0;
  uint64_t next_timer_ns_ = UINT64_MAX;
  uint8_t dscp_ = 0;

  PeerTable peers_;
  std::unique_ptr<SendOp[]> ops_;  // max_send_ops user ops, then max_rma_ops engine ops
  // Per op slot, +1 (mod 2^11) each time an op in it ends (FreeOp): RmaId.
  std::unique_ptr<uint16_t[]> op_gen_;
  FreeSlots free_ops_;
  FreeSlots free_ctl_;  // engine ops, numbered from max_send_ops
  uint32_t pulls_ = 0;  // engine ops that are kPull
  std::unique_ptr<Region[]> regions_;
  FreeSlots free_regions_;
  // Key -> region slot, open addressing with linear probing (kNone: empty),
  // at least twice max_regions entries: a peer's access costs one probe or
  // a few, not a scan of max_regions.
  std::unique_ptr<uint32_t[]> region_index_;
  uint32_t region_index_mask_;
  std::unique_ptr<uint8_t[]> inject_arena_;
  MatchQueues matcher_;
  CompletionQueue cq_;

  std::unique_ptr<uint32_t[]> work_;  // FIFO of peers with something to send
  uint32_t work_head_ = 0;
  uint32_t work_count_ = 0;

  PendingReset resets_[kMaxPendingResets];
  uint32_t reset_head_ = 0;
  uint32_t reset_count_ = 0;
  ResetSent reset_cache_[kResetCacheSize];

  std::unique_ptr<driver::Packet*[]> released_;
  uint32_t released_capacity_;
  uint32_t released_count_ = 0;
  uint32_t held_total_ = 0;
  uint32_t refused_peers_ = 0;

  Counters counters_;
};

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_ENGINE_H_
