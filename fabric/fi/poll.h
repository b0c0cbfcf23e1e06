// The poll set (fi_poll(3)): CQs and counters progressed and checked for
// events together by fi_poll.
#ifndef BYPASS_FABRIC_FI_POLL_H_
#define BYPASS_FABRIC_FI_POLL_H_

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include <mutex>
#include <vector>

#include "fabric/fi/common.h"

namespace bypass::fi {

struct Domain;

// A poll set of one domain; its members (CQs, counters, of any domain) each
// hold a reference, so none closes while it is in the set.
struct PollSet {
  fid_poll fid;
  Obj obj;
  Domain* domain = nullptr;
  std::mutex mu;  // members
  std::vector<::fid*> members;
};
static_assert(offsetof(PollSet, fid) == 0);

inline PollSet* AsPollSet(const void* f) { return As<PollSet>(f, FI_CLASS_POLL); }

// fi_poll_open (the domain's op).
int PollOpen(fid_domain* domain, fi_poll_attr* attr, fid_poll** pollset);

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_POLL_H_
