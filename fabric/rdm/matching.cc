#include "fabric/rdm/matching.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace bypass::rdm {

MatchQueues::MatchQueues(uint32_t max_recvs, uint32_t max_unexpected, uint64_t unexpected_bytes,
                         uint32_t chunk_bytes)
    : recvs_(new RecvSlot[max_recvs]),
      free_recvs_(max_recvs),
      msgs_(new UnexpectedMsg[max_unexpected]),
      free_msgs_(max_unexpected),
      chunk_bytes_(chunk_bytes),
      num_chunks_(static_cast<uint32_t>(unexpected_bytes / chunk_bytes)),
      arena_(new uint8_t[uint64_t{num_chunks_} * chunk_bytes]),
      chunk_next_(new uint32_t[num_chunks_]),
      free_chunks_(num_chunks_) {}

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
  const uint64_t need =
      std::max<uint64_t>(1, total / chunk_bytes_ + (total % chunk_bytes_ != 0 ? 1 : 0));
  if (free_msgs_.empty() || need > free_chunks_.available()) return kNone;
  const uint32_t e = free_msgs_.Pop();
  UnexpectedMsg& m = msgs_[e];
  m.source = source;
  m.match_source = source;
  m.owner = 0;
  m.tagged = tagged;
  m.tag = tag;
  m.data = data;
  m.msg_flags = msg_flags;
  m.total = total;
  m.received = 0;
  m.complete = false;
  m.claimed = false;
  m.claim_context = nullptr;
  m.rendezvous = false;
  m.chunks = static_cast<uint32_t>(need);
  // Chain the chunks in order: first_chunk -> ... -> kNone.
  uint32_t prev = kNone;
  for (uint64_t i = 0; i < need; ++i) {
    const uint32_t c = free_chunks_.Pop();
    chunk_next_[c] = kNone;
    if (prev == kNone) {
      m.first_chunk = c;
    } else {
      chunk_next_[prev] = c;
    }
    prev = c;
  }
  used_chunks_ += m.chunks;
  m.write_chunk = m.first_chunk;
  unexpected_[tagged].PushBack(msgs_.get(), e);
  return e;
}

uint32_t MatchQueues::AdmitRendezvous(PeerId source, bool tagged, uint64_t tag, uint64_t data,
                                      uint16_t msg_flags, uint64_t total, uint32_t msg_id,
                                      uint64_t session) {
  if (free_msgs_.empty()) return kNone;
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
    const uint64_t in_chunk = m.received % chunk_bytes_;
    const size_t n = std::min<size_t>(left, chunk_bytes_ - in_chunk);
    std::memcpy(chunk(m.write_chunk) + in_chunk, src, n);
    src += n;
    left -= n;
    m.received += n;
    if (m.received % chunk_bytes_ == 0) m.write_chunk = chunk_next_[m.write_chunk];
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
  for (uint32_t c = m.first_chunk; done < total && c != kNone; c = chunk_next_[c]) {
    const uint64_t n = std::min<uint64_t>(chunk_bytes_, total - done);
    std::memcpy(dst + done, chunk(c), n);
    done += n;
  }
  return done;
}

void MatchQueues::Release(uint32_t e) {
  UnexpectedMsg& m = msgs_[e];
  unexpected_[m.tagged].Remove(msgs_.get(), e);
  for (uint32_t c = m.first_chunk; c != kNone;) {
    const uint32_t next = chunk_next_[c];
    free_chunks_.Push(c);
    c = next;
  }
  used_chunks_ -= m.chunks;
  m.first_chunk = m.write_chunk = kNone;
  m.chunks = 0;
  free_msgs_.Push(e);
}

}  // namespace bypass::rdm
