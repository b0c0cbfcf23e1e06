// Intrusive FIFO lists of slots in a fixed array, linked by index: the
// engine's queues, with no allocation after creation.
#ifndef BYPASS_FABRIC_RDM_INDEX_LIST_H_
#define BYPASS_FABRIC_RDM_INDEX_LIST_H_

#include <cstdint>
#include <memory>

namespace bypass::rdm {

inline constexpr uint32_t kNone = UINT32_MAX;

// A doubly linked FIFO of indices into an array of T, where T has
// `uint32_t prev, next` members. O(1) push, pop and removal from the middle.
template <class T>
class IndexList {
 public:
  uint32_t front() const { return head_; }
  bool empty() const { return head_ == kNone; }
  uint32_t size() const { return size_; }

  // REQUIRES: slot i is in no list.
  void PushBack(T* base, uint32_t i) {
    base[i].prev = tail_;
    base[i].next = kNone;
    if (tail_ == kNone) {
      head_ = i;
    } else {
      base[tail_].next = i;
    }
    tail_ = i;
    ++size_;
  }

  // Inserts i right before `at`. REQUIRES: i is in no list; at is in this one.
  void InsertBefore(T* base, uint32_t at, uint32_t i) {
    const uint32_t p = base[at].prev;
    base[i].prev = p;
    base[i].next = at;
    base[at].prev = i;
    if (p == kNone) {
      head_ = i;
    } else {
      base[p].next = i;
    }
    ++size_;
  }

  // REQUIRES: slot i is in this list.
  void Remove(T* base, uint32_t i) {
    const uint32_t p = base[i].prev;
    const uint32_t n = base[i].next;
    if (p == kNone) {
      head_ = n;
    } else {
      base[p].next = n;
    }
    if (n == kNone) {
      tail_ = p;
    } else {
      base[n].prev = p;
    }
    base[i].prev = base[i].next = kNone;
    --size_;
  }

 private:
  uint32_t head_ = kNone;
  uint32_t tail_ = kNone;
  uint32_t size_ = 0;
};

// A LIFO stack of free slot indices 0..n-1, sized at creation: 0 comes out
// first, then 1, ..., and a slot pushed back comes out next. Slots never
// used are counted, not stacked, so that a large pool costs no memory
// until it is used (the stack's pages are touched only as slots return).
class FreeSlots {
 public:
  explicit FreeSlots(uint32_t n) : slots_(new uint32_t[n]), n_(n) {}
  bool empty() const { return available() == 0; }
  uint32_t available() const { return count_ + (n_ - fresh_); }
  // REQUIRES: !empty().
  uint32_t Pop() { return count_ > 0 ? slots_[--count_] : fresh_++; }
  // REQUIRES: i was popped and is not free.
  void Push(uint32_t i) { slots_[count_++] = i; }

 private:
  std::unique_ptr<uint32_t[]> slots_;
  uint32_t n_;
  uint32_t count_ = 0;  // returned slots on the stack
  uint32_t fresh_ = 0;  // slots [fresh_, n_) never popped
};

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_INDEX_LIST_H_
