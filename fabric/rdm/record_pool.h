// Records that only a few peers hold at a time: the message or RMA write a
// peer is sending us between its first and last segment, a handshake in
// progress. A peer keeps a 4-byte index (kNone: none) instead of the
// record, takes one when it starts such a thing and gives it back when it
// ends, so an idle peer costs the index alone (PROTOCOL.md, "Memory per
// peer").
//
// `reserve` records are made with the pool: while at most that many are
// taken at once nothing allocates. Beyond them the pool grows (its arrays
// double, amortized): a peer never waits for a record, for the reason a
// send ring is never waited for (PROTOCOL.md, "Memory per peer": waiting
// would make one peer depend on others' progress). When the last record of
// such a burst comes back the pool shrinks to its reserve again, so that
// what idle peers cost does not depend on how many were busy at once
// before. Taking a record may move the others: a reference into the pool
// is good until the next Take.
#ifndef BYPASS_FABRIC_RDM_RECORD_POOL_H_
#define BYPASS_FABRIC_RDM_RECORD_POOL_H_

#include <cstdint>
#include <vector>

namespace bypass::rdm {

template <class T>
class RecordPool {
 public:
  explicit RecordPool(uint32_t reserve) : reserve_(reserve) {
    records_.reserve(reserve);
    free_.reserve(reserve);
  }
  RecordPool(const RecordPool&) = delete;
  RecordPool& operator=(const RecordPool&) = delete;

  // A fresh record (T{}); its index.
  uint32_t Take() {
    ++taken_;
    if (!free_.empty()) {
      const uint32_t i = free_.back();
      free_.pop_back();
      records_[i] = T{};
      return i;
    }
    records_.emplace_back();
    // Every record may come back at once: room for all of them, so that
    // Give never allocates.
    if (free_.capacity() < records_.capacity()) free_.reserve(records_.capacity());
    return static_cast<uint32_t>(records_.size() - 1);
  }
  // REQUIRES: i was taken and not given back since.
  void Give(uint32_t i) {
    free_.push_back(i);
    if (--taken_ == 0 && records_.capacity() > reserve_) Shrink();
  }
  T& operator[](uint32_t i) { return records_[i]; }
  const T& operator[](uint32_t i) const { return records_[i]; }
  // Records taken now; records made (taken or free).
  uint32_t taken() const { return taken_; }
  uint32_t made() const { return static_cast<uint32_t>(records_.size()); }

 private:
  // Back to the reserve (only when it grew beyond it and all came back).
  void Shrink() {
    std::vector<T>().swap(records_);
    std::vector<uint32_t>().swap(free_);
    records_.reserve(reserve_);
    free_.reserve(reserve_);
  }

  const uint32_t reserve_;
  std::vector<T> records_;
  std::vector<uint32_t> free_;
  uint32_t taken_ = 0;
};

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_RECORD_POOL_H_
