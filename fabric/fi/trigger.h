// Triggered operations and deferred work (fi_trigger(3)): operations held
// until a counter reaches a threshold, then issued by the provider.
//
// Two ways in: a data call of the msg form with FI_TRIGGER and a struct
// fi_triggered_context (FI_TRIGGER_THRESHOLD) as its context (fi_sendmsg,
// fi_tsendmsg, fi_writemsg, fi_readmsg, fi_recvmsg, fi_trecvmsg,
// fi_atomicmsg, fi_fetch_atomicmsg, fi_compare_atomicmsg), and
// fi_control(domain, FI_QUEUE_WORK, struct fi_deferred_work *). Each becomes
// a Work waiting on its counter, in order of (threshold, posting order).
// A triggered operation waits for the counter's value; deferred work for
// its value plus its errors (fi_trigger(3), "DEFERRED WORK QUEUES").
//
// Firing. Every change of a counter with work waiting on it (CountEvent and
// CountErrorEvent in the progress path, fi_cntr_add/set/adderr/seterr)
// calls FireTriggers: the work whose condition holds moves, in order, to
// its domain's ready list, which is then drained: each operation is issued
// through the ordinary data call of its endpoint handle (FI_TRIGGER
// cleared), so it completes in that endpoint's CQ and counters as usual.
//
// The locking rule. The queue's mutex is a leaf: held only to move work
// between lists, never while taking an endpoint's lock or posting. An
// operation is issued under its target endpoint's lock. A thread that may
// hold an endpoint lock (the progress path, where counters move, and any
// call made under a lock) only try-locks the target's lock; a thread that
// holds none (fi_cntr_add/set and FI_QUEUE_WORK, called by the
// application) takes it. Work whose target's lock is busy, or whose post
// answers -FI_EAGAIN, stays on the ready list, ahead of later work for the
// same endpoint, and is issued by the next drain: the next progress pass of
// any endpoint of the domain (ProgressEp calls DrainTriggers) or the next
// counter change. One thread drains at a time (a flag, not a lock: a
// thread that finds it taken leaves the work to the drainer, which looks
// again before it stops), so work is issued in the ready list's order.
// Nothing is lost: work leaves the lists only when issued or canceled.
//
// Lifetime. Queued work holds a reference on its endpoint handle and its
// counters (fi_close of either answers -FI_EBUSY until the work is issued
// or canceled: FI_CANCEL_WORK, FI_FLUSH_WORK). A deferred operation in
// flight is known to its endpoint (Ep::deferred) until it completes.
#ifndef BYPASS_FABRIC_FI_TRIGGER_H_
#define BYPASS_FABRIC_FI_TRIGGER_H_

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <cstdint>
#include <memory>

namespace bypass::fi {

struct Cntr;
struct Domain;
struct Ep;
struct TriggerQueue;

// A domain's queue of triggered and deferred work (OpenDomain makes it).
std::shared_ptr<TriggerQueue> NewTriggerQueue();

// A data call with FI_TRIGGER: validates it (-FI_EINVAL for a missing or
// malformed fi_triggered_context, a counter that is not one of the
// endpoint's domain; -FI_ENOSYS for FI_TRIGGER_XPU; -FI_EOPNOTSUPP when the
// endpoint was not opened with FI_TRIGGER; -FI_EOPBADSTATE before
// fi_enable), copies the message (the caller's struct and iov arrays need
// not outlive the call; the buffers must) and queues it. 0 when queued (or
// already issued: the threshold was met).
ssize_t QueueTriggeredMsg(fid_ep* ep, const fi_msg* m, uint64_t flags, bool recv);
ssize_t QueueTriggeredTagged(fid_ep* ep, const fi_msg_tagged* m, uint64_t flags, bool recv);
ssize_t QueueTriggeredRma(fid_ep* ep, const fi_msg_rma* m, uint64_t flags, bool read);
// fi_atomicmsg, fi_fetch_atomicmsg, fi_compare_atomicmsg with FI_TRIGGER
// (op FI_OP_ATOMIC, FI_OP_FETCH_ATOMIC or FI_OP_COMPARE_ATOMIC): the
// operands' and the result and compare buffers' fi_ioc arrays are copied
// too (the buffers must outlive the operation); the operands are checked
// when the operation is issued, as for deferred atomics.
ssize_t QueueTriggeredAtomic(fid_ep* ep, const fi_msg_atomic* m, int op, const fi_ioc* result,
                             void** result_desc, size_t result_count, const fi_ioc* compare,
                             void** compare_desc, size_t compare_count, uint64_t flags);

// fi_control of a domain: FI_QUEUE_WORK, FI_CANCEL_WORK, FI_FLUSH_WORK
// (README.md "Triggered operations" gives the errnos). Other commands:
// -FI_ENOSYS.
int TriggerControl(Domain* d, int command, void* arg);

// fi_cancel of a triggered operation still waiting on ep (any handle of
// its endpoint) whose context is `context`: it completes with
// FI_ECANCELED. False when there is none.
bool CancelTriggered(Ep* ep, void* context);

// A counter of c's domain changed: issues the work now due (see the
// locking rule above: may_block when the caller holds no endpoint lock).
void FireTriggers(Cntr* c, bool may_block);
// Issues what waits on the domain's ready list (a progress pass: the
// caller holds an endpoint lock, so only try-locks).
void DrainTriggers(Domain* d);
// Whether d has work on its ready list (one atomic load).
bool TriggersReady(const Domain* d);

// A completion of ep whose context is `user`: when it is a deferred
// operation (Ep::deferred), counts its completion counter, decides whether
// the endpoint reports it (FI_COMPLETION in its flags) and returns the
// operation's own context. *report false: neither a CQ entry nor the
// endpoint's counters. REQUIRES: ep's lock.
void* FinishDeferred(Ep* ep, void* user, bool error, bool* report);

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_TRIGGER_H_
