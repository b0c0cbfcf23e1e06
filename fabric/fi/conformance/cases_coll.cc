// Collectives (fi_collective(3), fi_av_set(3)) on FI_EP_RDM: fi_getinfo's
// FI_COLLECTIVE, fi_query_collective, AV sets, fi_join_collective with its
// FI_JOIN_COMPLETE, and collectives between two endpoints of one process
// (fi_coll_test runs every collective among 2 to 8 processes). The
// reference is tcp;ofi_rxm, the provider of Debian's libfabric 1.17 that
// lists FI_COLLECTIVE (libfabric's util collectives under rxm).
#include <rdma/fi_collective.h>

#include <cstdint>
#include <vector>

#include "fabric/fi/conformance/conformance.h"

namespace bypass::fi::conformance {
namespace {

fi_info* CollHints(Ctx& c) { return c.Hints(FI_MSG | FI_TAGGED | FI_COLLECTIVE); }

// An endpoint with an EQ (fi_join_collective needs one) and the AV set of
// every member.
struct Member {
  Ep e;
  fid_eq* eq = nullptr;
  fid_av_set* set = nullptr;
  fid_mc* mc = nullptr;
  fi_addr_t coll = FI_ADDR_NOTAVAIL;
  int join_ctx = 0;
};

// n members on domains of their own, each AV holding every member's name
// in the same order, and a set of them all (start_addr .. end_addr).
std::vector<Member> OpenMembers(Ctx& c, int n) {
  fi_info* info = c.Info(CollHints(c));
  fid_fabric* fabric = c.Fabric(info);
  std::vector<Member> m(n);
  for (Member& x : m) {
    fid_domain* d = c.Domain(fabric, info);
    fid_ep* ep = nullptr;
    CHECK_RET(fi_endpoint(d, info, &ep, nullptr), 0);
    c.Own(&ep->fid);
    x.eq = c.Eq(fabric);
    CHECK_RET(fi_ep_bind(ep, &x.eq->fid, 0), 0);
    EpOpts o;
    o.opened = ep;
    x.e = c.OpenEp(d, info, o);
  }
  for (Member& x : m) {
    std::vector<fi_addr_t> addrs;
    for (const Member& y : m) addrs.push_back(c.Insert(x.e.av, y.e.name));
    fi_av_set_attr attr{};
    attr.count = n;
    attr.start_addr = addrs.front();
    attr.end_addr = addrs.back();
    attr.stride = 1;
    CHECK_RET(fi_av_set(x.e.av, &attr, &x.set, nullptr), 0);
    c.Own(&x.set->fid);
  }
  return m;
}

// Every member joins; then progress until each EQ has FI_JOIN_COMPLETE
// naming its fid_mc and context.
void JoinAll(Ctx& c, std::vector<Member>& m) {
  for (Member& x : m) {
    fi_addr_t set_addr = FI_ADDR_NOTAVAIL;
    CHECK_RET(fi_av_set_addr(x.set, &set_addr), 0);
    CHECK_RET(fi_join_collective(x.e.ep, set_addr, x.set, 0, &x.mc, &x.join_ctx), 0);
    c.Own(&x.mc->fid);
  }
  for (Member& x : m) {
    uint32_t event = 0;
    fi_eq_entry entry{};
    ssize_t n = -FI_EAGAIN;
    for (int i = 0; i < 200000 && n == -FI_EAGAIN; ++i) {
      c.Progress();
      n = fi_eq_read(x.eq, &event, &entry, sizeof(entry), 0);
    }
    CHECK(n == static_cast<ssize_t>(sizeof(entry)), "no FI_JOIN_COMPLETE: fi_eq_read " << Err(n));
    CHECK(event == FI_JOIN_COMPLETE, "event " << event << ", want FI_JOIN_COMPLETE");
    CHECK(entry.fid == &x.mc->fid, "the event names another fid than the fid_mc");
    CHECK(entry.context == &x.join_ctx, "the event carries another context than the join's");
    x.coll = fi_mc_addr(x.mc);
  }
}

// The next completion of each member's transmit CQ carries ctx[i].
void WaitAll(Ctx& c, std::vector<Member>& m, const std::vector<void*>& ctx, const char* what) {
  for (size_t i = 0; i < m.size(); ++i) {
    Completion got = c.Wait(m[i].e.tx, what);
    CHECK(!got.error, what << ": an error entry: " << Err(-got.err.err));
    CHECK(got.entry.op_context == ctx[i], what << ": another context");
  }
}

CONFORMANCE_CASE(coll_getinfo_asked, kTcp) {
  fi_info* info = c.Info(CollHints(c));
  CHECK(info->caps & FI_COLLECTIVE, "FI_COLLECTIVE asked: an entry without it");
  CHECK(info->ep_attr->type == FI_EP_RDM, "FI_COLLECTIVE: an entry that is not FI_EP_RDM");
}

CONFORMANCE_CASE(coll_getinfo_unasked, kTcp) {
  fi_info* list = nullptr;
  CHECK_RET(c.TryInfo(c.Hints(FI_MSG | FI_TAGGED), &list), 0);
  for (fi_info* i = list; i != nullptr; i = i->next) {
    CHECK((i->caps & FI_COLLECTIVE) == 0, "FI_COLLECTIVE not asked: an entry with it");
  }
}

CONFORMANCE_CASE(coll_query_allreduce, kTcp) {
  fi_info* info = c.Info(CollHints(c));
  fid_domain* d = c.Domain(c.Fabric(info), info);
  fi_collective_attr attr{};
  attr.op = FI_SUM;
  attr.datatype = FI_INT64;
  CHECK_RET(fi_query_collective(d, FI_ALLREDUCE, &attr, 0), 0);
  CHECK(attr.datatype_attr.size == sizeof(int64_t), "datatype_attr.size " << attr.datatype_attr.size);
  CHECK(attr.datatype_attr.count > 0, "datatype_attr.count 0");
  CHECK(attr.max_members >= 2, "max_members " << attr.max_members);
}

CONFORMANCE_CASE(coll_query_not_offered, kTcp) {
  fi_info* info = c.Info(CollHints(c));
  fid_domain* d = c.Domain(c.Fabric(info), info);
  fi_collective_attr attr{};
  attr.op = FI_CSWAP;  // not a reduction
  attr.datatype = FI_INT64;
  CHECK_RET(fi_query_collective(d, FI_ALLREDUCE, &attr, 0), -FI_EOPNOTSUPP);
}

CONFORMANCE_CASE(coll_av_set_ops, kTcp) {
  std::vector<Member> m = OpenMembers(c, 2);
  fid_av* av = m[0].e.av;
  fi_av_set_attr attr{};
  attr.start_addr = FI_ADDR_NOTAVAIL;
  attr.end_addr = FI_ADDR_NOTAVAIL;
  fid_av_set* empty = nullptr;
  CHECK_RET(fi_av_set(av, &attr, &empty, nullptr), 0);
  c.Own(&empty->fid);
  CHECK_RET(fi_av_set_insert(empty, 1), 0);
  CHECK_RET(fi_av_set_union(empty, m[0].set), 0);    // appends 0 after 1
  CHECK_RET(fi_av_set_intersect(empty, m[0].set), 0);  // both stay
  CHECK_RET(fi_av_set_remove(empty, 1), 0);
  CHECK_RET(fi_av_set_diff(empty, m[0].set), 0);  // empty again
  fi_addr_t a = FI_ADDR_NOTAVAIL;
  CHECK_RET(fi_av_set_addr(empty, &a), 0);
  CHECK(a != FI_ADDR_NOTAVAIL, "fi_av_set_addr gave FI_ADDR_NOTAVAIL");
}

CONFORMANCE_CASE(coll_join_allreduce_barrier, kTcp) {
  std::vector<Member> m = OpenMembers(c, 2);
  JoinAll(c, m);
  std::vector<int64_t> in[2] = {{1, 2, 3}, {10, 20, 30}}, out[2] = {{0, 0, 0}, {0, 0, 0}};
  std::vector<void*> ctx;
  for (int i = 0; i < 2; ++i) {
    c.Post("fi_allreduce", [&] {
      return fi_allreduce(m[i].e.ep, in[i].data(), 3, nullptr, out[i].data(), nullptr, m[i].coll,
                          FI_INT64, FI_SUM, 0, &out[i]);
    });
    ctx.push_back(&out[i]);
  }
  WaitAll(c, m, ctx, "fi_allreduce");
  for (int i = 0; i < 2; ++i) {
    CHECK(out[i] == std::vector<int64_t>({11, 22, 33}), "member " << i << ": wrong sums");
  }
  ctx.clear();
  for (int i = 0; i < 2; ++i) {
    c.Post("fi_barrier", [&] { return fi_barrier(m[i].e.ep, m[i].coll, &m[i]); });
    ctx.push_back(&m[i]);
  }
  WaitAll(c, m, ctx, "fi_barrier");
}

CONFORMANCE_CASE(coll_broadcast_gather, kTcp) {
  std::vector<Member> m = OpenMembers(c, 2);
  JoinAll(c, m);
  // Member 1 is the root of both; its fi_addr in each AV is 1.
  std::vector<int32_t> buf[2] = {{0, 0}, {7, 9}};
  std::vector<void*> ctx;
  for (int i = 0; i < 2; ++i) {
    c.Post("fi_broadcast", [&] {
      return fi_broadcast(m[i].e.ep, buf[i].data(), 2, nullptr, m[i].coll, 1, FI_INT32, 0, &buf[i]);
    });
    ctx.push_back(&buf[i]);
  }
  WaitAll(c, m, ctx, "fi_broadcast");
  CHECK(buf[0] == std::vector<int32_t>({7, 9}), "fi_broadcast: member 0 has other values");
  int32_t mine[2] = {100, 200};
  std::vector<int32_t> gathered(2);
  ctx.clear();
  for (int i = 0; i < 2; ++i) {
    c.Post("fi_gather", [&] {
      return fi_gather(m[i].e.ep, &mine[i], 1, nullptr, i == 1 ? gathered.data() : nullptr, nullptr,
                       m[i].coll, 1, FI_INT32, 0, &mine[i]);
    });
    ctx.push_back(&mine[i]);
  }
  WaitAll(c, m, ctx, "fi_gather");
  CHECK(gathered == std::vector<int32_t>({100, 200}), "fi_gather: the root has other values");
}

CONFORMANCE_CASE(coll_join_needs_member, kTcp) {
  std::vector<Member> m = OpenMembers(c, 2);
  // A set of member 1 alone, joined by member 0.
  CHECK_RET(fi_av_set_remove(m[0].set, 0), 0);
  fi_addr_t a = FI_ADDR_NOTAVAIL;
  CHECK_RET(fi_av_set_addr(m[0].set, &a), 0);
  fid_mc* mc = nullptr;
  CHECK_RET(fi_join_collective(m[0].e.ep, a, m[0].set, 0, &mc, nullptr), -FI_EINVAL);
}

CONFORMANCE_CASE(coll_allreduce_op_refused, kTcp) {
  std::vector<Member> m = OpenMembers(c, 2);
  JoinAll(c, m);
  double in = 1, out = 0;
  // fi_atomic(3): bitwise ops need an integer type.
  CHECK_RET(fi_allreduce(m[0].e.ep, &in, 1, nullptr, &out, nullptr, m[0].coll, FI_DOUBLE, FI_BOR,
                         0, nullptr),
            -FI_EOPNOTSUPP);
}

CONFORMANCE_CASE(coll_top_tag_reserved, kTcp) {
  std::vector<Member> m = OpenMembers(c, 2);
  // bypass: 63-bit tags with FI_COLLECTIVE; the top bit is the provider's.
  CHECK((m[0].e.info->ep_attr->mem_tag_format >> 63) == 0, "mem_tag_format uses the top bit");
  fi_addr_t peer = 1;
  char byte = 0;
  CHECK_RET(fi_tinject(m[0].e.ep, &byte, 1, peer, 1ull << 63), -FI_EINVAL);
}

}  // namespace
}  // namespace bypass::fi::conformance
