// Sessions: the handshake, incarnations, restarts and RESETs.
#include <cerrno>
#include <cstdint>

#include "fabric/rdm/engine.h"

namespace bypass::rdm {

bool Engine::SessionFromHello(uint32_t pi, const wire::View& v) {
  Peer& p = peers_[pi];
  const uint32_t src = v.common.src_incarnation;
  if (p.IsRetired(src)) {
    ++counters_.stale_dropped;
    return false;
  }
  if (p.addr.incarnation != 0 && p.addr.incarnation != src) {
    ++counters_.peer_restarts;
    const uint32_t old = p.addr.incarnation;
    FailPeer(pi, ECONNRESET, "restarted; operation aborted", /*keep_unsent=*/true);
    p.Retire(old);
  } else if (p.rx_known && !(v.common.psn == p.rx_isn)) {
    // Same incarnation, new initial PSN: it dropped our session (timeout).
    ++counters_.peer_resets;
    FailPeer(pi, ECONNRESET, "reset its session; operation aborted", /*keep_unsent=*/true);
  }
  p.activity_ns = now_;
  ArmTimer(now_ + config_.peer_timeout_ns);
  if (p.mac_unknown) {
    // Inserted without a MAC: this HELLO or HELLO_ACK passed the CRC and
    // the session checks, so its source MAC is the peer's (or its router's).
    p.mac_unknown = false;
    p.addr.mac = v.flow.src_mac;
    p.flow.dst_mac = v.flow.src_mac;
  }
  if (!p.rx_known) AcceptSession(p, v);
  return true;
}

void Engine::AcceptSession(Peer& p, const wire::View& v) {
  p.addr.incarnation = v.common.src_incarnation;
  p.rx_known = true;
  p.rx_isn = p.rcv_nxt = p.highest_held = v.common.psn;
  p.rx_next_msg_id = 0;
  p.max_datagram = v.hello.max_datagram;
  if (!p.tx_ready) p.window_end = p.snd_una + v.common.credit;
  MaybeEstablished(p);
}

void Engine::MaybeEstablished(Peer& p) {
  if (p.rx_known && p.tx_ready && !p.counted_established) {
    p.counted_established = true;
    ++counters_.handshakes;
  }
}

void Engine::OnHello(uint32_t pi, const wire::View& v) {
  if (pi == kNone) {
    pi = peers_.Add(v.flow.src_ip.value, v.flow.src_port);
    if (pi == kNone) {
      ++counters_.peer_table_full;
      return;
    }
    InitPeer(pi, v.flow.src_mac, v.flow.src_ip, v.flow.src_port, 0);
  }
  if (!SessionFromHello(pi, v)) return;
  Peer& p = peers_[pi];
  p.hello_ack_owed = true;
  OnAck(pi, p, v.common, nullptr);
  Enqueue(pi);
}

void Engine::OnHelloAck(uint32_t pi, const wire::View& v) {
  if (pi == kNone) {
    ++counters_.stale_dropped;
    return;
  }
  if (!SessionFromHello(pi, v)) return;
  Peer& p = peers_[pi];
  OnAck(pi, p, v.common, nullptr);
  if (HasWork(p)) Enqueue(pi);
}

void Engine::OnReset(uint32_t pi, const wire::View& v) {
  if (pi == kNone) {
    ++counters_.stale_dropped;
    return;
  }
  Peer& p = peers_[pi];
  const uint32_t src = v.common.src_incarnation;
  if (p.IsRetired(src) || p.addr.incarnation == 0) {
    ++counters_.stale_dropped;
    return;
  }
  switch (v.reset.reason) {
    case wire::ResetReason::kUnknownIncarnation: {
      // "You sent to incarnation X of me, which is not me": news only if X
      // is the one we believe current.
      if (v.reset.incarnation != p.addr.incarnation || src == p.addr.incarnation) {
        ++counters_.stale_dropped;
        return;
      }
      ++counters_.peer_restarts;
      const uint32_t old = p.addr.incarnation;
      FailPeer(pi, ECONNRESET, "restarted; operation aborted", /*keep_unsent=*/true);
      p.Retire(old);
      p.addr.incarnation = src;
      break;
    }
    case wire::ResetReason::kNoSession:
      // "I know you but have no session": news only about our current one.
      if (src != p.addr.incarnation || !p.tx_ready || v.common.psn.Before(p.snd_una) ||
          !v.common.psn.Before(p.next_psn)) {
        ++counters_.stale_dropped;
        return;
      }
      ++counters_.peer_resets;
      FailPeer(pi, ECONNRESET, "lost our session (it timed out); operation aborted",
               /*keep_unsent=*/true);
      break;
  }
  if (HasWork(p)) Enqueue(pi);
}

void Engine::QueueReset(const wire::View& v, wire::ResetReason reason) {
  if (v.common.type == wire::PacketType::kReset) return;  // never answer a RESET
  const uint64_t key = uint64_t{v.flow.src_ip.value} << 16 | v.flow.src_port;
  ResetSent& last = reset_cache_[(key * 0x9e3779b97f4a7c15ull) >> 60];
  if (last.valid && last.key == key && now_ - last.at_ns < config_.reset_interval_ns) return;
  if (reset_count_ == kMaxPendingResets) return;
  last = ResetSent{true, key, now_};
  PendingReset& r = resets_[(reset_head_ + reset_count_) % kMaxPendingResets];
  ++reset_count_;
  r.flow = driver::UdpFlow{dev_.mac,         v.flow.src_mac,  dev_.ip, v.flow.src_ip,
                           config_.udp_port, v.flow.src_port, dscp_};
  r.dst_incarnation = v.common.src_incarnation;
  r.about_incarnation = v.common.dst_incarnation;
  r.psn = v.common.psn;
  r.reason = reason;
}

}  // namespace bypass::rdm
