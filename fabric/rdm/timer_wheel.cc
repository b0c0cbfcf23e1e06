// The hierarchical timer wheel (timer_wheel.h).
#include "fabric/rdm/timer_wheel.h"

#include <cstdint>

namespace bypass::rdm {

TimerWheel::TimerWheel(uint32_t n)
    : n_(n),
      due_(n + kLevels * kSlots),
      firing_(n + kLevels * kSlots + 1),
      nodes_(new Node[n + kLevels * kSlots + 2]) {
  for (uint32_t s = n; s <= firing_; ++s) nodes_[s].prev = nodes_[s].next = s;
}

void TimerWheel::Rearm(uint32_t i, uint64_t tick) {
  if (armed(i)) Unlink(i);
  nodes_[i].tick = tick;
  Insert(i);
}

void TimerWheel::Insert(uint32_t i) {
  const uint64_t tick = nodes_[i].tick;
  if (tick <= current_) {
    PushBack(due_, i);
    return;
  }
  const int level = LevelOf(tick, current_);
  const uint32_t slot = Digit(tick, level);
  bitmap_[level] |= uint64_t{1} << slot;
  levels_ |= 1u << level;
  PushBack(Sentinel(level, slot), i);
}

void TimerWheel::PushBack(uint32_t list, uint32_t i) {
  Node& s = nodes_[list];
  nodes_[i].prev = s.prev;
  nodes_[i].next = list;
  nodes_[s.prev].next = i;
  s.prev = i;
  if (i < n_) ++armed_;
}

void TimerWheel::Unlink(uint32_t i) {
  Node& node = nodes_[i];
  const uint32_t p = node.prev;
  nodes_[p].next = node.next;
  nodes_[node.next].prev = p;
  node.prev = node.next = kUnlinked;
  --armed_;
  // The last timer of a wheel slot: its bit goes.
  if (p >= n_ && p < due_ && nodes_[p].next == p) {
    const uint32_t s = p - n_;
    ClearSlot(static_cast<int>(s / kSlots), s % kSlots);
  }
}

void TimerWheel::Splice(uint32_t from, uint32_t to) {
  Node& f = nodes_[from];
  if (f.next == from) return;
  Node& t = nodes_[to];
  nodes_[t.prev].next = f.next;
  nodes_[f.next].prev = t.prev;
  nodes_[f.prev].next = to;
  t.prev = f.prev;
  f.prev = f.next = from;
}

uint64_t TimerWheel::NextSlotTick() const {
  // A slot of a lower level always comes before any slot above it that
  // holds something (which lies beyond the current slot of the level below).
  // Only levels holding something are looked at (usually one or two).
  for (uint32_t m = levels_; m != 0; m &= m - 1) {
    const int level = std::countr_zero(m);
    const uint32_t at = Digit(current_, level);
    const uint64_t later = at == kSlots - 1 ? 0 : bitmap_[level] & (~uint64_t{0} << (at + 1));
    if (later == 0) continue;
    const int shift = kSlotBits * level;
    const uint64_t above = level + 1 == kLevels ? 0 : current_ >> (shift + kSlotBits) << (shift + kSlotBits);
    return above | uint64_t{static_cast<uint32_t>(std::countr_zero(later))} << shift;
  }
  return UINT64_MAX;
}

uint64_t TimerWheel::next_ns() const {
  if (nodes_[due_].next != due_) return current_ << kTickShift;
  const uint64_t tick = NextSlotTick();
  return tick == UINT64_MAX ? UINT64_MAX : tick << kTickShift;
}

void TimerWheel::Advance(uint64_t now_tick) {
  for (uint64_t t = NextSlotTick(); t <= now_tick; t = NextSlotTick()) {
    current_ = t;
    // Every level's slot at the new tick, top down: its timers move to the
    // level their tick now differs in (always below, and never into the
    // slot of the new tick there: its lower digits are 0), or to the due
    // list; so the levels holding something before the first move are all
    // there is to visit.
    for (uint32_t m = levels_; m != 0;) {
      const int level = 31 - std::countl_zero(m);
      m &= ~(1u << level);
      const uint32_t slot = Digit(t, level);
      if ((bitmap_[level] >> slot & 1) == 0) continue;
      ClearSlot(level, slot);
      const uint32_t s = Sentinel(level, slot);
      for (uint32_t i = nodes_[s].next; i != s;) {
        const uint32_t next = nodes_[i].next;
        --armed_;  // Insert counts it again
        Insert(i);
        i = next;
      }
      nodes_[s].prev = nodes_[s].next = s;
    }
  }
  if (now_tick > current_) current_ = now_tick;
}

}  // namespace bypass::rdm
