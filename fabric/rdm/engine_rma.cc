// RMA reads and writes into registered regions, the rendezvous protocol for
// large messages, and the engine's own answers to peers (PROTOCOL.md, "RMA"
// and "Rendezvous"). Everything here rides the per-peer sequenced stream:
// requests, answers and data are ops in Peer::ops like sends, so loss,
// duplication, reordering and corruption are handled once, below them.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "fabric/rdm/engine.h"

namespace bypass::rdm {
namespace {

const char* StatusText(wire::RmaStatus s) {
  switch (s) {
    case wire::RmaStatus::kOk:
      return "ok";
    case wire::RmaStatus::kBadKey:
      return "no region with this key (never registered or deregistered)";
    case wire::RmaStatus::kNoAccess:
      return "the region does not grant this access";
    case wire::RmaStatus::kOutOfRange:
      return "outside the region";
    case wire::RmaStatus::kNoMessage:
      return "no such message to pull";
  }
  return "?";
}

// The errno an initiator's error completion carries (PROTOCOL.md, "Errors").
int StatusErrno(wire::RmaStatus s) {
  switch (s) {
    case wire::RmaStatus::kOk:
      return 0;
    case wire::RmaStatus::kBadKey:
      return EKEYREJECTED;
    case wire::RmaStatus::kNoAccess:
      return EACCES;
    case wire::RmaStatus::kOutOfRange:
      return EFAULT;
    case wire::RmaStatus::kNoMessage:
      return EPROTO;
  }
  return EPROTO;
}

}  // namespace

// ---- Regions.

absl::StatusOr<uint64_t> Engine::RegisterRegion(const RegionRequest& r) {
  if (r.len > 0 && r.addr == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("RegisterRegion: addr is null for a ", r.len, "-byte region"));
  }
  if ((r.access & ~(kAccessRemoteRead | kAccessRemoteWrite)) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "RegisterRegion: access 0x%x has unknown bits; use kAccessRemoteRead/Write", r.access));
  }
  if (r.base > UINT64_MAX - r.len) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "RegisterRegion: base 0x%x + len %u wraps around 2^64", r.base, r.len));
  }
  const auto taken = [&](uint64_t key) { return FindRegion(key) != kNone; };
  uint64_t key = 0;
  if (r.key) {
    key = *r.key;
    if (taken(key)) {
      return absl::AlreadyExistsError(absl::StrFormat(
          "RegisterRegion: key 0x%016x is already registered; deregister it or ask for another",
          key));
    }
  }
  if (free_regions_.empty()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "RegisterRegion: all ", config_.max_regions,
        " regions are registered; deregister one or create the endpoint with a larger "
        "max_regions"));
  }
  if (!r.key) {
    do {
      key = Random();
    } while (key == 0 || taken(key));
  }
  const uint32_t i = free_regions_.Pop();
  Region& g = regions_[i];
  g.in_use = true;
  ++g.generation;
  g.addr = static_cast<uint8_t*>(r.addr);
  g.len = r.len;
  g.access = r.access;
  g.base = r.base;
  g.key = key;
  g.context = r.context;
  g.reads = 0;
  IndexRegion(i);
  return key;
}

absl::Status Engine::DeregisterRegion(uint64_t key) {
  const uint32_t i = FindRegion(key);
  if (i != kNone) {
    Region& g = regions_[i];
    if (g.reads > 0) {
      // Their packets are built (and rebuilt, if lost) from the region.
      return absl::FailedPreconditionError(absl::StrFormat(
          "DeregisterRegion(0x%016x): %u peer reads of it are still being answered; progress "
          "the endpoint and retry",
          key, g.reads));
    }
    UnindexRegion(i);
    g.in_use = false;
    ++g.generation;
    free_regions_.Push(i);
    return absl::OkStatus();
  }
  return absl::NotFoundError(
      absl::StrFormat("DeregisterRegion(0x%016x): no region has this key", key));
}

wire::RmaStatus Engine::CheckAccess(uint64_t key, uint64_t addr, uint64_t len, uint32_t access,
                                    uint32_t* region) const {
  const uint32_t i = FindRegion(key);
  if (i == kNone) return wire::RmaStatus::kBadKey;
  const Region& g = regions_[i];
  if ((g.access & access) != access) return wire::RmaStatus::kNoAccess;
  // [addr, addr + len) inside [base, base + len), without overflow.
  if (addr < g.base || addr - g.base > g.len || len > g.len - (addr - g.base)) {
    return wire::RmaStatus::kOutOfRange;
  }
  *region = i;
  return wire::RmaStatus::kOk;
}

namespace {
// Where key's probe sequence starts: keys may be small and consecutive when
// the user picks them, so they are mixed first (SplitMix64's finalizer).
uint32_t KeyHome(uint64_t key, uint32_t mask) {
  key = (key ^ (key >> 30)) * 0xbf58476d1ce4e5b9ull;
  key = (key ^ (key >> 27)) * 0x94d049bb133111ebull;
  return static_cast<uint32_t>(key ^ (key >> 31)) & mask;
}
}  // namespace

uint32_t Engine::FindRegion(uint64_t key) const {
  // The table is at most half full, so an empty entry ends every probe.
  for (uint32_t h = KeyHome(key, region_index_mask_);; h = (h + 1) & region_index_mask_) {
    const uint32_t i = region_index_[h];
    if (i == kNone) return kNone;
    if (regions_[i].key == key) return i;
  }
}

void Engine::IndexRegion(uint32_t i) {
  uint32_t h = KeyHome(regions_[i].key, region_index_mask_);
  while (region_index_[h] != kNone) h = (h + 1) & region_index_mask_;
  region_index_[h] = i;
}

void Engine::UnindexRegion(uint32_t i) {
  uint32_t h = KeyHome(regions_[i].key, region_index_mask_);
  while (region_index_[h] != i) h = (h + 1) & region_index_mask_;
  // Backward-shift deletion: entries after the hole whose probe started at
  // or before it move into it, so that no probe meets an empty entry early.
  for (uint32_t next = (h + 1) & region_index_mask_; region_index_[next] != kNone;
       next = (next + 1) & region_index_mask_) {
    const uint32_t home = KeyHome(regions_[region_index_[next]].key, region_index_mask_);
    // Movable unless its home lies cyclically in (h, next].
    if (((next - home) & region_index_mask_) >= ((next - h) & region_index_mask_)) {
      region_index_[h] = region_index_[next];
      h = next;
    }
  }
  region_index_[h] = kNone;
}

// ---- Posting.

Result Engine::PostWrite(const RmaRequest& r) {
  if (!peers_.Valid(r.dest)) return Result::kInvalid;
  if ((r.len > 0 && r.buf == nullptr) || (r.flags & ~(kRmaRemoteData | kRmaInject)) != 0) {
    return Result::kInvalid;
  }
  const bool inject = (r.flags & kRmaInject) != 0;
  if (inject ? r.len > config_.inject_size : r.len > config_.max_msg_size) {
    return Result::kTooLong;
  }
  if (free_ops_.empty()) return Result::kAgain;
  if (!inject && !cq_.Reserve()) return Result::kAgain;
  const uint32_t o = free_ops_.Pop();
  SendOp& op = ops_[o];
  op = SendOp{};
  if (inject) {
    uint8_t* copy = inject_arena_.get() + uint64_t{o} * config_.inject_size;
    if (r.len > 0) std::memcpy(copy, r.buf, r.len);
    op.buf = copy;
  } else {
    op.buf = static_cast<const uint8_t*>(r.buf);
  }
  op.kind = OpKind::kWrite;
  op.inject = inject;
  op.len = op.wire_len = r.len;
  op.context = r.context;
  op.key = r.key;
  op.addr = r.addr;
  op.data = (r.flags & kRmaRemoteData) ? r.data : 0;
  op.rma_flags = (r.flags & kRmaRemoteData) ? wire::kRmaFlagRemoteData : 0;
  ++counters_.rma_ops;
  QueueOp(PeerTable::Index(r.dest), o);
  return Result::kOk;
}

Result Engine::PostRead(const RmaRequest& r) {
  if (!peers_.Valid(r.dest)) return Result::kInvalid;
  if ((r.len > 0 && r.buf == nullptr) || r.flags != 0) return Result::kInvalid;
  if (r.len > config_.max_msg_size) return Result::kTooLong;
  if (free_ops_.empty()) return Result::kAgain;
  if (!cq_.Reserve()) return Result::kAgain;
  const uint32_t o = free_ops_.Pop();
  SendOp& op = ops_[o];
  op = SendOp{};
  op.kind = OpKind::kRead;
  op.dst = static_cast<uint8_t*>(r.buf);
  op.len = r.len;
  op.wire_len = 0;  // the request is one packet
  op.context = r.context;
  op.key = r.key;
  op.addr = r.addr;
  ++counters_.rma_ops;
  QueueOp(PeerTable::Index(r.dest), o);
  return Result::kOk;
}

uint32_t Engine::AllocCtl() {
  if (free_ctl_.empty()) return kNone;
  const uint32_t o = config_.max_send_ops + free_ctl_.Pop();
  ops_[o] = SendOp{};
  return o;
}

void Engine::FreeOp(uint32_t o) {
  SendOp& op = ops_[o];
  if (op.kind == OpKind::kPull) --pulls_;
  op_gen_[o] = static_cast<uint16_t>((op_gen_[o] + 1) & ((1u << (32 - kRmaIdSlotBits)) - 1));
  // A freed op never looks like one waiting for an answer (ConsumeReadData).
  op.kind = OpKind::kMsg;
  op.waiting = false;
  if (IsUserOp(o)) {
    free_ops_.Push(o);
  } else {
    free_ctl_.Push(o - config_.max_send_ops);
    ResourcesFreed();  // a peer we refused for lack of one may retry now
  }
}

void Engine::QueueOp(uint32_t pi, uint32_t o) {
  SendOp& op = ops_[o];
  op.peer = pi;
  op.waiting = false;
  op.all_sent = false;
  Peer& p = peers_[pi];
  if (!p.busy()) {
    p.activity_ns = now_;
    ArmTimer(now_ + config_.peer_timeout_ns);
  }
  if (p.cursor_op == kNone) {
    p.ops.PushBack(ops_.get(), o);
    p.cursor_op = o;
    p.cursor_offset = 0;
  } else if (IsUserOp(o) && !op.pulled) {
    p.ops.PushBack(ops_.get(), o);
  } else {
    // The engine's answers and pulled bytes go after the others of their
    // kind but before the user's ops not yet started: nothing the receiver
    // may refuse delays them.
    uint32_t at = p.cursor_offset == 0 ? p.cursor_op : ops_[p.cursor_op].next;
    while (at != kNone && (!IsUserOp(at) || ops_[at].pulled)) at = ops_[at].next;
    if (at == kNone) {
      p.ops.PushBack(ops_.get(), o);
    } else {
      p.ops.InsertBefore(ops_.get(), at, o);
      if (at == p.cursor_op) p.cursor_op = o;  // cursor_offset is 0 there
    }
  }
  if (!p.tx_ready && !p.hello_wanted) {
    p.hello_wanted = true;
    p.hello_due_ns = now_;
    p.hello_tries = 0;
  }
  Enqueue(pi);
}

// ---- Transmit.

uint32_t Engine::SegmentMax(const Peer& p, const SendOp& op) const {
  const uint32_t dg = std::min<uint32_t>(max_datagram_, p.max_datagram);
  const bool data = op.kind == OpKind::kMsg || (op.kind == OpKind::kRndv && !op.pulled);
  return data ? wire::MaxDataPayload(dg) : wire::MaxRmaPayload(dg);
}

void Engine::WriteRmaPacket(Peer& p, Psn psn, const TxEntry& e, uint16_t flags,
                            driver::Packet* pkt) {
  const SendOp& op = ops_[e.op];
  wire::Common c = CommonFor(p, wire::PacketType::kRma, flags);
  c.psn = psn;
  wire::RmaFields r;
  const uint8_t* from = nullptr;  // payload source
  switch (op.kind) {
    case OpKind::kMsg:  // DATA: WriteData
      break;
    case OpKind::kWrite:
      r.op = wire::RmaOp::kWrite;
      r.flags = op.rma_flags;
      r.rma_id = RmaId(e.op);
      r.key = op.key;
      r.addr = op.addr;
      r.total_length = op.len;
      r.data = op.data;
      from = op.buf;
      break;
    case OpKind::kRead:
      r.op = wire::RmaOp::kReadReq;
      r.rma_id = RmaId(e.op);
      r.key = op.key;
      r.addr = op.addr;
      r.total_length = op.len;
      break;
    case OpKind::kPull:
      r.op = wire::RmaOp::kReadReq;
      r.flags = wire::kRmaFlagMessage;
      r.rma_id = RmaId(e.op);
      r.key = op.key;
      r.total_length = op.len;
      break;
    case OpKind::kReadResp:
      r.op = wire::RmaOp::kReadData;
      r.rma_id = op.rma_id;
      r.key = op.key;
      r.addr = op.addr;
      r.total_length = op.len;
      from = op.buf;
      break;
    case OpKind::kRndv:  // pulled: its bytes answer the receiver's READ_REQ
      r.op = wire::RmaOp::kReadData;
      r.flags = wire::kRmaFlagMessage;
      r.rma_id = op.rma_id;
      r.key = op.msg_id;
      r.total_length = op.wire_len;
      from = op.buf;
      break;
    case OpKind::kResponse:
      r.op = wire::RmaOp::kResponse;
      r.flags = op.rma_flags;
      r.status = op.status;
      r.rma_id = op.rma_id;
      r.key = op.key;
      r.addr = op.addr;
      r.total_length = op.len;
      break;
  }
  r.offset = e.offset;
  const absl::Span<const uint8_t> payload =
      e.len > 0 ? absl::Span<const uint8_t>(from + e.offset, e.len) : absl::Span<const uint8_t>();
  pkt->len =
      static_cast<uint32_t>(wire::BuildRma(p.flow, c, r, payload, {pkt->data, pkt->capacity}));
  NoteAckSent(p, false);
  ++counters_.tx_packets;
  ++counters_.tx_data_packets;
}

void Engine::OpAcked(Peer& p, uint32_t o) {
  SendOp& op = ops_[o];
  if (op.abandoned) {  // given up while refused: its error is out already
    if (op.kind == OpKind::kRndv && op.msg_id == p.rndv_hold_msg_id) {
      p.rndv_hold = false;  // nobody will answer it
    }
    CompleteSend(o);
    return;
  }
  switch (op.kind) {
    case OpKind::kMsg:
      CompleteSend(o);
      return;
    case OpKind::kRndv:
      if (op.pulled) {
        CompleteSend(o);
        return;
      }
      break;  // the request to send is in: wait for the pull
    case OpKind::kWrite:  // wait for the RESPONSE
    case OpKind::kRead:   // wait for the READ_DATA
    case OpKind::kPull:   // wait for the message's READ_DATA
      break;
    case OpKind::kReadResp:
      --regions_[op.aux].reads;
      FreeOp(o);
      return;
    case OpKind::kResponse:
      FreeOp(o);
      return;
  }
  op.waiting = true;
  p.waiting.PushBack(ops_.get(), o);
  // Nothing in flight may be all that is left: the probe keeps the peer's
  // liveness known (RunProbe).
  ArmTimer(now_ + std::max<uint64_t>(1, config_.peer_timeout_ns / 4));
}

// ---- Receive.

bool Engine::ConsumeSequenced(uint32_t pi, Peer& p, wire::PacketType type,
                              const wire::MsgFields& m, const wire::RmaFields& r,
                              absl::Span<const uint8_t> payload) {
  if (type != wire::PacketType::kRma) return ConsumeData(pi, p, m, payload);
  if (p.rx_msg.active) {
    // Ops never interleave in a stream: a message's segments are
    // consecutive. That one will never end; this packet is the next op.
    ++counters_.protocol_errors;
    AbortRxMessage(pi, p, EPROTO, "broke its message framing; receive aborted");
  }
  switch (r.op) {
    case wire::RmaOp::kWrite:
      return ConsumeWrite(pi, p, r, payload);
    case wire::RmaOp::kReadReq:
      if (r.flags & wire::kRmaFlagMessage) return ConsumePullReq(pi, p, r);
      return ConsumeReadReq(pi, p, r);
    case wire::RmaOp::kReadData:
      ConsumeReadData(pi, p, r, payload);
      return true;
    case wire::RmaOp::kResponse:
      ConsumeResponse(pi, p, r);
      return true;
  }
  return true;
}

bool Engine::ConsumeWrite(uint32_t pi, Peer& p, const wire::RmaFields& r,
                          absl::Span<const uint8_t> payload) {
  RxRma& w = p.rx_rma;
  if (r.offset == 0) {
    if (w.active) ++counters_.protocol_errors;  // the last one never ended
    w = RxRma{};
    w.active = true;
    w.rma_id = r.rma_id;
    w.key = r.key;
    w.addr = r.addr;
    w.total = r.total_length;
    w.data = r.data;
    w.flags = r.flags;
    // The whole range is checked before any byte lands.
    w.status = CheckAccess(r.key, r.addr, r.total_length, kAccessRemoteWrite, &w.region);
    if (w.status == wire::RmaStatus::kOk) w.region_generation = regions_[w.region].generation;
  } else if (!w.active || r.rma_id != w.rma_id || r.offset != w.received ||
             r.total_length != w.total || r.key != w.key || r.addr != w.addr) {
    ++counters_.protocol_errors;
    return true;  // acknowledged and dropped
  }
  if (w.status == wire::RmaStatus::kOk && (!regions_[w.region].in_use ||
                                           regions_[w.region].generation != w.region_generation)) {
    w.status = wire::RmaStatus::kBadKey;  // deregistered while it was arriving
  }
  const bool last = w.received + payload.size() == w.total;
  const bool ok = w.status == wire::RmaStatus::kOk;
  const bool target_completion = ok && (w.flags & wire::kRmaFlagRemoteData) != 0;
  uint32_t resp = kNone;
  if (last) {
    // Room for the answer (and the completion here) first: without it the
    // segment is refused and comes again, nothing of it applied.
    resp = AllocCtl();
    if (resp == kNone || (target_completion && !cq_.Reserve())) {
      if (resp != kNone) FreeOp(resp);
      ++counters_.rma_no_slot;
      if (r.offset == 0) w.active = false;
      return false;
    }
  }
  const Region& g = regions_[w.region == kNone ? 0 : w.region];
  if (ok && !payload.empty()) {
    std::memcpy(g.addr + (w.addr - g.base) + w.received, payload.data(), payload.size());
  }
  w.received += payload.size();
  if (!last) return true;
  w.active = false;
  if (ok) {
    ++counters_.rma_served;
    if (target_completion) {
      Completion c;
      c.context = g.context;
      c.flags = kCompRma | kCompRemoteWrite | kCompRemoteData;
      c.len = w.total;
      c.buf = g.addr + (w.addr - g.base);
      c.data = w.data;
      c.source = peers_.Id(pi);
      cq_.Push(c);
    }
  } else {
    ++counters_.rma_refused;
  }
  SendOp& a = ops_[resp];
  a.kind = OpKind::kResponse;
  a.status = w.status;
  a.rma_id = w.rma_id;
  a.key = w.key;
  a.addr = w.addr;
  a.len = w.total;
  QueueOp(pi, resp);
  return true;
}

bool Engine::ConsumeReadReq(uint32_t pi, Peer& /*p*/, const wire::RmaFields& r) {
  const uint32_t o = AllocCtl();
  if (o == kNone) {
    ++counters_.rma_no_slot;
    return false;  // refused: comes again when an answer of ours is acknowledged
  }
  uint32_t region = kNone;
  SendOp& a = ops_[o];
  a.status = CheckAccess(r.key, r.addr, r.total_length, kAccessRemoteRead, &region);
  a.rma_id = r.rma_id;
  a.key = r.key;
  a.addr = r.addr;
  a.len = r.total_length;
  if (a.status == wire::RmaStatus::kOk) {
    Region& g = regions_[region];
    a.kind = OpKind::kReadResp;
    a.buf = g.addr + (r.addr - g.base);
    a.wire_len = r.total_length;
    a.aux = region;
    ++g.reads;
    ++counters_.rma_served;
  } else {
    a.kind = OpKind::kResponse;
    ++counters_.rma_refused;
  }
  QueueOp(pi, o);
  return true;
}

bool Engine::ConsumePullReq(uint32_t pi, Peer& p, const wire::RmaFields& r) {
  uint32_t o = p.waiting.front();
  for (; o != kNone; o = ops_[o].next) {
    const SendOp& op = ops_[o];
    if (op.kind == OpKind::kRndv && !op.pulled && op.msg_id == r.key) break;
  }
  if (o == kNone || r.total_length > ops_[o].len) {
    // Not a message of ours waiting to be pulled: a peer that breaks the
    // protocol. Its pull fails there, once we have an op to say so with.
    const uint32_t a = AllocCtl();
    if (a == kNone) {
      ++counters_.rma_no_slot;
      return false;  // refused: comes again when an answer of ours is acknowledged
    }
    ++counters_.protocol_errors;
    ops_[a].kind = OpKind::kResponse;
    ops_[a].rma_flags = wire::kRmaFlagMessage;
    ops_[a].status = wire::RmaStatus::kNoMessage;
    ops_[a].rma_id = r.rma_id;
    ops_[a].key = r.key;
    ops_[a].len = r.total_length;
    QueueOp(pi, a);
    return true;
  }
  SendOp& op = ops_[o];
  p.waiting.Remove(ops_.get(), o);
  // A pull of an older message (one that waited unexpected) is not the
  // answer the hold waits for.
  if (op.msg_id == p.rndv_hold_msg_id) p.rndv_hold = false;
  op.pulled = true;
  op.rma_id = r.rma_id;
  op.wire_len = r.total_length;  // the receive may be shorter than the message
  QueueOp(pi, o);
  return true;
}

void Engine::ConsumeReadData(uint32_t pi, Peer& p, const wire::RmaFields& r,
                             absl::Span<const uint8_t> payload) {
  const uint32_t o = RmaOp(r.rma_id);
  const OpKind want = (r.flags & wire::kRmaFlagMessage) ? OpKind::kPull : OpKind::kRead;
  if (o == kNone || ops_[o].kind != want || r.key != ops_[o].key ||
      !ops_[o].waiting || ops_[o].peer != pi || r.total_length != ops_[o].len ||
      r.offset != ops_[o].rx_done) {
    ++counters_.protocol_errors;
    return;
  }
  SendOp& op = ops_[o];
  uint8_t* dst = op.dst;
  if (want == OpKind::kPull) dst = static_cast<uint8_t*>(matcher_.recv(op.aux).buf);
  if (!payload.empty()) std::memcpy(dst + r.offset, payload.data(), payload.size());
  op.rx_done += payload.size();
  if (op.rx_done < op.len) return;
  p.waiting.Remove(ops_.get(), o);
  if (want == OpKind::kRead) {
    CompleteRma(o);
    return;
  }
  RxMessage m;
  m.total = op.total;
  m.received = op.len;
  m.msg_flags = op.msg_flags;
  m.tag = op.tag;
  m.data = op.data;
  uint64_t flags = 0;
  const RecvRequest q = EndRecvSlot(op.aux, m, &flags);
  CompleteRecv(peers_.Id(pi), q, m, flags);
  ++counters_.rendezvous_pulled;
  FreeOp(o);
}

void Engine::ConsumeResponse(uint32_t pi, Peer& p, const wire::RmaFields& r) {
  const uint32_t o = RmaOp(r.rma_id);
  // A write's verdict, or the refusal of a read or a pull.
  const bool refusal = r.status != wire::RmaStatus::kOk;
  const bool pull = (r.flags & wire::kRmaFlagMessage) != 0;
  if (pull && !refusal) {
    // "Your request to send waits in my unexpected queue": send on.
    if (r.key == p.rndv_hold_msg_id) p.rndv_hold = false;
    if (HasWork(p)) Enqueue(pi);
    return;
  }
  // It echoes the op's key (a pull's: the msg_id) and length.
  if (o == kNone || !ops_[o].waiting || ops_[o].peer != pi || r.key != ops_[o].key ||
      r.total_length != ops_[o].len ||
      !(pull ? ops_[o].kind == OpKind::kPull && refusal
             : ops_[o].kind == OpKind::kWrite || (ops_[o].kind == OpKind::kRead && refusal))) {
    ++counters_.protocol_errors;
    return;
  }
  p.waiting.Remove(ops_.get(), o);
  if (pull) {
    FailOp(o, EPROTO, "had no such message to pull; receive failed");
    return;
  }
  if (r.status == wire::RmaStatus::kOk) {
    CompleteRma(o);
    return;
  }
  const SendOp& op = ops_[o];
  const Address& a = peers_[pi].addr;
  ErrorCompletion ec;
  ec.op.context = op.context;
  ec.op.flags = kCompRma | (op.kind == OpKind::kRead ? kCompRead : kCompWrite);
  ec.op.source = peers_.Id(pi);
  ec.err = StatusErrno(r.status);
  std::snprintf(ec.message, sizeof(ec.message),
                "RMA %s key 0x%016llx addr 0x%llx len %llu refused by %s:%u: %s",
                op.kind == OpKind::kRead ? "read" : "write",
                static_cast<unsigned long long>(op.key), static_cast<unsigned long long>(op.addr),
                static_cast<unsigned long long>(op.len), a.ip.ToString().c_str(), a.udp_port,
                StatusText(r.status));
  ++counters_.rma_errors;
  ++counters_.ops_failed;
  if (op.inject) {
    if (!cq_.PushUnreservedError(ec)) ++counters_.inject_errors_dropped;
  } else {
    cq_.PushError(ec);
  }
  FreeOp(o);
}

void Engine::CompleteRma(uint32_t o) {
  const SendOp& op = ops_[o];
  if (!op.inject) {
    Completion c;
    c.context = op.context;
    c.flags = kCompRma | (op.kind == OpKind::kRead ? kCompRead : kCompWrite);
    c.len = op.len;
    c.source = peers_.Id(op.peer);
    cq_.Push(c);
  }
  FreeOp(o);
}

// ---- Rendezvous at the receiver.

bool Engine::ConsumeRts(uint32_t pi, Peer& p, const wire::MsgFields& m) {
  const PeerId src = peers_.Id(pi);
  const bool tagged = (m.msg_flags & wire::kMsgTagged) != 0;
  if (free_ctl_.empty()) {
    ++counters_.rma_no_slot;
    return false;  // no op to answer with: refused, comes again
  }
  if (!CanPull() && matcher_.HasPosted(tagged, src, m.tag)) {
    // Every op pulls may take is pulling: refused, comes again.
    ++counters_.rma_no_slot;
    return false;
  }
  // Pulled straight into a receive; never into a multi-receive.
  const uint32_t slot = matcher_.MatchPosted(tagged, src, m.tag);
  if (slot != kNone) {
    StartPull(pi, AllocCtl(), slot, m.msg_id, m.total_length, m.msg_flags, m.tag, m.data);
  } else {
    // Unexpected: an entry, no bytes (the sender keeps them).
    const uint32_t e = matcher_.AdmitRendezvous(src, tagged, m.tag, m.data, m.msg_flags,
                                                m.total_length, m.msg_id, RxSession(p));
    if (e == kNone) return false;
    ++counters_.unexpected_msgs;
    NoteUnexpectedDepth();
    // Tell the sender, which holds its next messages until it knows.
    const uint32_t a = AllocCtl();
    SendOp& q = ops_[a];
    q.kind = OpKind::kResponse;
    q.rma_flags = wire::kRmaFlagMessage;
    q.key = m.msg_id;
    q.len = m.total_length;
    QueueOp(pi, a);
  }
  ++p.rx_next_msg_id;
  p.rx_skip = false;
  return true;
}

void Engine::StartPull(uint32_t pi, uint32_t o, uint32_t slot, uint32_t msg_id, uint64_t total,
                       uint16_t msg_flags, uint64_t tag, uint64_t data) {
  SendOp& op = ops_[o];
  op.kind = OpKind::kPull;
  ++pulls_;
  op.key = msg_id;
  op.total = total;
  op.len = std::min<uint64_t>(total, matcher_.recv(slot).len);  // a shorter receive truncates
  op.wire_len = 0;  // the request is one packet
  op.msg_flags = msg_flags;
  op.tag = tag;
  op.data = data;
  op.aux = slot;
  QueueOp(pi, o);
}

Result Engine::PullUnexpected(uint32_t e, const RecvRequest& r) {
  // REQUIRES (PostRecv): a completion reserved for r.
  const UnexpectedMsg& m = matcher_.unexpected(e);
  const uint32_t pi = PeerTable::Index(m.source);
  if (!peers_.Valid(m.source) || !peers_[pi].rx_known ||
      m.rndv_session != RxSession(peers_[pi])) {
    // Its sender's session ended (restart, timeout) before we took it: the
    // bytes are gone with it.
    ErrorCompletion ec;
    ec.op.context = r.context;
    ec.op.flags = kCompRecv | kCompMsg | (r.tagged ? kCompTagged : 0);
    ec.op.buf = r.buf;
    ec.op.tag = m.tag;
    ec.op.source = m.source;
    ec.err = ECONNRESET;
    std::snprintf(ec.message, sizeof(ec.message),
                  "rendezvous message of %llu bytes lost: its sender's session ended before a "
                  "receive took it",
                  static_cast<unsigned long long>(m.total));
    ++counters_.ops_failed;
    cq_.PushError(ec);
    matcher_.Release(e);
    NoteUnexpectedDepth();
    ResourcesFreed();
    return Result::kOk;
  }
  if (!CanPull()) {  // the rest of max_rma_ops stay for answers
    cq_.Unreserve();
    return Result::kAgain;
  }
  const uint32_t slot = matcher_.AllocRecv(r);
  if (slot == kNone) {
    cq_.Unreserve();
    return Result::kAgain;
  }
  StartPull(pi, AllocCtl(), slot, m.rndv_msg_id, m.total, m.msg_flags, m.tag, m.data);
  matcher_.Release(e);
  NoteUnexpectedDepth();
  ResourcesFreed();
  return Result::kOk;
}

// ---- Failure and liveness.

void Engine::FailOp(uint32_t o, int err, const char* why) {
  SendOp& op = ops_[o];
  switch (op.kind) {
    case OpKind::kMsg:
    case OpKind::kRndv:
      FailSend(o, err, why);
      return;
    case OpKind::kWrite:
    case OpKind::kRead: {
      ErrorCompletion ec;
      ec.op.context = op.context;
      ec.op.flags = kCompRma | (op.kind == OpKind::kRead ? kCompRead : kCompWrite);
      ec.op.source = peers_.Id(op.peer);
      ec.err = err;
      FormatPeerError(&ec, op.peer, why);
      ++counters_.ops_failed;
      if (op.inject) {
        if (!cq_.PushUnreservedError(ec)) ++counters_.inject_errors_dropped;
      } else {
        cq_.PushError(ec);
      }
      break;
    }
    case OpKind::kReadResp:
      --regions_[op.aux].reads;
      break;
    case OpKind::kResponse:
      break;
    case OpKind::kPull: {
      RxMessage m;
      m.total = op.total;
      m.received = op.rx_done;
      uint64_t flags = 0;
      const RecvRequest q = EndRecvSlot(op.aux, m, &flags);
      ErrorCompletion ec;
      ec.op.context = q.context;
      ec.op.flags = kCompRecv | kCompMsg | (q.tagged ? kCompTagged : 0) | flags;
      ec.op.buf = q.buf;
      ec.op.len = op.rx_done;
      ec.op.tag = op.tag;
      ec.op.source = peers_.Id(op.peer);
      ec.err = err;
      FormatPeerError(&ec, op.peer, why);
      ++counters_.ops_failed;
      cq_.PushError(ec);
      break;
    }
  }
  FreeOp(o);
}

void Engine::RunProbe(uint32_t pi, Peer& p, uint64_t* next) {
  // Only waiting (a pull not asked for yet, an answer not sent yet), nothing
  // in flight to time out: ask the peer for an ACK now and then, so that a
  // live peer keeps the op alive and a dead one times it out.
  if (p.waiting.empty() || !p.rx_known || !p.tx_ready || p.inflight() > 0) return;
  const uint64_t interval = std::max<uint64_t>(1, config_.peer_timeout_ns / 4);
  const uint64_t due = std::max(p.activity_ns + interval, p.probe_due_ns);
  if (now_ < due) {
    *next = std::min(*next, due);
    return;
  }
  p.probe_owed = true;
  p.ack_standalone = true;
  p.probe_due_ns = now_ + interval;
  *next = std::min(*next, p.probe_due_ns);
  Enqueue(pi);
}

}  // namespace bypass::rdm
