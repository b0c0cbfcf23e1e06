// The receive path: the dispatcher over packet types, and DATA from arrival
// (in order, held, duplicate, refused) to delivery into receives.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "fabric/rdm/engine.h"

namespace bypass::rdm {

void Engine::HandleRx(absl::Span<driver::Packet* const> pkts) {
  for (driver::Packet* p : pkts) HandleFrame(p);
}

void Engine::HandleFrame(driver::Packet* pkt) {
  ++counters_.rx_packets;
  wire::View v;
  const wire::ParseStatus status = wire::Parse({pkt->data, pkt->len}, &v);
  if (status != wire::ParseStatus::kOk) {
    if (status == wire::ParseStatus::kBadChecksum) {
      ++counters_.checksum_dropped;
    } else {
      ++counters_.malformed_dropped;
    }
    Release(pkt);
    return;
  }
  const wire::Common& c = v.common;
  if (v.flow.dst_ip != dev_.ip || v.flow.dst_port != config_.udp_port) {
    ++counters_.not_for_us_dropped;
    Release(pkt);
    return;
  }
  if (c.auth_key != config_.auth_key) {
    ++counters_.auth_dropped;
    Release(pkt);
    return;
  }
  if (c.dst_incarnation != incarnation_) {
    if (c.dst_incarnation != 0) {
      // Sent to an earlier life of this endpoint: say so, so the sender
      // learns of the restart now rather than after its timeout.
      ++counters_.stale_dropped;
      QueueReset(v, wire::ResetReason::kUnknownIncarnation);
      Release(pkt);
      return;
    }
    if (c.type != wire::PacketType::kHello) {
      ++counters_.malformed_dropped;
      Release(pkt);
      return;
    }
  }
  const uint32_t pi = peers_.Find(v.flow.src_ip.value, v.flow.src_port);
  bool held = false;
  // The dispatcher: the one switch over packet types in the engine.
  switch (c.type) {
    case wire::PacketType::kHello:
      OnHello(pi, v);
      break;
    case wire::PacketType::kHelloAck:
      OnHelloAck(pi, v);
      break;
    case wire::PacketType::kReset:
      OnReset(pi, v);
      break;
    case wire::PacketType::kAck:
      OnAckPacket(pi, v);
      break;
    case wire::PacketType::kData:
    case wire::PacketType::kRma:
      held = OnData(pi, v, pkt);
      break;
  }
  if (!held) Release(pkt);
}

bool Engine::OnData(uint32_t pi, const wire::View& v, driver::Packet* pkt) {
  if (pi == kNone) {
    ++counters_.stale_dropped;
    return false;
  }
  Peer& p = peers_[pi];
  if (p.addr.incarnation == 0 || v.common.src_incarnation != p.addr.incarnation) {
    ++counters_.stale_dropped;
    return false;
  }
  if (!p.rx_known) {
    ++counters_.stale_dropped;
    QueueReset(v, wire::ResetReason::kNoSession);
    return false;
  }
  p.activity_ns = now_;
  ArmTimer(now_ + config_.peer_timeout_ns);
  OnAck(pi, p, v.common, nullptr);
  const int32_t d = v.common.psn - p.rcv_nxt;
  if (d < 0) {
    // A retransmission of something we have: our ACK was lost or late.
    ++counters_.duplicates_dropped;
    p.ack_now = true;
    Enqueue(pi);
    return false;
  }
  if (static_cast<uint32_t>(d) >= config_.window_packets) {
    ++counters_.out_of_window_dropped;
    return false;
  }
  if (d > 0) return HoldOutOfOrder(pi, p, v, pkt);
  // In order. (The held slot of rcv_nxt is always empty here: DrainHeld
  // consumes or drops it whenever rcv_nxt reaches it.)
  if (!ConsumeSequenced(pi, p, v.common.type, v.msg, v.rma, v.payload)) {
    Refuse(pi, p);
    return false;
  }
  ++p.rcv_nxt;
  ++p.unacked_rx;
  ++counters_.rx_data_packets;
  DrainHeld(pi, p);
  AfterReceive(pi, p, v.common.flags);
  return false;
}

bool Engine::HoldOutOfOrder(uint32_t pi, Peer& p, const wire::View& v, driver::Packet* pkt) {
  const Psn psn = v.common.psn;
  HeldPacket& h = p.held_at(psn);
  if (h.pkt != nullptr) {
    ++counters_.duplicates_dropped;
    p.ack_now = true;
    p.ack_standalone = true;
    Enqueue(pi);
    return false;
  }
  if (held_total_ >= held_budget_) {
    ++counters_.reorder_buffer_full;
    return false;
  }
  h.pkt = pkt;
  h.type = v.common.type;
  h.msg = v.msg;
  h.rma = v.rma;
  h.payload_offset = static_cast<uint32_t>(v.payload.data() - pkt->data);
  h.payload_len = static_cast<uint32_t>(v.payload.size());
  ++p.held_count;
  ++held_total_;
  bool new_hole = p.held_count == 1;
  if (p.held_count == 1 || psn.After(p.highest_held)) {
    new_hole = new_hole || (psn - p.highest_held) > 1;
    p.highest_held = psn;
  }
  // A gap: SACK at once while the sender may still be short of its
  // fast-retransmit threshold, and whenever a new hole opens.
  if (new_hole || p.held_count <= config_.fast_retransmit_threshold) {
    p.ack_now = true;
    p.ack_standalone = true;
    Enqueue(pi);
  } else {
    ++p.unacked_rx;
    AfterReceive(pi, p, v.common.flags);
  }
  return true;
}

void Engine::DrainHeld(uint32_t pi, Peer& p) {
  while (p.held_count > 0) {
    HeldPacket& h = p.held_at(p.rcv_nxt);
    if (h.pkt == nullptr) break;
    driver::Packet* pkt = h.pkt;
    const bool taken = ConsumeSequenced(pi, p, h.type, h.msg, h.rma,
                                        {pkt->data + h.payload_offset, h.payload_len});
    // Taken or refused, the copy goes: a refused one is sent again.
    h.pkt = nullptr;
    --p.held_count;
    --held_total_;
    Release(pkt);
    if (!taken) {
      Refuse(pi, p);
      break;
    }
    ++p.rcv_nxt;
    ++p.unacked_rx;
    ++counters_.rx_data_packets;
  }
}

void Engine::Refuse(uint32_t pi, Peer& p) {
  ++counters_.rnr_sent;
  p.rnr_owed = true;
  if (!p.rx_refused) {
    p.rx_refused = true;
    ++refused_peers_;
  }
  Enqueue(pi);
}

void Engine::AfterReceive(uint32_t pi, Peer& p, uint16_t flags) {
  if ((flags & wire::kFlagAckReq) != 0 || p.unacked_rx >= config_.ack_every_packets) {
    p.ack_now = true;
  }
  if (p.ack_now && p.held_count > 0) p.ack_standalone = true;
  if (p.ack_now || p.ack_standalone) {
    Enqueue(pi);
  } else if (p.unacked_rx > 0 && p.ack_deadline == 0) {
    p.ack_deadline = now_ + config_.ack_delay_ns;
    ArmTimer(p.ack_deadline);
  }
}

bool Engine::ConsumeData(uint32_t pi, Peer& p, const wire::MsgFields& m,
                         absl::Span<const uint8_t> payload) {
  RxMessage& r = p.rx_msg;
  const PeerId src = peers_.Id(pi);
  if (!r.active && p.rx_skip && m.msg_id == p.rx_next_msg_id - 1) {
    return true;  // the rest of a message its sender abandoned
  }
  if (m.msg_flags & wire::kMsgAbandoned) {
    if (r.active && m.msg_id == r.msg_id) {
      // We took an older copy of its first segment after its sender gave it
      // up: the rest never comes. The message number is spent.
      AbortRxMessage(pi, p, ECANCELED, "gave the message up (refused too long); receive aborted");
      p.rx_skip = true;
      return true;
    }
    // Its sender gave it up before we took its first segment: nothing to
    // deliver, but the message number is spent.
    if (r.active || m.offset != 0 || m.msg_id != p.rx_next_msg_id) {
      ++counters_.protocol_errors;
      return true;
    }
    ++p.rx_next_msg_id;
    p.rx_skip = true;
    return true;
  }
  if (!r.active) {
    if (m.offset != 0 || m.msg_id != p.rx_next_msg_id) {
      ++counters_.protocol_errors;
      return true;  // acknowledged and dropped: it can never fit
    }
    if (m.protocol == wire::MsgProtocol::kRendezvous) return ConsumeRts(pi, p, m);
    const bool tagged = (m.msg_flags & wire::kMsgTagged) != 0;
    // A multi-receive needs a completion of its own for each message.
    const bool cq_room = cq_.Reserve();
    uint64_t base = 0;
    uint32_t index = matcher_.MatchPosted(tagged, src, m.tag, m.total_length, cq_room, &base);
    if (cq_room && (index == kNone || (matcher_.recv(index).flags & kRecvMulti) == 0)) {
      cq_.Unreserve();
    }
    RxSink sink = RxSink::kPosted;
    if (index == kNone) {
      index = matcher_.Admit(src, tagged, m.tag, m.data, m.msg_flags, m.total_length);
      // No room to buffer it: not acknowledged, so the sender backs off.
      if (index == kNone) return false;
      sink = RxSink::kUnexpected;
      ++counters_.unexpected_msgs;
      NoteUnexpectedDepth();
    }
    r.active = true;
    r.msg_id = m.msg_id;
    r.total = m.total_length;
    r.received = 0;
    r.msg_flags = m.msg_flags;
    r.tag = m.tag;
    r.data = m.data;
    r.sink = sink;
    r.index = index;
    r.base = base;
    p.rx_skip = false;
  } else if (m.msg_id != r.msg_id || m.offset != r.received || m.total_length != r.total) {
    ++counters_.protocol_errors;
    AbortRxMessage(pi, p, EPROTO, "broke its message framing; receive aborted");
    return ConsumeData(pi, p, m, payload);  // perhaps the next message: as one
  }
  if (r.sink == RxSink::kPosted) {
    const RecvRequest& q = matcher_.recv(r.index);
    // A multi-receive handed this message exactly its length.
    const uint64_t cap = (q.flags & kRecvMulti) ? r.total : q.len;
    if (r.received < cap && !payload.empty()) {
      const uint64_t n = std::min<uint64_t>(payload.size(), cap - r.received);
      std::memcpy(static_cast<uint8_t*>(q.buf) + r.base + r.received, payload.data(), n);
    }
  } else if (r.sink == RxSink::kUnexpected) {
    matcher_.Append(r.index, payload);
  }
  r.received += payload.size();
  if (r.received == r.total) {
    if (r.sink == RxSink::kPosted) {
      uint64_t flags = 0;
      const RecvRequest q = EndRecvSlot(r.index, r, &flags);
      CompleteRecv(src, q, r, flags);
    } else if (r.sink == RxSink::kUnexpected) {
      matcher_.unexpected(r.index).complete = true;
    }
    r.active = false;
    ++p.rx_next_msg_id;
  }
  return true;
}

void Engine::AbortRxMessage(uint32_t pi, Peer& p, int err, const char* why) {
  RxMessage& r = p.rx_msg;
  if (!r.active) return;
  if (r.sink == RxSink::kPosted) {
    uint64_t flags = 0;
    const RecvRequest q = EndRecvSlot(r.index, r, &flags);
    ErrorCompletion ec;
    ec.op.context = q.context;
    ec.op.flags = kCompRecv | kCompMsg | (q.tagged ? kCompTagged : 0) | flags;
    ec.op.buf = q.buf;
    ec.op.len = std::min<uint64_t>(r.received, q.len);
    ec.op.tag = r.tag;
    ec.op.source = peers_.Id(pi);
    ec.err = err;
    FormatPeerError(&ec, pi, why);
    ++counters_.ops_failed;
    cq_.PushError(ec);
  } else if (r.sink == RxSink::kUnexpected) {
    matcher_.Release(r.index);
    NoteUnexpectedDepth();
    ResourcesFreed();
  }
  r.active = false;
  ++p.rx_next_msg_id;
}

}  // namespace bypass::rdm
