// Atomics (fi_atomic(3)) on RDM endpoints: the fi_ops_atomic table
// (g_atomic_ops, declared in ep.h) and fi_query_atomic. Every call becomes
// one engine atomic (rdm::Endpoint::Atomic), executed exactly once at the
// target in its progress; the (op, datatype) pairs and counts are the
// engine's (rdm::AtomicDefined, rdm::AtomicMaxCount). README.md, "Atomics".
#ifndef BYPASS_FABRIC_FI_ATOMIC_H_
#define BYPASS_FABRIC_FI_ATOMIC_H_

#include <rdma/fi_atomic.h>
#include <rdma/fi_domain.h>

#include <cstdint>

namespace bypass::fi {

// fi_query_atomic (fi_ops_domain::query_atomic): flags 0 (base),
// FI_FETCH_ATOMIC or FI_COMPARE_ATOMIC; the count and size of the pair, or
// -FI_EOPNOTSUPP where it is not offered (FI_TAGGED: no atomics to tagged
// buffers).
int QueryAtomic(fid_domain* domain, fi_datatype datatype, fi_op op, fi_atomic_attr* attr,
                uint64_t flags);

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_ATOMIC_H_
