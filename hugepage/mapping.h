// The mmap/memfd/madvise/mbind steps behind Region (internal).
#ifndef BYPASS_HUGEPAGE_MAPPING_H_
#define BYPASS_HUGEPAGE_MAPPING_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hugepage/region.h"
#include "hugepage/units.h"

namespace bypass::hugepage::internal {

// One mapped range and the memfd behind it (-1 when private). Plain data:
// Unmap() releases it.
struct Mapping {
  void* data = nullptr;
  Bytes size;
  int fd = -1;
};

// Maps opts.size rounded up to the page size of `backing`, binds it to
// opts.numa_node (REQUIRES: a valid node, or -1) and prefaults it when
// opts.prefault. On failure nothing stays mapped and the message is one line
// naming the backing, what failed, why, and what to do.
absl::StatusOr<Mapping> MapBacking(Backing backing, const RegionOptions& opts);

// Maps `size` of a memfd that another Region created with `backing`, shared,
// and prefaults it. The Mapping owns a duplicate of fd; the caller keeps fd.
absl::StatusOr<Mapping> MapFd(int fd, Bytes size, Backing backing);

// munmap and close.
void Unmap(const Mapping& m);

// An absl::Status with errno's code: "<what>: <strerror(err)>[: <todo>]".
absl::Status ErrnoError(int err, const std::string& what, const std::string& todo = "");

}  // namespace bypass::hugepage::internal

#endif  // BYPASS_HUGEPAGE_MAPPING_H_
