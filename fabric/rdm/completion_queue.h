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

  // REQUIRES: a reservation for it.
  void Push(const Completion& c);
  void PushError(const ErrorCompletion& e);
  // Without a reservation (inject errors); false if there is no room.
  bool PushUnreservedError(const ErrorCompletion& e);

  size_t Poll(absl::Span<Completion> out);
  size_t PollErrors(absl::Span<ErrorCompletion> out);

  uint32_t ready() const { return ok_count_; }
  uint32_t errors_ready() const { return err_count_; }

 private:
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
