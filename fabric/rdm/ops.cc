#include "fabric/rdm/ops.h"

#include <atomic>
#include <cstdint>
#include <memory>

namespace bypass::rdm {

OpTable::OpTable(Context& ctx, uint32_t user_slots, uint32_t engine_slots, uint32_t inject_size)
    : ctx_(ctx),
      user_slots_(user_slots),
      engine_slots_(engine_slots),
      inject_size_(inject_size),
      ops_(new SendOp[uint64_t{user_slots} + engine_slots]),
      gen_(new uint16_t[uint64_t{user_slots} + engine_slots]()),
      free_user_(user_slots),
      free_engine_(engine_slots),
      inject_arena_(new uint8_t[uint64_t{user_slots} * inject_size]),
      guards_(new uint64_t[user_slots]()) {}

OpTable::~OpTable() {
  for (uint32_t o = 0; o < user_slots_; ++o) {
    std::atomic_ref<uint64_t>(guards_[o]).store(0, std::memory_order_seq_cst);
  }
}

}  // namespace bypass::rdm
