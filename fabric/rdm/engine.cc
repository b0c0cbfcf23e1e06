// Engine setup, the post calls and completion records.
#include "fabric/rdm/engine.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace bypass::rdm {
namespace {

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Room in released_ beyond the held budget: the largest batch HandleRx takes.
constexpr uint32_t kReleaseSlack = 1024;

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const DeviceParams& dev,
                                                       const EndpointConfig& config) {
  if (absl::Status s = ValidateConfig(config); !s.ok()) return s;
  if (dev.ip.value == 0) {
    return absl::FailedPreconditionError(
        "rdm endpoint: the device has no IPv4 address; open it with ip=A.B.C.D");
  }
  const uint32_t frame = dev.frame_capacity != 0 ? dev.frame_capacity : dev.mtu + 14;
  const uint32_t max_datagram = static_cast<uint32_t>(
      std::min<uint64_t>({uint64_t{dev.mtu} - std::min<uint32_t>(dev.mtu, wire::kIpUdpBytes),
                          uint64_t{frame} - std::min<uint64_t>(frame, wire::kUdpHeadersBytes),
                          driver::kMaxUdpPayloadBytes}));
  if (wire::MaxDataPayload(max_datagram) < 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("rdm endpoint: MTU ", dev.mtu, " leaves ", wire::MaxDataPayload(max_datagram),
                     " payload bytes per packet; use an MTU of at least 220"));
  }
  uint32_t held_budget = config.max_held_packets;
  if (held_budget == 0) held_budget = std::max<uint32_t>(1, dev.pool_capacity / 2);
  uint64_t seed = 0;
  if (config.random_seed) {
    seed = *config.random_seed;
  } else {
    std::random_device rd;
    seed = uint64_t{rd()} << 32 | rd();
  }
  uint64_t state = seed;
  uint32_t inc = config.incarnation.value_or(0);
  while (inc == 0) inc = static_cast<uint32_t>(SplitMix64(&state));
  const uint32_t ring = std::bit_ceil(config.window_packets);
  return std::unique_ptr<Engine>(
      new Engine(dev, config, max_datagram, ring, held_budget, state, inc));
}

Engine::Engine(const DeviceParams& dev, const EndpointConfig& config, uint32_t max_datagram,
               uint32_t ring_size, uint32_t held_budget, uint64_t seed, uint32_t incarnation)
    : config_(config),
      dev_(dev),
      max_datagram_(max_datagram),
      held_budget_(held_budget),
      incarnation_(incarnation),
      rng_state_(seed),
      peers_(config.max_peers, ring_size),
      ops_(new SendOp[uint64_t{config.max_send_ops} + config.max_rma_ops]),
      op_gen_(new uint16_t[uint64_t{config.max_send_ops} + config.max_rma_ops]()),
      free_ops_(config.max_send_ops),
      free_ctl_(config.max_rma_ops),
      regions_(new Region[config.max_regions]),
      free_regions_(config.max_regions),
      region_index_(new uint32_t[std::bit_ceil(2 * uint64_t{config.max_regions})]),
      region_index_mask_(static_cast<uint32_t>(std::bit_ceil(2 * uint64_t{config.max_regions}) - 1)),
      inject_arena_(new uint8_t[uint64_t{config.max_send_ops} * config.inject_size]),
      matcher_(config.max_posted_recvs, config.max_unexpected_msgs, config.unexpected_bytes,
               config.unexpected_chunk_bytes),
      cq_(config.max_send_ops + config.max_posted_recvs, config.max_send_ops),
      work_(new uint32_t[config.max_peers]),
      released_(new driver::Packet*[held_budget + kReleaseSlack]),
      released_capacity_(held_budget + kReleaseSlack) {
  matcher_.set_min_multi_recv(config.min_multi_recv);
  std::fill_n(region_index_.get(), region_index_mask_ + 1, kNone);
}

Engine::~Engine() = default;

uint64_t Engine::Random() { return SplitMix64(&rng_state_); }

Address Engine::address() const {
  return Address{dev_.mac, dev_.ip, config_.udp_port, incarnation_};
}

absl::StatusOr<PeerId> Engine::InsertPeer(const Address& addr) {
  if (addr.ip.value == 0 || addr.udp_port == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("InsertPeer(", addr.ToString(), "): the address needs an IPv4 and a port"));
  }
  uint32_t pi = peers_.Find(addr.ip.value, addr.udp_port);
  if (pi != kNone) {
    peers_[pi].inserted = true;
    return peers_.Id(pi);
  }
  pi = peers_.Add(addr.ip.value, addr.udp_port);
  if (pi == kNone) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "InsertPeer(", addr.ToString(), "): the peer table is full (max_peers=", config_.max_peers,
        "); create the endpoint with a larger max_peers"));
  }
  InitPeer(pi, addr.mac, addr.ip, addr.udp_port, addr.incarnation);
  peers_[pi].inserted = true;
  return peers_.Id(pi);
}

absl::Status Engine::RemovePeer(PeerId id) {
  if (!peers_.Valid(id)) {
    return absl::NotFoundError(absl::StrCat(
        "RemovePeer(", id.value, "): no such peer (never inserted, or already removed)"));
  }
  const uint32_t pi = PeerTable::Index(id);
  const char* why = "was removed; operation canceled";
  FailPeer(pi, ECANCELED, why, /*keep_unsent=*/false);
  // Receives only it could satisfy, and what it sent that nobody took.
  for (uint32_t s = matcher_.TakePostedFrom(id); s != kNone; s = matcher_.TakePostedFrom(id)) {
    CancelSlot(s, "receive canceled: its source was removed");
  }
  for (uint32_t e = matcher_.FindFrom(id); e != kNone; e = matcher_.FindFrom(id)) {
    matcher_.Release(e);
  }
  NoteUnexpectedDepth();
  ResourcesFreed();
  peers_.Remove(pi);
  return absl::OkStatus();
}

absl::Status Engine::SetDscp(uint8_t dscp) {
  if (dscp > 63) {
    return absl::InvalidArgumentError(
        absl::StrCat("SetDscp(", dscp, "): a DSCP is 6 bits; use 0..63 (e.g. 46 for EF)"));
  }
  dscp_ = dscp;
  for (uint32_t i = 0; i < peers_.size(); ++i) peers_[i].flow.dscp = dscp;
  return absl::OkStatus();
}

uint32_t Engine::SendSlotsFree() const { return free_ops_.available(); }

std::optional<Address> Engine::PeerAddress(PeerId id) const {
  if (!peers_.Valid(id)) return std::nullopt;
  return peers_[PeerTable::Index(id)].addr;
}

std::optional<PeerStats> Engine::peer_stats(PeerId id) const {
  if (!peers_.Valid(id)) return std::nullopt;
  const Peer& p = peers_[PeerTable::Index(id)];
  PeerStats s;
  s.established = p.rx_known && p.tx_ready;
  s.incarnation = p.addr.incarnation;
  s.srtt_ns = p.rtt.srtt();
  s.rttvar_ns = p.rtt.rttvar();
  s.rto_ns = p.rtt.rto(p.backoff);
  s.inflight = p.inflight();
  s.send_window = static_cast<uint32_t>(p.window_end - p.snd_una);
  s.queued_ops = p.ops.size();
  s.held_packets = p.held_count;
  return s;
}

void Engine::InitPeer(uint32_t pi, const driver::MacAddress& mac, driver::Ipv4Address ip,
                      uint16_t port, uint32_t incarnation) {
  Peer& p = peers_[pi];
  p.addr = Address{mac, ip, port, incarnation};
  // Without a MAC the HELLO goes to every host on the segment; the peer's
  // answer teaches its MAC (SessionFromHello).
  p.mac_unknown = mac == driver::MacAddress{};
  p.flow = driver::UdpFlow{dev_.mac, p.mac_unknown ? driver::kBroadcastMac : mac,
                           dev_.ip,  ip,
                           config_.udp_port,
                           port,
                           dscp_};
  p.rtt = RttEstimator(config_.rto_initial_ns, config_.rto_min_ns, config_.rto_max_ns);
  NewTxSession(p);
}

void Engine::NewTxSession(Peer& p) {
  p.tx_isn = Psn(static_cast<uint32_t>(Random()));
  p.next_psn = p.snd_una = p.window_end = p.tx_isn;
  p.next_msg_id = 0;
  p.tx_ready = false;
  p.retx_queued = 0;
  p.backoff = 0;
  p.rto_deadline = 0;
  p.tlp_deadline = 0;
  p.acks_on_data = false;
  p.rnr_wait = false;
  p.rnr_until = 0;
  p.rnr_delay = 0;
  p.rnr_since = 0;
  p.window_stalled = false;
}

void Engine::Enqueue(uint32_t pi) {
  Peer& p = peers_[pi];
  if (p.queued) return;
  p.queued = true;
  const uint32_t tail = work_head_ + work_count_;  // < 2 max_peers: wrap without a divide
  work_[tail >= config_.max_peers ? tail - config_.max_peers : tail] = pi;
  ++work_count_;
}

void Engine::Release(driver::Packet* pkt) {
  if (released_count_ == released_capacity_) {
    std::fprintf(stderr, "rdm engine: more than %u packets released in one step\n",
                 released_capacity_);
    std::abort();
  }
  released_[released_count_++] = pkt;
}

void Engine::ReleaseAll() {
  for (uint32_t i = 0; i < peers_.size(); ++i) {
    Peer& p = peers_[i];
    for (uint32_t k = 0; k <= p.ring_mask && p.held_count > 0; ++k) {
      if (p.held[k].pkt == nullptr) continue;
      Release(p.held[k].pkt);
      p.held[k].pkt = nullptr;
      --p.held_count;
      --held_total_;
    }
  }
}

Result Engine::PostSend(const SendRequest& r) {
  if (!peers_.Valid(r.dest)) return Result::kInvalid;
  if (r.len > 0 && r.buf == nullptr) return Result::kInvalid;
  const bool buffered = (r.flags & kSendBuffered) != 0 && (r.flags & kSendInject) == 0;
  const bool inject = (r.flags & kSendInject) != 0 || buffered;  // copied now; no completion later
  if (inject ? r.len > config_.inject_size : r.len > config_.max_msg_size) {
    return Result::kTooLong;
  }
  if (free_ops_.empty()) return Result::kAgain;
  if ((r.flags & kSendInject) == 0 && !cq_.Reserve()) return Result::kAgain;
  const uint32_t o = free_ops_.Pop();
  SendOp& op = ops_[o];
  std::construct_at(&op);  // in place: no temporary copied over it
  if (buffered) {  // its completion, at once
    Completion c;
    c.context = r.context;
    c.flags = kCompSend | kCompMsg | ((r.flags & kSendTagged) ? kCompTagged : 0);
    c.len = r.len;
    c.source = r.dest;
    cq_.Push(c);
  }
  if (inject) {
    uint8_t* copy = inject_arena_.get() + uint64_t{o} * config_.inject_size;
    if (r.len > 0) std::memcpy(copy, r.buf, r.len);
    op.buf = copy;
  } else {
    op.buf = static_cast<const uint8_t*>(r.buf);
  }
  op.len = r.len;
  op.context = buffered ? nullptr : r.context;  // a later error is an inject's
  op.tag = (r.flags & kSendTagged) ? r.tag : 0;
  op.data = (r.flags & kSendRemoteData) ? r.data : 0;
  op.msg_flags = static_cast<uint16_t>(((r.flags & kSendTagged) ? wire::kMsgTagged : 0) |
                                       ((r.flags & kSendRemoteData) ? wire::kMsgRemoteData : 0));
  op.inject = inject;
  op.ack_now = (r.flags & kSendAckNow) != 0;
  op.peer = PeerTable::Index(r.dest);
  if (!inject && r.len > config_.rendezvous_threshold) {
    op.kind = OpKind::kRndv;  // engine_rma.cc
    ++counters_.rendezvous_sent;
  }

  Peer& p = peers_[op.peer];
  if (!p.busy()) {
    p.activity_ns = now_;
    ArmTimer(now_ + config_.peer_timeout_ns);
  }
  p.ops.PushBack(ops_.get(), o);
  if (p.cursor_op == kNone) {
    p.cursor_op = o;
    p.cursor_offset = 0;
  }
  if (!p.tx_ready && !p.hello_wanted) {
    p.hello_wanted = true;
    p.hello_due_ns = now_;
    p.hello_tries = 0;
  }
  Enqueue(op.peer);
  return Result::kOk;
}

Result Engine::PostRecv(const RecvRequest& r) {
  const uint32_t f = r.flags;
  if ((f & ~(kRecvMulti | kRecvPeek | kRecvClaim | kRecvDiscard)) != 0 ||
      ((f & kRecvMulti) && (f & (kRecvPeek | kRecvClaim | kRecvDiscard))) ||
      ((f & kRecvDiscard) && !(f & (kRecvPeek | kRecvClaim)))) {
    return Result::kInvalid;
  }
  if ((f & kRecvPeek) == 0 && r.len > 0 && r.buf == nullptr) return Result::kInvalid;
  if ((f & kRecvClaim) && !(f & kRecvPeek)) return Claim(r);  // source and tag do not apply
  if (!(r.source == kAnyPeer) && !peers_.Valid(r.source)) return Result::kInvalid;
  if (f & kRecvPeek) return Peek(r);
  if (!cq_.Reserve()) return Result::kAgain;
  if (f & kRecvMulti) return PostMulti(r);
  const uint32_t e = matcher_.FindUnexpected(r);
  if (e != kNone && matcher_.unexpected(e).rendezvous) return PullUnexpected(e, r);
  if (e != kNone && matcher_.unexpected(e).complete) {
    DeliverUnexpected(e, r);
    ResourcesFreed();
    return Result::kOk;
  }
  const uint32_t slot = matcher_.AllocRecv(r);
  if (slot == kNone) {
    cq_.Unreserve();
    return Result::kAgain;
  }
  if (e == kNone) {
    matcher_.QueueRecv(slot);
  } else {
    BindArriving(e, slot, 0);
  }
  ResourcesFreed();
  return Result::kOk;
}

void Engine::DeliverUnexpected(uint32_t e, const RecvRequest& r) {
  const UnexpectedMsg& m = matcher_.unexpected(e);
  matcher_.CopyOut(e, static_cast<uint8_t*>(r.buf), r.len);
  RxMessage done;
  done.total = m.total;
  done.received = m.received;
  done.msg_flags = m.msg_flags;
  done.tag = m.tag;
  done.data = m.data;
  CompleteRecv(m.source, r, done);
  matcher_.Release(e);
  NoteUnexpectedDepth();
}

void Engine::CompleteRecv(PeerId src, const RecvRequest& r, const RxMessage& m,
                          uint64_t extra_flags) {
  if (r.flags & kRecvDiscard) {
    // A discarded rendezvous message, pulled with no bytes: the peek or
    // claim that discarded it has completed already.
    cq_.Unreserve();
    return;
  }
  Completion c;
  c.context = r.context;
  c.flags = kCompRecv | kCompMsg | (r.tagged ? kCompTagged : 0) |
            ((m.msg_flags & wire::kMsgRemoteData) ? kCompRemoteData : 0) | extra_flags;
  c.len = std::min<uint64_t>(m.total, r.len);
  c.buf = r.buf;
  c.data = m.data;
  c.tag = m.tag;
  c.source = src;
  if (m.total > r.len) {
    ErrorCompletion ec;
    ec.op = c;
    ec.err = EMSGSIZE;
    ec.olen = m.total - r.len;
    std::snprintf(ec.message, sizeof(ec.message),
                  "message of %llu bytes truncated to the %zu-byte receive buffer",
                  static_cast<unsigned long long>(m.total), r.len);
    ++counters_.truncated;
    cq_.PushError(ec);
    return;
  }
  cq_.Push(c);
}

void Engine::CompleteSend(uint32_t o) {
  SendOp& op = ops_[o];
  if (!op.inject && !op.abandoned) {  // an abandoned one has had its error
    Completion c;
    c.context = op.context;
    c.flags = kCompSend | kCompMsg | ((op.msg_flags & wire::kMsgTagged) ? kCompTagged : 0);
    c.len = op.len;
    c.source = peers_.Id(op.peer);
    cq_.Push(c);
  }
  free_ops_.Push(o);
}

void Engine::FailSend(uint32_t o, int err, const char* why) {
  if (!ops_[o].abandoned) ReportSendError(o, err, why);
  free_ops_.Push(o);
}

void Engine::ReportSendError(uint32_t o, int err, const char* why) {
  const SendOp& op = ops_[o];
  ErrorCompletion ec;
  ec.op.context = op.context;
  ec.op.flags = kCompSend | kCompMsg | ((op.msg_flags & wire::kMsgTagged) ? kCompTagged : 0);
  ec.op.source = peers_.Id(op.peer);
  ec.err = err;
  FormatPeerError(&ec, op.peer, why);
  ++counters_.ops_failed;
  if (op.inject) {
    if (!cq_.PushUnreservedError(ec)) ++counters_.inject_errors_dropped;
  } else {
    cq_.PushError(ec);
  }
}

void Engine::FormatPeerError(ErrorCompletion* ec, uint32_t pi, const char* what) const {
  const Address& a = peers_[pi].addr;
  std::snprintf(ec->message, sizeof(ec->message), "peer %s:%u (incarnation 0x%08x) %s",
                a.ip.ToString().c_str(), a.udp_port, a.incarnation, what);
}

void Engine::ResourcesFreed() {
  if (refused_peers_ == 0) return;
  // A receive or unexpected-queue room appeared: tell each peer we refused
  // to retry now rather than after its backoff.
  for (uint32_t i = 0; i < peers_.size() && refused_peers_ > 0; ++i) {
    Peer& p = peers_[i];
    if (!p.rx_refused) continue;
    p.rx_refused = false;
    --refused_peers_;
    p.ack_standalone = true;
    Enqueue(i);
  }
}

void Engine::NoteUnexpectedDepth() {
  counters_.unexpected_depth = matcher_.unexpected_depth();
  counters_.unexpected_bytes = matcher_.unexpected_bytes();
  counters_.unexpected_depth_max =
      std::max(counters_.unexpected_depth_max, counters_.unexpected_depth);
}

}  // namespace bypass::rdm
