// Collectives over the engine (coll.h): AV sets, groups (fid_mc), and the
// plans of engine sends and receives each collective runs. README.md,
// "Collectives".
#include "fabric/fi/coll.h"

#include <rdma/fi_cm.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "fabric/fi/av.h"
#include "fabric/fi/cq.h"
#include "fabric/fi/domain.h"
#include "fabric/fi/ep.h"
#include "fabric/fi/eq.h"
#include "fabric/fi/fabric.h"
#include "fabric/fi/services.h"
#include "fabric/rdm/rdm.h"

namespace bypass::fi {

// fi_av_set_addr's answers and the fi_addrs of groups (fi_mc_addr): high
// tags no AV index reaches, beside mcast.cc's 0xb1fa tag.
constexpr fi_addr_t kSetAddrTag = 0xb1fb'0000'0000'0000ull;
constexpr fi_addr_t kCollAddrTag = 0xb1fc'0000'0000'0000ull;
constexpr fi_addr_t kAddrTagMask = 0xffff'0000'0000'0000ull;
// A collective moves at least this many bytes (its whole array) by rings
// (reduce-scatter, allgather: every member sends and receives about
// 2 (n-1)/n of it); below, by binomial trees (log2 n rounds of the whole
// array: fewer rounds, more bytes per member).
constexpr size_t kRingMinBytes = 64 * 1024;
// Tag ids of a plan's second phase (the first uses 0 .. n).
constexpr uint16_t kPhase2 = 1024;

struct AvSet {
  fid_av_set fid;
  Obj obj;
  Av* av = nullptr;
  std::vector<fi_addr_t> members;  // in order: member i is rank i
  fi_addr_t addr = 0;              // fi_av_set_addr
};
static_assert(offsetof(AvSet, fid) == 0);

struct CollOp;

// A group an endpoint joined: its members' engine peers by rank.
struct Group {
  fid_mc fid;
  Obj obj;
  Ep* ep = nullptr;
  std::vector<fi_addr_t> members;
  std::vector<rdm::PeerId> peers;  // by rank (our own rank's unused)
  uint32_t rank = 0;
  uint32_t id = 0;                 // 23 bits of every tag
  uint32_t seq = 0;                // the last operation's number (the join is 0)
  bool joined = false;
  size_t busy = 0;  // the join and operations not yet reported
};
static_assert(offsetof(Group, fid) == 0);

// One engine send or receive of a collective; its address is the engine
// operation's context.
struct Xfer {
  CollOp* op = nullptr;
  bool recv = false;
  uint32_t peer = 0;  // a rank
  uint16_t id = 0;    // the low bits of the tag
  uint8_t* buf = nullptr;
  size_t len = 0;
};

// A round: its transfers all posted together, then `after` once its
// receives are complete (a reduction, a copy). The next round starts then
// unless wait_sends: a ring's sends read chunks no later round of its
// phase writes, so they may still be in flight; every other round waits
// for every send posted so far (their buffers are about to change), and
// the operation completes only once all have.
struct Step {
  std::vector<Xfer> xfers;
  std::function<void()> after;
  bool wait_sends = true;
};

struct CollOp {
  Group* group = nullptr;
  bool join = false;
  void* context = nullptr;
  bool report = true;  // a CQ entry on success
  uint64_t tag = 0;
  std::deque<Step> steps;  // a deque: transfers keep their addresses
  size_t cur = 0;          // the step running
  size_t next = 0;         // its next transfer to post
  size_t recvs = 0;        // its receives posted, not complete
  size_t sends = 0;        // sends posted, not complete (of this or earlier steps)
  bool finished = false;   // every step done (or failed): to report
  int err = 0;             // the first failure (FI_* errno), prov_errno, message
  int prov_errno = 0;
  char message[160] = {};
  std::vector<uint8_t> acc, tmp, gather;
  uint8_t none[1] = {};  // the buffer of empty messages
};

// An endpoint's collectives: groups by index (fi_addr low bits), the
// operations running, the engine contexts they posted.
struct Coll {
  std::vector<Group*> groups;
  std::list<std::unique_ptr<CollOp>> ops;
  absl::flat_hash_set<const void*> live;
  absl::flat_hash_map<uint64_t, uint32_t> joins;  // by member-list hash: joins so far
  bool on_eq = false;                              // in ep->eq->cm (a join pending)
};

namespace {

int NoSysControl(fid*, int, void*) { return -FI_ENOSYS; }

int Warn(int err, const char* what, const char* why) {
  BYPASS_FI_WARN(FI_LOG_EP_DATA, "%s: %s\n", what, why);
  return err;
}

AvSet* AsAvSet(const void* f) { return As<AvSet>(f, FI_CLASS_AV_SET); }

// ---- AV sets ----

bool Holds(const AvSet* s, fi_addr_t a) {
  return std::find(s->members.begin(), s->members.end(), a) != s->members.end();
}

bool InAv(Av* av, fi_addr_t a) { return a < av->addrs.size() && av->addrs[a].has_value(); }

// Two sets for a set operation: both live, of one AV.
int Pair(fid_av_set* d, const fid_av_set* s, AvSet** dst, AvSet** src) {
  *dst = AsAvSet(d);
  *src = AsAvSet(s);
  if (*dst == nullptr) return BadFid(d, FI_CLASS_AV_SET);
  if (*src == nullptr) return BadFid(s, FI_CLASS_AV_SET);
  if ((*dst)->av != (*src)->av) return Warn(-FI_EINVAL, "fi_av_set", "the sets are of different AVs");
  return 0;
}

int SetUnion(fid_av_set* d, const fid_av_set* s) {
  AvSet *dst, *src;
  if (int ret = Pair(d, s, &dst, &src); ret != 0) return ret;
  DomainGuard g(dst->av->domain->lock);
  const std::vector<fi_addr_t> add = src->members;  // src may be dst
  for (fi_addr_t a : add) {
    if (!Holds(dst, a)) dst->members.push_back(a);
  }
  return 0;
}

int SetIntersect(fid_av_set* d, const fid_av_set* s) {
  AvSet *dst, *src;
  if (int ret = Pair(d, s, &dst, &src); ret != 0) return ret;
  DomainGuard g(dst->av->domain->lock);
  if (dst == src) return 0;
  std::erase_if(dst->members, [&](fi_addr_t a) { return !Holds(src, a); });
  return 0;
}

int SetDiff(fid_av_set* d, const fid_av_set* s) {
  AvSet *dst, *src;
  if (int ret = Pair(d, s, &dst, &src); ret != 0) return ret;
  DomainGuard g(dst->av->domain->lock);
  if (dst == src) {
    dst->members.clear();
    return 0;
  }
  std::erase_if(dst->members, [&](fi_addr_t a) { return Holds(src, a); });
  return 0;
}

int SetInsert(fid_av_set* f, fi_addr_t a) {
  AvSet* s = AsAvSet(f);
  if (s == nullptr) return BadFid(f, FI_CLASS_AV_SET);
  DomainGuard g(s->av->domain->lock);
  if (!InAv(s->av, a)) return Warn(-FI_EINVAL, "fi_av_set_insert", "the address is not in the AV");
  if (Holds(s, a)) return Warn(-FI_EINVAL, "fi_av_set_insert", "the address is in the set already");
  s->members.push_back(a);
  return 0;
}

int SetRemove(fid_av_set* f, fi_addr_t a) {
  AvSet* s = AsAvSet(f);
  if (s == nullptr) return BadFid(f, FI_CLASS_AV_SET);
  DomainGuard g(s->av->domain->lock);
  auto it = std::find(s->members.begin(), s->members.end(), a);
  if (it == s->members.end()) return Warn(-FI_EINVAL, "fi_av_set_remove", "the address is not in the set");
  s->members.erase(it);
  return 0;
}

int SetAddr(fid_av_set* f, fi_addr_t* out) {
  AvSet* s = AsAvSet(f);
  if (s == nullptr) return BadFid(f, FI_CLASS_AV_SET);
  if (out == nullptr) return -FI_EINVAL;
  *out = s->addr;
  return 0;
}

int CloseAvSet(fid* f) {
  AvSet* s = AsAvSet(f);
  if (s == nullptr) return BadFid(f, FI_CLASS_AV_SET);
  s->av->obj.refs.fetch_sub(1);
  s->obj.magic = Obj::kDead;
  std::vector<fi_addr_t>().swap(s->members);
  Retire(s);
  return 0;
}

fi_ops g_av_set_fi_ops = {
    .size = sizeof(fi_ops),
    .close = CloseAvSet,
    .bind = NoSysBind,
    .control = NoSysControl,
    .ops_open = NoSysOpsOpen,
    .tostr = NoSysTostr,
    .ops_set = NoSysOpsSet,
};

fi_ops_av_set g_av_set_ops = {
    .size = sizeof(fi_ops_av_set),
    .set_union = SetUnion,
    .intersect = SetIntersect,
    .diff = SetDiff,
    .insert = SetInsert,
    .remove = SetRemove,
    .addr = SetAddr,
};

// The FI_*_SET flags (fi_av_set(3)): every collective is supported, so
// each is accepted and changes nothing.
constexpr uint64_t kSetFlags = FI_UNIVERSE | FI_BARRIER_SET | FI_BROADCAST_SET | FI_ALLTOALL_SET |
                               FI_ALLREDUCE_SET | FI_ALLGATHER_SET | FI_REDUCE_SCATTER_SET |
                               FI_REDUCE_SET | FI_SCATTER_SET | FI_GATHER_SET;

// The initial members attr names, or a negative fi_errno (logged).
int InitialMembers(Av* av, const fi_av_set_attr* attr, std::vector<fi_addr_t>* out) {
  constexpr const char* kWhat = "fi_av_set";
  if (attr->flags & FI_UNIVERSE) {
    for (fi_addr_t a = 0; a < av->addrs.size(); ++a) {
      if (av->addrs[a]) out->push_back(a);
    }
    return 0;
  }
  if (attr->start_addr == FI_ADDR_NOTAVAIL && attr->end_addr == FI_ADDR_NOTAVAIL) {
    if (attr->stride != 0) return Warn(-FI_EINVAL, kWhat, "a stride without start_addr and end_addr");
    return 0;
  }
  if (attr->start_addr == FI_ADDR_NOTAVAIL || attr->end_addr == FI_ADDR_NOTAVAIL ||
      attr->end_addr < attr->start_addr || attr->stride == 0) {
    return Warn(-FI_EINVAL, kWhat, "start_addr <= end_addr, both set, and a stride of 1 or more");
  }
  if (av->type != FI_AV_TABLE) return Warn(-FI_EINVAL, kWhat, "a range of addresses needs FI_AV_TABLE");
  const uint64_t span = (attr->end_addr - attr->start_addr) / attr->stride + 1;
  if (attr->count != 0 && span > attr->count) {
    return Warn(-FI_EINVAL, kWhat, "more addresses between start_addr and end_addr than count");
  }
  for (fi_addr_t a = attr->start_addr; a <= attr->end_addr; a += attr->stride) {
    if (InAv(av, a)) out->push_back(a);
    if (attr->end_addr - a < attr->stride) break;
  }
  return 0;
}

// ---- Groups ----

Group* AsGroup(const void* f) {
  Group* g = As<Group>(f, FI_CLASS_MC);
  // FI_CLASS_MC is mcast.cc's class too: a group's fi_addr tells.
  return g != nullptr && (g->fid.fi_addr & kAddrTagMask) == kCollAddrTag ? g : nullptr;
}

int CloseGroup(fid* f) {
  Group* grp = AsGroup(f);
  if (grp == nullptr) return BadFid(f, FI_CLASS_MC);
  Ep* ep = grp->ep;
  {
    DomainGuard g(*ep->lock);
    if (grp->busy > 0) return Warn(-FI_EBUSY, "fi_close", "the group has collectives running");
    Coll* c = ep->coll;
    c->groups[grp->fid.fi_addr & ~kAddrTagMask] = nullptr;
    if (std::all_of(c->groups.begin(), c->groups.end(), [](Group* x) { return x == nullptr; })) {
      delete c;
      ep->coll = nullptr;
    }
  }
  ep->obj.refs.fetch_sub(1);
  grp->obj.magic = Obj::kDead;
  Retire(grp);
  return 0;
}

fi_ops g_group_fi_ops = {
    .size = sizeof(fi_ops),
    .close = CloseGroup,
    .bind = NoSysBind,
    .control = NoSysControl,
    .ops_open = NoSysOpsOpen,
    .tostr = NoSysTostr,
    .ops_set = NoSysOpsSet,
};

// The group behind an operation's coll_addr. REQUIRES: the guard.
Group* FindGroup(Ep* ep, fi_addr_t coll_addr) {
  if (ep->coll == nullptr || (coll_addr & kAddrTagMask) != kCollAddrTag) return nullptr;
  const fi_addr_t i = coll_addr & ~kAddrTagMask;
  return i < ep->coll->groups.size() ? ep->coll->groups[i] : nullptr;
}

// FNV-1a over the members' addresses: every member computes it alike.
uint64_t HashMembers(const Av* av, const std::vector<fi_addr_t>& members) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  for (fi_addr_t a : members) {
    mix(av->addrs[a]->ip.value, 4);
    mix(av->addrs[a]->udp_port, 2);
  }
  return h;
}

// ---- Running a plan ----

void Fail(CollOp* op, int err, int prov_errno, const char* message) {
  if (op->err != 0) return;
  op->err = err;
  op->prov_errno = prov_errno;
  std::snprintf(op->message, sizeof(op->message), "%s", message);
}

// Posts the current step's transfers; false when the engine had no room
// (the rest are posted by CollProgress).
bool PostStep(Ep* ep, CollOp* op) {
  Step& s = op->steps[op->cur];
  Group* g = op->group;
  while (op->next < s.xfers.size() && op->err == 0) {
    Xfer& x = s.xfers[op->next];
    rdm::Result r;
    if (x.recv) {
      r = ep->rdm->PostRecv({.source = g->peers[x.peer], .buf = x.buf, .len = x.len, .context = &x,
                             .tagged = true, .tag = op->tag | x.id, .ignore = 0});
    } else {
      r = ep->rdm->Send({.dest = g->peers[x.peer], .buf = x.buf, .len = x.len, .context = &x,
                         .tag = op->tag | x.id, .flags = rdm::kSendTagged | rdm::kSendAckNow});
    }
    if (r == rdm::Result::kAgain) return false;
    if (r != rdm::Result::kOk) {
      Fail(op, FI_EIO, -static_cast<int>(r), "the engine refused a collective's transfer");
      break;
    }
    ep->coll->live.insert(&x);
    ++(x.recv ? op->recvs : op->sends);
    ++op->next;
  }
  return true;
}

// Runs op's steps as far as their transfers allow.
void Advance(Ep* ep, CollOp* op) {
  while (!op->finished) {
    if (op->cur == op->steps.size() || op->err != 0) {
      if (op->recvs + op->sends > 0) return;  // their buffers are in use until then
      op->finished = true;
      break;
    }
    if (!PostStep(ep, op) || op->recvs > 0) return;
    Step& s = op->steps[op->cur];
    if (op->err != 0) continue;  // finishes once its transfers are done
    if (s.wait_sends && op->sends > 0) return;
    if (s.after) s.after();
    ++op->cur;
    op->next = 0;
  }
}

// Reports a finished op (FI_JOIN_COMPLETE, or a CQ entry); false when its
// queue has no room yet.
bool Report(Ep* ep, CollOp* op) {
  Group* g = op->group;
  if (op->join) {
    bool ok;
    if (op->err == 0) {
      EqEvent ev;
      ev.event = FI_JOIN_COMPLETE;
      fi_eq_entry entry{};
      entry.fid = &g->fid.fid;
      entry.context = op->context;
      ev.bytes.assign(reinterpret_cast<uint8_t*>(&entry),
                      reinterpret_cast<uint8_t*>(&entry) + sizeof(entry));
      ok = EqPush(ep->eq, std::move(ev));
    } else {
      ok = EqPushError(ep->eq, &g->fid.fid, op->context, FI_ADDR_NOTAVAIL, op->err, op->prov_errno,
                       op->message);
    }
    if (ok) g->joined = op->err == 0;
    return ok;
  }
  Cq* cq = ep->cqs.tx;
  if (op->err != 0) {
    if (cq == nullptr) return true;
    if (cq->errors.size() >= cq->capacity) return false;
    CqError e{};
    e.e.op_context = op->context;
    e.e.flags = FI_COLLECTIVE;
    e.e.err = op->err;
    e.e.prov_errno = op->prov_errno;
    e.src = FI_ADDR_NOTAVAIL;
    std::snprintf(e.message, sizeof(e.message), "%s", op->message);
    cq->errors.push_back(e);
    cq->wait.Signal();
    return true;
  }
  if (cq == nullptr || !op->report) return true;
  if (cq->room() == 0) return false;
  CqEntry e{};
  e.e.op_context = op->context;
  e.e.flags = FI_COLLECTIVE;
  e.src = FI_ADDR_NOTAVAIL;
  cq->entries.push_back(e);
  cq->wait.Signal();
  return true;
}

// Leaves ep->eq's list of endpoints fi_eq_read progresses once no join is
// pending (JoinCollective added it).
void SyncEqProgress(Ep* ep) {
  Coll* c = ep->coll;
  const bool want = std::any_of(c->ops.begin(), c->ops.end(), [](auto& op) { return op->join; });
  if (want == c->on_eq) return;
  std::lock_guard<std::mutex> lock(ep->eq->mu);
  if (want) {
    ep->eq->cm.push_back(&ep->fid.fid);
  } else {
    std::erase(ep->eq->cm, &ep->fid.fid);
  }
  c->on_eq = want;
}

// Reports and drops the finished operations, in the order posted.
void ReportFinished(Ep* ep) {
  Coll* c = ep->coll;
  for (auto it = c->ops.begin(); it != c->ops.end();) {
    CollOp* op = it->get();
    if (!op->finished) {
      ++it;
      continue;
    }
    if (!Report(ep, op)) break;
    --op->group->busy;
    it = c->ops.erase(it);
  }
  SyncEqProgress(ep);
}

// Starts a planned op. REQUIRES: the guard.
void Launch(Ep* ep, std::unique_ptr<CollOp> op) {
  CollOp* p = op.get();
  ++p->group->busy;
  ep->coll->ops.push_back(std::move(op));
  Advance(ep, p);
  ReportFinished(ep);
}

// ---- Plans ----

// Builds the steps of one operation at rank r of n members.
class Planner {
 public:
  Planner(CollOp* op, size_t elem, rdm::AtomicOp aop, rdm::AtomicType type)
      : op_(op), n_(static_cast<uint32_t>(op->group->peers.size())), r_(op->group->rank),
        elem_(elem), aop_(aop), type_(type) {}

  uint32_t n() const { return n_; }
  uint32_t r() const { return r_; }
  Step& NewStep() { return op_->steps.emplace_back(); }
  void Send(Step& s, uint32_t to, uint16_t id, const uint8_t* buf, size_t len) {
    s.xfers.push_back({.op = op_, .recv = false, .peer = to, .id = id,
                       .buf = const_cast<uint8_t*>(buf != nullptr ? buf : op_->none), .len = len});
  }
  void Recv(Step& s, uint32_t from, uint16_t id, uint8_t* buf, size_t len) {
    s.xfers.push_back({.op = op_, .recv = true, .peer = from, .id = id,
                       .buf = buf != nullptr ? buf : op_->none, .len = len});
  }
  // Virtual ranks: the root is 0.
  uint32_t V(uint32_t root) const { return (r_ + n_ - root) % n_; }
  uint32_t Real(uint32_t v, uint32_t root) const { return (v + root) % n_; }
  // The elements of chunk i of count split n ways, and where it starts.
  size_t ChunkCount(size_t count, uint32_t i) const { return count / n_ + (i < count % n_ ? 1 : 0); }
  size_t ChunkStart(size_t count, uint32_t i) const {
    return i * (count / n_) + std::min<size_t>(i, count % n_);
  }
  uint32_t Mod(int64_t i) const { return static_cast<uint32_t>(((i % n_) + n_) % n_); }

  // Dissemination: after round k every member has heard, through others,
  // from the 2^(k+1) before it.
  void Barrier(uint16_t base) {
    for (uint32_t k = 0; (1u << k) < n_; ++k) {
      Step& s = NewStep();
      Send(s, (r_ + (1u << k)) % n_, base + k, nullptr, 0);
      Recv(s, Mod(int64_t{r_} - (1 << k)), base + k, nullptr, 0);
    }
  }

  // Binomial tree: acc (count elements) reduced into the root's acc.
  void TreeReduce(uint32_t root, uint8_t* acc, size_t count, uint16_t base) {
    const uint32_t v = V(root);
    const size_t bytes = count * elem_;
    op_->tmp.resize(std::max(op_->tmp.size(), bytes));
    for (uint32_t k = 0; (1u << k) < n_; ++k) {
      const uint32_t bit = 1u << k;
      if (v & bit) {
        Send(NewStep(), Real(v - bit, root), base + k, acc, bytes);
        return;
      }
      if (v + bit < n_) {
        Step& s = NewStep();
        Recv(s, Real(v + bit, root), base + k, op_->tmp.data(), bytes);
        s.after = [this_op = op_, acc, count, a = aop_, t = type_] {
          rdm::Reduce(a, t, count, acc, this_op->tmp.data());
        };
      }
    }
  }

  // Binomial tree: the root's buf to every member's.
  void TreeBcast(uint32_t root, uint8_t* buf, size_t bytes, uint16_t base) {
    const uint32_t v = V(root);
    uint32_t limit = 1;
    while (limit < n_) limit <<= 1;
    if (v != 0) {
      const uint32_t low = v & (~v + 1);
      Recv(NewStep(), Real(v - low, root), base + Log2(low), buf, bytes);
      limit = low;
    }
    Step& s = NewStep();
    for (uint32_t bit = limit >> 1; bit >= 1; bit >>= 1) {
      if (v + bit < n_) Send(s, Real(v + bit, root), base + Log2(bit), buf, bytes);
    }
  }

  // Binomial tree: each member's block (bytes) into the root's out, in
  // rank order (out: n blocks, used at the root only).
  void TreeGather(uint32_t root, const uint8_t* block, uint8_t* out, size_t bytes, uint16_t base) {
    const uint32_t v = V(root);
    op_->gather.resize(n_ * bytes);
    uint8_t* g = op_->gather.data();
    if (bytes > 0) std::memcpy(g, block, bytes);
    uint32_t have = 1;
    for (uint32_t k = 0; (1u << k) < n_; ++k) {
      const uint32_t bit = 1u << k;
      if (v & bit) {
        Send(NewStep(), Real(v - bit, root), base + k, g, have * bytes);
        return;
      }
      if (v + bit < n_) {
        const uint32_t got = std::min(bit, n_ - v - bit);
        Recv(NewStep(), Real(v + bit, root), base + k, g + size_t{bit} * bytes, got * bytes);
        have += got;
      }
    }
    // The root: virtual order to rank order.
    NewStep().after = [this_op = op_, out, bytes, n = n_, root] {
      for (uint32_t i = 0; i < n && bytes > 0; ++i) {
        std::memcpy(out + size_t{(i + root) % n} * bytes, this_op->gather.data() + i * bytes, bytes);
      }
    };
  }

  // Ring reduce-scatter over buf (count elements in n chunks): rank r ends
  // with chunk r reduced over every member.
  void RingReduceScatter(uint8_t* buf, size_t count, uint16_t base) {
    op_->tmp.resize(std::max(op_->tmp.size(), ChunkCount(count, 0) * elem_));
    for (uint32_t s = 0; s + 1 < n_; ++s) {
      const uint32_t out = Mod(int64_t{r_} - s - 1), in = Mod(int64_t{r_} - s - 2);
      Step& st = NewStep();
      Send(st, (r_ + 1) % n_, base + s, buf + ChunkStart(count, out) * elem_,
           ChunkCount(count, out) * elem_);
      Recv(st, Mod(int64_t{r_} - 1), base + s, op_->tmp.data(), ChunkCount(count, in) * elem_);
      st.wait_sends = s + 2 == n_;  // the next phase writes the chunks sent here
      uint8_t* target = buf + ChunkStart(count, in) * elem_;
      st.after = [this_op = op_, target, c = ChunkCount(count, in), a = aop_, t = type_] {
        rdm::Reduce(a, t, c, target, this_op->tmp.data());
      };
    }
  }

  // Ring allgather over buf (count elements in n chunks; rank r has chunk
  // r): every member ends with all of them.
  void RingAllgather(uint8_t* buf, size_t count, uint16_t base) {
    for (uint32_t s = 0; s + 1 < n_; ++s) {
      const uint32_t out = Mod(int64_t{r_} - s), in = Mod(int64_t{r_} - s - 1);
      Step& st = NewStep();
      Send(st, (r_ + 1) % n_, base + s, buf + ChunkStart(count, out) * elem_,
           ChunkCount(count, out) * elem_);
      Recv(st, Mod(int64_t{r_} - 1), base + s, buf + ChunkStart(count, in) * elem_,
           ChunkCount(count, in) * elem_);
      st.wait_sends = s + 2 == n_;
    }
  }

  // The root's chunk i (count elements split n ways, at src) to rank i's
  // dst (its chunk's own bytes; dst_at_offset: at the chunk's offset).
  // The root's own chunk is copied once the step is done (src may be the
  // result of earlier steps).
  void DirectScatter(uint32_t root, const uint8_t* src, uint8_t* dst, size_t count,
                     bool dst_at_offset, uint16_t base) {
    auto where = [&](uint32_t i) { return dst_at_offset ? dst + ChunkStart(count, i) * elem_ : dst; };
    Step& s = NewStep();
    if (r_ != root) {
      Recv(s, root, base, where(r_), ChunkCount(count, r_) * elem_);
      return;
    }
    for (uint32_t i = 0; i < n_; ++i) {
      if (i != root) Send(s, i, base, src + ChunkStart(count, i) * elem_, ChunkCount(count, i) * elem_);
    }
    s.after = [own = src + ChunkStart(count, root) * elem_, to = where(root),
               len = ChunkCount(count, root) * elem_] {
      if (own != to && len > 0) std::memmove(to, own, len);
    };
  }

  // Each rank's chunk r (of count elements split n ways; own: its bytes)
  // to the root's dst at the chunk's offset (the root's own copied once the
  // step is done: own may be the result of earlier steps).
  void DirectGather(uint32_t root, const uint8_t* own, uint8_t* dst, size_t count, uint16_t base) {
    Step& s = NewStep();
    const size_t len = ChunkCount(count, r_) * elem_;
    if (r_ != root) {
      Send(s, root, base, own, len);
      return;
    }
    for (uint32_t i = 0; i < n_; ++i) {
      if (i != root) Recv(s, i, base, dst + ChunkStart(count, i) * elem_, ChunkCount(count, i) * elem_);
    }
    s.after = [own, to = dst + ChunkStart(count, root) * elem_, len] {
      if (own != to && len > 0) std::memmove(to, own, len);
    };
  }

  // Pairwise exchange: in round s, block (r+s) to rank r+s and block r-s
  // from rank r-s.
  void Alltoall(const uint8_t* src, uint8_t* dst, size_t block, uint16_t base) {
    if (block > 0) std::memmove(dst + r_ * block, src + r_ * block, block);
    for (uint32_t s = 1; s < n_; ++s) {
      const uint32_t to = (r_ + s) % n_, from = Mod(int64_t{r_} - s);
      Step& st = NewStep();
      Send(st, to, base + s, src + to * block, block);
      Recv(st, from, base + s, dst + from * block, block);
    }
  }

 private:
  static uint16_t Log2(uint32_t v) {
    uint16_t k = 0;
    while ((1u << k) < v) ++k;
    return k;
  }

  CollOp* op_;
  uint32_t n_, r_;
  size_t elem_;
  rdm::AtomicOp aop_;
  rdm::AtomicType type_;
};

// One collective call, whichever entry point it came through.
struct Call {
  fi_collective_op kind = FI_BARRIER;
  const void* buf = nullptr;
  void* result = nullptr;
  size_t count = 0;
  fi_addr_t coll_addr = FI_ADDR_NOTAVAIL;
  fi_addr_t root_addr = FI_ADDR_NOTAVAIL;
  fi_datatype datatype = FI_VOID;
  fi_op op = FI_NOOP;
  uint64_t flags = 0;
  void* context = nullptr;
};

bool Reduces(fi_collective_op k) { return k == FI_ALLREDUCE || k == FI_REDUCE || k == FI_REDUCE_SCATTER; }
bool Rooted(fi_collective_op k) {
  return k == FI_BROADCAST || k == FI_REDUCE || k == FI_SCATTER || k == FI_GATHER;
}

// Whether (datatype, op) is offered for collective kind k: -FI_EOPNOTSUPP
// if not. Barriers move no data: FI_VOID and FI_NOOP. Data movement takes
// any datatype, with FI_NOOP (or FI_ATOMIC_WRITE, fi_collective(3):
// "acts as an atomic write"); reductions an op of the atomic table that
// combines two values (MIN .. BXOR) where it is defined on the datatype.
int Offered(fi_collective_op k, fi_datatype dt, fi_op op) {
  if (k == FI_BARRIER) return dt == FI_VOID && op == FI_NOOP ? 0 : -FI_EOPNOTSUPP;
  if (dt < FI_INT8 || dt > FI_UINT128) return -FI_EOPNOTSUPP;
  if (!Reduces(k)) return op == FI_NOOP || op == FI_ATOMIC_WRITE ? 0 : -FI_EOPNOTSUPP;
  if (op < FI_MIN || op > FI_BXOR) return -FI_EOPNOTSUPP;
  return rdm::AtomicDefined(static_cast<rdm::AtomicOp>(op), static_cast<rdm::AtomicType>(dt))
             ? 0
             : -FI_EOPNOTSUPP;
}

// The plan of call c for op (its group set). False with a fi_errno in *err
// for bad buffers.
bool Plan(const Call& c, CollOp* op, int* err) {
  const bool data = c.kind != FI_BARRIER;
  const fi_datatype dt = data ? c.datatype : FI_UINT8;
  const size_t elem = rdm::AtomicTypeSize(static_cast<rdm::AtomicType>(dt));
  const rdm::AtomicOp aop = Reduces(c.kind) ? static_cast<rdm::AtomicOp>(c.op) : rdm::AtomicOp::kSum;
  Planner p(op, elem, aop, static_cast<rdm::AtomicType>(dt));
  const uint32_t n = p.n(), r = p.r();
  uint32_t root = 0;
  if (Rooted(c.kind)) {
    const auto& m = op->group->members;
    auto it = std::find(m.begin(), m.end(), c.root_addr);
    if (it == m.end()) {
      *err = Warn(-FI_EINVAL, "collective", "root_addr is not a member of the group");
      return false;
    }
    root = static_cast<uint32_t>(it - m.begin());
  }
  const size_t count = c.count, bytes = count * elem;
  auto* in = static_cast<const uint8_t*>(c.buf);
  auto* out = static_cast<uint8_t*>(c.result);
  // Which buffers this member uses, by what they hold.
  const bool need_in = data && bytes > 0 && (c.kind != FI_SCATTER || r == root);
  const bool need_out = data && bytes > 0 && c.kind != FI_BROADCAST &&
                        ((c.kind != FI_REDUCE && c.kind != FI_GATHER) || r == root);
  if ((need_in && in == nullptr) || (need_out && out == nullptr)) {
    *err = Warn(-FI_EINVAL, "collective", "a buffer this member uses is null");
    return false;
  }
  const bool ring = bytes * (c.kind == FI_ALLGATHER || c.kind == FI_REDUCE_SCATTER ? n : 1) >=
                    kRingMinBytes;
  switch (c.kind) {
    case FI_BARRIER:
      p.Barrier(0);
      break;
    case FI_BROADCAST: {
      auto* buf = const_cast<uint8_t*>(in);
      if (!ring || count < n) {
        p.TreeBcast(root, buf, bytes, 0);
      } else {  // scatter the chunks, then a ring shares them
        p.DirectScatter(root, buf, buf, count, true, 0);
        p.RingAllgather(buf, count, kPhase2);
      }
      break;
    }
    case FI_ALLREDUCE:
      if (bytes > 0 && in != out) std::memmove(out, in, bytes);
      if (!ring || count < n) {
        p.TreeReduce(0, out, count, 0);
        p.TreeBcast(0, out, bytes, kPhase2);
      } else {
        p.RingReduceScatter(out, count, 0);
        p.RingAllgather(out, count, kPhase2);
      }
      break;
    case FI_REDUCE:
      op->acc.assign(in, in + bytes);
      if (!ring || count < n) {
        p.TreeReduce(root, op->acc.data(), count, 0);
        if (r == root && bytes > 0) {
          p.NewStep().after = [op, out, bytes] { std::memcpy(out, op->acc.data(), bytes); };
        }
      } else {
        p.RingReduceScatter(op->acc.data(), count, 0);
        p.DirectGather(root, op->acc.data() + p.ChunkStart(count, r) * elem, out, count, kPhase2);
      }
      break;
    case FI_ALLGATHER:
      if (!ring) {
        p.TreeGather(0, in, out, bytes, 0);
        p.TreeBcast(0, out, n * bytes, kPhase2);
      } else {
        if (bytes > 0) std::memmove(out + r * bytes, in, bytes);
        p.RingAllgather(out, n * count, 0);
      }
      break;
    case FI_REDUCE_SCATTER:
      op->acc.assign(in, in + n * bytes);
      if (!ring) {
        p.TreeReduce(0, op->acc.data(), n * count, 0);
        p.DirectScatter(0, op->acc.data(), out, n * count, false, kPhase2);
      } else {
        p.RingReduceScatter(op->acc.data(), n * count, 0);
        p.NewStep().after = [op, out, bytes, r] {
          if (bytes > 0) std::memcpy(out, op->acc.data() + r * bytes, bytes);
        };
      }
      break;
    case FI_ALLTOALL:
      p.Alltoall(in, out, bytes, 0);
      break;
    case FI_SCATTER:
      p.DirectScatter(root, in, out, n * count, false, 0);
      break;
    case FI_GATHER:
      if (!ring) {
        p.TreeGather(root, in, out, bytes, 0);
      } else {
        p.DirectGather(root, in, out, n * count, 0);
      }
      break;
    default:
      *err = Warn(-FI_EOPNOTSUPP, "collective", "not a collective operation");
      return false;
  }
  return true;
}

// The longest transfer of a plan.
size_t Longest(const CollOp& op) {
  size_t m = 0;
  for (const Step& s : op.steps) {
    for (const Xfer& x : s.xfers) m = std::max(m, x.len);
  }
  return m;
}

constexpr uint64_t kOpFlags = FI_COMPLETION | FI_COLLECTIVE | FI_MORE;

ssize_t Post(fid_ep* f, const Call& c) {
  Ep* ep = AsEp(f);
  if (ep == nullptr) return BadFid(f, FI_CLASS_EP);
  ep = ep->base;
  if ((c.flags & ~kOpFlags) != 0) return Warn(-FI_EBADFLAGS, "collective", "flags other than FI_COMPLETION");
  if (int ret = Offered(c.kind, c.kind == FI_BARRIER ? FI_VOID : c.datatype,
                        c.kind == FI_BARRIER ? FI_NOOP : c.op);
      ret != 0) {
    return Warn(ret, "collective", "the datatype and op are not offered for it (fi_query_collective)");
  }
  DomainGuard guard(*ep->lock);
  Group* g = FindGroup(ep, c.coll_addr);
  if (g == nullptr) return Warn(-FI_EINVAL, "collective", "coll_addr is no group this endpoint joined");
  if (!g->joined) return Warn(-FI_EOPBADSTATE, "collective", "the join has not completed");
  auto op = std::make_unique<CollOp>();
  op->group = g;
  op->context = c.context;
  op->report = !ep->cqs.tx_selective || (c.flags & FI_COMPLETION) ||
               (ep->tx_op_flags & FI_COMPLETION);
  int err = 0;
  if (!Plan(c, op.get(), &err)) return err;
  if (Longest(*op) > ep->config.max_msg_size) {
    return Warn(-FI_EMSGSIZE, "collective", "a transfer would exceed max_msg_size");
  }
  g->seq = g->seq % 0xffffff + 1;
  op->tag = kCollTagBit | (uint64_t{g->id} << 40) | (uint64_t{g->seq} << 16);
  Launch(ep, std::move(op));
  return 0;
}

ssize_t Barrier(fid_ep* ep, fi_addr_t coll_addr, void* context) {
  return Post(ep, {.kind = FI_BARRIER, .coll_addr = coll_addr, .context = context});
}
ssize_t Barrier2(fid_ep* ep, fi_addr_t coll_addr, uint64_t flags, void* context) {
  return Post(ep, {.kind = FI_BARRIER, .coll_addr = coll_addr, .flags = flags, .context = context});
}
ssize_t Broadcast(fid_ep* ep, void* buf, size_t count, void*, fi_addr_t coll_addr, fi_addr_t root,
                  fi_datatype dt, uint64_t flags, void* context) {
  return Post(ep, {.kind = FI_BROADCAST, .buf = buf, .count = count, .coll_addr = coll_addr,
                   .root_addr = root, .datatype = dt, .flags = flags, .context = context});
}
ssize_t Alltoall(fid_ep* ep, const void* buf, size_t count, void*, void* result, void*,
                 fi_addr_t coll_addr, fi_datatype dt, uint64_t flags, void* context) {
  return Post(ep, {.kind = FI_ALLTOALL, .buf = buf, .result = result, .count = count,
                   .coll_addr = coll_addr, .datatype = dt, .flags = flags, .context = context});
}
ssize_t Allreduce(fid_ep* ep, const void* buf, size_t count, void*, void* result, void*,
                  fi_addr_t coll_addr, fi_datatype dt, fi_op op, uint64_t flags, void* context) {
  return Post(ep, {.kind = FI_ALLREDUCE, .buf = buf, .result = result, .count = count,
                   .coll_addr = coll_addr, .datatype = dt, .op = op, .flags = flags,
                   .context = context});
}
ssize_t Allgather(fid_ep* ep, const void* buf, size_t count, void*, void* result, void*,
                  fi_addr_t coll_addr, fi_datatype dt, uint64_t flags, void* context) {
  return Post(ep, {.kind = FI_ALLGATHER, .buf = buf, .result = result, .count = count,
                   .coll_addr = coll_addr, .datatype = dt, .flags = flags, .context = context});
}
ssize_t ReduceScatter(fid_ep* ep, const void* buf, size_t count, void*, void* result, void*,
                      fi_addr_t coll_addr, fi_datatype dt, fi_op op, uint64_t flags,
                      void* context) {
  return Post(ep, {.kind = FI_REDUCE_SCATTER, .buf = buf, .result = result, .count = count,
                   .coll_addr = coll_addr, .datatype = dt, .op = op, .flags = flags,
                   .context = context});
}
ssize_t Reduce(fid_ep* ep, const void* buf, size_t count, void*, void* result, void*,
               fi_addr_t coll_addr, fi_addr_t root, fi_datatype dt, fi_op op, uint64_t flags,
               void* context) {
  return Post(ep, {.kind = FI_REDUCE, .buf = buf, .result = result, .count = count,
                   .coll_addr = coll_addr, .root_addr = root, .datatype = dt, .op = op,
                   .flags = flags, .context = context});
}
ssize_t Scatter(fid_ep* ep, const void* buf, size_t count, void*, void* result, void*,
                fi_addr_t coll_addr, fi_addr_t root, fi_datatype dt, uint64_t flags,
                void* context) {
  return Post(ep, {.kind = FI_SCATTER, .buf = buf, .result = result, .count = count,
                   .coll_addr = coll_addr, .root_addr = root, .datatype = dt, .flags = flags,
                   .context = context});
}
ssize_t Gather(fid_ep* ep, const void* buf, size_t count, void*, void* result, void*,
               fi_addr_t coll_addr, fi_addr_t root, fi_datatype dt, uint64_t flags,
               void* context) {
  return Post(ep, {.kind = FI_GATHER, .buf = buf, .result = result, .count = count,
                   .coll_addr = coll_addr, .root_addr = root, .datatype = dt, .flags = flags,
                   .context = context});
}
// fi_msg_collective: one buffer of operands (msg_iov[0]) and one of results.
ssize_t MsgCollective(fid_ep* ep, const fi_msg_collective* m, fi_ioc* resultv, void**,
                      size_t result_count, uint64_t flags) {
  if (m == nullptr || m->iov_count > 1 || (m->iov_count == 1 && m->msg_iov == nullptr) ||
      result_count > 1 || (result_count == 1 && resultv == nullptr)) {
    return Warn(-FI_EINVAL, "fi_msg_collective", "one operand buffer and one result buffer at most");
  }
  Call c{.kind = m->coll, .coll_addr = m->coll_addr, .root_addr = m->root_addr,
         .datatype = m->datatype, .op = m->op, .flags = flags, .context = m->context};
  if (m->iov_count == 1) {
    c.buf = m->msg_iov[0].addr;
    c.count = m->msg_iov[0].count;
  }
  if (result_count == 1) c.result = resultv[0].addr;
  return Post(ep, c);
}

}  // namespace

fi_ops_collective g_collective_ops = {
    .size = sizeof(fi_ops_collective),
    .barrier = Barrier,
    .broadcast = Broadcast,
    .alltoall = Alltoall,
    .allreduce = Allreduce,
    .allgather = Allgather,
    .reduce_scatter = ReduceScatter,
    .reduce = Reduce,
    .scatter = Scatter,
    .gather = Gather,
    .msg = MsgCollective,
    .barrier2 = Barrier2,
};

bool ReservesTopTag(const Ep* ep) { return ep->msg != nullptr || (ep->caps & FI_COLLECTIVE) != 0; }

int OpenAvSet(fid_av* f, fi_av_set_attr* attr, fid_av_set** out, void* context) {
  Av* av = AsAv(f);
  if (av == nullptr) return BadFid(f, FI_CLASS_AV);
  if (attr == nullptr || out == nullptr) return -FI_EINVAL;
  if ((attr->flags & ~kSetFlags) != 0) return Warn(-FI_EBADFLAGS, "fi_av_set", "unknown flags");
  if (attr->comm_key_size != 0 || attr->comm_key != nullptr) {
    return Warn(-FI_EOPNOTSUPP, "fi_av_set",
                "no communication keys: no fabric manager sets up collectives here");
  }
  auto s = std::make_unique<AvSet>();
  DomainGuard g(av->domain->lock);
  if (int ret = InitialMembers(av, attr, &s->members); ret != 0) return ret;
  static std::atomic<uint64_t> serial{0};
  s->av = av;
  s->addr = kSetAddrTag | (serial.fetch_add(1) & ~kAddrTagMask);
  s->fid.fid.fclass = FI_CLASS_AV_SET;
  s->fid.fid.context = context;
  s->fid.fid.ops = &g_av_set_fi_ops;
  s->fid.ops = &g_av_set_ops;
  av->obj.refs.fetch_add(1);
  *out = &s.release()->fid;
  return 0;
}

int JoinCollective(fid_ep* f, const void* addr, uint64_t flags, fid_mc** out, void* context) {
  constexpr const char* kWhat = "fi_join_collective";
  Ep* ep = AsEp(f);
  if (ep == nullptr) return BadFid(f, FI_CLASS_EP);
  if (ep->side != Ep::kWhole) return Warn(-FI_EOPNOTSUPP, kWhat, "not on a scalable endpoint's context");
  ep = ep->base;
  if ((flags & ~FI_COLLECTIVE) != 0) return Warn(-FI_EBADFLAGS, kWhat, "flags other than FI_COLLECTIVE");
  const auto* ca = static_cast<const fi_collective_addr*>(addr);
  if (ca == nullptr || out == nullptr) return Warn(-FI_EINVAL, kWhat, "a null address or mc");
  AvSet* set = AsAvSet(ca->set);
  if (set == nullptr) return BadFid(ca->set, FI_CLASS_AV_SET);
  DomainGuard g(*ep->lock);
  if ((ep->caps & FI_COLLECTIVE) == 0 || ep->type != FI_EP_RDM) {
    return Warn(-FI_EOPNOTSUPP, kWhat, "the endpoint was opened without FI_COLLECTIVE (FI_EP_RDM)");
  }
  if (ep->srx != nullptr || ep->sep != nullptr) {
    return Warn(-FI_EOPNOTSUPP, kWhat, "not on an endpoint with a shared receive context");
  }
  if (ep->rdm == nullptr) return Warn(-FI_EOPBADSTATE, kWhat, "the endpoint is not enabled");
  if (ep->eq == nullptr) return Warn(-FI_ENOEQ, kWhat, "no EQ is bound to the endpoint");
  if (set->av != ep->av) return Warn(-FI_EINVAL, kWhat, "the set is of another AV than the endpoint's");
  if (ca->coll_addr != FI_ADDR_NOTAVAIL && ca->coll_addr != set->addr &&
      FindGroup(ep, ca->coll_addr) == nullptr) {
    return Warn(-FI_EINVAL, kWhat, "coll_addr is neither the set's address nor a group's");
  }
  const std::vector<fi_addr_t>& m = set->members;
  if (m.empty() || m.size() > ep->config.max_peers) {
    return Warn(-FI_EINVAL, kWhat, "a set of 1 to max_members members");
  }
  auto grp = std::make_unique<Group>();
  const rdm::Address self = ep->rdm->address();
  bool found = false;
  for (size_t i = 0; i < m.size(); ++i) {
    const std::optional<rdm::Address>& a = ep->av->addrs[m[i]];
    if (a && a->ip == self.ip && a->udp_port == self.udp_port && !found) {
      grp->rank = static_cast<uint32_t>(i);
      found = true;
      grp->peers.push_back(rdm::PeerId{});
      continue;
    }
    rdm::PeerId p;
    if (!FindPeer(ep, m[i], &p)) return Warn(-FI_EINVAL, kWhat, "a member has no peer (removed from the AV?)");
    grp->peers.push_back(p);
  }
  if (!found) return Warn(-FI_EINVAL, kWhat, "the set does not hold this endpoint's own address");
  if (ep->coll == nullptr) ep->coll = new Coll();
  Coll* c = ep->coll;
  const uint64_t h = HashMembers(ep->av, m);
  const uint32_t nth = c->joins[h]++;
  grp->id = static_cast<uint32_t>((h ^ (h >> 23) ^ (uint64_t{nth} * 0x9e3779b97f4a7c15ull)) & 0x7fffff);
  grp->members = m;
  grp->ep = ep;
  grp->fid.fid.fclass = FI_CLASS_MC;
  grp->fid.fid.context = context;
  grp->fid.fid.ops = &g_group_fi_ops;
  size_t index = std::find(c->groups.begin(), c->groups.end(), nullptr) - c->groups.begin();
  if (index == c->groups.size()) c->groups.push_back(nullptr);
  grp->fid.fi_addr = kCollAddrTag | index;
  Group* gp = grp.release();
  c->groups[index] = gp;
  ep->obj.refs.fetch_add(1);
  // The join is a barrier of the group: complete once every member joined.
  auto op = std::make_unique<CollOp>();
  op->group = gp;
  op->join = true;
  op->context = context;
  op->tag = kCollTagBit | (uint64_t{gp->id} << 40);
  Planner(op.get(), 1, rdm::AtomicOp::kSum, rdm::AtomicType::kUint8).Barrier(0);
  *out = &gp->fid;
  Launch(ep, std::move(op));
  return 0;
}

int QueryCollective(fid_domain* f, fi_collective_op coll, fi_collective_attr* attr, uint64_t flags) {
  Domain* d = AsDomain(f);
  if (d == nullptr) return BadFid(f, FI_CLASS_DOMAIN);
  if (flags != 0 && flags != FI_SCATTER) return -FI_EBADFLAGS;
  if (flags == FI_SCATTER) {  // fi_collective(3): reduce-scatter's attributes
    if (coll != FI_ALLREDUCE && coll != FI_REDUCE_SCATTER) return -FI_EINVAL;
    coll = FI_REDUCE_SCATTER;
  }
  if (coll < FI_BARRIER || coll > FI_GATHER) return -FI_EINVAL;
  if (attr == nullptr) return coll == FI_BARRIER ? 0 : -FI_EINVAL;
  if (attr->mode != 0) return -FI_EINVAL;
  if (int ret = Offered(coll, attr->datatype, attr->op); ret != 0) return ret;
  const rdm::EndpointConfig& e = d->fabric->settings.engine;
  if (coll == FI_BARRIER) {
    attr->datatype_attr.size = 0;
    attr->datatype_attr.count = 0;
  } else {
    attr->datatype_attr.size = rdm::AtomicTypeSize(static_cast<rdm::AtomicType>(attr->datatype));
    attr->datatype_attr.count = e.max_msg_size / attr->datatype_attr.size;
  }
  attr->max_members = e.max_peers;
  return 0;
}

bool CollCompletion(Ep* ep, const rdm::Completion& c) {
  if (!ep->coll->live.erase(c.context)) return false;
  auto* x = static_cast<Xfer*>(c.context);
  CollOp* op = x->op;
  if (x->recv && c.len != x->len) {
    Fail(op, FI_EIO, EMSGSIZE, "a member sent a different amount (the members' counts differ?)");
  }
  --(x->recv ? op->recvs : op->sends);
  Advance(ep, op);
  if (op->finished) ReportFinished(ep);
  return true;
}

bool CollError(Ep* ep, const rdm::ErrorCompletion& e) {
  if (!ep->coll->live.erase(e.op.context)) return false;
  auto* x = static_cast<Xfer*>(e.op.context);
  CollOp* op = x->op;
  Fail(op, e.err == EMSGSIZE ? FI_ETRUNC : FI_EIO, e.err, e.message);
  --(x->recv ? op->recvs : op->sends);
  Advance(ep, op);
  if (op->finished) ReportFinished(ep);
  return true;
}

void CollProgress(Ep* ep) {
  Coll* c = ep->coll;
  bool finished = false;
  for (auto& op : c->ops) {
    if (!op->finished) Advance(ep, op.get());
    finished |= op->finished;
  }
  if (finished) ReportFinished(ep);
}

}  // namespace bypass::fi
