#include "fabric/rdm/completion_queue.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace bypass::rdm {

CompletionQueue::CompletionQueue(uint32_t capacity, uint32_t extra_errors)
    : capacity_(capacity),
      extra_(extra_errors),
      ok_(new Completion[capacity]),
      err_(new ErrorCompletion[capacity + extra_errors]),
      err_reserved_(new bool[capacity + extra_errors]()) {}

void CompletionQueue::PushError(const ErrorCompletion& e) {
  const uint32_t at = Wrap(err_head_ + err_count_, capacity_ + extra_);
  err_[at] = e;
  err_reserved_[at] = true;
  ++err_count_;
}

bool CompletionQueue::PushUnreservedError(const ErrorCompletion& e) {
  if (unreserved_errors_ == extra_) return false;
  const uint32_t at = Wrap(err_head_ + err_count_, capacity_ + extra_);
  err_[at] = e;
  err_reserved_[at] = false;
  ++err_count_;
  ++unreserved_errors_;
  return true;
}

size_t CompletionQueue::PollErrors(absl::Span<ErrorCompletion> out) {
  const size_t n = std::min<size_t>(out.size(), err_count_);
  for (size_t i = 0; i < n; ++i) {
    out[i] = err_[err_head_];
    if (err_reserved_[err_head_]) {
      --reserved_;
    } else {
      --unreserved_errors_;
    }
    err_head_ = Wrap(err_head_ + 1, capacity_ + extra_);
  }
  err_count_ -= static_cast<uint32_t>(n);
  return n;
}

}  // namespace bypass::rdm
