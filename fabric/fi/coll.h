// Collectives (fi_collective(3), fi_av_set(3)) on RDM endpoints opened
// with FI_COLLECTIVE: AV sets, fi_join_collective (a fid_mc whose join
// completes as FI_JOIN_COMPLETE on the endpoint's EQ once every member has
// joined), fi_query_collective, and the fi_ops_collective table
// (g_collective_ops, declared in ep.h). Every collective is a plan of
// steps of engine tagged sends and directed receives between the members,
// run by the endpoint's progress (fi_cq_read, fi_cq_sread, the progress
// thread); it completes on the endpoint's transmit CQ with its context.
// Reductions apply the atomic op table (rdm::Reduce). README.md,
// "Collectives", gives the algorithms and the tag space.
#ifndef BYPASS_FABRIC_FI_COLL_H_
#define BYPASS_FABRIC_FI_COLL_H_

#include <rdma/fi_collective.h>
#include <rdma/fi_domain.h>

#include <cstdint>

#include "fabric/rdm/types.h"

namespace bypass::fi {

struct Av;
struct Ep;
struct Coll;

// The tag bit of collective messages: an endpoint with FI_COLLECTIVE has
// 63-bit tags (mem_tag_format), its application's tagged sends may not set
// it and its tagged receives never match it (ep_ops.cc). The same bit as
// the connection manager's (cm.h): connected endpoints have no collectives.
inline constexpr uint64_t kCollTagBit = 1ull << 63;

// Whether tagged messages with kCollTagBit are the provider's on ep.
bool ReservesTopTag(const Ep* ep);

// fi_av_set (fi_ops_av::av_set).
int OpenAvSet(fid_av* av, fi_av_set_attr* attr, fid_av_set** set, void* context);

// fi_join with FI_COLLECTIVE (fi_join_collective): addr is a struct
// fi_collective_addr. -FI_EOPNOTSUPP without FI_COLLECTIVE or on a shared
// or scalable context; -FI_ENOEQ without an EQ; -FI_EOPBADSTATE before
// fi_enable; -FI_EINVAL for a set of another AV, one without this
// endpoint's own address, or of more than max_members. Each with one
// FI_WARN line.
int JoinCollective(fid_ep* ep, const void* addr, uint64_t flags, fid_mc** mc, void* context);

// fi_query_collective (fi_ops_domain::query_collective).
int QueryCollective(fid_domain* domain, fi_collective_op coll, fi_collective_attr* attr,
                    uint64_t flags);

// The progress hooks (progress.cc). An engine completion or error whose
// context is a collective's transfer advances its collective; true when it
// was one (nothing else reports it). REQUIRES: the endpoint's guard.
bool CollCompletion(Ep* ep, const rdm::Completion& c);
bool CollError(Ep* ep, const rdm::ErrorCompletion& e);
// Retries what waited for room (engine slots, a full CQ or EQ).
void CollProgress(Ep* ep);

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_COLL_H_
