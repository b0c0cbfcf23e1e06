// The RDM engine's public API: the only header of fabric/rdm that code
// outside it includes (with the vocabulary in types.h and the settings in
// config.h). Everything else under fabric/rdm is internal; README.md there
// shows the stages behind this API and a message's path through them.
//
//   driver::ManualClock clock;          // or driver::SteadyClock::Get()
//   rdm::Port port(dev->queue(0), dev->info());
//   auto ep = rdm::Endpoint::Create(port, clock, {.udp_port = 5000});
//   rdm::PeerId peer = *(*ep)->InsertPeer(other_address);
//   (*ep)->Send({.dest = peer, .buf = msg, .len = n, .context = &op});
//   while (...) (*ep)->Progress();      // manual progress
#ifndef BYPASS_FABRIC_RDM_RDM_H_
#define BYPASS_FABRIC_RDM_RDM_H_

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "driver/clock.h"
#include "driver/device.h"
#include "driver/packet.h"
#include "fabric/rdm/config.h"
#include "fabric/rdm/types.h"

namespace bypass::rdm {

class Engine;
class Inbox;
class StatsSlot;
class DatagramPath;
class SharedMatch;
struct QueueSnapshot;

// What a Port dropped, plain counters of its thread.
struct PortCounters {
  uint64_t rx_packets = 0;
  uint64_t no_endpoint = 0;  // no endpoint has the packet's UDP port (or not UDP at all)
  uint64_t inbox_full = 0;   // its endpoint had not progressed for too long
  uint64_t group_copies = 0;  // multicast frames copied for a further member (or looped)
};

// One device queue and the endpoints bound to it: Poll receives a burst and
// hands each packet to the endpoint owning its UDP destination port, so
// endpoints share a queue where the device cannot steer. Single-threaded:
// the port and all its endpoints belong to one thread.
class Port {
 public:
  static constexpr uint32_t kMaxEndpoints = 64;
  static constexpr uint32_t kMaxBurst = 256;

  // REQUIRES: qp outlives the port; info describes qp's device.
  Port(driver::QueuePair& qp, const driver::DeviceInfo& info);
  Port(const Port&) = delete;
  Port& operator=(const Port&) = delete;
  ~Port();  // REQUIRES: every endpoint closed

  driver::QueuePair& qp() { return qp_; }
  const driver::DeviceInfo& info() const { return info_; }
  const PortCounters& counters() const { return counters_; }
  uint32_t endpoints() const { return count_; }
  // Process-unique, from 1 (telemetry: EndpointSnapshot::port_id).
  uint32_t id() const { return id_; }

  // For the endpoints of fabric/rdm (cold path): packets to udp_port go to
  // inbox from now on (the queue binds it: QueuePair::BindUdpPort, whose
  // AlreadyExists is returned as it is); Detach frees what is still in it
  // and unbinds.
  absl::Status Attach(uint16_t udp_port, Inbox* inbox);
  void Detach(uint16_t udp_port);
  // One burst from the queue into the inboxes.
  void Poll(uint16_t burst);

  // Multicast (port_groups.cc, cold path but LoopToGroup): a frame to
  // group:udp_port (an IPv4 multicast address) goes to every inbox joined
  // to it, the frame itself to the first and a copy from the queue's pool to
  // each other one (none left: that member misses it, counted in
  // inbox_full); to none, it is dropped (no_endpoint). The queue joins the
  // group with its first member and leaves it with its last
  // (QueuePair::JoinGroup, whose errors JoinGroup returns). JoinGroup is
  // InvalidArgument for a group outside 224.0.0.0/4, AlreadyExists for the
  // inbox joined there already, ResourceExhausted past kMaxGroupMembers.
  static constexpr uint32_t kMaxGroupMembers = 64;
  absl::Status JoinGroup(driver::Ipv4Address group, uint16_t udp_port, Inbox* inbox);
  void LeaveGroup(driver::Ipv4Address group, uint16_t udp_port, Inbox* inbox);
  // A copy of `frame` (being sent on this port) for each inbox of this port
  // joined to its group, where the queue does not loop multicast itself
  // (QueuePair::LoopsMulticast): members on the sending port get the
  // datagram as IP_MULTICAST_LOOP gives it to the kernel's sockets (the
  // sender too, if it joined).
  void LoopToGroup(const driver::Packet& frame);
  uint32_t group_members() const { return member_count_; }
  // The owner thread (telemetry): its device queue's counters into out
  // (out's vectors keep their capacity).
  void SnapshotQueue(QueueSnapshot* out) const;

 private:
  struct GroupMember {
    uint32_t group = 0;
    uint16_t udp_port = 0;
    Inbox* inbox = nullptr;
  };
  Inbox* Find(const driver::Packet* p) const;
  // How many inboxes joined group:udp_port.
  uint32_t Members(uint32_t group, uint16_t udp_port) const;
  // Hands p to the members of the group it is sent to; false (p untouched)
  // when it is not a multicast frame. `loop`: p stays the caller's, every
  // member gets a copy.
  bool DeliverToGroup(driver::Packet* p, bool loop);

  driver::QueuePair& qp_;
  const driver::DeviceInfo info_;
  const uint32_t id_;
  uint16_t ports_[kMaxEndpoints] = {};
  Inbox* inboxes_[kMaxEndpoints] = {};
  uint32_t count_ = 0;
  GroupMember members_[kMaxGroupMembers];
  uint32_t member_count_ = 0;
  PortCounters counters_;
};

// One reliable-datagram endpoint (PROTOCOL.md): exactly-once, in-order
// messages and tagged messages, RMA, to peers it knows by address,
// progressed manually by its owner thread.
class Endpoint {
 public:
  static constexpr uint32_t kInboxSize = 1024;

  // REQUIRES: port and clock outlive the endpoint. Binds config.udp_port
  // on the port (steer it to this queue first where the device can).
  static absl::StatusOr<std::unique_ptr<Endpoint>> Create(Port& port, const driver::Clock& clock,
                                                          const EndpointConfig& config);
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;
  // Frees every packet it holds; operations in flight are dropped silently.
  ~Endpoint();

  // Cold path.
  Address address() const;
  const EndpointConfig& config() const;
  // Payload bytes of one DATA packet to a peer with the same MTU.
  uint32_t max_segment() const;
  // Adds (or finds) the peer at addr's IPv4 and UDP port. A non-zero
  // addr.incarnation is the one expected; if the peer has restarted since,
  // the first contact finds out and goes on with the new one. An all-zero
  // addr.mac is learned: packets go to the broadcast MAC until the peer's
  // HELLO or HELLO_ACK passes every check (PROTOCOL.md, Addressing).
  absl::StatusOr<PeerId> InsertPeer(const Address& addr);
  // Forgets a peer (fi_av_remove): its send operations, the message being
  // received from it and the receives directed to it complete in error
  // (ECANCELED); its unexpected messages are dropped; its session ends
  // with one last word to it: an ACK of what we consumed from it, if that
  // was not acknowledged yet, so that its sends complete (an MPI rank
  // leaving removes its peers, which wait for those ACKs in their own
  // fi_av_remove, and would otherwise wait for the peer timeout). The
  // removed id stays invalid (post calls return
  // kInvalid, PeerAddress and peer_stats nullopt, RemovePeer NotFound)
  // until its slot has been reused 4095 times.
  absl::Status RemovePeer(PeerId id);
  std::optional<Address> PeerAddress(PeerId id) const;
  std::optional<PeerStats> peer_stats(PeerId id) const;
  std::optional<PeerCounters> peer_counters(PeerId id) const;
  // Regions peers may read and write; the key is the one to give them.
  absl::StatusOr<uint64_t> RegisterRegion(const RegionRequest& r);
  // NotFound for an unknown key. Accesses arriving later fail at the initiator.
  absl::Status DeregisterRegion(uint64_t key);
  // DSCP (0..63) for the IPv4 header of every packet sent from now on.
  absl::Status SetDscp(uint8_t dscp);
  // FI_OPT_MIN_MULTI_RECV: a multi-receive buffer with less left is released.
  void SetMinMultiRecv(size_t bytes);
  size_t min_multi_recv() const;

  // Hot path. Posts a send of any kind; what can go out at once does
  // (with kSendMore: at the next send without it, or the next Progress).
  // kAgain: no send slot or completion entry free (progress and retry).
  Result Send(const SendRequest& r);
  Result PostRecv(const RecvRequest& r);
  // RMA (fi_rma(3)). Errors of the target (unknown key, missing access
  // right, out of the region) complete the operation in error here and
  // touch nothing there.
  Result Write(const RmaRequest& r);
  Result Read(const RmaRequest& r);
  // An atomic (fi_atomic(3)), executed exactly once at the target, in the
  // order posted among this endpoint's operations to that peer; errors of
  // the target as for RMA, and EOPNOTSUPP for an op the target does not
  // define on the type. kInvalid: an undefined (op, type) pair, a missing
  // buffer, a fetch with kAtomicInject; kTooLong: more than kMaxAtomicBytes
  // or more than one packet of the device holds.
  Result Atomic(const AtomicRequest& r);
  // Cancels the posted receive with this context (fi_cancel): an error
  // completion with ECANCELED. False when there is none to cancel. With
  // `only`, just a receive directed to that peer (endpoints that share this
  // one by peer, fabric/fi FI_EP_MSG connections, may use one context).
  bool CancelRecv(void* context, PeerId only = kAnyPeer);
  // Cancels every queued receive, or every one directed to `only` (an
  // error completion each, ECANCELED; fi_shutdown). A receive already
  // taking a message is not queued: it completes or fails with it.
  // Returns how many.
  size_t CancelRecvs(PeerId only = kAnyPeer);
  // Free send operation and receive slots (fi_tx_size_left, fi_rx_size_left).
  uint32_t SendSlotsFree() const;
  uint32_t RecvSlotsFree() const;
  // One pass: reads the clock once, receives a burst, runs the protocol and
  // its timers, and transmits. Returns the packets it received.
  size_t Progress();
  // Something is built or waits to be built for the wire.
  bool HasTxWork() const;
  // An ACK waits for this endpoint's next call (defer_requested_acks).
  bool HasDeferredAcks() const;
  // Something only a later pass finishes: packets in flight (their ACKs
  // to take, retransmissions), data queued behind the window, an answer
  // awaited, packets held, an ACK owed (delayed or deferred), frames the
  // TX ring did not take. Not the liveness probe of a peer whose messages
  // are awaited (a receiver that stops calling loses nothing by it).
  // False once everything of the endpoint's is done: an owner that stops
  // calling then loses nothing (the fi layer's progress thread watches
  // while it is true).
  bool Unfinished() const;
  size_t PollCompletions(absl::Span<Completion> out);
  size_t PollErrors(absl::Span<ErrorCompletion> out);
  // Peers given up since the last call (their operations failed too).
  size_t PollPeerFailures(absl::Span<PeerFailure> out);
  const Counters& counters() const;
  // The endpoint's id among the process's (from 1; SnapshotEndpoint).
  uint32_t stats_id() const;
  // Publishes the endpoint's state for SnapshotEndpoint now. Progress does
  // so by itself when a reader asks (one relaxed load per pass otherwise);
  // an owner about to stop progressing for long calls this so that readers
  // meanwhile see its last state.
  void PublishStats();

 private:
  Endpoint(Port& port, const driver::Clock& clock, std::unique_ptr<Engine> engine);
  // Gives back what the engine released (GiveBack); most calls find
  // nothing and return after one compare.
  void FreeReleased();
  void GiveBack();
  // Transmits what is owed (SendBursts); most calls (every progress pass)
  // find nothing and return after one compare, without SendBursts' frame.
  void Flush();
  void SendBursts();
  // After a send, write, read or atomic was posted (res): ACKs deferred to
  // this call are due (a packet to their peer carries its own), then Flush.
  Result AfterPost(Result res);

  Port& port_;
  const driver::Clock& clock_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Inbox> inbox_;
  bool attached_ = false;
  uint32_t idle_passes_ = 0;  // Progress passes since the last clock reading
  // Allocated, not yet built into: spare_[spare_head_, spare_head_ + spare_n_).
  driver::Packet* spare_[Port::kMaxBurst];
  uint32_t spare_head_ = 0;
  uint32_t spare_n_ = 0;
  uint32_t tx_capacity_ = UINT32_MAX;  // of AllocBulk's buffers; until known, nothing is kept
  driver::Packet* backlog_[Port::kMaxBurst];  // built, not yet taken by TxBurst
  uint32_t backlog_n_ = 0;
  std::shared_ptr<StatsSlot> stats_;  // what readers of SnapshotEndpoint get
};

// ---- Telemetry (fabric/stats serves it: DPDK telemetry, bypass-stat).
// Every Endpoint of the process is listed from its Create to its
// destruction. Its owner thread publishes its state when asked (at its next
// Progress: a reader never touches the engine), so a snapshot is exact as
// of one pass.

// The device queue a Port polls, as the Port's owner read it.
struct QueueSnapshot {
  std::string uri;                 // the device's (DeviceInfo::uri)
  uint16_t queue = 0;              // QueuePair::id()
  driver::QueueStats stats;        // QueuePair::stats()
  driver::NamedCounters counters;  // QueuePair::AppendCounters (a DPDK port's too)
};

// One endpoint, as its owner published it.
struct EndpointSnapshot {
  uint32_t id = 0;
  Address address;
  uint32_t port_id = 0;   // its Port's id (endpoints of one Port share it)
  PortCounters port;      // that Port's counters
  QueueSnapshot device;   // that Port's device queue
  // A DatagramEndpoint (FI_EP_DGRAM): its counters are datagram_counters,
  // `counters` stays zero and `peers` empty (datagrams keep no per-peer state
  // but addresses: datagram_peers).
  bool datagram = false;
  DatagramCounters datagram_counters;
  std::vector<Address> datagram_peers;
  Counters counters;
  std::vector<PeerSnapshot> peers;  // every peer it has, in slot order
  uint64_t published = 0;  // how many times it was published (from 1)
  // False: the owner did not progress within the wait; this is what it
  // published last (at its creation, its last PublishStats or Progress).
  bool fresh = false;
};

// The ids of the process's endpoints, ascending. Thread-safe.
std::vector<uint32_t> ListEndpoints();
// Asks the owners of `ids` to publish at their next Progress and waits up
// to wait_ns (for all of them together) for it. One entry per id still
// alive, in the order of ids. Thread-safe; never call it from the thread
// that owns one of them with wait_ns > 0 (it would wait in vain).
std::vector<EndpointSnapshot> SnapshotEndpoints(absl::Span<const uint32_t> ids, uint64_t wait_ns);

// A receive queue several Endpoints of one Port share (libfabric's shared
// receive context, fi_srx_context): endpoints created with
// EndpointConfig::shared_recv pointing at it match the messages arriving
// at each of them against its one FIFO of posted receives, and queue what
// none takes in its one unexpected queue (in arrival order, across the
// endpoints). A peer's messages to one endpoint are matched in the order
// sent. A receive completes at the endpoint its message arrived at (that
// endpoint's PollCompletions, the source one of its peers), which reserves
// the completion when it takes the receive: without room it refuses the
// message for now, as it does without a receive. Receives are plain (no
// multi-receive buffers, peeks or claims: kInvalid), from any source or
// directed to a sender named by its address (peers belong to endpoints).
// Single-threaded, like the Port.
class SharedRecvQueue {
 public:
  // REQUIRES: port outlives the queue, which outlives its endpoints.
  static absl::StatusOr<std::unique_ptr<SharedRecvQueue>> Create(Port& port,
                                                                 const SharedRecvConfig& config);
  SharedRecvQueue(const SharedRecvQueue&) = delete;
  SharedRecvQueue& operator=(const SharedRecvQueue&) = delete;
  // REQUIRES: no endpoint uses it. Posted receives are dropped.
  ~SharedRecvQueue();

  // r.source kAnyPeer, r.flags 0 (else kInvalid). kAgain: every receive
  // slot is taken, or the endpoint holding the message it takes has no
  // completion room (progress and retry).
  Result PostRecv(const RecvRequest& r);
  // The same directed to the sender at source's IPv4 and UDP port (at
  // whichever endpoint its messages arrive). It keeps that sender awaited
  // at the endpoints that have it as a peer, and fails (ETIMEDOUT) when one
  // of them gives it up, as an endpoint's own directed receives do.
  Result PostRecvFrom(const RecvRequest& r, const Address& source);
  // Cancels the queued receive with this context: an error completion
  // (ECANCELED) at one of the endpoints. False when there is none.
  bool CancelRecv(void* context);
  uint32_t RecvSlotsFree() const;
  uint32_t endpoints() const;
  const SharedRecvConfig& config() const { return config_; }

  // For the endpoints of fabric/rdm.
  Port& port() { return port_; }
  SharedMatch& impl() { return *impl_; }

 private:
  SharedRecvQueue(Port& port, const SharedRecvConfig& config);

  Port& port_;
  const SharedRecvConfig config_;
  std::unique_ptr<SharedMatch> impl_;
};

// Plain UDP datagrams (FI_EP_DGRAM) on a Port beside the reliable
// endpoints, through the same demultiplexer and the same completion
// records: no session, no order, no retransmission, no flow control. A send
// builds one frame and completes once the device took it; a receive takes
// the next datagram for the port, its source found in O(1) among the
// inserted peers (PeerId{} when it is none of them). Single-threaded, like
// the port.
class DatagramEndpoint {
 public:
  // REQUIRES: port outlives the endpoint.
  static absl::StatusOr<std::unique_ptr<DatagramEndpoint>> Create(Port& port,
                                                                  const DatagramConfig& config);
  DatagramEndpoint(const DatagramEndpoint&) = delete;
  DatagramEndpoint& operator=(const DatagramEndpoint&) = delete;
  ~DatagramEndpoint();

  // Cold path. The address's incarnation is 0: datagrams have no session.
  Address address() const;
  // The largest datagram: the device's MTU less the IPv4 and UDP headers.
  uint32_t max_payload() const;
  absl::StatusOr<PeerId> InsertPeer(const Address& addr);
  absl::Status RemovePeer(PeerId id);
  std::optional<Address> PeerAddress(PeerId id) const;
  absl::Status SetDscp(uint8_t dscp);
  // Multicast: from JoinGroup on, datagrams to group:udp_port (224.0.0.0/4)
  // are received here too, their completions flagged kCompMulticast; the
  // device must carry multicast frames (the loopback device does; see
  // fabric/fi/README.md). Errors: Port::JoinGroup's. LeaveGroup of a group
  // not joined is NotFound. The endpoint leaves its groups when destroyed.
  // A peer inserted with a multicast IPv4 is sent to at the group's
  // Ethernet address (driver::MulticastMac), and this port's members get a
  // copy (Port::LoopToGroup).
  absl::Status JoinGroup(driver::Ipv4Address group, uint16_t udp_port);
  absl::Status LeaveGroup(driver::Ipv4Address group, uint16_t udp_port);

  // Hot path. r.flags: 0, or kSendInject (no completion). kAgain: no room
  // for the completion, no buffer, or the TX ring is full (retry);
  // kTooLong: more than max_payload().
  Result Send(const SendRequest& r);
  // The same with the bytes of iov gathered into the datagram (r.buf and
  // r.len are not used): one copy, into the frame.
  Result SendV(const SendRequest& r, absl::Span<const iovec> iov);
  // r.flags: 0 (datagrams have no tags, peeks or multi-receive buffers).
  Result PostRecv(const RecvRequest& r);
  bool CancelRecv(void* context);
  uint32_t RecvSlotsFree() const;
  // One pass: polls the port and delivers what arrived for this endpoint
  // into the oldest posted receives. Returns the datagrams it took.
  size_t Progress();
  size_t PollCompletions(absl::Span<Completion> out);
  size_t PollErrors(absl::Span<ErrorCompletion> out);
  const DatagramCounters& counters() const;
  // Telemetry, as Endpoint's: listed among the process's endpoints
  // (ListEndpoints; EndpointSnapshot::datagram), published at the Progress
  // after a reader asked, or now.
  uint32_t stats_id() const;
  void PublishStats();

 private:
  explicit DatagramEndpoint(Port& port, std::unique_ptr<DatagramPath> path);

  Port& port_;
  std::unique_ptr<DatagramPath> path_;
  std::shared_ptr<StatsSlot> stats_;
};

// The atomic op table applied to local memory, for reductions the caller
// computes itself (fabric/fi/coll.cc: collectives): target[i] = target[i]
// op operand[i] for count elements of type (any alignment). REQUIRES:
// AtomicDefined(op, type), op neither a compare op nor kRead; buffers of
// count * AtomicTypeSize(type) bytes that do not overlap.
void Reduce(AtomicOp op, AtomicType type, size_t count, uint8_t* target, const uint8_t* operand);

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_RDM_H_
