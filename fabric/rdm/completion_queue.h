// The completion and error rings of an endpoint, with room reserved at post
// time so that a completion never finds them full.
#ifndef BYPASS_FABRIC_RDM_COMPLETION_QUEUE_H_
#define BYPASS_FABRIC_RDM_COMPLETION_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/types/span.h"
#include "fabric/rdm/types.h"

namespace bypass::rdm {

// Fixed rings of Completion and ErrorCompletion. An operation that will
// complete reserves an entry when it is posted (Reserve) and releases it when
// the user reads its record, so `capacity` bounds operations outstanding plus
// records unread. Injects have no completion; their rare errors go to a few
// extra error entries when there is room, and are counted otherwise.
class CompletionQueue {
 public:
  CompletionQueue(uint32_t capacity, uint32_t extra_errors);
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;

  // False when `capacity` entries are reserved or unread.
  bool Reserve() {
    if (reserved_ == capacity_) return false;
    ++reserved_;
    return true;
  }
  // Gives back a reservation an operation did not use.
  void Unreserve() { --reserved_; }

  // REQUIRES: a reservation for it. Inline: one per message.
  void Push(const Completion& c) { Next() = c; }
  // The next entry, counted as ready: the caller fills it in place.
  // REQUIRES: a reservation for it.
  Completion& Next() {
    Completion& c = ok_[Wrap(ok_head_ + ok_count_, capacity_)];
    ++ok_count_;
    return c;
  }
  void PushError(const ErrorCompletion& e);
  // Without a reservation (inject errors); false if there is no room.
  bool PushUnreservedError(const ErrorCompletion& e);

  size_t Poll(absl::Span<Completion> out) {
    const size_t n = out.size() < ok_count_ ? out.size() : ok_count_;
    for (size_t i = 0; i < n; ++i) {
      out[i] = ok_[ok_head_];
      ok_head_ = Wrap(ok_head_ + 1, capacity_);
    }
    ok_count_ -= static_cast<uint32_t>(n);
    reserved_ -= static_cast<uint32_t>(n);
    return n;
  }
  size_t PollErrors(absl::Span<ErrorCompletion> out);

  uint32_t ready() const { return ok_count_; }
  uint32_t errors_ready() const { return err_count_; }

 private:
  // i mod n for i < 2n: ring positions without a division (a 32-bit divide
  // costs tens of cycles, and this runs several times per message).
  static uint32_t Wrap(uint32_t i, uint32_t n) { return i >= n ? i - n : i; }

  uint32_t capacity_;
  uint32_t extra_;
  uint32_t reserved_ = 0;
  std::unique_ptr<Completion[]> ok_;
  uint32_t ok_head_ = 0;
  uint32_t ok_count_ = 0;
  // Error ring: capacity_ + extra_ entries; each remembers whether it holds
  // a reservation.
  std::unique_ptr<ErrorCompletion[]> err_;
  std::unique_ptr<bool[]> err_reserved_;
  uint32_t err_head_ = 0;
  uint32_t err_count_ = 0;
  uint32_t unreserved_errors_ = 0;
};

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_COMPLETION_QUEUE_H_
