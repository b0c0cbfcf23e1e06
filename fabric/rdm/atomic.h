// The atomic op table (fi_atomic(3)): every operation on every datatype it
// is defined for (types.h, AtomicDefined), as one template per class of
// type. A target applies a peer's atomic with ExecuteAtomic inside its
// progress, one at a time per endpoint: atomic with respect to other
// bypass atomics on the target, not to the target application's own
// stores (fi_atomic(3): one actor at a time).
#ifndef BYPASS_FABRIC_RDM_ATOMIC_H_
#define BYPASS_FABRIC_RDM_ATOMIC_H_

#include <cstdint>

#include "fabric/rdm/types.h"

namespace bypass::rdm {

// Applies op element-wise to count elements of type at target (any
// alignment): operand (unused for kRead), compare (compare ops only).
// With old, the target's values from before land there first (fetching
// and compare atomics). REQUIRES: AtomicDefined(op, type); buffers of
// count * AtomicTypeSize(type) bytes; old does not overlap target.
void ExecuteAtomic(AtomicOp op, AtomicType type, uint32_t count, uint8_t* target,
                   const uint8_t* operand, const uint8_t* compare, uint8_t* old);

// "SUM", "UINT64": for messages.
const char* AtomicOpName(AtomicOp op);
const char* AtomicTypeName(AtomicType t);

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_ATOMIC_H_
