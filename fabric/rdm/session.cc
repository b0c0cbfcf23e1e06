// Peers, handshakes, incarnations, restarts and RESETs (PROTOCOL.md,
// "Sessions").
#include "fabric/rdm/session.h"

#include <algorithm>
#include <cstdint>

namespace bypass::rdm {

Session::Session(Context& ctx, uint32_t max_peers)
    : ctx_(ctx), peers_(max_peers), state_(new SessionPeer[max_peers]) {}

void Session::Init(uint32_t pi, const Address& addr) {
  SessionPeer& s = state_[pi];
  s = SessionPeer{};
  // Without a MAC the HELLO goes to every host on the segment; the peer's
  // answer teaches its MAC (Heard).
  s.mac_unknown = addr.mac == driver::MacAddress{};
  s.flow = driver::UdpFlow{ctx_.dev.mac,
                           s.mac_unknown ? driver::kBroadcastMac : addr.mac,
                           ctx_.dev.ip,
                           addr.ip,
                           ctx_.config.udp_port,
                           addr.udp_port,
                           ctx_.dscp};
  NewTxIsn(pi);
}

uint32_t Session::Insert(const Address& addr, bool* added) {
  uint32_t pi = peers_.Find(addr.ip.value, addr.udp_port);
  *added = false;
  if (pi == kNone) {
    pi = peers_.Add(addr);
    if (pi == kNone) return kNone;
    Init(pi, addr);
    *added = true;
  }
  state_[pi].inserted = true;
  return pi;
}

uint32_t Session::AddFromHello(const wire::View& v, bool* added) {
  *added = false;
  const Address addr{v.flow.src_mac, v.flow.src_ip, v.flow.src_port, 0};
  const uint32_t pi = peers_.Add(addr);
  if (pi == kNone) {
    ++ctx_.counters.peer_table_full;
    return kNone;
  }
  Init(pi, addr);
  *added = true;
  return pi;
}

void Session::Remove(uint32_t pi) {
  peers_.Remove(pi);
  state_[pi] = SessionPeer{};
}

SessionEvent Session::ClassifyHello(uint32_t pi, const wire::View& v) {
  const SessionPeer& s = state_[pi];
  const uint32_t src = v.common.src_incarnation;
  const uint32_t current = peers_.address(pi).incarnation;
  if (s.IsRetired(src)) {
    ++ctx_.counters.stale_dropped;
    return SessionEvent::kStale;
  }
  if (current != 0 && current != src) {
    ++ctx_.counters.peer_restarts;
    return SessionEvent::kRestarted;
  }
  if (s.rx_known && !(v.common.psn == s.rx_isn)) {
    // Same incarnation, new initial PSN: it dropped our session (timeout).
    ++ctx_.counters.peer_resets;
    return SessionEvent::kReset;
  }
  return SessionEvent::kCurrent;
}

void Session::LearnMac(uint32_t pi, const wire::View& v) {
  // Inserted without a MAC: a HELLO or HELLO_ACK that passed the CRC and the
  // session checks has the peer's MAC (or its router's) as its source.
  if (v.common.type != wire::PacketType::kHello && v.common.type != wire::PacketType::kHelloAck) {
    return;
  }
  SessionPeer& s = state_[pi];
  s.mac_unknown = false;
  peers_.address(pi).mac = v.flow.src_mac;
  s.flow.dst_mac = v.flow.src_mac;
}

void Session::Retire(uint32_t pi, uint32_t incarnation) {
  SessionPeer& s = state_[pi];
  s.retired[s.retired_next] = incarnation;
  s.retired_next = static_cast<uint8_t>((s.retired_next + 1) % s.retired.size());
}

bool Session::Accept(uint32_t pi, const wire::View& v) {
  SessionPeer& s = state_[pi];
  if (s.rx_known) return false;
  peers_.address(pi).incarnation = v.common.src_incarnation;
  s.rx_known = true;
  s.rx_isn = v.common.psn;
  s.max_datagram = v.hello.max_datagram;
  MaybeEstablished(s);
  return true;
}

void Session::TxReady(uint32_t pi) {
  SessionPeer& s = state_[pi];
  s.tx_ready = true;
  s.hello_wanted = false;
  s.hello_tries = 0;
  MaybeEstablished(s);
}

void Session::MaybeEstablished(SessionPeer& s) {
  if (s.established() && !s.counted_established) {
    s.counted_established = true;
    ++ctx_.counters.handshakes;
  }
}

SessionEvent Session::ClassifyReset(uint32_t pi, const wire::View& v, bool in_session) {
  const SessionPeer& s = state_[pi];
  const uint32_t src = v.common.src_incarnation;
  const uint32_t current = peers_.address(pi).incarnation;
  if (s.IsRetired(src) || current == 0) {
    ++ctx_.counters.stale_dropped;
    return SessionEvent::kStale;
  }
  switch (v.reset.reason) {
    case wire::ResetReason::kUnknownIncarnation:
      // "You sent to incarnation X of me, which is not me": news only if X
      // is the one we believe current.
      if (v.reset.incarnation != current || src == current) break;
      ++ctx_.counters.peer_restarts;
      return SessionEvent::kRestarted;
    case wire::ResetReason::kNoSession:
      // "I know you but have no session": news only about our current one.
      if (src != current || !s.tx_ready || !in_session) break;
      ++ctx_.counters.peer_resets;
      return SessionEvent::kReset;
  }
  ++ctx_.counters.stale_dropped;
  return SessionEvent::kStale;
}

void Session::EndSession(uint32_t pi, bool more_to_send) {
  SessionPeer& s = state_[pi];
  NewTxIsn(pi);
  s.tx_ready = false;
  s.rx_known = false;
  s.counted_established = false;
  s.hello_ack_owed = false;
  s.hello_tries = 0;
  s.hello_wanted = more_to_send;
  s.hello_due_ns = ctx_.now;
  s.probe_owed = false;  // a probe asks about the session that ended
  if (more_to_send) {
    s.activity_ns = ctx_.now;
    ctx_.Enqueue(pi);
  }
}

size_t Session::BuildHandshake(uint32_t pi, wire::Common c, uint16_t credit, uint64_t retry_ns,
                               absl::Span<driver::Packet* const> bufs) {
  SessionPeer& s = state_[pi];
  // HELLO and HELLO_ACK name the session by its initial PSN and grant the
  // window whether or not the peer's direction is known yet.
  c.psn = s.tx_isn;
  c.credit = credit;
  wire::HelloFields h;
  h.max_datagram = static_cast<uint16_t>(ctx_.max_datagram);
  size_t n = 0;
  const auto build = [&](wire::PacketType type) {
    c.type = type;
    driver::Packet* pkt = bufs[n++];
    pkt->len = static_cast<uint32_t>(wire::BuildHello(s.flow, c, h, {pkt->data, pkt->capacity}));
    ++ctx_.counters.tx_packets;
  };
  if (!s.tx_ready && s.hello_wanted && s.hello_due_ns <= ctx_.now && n < bufs.size()) {
    build(wire::PacketType::kHello);
    // Repeated after the RTO, doubling each time (the initial RTO before
    // any round trip was measured).
    s.hello_due_ns = ctx_.now + retry_ns;
    ++s.hello_tries;
    ctx_.ArmTimer(s.hello_due_ns);
  }
  if (s.hello_ack_owed && n < bufs.size()) {
    build(wire::PacketType::kHelloAck);
    s.hello_ack_owed = false;
  }
  return n;
}

void Session::RunDueTimers(uint32_t pi, bool probe, uint64_t* next) {
  SessionPeer& s = state_[pi];
  const uint64_t now = ctx_.now;
  if (s.hello_wanted && !s.tx_ready) {
    if (s.hello_due_ns <= now) ctx_.Enqueue(pi);
    *next = std::min(*next, std::max(s.hello_due_ns, now));
  }
  // Only waiting (a pull not asked for yet, an answer not sent yet), nothing
  // in flight to time out: ask the peer for an ACK now and then, so that a
  // live peer keeps the op alive and a dead one times it out.
  if (!probe) return;
  const uint64_t interval = std::max<uint64_t>(1, ctx_.config.peer_timeout_ns / 4);
  const uint64_t due = std::max(s.activity_ns + interval, s.probe_due_ns);
  if (now < due) {
    *next = std::min(*next, due);
    return;
  }
  s.probe_owed = true;
  s.probe_due_ns = now + interval;
  *next = std::min(*next, s.probe_due_ns);
  ctx_.Enqueue(pi);
}

void Session::QueueReset(const wire::View& v, wire::ResetReason reason) {
  if (v.common.type == wire::PacketType::kReset) return;  // never answer a RESET
  const uint64_t key = uint64_t{v.flow.src_ip.value} << 16 | v.flow.src_port;
  // At most one RESET per source per interval: the sources that had one
  // lately are remembered, the least recent forgotten first, so the limit
  // holds for every source while at most kResetCacheSize draw RESETs at
  // once. (A cold path: only stale or stray packets come here.)
  ResetSent* last = &reset_cache_[0];
  for (ResetSent& r : reset_cache_) {
    if (r.valid && r.key == key) {
      last = &r;
      break;
    }
    if (!r.valid || (last->valid && r.at_ns < last->at_ns)) last = &r;
  }
  if (last->valid && last->key == key &&
      ctx_.now - last->at_ns < ctx_.config.reset_interval_ns) {
    return;
  }
  if (reset_count_ == kMaxPendingResets) return;
  *last = ResetSent{true, key, ctx_.now};
  PendingReset& r = resets_[(reset_head_ + reset_count_) % kMaxPendingResets];
  ++reset_count_;
  r.flow = driver::UdpFlow{ctx_.dev.mac,          v.flow.src_mac,  ctx_.dev.ip, v.flow.src_ip,
                           ctx_.config.udp_port, v.flow.src_port, ctx_.dscp};
  r.dst_incarnation = v.common.src_incarnation;
  r.about_incarnation = v.common.dst_incarnation;
  r.psn = v.common.psn;
  r.reason = reason;
}

size_t Session::BuildResets(absl::Span<driver::Packet* const> bufs) {
  size_t n = 0;
  while (n < bufs.size() && reset_count_ > 0) {
    const PendingReset& r = resets_[reset_head_];
    wire::Common c;
    c.type = wire::PacketType::kReset;
    c.src_incarnation = ctx_.incarnation;
    c.dst_incarnation = r.dst_incarnation;
    c.auth_key = ctx_.config.auth_key;
    c.psn = r.psn;
    wire::ResetFields f;
    f.reason = r.reason;
    f.incarnation = r.about_incarnation;
    driver::Packet* pkt = bufs[n++];
    pkt->len = static_cast<uint32_t>(wire::BuildReset(r.flow, c, f, {pkt->data, pkt->capacity}));
    ++ctx_.counters.tx_packets;
    ++ctx_.counters.resets_sent;
    reset_head_ = (reset_head_ + 1) % kMaxPendingResets;
    --reset_count_;
  }
  return n;
}

}  // namespace bypass::rdm
