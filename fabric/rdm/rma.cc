// RMA reads and writes into registered regions (PROTOCOL.md, "RMA").
#include "fabric/rdm/rma.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "fabric/rdm/atomic.h"

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
    case wire::RmaStatus::kNoAtomic:
      return "the atomic operation is not defined on the datatype";
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
    case wire::RmaStatus::kNoAtomic:
      return EOPNOTSUPP;
  }
  return EPROTO;
}

// Where key's probe sequence starts: keys may be small and consecutive when
// the user picks them, so they are mixed first (SplitMix64's finalizer).
uint32_t KeyHome(uint64_t key, uint32_t mask) {
  key = (key ^ (key >> 30)) * 0xbf58476d1ce4e5b9ull;
  key = (key ^ (key >> 27)) * 0x94d049bb133111ebull;
  return static_cast<uint32_t>(key ^ (key >> 31)) & mask;
}

}  // namespace

Rma::Rma(Context& ctx, Session& session, OpTable& ops, Completions& completions,
         Reliability& reliability)
    : ctx_(ctx),
      session_(session),
      ops_(ops),
      completions_(completions),
      reliability_(reliability),
      regions_(new Region[ctx.config.max_regions]),
      free_regions_(ctx.config.max_regions),
      region_index_(new uint32_t[std::bit_ceil(2 * uint64_t{ctx.config.max_regions})]),
      region_index_mask_(
          static_cast<uint32_t>(std::bit_ceil(2 * uint64_t{ctx.config.max_regions}) - 1)),
      rx_(new uint32_t[ctx.config.max_peers]),
      writes_(ctx.config.ActivePeers()) {
  std::fill_n(region_index_.get(), region_index_mask_ + 1, kNone);
  std::fill_n(rx_.get(), ctx.config.max_peers, kNone);
}

// ---- Regions.

absl::StatusOr<uint64_t> Rma::RegisterRegion(const RegionRequest& r) {
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
        "RegisterRegion: all ", ctx_.config.max_regions,
        " regions are registered; deregister one or create the endpoint with a larger "
        "max_regions"));
  }
  if (!r.key) {
    do {
      key = RandomRegionKey();
    } while (taken(key));
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

absl::Status Rma::DeregisterRegion(uint64_t key) {
  const uint32_t i = FindRegion(key);
  if (i == kNone) {
    return absl::NotFoundError(
        absl::StrFormat("DeregisterRegion(0x%016x): no region has this key", key));
  }
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

wire::RmaStatus Rma::CheckAccess(uint64_t key, uint64_t addr, uint64_t len, uint32_t access,
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

uint32_t Rma::FindRegion(uint64_t key) const {
  // The table is at most half full, so an empty entry ends every probe.
  for (uint32_t h = KeyHome(key, region_index_mask_);; h = (h + 1) & region_index_mask_) {
    const uint32_t i = region_index_[h];
    if (i == kNone) return kNone;
    if (regions_[i].key == key) return i;
  }
}

void Rma::IndexRegion(uint32_t i) {
  uint32_t h = KeyHome(regions_[i].key, region_index_mask_);
  while (region_index_[h] != kNone) h = (h + 1) & region_index_mask_;
  region_index_[h] = i;
}

void Rma::UnindexRegion(uint32_t i) {
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

Result Rma::PostWrite(const RmaRequest& r) {
  if (!session_.peers().Valid(r.dest)) return Result::kInvalid;
  if ((r.len > 0 && r.buf == nullptr) || (r.flags & ~(kRmaRemoteData | kRmaInject)) != 0) {
    return Result::kInvalid;
  }
  const bool inject = (r.flags & kRmaInject) != 0;
  if (inject ? r.len > ctx_.config.inject_size : r.len > ctx_.config.max_msg_size) {
    return Result::kTooLong;
  }
  if (ops_.user_free() == 0) return Result::kAgain;
  if (!inject && !completions_.Reserve()) return Result::kAgain;
  const uint32_t o = ops_.Alloc(OpKind::kWrite);
  SendOp& op = ops_[o];
  op.src = static_cast<const uint8_t*>(r.buf);
  if (inject && r.len > 0) {
    std::memcpy(ops_.inject_buffer(o), r.buf, r.len);
    op.src = ops_.inject_buffer(o);
  }
  const bool remote_data = (r.flags & kRmaRemoteData) != 0;
  op.inject = inject;
  op.context = r.context;
  op.comp_flags = kCompRma | kCompWrite;
  op.len = op.wire_len = r.len;
  op.type = wire::PacketType::kRma;
  op.rma.op = wire::RmaOp::kWrite;
  op.rma.flags = remote_data ? wire::kRmaFlagRemoteData : 0;
  op.rma.rma_id = ops_.RmaId(o);
  op.rma.key = r.key;
  op.rma.addr = r.addr;
  op.rma.total_length = r.len;
  op.rma.data = remote_data ? r.data : 0;
  ++ctx_.counters.rma_ops;
  reliability_.Queue(r.dest.slot(), o);
  return Result::kOk;
}

Result Rma::PostRead(const RmaRequest& r) {
  if (!session_.peers().Valid(r.dest)) return Result::kInvalid;
  if ((r.len > 0 && r.buf == nullptr) || r.flags != 0) return Result::kInvalid;
  if (r.len > ctx_.config.max_msg_size) return Result::kTooLong;
  if (ops_.user_free() == 0) return Result::kAgain;
  if (!completions_.Reserve()) return Result::kAgain;
  const uint32_t o = ops_.Alloc(OpKind::kRead);
  SendOp& op = ops_[o];
  op.dst = static_cast<uint8_t*>(r.buf);
  op.context = r.context;
  op.comp_flags = kCompRma | kCompRead;
  op.len = r.len;
  op.type = wire::PacketType::kRma;
  op.rma.op = wire::RmaOp::kReadReq;
  op.rma.rma_id = ops_.RmaId(o);
  op.rma.key = r.key;
  op.rma.addr = r.addr;
  op.rma.total_length = r.len;
  op.wire_len = 0;  // the request is one packet
  ++ctx_.counters.rma_ops;
  reliability_.Queue(r.dest.slot(), o);
  return Result::kOk;
}

// ---- Target.

bool Rma::ConsumeWrite(uint32_t pi, const wire::RmaFields& r, absl::Span<const uint8_t> payload) {
  // A write of one segment starts and ends here, in `single`; one of
  // several takes a record from the pool until its last segment.
  RxRma single;
  RxRma* wp = &single;
  if (r.offset == 0) {
    if (rx_[pi] != kNone) {
      ++ctx_.counters.protocol_errors;  // the last one never ended
      EndWrite(pi);
    }
    if (payload.size() != r.total_length) {
      rx_[pi] = writes_.Take();
      wp = &writes_[rx_[pi]];
    }
  } else if (rx_[pi] != kNone) {
    wp = &writes_[rx_[pi]];
  }
  RxRma& w = *wp;
  if (r.offset == 0) {
    w.rma_id = r.rma_id;
    w.key = r.key;
    w.addr = r.addr;
    w.total = r.total_length;
    w.data = r.data;
    w.flags = r.flags;
    // The whole range is checked before any byte lands.
    w.status = CheckAccess(r.key, r.addr, r.total_length, kAccessRemoteWrite, &w.region);
    if (w.status == wire::RmaStatus::kOk) w.region_generation = regions_[w.region].generation;
  } else if (rx_[pi] == kNone || r.rma_id != w.rma_id || r.offset != w.received ||
             r.total_length != w.total || r.key != w.key || r.addr != w.addr) {
    ++ctx_.counters.protocol_errors;
    return true;  // acknowledged and dropped
  }
  if (w.status == wire::RmaStatus::kOk && (!regions_[w.region].in_use ||
                                           regions_[w.region].generation != w.region_generation)) {
    w.status = wire::RmaStatus::kBadKey;  // deregistered while it was arriving
  }
  const bool last = w.received + payload.size() == w.total;
  const bool ok = w.status == wire::RmaStatus::kOk;
  const bool remote_data = (w.flags & wire::kRmaFlagRemoteData) != 0;
  const bool target_completion = ok && (remote_data || ctx_.config.rma_events);
  uint32_t resp = kNone;
  if (last) {
    // Room for the answer (and the completion here) first: without it the
    // segment is refused and comes again, nothing of it applied.
    resp = ops_.Alloc(OpKind::kResponse);
    if (resp == kNone || (target_completion && !completions_.Reserve())) {
      if (resp != kNone) ops_.Free(resp);
      ++ctx_.counters.rma_no_slot;
      if (r.offset == 0) EndWrite(pi);
      return false;
    }
  }
  const Region& g = regions_[w.region == kNone ? 0 : w.region];
  if (ok && !payload.empty()) {
    std::memcpy(g.addr + (w.addr - g.base) + w.received, payload.data(), payload.size());
  }
  w.received += payload.size();
  if (!last) return true;
  if (ok) {
    ++ctx_.counters.rma_served;
    if (target_completion) {
      PushTargetEvent(pi, g, kCompRma | kCompRemoteWrite | (remote_data ? kCompRemoteData : 0),
                      w.total, g.addr + (w.addr - g.base), remote_data ? w.data : 0);
    }
  } else {
    ++ctx_.counters.rma_refused;
  }
  MakeResponse(ops_[resp], 0, w.status, w.rma_id, w.key, w.addr, w.total);
  EndWrite(pi);
  reliability_.Queue(pi, resp);
  return true;
}

bool Rma::ConsumeReadRequest(uint32_t pi, const wire::RmaFields& r) {
  uint32_t region = kNone;
  const wire::RmaStatus status =
      CheckAccess(r.key, r.addr, r.total_length, kAccessRemoteRead, &region);
  const bool ok = status == wire::RmaStatus::kOk;
  const bool event = ok && ctx_.config.rma_events;
  const uint32_t o = ops_.Alloc(ok ? OpKind::kReadData : OpKind::kResponse);
  // The event's room is taken with the answer's: the request is consumed
  // (and counted) once, or refused whole and comes again.
  if (o == kNone || (event && !completions_.Reserve())) {
    if (o != kNone) ops_.Free(o);
    ++ctx_.counters.rma_no_slot;
    return false;  // refused: comes again when an answer of ours is acknowledged
  }
  SendOp& a = ops_[o];
  if (!ok) {
    MakeResponse(a, 0, status, r.rma_id, r.key, r.addr, r.total_length);
    ++ctx_.counters.rma_refused;
    reliability_.Queue(pi, o);
    return true;
  }
  Region& g = regions_[region];
  a.type = wire::PacketType::kRma;
  a.rma.op = wire::RmaOp::kReadData;
  a.rma.rma_id = r.rma_id;
  a.rma.key = r.key;
  a.rma.addr = r.addr;
  a.rma.total_length = r.total_length;
  a.src = g.addr + (r.addr - g.base);
  a.wire_len = r.total_length;
  a.ref = &g.reads;  // the region stays until the answer is acknowledged
  ++g.reads;
  ++ctx_.counters.rma_served;
  if (event) {
    PushTargetEvent(pi, g, kCompRma | kCompRemoteRead, r.total_length,
                    const_cast<uint8_t*>(a.src), 0);
  }
  reliability_.Queue(pi, o);
  return true;
}

void Rma::PushTargetEvent(uint32_t pi, const Region& g, uint64_t flags, uint64_t len,
                          uint8_t* buf, uint64_t data) {
  Completion c;
  c.context = g.context;
  c.flags = flags;
  c.len = len;
  c.buf = buf;
  c.data = data;
  c.source = session_.peers().Id(pi);
  completions_.Push(c);
}

// ---- Initiator.

void Rma::ConsumeReadData(uint32_t pi, const wire::RmaFields& r,
                          absl::Span<const uint8_t> payload) {
  const uint32_t o = reliability_.LandReadData(pi, r, payload, OpKind::kRead);
  if (o == kNone) return;
  completions_.OpDone(ops_[o]);
  ops_.Free(o);
}

void Rma::ConsumeResponse(uint32_t pi, const wire::RmaFields& r) {
  // A write's verdict, or the refusal of a read. It echoes the op's key and length.
  const bool refusal = r.status != wire::RmaStatus::kOk;
  uint32_t o = ops_.Answered(pi, r, OpKind::kWrite);
  if (o == kNone && refusal) o = ops_.Answered(pi, r, OpKind::kRead);
  if (o == kNone) {
    ++ctx_.counters.protocol_errors;
    return;
  }
  reliability_.Unpark(pi, o);
  const SendOp& op = ops_[o];
  if (!refusal) {
    completions_.OpDone(op);
    ops_.Free(o);
    return;
  }
  FailRefused(pi, o, op.kind == OpKind::kRead ? "read" : "write", r.status);
}

void Rma::FailRefused(uint32_t pi, uint32_t o, const char* what, wire::RmaStatus status) {
  const SendOp& op = ops_[o];
  const Address& a = session_.address(pi);
  char message[sizeof(ErrorCompletion::message)];
  std::snprintf(message, sizeof(message),
                "RMA %s key 0x%016llx addr 0x%llx len %llu refused by %s:%u: %s", what,
                static_cast<unsigned long long>(op.rma.key),
                static_cast<unsigned long long>(op.rma.addr),
                static_cast<unsigned long long>(op.len), a.ip.ToString().c_str(), a.udp_port,
                StatusText(status));
  ++ctx_.counters.rma_errors;
  completions_.OpFailedWith(op, StatusErrno(status), message);
  ops_.Free(o);
}

// ---- Atomics (PROTOCOL.md, "Atomics").

Result Rma::PostAtomic(const AtomicRequest& r) {
  if (!session_.peers().Valid(r.dest)) return Result::kInvalid;
  const bool compares = AtomicCompares(r.op);
  const bool reads = r.op == AtomicOp::kRead;
  const bool fetch = r.fetch || compares;
  const bool inject = (r.flags & kAtomicInject) != 0;
  // The base form neither reads nor compares; every fetching form needs a
  // result buffer, and cannot be an inject (its result is its completion).
  if (!AtomicDefined(r.op, r.type) || r.count == 0 || (r.flags & ~kAtomicInject) != 0 ||
      (reads && !fetch) || (fetch && (r.result == nullptr || inject)) ||
      (!reads && r.operand == nullptr) || (compares && r.compare == nullptr)) {
    return Result::kInvalid;
  }
  const uint64_t bytes = uint64_t{r.count} * AtomicTypeSize(r.type);
  const uint64_t operands = reads ? 0 : compares ? 2 * bytes : bytes;
  // The request is one packet, in both ends' datagrams (the peer's, once
  // its HELLO told it).
  const uint32_t peer_dg = session_[r.dest.slot()].max_datagram;
  const uint32_t dg =
      peer_dg == 0 ? ctx_.max_datagram : std::min(ctx_.same_host_max_datagram, peer_dg);
  if (r.count > AtomicMaxCount(r.op, r.type, dg)) return Result::kTooLong;
  if (ops_.user_free() == 0) return Result::kAgain;
  if (!inject && !completions_.Reserve()) return Result::kAgain;
  const uint32_t o = ops_.Alloc(OpKind::kAtomic);
  SendOp& op = ops_[o];
  uint8_t* copy = ops_.atomic_buffer(o);  // the operands are always copied
  if (!reads) std::memcpy(copy, r.operand, bytes);
  if (compares) std::memcpy(copy + bytes, r.compare, bytes);
  op.src = copy;
  op.wire_len = operands;
  op.dst = static_cast<uint8_t*>(fetch ? r.result : nullptr);
  op.inject = inject;
  op.context = r.context;
  op.comp_flags = kCompAtomic | (fetch ? kCompRead : kCompWrite);
  op.len = bytes;
  op.type = wire::PacketType::kRma;
  op.rma.op = wire::RmaOp::kAtomic;
  op.rma.flags = fetch ? wire::kRmaFlagFetch : 0;
  op.rma.rma_id = ops_.RmaId(o);
  op.rma.key = r.key;
  op.rma.addr = r.addr;
  op.rma.total_length = bytes;
  op.rma.atomic = {.op = r.op, .type = r.type, .count = static_cast<uint16_t>(r.count)};
  ++ctx_.counters.atomic_ops;
  reliability_.Queue(r.dest.slot(), o);
  return Result::kOk;
}

bool Rma::ConsumeAtomic(uint32_t pi, const wire::RmaFields& r, absl::Span<const uint8_t> payload) {
  // This runs once per request: the stream hands each PSN over once and
  // drops its duplicates, and a refusal (return false) applies nothing.
  // The answer carries the fetched values in its own buffer, so a lost
  // answer is resent from there, never by executing again.
  const wire::AtomicFields& a = r.atomic;
  const bool fetch = (r.flags & wire::kRmaFlagFetch) != 0;
  const uint32_t access =
      (a.op != AtomicOp::kRead ? kAccessRemoteWrite : 0) | (fetch ? kAccessRemoteRead : 0);
  uint32_t region = kNone;
  const wire::RmaStatus status = AtomicDefined(a.op, a.type)
                                     ? CheckAccess(r.key, r.addr, r.total_length, access, &region)
                                     : wire::RmaStatus::kNoAtomic;
  const bool ok = status == wire::RmaStatus::kOk;
  const bool event = ok && ctx_.config.rma_events;
  const uint32_t o = ops_.Alloc(OpKind::kAtomicResp);
  if (o == kNone || (event && !completions_.Reserve())) {
    if (o != kNone) ops_.Free(o);
    ++ctx_.counters.rma_no_slot;
    return false;  // refused whole: comes again, nothing applied
  }
  SendOp& answer = ops_[o];
  MakeResponse(answer, r.flags, status, r.rma_id, r.key, r.addr, r.total_length);
  answer.rma.op = wire::RmaOp::kAtomicResp;
  answer.rma.atomic = a;
  if (!ok) {
    ++ctx_.counters.rma_refused;
    reliability_.Queue(pi, o);
    return true;
  }
  Region& g = regions_[region];
  uint8_t* target = g.addr + (r.addr - g.base);
  uint8_t* old = fetch ? ops_.atomic_buffer(o) : nullptr;
  const uint8_t* operand = a.op == AtomicOp::kRead ? nullptr : payload.data();
  const uint8_t* compare = AtomicCompares(a.op) ? payload.data() + r.total_length : nullptr;
  ExecuteAtomic(a.op, a.type, a.count, target, operand, compare, old);
  if (fetch) {
    answer.src = old;
    answer.wire_len = r.total_length;
  }
  ++ctx_.counters.atomic_served;
  if (event) {
    PushTargetEvent(pi, g, kCompAtomic | (fetch ? kCompRemoteRead : kCompRemoteWrite),
                    r.total_length, target, 0);
  }
  reliability_.Queue(pi, o);
  return true;
}

void Rma::ConsumeAtomicResp(uint32_t pi, const wire::RmaFields& r,
                            absl::Span<const uint8_t> payload) {
  const uint32_t o = ops_.Answered(pi, r, OpKind::kAtomic);
  if (o == kNone || (r.flags & wire::kRmaFlagFetch) != (ops_[o].rma.flags & wire::kRmaFlagFetch) ||
      (r.status == wire::RmaStatus::kOk && (r.flags & wire::kRmaFlagFetch) != 0 &&
       payload.size() != r.total_length)) {
    ++ctx_.counters.protocol_errors;  // stale, misdirected or forged
    return;
  }
  reliability_.Unpark(pi, o);
  SendOp& op = ops_[o];
  if (r.status != wire::RmaStatus::kOk) {
    FailRefused(pi, o, "atomic", r.status);
    return;
  }
  if (op.dst != nullptr) std::memcpy(op.dst, payload.data(), payload.size());
  completions_.OpDone(op);
  ops_.Free(o);
}

}  // namespace bypass::rdm
