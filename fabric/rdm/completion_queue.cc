#include "fabric/rdm/completion_queue.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace bypass::rdm {
namespace {

// i mod n for i < 2n: ring positions without a division (a 32-bit divide
// costs tens of cycles, and this runs several times per message).
inline uint32_t Wrap(uint32_t i, uint32_t n) { return i >= n ? i - n : i; }

}  // namespace

CompletionQueue::CompletionQueue(uint32_t capacity, uint32_t extra_errors)
    : capacity_(capacity),
      extra_(extra_errors),
      ok_(new Completion[capacity]),
      err_(new ErrorCompletion[capacity + extra_errors]),
      err_reserved_(new bool[capacity + extra_errors]()) {}

void CompletionQueue::Push(const Completion& c) {
  ok_[Wrap(ok_head_ + ok_count_, capacity_)] = c;
  ++ok_count_;
}

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

size_t CompletionQueue::Poll(absl::Span<Completion> out) {
  const size_t n = std::min<size_t>(out.size(), ok_count_);
  for (size_t i = 0; i < n; ++i) {
    out[i] = ok_[ok_head_];
    ok_head_ = Wrap(ok_head_ + 1, capacity_);
  }
  ok_count_ -= static_cast<uint32_t>(n);
  reserved_ -= static_cast<uint32_t>(n);
  return n;
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
