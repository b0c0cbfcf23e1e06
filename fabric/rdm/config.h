// How an endpoint is sized and tuned; everything the engine allocates is
// sized from here at creation.
#ifndef BYPASS_FABRIC_RDM_CONFIG_H_
#define BYPASS_FABRIC_RDM_CONFIG_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace bypass::rdm {

// The largest receive window: the reach of an ACK's SACK bitmap (wire.h).
inline constexpr uint32_t kMaxWindowPackets = 256;

class SharedRecvQueue;  // rdm.h
class ChunkPool;        // the engine's inside (matching.h)

// The buffer for messages that arrive before a receive asks for them,
// shared by the endpoints (and shared receive queues) given it
// (EndpointConfig::unexpected_pool): the fi layer makes one per domain, so
// that what a domain holds for messages nobody asked for yet is bounded by
// one budget, however many endpoints and peers it has. A message that finds
// no room is refused (RNR) and its sender retries with backoff while the
// receiver answers (PROTOCOL.md, Flow control): nothing is lost, and memory
// is bounded. Payloads take whole chunks of chunk_bytes; the arena is
// allocated at creation and pages become resident as chunks are first
// used. Thread-safe (its users may progress on different threads).
class UnexpectedPool {
 public:
  // InvalidArgument unless chunk_bytes is 64..16 MiB and bytes holds 1 to
  // 2^24 chunks.
  static absl::StatusOr<std::unique_ptr<UnexpectedPool>> Create(uint64_t bytes,
                                                                uint32_t chunk_bytes);
  UnexpectedPool(const UnexpectedPool&) = delete;
  UnexpectedPool& operator=(const UnexpectedPool&) = delete;
  ~UnexpectedPool();  // REQUIRES: no endpoint or queue uses it

  uint64_t capacity_bytes() const;  // the budget, in whole chunks
  uint64_t used_bytes() const;      // held now
  uint64_t peak_bytes() const;      // the most ever held at once

  // For the endpoints of fabric/rdm.
  ChunkPool& impl() { return *impl_; }

 private:
  explicit UnexpectedPool(std::unique_ptr<ChunkPool> impl);
  std::unique_ptr<ChunkPool> impl_;
};


// Endpoint settings. Times are nanoseconds of the injected clock.
struct EndpointConfig {
  uint16_t udp_port = 0;  // REQUIRED, non-zero
  uint32_t auth_key = 0;  // packets carrying another key are dropped
  // The shared secret that authenticates handshakes (SECURITY.md): never
  // sent; set by the provider from FI_BYPASS_AUTH_KEY_FILE, the domain's
  // auth_key, or the intra-host device's per-user key. Unset: handshakes
  // run unauthenticated.
  std::optional<std::array<uint8_t, 32>> handshake_key = std::nullopt;
  // The key for peers this host's processes reach through shared memory
  // (frames received with kRxSameHost, destinations the device reaches on
  // this host): the intra-host device always has one (a per-user random key,
  // SECURITY.md); unset: handshake_key is used for them too.
  std::optional<std::array<uint8_t, 32>> same_host_key = std::nullopt;
  // The incarnation and the PRNG for initial PSNs; unset: random (tests set
  // both for determinism).
  std::optional<uint32_t> incarnation = std::nullopt;
  std::optional<uint64_t> random_seed = std::nullopt;

  // Sizes, fixed at creation.
  uint32_t max_peers = 64;
  // max_active_peers as it applies.
  uint32_t ActivePeers() const {
    return max_active_peers == 0 || max_active_peers > max_peers ? max_peers : max_active_peers;
  }
  uint32_t max_send_ops = 256;  // sends (and injects) not yet acknowledged
  uint32_t max_posted_recvs = 256;
  uint32_t inject_size = 256;         // bytes an inject copies
  uint64_t max_msg_size = 16u << 20;  // up to 4 GiB (rendezvous carries large ones)
  // Messages longer than this go by rendezvous (a request to send, then the
  // receiver pulls the bytes straight into its receive); others eager.
  // Chosen by measurement: PROTOCOL.md, "Choosing the rendezvous threshold".
  uint64_t rendezvous_threshold = 128u << 10;
  // Rendezvous messages between processes of one host are copied once,
  // the receiver reading the sender's buffer in place (cross-memory attach,
  // on devices that deliver such frames with kRxSameHost; PROTOCOL.md,
  // "Reading in place"); false: always pulled.
  bool read_in_place = true;
  // With read_in_place, messages longer than this to a peer known to be on
  // this host (its frames came with kRxSameHost) go by rendezvous too: a
  // read in place costs a round trip and one copy, less than segmenting
  // and copying the bytes four times (PROTOCOL.md, "Reading in place").
  uint64_t in_place_threshold = 16u << 10;
  // RMA: regions registered at once, and the engine's own RMA work in flight
  // (answers to peers' reads and writes, pulls of rendezvous messages).
  // Reads and writes posted here take send operations (max_send_ops).
  // Pulls take at most max_rma_ops minus a quarter of it (at least one):
  // the rest stay for answers, so that pulls never starve them.
  uint32_t max_regions = 64;
  uint32_t max_rma_ops = 64;
  // Target-side RMA events (libfabric's FI_RMA_EVENT): every peer's write
  // applied here and every read of ours answered is a completion
  // (kCompRemoteWrite, kCompRemoteRead) with its region's context, once.
  // Without it only writes carrying CQ data complete here.
  bool rma_events = false;
  uint32_t window_packets = 128;      // receive window granted per peer, 1..256
  // Rings for peers with packets of ours in flight, or of theirs held out
  // of order: each such peer takes a ring of window_packets entries (about
  // 176 bytes per entry, both directions) from a pool of this many, made
  // at creation; an idle peer holds none. A sender that finds every pooled
  // ring taken gets one allocated, freed when it has nothing in flight (it
  // never waits: a ring comes back only when its peer acknowledges, and a
  // peer may stop progressing); an early packet that finds none is dropped
  // and comes again. 0, or more than max_peers: max_peers (a ring pair per
  // peer). The default, 64, is max_peers' default: such endpoints keep a
  // ring pair per peer, and larger ones (the fi default domain's 256, a
  // hub of 1024) 1.4 MB of rings at window 128 whatever their peer count
  // (PROTOCOL.md, "Scale").
  uint32_t max_active_peers = 64;
  // Out-of-order packets held across all peers; 0: half the device pool.
  uint32_t max_held_packets = 0;
  // Messages without a receive: at most this many eager ones queued (and
  // as many rendezvous requests, which hold no payload), their payloads in
  // a buffer of unexpected_bytes in chunks of unexpected_chunk_bytes, or in
  // unexpected_pool's when set (shared with other endpoints: one budget per
  // domain; REQUIRES: it outlives the endpoint). A message that finds no
  // room is refused (RNR) until a receive or freed room takes it.
  uint32_t max_unexpected_msgs = 128;
  uint64_t unexpected_bytes = 8u << 20;
  uint32_t unexpected_chunk_bytes = 4096;
  UnexpectedPool* unexpected_pool = nullptr;
  // Receives from a queue shared with other endpoints of the same Port
  // (libfabric's shared receive context, rdm.h): the endpoint matches what
  // arrives at it against the shared posted receives and queues what none
  // takes in the shared unexpected queue; the four sizes above then do not
  // apply (the queue's own do). REQUIRES: outlives the endpoint.
  SharedRecvQueue* shared_recv = nullptr;
  // A multi-receive buffer with less than this left is released
  // (FI_OPT_MIN_MULTI_RECV; Engine::SetMinMultiRecv changes it).
  uint64_t min_multi_recv = 1024;

  // Acknowledgement.
  uint64_t ack_delay_ns = 5'000;           // delayed ACK when no reply carries it
  uint32_t ack_every_packets = 16;         // or after this many packets (a bundle: its messages)
  // An ACK asked for (ACK_REQ: the sender waits for it, kSendAckNow) goes
  // at once (false), or (true) waits for the owner's next calls into the
  // endpoint: a packet it sends to that peer carries it (a reply: no
  // standalone ACK); Send, Write, Read and Atomic send it in the burst of
  // what they posted; Progress sends it once it has waited
  // deferred_ack_hold_ns (an application that reads its transmit queue,
  // then its receive queue, then replies, as fi_pingpong does, makes two
  // passes before its reply), and the delayed ACK (ack_delay_ns) bounds
  // the wait. Only for an owner that is sure to call again, or has
  // something that calls for it when the application stops (the fi
  // facade's progress thread): a receiver that never calls again would
  // leave its sender waiting. Not PostRecv (a receive is posted before the
  // reply it is for).
  bool defer_requested_acks = false;
  // How long Progress holds a deferred ACK for a reply to carry it, in
  // nanoseconds since the oldest was deferred; below ack_delay_ns (at or
  // above it, the delayed ACK sends it first). 0: Progress sends it at the
  // next call, whatever that call is.
  uint64_t deferred_ack_hold_ns = 2'000;
  uint32_t fast_retransmit_threshold = 3;  // SACKed packets past a hole that make it lost

  // Congestion control and pacing (PROTOCOL.md, "Congestion control"):
  // packets in flight to a peer stay within a congestion window as well as
  // its credit, and leave spread over the round trip. Only toward peers
  // whose frames do not come through memory this host's processes share
  // (kRxSameHost: the intra-host device, which never drops and where it
  // would only cost); false: the credit window alone, toward every peer.
  bool congestion_control = true;
  uint32_t cc_initial_window = 16;  // packets, 2..256: the first flight's

  // Retransmission (RFC 6298 with a floor) and giving up.
  uint64_t rto_initial_ns = 1'000'000;
  uint64_t rto_min_ns = 100'000;
  uint64_t rto_max_ns = 100'000'000;
  uint64_t rnr_retry_min_ns = 20'000;  // first retry after a "receiver not ready"
  uint64_t rnr_retry_max_ns = 10'000'000;
  // 0 (the default): a message the receiver refuses (no receive posted,
  // unexpected queue full) is retried, backing off up to rnr_retry_max_ns,
  // for as long as the receiver answers (its RNRs prove it alive; a dead
  // one is timed out after peer_timeout_ns, ETIMEDOUT), as MPI requires of
  // a send whose receiver posts late. Non-zero (opt-in): a send refused
  // this long completes in error (ENOSPC); the session goes on.
  uint64_t rnr_give_up_ns = 0;
  // Silence with work pending: fail it (ETIMEDOUT), for a peer whose
  // device cannot tell whether its process lives (driver::PeerLiveness
  // kUnknown: NICs). A silent peer is asked about (QueuePair::PeerAlive)
  // every min(peer_timeout_ns / 4, 100 ms) of silence: one whose process
  // the device sees alive (the intra-host device) is never given up, one
  // whose process is gone fails at once (ECONNRESET), and one whose death
  // the device would have seen and did not (kernel UDP) is given up after
  // silent_peer_timeout_ns (PROTOCOL.md, "Peer liveness").
  uint64_t peer_timeout_ns = 2'000'000'000;
  // 0: never. The default is about when Linux TCP gives up retransmitting
  // (tcp_retries2 = 15): a crashed host or a broken path is reported by
  // nothing else.
  uint64_t silent_peer_timeout_ns = 900'000'000'000;
  // At most one RESET per source per interval (for up to 32 sources drawing
  // RESETs at once; more are each answered as if new).
  uint64_t reset_interval_ns = 100'000;

  // Bursts per progress pass.
  uint16_t rx_burst = 32;
  uint16_t tx_burst = 32;
  uint16_t tx_bursts_per_pass = 4;
  // A Progress pass that receives nothing reuses the last clock reading,
  // up to this many passes in a row (1: every pass reads the clock). More
  // makes an idle poll loop cheaper (a clock read costs about as much as an
  // empty RX poll); timers then fire up to that many idle passes late, and
  // a send posted after them is stamped that much early.
  uint16_t idle_passes_per_clock_read = 1;
};

// One-line InvalidArgument naming the first bad field.
absl::Status ValidateConfig(const EndpointConfig& c);

// A SharedRecvQueue's sizes (the receive-side sizes of EndpointConfig).
struct SharedRecvConfig {
  uint32_t max_posted_recvs = 256;
  uint32_t max_unexpected_msgs = 128;
  uint64_t unexpected_bytes = 8u << 20;
  uint32_t unexpected_chunk_bytes = 4096;
  UnexpectedPool* unexpected_pool = nullptr;  // as EndpointConfig's
};

// DatagramEndpoint settings (unreliable datagrams, FI_EP_DGRAM).
struct DatagramConfig {
  uint16_t udp_port = 0;  // REQUIRED, non-zero
  uint32_t max_peers = 64;
  uint32_t max_posted_recvs = 256;
  // Completions not yet polled, beyond one per posted receive (a send
  // finding none free returns kAgain).
  uint32_t max_unread_sends = 256;
  uint16_t rx_burst = 32;
  uint8_t dscp = 0;  // of every datagram sent
};

// One-line InvalidArgument naming the first bad field.
absl::Status ValidateConfig(const DatagramConfig& c);

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_CONFIG_H_
