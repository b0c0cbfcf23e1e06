// The engine: its stages wired together (README.md), the dispatcher over
// packet types and the progress steps.
#include "fabric/rdm/engine.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "sodium.h"

namespace bypass::rdm {

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const DeviceParams& dev,
                                                       const EndpointConfig& config,
                                                       SharedMatch* shared) {
  if (absl::Status s = ValidateConfig(config); !s.ok()) return s;
  if (sodium_init() < 0) {
    return absl::InternalError(
        "rdm endpoint: libsodium failed to initialize (no system randomness?); check "
        "/dev/urandom and getrandom()");
  }
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
  std::unique_ptr<Engine> engine(
      new Engine(dev, config, max_datagram, ring, held_budget, state, inc, shared));
  // Toward peers of this host: the larger frames of the intra-host device,
  // which the TX buffers hold (DeviceInfo::same_host_mtu).
  if (dev.same_host_mtu > dev.mtu) {
    const uint32_t same_host = static_cast<uint32_t>(std::min<uint64_t>(
        {uint64_t{dev.same_host_mtu} - wire::kIpUdpBytes, uint64_t{driver::kMaxUdpPayloadBytes},
         dev.frame_capacity != 0 ? uint64_t{dev.frame_capacity} - wire::kUdpHeadersBytes
                                 : uint64_t{UINT32_MAX}}));
    engine->ctx.same_host_max_datagram = std::max(max_datagram, same_host);
  }
  return engine;
}

Engine::Engine(const DeviceParams& dev, const EndpointConfig& config, uint32_t max_datagram,
               uint32_t ring_size, uint32_t held_budget, uint64_t seed, uint32_t incarnation,
               SharedMatch* shared)
    : Stages(config, dev, max_datagram, ring_size, held_budget, seed, incarnation, shared) {}

Engine::~Engine() = default;

// ---- Peers.

Address Engine::address() const {
  return Address{ctx.dev.mac, ctx.dev.ip, ctx.config.udp_port, ctx.incarnation};
}

absl::StatusOr<PeerId> Engine::InsertPeer(const Address& addr) {
  if (addr.ip.value == 0 || addr.udp_port == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("InsertPeer(", addr.ToString(), "): the address needs an IPv4 and a port"));
  }
  bool added = false;
  uint32_t pi = session.Insert(addr, &added);
  // Peers learned from the network never keep the application out.
  if (pi == kNone && EvictLearnedForInsert()) pi = session.Insert(addr, &added);
  if (pi == kNone) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "InsertPeer(", addr.ToString(), "): the peer table is full (max_peers=", ctx.config.max_peers,
        "); create the endpoint with a larger max_peers"));
  }
  if (added) AddPeer(pi);
  return session.peers().Id(pi);
}

absl::Status Engine::RemovePeer(PeerId id) {
  if (!session.peers().Valid(id)) {
    return absl::NotFoundError(absl::StrCat(
        "RemovePeer(", id.value, "): no such peer (never inserted, or already removed)"));
  }
  DropPeer(id.slot(), ECANCELED, "was removed; operation canceled");
  AfterFreeing();
  return absl::OkStatus();
}

bool Engine::OweFinalAck(PeerId id) {
  if (!session.peers().Valid(id)) return false;
  const uint32_t pi = id.slot();
  if (!session[pi].rx_known || reliability.rx(pi).unacked == 0) return false;
  reliability.AckRequested(pi);
  return true;
}

void Engine::DropPeer(uint32_t pi, int err, const char* why) {
  FailPeer(pi, err, why, /*keep_unsent=*/false);
  messaging.RemovePeer(pi);
  session.Remove(pi);
}

bool Engine::EvictLearnedForInsert() {
  uint32_t victim = session.OldestLearned([&](uint32_t pi) { return !session[pi].established(); });
  if (victim == kNone) victim = session.OldestLearned([&](uint32_t pi) { return !Busy(pi); });
  if (victim == kNone) victim = session.OldestLearned([](uint32_t) { return true; });
  if (victim == kNone) return false;
  ++ctx.counters.learned_evicted;
  DropPeer(victim, ECONNABORTED, "was evicted to make room for a peer the application inserted");
  return true;
}

uint32_t Engine::AddLearned(const wire::View& v) {
  if (session.LearnedFull()) {
    // Only unconfirmed ones: an established peer is never displaced by
    // packets from elsewhere.
    const uint32_t victim =
        session.OldestLearned([&](uint32_t pi) { return !session[pi].established(); });
    if (victim != kNone) {
      ++ctx.counters.learned_evicted;
      DropPeer(victim, ECONNABORTED, "was evicted (unconfirmed) to make room for a new peer");
    }
  }
  bool added = false;
  const uint32_t pi = session.AddFromHello(v, &added);
  if (pi != kNone) AddPeer(pi);
  return pi;
}

std::optional<Address> Engine::PeerAddress(PeerId id) const {
  if (!session.peers().Valid(id)) return std::nullopt;
  return session.address(id.slot());
}

std::optional<PeerCounters> Engine::peer_counters(PeerId id) const {
  if (!session.peers().Valid(id)) return std::nullopt;
  return ctx.peer_counters(id.slot());
}

void Engine::SnapshotPeers(std::vector<PeerSnapshot>* out) const {
  out->clear();
  const PeerTable& peers = session.peers();
  for (uint32_t pi = 0; pi < peers.size(); ++pi) {
    if (!peers.in_use(pi)) continue;
    const PeerId id = peers.Id(pi);
    out->push_back({id, peers.address(pi), *peer_stats(id), ctx.peer_counters(pi)});
  }
}

std::optional<PeerStats> Engine::peer_stats(PeerId id) const {
  if (!session.peers().Valid(id)) return std::nullopt;
  const uint32_t pi = id.slot();
  const TxStream& t = reliability.tx(pi);
  PeerStats s;
  s.established = session[pi].established();
  s.incarnation = session.address(pi).incarnation;
  s.srtt_ns = t.rtt.srtt();
  s.rttvar_ns = t.rtt.rttvar();
  const TxActive& a = reliability.tx_active(pi);
  s.rto_ns = reliability.Rto(pi, a.backoff);
  s.inflight = t.inflight();
  s.send_window = static_cast<uint32_t>(t.window_end - t.snd_una);
  s.cwnd = reliability.CcOn(pi) ? t.cc.cwnd() : 0;
  // Not those whose outcome is out (given up, or taken from a bundle)
  // that wait only for their packet's ACK.
  for (uint32_t o = a.ops.front(); o != kNone; o = ops[o].next) {
    if (!ops[o].abandoned) ++s.queued_ops;
  }
  s.waiting_ops = a.waiting.size();
  s.held_packets = reliability.rx_active(pi).held_count;
  s.unacked_packets = reliability.rx(pi).unacked;
  return s;
}

absl::Status Engine::SetDscp(uint8_t dscp) {
  if (dscp > 63) {
    return absl::InvalidArgumentError(
        absl::StrCat("SetDscp(", dscp, "): a DSCP is 6 bits; use 0..63 (e.g. 46 for EF)"));
  }
  ctx.dscp = dscp;  // every packet built from now on (Session::Flow)
  return absl::OkStatus();
}

// ---- Posting.

Result Engine::PostSend(const SendRequest& r) { return messaging.PostSend(r); }

Result Engine::PostRecv(const RecvRequest& r) {
  const uint32_t pi = session.peers().Valid(r.source) ? r.source.slot() : kNone;
  const bool was_busy = pi != kNone && Busy(pi);
  const Result res = messaging.PostRecv(r);
  if (pi != kNone && !was_busy && Busy(pi)) {
    // A receive directed to the peer begins work with it: its silence
    // counts from now, and its timer (RunPeerTimers) probes it, or times
    // it out.
    session[pi].activity_ns = ctx.now;
    ctx.ArmTimer(pi, ctx.now);
  }
  AfterFreeing();
  return res;
}

Result Engine::PostWrite(const RmaRequest& r) { return rma.PostWrite(r); }

Result Engine::PostRead(const RmaRequest& r) { return rma.PostRead(r); }
Result Engine::PostAtomic(const AtomicRequest& r) { return rma.PostAtomic(r); }

// ---- Receiving.

void Engine::HandleRx(absl::Span<driver::Packet* const> pkts) {
  for (driver::Packet* p : pkts) HandleFrame(p);
  messaging.FlushReads();
  AfterFreeing();
}

void Engine::HandleFrame(driver::Packet* pkt) {
  Counters& counters = ctx.counters;
  ++counters.rx_packets;
  // Parse fills the fields of the packet's type only; the View is the
  // engine's, reused, so that no packet pays for zeroing the others'.
  wire::View& v = rx_view_;
  const bool intact = (pkt->ol_flags & driver::kRxIntact) != 0;
  const wire::ParseStatus status = wire::Parse({pkt->data, pkt->len}, &v, intact);
  if (status != wire::ParseStatus::kOk) {
    if (status == wire::ParseStatus::kBadChecksum || status == wire::ParseStatus::kUnchecked) {
      ++counters.checksum_dropped;
    } else {
      ++counters.malformed_dropped;
    }
    ctx.Release(pkt);
    return;
  }
  const wire::Common& c = v.common;
  if ((c.flags & wire::kFlagUnchecked) != 0) ++counters.rx_unchecked;
  if (v.flow.dst_ip != ctx.dev.ip || v.flow.dst_port != ctx.config.udp_port) {
    ++counters.not_for_us_dropped;
    ctx.Release(pkt);
    return;
  }
  if (c.auth_key != ctx.config.auth_key) {
    ++counters.auth_dropped;
    ctx.Release(pkt);
    return;
  }
  const bool same_host = (pkt->ol_flags & driver::kRxSameHost) != 0;
  if (c.dst_incarnation != ctx.incarnation) {
    if (c.dst_incarnation != 0) {
      // Sent to an earlier life of this endpoint: say so, so the sender
      // learns of the restart now rather than after its timeout.
      ++counters.stale_dropped;
      session.QueueReset(v, wire::ResetReason::kUnknownIncarnation, same_host);
      ctx.Release(pkt);
      return;
    }
    if (c.type != wire::PacketType::kHello) {
      ++counters.malformed_dropped;
      ctx.Release(pkt);
      return;
    }
  }
  if (c.type == wire::PacketType::kData && v.msg.offer_pid != 0 &&
      (pkt->ol_flags & driver::kRxSameHost) == 0) {
    // An offer to read a message in place is acted on only for frames that
    // came through memory only this user's processes share: a packet from
    // the network never makes us read memory of this host (PROTOCOL.md).
    v.msg.offer_pid = 0;
    v.msg.offer_addr = 0;
  }
  const uint32_t pi = session.peers().Find(v.flow.src_ip.value, v.flow.src_port);
  if (pi != kNone) {
    ctx.Count(pi, PeerCount::kRxPackets);
    if (same_host) session.NoteSameHost(pi);
  }
  // Reads in place gathered from the frames before this one are done
  // before anything but an ACK or more DATA (Consume) can act on a peer.
  if (c.type != wire::PacketType::kData && c.type != wire::PacketType::kAck) {
    messaging.FlushReads();
  }
  bool held = false;
  // The dispatcher: the one switch over packet types in the engine.
  switch (c.type) {
    case wire::PacketType::kHello:
    case wire::PacketType::kHelloAck:
    case wire::PacketType::kCookie:
    case wire::PacketType::kReset:
      OnHandshake(pi, v, same_host);
      break;
    case wire::PacketType::kAck:
      OnAck(pi, v);
      break;
    case wire::PacketType::kData:
    case wire::PacketType::kRma:
      held = OnSequenced(pi, v, pkt);
      break;
  }
  if (!held) ctx.Release(pkt);
}

void Engine::OnHandshake(uint32_t pi, const wire::View& v, bool same_host) {
  // The checks that fail count in Counters wherever they are made; the
  // difference is the known peer's share.
  const Counters& c = ctx.counters;
  const uint64_t failed_before = c.handshake_auth_failed + c.handshake_unproven + c.cookie_rejected;
  switch (v.common.type) {
    case wire::PacketType::kHello:
      OnHello(pi, v, same_host);
      break;
    case wire::PacketType::kHelloAck:
      OnHelloAck(pi, v, same_host);
      break;
    case wire::PacketType::kCookie:
      OnCookie(pi, v, same_host);
      break;
    default:
      OnReset(pi, v, same_host);
      break;
  }
  const uint64_t failed =
      c.handshake_auth_failed + c.handshake_unproven + c.cookie_rejected - failed_before;
  // A stranger's failures have no slot (a failed HELLO adds no peer).
  if (failed > 0 && pi != kNone) {
    ctx.Count(pi, PeerCount::kHandshakeFailures, static_cast<uint32_t>(failed));
  }
}

void Engine::OnHello(uint32_t pi, const wire::View& v, bool same_host) {
  if (!session.Authentic(v, same_host)) return;
  if (pi != kNone && session.IsRetired(pi, v.common.src_incarnation)) {
    ++ctx.counters.stale_dropped;
    return;
  }
  if (!session.NeedsProof(pi, v)) {
    // A copy of the current session's HELLO (its HELLO_ACK was lost):
    // answered, echoing its nonce; it changes nothing, not even liveness,
    // since anyone could have sent it.
    session.OweHelloAck(pi, v.hello.nonce);
    ctx.Enqueue(pi);
    return;
  }
  // Anything else costs nothing until the sender proves it receives at
  // its address: a COOKIE, then its HELLO echoing it.
  if (!session.CookieValid(v)) {
    session.QueueCookie(pi, v, same_host);
    return;
  }
  if (pi == kNone) {
    pi = AddLearned(v);
    if (pi == kNone) return;
  }
  if (!TakeHandshake(pi, v)) return;
  session.OweHelloAck(pi, v.hello.nonce);
  ctx.Enqueue(pi);
}

void Engine::OnHelloAck(uint32_t pi, const wire::View& v, bool same_host) {
  if (pi == kNone) {  // an answer to a HELLO we never sent (or of a peer removed since)
    ++ctx.counters.stale_dropped;
    return;
  }
  // Our nonce echoed proves it answers a HELLO of ours, at its address.
  if (!session.Authentic(v, same_host) || !session.EchoesNonce(pi, v)) return;
  if (!TakeHandshake(pi, v)) return;
  session.Answered(pi);
  if (HasWork(pi)) ctx.Enqueue(pi);
}

void Engine::OnCookie(uint32_t pi, const wire::View& v, bool same_host) {
  if (pi == kNone) {
    ++ctx.counters.stale_dropped;
    return;
  }
  if (!session.Authentic(v, same_host) || !session.EchoesNonce(pi, v)) return;
  session.Heard(pi, v);
  switch (session.ClassifyCookie(pi, v)) {
    case SessionEvent::kStale:
      return;
    case SessionEvent::kRestarted: {
      const uint32_t old = session.address(pi).incarnation;
      FailPeer(pi, ECONNRESET, "restarted; operation aborted", /*keep_unsent=*/true);
      session.Retire(pi, old);
      session.peers().address(pi).incarnation = v.common.src_incarnation;
      break;
    }
    case SessionEvent::kReset:
      FailPeer(pi, ECONNRESET, "lost our session (it timed out); operation aborted",
               /*keep_unsent=*/true);
      break;
    case SessionEvent::kCurrent:
      session.TakeCookie(pi, v);
      break;
  }
  if (HasWork(pi)) ctx.Enqueue(pi);
}

bool Engine::TakeHandshake(uint32_t pi, const wire::View& v) {
  switch (session.ClassifyHello(pi, v)) {
    case SessionEvent::kStale:
      return false;
    case SessionEvent::kRestarted: {
      const uint32_t old = session.address(pi).incarnation;
      FailPeer(pi, ECONNRESET, "restarted; operation aborted", /*keep_unsent=*/true);
      session.Retire(pi, old);
      break;
    }
    case SessionEvent::kReset:
      FailPeer(pi, ECONNRESET, "reset its session; operation aborted", /*keep_unsent=*/true);
      break;
    case SessionEvent::kCurrent:
      break;
  }
  session.Proven(pi, v);
  if (session.Accept(pi, v)) reliability.StartRx(pi, v.common.credit);
  reliability.OnAck(pi, v.common, nullptr);
  return true;
}

void Engine::OnReset(uint32_t pi, const wire::View& v, bool same_host) {
  if (pi == kNone) {
    ++ctx.counters.stale_dropped;
    return;
  }
  if (!session.Authentic(v, same_host)) return;
  const TxStream& t = reliability.tx(pi);
  const bool in_session = !v.common.psn.Before(t.snd_una) && v.common.psn.Before(t.next_psn);
  switch (session.ClassifyReset(pi, v, in_session)) {
    case SessionEvent::kStale:
    case SessionEvent::kCurrent:
      return;
    case SessionEvent::kRestarted:
    case SessionEvent::kReset:
      // Never an end by itself (it may be forged or replayed): we ask the
      // peer, and only its proven answer (a COOKIE or HELLO_ACK echoing the
      // probe's nonce) ends the session (PROTOCOL.md, "Sessions").
      ++ctx.counters.resets_probed;
      session.Probe(pi);
      break;
  }
}

void Engine::OnAck(uint32_t pi, const wire::View& v) {
  if (pi == kNone) {
    ++ctx.counters.stale_dropped;
    return;
  }
  const uint32_t inc = session.address(pi).incarnation;
  if (inc == 0 || v.common.src_incarnation != inc || !session[pi].rx_known) {
    ++ctx.counters.stale_dropped;
    return;
  }
  session.Heard(pi, v);
  if (v.common.flags & wire::kFlagAckReq) reliability.AckRequested(pi);  // a probe: answer it
  reliability.OnAck(pi, v.common, &v.ack);
}

bool Engine::OnSequenced(uint32_t pi, const wire::View& v, driver::Packet* pkt) {
  if (pi == kNone) {
    ++ctx.counters.stale_dropped;
    return false;
  }
  const uint32_t inc = session.address(pi).incarnation;
  if (inc == 0 || v.common.src_incarnation != inc) {
    ++ctx.counters.stale_dropped;
    return false;
  }
  if (!session[pi].rx_known) {
    ++ctx.counters.stale_dropped;
    session.QueueReset(v, wire::ResetReason::kNoSession,
                       (pkt->ol_flags & driver::kRxSameHost) != 0);
    return false;
  }
  session.Heard(pi, v);
  reliability.OnAck(pi, v.common, nullptr);
  switch (reliability.Arrive(pi, v, pkt)) {
    case Arrival::kDropped:
      return false;
    case Arrival::kHeld:
      return true;
    case Arrival::kInOrder:
      break;
  }
  if (!Consume(pi, v.common.type, v.msg, v.rma, v.payload)) {
    reliability.Refused(pi);
    return false;
  }
  reliability.Consumed(pi, v.common.type == wire::PacketType::kData ? v.msg.messages : 1);
  // What was held behind it, as far as it is contiguous. Taken or refused,
  // a held copy goes: a refused one is sent again.
  for (HeldPacket* h = reliability.NextHeld(pi); h != nullptr; h = reliability.NextHeld(pi)) {
    const bool taken = Consume(pi, h->type, h->msg, h->rma, h->payload());
    reliability.DropHeld(pi, h);
    if (!taken) {
      reliability.Refused(pi);
      break;
    }
    reliability.Consumed(pi, h->type == wire::PacketType::kData ? h->msg.messages : 1);
  }
  reliability.AfterReceive(pi, v.common.flags);
  return false;
}

bool Engine::Consume(uint32_t pi, wire::PacketType type, const wire::MsgFields& m,
                     const wire::RmaFields& r, absl::Span<const uint8_t> payload) {
  // Only another request to send offered in place joins the reads gathered
  // (Messaging::StartPull); anything else is taken after they complete.
  if (messaging.ReadsPending() &&
      (type != wire::PacketType::kData || m.protocol != wire::MsgProtocol::kRendezvous ||
       m.offer_pid == 0)) {
    messaging.FlushReads();
  }
  if (type == wire::PacketType::kData) {
    return (m.msg_flags & wire::kMsgBundle) ? messaging.ConsumeBundle(pi, m, payload)
                                           : messaging.ConsumeData(pi, m, payload);
  }
  if (messaging.Receiving(pi)) {
    // Ops never interleave in a stream: a message's segments are
    // consecutive. That one will never end; this packet is the next op.
    ++ctx.counters.protocol_errors;
    messaging.AbortReceive(pi, EPROTO, "broke its message framing; receive aborted");
  }
  // A rendezvous pull is Messaging's; other RMA is the Rma stage's.
  const bool message = (r.flags & wire::kRmaFlagMessage) != 0;
  switch (r.op) {
    case wire::RmaOp::kWrite:
      return rma.ConsumeWrite(pi, r, payload);
    case wire::RmaOp::kReadReq:
      return message ? messaging.ConsumePullRequest(pi, r) : rma.ConsumeReadRequest(pi, r);
    case wire::RmaOp::kReadData:
      if (message) {
        messaging.ConsumePulledData(pi, r, payload);
      } else {
        rma.ConsumeReadData(pi, r, payload);
      }
      return true;
    case wire::RmaOp::kResponse:
      if (message) {
        messaging.ConsumePullResponse(pi, r);
      } else {
        rma.ConsumeResponse(pi, r);
      }
      return true;
    case wire::RmaOp::kAtomic:
      return rma.ConsumeAtomic(pi, r, payload);
    case wire::RmaOp::kAtomicResp:
      rma.ConsumeAtomicResp(pi, r, payload);
      return true;
  }
  return true;
}

// ---- Timers.

bool Engine::Busy(uint32_t pi) const {
  // A receive directed to an established peer awaits it too: a dead sender
  // fails it (a peer never heard from may not have started yet).
  return reliability.Busy(pi) || messaging.Receiving(pi) || rma.Receiving(pi) ||
         session[pi].hello_wanted || (session[pi].established() && messaging.AwaitsFrom(pi));
}

void Engine::RunDueTimers() {
  ctx.timers().Expire(ctx.now, [&](uint32_t pi) { RunPeerTimers(pi); });
  ctx.next_timer_ns = ctx.timers().next_ns();
  AfterFreeing();
}

void Engine::RunPeerTimers(uint32_t pi) {
  if (!session.peers().in_use(pi)) return;
  // The floor is made again: what the stages arm from now on, and what
  // this pass finds ahead but Reliability's exact deadlines.
  ctx.ClearTimerFloor(pi);
  uint64_t next = UINT64_MAX, floor = UINT64_MAX;
  reliability.RunTimers(pi, &next, &floor);
  // Probed while only answers or its messages are awaited (nothing of
  // ours in flight would time a dead peer out).
  const bool awaited = reliability.OnlyWaiting(pi) ||
                       (messaging.AwaitsFrom(pi) && reliability.tx(pi).inflight() == 0);
  session.RunTimers(pi, awaited && session[pi].established(), &floor);
  if (Busy(pi)) CheckSilence(pi, &floor);
  // Its next deadline (the stages may have armed an earlier one meanwhile),
  // unless CheckSilence found it gone.
  if (!session.peers().in_use(pi)) return;
  ctx.SetTimerFloor(pi, floor);
  next = std::min(next, floor);
  if (next != UINT64_MAX) ctx.ArmExactTimer(pi, next);
}

uint64_t Engine::LivenessInterval() const {
  return std::max<uint64_t>(1, std::min<uint64_t>(ctx.config.peer_timeout_ns / 4, 100'000'000));
}

void Engine::CheckSilence(uint32_t pi, uint64_t* next) {
  SessionPeer& s = session[pi];
  const uint64_t silent = ctx.now - std::min(ctx.now, s.activity_ns);
  const uint64_t interval = LivenessInterval();
  using driver::PeerLiveness;
  PeerLiveness l = PeerLiveness::kUnknown;
  if (ctx.dev.peer_alive != nullptr) {
    const bool asked = s.liveness_at_ns > s.activity_ns;  // during this silence
    const uint64_t due = asked ? s.liveness_at_ns + interval : s.activity_ns + interval;
    if (ctx.now >= due) {
      const Address& a = session.address(pi);
      s.liveness = ctx.dev.peer_alive(ctx.dev.peer_alive_arg, a.ip, a.udp_port);
      s.liveness_at_ns = ctx.now;
      ++ctx.counters.liveness_checks;
      *next = std::min(*next, ctx.now + interval);
    } else {
      *next = std::min(*next, due);
    }
    if (s.liveness_at_ns > s.activity_ns) l = s.liveness;
  }
  char why[112];
  if (l == PeerLiveness::kDead) {
    // Sooner than any timeout, and certain: nothing will answer.
    ++ctx.counters.peers_dead;
    std::snprintf(why, sizeof(why), "is gone (its process exited; silent %.3f s); operation aborted",
                  static_cast<double>(silent) / 1e9);
    FailPeer(pi, ECONNRESET, why, /*keep_unsent=*/false);
    PeerGone(pi, ECONNRESET, why);
    return;
  }
  uint64_t limit = ctx.config.peer_timeout_ns;
  if (l == PeerLiveness::kAlive) limit = 0;  // computing, not gone: MPI ranks do for minutes
  if (l == PeerLiveness::kNoDeathSeen) limit = ctx.config.silent_peer_timeout_ns;
  if (limit == 0) return;
  if (silent < limit) {
    *next = std::min(*next, s.activity_ns + limit);
    return;
  }
  ++ctx.counters.peer_timeouts;
  std::snprintf(why, sizeof(why), "did not answer for %.3f s; operation timed out",
                static_cast<double>(limit) / 1e9);
  FailPeer(pi, ETIMEDOUT, why, /*keep_unsent=*/false);
  PeerGone(pi, ETIMEDOUT, why);
}

// ---- Transmitting.

size_t Engine::BuildTx(absl::Span<driver::Packet* const> bufs) {
  size_t n = session.HasResets() ? session.BuildResets(bufs) : 0;
  // Each peer queued now gets one turn of up to kPacketsPerTurn packets.
  for (uint32_t turns = ctx.queued_peers(); turns > 0 && n < bufs.size(); --turns) {
    const uint32_t pi = ctx.Dequeue();
    if (!session.peers().in_use(pi)) continue;  // removed since it was queued
    const size_t room = std::min<size_t>(bufs.size() - n, kPacketsPerTurn);
    n += BuildForPeer(pi, bufs.subspan(n, room));
    if (HasWork(pi)) ctx.Enqueue(pi);
  }
  return n;
}

size_t Engine::BuildForPeer(uint32_t pi, absl::Span<driver::Packet* const> bufs) {
  size_t n = 0;
  if (session.HandshakeOwed(pi)) {
    const wire::Common c = reliability.Header(pi, wire::PacketType::kHello, 0);
    const uint64_t retry = reliability.Rto(pi, session.hello_tries(pi));
    n = session.BuildHandshake(pi, c, reliability.Grant(pi), retry, bufs);
    if (n > 0) reliability.NoteAckSent(pi, /*standalone=*/false);
  }
  // Only an RNR ACK names the next message we take (a bundle refused part
  // way); any other Build leaves Messaging's peer record alone.
  const uint32_t next_msg = reliability.rx(pi).rnr_owed ? messaging.RxNextMsgId(pi) : 0;
  return n + reliability.Build(pi, &session[pi].probe_owed, bufs.subspan(n), next_msg);
}

// ---- Failure.

void Engine::FailPeer(uint32_t pi, int err, const char* why, bool keep_unsent) {
  // Send operations: those that put anything on the wire of this session
  // fail (and the engine's own: answers and pulls belong to the session);
  // the others wait for the next session if keep_unsent. (The streams'
  // busy part is read afresh after each change: an idle peer's goes back.)
  for (uint32_t o = reliability.tx_active(pi).ops.front(); o != kNone;) {
    const uint32_t next = ops[o].next;
    if (!keep_unsent || ops[o].started || !ops.IsUser(o)) {
      reliability.Unqueue(pi, o);
      FailOp(o, err, why);
    }
    o = next;
  }
  while (!reliability.tx_active(pi).waiting.empty()) {  // RMA and rendezvous waiting for its answer
    const uint32_t o = reliability.tx_active(pi).waiting.front();
    reliability.Unpark(pi, o);
    FailOp(o, err, why);
  }
  rma.EndSession(pi);
  messaging.EndSession(pi, err, why);
  reliability.ResetRx(pi);
  // A fresh session, to be shaken hands again when there is something to send.
  session.EndSession(pi, /*more_to_send=*/!reliability.tx_active(pi).ops.empty());
  reliability.RestartTx(pi);
}

void Engine::PeerGone(uint32_t pi, int err, const char* why) {
  messaging.FailDirected(pi, err, why);
  if (peer_failures_.size() >= ctx.config.max_peers) peer_failures_.pop_front();
  PeerFailure& f = peer_failures_.emplace_back();
  f.peer = session.peers().Id(pi);
  f.err = err;
  completions.NamePeer(f.message, sizeof(f.message), pi, why);
}

size_t Engine::PollPeerFailures(absl::Span<PeerFailure> out) {
  size_t n = 0;
  for (; n < out.size() && !peer_failures_.empty(); ++n) {
    out[n] = peer_failures_.front();
    peer_failures_.pop_front();
  }
  return n;
}

void Engine::FailOp(uint32_t o, int err, const char* why) {
  const SendOp& op = ops[o];
  switch (Traits(op.kind).on_fail) {
    case OnFail::kReport:
      if (!op.abandoned) completions.OpFailed(op, err, why);  // an abandoned one has had its error
      break;
    case OnFail::kFailReceive:
      messaging.PullFailed(o, err, why);
      break;
    case OnFail::kDrop:
      break;
  }
  ops.Free(o);
}

}  // namespace bypass::rdm
