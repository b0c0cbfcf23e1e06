// Manual progress: a pass of an endpoint's engine, then its completions
// into its CQs and counters. The completion's context is the application's,
// or an OpRecord of the endpoint (ep.h) whose bounce buffer is scattered
// and which is freed here.
#include "fabric/fi/progress.h"

#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <type_traits>

#include "fabric/fi/address/address.h"
#include "fabric/fi/av.h"
#include "fabric/fi/buffered.h"
#include "fabric/fi/cntr.h"
#include "fabric/fi/coll.h"
#include "fabric/fi/cq.h"
#include "fabric/fi/domain.h"
#include "fabric/fi/ep.h"
#include "fabric/fi/eq.h"
#include "fabric/fi/hmem.h"
#include "fabric/fi/progress_thread.h"
#include "fabric/fi/mr.h"
#include "fabric/fi/msg_ep.h"
#include "fabric/fi/services.h"
#include "fabric/fi/shared_ctx.h"
#include "fabric/fi/trigger.h"
#include "fabric/rdm/rdm.h"

namespace bypass::fi {
namespace {

// The FI_* flags of an engine completion's flags, by table: two lookups
// of 7 bits each instead of a test per flag on every completion.
constexpr uint64_t FiFlagOfBit(int bit) {
  switch (uint64_t{1} << bit) {
    case rdm::kCompSend: return FI_SEND;
    case rdm::kCompRecv: return FI_RECV;
    case rdm::kCompMsg: return FI_MSG;
    case rdm::kCompTagged: return FI_TAGGED;
    case rdm::kCompRemoteData: return FI_REMOTE_CQ_DATA;
    case rdm::kCompRma: return FI_RMA;
    case rdm::kCompAtomic: return FI_ATOMIC;
    case rdm::kCompRead: return FI_READ;
    case rdm::kCompWrite: return FI_WRITE;
    case rdm::kCompRemoteWrite: return FI_REMOTE_WRITE;
    case rdm::kCompRemoteRead: return FI_REMOTE_READ;
    case rdm::kCompMultiRecv: return FI_MULTI_RECV;
    case rdm::kCompMulticast: return FI_MULTICAST;
    default: return 0;  // kCompAfterCompletion: the engine's own
  }
}
constexpr int kFlagTableBits = 7;
using FlagTable = std::array<uint64_t, 1u << kFlagTableBits>;
constexpr FlagTable MakeFlagTable(int first_bit) {
  FlagTable t{};
  for (uint32_t v = 0; v < t.size(); ++v) {
    for (int b = 0; b < kFlagTableBits; ++b) {
      if (v & (1u << b)) t[v] |= FiFlagOfBit(first_bit + b);
    }
  }
  return t;
}
constexpr FlagTable kLowFlags = MakeFlagTable(0);
constexpr FlagTable kHighFlags = MakeFlagTable(kFlagTableBits);
static_assert(rdm::kCompAtomic < (uint64_t{1} << (2 * kFlagTableBits)),
              "an engine completion flag beyond the tables");

uint64_t FiFlags(uint64_t f) {
  constexpr uint64_t kMask = (1u << kFlagTableBits) - 1;
  return kLowFlags[f & kMask] | kHighFlags[(f >> kFlagTableBits) & kMask];
}

bool TxSide(uint64_t f) { return (f & (rdm::kCompSend | rdm::kCompRead | rdm::kCompWrite)) != 0; }

// The application's view of an engine completion's context, scattering a
// bounce buffer where there is one. Sets *suppress for CQ-less operations.
void* Resolve(Ep* ep, const rdm::Completion& c, bool* suppress, size_t* len) {
  OpRecords* pool = &ep->records;
  OpRecord* r = pool->Of(c.context);
  bool shared = false;
  if (r == nullptr && ep->srx != nullptr) {
    // A receive of the shared receive context: it asked for no completion
    // (suppress), which holds where this endpoint's CQ is selective.
    pool = &ep->srx->records;
    r = pool->Of(c.context);
    shared = true;
  }
  if (r == nullptr) return c.context;
  void* user = r->user_context;
  *suppress = r->suppress && (!shared || ep->cqs.rx_selective);
  if (!r->scatter.empty()) {
    // Through the application's copy functions where it set them (hmem.h).
    CopyToUser(ep->domain, r->scatter.data(), r->scatter.size(), r->bounce.data(),
               std::min(*len, r->bounce.size()));
  }
  pool->Free(r);
  return user;
}

// The counters of a completion's class (fi_cntr(3)); none bound, nothing:
// direct calls, no counter looked at for a class the completion is not.
template <bool kError>
void CountCompletion(Ep* ep, uint64_t f) {
  const auto count = [](Cntr* c) {
    if constexpr (kError) {
      CountErrorEvent(c);
    } else {
      CountEvent(c);
    }
  };
  const EpCntrs& c = ep->cntrs;
  if ((f & rdm::kCompSend) && c.send != nullptr) count(c.send);
  if ((f & rdm::kCompRecv) && c.recv != nullptr) count(c.recv);
  if ((f & (rdm::kCompRead | rdm::kCompWrite | rdm::kCompRemoteWrite | rdm::kCompRemoteRead)) == 0) {
    return;
  }
  if (f & rdm::kCompRead) count(c.read);
  if (f & rdm::kCompWrite) count(c.write);
  if (f & rdm::kCompRemoteWrite) count(c.remote_write);
  if (f & rdm::kCompRemoteRead) count(c.remote_read);
}

// FI_SOURCE_ERR (fi_cq(3)): a message received from a sender not in the AV
// is reported as an error entry, FI_EADDRNOTAVAIL, with every field of the
// completion and the sender's address as err_data, ready for fi_av_insert.
// False (the caller queues the plain entry) without the capability or when
// the engine no longer knows the sender's address.
bool ReportUnknownSource(Ep* ep, Cq* cq, const fi_cq_tagged_entry& entry, rdm::PeerId peer) {
  if ((ep->caps & (FI_SOURCE | FI_SOURCE_ERR)) != (FI_SOURCE | FI_SOURCE_ERR)) return false;
  const std::optional<rdm::Address> a =
      ep->rdm != nullptr ? ep->rdm->PeerAddress(peer) : ep->dgram->PeerAddress(peer);
  if (!a) return false;
  CqError err{};
  err.e.op_context = entry.op_context;
  err.e.flags = entry.flags;
  err.e.len = entry.len;
  err.e.buf = entry.buf;
  err.e.data = entry.data;
  err.e.tag = entry.tag;
  err.e.err = FI_EADDRNOTAVAIL;
  err.src = FI_ADDR_NOTAVAIL;
  const sockaddr_in sa = ToSockaddr(*a);
  static_assert(sizeof(sa) <= sizeof(err.source));
  std::memcpy(err.source, &sa, sizeof(sa));
  err.source_len = sizeof(sa);
  std::snprintf(err.message, sizeof(err.message), "a message from %s:%u, not in the AV",
                a->ip.ToString().c_str(), a->udp_port);
  cq->errors.push_back(err);
  cq->wait.Signal();
  return true;
}

// A completion into its CQ and counters. A peer's write into or read of
// one of our regions (the engine reports every one: FI_RMA_EVENT) counts on
// the endpoint's and the region's FI_REMOTE_WRITE / FI_REMOTE_READ
// counters; only a write carrying FI_REMOTE_CQ_DATA is also an entry of
// the receive CQ, its op_context the region's context (fi_cq(3)).
void Deliver(Ep* ep, const rdm::Completion& c) {
  if (ep->coll != nullptr && CollCompletion(ep, c)) return;  // a collective's transfer
  if (ep->msg != nullptr && MsgCompletion(ep, c)) return;  // the connection manager's
  // A buffered receive's peek or landing.
  if (ep->buffered != nullptr && BufferedCompletion(ep, c)) return;
  bool suppress = false;
  void* user;
  if (c.flags & (rdm::kCompRemoteWrite | rdm::kCompRemoteRead)) {
    user = CountMrEvent(c.context, (c.flags & rdm::kCompRemoteWrite) != 0);
    suppress = !(c.flags & rdm::kCompRemoteData);
  } else {
    size_t len = c.len;
    user = Resolve(ep, c, &suppress, &len);
    if (!ep->deferred.empty()) {  // deferred work (trigger.h) reports only if asked
      bool report = true;
      user = FinishDeferred(ep, user, false, &report);
      if (!report) return;
    }
  }
  CountCompletion<false>(ep, c.flags);
  const bool tx = TxSide(c.flags);
  if (tx) StxGive(ep);
  Cq* cq = tx ? ep->cqs.tx : ep->cqs.rx;
  if (cq == nullptr || suppress) return;
  CqEntry e{};
  e.e.op_context = user;
  e.e.flags = FiFlags(c.flags);
  // fi_cq(3): with FI_MSG_PREFIX a receive's len counts the prefix.
  e.e.len = c.len + (tx ? 0 : ep->msg_prefix);
  e.e.buf = c.buf;
  e.e.data = c.data;
  e.e.tag = c.tag;
  e.src = tx ? FI_ADDR_NOTAVAIL : SourceOf(ep, c.source);
  if (e.src == FI_ADDR_NOTAVAIL && !tx && ReportUnknownSource(ep, cq, e.e, c.source)) return;
  cq->entries.push_back(e);
  cq->wait.Signal();
}

// A failure after its operation's completion (a buffered send) or of an
// operation without one (an inject): never a CQ entry (an operation
// completes once, and every CQ error carries its operation's context). It
// goes to the endpoint's EQ as an error event naming the peer (fi_eq(3):
// data is the fi_addr, context the endpoint's); with no EQ (or a full one)
// the next operation to that peer fails with -FI_EIO instead.
void ReportAfterCompletion(Ep* ep, const rdm::ErrorCompletion& ec) {
  const fi_addr_t addr = ep->peers.AddrOf(ec.op.source);
  const fi_addr_t entry = AvEntry(ep->av, addr);
  BYPASS_FI_WARN(FI_LOG_EP_DATA,
                 "a buffered send or inject failed after its completion (errno %d): %s\n", ec.err,
                 ec.message);
  if (ep->eq != nullptr &&
      EqPushError(ep->eq, &ep->fid.fid, ep->fid.fid.context, addr, FI_EIO, ec.err, ec.message)) {
    return;
  }
  if (addr == FI_ADDR_NOTAVAIL) return;  // removed: nothing more goes to it
  if (ep->peers.late_error.size() <= entry) ep->peers.late_error.resize(entry + 1);
  ep->peers.late_error[entry] = true;
}

// A peer the engine gave up: an EQ error event naming it (its operations
// and the receives awaiting it have failed in the CQs).
void ReportPeerFailure(Ep* ep, const rdm::PeerFailure& f) {
  if (ep->msg != nullptr && MsgPeerFailure(ep, f)) return;  // FI_SHUTDOWN, or a connect error
  BYPASS_FI_WARN(FI_LOG_EP_DATA, "%s\n", f.message);
  if (ep->eq == nullptr) return;
  if (!EqPushError(ep->eq, &ep->fid.fid, ep->fid.fid.context, ep->peers.AddrOf(f.peer), FI_EIO,
                   f.err, f.message)) {
    BYPASS_FI_WARN(FI_LOG_EQ, "EQ full: the peer failure above is not reported there\n");
  }
}

// The fi_errno of a failed operation: a truncation is FI_ETRUNC; a receive
// that its peer's death or restart ended is FI_EIO (prov_errno tells which).
int FiErr(const rdm::ErrorCompletion& ec, bool tx) {
  if (ec.err == EMSGSIZE && ec.olen > 0) return FI_ETRUNC;
  if (!tx && (ec.err == ETIMEDOUT || ec.err == ECONNRESET)) return FI_EIO;
  return ec.err;
}

void DeliverError(Ep* ep, const rdm::ErrorCompletion& ec) {
  if (ep->coll != nullptr && CollError(ep, ec)) return;  // a collective's transfer
  if (ep->msg != nullptr && MsgError(ep, ec)) return;  // the connection manager's
  if (ec.op.flags & rdm::kCompAfterCompletion) {
    ReportAfterCompletion(ep, ec);
    return;
  }
  if (BufferedError(ep, ec)) return;
  bool suppress = false;
  size_t len = ec.op.len;
  void* user = Resolve(ep, ec.op, &suppress, &len);
  if (!ep->deferred.empty()) {  // deferred work (trigger.h) reports only if asked
    bool report = true;
    user = FinishDeferred(ep, user, true, &report);
    if (!report) return;
  }
  CountCompletion<true>(ep, ec.op.flags);
  const bool tx = TxSide(ec.op.flags);
  if (tx) StxGive(ep);
  Cq* cq = tx ? ep->cqs.tx : ep->cqs.rx;
  BYPASS_FI_DBG(FI_LOG_CQ, "operation failed (errno %d): %s\n", ec.err, ec.message);
  if (cq == nullptr) return;  // errors are reported even for selective operations
  CqError e{};
  e.e.op_context = user;
  e.e.flags = FiFlags(ec.op.flags);
  e.e.len = ec.op.len;
  e.e.buf = ec.op.buf;
  e.e.data = ec.op.data;
  e.e.tag = ec.op.tag;
  e.e.olen = ec.olen;
  e.e.err = FiErr(ec, tx);
  e.e.prov_errno = ec.err;
  e.src = tx ? FI_ADDR_NOTAVAIL : SourceOf(ep, ec.op.source);
  std::snprintf(e.message, sizeof(e.message), "%s", ec.message);
  cq->errors.push_back(e);
  cq->wait.Signal();
}

size_t RoomFor(const Cq* cq, bool errors) {
  if (cq == nullptr) return DrainBuffers::kBurst;
  return errors ? cq->capacity - cq->errors.size() : cq->room();
}

// The entries every CQ a pass of ep's engine may fill has room for: ep's,
// and on a listening endpoint those of the connections sharing its port.
size_t Room(const Ep* ep, bool errors) {
  size_t r = std::min(RoomFor(ep->cqs.tx, errors), RoomFor(ep->cqs.rx, errors));
  if (ep->port_share == nullptr) return r;  // not a listener sharing its port (msg_ep.h)
  if (const std::vector<Ep*>* members = SharedMembers(ep)) {
    for (const Ep* c : *members) {
      r = std::min(r, std::min(RoomFor(c->cqs.tx, errors), RoomFor(c->cqs.rx, errors)));
    }
  }
  return r;
}

// The endpoint a completion (or, c null, a peer failure) of ep's engine
// belongs to: ep, or on a listening endpoint the listener itself or the
// connection of the peer (null: a connection since closed, whose
// completion is dropped).
Ep* Owner(Ep* ep, const rdm::Completion* c, rdm::PeerId peer) {
  return ep->port_share == nullptr ? ep : RouteShared(ep, c, peer);
}

}  // namespace

namespace {

// One pass of endpoint e (an rdm::Endpoint or rdm::DatagramEndpoint: the
// same completion records), then its completions into ep's CQs and counters.
template <class E>
size_t ProgressAndDrain(Ep* ep, E& e) {
  // One pass. What a peer waits for to complete a send (its last packet
  // asks, see ep_ops.cc) is acknowledged at the application's next call:
  // the reply it sends carries the ACK, else that call's pass sends it, or
  // the progress thread if the application stops calling (CallWatch).
  size_t done = e.Progress();
  if constexpr (std::is_same_v<E, rdm::Endpoint>) {
    NoteUnfinished(ep->domain, &e);  // what this pass left (an ACK deferred, packets in flight)
    if (ep->buffered != nullptr) ScanBuffered(ep);  // before the poll: its peeks complete at once
  }
  rdm::Completion* const comps = ep->drain->completions;
  // Each completion adds at most one entry to one CQ: the room, read once,
  // only shrinks by what was delivered.
  size_t room = Room(ep, false);
  while (room > 0) {
    const size_t want = std::min(DrainBuffers::kBurst, room);
    const size_t n = e.PollCompletions({comps, want});
    for (size_t i = 0; i < n; ++i) {
      if (Ep* to = Owner(ep, &comps[i], comps[i].source)) Deliver(to, comps[i]);
    }
    done += n;
    // A buffered endpoint's peeks post claims as they are delivered, whose
    // completions (a message already whole) are there at once: poll until
    // nothing comes, so their notifications are in this pass.
    if (n < want && (ep->buffered == nullptr || n == 0)) break;
    room -= n;
  }
  rdm::ErrorCompletion* const err = &ep->drain->error;
  while (Room(ep, true) > 0 && e.PollErrors({err, 1}) == 1) {
    if (Ep* to = Owner(ep, &err->op, err->op.source)) DeliverError(to, *err);
    ++done;
  }
  if constexpr (std::is_same_v<E, rdm::Endpoint>) {
    rdm::PeerFailure f;
    while (e.PollPeerFailures({&f, 1}) == 1) {
      if (Ep* to = Owner(ep, nullptr, f.peer)) ReportPeerFailure(to, f);
      ++done;
    }
  }
  return done;
}

}  // namespace

size_t ProgressEp(Ep* ep) {
  // Triggered work that could not be issued when it became due (trigger.h).
  if (TriggersReady(ep->domain)) DrainTriggers(ep->domain);
  // Collectives' transfers and reports that waited for room (coll.h).
  if (ep->coll != nullptr) CollProgress(ep);
  // A connection on its listener's port: that engine, every connection's
  // completions to its own CQs (msg_ep.h).
  if (ep->shares != nullptr) ep = ep->shares;
  if (ep->port_share != nullptr) {
    const size_t n = ProgressAndDrain(ep, *ep->rdm);
    TendSharedPort(ep);
    return n;
  }
  if (ep->rdm != nullptr) return ProgressAndDrain(ep, *ep->rdm);
  if (ep->dgram != nullptr) return ProgressAndDrain(ep, *ep->dgram);
  return 0;
}

void ProgressAll(const std::vector<Ep*>& eps) {
  if (eps.empty()) return;
  Domain* d = eps.front()->domain;
  if (ProgressThread* t = d->progress_running.load(std::memory_order_acquire)) t->NoteAppPass();
  for (Ep* ep : eps) {
    // Counted on the endpoint whose engine the pass progresses (a
    // connection's is its listener's). A load and a store, not an atomic
    // add: only "changed" is read, and a lost count between two
    // application threads changes nothing.
    Ep* engine = ep->shares != nullptr ? ep->shares : ep;
    engine->app_passes.store(engine->app_passes.load(std::memory_order_relaxed) + 1,
                             std::memory_order_relaxed);
    ProgressEp(ep);
  }
}

size_t ProgressDomain(Domain* d, bool only_unpolled, bool* waited, bool* unfinished) {
  // The domain's lock keeps d->eps; a slot of a scalable endpoint on a
  // queue of its own is progressed under its own lock too (taken after the
  // domain's, the order every path keeps).
  DomainGuard g(d->lock);
  size_t n = 0;
  *unfinished = false;
  for (Ep* ep : d->eps) {
    // Polled: the engine it progresses was (a connection and its
    // listener share one); each endpoint keeps its own last look.
    const Ep* engine = ep->shares != nullptr ? ep->shares : ep;
    const uint64_t app = engine->app_passes.load(std::memory_order_relaxed);
    const bool polled = app != ep->thread_seen_app_passes;
    ep->thread_seen_app_passes = app;
    if (only_unpolled && polled) {
      *unfinished = true;  // not looked at: the watch stays
      continue;
    }
    DomainGuard q(*ep->lock);
    n += ProgressEp(ep);
    if (ep->rdm != nullptr && ep->rdm->Unfinished()) *unfinished = true;
  }
  DomainLock& l = d->lock;
  *waited = l.Target().mu.waited_for();
  return n;
}

}  // namespace bypass::fi
