#include "fabric/rdm/matching.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"

namespace bypass::rdm {

ChunkPool::ChunkPool(uint64_t bytes, uint32_t chunk_bytes)
    : chunk_bytes_(chunk_bytes),
      num_chunks_(static_cast<uint32_t>(bytes / chunk_bytes)),
      arena_(new uint8_t[uint64_t{num_chunks_} * chunk_bytes]),
      next_(new uint32_t[num_chunks_]),
      free_(num_chunks_) {}

bool ChunkPool::Take(uint64_t need, uint32_t* first) {
  std::lock_guard<std::mutex> lock(mu_);
  if (need > free_.available()) return false;
  uint32_t prev = kNone;
  for (uint64_t i = 0; i < need; ++i) {
    const uint32_t c = free_.Pop();
    next_[c] = kNone;
    if (prev == kNone) {
      *first = c;
    } else {
      next_[prev] = c;
    }
    prev = c;
  }
  peak_ = std::max(peak_, num_chunks_ - free_.available());
  return true;
}

void ChunkPool::Give(uint32_t first) {
  std::lock_guard<std::mutex> lock(mu_);
  for (uint32_t c = first; c != kNone;) {
    const uint32_t n = next_[c];
    free_.Push(c);
    c = n;
  }
}

uint64_t ChunkPool::used_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return uint64_t{num_chunks_ - free_.available()} * chunk_bytes_;
}

uint64_t ChunkPool::peak_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return uint64_t{peak_} * chunk_bytes_;
}

absl::StatusOr<std::unique_ptr<UnexpectedPool>> UnexpectedPool::Create(uint64_t bytes,
                                                                       uint32_t chunk_bytes) {
  if (chunk_bytes < 64 || chunk_bytes > (1u << 24)) {
    return absl::InvalidArgumentError(absl::StrCat("UnexpectedPool: chunk_bytes ", chunk_bytes,
                                                   " is not 64..16 MiB"));
  }
  if (bytes < chunk_bytes || bytes / chunk_bytes > (1u << 24)) {
    return absl::InvalidArgumentError(absl::StrCat("UnexpectedPool: bytes ", bytes,
                                                   " is not 1 to 2^24 chunks of ", chunk_bytes));
  }
  return std::unique_ptr<UnexpectedPool>(
      new UnexpectedPool(std::make_unique<ChunkPool>(bytes, chunk_bytes)));
}

UnexpectedPool::UnexpectedPool(std::unique_ptr<ChunkPool> impl) : impl_(std::move(impl)) {}
UnexpectedPool::~UnexpectedPool() = default;
uint64_t UnexpectedPool::capacity_bytes() const { return impl_->capacity_bytes(); }
uint64_t UnexpectedPool::used_bytes() const { return impl_->used_bytes(); }
uint64_t UnexpectedPool::peak_bytes() const { return impl_->peak_bytes(); }

MatchQueues::MatchQueues(uint32_t max_recvs, uint32_t max_unexpected, uint64_t unexpected_bytes,
                         uint32_t chunk_bytes, ChunkPool* pool)
    : recvs_(new RecvSlot[max_recvs]),
      free_recvs_(max_recvs),
      max_eager_(max_unexpected),
      msgs_(static_cast<UnexpectedMsg*>(
          ::operator new(2 * uint64_t{max_unexpected} * sizeof(UnexpectedMsg)))),
      free_msgs_(max_unexpected),
      free_rndv_(max_unexpected),
      own_pool_(pool != nullptr ? nullptr
                                : std::make_unique<ChunkPool>(unexpected_bytes, chunk_bytes)),
      pool_(pool != nullptr ? pool : own_pool_.get()) {}

uint32_t MatchQueues::AllocRecv(const RecvRequest& r) {
  if (free_recvs_.empty()) return kNone;
  const uint32_t s = free_recvs_.Pop();
  recvs_[s].req = r;
  recvs_[s].used = 0;
  recvs_[s].active = 0;
  recvs_[s].released = false;
  return s;
}

void MatchQueues::QueueRecv(uint32_t slot) {
  const RecvRequest& r = recvs_[slot].req;
  posted_[r.tagged].PushBack(recvs_.get(), slot);
  if (r.source == kAnyPeer) return;
  if (directed_.size() <= r.source.slot()) directed_.resize(r.source.slot() + 1);
  ++directed_[r.source.slot()];
}

void MatchQueues::Unqueue(uint32_t s) {
  const RecvRequest& r = recvs_[s].req;
  posted_[r.tagged].Remove(recvs_.get(), s);
  if (r.source != kAnyPeer) --directed_[r.source.slot()];
}

uint32_t MatchQueues::MatchPosted(bool tagged, PeerId source, uint64_t tag, uint64_t total,
                                  Multi multi, uint64_t* base) {
  IndexList<RecvSlot>& q = posted_[tagged];
  for (uint32_t s = q.front(); s != kNone; s = recvs_[s].next) {
    RecvSlot& slot = recvs_[s];
    if (!Matches(slot.req, tagged, source, tag)) continue;
    if ((slot.req.flags & kRecvMulti) == 0) {
      Unqueue(s);
      if (base != nullptr) *base = 0;
      return s;
    }
    // A message that does not fit what is left goes to the next receive.
    if (multi == Multi::kSkip || total > slot.req.len - slot.used) continue;
    if (multi == Multi::kBlock) return kBlocked;
    const uint64_t at = TakeMulti(s, total);
    if (base != nullptr) *base = at;
    return s;
  }
  return kNone;
}

bool MatchQueues::HasPosted(bool tagged, PeerId source, uint64_t tag) const {
  const IndexList<RecvSlot>& q = posted_[tagged];
  for (uint32_t s = q.front(); s != kNone; s = recvs_[s].next) {
    const RecvSlot& slot = recvs_[s];
    if ((slot.req.flags & kRecvMulti) == 0 && Matches(slot.req, tagged, source, tag)) return true;
  }
  return false;
}

uint64_t MatchQueues::TakeMulti(uint32_t s, uint64_t total) {
  RecvSlot& slot = recvs_[s];
  const uint64_t base = slot.used;
  slot.used += total;
  ++slot.active;
  const uint64_t left = slot.req.len - slot.used;
  if (left == 0 || left < min_multi_recv_) {
    Unqueue(s);
    slot.released = true;
  }
  return base;
}

uint32_t MatchQueues::TakePostedIf(absl::FunctionRef<bool(const RecvRequest&)> pred) {
  for (IndexList<RecvSlot>& q : posted_) {
    for (uint32_t s = q.front(); s != kNone; s = recvs_[s].next) {
      if (pred(recvs_[s].req)) {
        Unqueue(s);
        return s;
      }
    }
  }
  return kNone;
}

uint32_t MatchQueues::TakePosted(void* context, PeerId only) {
  return TakePostedIf([&](const RecvRequest& r) {
    return r.context == context && (only == kAnyPeer || r.source == only);
  });
}

uint32_t MatchQueues::TakeAnyPosted(PeerId only) {
  return TakePostedIf([&](const RecvRequest& r) { return only == kAnyPeer || r.source == only; });
}

uint32_t MatchQueues::TakePostedFrom(PeerId source) {
  for (IndexList<RecvSlot>& q : posted_) {
    for (uint32_t s = q.front(); s != kNone; s = recvs_[s].next) {
      if (recvs_[s].req.source == source) {
        Unqueue(s);
        return s;
      }
    }
  }
  return kNone;
}

void MatchQueues::FreeRecv(uint32_t slot) { free_recvs_.Push(slot); }

uint32_t MatchQueues::Admit(PeerId source, bool tagged, uint64_t tag, uint64_t data,
                            uint16_t msg_flags, uint64_t total) {
  // Written so that no total, however hostile, overflows.
  const uint32_t chunk_bytes = pool_->chunk_bytes();
  const uint64_t need =
      std::max<uint64_t>(1, total / chunk_bytes + (total % chunk_bytes != 0 ? 1 : 0));
  uint32_t first = kNone;
  if (free_msgs_.empty() || !pool_->Take(need, &first)) return kNone;
  const uint32_t e = free_msgs_.Pop();
  UnexpectedMsg& m = msgs_[e];
  m = UnexpectedMsg{};
  m.source = source;
  m.match_source = source;
  m.tagged = tagged;
  m.tag = tag;
  m.data = data;
  m.msg_flags = msg_flags;
  m.total = total;
  m.chunks = static_cast<uint32_t>(need);
  m.first_chunk = first;
  used_chunks_ += m.chunks;
  m.write_chunk = m.first_chunk;
  unexpected_[tagged].PushBack(msgs_.get(), e);
  return e;
}

uint32_t MatchQueues::AdmitRendezvous(PeerId source, bool tagged, uint64_t tag, uint64_t data,
                                      uint16_t msg_flags, uint64_t total, uint32_t msg_id,
                                      uint64_t session) {
  if (free_rndv_.empty()) return kNone;
  const uint32_t e = max_eager_ + free_rndv_.Pop();
  UnexpectedMsg& m = msgs_[e];
  m = UnexpectedMsg{};
  m.source = source;
  m.match_source = source;
  m.tagged = tagged;
  m.tag = tag;
  m.data = data;
  m.msg_flags = msg_flags;
  m.total = total;
  m.complete = true;
  m.rendezvous = true;
  m.rndv_msg_id = msg_id;
  m.rndv_session = session;
  unexpected_[tagged].PushBack(msgs_.get(), e);
  return e;
}

void MatchQueues::Append(uint32_t e, absl::Span<const uint8_t> payload) {
  UnexpectedMsg& m = msgs_[e];
  const uint8_t* src = payload.data();
  size_t left = payload.size();
  while (left > 0) {
    const uint32_t chunk_bytes = pool_->chunk_bytes();
    const uint64_t in_chunk = m.received % chunk_bytes;
    const size_t n = std::min<size_t>(left, chunk_bytes - in_chunk);
    std::memcpy(pool_->chunk(m.write_chunk) + in_chunk, src, n);
    src += n;
    left -= n;
    m.received += n;
    if (m.received % chunk_bytes == 0) m.write_chunk = pool_->next(m.write_chunk);
  }
}

uint32_t MatchQueues::FindUnexpected(const RecvRequest& r, uint64_t max_total, bool eager_only,
                                     uint32_t after) const {
  const IndexList<UnexpectedMsg>& q = unexpected_[r.tagged];
  for (uint32_t e = after == kNone ? q.front() : msgs_[after].next; e != kNone;
       e = msgs_[e].next) {
    const UnexpectedMsg& m = msgs_[e];
    if (m.claimed || m.total > max_total || (eager_only && m.rendezvous)) continue;
    if (Matches(r, m.tagged, m.match_source, m.tag)) return e;
  }
  return kNone;
}

uint32_t MatchQueues::FindClaimed(void* context) const {
  for (const IndexList<UnexpectedMsg>& q : unexpected_) {
    for (uint32_t e = q.front(); e != kNone; e = msgs_[e].next) {
      if (msgs_[e].claimed && msgs_[e].claim_context == context) return e;
    }
  }
  return kNone;
}

uint32_t MatchQueues::FindUnexpectedIf(absl::FunctionRef<bool(const UnexpectedMsg&)> pred) const {
  for (const IndexList<UnexpectedMsg>& q : unexpected_) {
    for (uint32_t e = q.front(); e != kNone; e = msgs_[e].next) {
      if (pred(msgs_[e])) return e;
    }
  }
  return kNone;
}

uint32_t MatchQueues::FindFrom(PeerId source, uint32_t owner) const {
  return FindUnexpectedIf(
      [&](const UnexpectedMsg& m) { return m.owner == owner && m.source == source; });
}

uint32_t MatchQueues::FindRendezvousFrom(PeerId source, uint32_t owner) const {
  return FindUnexpectedIf([&](const UnexpectedMsg& m) {
    return m.rendezvous && m.owner == owner && m.source == source;
  });
}

uint32_t MatchQueues::FindOwned(uint32_t owner) const {
  return FindUnexpectedIf([&](const UnexpectedMsg& m) { return m.owner == owner; });
}

uint64_t MatchQueues::CopyOut(uint32_t e, uint8_t* dst, uint64_t cap) const {
  const UnexpectedMsg& m = msgs_[e];
  const uint64_t total = std::min(m.received, cap);
  uint64_t done = 0;
  for (uint32_t c = m.first_chunk; done < total && c != kNone; c = pool_->next(c)) {
    const uint64_t n = std::min<uint64_t>(pool_->chunk_bytes(), total - done);
    std::memcpy(dst + done, pool_->chunk(c), n);
    done += n;
  }
  return done;
}

void MatchQueues::Release(uint32_t e) {
  UnexpectedMsg& m = msgs_[e];
  unexpected_[m.tagged].Remove(msgs_.get(), e);
  if (m.first_chunk != kNone) pool_->Give(m.first_chunk);
  used_chunks_ -= m.chunks;
  m.first_chunk = m.write_chunk = kNone;
  m.chunks = 0;
  if (e < max_eager_) {
    free_msgs_.Push(e);
  } else {
    free_rndv_.Push(e - max_eager_);
  }
}

}  // namespace bypass::rdm
