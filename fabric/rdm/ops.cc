#include "fabric/rdm/ops.h"

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
      inject_arena_(new uint8_t[uint64_t{user_slots} * inject_size]) {}

uint32_t OpTable::Alloc(OpKind kind) {
  FreeSlots& pool = Traits(kind).user ? free_user_ : free_engine_;
  if (pool.empty()) return kNone;
  const uint32_t o = Traits(kind).user ? pool.Pop() : user_slots_ + pool.Pop();
  std::construct_at(&ops_[o]);  // in place: no temporary copied over it
  ops_[o].kind = kind;
  ++live_[static_cast<size_t>(kind)];
  return o;
}

void OpTable::SetKind(uint32_t o, OpKind kind) {
  --live_[static_cast<size_t>(ops_[o].kind)];
  ops_[o].kind = kind;
  ++live_[static_cast<size_t>(kind)];
}

void OpTable::Free(uint32_t o) {
  SendOp& op = ops_[o];
  --live_[static_cast<size_t>(op.kind)];
  if (op.ref != nullptr) --*op.ref;
  op.ref = nullptr;
  op.state = OpState::kIdle;
  gen_[o] = static_cast<uint16_t>((gen_[o] + 1) & ((1u << (32 - kRmaIdSlotBits)) - 1));
  if (IsUser(o)) {
    free_user_.Push(o);
  } else {
    free_engine_.Push(o - user_slots_);
    ctx_.NoteFreed();  // a peer we refused for lack of one may retry now
  }
}

}  // namespace bypass::rdm
