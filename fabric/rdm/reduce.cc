// rdm::Reduce (rdm.h): the atomic op table (atomic.h) applied to local
// memory, so a reduction outside the engine uses the same definitions of
// every (op, datatype) pair as a peer's atomics.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "fabric/rdm/atomic.h"
#include "fabric/rdm/rdm.h"
#include "fabric/rdm/types.h"

namespace bypass::rdm {

void Reduce(AtomicOp op, AtomicType type, size_t count, uint8_t* target, const uint8_t* operand) {
  const size_t size = AtomicTypeSize(type);
  // ExecuteAtomic counts in 32 bits: a longer array goes in pieces.
  constexpr size_t kPiece = size_t{1} << 30;
  while (count > 0) {
    const size_t n = std::min(count, kPiece);
    ExecuteAtomic(op, type, static_cast<uint32_t>(n), target, operand, nullptr, nullptr);
    target += n * size;
    operand += n * size;
    count -= n;
  }
}

}  // namespace bypass::rdm
