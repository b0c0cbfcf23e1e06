// A hierarchical timer wheel with one timer per peer slot (PROTOCOL.md,
// "Timers"): the engine's deadlines (delayed ACKs, tail-loss probes, RTOs,
// RNR retries, pacing, HELLO retries, liveness probes, peer timeouts) are
// each peer's; the earliest of a peer's is its one timer here. Arming,
// moving and cancelling are O(1); a progress pass with nothing due reads
// one cached deadline, and one with something due visits only what is due
// (and the few wheel slots cascaded on the way), never every peer.
//
// Time is counted in ticks of 2^kTickShift ns. Level L has 64 slots of
// 64^L ticks each; a timer sits at the level of the highest 6-bit digit in
// which its tick differs from the wheel's current tick, in the slot of that
// digit (as Linux's and Kafka's wheels hash by absolute time), and moves
// down a level each time the wheel reaches its slot. Ten levels cover 2^60
// ticks: every uint64_t nanosecond deadline, so nothing ever overflows.
// A deadline is rounded up to a tick: a timer never fires before its
// deadline, and at most one tick after it.
//
// Lists are circular and doubly linked by index through one array: a slot
// per timer, then a sentinel per wheel slot, then the due and firing lists'
// sentinels. Removal needs no list head; a sentinel left alone after a
// removal clears its slot's bit in the level's bitmap.
#ifndef BYPASS_FABRIC_RDM_TIMER_WHEEL_H_
#define BYPASS_FABRIC_RDM_TIMER_WHEEL_H_

#include <bit>
#include <cstdint>
#include <memory>

namespace bypass::rdm {

class TimerWheel {
 public:
  static constexpr int kTickShift = 8;  // 256 ns ticks
  static constexpr int kSlotBits = 6;
  static constexpr uint32_t kSlots = 1u << kSlotBits;
  static constexpr int kLevels = 10;
  // Bytes per timer (the per-peer cost: PROTOCOL.md, "Memory per peer").
  static constexpr size_t kBytesPerTimer = 16;

  // Timers 0..n-1, none armed.
  explicit TimerWheel(uint32_t n);
  TimerWheel(const TimerWheel&) = delete;
  TimerWheel& operator=(const TimerWheel&) = delete;

  // Timer i fires at `when_ns` or earlier if it is armed earlier already
  // (a peer's timer is the earliest of its deadlines). Returns the time it
  // fires at now (rounded up to a tick). Inline: most calls find the timer
  // armed as early already (a deadline later than the peer's earliest) and
  // return after one compare.
  uint64_t ArmAtMost(uint32_t i, uint64_t when_ns) {
    const uint64_t tick = TickOf(when_ns);
    const Node& node = nodes_[i];
    if (node.prev != kUnlinked && node.tick <= tick) return node.tick << kTickShift;
    Rearm(i, tick);
    return tick << kTickShift;
  }
  // Timer i fires at `when_ns` (rounded up to a tick), later as well as
  // earlier than it was armed: for a caller that knows no deadline of the
  // timer's is before when_ns (a moot one left it early). Returns the time
  // it fires at now.
  uint64_t Move(uint32_t i, uint64_t when_ns) {
    const uint64_t tick = TickOf(when_ns);
    const Node& node = nodes_[i];
    if (node.prev == kUnlinked || node.tick != tick) Rearm(i, tick);
    return tick << kTickShift;
  }
  // When timer i fires (ns). REQUIRES: armed(i).
  uint64_t at_ns(uint32_t i) const { return nodes_[i].tick << kTickShift; }
  void Cancel(uint32_t i) {
    if (armed(i)) Unlink(i);
  }
  bool armed(uint32_t i) const { return nodes_[i].prev != kUnlinked; }
  uint32_t armed_count() const { return armed_; }

  // No timer fires before this (ns); UINT64_MAX when none is armed.
  uint64_t next_ns() const;

  // Fires every timer whose deadline is at or before now_ns, each disarmed
  // before fn(i) runs. fn may arm and cancel any timer; one it arms for
  // now_ns or earlier fires in the next call, not this one. Returns how
  // many fired.
  template <class F>
  uint32_t Expire(uint64_t now_ns, F&& fn) {
    Advance(now_ns >> kTickShift);
    Splice(due_, firing_);
    uint32_t fired = 0;
    for (uint32_t i = nodes_[firing_].next; i != firing_; i = nodes_[firing_].next) {
      Unlink(i);
      ++fired;
      fn(i);
    }
    return fired;
  }

 private:
  struct Node {
    uint64_t tick = 0;
    uint32_t prev = kUnlinked;  // kUnlinked: not armed (timers); sentinels link to themselves
    uint32_t next = kUnlinked;
  };
  static_assert(sizeof(Node) == kBytesPerTimer);
  static constexpr uint32_t kUnlinked = UINT32_MAX;

  // Rounded up to a tick, so that a timer never fires early.
  static uint64_t TickOf(uint64_t when_ns) {
    return when_ns >= (UINT64_MAX << kTickShift) ? UINT64_MAX >> kTickShift
                                                 : (when_ns + (1u << kTickShift) - 1) >> kTickShift;
  }
  static int LevelOf(uint64_t tick, uint64_t current) {
    return (63 - std::countl_zero(tick ^ current)) / kSlotBits;
  }
  static uint32_t Digit(uint64_t tick, int level) {
    return static_cast<uint32_t>(tick >> (kSlotBits * level)) & (kSlots - 1);
  }
  uint32_t Sentinel(int level, uint32_t slot) const { return n_ + level * kSlots + slot; }

  // Slot `slot` of `level` empties: its bit goes, and the level's when it
  // was the last.
  void ClearSlot(int level, uint32_t slot) {
    bitmap_[level] &= ~(uint64_t{1} << slot);
    if (bitmap_[level] == 0) levels_ &= ~(1u << level);
  }
  // Timer i (armed elsewhere, or not armed) at tick.
  void Rearm(uint32_t i, uint64_t tick);
  // Timer i into the list its tick belongs to now.
  void Insert(uint32_t i);
  void Unlink(uint32_t i);
  void PushBack(uint32_t list, uint32_t i);
  // Moves every node of list `from` to the end of list `to`.
  void Splice(uint32_t from, uint32_t to);
  // The first tick at which a wheel slot holds something, or UINT64_MAX.
  uint64_t NextSlotTick() const;
  // Moves the wheel to now_tick: each slot reached on the way cascades
  // down a level, into the due list at level 0.
  void Advance(uint64_t now_tick);

  const uint32_t n_;
  const uint32_t due_;
  const uint32_t firing_;
  std::unique_ptr<Node[]> nodes_;  // n_ timers, then the sentinels
  uint64_t bitmap_[kLevels] = {};  // nonempty slots per level
  uint32_t levels_ = 0;            // levels whose bitmap_ is not 0: a pass visits only those
  uint64_t current_ = 0;           // the tick the wheel stands at
  uint32_t armed_ = 0;
};

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_TIMER_WHEEL_H_
