// The engine's public vocabulary: addresses, peer handles, the hot-path
// result codes, completion records and counters.
#ifndef BYPASS_FABRIC_RDM_TYPES_H_
#define BYPASS_FABRIC_RDM_TYPES_H_

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "driver/device.h"

namespace bypass::rdm {

// An endpoint's address: where its packets go, and which life of it this is.
struct Address {
  driver::MacAddress mac;
  driver::Ipv4Address ip;
  uint16_t udp_port = 0;
  uint32_t incarnation = 0;  // random per endpoint; 0 = not known

  // "10.77.0.1:5000/02:00:00:00:00:01#0x1234abcd".
  std::string ToString() const;
  friend bool operator==(const Address&, const Address&) = default;
};

// A peer of one endpoint (libfabric's fi_addr_t), returned by InsertPeer or
// reported as a message's source: its slot in the endpoint's peer table in
// the low kSlotBits, and the slot's generation above them (a removed peer's
// id never names the peer that reuses its slot).
struct PeerId {
  static constexpr uint32_t kSlotBits = 20;  // max_peers is at most 2^20
  static constexpr uint32_t kSlotMask = (1u << kSlotBits) - 1;
  uint32_t value = UINT32_MAX;
  // 0 .. max_peers - 1: dense, for tables indexed by peer.
  uint32_t slot() const { return value & kSlotMask; }
  friend bool operator==(const PeerId&, const PeerId&) = default;
};
// Receive from any source (FI_ADDR_UNSPEC).
inline constexpr PeerId kAnyPeer{UINT32_MAX};

// The wire format's version (PROTOCOL.md; fi_info's protocol_version).
inline constexpr uint8_t kWireVersion = 7;

// What a post call did: 0 or a negative errno, so the fi_* facade returns it
// as is (-FI_EAGAIN == -EAGAIN).
enum class Result : int32_t {
  kOk = 0,
  kAgain = -EAGAIN,      // local resources full: progress, then retry
  kInvalid = -EINVAL,    // bad argument (unknown peer, null buffer, ...)
  kTooLong = -EMSGSIZE,  // longer than max_msg_size or inject_size
};
const char* ResultName(Result r);

// Bits of SendRequest::flags.
inline constexpr uint32_t kSendTagged = 1u << 0;  // tsend: tag is meaningful
inline constexpr uint32_t kSendRemoteData =
    1u << 1;  // senddata: data goes to the receiver's completion
inline constexpr uint32_t kSendInject = 1u << 2;  // inject: buf is copied at once; no completion
// Buffered (libfabric's FI_INJECT_COMPLETE): buf, at most inject_size
// bytes, is copied at once and the send's completion is queued at once; the
// engine still delivers it reliably. A failure after that is reported like
// an inject's: context null, flagged kCompAfterCompletion.
inline constexpr uint32_t kSendBuffered = 1u << 3;
// The caller will wait for this send's completion, perhaps without
// progressing anything else meanwhile: its last packet asks the receiver to
// acknowledge at once (ACK_REQ) rather than after ack_delay_ns, so that
// the completion does not wait on the peer's next pass. (A receiver that
// stops progressing as soon as it has a message would otherwise leave its
// sender waiting; without the flag the ACK rides on the next packet back.)
inline constexpr uint32_t kSendAckNow = 1u << 4;
// More sends follow at once (libfabric's FI_MORE): this one waits to go
// with them, so that small messages to one peer share a packet (a bundle:
// PROTOCOL.md, "Bundles"). It goes at the next send without the flag, or
// the next Progress, whichever is first.
inline constexpr uint32_t kSendMore = 1u << 5;

// One send of any kind (send, tsend, senddata, inject, ...): every variant
// funnels into this and one engine call.
struct SendRequest {
  PeerId dest;
  const void* buf = nullptr;  // REQUIRES (without kSendInject, kSendBuffered): valid until the completion
  size_t len = 0;
  void* context = nullptr;
  uint64_t tag = 0;
  uint64_t data = 0;
  uint32_t flags = 0;  // SendFlag bits
};

// Bits of RecvRequest::flags (libfabric's FI_MULTI_RECV, FI_PEEK, FI_CLAIM,
// FI_DISCARD; see fi_msg(3) and fi_tagged(3)).
// One buffer takes many messages, each at the next free offset; released
// (a completion with kCompMultiRecv) once less than min_multi_recv is left.
inline constexpr uint32_t kRecvMulti = 1u << 0;
// Look for a matching message that has arrived, without receiving it: a
// completion describing it (len, tag, data, source; buf null), or an error
// completion with ENOMSG. With kRecvClaim it is also reserved for `context`.
inline constexpr uint32_t kRecvPeek = 1u << 1;
// Without kRecvPeek: receive the message an earlier peek reserved for
// `context` (source and tag are ignored).
inline constexpr uint32_t kRecvClaim = 1u << 2;
// With kRecvPeek or kRecvClaim: drop the message instead of receiving it
// (a completion with len 0).
inline constexpr uint32_t kRecvDiscard = 1u << 3;

// One posted receive (recv or trecv).
struct RecvRequest {
  PeerId source = kAnyPeer;  // directed receive, or any source
  void* buf = nullptr;       // REQUIRES: valid until the completion
  size_t len = 0;
  void* context = nullptr;
  bool tagged = false;
  uint64_t tag = 0;
  uint64_t ignore = 0;  // tag bits that need not match
  uint32_t flags = 0;   // RecvFlag bits
};

// Remote memory access (fi_rma(3)).
// Bits of RegionRequest::access: what a peer may do to the region.
inline constexpr uint32_t kAccessRemoteRead = 1u << 0;
inline constexpr uint32_t kAccessRemoteWrite = 1u << 1;

// A region of local memory peers may read or write.
struct RegionRequest {
  void* addr = nullptr;  // REQUIRES: valid until deregistered
  size_t len = 0;
  uint32_t access = 0;  // Access bits
  // A peer's address a falls at addr + (a - base): base = addr for virtual
  // addresses (FI_MR_VIRT_ADDR), 0 for offsets into the region.
  uint64_t base = 0;
  // The key peers must present; unset: RandomRegionKey() (one no live
  // region has).
  std::optional<uint64_t> key = std::nullopt;
  // Reported with the completion of a peer's access to the region (a write
  // carrying CQ data; every write and read with EndpointConfig::rma_events).
  void* context = nullptr;
};

// A region key nobody can guess from the keys they have seen: 64 bits from
// the kernel's CSPRNG (libsodium's randombytes_buf, getrandom underneath),
// never 0. Callers draw again while it is a live region's key.
uint64_t RandomRegionKey();

// Bits of RmaRequest::flags.
inline constexpr uint32_t kRmaRemoteData = 1u << 0;  // writedata: completes at the target too
inline constexpr uint32_t kRmaInject = 1u << 1;      // inject write: buf copied, no completion

// One RMA read or write: len bytes between buf and the peer's region `key`
// at its address `addr`.
struct RmaRequest {
  PeerId dest;
  void* buf = nullptr;  // REQUIRES (without kRmaInject): valid until the completion
  size_t len = 0;
  uint64_t addr = 0;  // in the peer's region, as it registered it (see RegionRequest::base)
  uint64_t key = 0;
  void* context = nullptr;
  uint64_t data = 0;  // remote CQ data (with kRmaRemoteData)
  uint32_t flags = 0;  // RmaFlag bits
};

// Atomic operations (fi_atomic(3)), numbered as libfabric numbers enum
// fi_op; atomic.h says which pairs with a type are defined and what each does.
enum class AtomicOp : uint8_t {
  kMin, kMax, kSum, kProd, kLor, kLand, kBor, kBand, kLxor, kBxor,
  kRead, kWrite,
  kCswap, kCswapNe, kCswapLe, kCswapLt, kCswapGe, kCswapGt, kMswap,
};
inline constexpr uint32_t kAtomicOps = 19;
// Atomic datatypes, numbered as enum fi_datatype (the 128-bit integers
// after FI_LONG_DOUBLE_COMPLEX, as libfabric 1.17 adds them). Values
// travel in the host's byte order: both ends must share the layout (the
// same ABI: x86-64's 16-byte long double, etc.).
enum class AtomicType : uint8_t {
  kInt8, kUint8, kInt16, kUint16, kInt32, kUint32, kInt64, kUint64,
  kFloat, kDouble, kFloatComplex, kDoubleComplex, kLongDouble, kLongDoubleComplex,
  kInt128, kUint128,
};
inline constexpr uint32_t kAtomicTypes = 16;

// Bytes of one element of t (x86-64: long double 16, its complex 32).
uint32_t AtomicTypeSize(AtomicType t);
// Whether op is defined on t (atomic.cc): bitwise ops (BOR, BAND, BXOR)
// and MSWAP need an integer type; ordering ops (MIN, MAX, CSWAP_LE, _LT,
// _GE, _GT) a real one (not complex); the others take every type.
bool AtomicDefined(AtomicOp op, AtomicType t);
// Whether op compares (fi_compare_atomic: CSWAP..MSWAP: a compare operand,
// always fetching), and whether it takes no operand at all (ATOMIC_READ).
inline bool AtomicCompares(AtomicOp op) { return op >= AtomicOp::kCswap; }
// The most target bytes one atomic covers (count * AtomicTypeSize): its
// request, operands and compare operands, is one packet.
inline constexpr uint32_t kMaxAtomicBytes = 256;
// The bypass and RMA headers before an atomic's operands (wire.h checks it).
inline constexpr uint32_t kAtomicHeaderBytes = 84;
// The most elements of t one atomic of op carries when UDP payloads are at
// most max_datagram bytes (its operands, and compare operands, in one packet).
uint32_t AtomicMaxCount(AtomicOp op, AtomicType t, uint32_t max_datagram);

// Bits of AtomicRequest::flags.
inline constexpr uint32_t kAtomicInject = 1u << 0;  // no completion (operands are always copied)

// One atomic: op applied element-wise to `count` elements of `type` in the
// peer's region `key` at `addr`. Operands are copied when posted; `result`
// (fetching and compare atomics) receives the target's values from before
// the operation once it completes.
struct AtomicRequest {
  PeerId dest;
  AtomicOp op = AtomicOp::kSum;
  AtomicType type = AtomicType::kUint64;
  uint32_t count = 0;
  const void* operand = nullptr;  // count elements; unused (may be null) for kRead
  const void* compare = nullptr;  // compare atomics: count elements (MSWAP: the mask)
  void* result = nullptr;         // fetching and compare atomics: count elements; else null
  bool fetch = false;             // fetching form (fi_fetch_atomic); compare ops always fetch
  uint64_t addr = 0;
  uint64_t key = 0;
  void* context = nullptr;
  uint32_t flags = 0;  // AtomicFlag bits
};

// Bits of Completion::flags (the subset of libfabric's FI_* completion flags
// the engine reports; the facade maps them).
inline constexpr uint64_t kCompSend = 1u << 0;
inline constexpr uint64_t kCompRecv = 1u << 1;
inline constexpr uint64_t kCompMsg = 1u << 2;
inline constexpr uint64_t kCompTagged = 1u << 3;
inline constexpr uint64_t kCompRemoteData = 1u << 4;  // data holds the sender's remote CQ data
inline constexpr uint64_t kCompRma = 1u << 5;
inline constexpr uint64_t kCompRead = 1u << 6;         // an RMA read we issued
inline constexpr uint64_t kCompWrite = 1u << 7;        // an RMA write we issued
// A peer's write landed here: one with CQ data always (kCompRemoteData
// too), every one with EndpointConfig::rma_events.
inline constexpr uint64_t kCompRemoteWrite = 1u << 8;
inline constexpr uint64_t kCompMultiRecv = 1u << 9;    // the multi-receive buffer is released
// (Errors only.) An inject's or a buffered send's failure: the operation
// has no completion of its own (an inject) or has had it already (buffered):
// the error must not be reported as a second completion of it.
inline constexpr uint64_t kCompAfterCompletion = 1u << 10;
// A peer's read of a region here was answered (EndpointConfig::rma_events).
inline constexpr uint64_t kCompRemoteRead = 1u << 11;
// A datagram received through a multicast group (DatagramEndpoint::JoinGroup).
inline constexpr uint64_t kCompMulticast = 1u << 12;
inline constexpr uint64_t kCompAtomic = 1u << 13;  // with kCompRead/Write or kCompRemoteRead/Write

// One finished operation.
struct Completion {
  void* context = nullptr;
  uint64_t flags = 0;   // CompletionFlag bits
  size_t len = 0;       // bytes sent, or received into buf
  void* buf = nullptr;  // the receive buffer (receives only)
  uint64_t data = 0;    // remote CQ data (with kCompRemoteData)
  uint64_t tag = 0;     // the message's tag (tagged receives)
  PeerId source;        // the sender (receives)
};

// One operation that failed: the record it would have had, an errno and a
// one-line explanation.
struct ErrorCompletion {
  Completion op;
  int err = 0;             // positive errno: ECONNRESET, ETIMEDOUT, ETRUNC-like EMSGSIZE, ...
  uint64_t olen = 0;       // bytes that did not fit (truncation)
  char message[160] = {};  // e.g. "peer 10.77.0.2:5000 restarted ..."
};

// A peer given up (it stayed silent for peer_timeout with work pending):
// reported once per failure, beside its operations' errors.
struct PeerFailure {
  PeerId peer;
  int err = 0;             // ETIMEDOUT
  char message[160] = {};  // "peer 10.77.0.2:5000 (incarnation ..) did not answer ..."
};

// Counters for a person debugging loss; plain integers of the owning thread.
struct Counters {
  // Traffic.
  uint64_t tx_packets = 0;
  uint64_t tx_data_packets = 0;
  // Messages that went in a DATA packet with others (a bundle: PROTOCOL.md,
  // "Bundles"), every message of it counted.
  uint64_t tx_bundled_msgs = 0;
  uint64_t tx_acks = 0;          // standalone ACKs
  uint64_t rx_packets = 0;       // frames handed to the engine
  uint64_t rx_data_packets = 0;  // DATA accepted in order
  // DATA, RMA and ACK taken without a CRC: flagged UNCHECKED and came
  // through memory only (PROTOCOL.md, "Unchecked packets").
  uint64_t rx_unchecked = 0;
  // Loss recovery.
  uint64_t retransmits_fast = 0;     // on a SACK gap
  uint64_t retransmits_timeout = 0;  // by the retransmit timer
  uint64_t rto_expirations = 0;
  // RTOs that the next ACK showed needless: the packets sent before it had
  // arrived (a receiver descheduled, not a loss; PROTOCOL.md, Reliability).
  uint64_t rto_spurious = 0;
  uint64_t tail_probes = 0;  // tail-loss probes sent (also in retransmits_timeout)
  uint64_t duplicates_dropped = 0;  // DATA already received
  uint64_t out_of_window_dropped = 0;
  uint64_t reorder_buffer_full = 0;  // out-of-order DATA dropped: no room to hold it
  uint64_t out_of_order_held = 0;    // out-of-order DATA held for a gap before it
  // Rejected frames.
  uint64_t malformed_dropped = 0;   // failed the parser (not counting checksum)
  // CRC-32C (or IPv4 header) mismatch: corruption; or flagged UNCHECKED
  // but not through memory only.
  uint64_t checksum_dropped = 0;
  uint64_t not_for_us_dropped = 0;  // another IPv4 address or UDP port
  uint64_t auth_dropped = 0;        // auth key mismatch
  uint64_t stale_dropped = 0;       // from or to an incarnation that is not current
  uint64_t protocol_errors = 0;     // well-formed but impossible in the session
  uint64_t peer_table_full = 0;     // HELLO from a new peer with no slot for it
  // Handshake security (SECURITY.md): HELLO, HELLO_ACK, COOKIE or RESET
  // whose MAC failed (wrong key, or a key at one end only); HELLO_ACKs and
  // COOKIEs not echoing our nonce; COOKIEs sent, dropped for want of room,
  // and HELLOs whose echoed cookie was wrong or too old; RESETs that made
  // us probe the session (rather than end it); peers learned from the
  // network evicted to make room.
  uint64_t handshake_auth_failed = 0;
  uint64_t handshake_unproven = 0;
  uint64_t cookies_sent = 0;
  uint64_t cookies_dropped = 0;
  uint64_t cookie_rejected = 0;
  uint64_t resets_probed = 0;
  uint64_t learned_evicted = 0;
  // Flow control.
  uint64_t window_stalls = 0;  // a sender found the peer's window closed
  // Send rings allocated because every ring of the endpoint's pool was
  // taken (max_active_peers peers with packets in flight at once); each is
  // freed when its peer has nothing in flight (PROTOCOL.md, "Scale").
  uint64_t tx_rings_allocated = 0;
  // Congestion control (PROTOCOL.md, "Congestion control").
  uint64_t cwnd_stalls = 0;      // a sender found its congestion window full (once per filling)
  uint64_t cwnd_reductions = 0;  // congestion windows halved on a loss signal (once per round trip)
  uint64_t pacing_waits = 0;     // a sender waited for its next pacing time
  uint64_t rnr_sent = 0;       // arrivals refused: no receive resources
  uint64_t rnr_received = 0;   // our packets refused by the peer
  uint64_t rnr_give_ups = 0;   // sends failed: the peer refused them for rnr_give_up_ns
  uint64_t tx_no_buffer = 0;   // the device pool was empty
  uint64_t tx_ring_full = 0;   // TxBurst took fewer than offered
  // Sessions.
  uint64_t handshakes = 0;     // sessions established
  uint64_t peer_restarts = 0;  // a peer came back with a new incarnation
  uint64_t peer_resets = 0;    // sessions torn down by a RESET or re-HELLO
  uint64_t peer_timeouts = 0;  // sessions given up after peer_timeout
  uint64_t peers_dead = 0;     // sessions ended because the device said the process is gone
  uint64_t liveness_checks = 0;  // questions to the device about a silent peer (PeerAlive)
  uint64_t resets_sent = 0;
  uint64_t ops_failed = 0;  // operations completed in error by the above
  // Receive queues.
  uint64_t unexpected_msgs = 0;   // messages that arrived before their receive
  uint64_t unexpected_depth = 0;  // now queued
  uint64_t unexpected_depth_max = 0;
  uint64_t unexpected_bytes = 0;  // now buffered
  uint64_t truncated = 0;
  uint64_t inject_errors_dropped = 0;  // inject failures the error queue had no room for
  // RMA and rendezvous.
  uint64_t rma_ops = 0;            // RMA reads and writes posted here
  uint64_t rma_errors = 0;         // ... completed in error because the target refused them
  uint64_t rma_refused = 0;        // peers' accesses refused here (key, access, range)
  uint64_t rma_served = 0;         // peers' reads and writes applied here
  uint64_t rma_no_slot = 0;        // peers' requests refused (RNR) for lack of max_rma_ops
  uint64_t atomic_ops = 0;         // atomics posted here
  uint64_t atomic_served = 0;      // peers' atomics executed here (each exactly once)
  uint64_t rendezvous_sent = 0;    // messages sent by rendezvous
  uint64_t rendezvous_pulled = 0;  // rendezvous messages pulled into a receive here
  uint64_t rendezvous_lost = 0;    // ... waiting unexpected here when their sender's session ended
  // Reading in place (PROTOCOL.md): rendezvous messages of a process of
  // this host copied here straight from its memory (the receive completes
  // when the sender confirms), the attempts that failed and fell back to
  // the pull (not permitted, gone, bad address, short), and our messages
  // the receiver read that way (no READ_DATA sent).
  uint64_t rendezvous_copied_in_place = 0;
  uint64_t rendezvous_in_place_failed = 0;
  uint64_t rendezvous_read_by_peer = 0;
  // Of rendezvous_copied_in_place: completed at the read, the sender's
  // guard word vouching for the bytes (no wait for its RESPONSE).
  uint64_t rendezvous_in_place_vouched = 0;
  // The system calls that read them: the messages of one burst offered by
  // one process are read by one call (Messaging::FlushReads).
  uint64_t rendezvous_in_place_reads = 0;

  std::string ToString() const;
};

// What a DatagramEndpoint did; plain integers of the owning thread.
struct DatagramCounters {
  uint64_t sent = 0;
  uint64_t received = 0;            // datagrams delivered into a receive
  uint64_t truncated = 0;           // ... that did not fit it (an error completion)
  uint64_t no_receive_dropped = 0;  // arrived with no receive posted
  uint64_t not_for_us_dropped = 0;  // not an intact UDP frame to our IPv4 and port
  uint64_t tx_no_buffer = 0;        // the device pool was empty (kAgain)
  uint64_t tx_ring_full = 0;        // the TX ring took nothing (kAgain)
};

// What one peer's traffic did (Endpoint::peer_counters; the telemetry of
// fabric/stats): plain counters of the owning thread, kept from the peer's
// InsertPeer (or its learning from a HELLO) until RemovePeer, in 24 bytes
// beside the engine's state for it (PeerCountSlot in context.h: narrower
// fields whose carries go to a table of the few peers that wrapped one).
// The rare ones are 32-bit (they wrap).
// The endpoint's Counters hold the totals, including what no peer is known
// for (a stranger's HELLO, a frame from an unknown source).
struct PeerCounters {
  uint64_t tx_packets = 0;        // DATA, RMA and ACK frames built for it
  uint64_t rx_packets = 0;        // frames from its address and port handed to the engine
  uint32_t retransmits = 0;       // fast (SACK) and by the timer
  uint32_t duplicates = 0;        // its DATA we already had
  uint32_t out_of_order = 0;      // its DATA held for a gap before it
  uint32_t rnr_sent = 0;          // its arrivals we refused: no receive resources
  uint32_t rnr_received = 0;      // our packets it refused
  uint32_t credit_stalls = 0;     // our data waited for its window (once per closing)
  uint32_t handshake_failures = 0;  // its HELLO, HELLO_ACK, COOKIE or RESET failed a check
};

// The state of one peer, for tests and tools.
struct PeerStats {
  bool established = false;  // both directions know each other
  uint32_t incarnation = 0;
  uint64_t srtt_ns = 0;  // 0 until the first sample
  uint64_t rttvar_ns = 0;
  uint64_t rto_ns = 0;
  uint32_t inflight = 0;      // DATA packets sent and not yet acknowledged
  uint32_t send_window = 0;   // what the peer last granted
  uint32_t cwnd = 0;          // the congestion window (0: congestion control off for it)
  uint32_t queued_ops = 0;    // send operations not yet complete
  uint32_t waiting_ops = 0;   // ... and those sent, acknowledged, awaiting the peer's answer
  uint32_t held_packets = 0;  // out-of-order DATA from it we hold
  uint32_t unacked_packets = 0;  // DATA from it consumed and not yet acknowledged (a bundle
                                 // counts as its messages)
};

// One peer of an endpoint, for telemetry (rdm.h, EndpointSnapshot).
struct PeerSnapshot {
  PeerId id;
  Address address;
  PeerStats stats;        // RTT estimate, window, in flight
  PeerCounters counters;  // its traffic
};

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_TYPES_H_
