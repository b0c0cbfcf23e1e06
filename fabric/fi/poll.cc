// Poll sets: fi_poll progresses every member's endpoints and answers the
// contexts of the CQs that are not empty and of the counters whose value
// or error count changed since the last fi_poll, fi_cntr_set or
// fi_cntr_add (fi_poll(3)).
#include "fabric/fi/poll.h"

#include <rdma/fi_errno.h>

#include <cstring>
#include <memory>

#include "fabric/fi/cntr.h"
#include "fabric/fi/cq.h"
#include "fabric/fi/domain.h"
#include "fabric/fi/progress.h"
#include "fabric/fi/services.h"

namespace bypass::fi {
namespace {

int PollClose(fid* f) {
  PollSet* ps = AsPollSet(f);
  if (ps == nullptr) return BadFid(f, FI_CLASS_POLL);
  {
    std::lock_guard<std::mutex> l(ps->mu);
    if (!ps->members.empty() || ps->obj.refs.load() > 0) return -FI_EBUSY;
  }
  ps->domain->obj.refs.fetch_sub(1);
  ps->obj.magic = Obj::kDead;
  Retire(ps);
  return 0;
}

fi_ops g_poll_fi_ops = {
    .size = sizeof(fi_ops),
    .close = PollClose,
    .bind = NoSysBind,
    .control =
        [](fid* f, int, void*) {
          return AsPollSet(f) == nullptr ? BadFid(f, FI_CLASS_POLL) : -FI_ENOSYS;
        },
    .ops_open = NoSysOpsOpen,
    .tostr = NoSysTostr,
    .ops_set = NoSysOpsSet,
};

// The member's Obj (a CQ or a counter), or null for any other fid.
Obj* MemberObj(fid* f) {
  if (Cq* cq = AsCq(f)) return &cq->obj;
  if (Cntr* c = AsCntr(f)) return &c->obj;
  return nullptr;
}

// Progresses a member and says whether it has an event (a counter's
// baseline moves to what fi_poll saw).
bool Polled(fid* f) {
  if (Cq* cq = AsCq(f)) {
    CallWatch w(cq->domain);
    DomainGuard g(*cq->lock.load());
    ProgressAll(cq->eps);
    return !cq->entries.empty() || !cq->errors.empty();
  }
  Cntr* c = AsCntr(f);
  {
    CallWatch w(c->domain);
    DomainGuard g(*c->lock.load());
    ProgressAll(c->eps);
  }
  const uint64_t v = c->value.load();
  const uint64_t e = c->errors.load();
  const bool changed = c->poll_value.exchange(v) != v;
  return (c->poll_errors.exchange(e) != e) || changed;
}

int Poll(fid_poll* f, void** context, int count) {
  PollSet* ps = AsPollSet(f);
  if (ps == nullptr) return BadFid(f, FI_CLASS_POLL);
  if (count < 0 || (count > 0 && context == nullptr)) return -FI_EINVAL;
  std::vector<fid*> members;
  {
    std::lock_guard<std::mutex> l(ps->mu);
    members = ps->members;
  }
  int n = 0;
  for (fid* m : members) {
    if (n == count) break;
    if (Polled(m)) context[n++] = m->context;
  }
  return n;
}

int PollAdd(fid_poll* f, fid* member, uint64_t flags) {
  PollSet* ps = AsPollSet(f);
  if (ps == nullptr) return BadFid(f, FI_CLASS_POLL);
  if (flags != 0) return -FI_EBADFLAGS;
  Obj* o = MemberObj(member);
  if (o == nullptr) {
    BYPASS_FI_WARN(FI_LOG_DOMAIN, "fi_poll_add: only CQs and counters join a poll set\n");
    return -FI_EINVAL;
  }
  std::lock_guard<std::mutex> l(ps->mu);
  for (fid* m : ps->members) {
    if (m == member) return -FI_EALREADY;
  }
  ps->members.push_back(member);
  o->refs.fetch_add(1);
  return 0;
}

int PollDel(fid_poll* f, fid* member, uint64_t flags) {
  PollSet* ps = AsPollSet(f);
  if (ps == nullptr) return BadFid(f, FI_CLASS_POLL);
  if (flags != 0) return -FI_EBADFLAGS;
  std::lock_guard<std::mutex> l(ps->mu);
  for (fid* m : ps->members) {
    if (m == member) {
      EraseOne(ps->members, member);
      MemberObj(member)->refs.fetch_sub(1);
      return 0;
    }
  }
  return -FI_ENOENT;
}

fi_ops_poll g_poll_ops = {
    .size = sizeof(fi_ops_poll),
    .poll = Poll,
    .poll_add = PollAdd,
    .poll_del = PollDel,
};

}  // namespace

int PollOpen(fid_domain* domain, fi_poll_attr* attr, fid_poll** out) {
  Domain* d = AsDomain(domain);
  if (d == nullptr) return BadFid(domain, FI_CLASS_DOMAIN);
  if (attr == nullptr || out == nullptr) return -FI_EINVAL;
  if (attr->flags != 0) return -FI_EBADFLAGS;
  auto ps = std::make_unique<PollSet>();
  std::memset(&ps->fid, 0, sizeof(ps->fid));
  ps->fid.fid.fclass = FI_CLASS_POLL;
  ps->fid.fid.ops = &g_poll_fi_ops;
  ps->fid.ops = &g_poll_ops;
  ps->domain = d;
  d->obj.refs.fetch_add(1);
  *out = &ps.release()->fid;
  return 0;
}

}  // namespace bypass::fi
