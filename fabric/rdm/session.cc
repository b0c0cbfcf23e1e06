// Peers, handshakes, incarnations, restarts and RESETs (PROTOCOL.md,
// "Sessions").
#include "fabric/rdm/session.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "sodium.h"

namespace bypass::rdm {

Session::Session(Context& ctx, uint32_t max_peers)
    : ctx_(ctx),
      peers_(max_peers),
      state_(new SessionPeer[max_peers]),
      handshakes_(ctx.config.ActivePeers()),
      learned_limit_(std::max<uint32_t>(1, max_peers / 4)) {
  // Engine::Create has checked that libsodium initializes; the stage
  // tests build a Session on its own.
  if (sodium_init() < 0) {
    std::fprintf(stderr, "rdm engine: libsodium failed to initialize (no randomness?)\n");
    std::abort();
  }
  randombytes_buf(cookie_secret_.data(), cookie_secret_.size());
}

uint64_t Session::NewNonce() {
  // From the system's CSPRNG, not the engine's PRNG: a nonce is the proof
  // that an answer came from where our HELLO went, so no peer may predict
  // another's from the ISNs it sees. Never 0.
  uint64_t n = 0;
  while (n == 0) randombytes_buf(&n, sizeof(n));
  return n;
}

Handshake& Session::Record(uint32_t pi) {
  SessionPeer& s = state_[pi];
  if (s.hs == kNone) {
    s.hs = handshakes_.Take();
    handshakes_[s.hs].nonce = NewNonce();
  }
  return handshakes_[s.hs];
}

void Session::Settle(uint32_t pi) {
  const SessionPeer& s = state_[pi];
  if (s.hs == kNone || HelloPending(s) || s.hello_ack_owed || s.probing) return;
  if (handshakes_[s.hs].retired[0] != 0) return;  // retired fill from 0
  DropRecord(pi);
}

void Session::DropRecord(uint32_t pi) {
  SessionPeer& s = state_[pi];
  if (s.hs == kNone) return;
  handshakes_.Give(s.hs);
  s.hs = kNone;
}

void Session::Init(uint32_t pi, const Address& addr) {
  SessionPeer& s = state_[pi];
  DropRecord(pi);
  s = SessionPeer{};
  // Without a MAC the HELLO goes to every host on the segment; the peer's
  // answer teaches its MAC (Heard).
  s.mac_unknown = addr.mac == driver::MacAddress{};
  NewTxIsn(pi);
  // Its nonce is drawn with its handshake record, when a handshake starts.
  s.born = ++born_;
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
  if (!*added && !state_[pi].inserted) --learned_;
  state_[pi].inserted = true;
  return pi;
}

uint32_t Session::AddFromHello(const wire::View& v, bool* added) {
  *added = false;
  const Address addr{v.flow.src_mac, v.flow.src_ip, v.flow.src_port, 0};
  const uint32_t pi = learned_ >= learned_limit_ ? kNone : peers_.Add(addr);
  if (pi == kNone) {
    ++ctx_.counters.peer_table_full;
    return kNone;
  }
  Init(pi, addr);
  ++learned_;
  *added = true;
  return pi;
}

uint32_t Session::OldestLearned(absl::FunctionRef<bool(uint32_t)> pred) const {
  uint32_t best = kNone;
  for (uint32_t pi = 0; pi < peers_.size(); ++pi) {
    if (!peers_.in_use(pi) || state_[pi].inserted || !pred(pi)) continue;
    if (best == kNone || state_[pi].born < state_[best].born) best = pi;
  }
  return best;
}

void Session::Remove(uint32_t pi) {
  if (!state_[pi].inserted) --learned_;
  peers_.Remove(pi);
  DropRecord(pi);
  state_[pi] = SessionPeer{};
  ctx_.CancelTimer(pi);
}

const wire::MacKey* Session::KeyFor(bool same_host) const {
  const EndpointConfig& c = ctx_.config;
  if (same_host && c.same_host_key) return &*c.same_host_key;
  return c.handshake_key ? &*c.handshake_key : nullptr;
}

bool Session::Local(uint32_t pi) const {
  if (state_[pi].local) return true;
  const Address& a = peers_.address(pi);
  return ctx_.dev.reaches_same_host != nullptr &&
         ctx_.dev.reaches_same_host(ctx_.dev.reaches_same_host_arg, a.ip, a.udp_port);
}

uint32_t Session::OwnLimit(uint32_t pi) const {
  return ctx_.same_host_max_datagram > ctx_.max_datagram && Local(pi)
             ? ctx_.same_host_max_datagram
             : ctx_.max_datagram;
}

bool Session::Authentic(const wire::View& v, bool same_host) {
  if (wire::VerifyMac(v, KeyFor(same_host))) return true;
  ++ctx_.counters.handshake_auth_failed;
  return false;
}

bool Session::NeedsProof(uint32_t pi, const wire::View& v) const {
  if (pi == kNone) return true;
  const SessionPeer& s = state_[pi];
  return !s.rx_known || peers_.address(pi).incarnation != v.common.src_incarnation ||
         !(v.common.psn == s.rx_isn);
}

wire::Cookie Session::MakeCookie(const wire::View& v, uint64_t period) const {
  // What the HELLO claims (its source, incarnation, ISN and nonce) and when:
  // a valid cookie proves its sender received our COOKIE at that source
  // within the last period or two.
  uint8_t in[40];
  const uint32_t words[] = {v.flow.src_ip.value, v.flow.dst_ip.value,
                            uint32_t{v.flow.src_port} << 16 | v.flow.dst_port,
                            v.common.src_incarnation, v.common.psn.value()};
  std::memcpy(in, words, sizeof(words));
  std::memcpy(in + 20, &v.hello.nonce, 8);
  std::memcpy(in + 28, &period, 8);
  std::memset(in + 36, 0, 4);
  uint8_t full[crypto_auth_hmacsha256_BYTES];
  crypto_auth_hmacsha256(full, in, sizeof(in), cookie_secret_.data());
  wire::Cookie c;
  std::memcpy(c.data(), full, c.size());
  return c;
}

bool Session::CookieValid(const wire::View& v) {
  const wire::Cookie& got = v.hello.cookie;
  if (sodium_is_zero(got.data(), got.size())) return false;
  const uint64_t period = ctx_.now >> kCookiePeriodShift;
  for (uint64_t p : {period, period - 1}) {
    const wire::Cookie want = MakeCookie(v, p);
    if (crypto_verify_16(got.data(), want.data()) == 0) return true;
  }
  ++ctx_.counters.cookie_rejected;
  return false;
}

Session::PendingReset* Session::NextPending() {
  if (reset_count_ == kMaxPendingResets) return nullptr;
  PendingReset* r = &resets_[(reset_head_ + reset_count_) % kMaxPendingResets];
  ++reset_count_;
  return r;
}

void Session::QueueCookie(uint32_t pi, const wire::View& v, bool same_host) {
  PendingReset* r = NextPending();
  if (r == nullptr) {
    ++ctx_.counters.cookies_dropped;
    return;
  }
  r->type = wire::PacketType::kCookie;
  // To a peer's own address (its inserted MAC, or broadcast while unknown):
  // a forged frame claiming its IPv4 and port never has its cookie sent to
  // the forger's MAC.
  r->flow = pi != kNone ? Flow(pi)
                        : driver::UdpFlow{ctx_.dev.mac,          v.flow.src_mac, ctx_.dev.ip,
                                          v.flow.src_ip,         ctx_.config.udp_port,
                                          v.flow.src_port,       ctx_.dscp};
  r->dst_incarnation = v.common.src_incarnation;
  r->about_incarnation = 0;
  r->psn = v.common.psn;
  r->echo = v.hello.nonce;
  r->cookie = MakeCookie(v, ctx_.now >> kCookiePeriodShift);
  r->same_host = same_host;
}

bool Session::EchoesNonce(uint32_t pi, const wire::View& v) {
  // Without a record no HELLO of ours awaits an answer: nothing echoes.
  if (state_[pi].hs != kNone && v.hello.echo == handshakes_[state_[pi].hs].nonce) return true;
  ++ctx_.counters.handshake_unproven;
  return false;
}

SessionEvent Session::ClassifyIncarnation(uint32_t pi, uint32_t src) {
  const uint32_t current = peers_.address(pi).incarnation;
  if (IsRetired(pi, src)) {
    ++ctx_.counters.stale_dropped;
    return SessionEvent::kStale;
  }
  if (current != 0 && current != src) {
    ++ctx_.counters.peer_restarts;
    return SessionEvent::kRestarted;
  }
  return SessionEvent::kCurrent;
}

SessionEvent Session::ClassifyCookie(uint32_t pi, const wire::View& v) {
  const SessionEvent e = ClassifyIncarnation(pi, v.common.src_incarnation);
  if (e != SessionEvent::kCurrent) return e;
  // Only an established session can be proven gone: during a handshake
  // the peer may simply not have taken our HELLO yet (its answer to it is
  // on the way), so the COOKIE is taken and the handshake goes on.
  if (state_[pi].probing && state_[pi].established()) {
    ++ctx_.counters.peer_resets;
    return SessionEvent::kReset;
  }
  return SessionEvent::kCurrent;
}

void Session::TakeCookie(uint32_t pi, const wire::View& v) {
  SessionPeer& s = state_[pi];
  if (!HelloPending(s)) return;
  Handshake& h = handshakes_[s.hs];
  h.cookie = v.hello.cookie;
  h.hello_due_ns = ctx_.now;
  ctx_.Enqueue(pi);
}

void Session::Probe(uint32_t pi) {
  SessionPeer& s = state_[pi];
  // One probe at a time, its nonce kept: a flood of forged RESETs can
  // neither multiply probes nor keep the real answer from matching.
  if (s.probing) return;
  s.probing = true;
  Handshake& h = Record(pi);
  h.nonce = NewNonce();
  h.cookie = {};
  s.hello_wanted = true;
  h.hello_due_ns = ctx_.now;
  h.hello_tries = 0;
  ctx_.Enqueue(pi);
}

SessionEvent Session::ClassifyHello(uint32_t pi, const wire::View& v) {
  const SessionPeer& s = state_[pi];
  const SessionEvent e = ClassifyIncarnation(pi, v.common.src_incarnation);
  if (e != SessionEvent::kCurrent) return e;
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
}

void Session::Retire(uint32_t pi, uint32_t incarnation) {
  Handshake& h = Record(pi);
  h.retired[h.retired_next] = incarnation;
  h.retired_next = static_cast<uint8_t>((h.retired_next + 1) % h.retired.size());
}

bool Session::Accept(uint32_t pi, const wire::View& v) {
  SessionPeer& s = state_[pi];
  if (s.rx_known) return false;
  peers_.address(pi).incarnation = v.common.src_incarnation;
  s.rx_known = true;
  s.rx_isn = v.common.psn;
  // What we send it: its receive limit, within ours toward it (the
  // larger same-host limit only for a peer of this host).
  s.max_datagram = static_cast<uint16_t>(std::min<uint32_t>(v.hello.max_datagram, OwnLimit(pi)));
  s.sends_unchecked = (v.hello.capabilities & wire::kCapUnchecked) != 0;
  s.takes_bundles = (v.hello.capabilities & wire::kCapBundle) != 0;
  MaybeEstablished(pi);
  return true;
}

void Session::TxReady(uint32_t pi) {
  SessionPeer& s = state_[pi];
  s.tx_ready = true;
  s.hello_wanted = false;
  if (s.hs != kNone) handshakes_[s.hs].hello_tries = 0;
  MaybeEstablished(pi);
}

void Session::MaybeEstablished(uint32_t pi) {
  SessionPeer& s = state_[pi];
  if (s.established() && !s.counted_established) {
    s.counted_established = true;
    ++ctx_.counters.handshakes;
    // The handshake's answers have come: a copy of one replayed later
    // proves nothing (its nonce goes with the record, or is drawn anew).
    if (s.hs != kNone) handshakes_[s.hs].nonce = NewNonce();
  }
  Settle(pi);
}

SessionEvent Session::ClassifyReset(uint32_t pi, const wire::View& v, bool in_session) {
  const SessionPeer& s = state_[pi];
  const uint32_t src = v.common.src_incarnation;
  const uint32_t current = peers_.address(pi).incarnation;
  if (IsRetired(pi, src) || current == 0) {
    ++ctx_.counters.stale_dropped;
    return SessionEvent::kStale;
  }
  switch (v.reset.reason) {
    case wire::ResetReason::kUnknownIncarnation:
      // "You sent to incarnation X of me, which is not me": news only if X
      // is the one we believe current.
      if (v.reset.incarnation != current || src == current) break;
      return SessionEvent::kRestarted;
    case wire::ResetReason::kNoSession:
      // "I know you but have no session": news only about our current one.
      if (src != current || !s.tx_ready || !in_session) break;
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
  s.hello_wanted = more_to_send;
  s.probe_owed = false;  // a probe asks about the session that ended
  s.probing = false;
  if (s.hs != kNone || more_to_send) {
    Handshake& h = Record(pi);
    h.hello_tries = 0;
    h.hello_due_ns = ctx_.now;
    h.nonce = NewNonce();
    h.cookie = {};
  }
  Settle(pi);
  if (more_to_send) {
    s.activity_ns = ctx_.now;
    ctx_.ArmTimer(pi, ctx_.now + ctx_.config.peer_timeout_ns);
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
  // A HELLO pending or a HELLO_ACK owed has a record: without one nothing is owed.
  if (s.hs == kNone) return 0;
  Handshake& hs = handshakes_[s.hs];
  wire::HelloFields h;
  h.nonce = hs.nonce;
  const bool local = Local(pi);
  // The larger same-host limit to a peer of this host only: a remote peer
  // sent frames longer than the remote device's would lose them all.
  h.max_datagram = static_cast<uint16_t>(local ? ctx_.same_host_max_datagram : ctx_.max_datagram);
  // Its frames reach us through memory only: it may skip the CRC.
  if (ctx_.dev.integrity || local) h.capabilities = wire::kCapUnchecked;
  // We take bundles (Messaging::ConsumeBundle).
  h.capabilities |= wire::kCapBundle;
  const wire::MacKey* key = KeyFor(local);
  size_t n = 0;
  const auto build = [&](wire::PacketType type) {
    c.type = type;
    driver::Packet* pkt = bufs[n++];
    pkt->len =
        static_cast<uint32_t>(wire::BuildHello(Flow(pi), c, h, key, {pkt->data, pkt->capacity}));
    ++ctx_.counters.tx_packets;
  };
  if (HelloPending(s) && hs.hello_due_ns <= ctx_.now && n < bufs.size()) {
    // A probe names no incarnation of the peer: a restarted one answers it
    // (with a COOKIE) instead of another RESET.
    const uint32_t dst = c.dst_incarnation;
    if (s.probing) c.dst_incarnation = 0;
    h.cookie = hs.cookie;
    build(wire::PacketType::kHello);
    c.dst_incarnation = dst;
    h.cookie = {};
    // Repeated after the RTO, doubling each time (the initial RTO before
    // any round trip was measured).
    hs.hello_due_ns = ctx_.now + retry_ns;
    ++hs.hello_tries;
    ctx_.ArmTimer(pi, hs.hello_due_ns);
  }
  if (s.hello_ack_owed && n < bufs.size()) {
    h.echo = hs.peer_nonce;
    build(wire::PacketType::kHelloAck);
    s.hello_ack_owed = false;
    Settle(pi);
  }
  return n;
}

void Session::RunDueTimers(uint32_t pi, bool probe, uint64_t* next) {
  SessionPeer& s = state_[pi];
  const uint64_t now = ctx_.now;
  if (HelloPending(s)) {
    const uint64_t due = handshakes_[s.hs].hello_due_ns;
    if (due <= now) ctx_.Enqueue(pi);
    *next = std::min(*next, std::max(due, now));
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

void Session::QueueReset(const wire::View& v, wire::ResetReason reason, bool same_host) {
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
  PendingReset* r = NextPending();
  if (r == nullptr) return;
  *last = ResetSent{true, key, ctx_.now};
  r->type = wire::PacketType::kReset;
  r->flow = driver::UdpFlow{ctx_.dev.mac,          v.flow.src_mac,  ctx_.dev.ip, v.flow.src_ip,
                            ctx_.config.udp_port, v.flow.src_port, ctx_.dscp};
  r->dst_incarnation = v.common.src_incarnation;
  r->about_incarnation = v.common.dst_incarnation;
  r->psn = v.common.psn;
  r->reason = reason;
  r->same_host = same_host;
}

size_t Session::BuildResets(absl::Span<driver::Packet* const> bufs) {
  size_t n = 0;
  while (n < bufs.size() && reset_count_ > 0) {
    const PendingReset& r = resets_[reset_head_];
    wire::Common c;
    c.type = r.type;
    c.src_incarnation = ctx_.incarnation;
    c.dst_incarnation = r.dst_incarnation;
    c.auth_key = ctx_.config.auth_key;
    c.psn = r.psn;
    const wire::MacKey* key = KeyFor(r.same_host);
    driver::Packet* pkt = bufs[n++];
    if (r.type == wire::PacketType::kCookie) {
      wire::HelloFields h;
      h.max_datagram =
          static_cast<uint16_t>(r.same_host ? ctx_.same_host_max_datagram : ctx_.max_datagram);
      h.echo = r.echo;
      h.cookie = r.cookie;
      pkt->len = static_cast<uint32_t>(
          wire::BuildHello(r.flow, c, h, key, {pkt->data, pkt->capacity}));
      ++ctx_.counters.cookies_sent;
    } else {
      wire::ResetFields f;
      f.reason = r.reason;
      f.incarnation = r.about_incarnation;
      pkt->len = static_cast<uint32_t>(
          wire::BuildReset(r.flow, c, f, key, {pkt->data, pkt->capacity}));
      ++ctx_.counters.resets_sent;
    }
    ++ctx_.counters.tx_packets;
    reset_head_ = (reset_head_ + 1) % kMaxPendingResets;
    --reset_count_;
  }
  return n;
}

}  // namespace bypass::rdm
