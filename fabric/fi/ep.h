// The endpoint (fi_endpoint(3)): an rdm::Endpoint with its own UDP port on
// its domain's queue (FI_EP_RDM), or plain datagrams on that port
// (FI_EP_DGRAM: an rdm::DatagramEndpoint, dgram.h); the CQs, counters, AV and EQ bound to it; and
// aliases (fi_ep_alias) that share it with other default flags. Control
// calls, enable and close are in ep.cc; the data calls in ep_ops.cc.
#ifndef BYPASS_FABRIC_FI_EP_H_
#define BYPASS_FABRIC_FI_EP_H_

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_collective.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "fabric/fi/buffered.h"
#include "fabric/fi/common.h"
#include "fabric/fi/lane.h"
#include "fabric/rdm/config.h"
#include "fabric/rdm/rdm.h"
#include "fabric/rdm/types.h"

namespace bypass::fi {

struct Domain;
struct Cq;
struct Cntr;
struct Av;
struct Eq;
struct Mr;
struct DrainBuffers;
struct Sep;
struct Srx;
struct Stx;
struct MsgConn;
struct MsgPort;
struct Mc;
struct Coll;

// A send or receive that needs more than the application's context: an
// operation without a CQ entry under FI_SELECTIVE_COMPLETION, or an iov
// of several buffers (gathered into, or scattered from, `bounce`: a copy).
struct OpRecord {
  void* user_context = nullptr;
  bool suppress = false;  // no CQ entry (counters still count it)
  std::vector<uint8_t> bounce;
  std::vector<iovec> scatter;  // receive: where the bounce goes on completion
  uint32_t next_free = UINT32_MAX;
};

// An endpoint's OpRecords, one for every send and receive the engine can
// hold (sized at fi_enable), and their free list. The engine is handed a
// record as an operation's context: a completion's context that points
// into `slots` is a record, any other is the application's own.
struct OpRecords {
  std::vector<OpRecord> slots;
  uint32_t free = UINT32_MAX;
  uint32_t lazy = 0;  // InitLazy: the records the first Alloc makes

  // n records, all free (fi_enable).
  void Init(size_t n) {
    slots.resize(n);
    for (size_t i = 0; i < n; ++i) {
      slots[i].next_free = i + 1 < n ? static_cast<uint32_t>(i + 1) : UINT32_MAX;
    }
    free = n > 0 ? 0 : UINT32_MAX;
  }
  // n records made by the first Alloc (an idle connection holds none).
  void InitLazy(size_t n) { lazy = static_cast<uint32_t>(n); }
  // A free record, or null when every one is in use.
  OpRecord* Alloc() {
    if (slots.empty() && lazy > 0) {
      Init(lazy);
      lazy = 0;
    }
    if (free == UINT32_MAX) return nullptr;
    OpRecord* r = &slots[free];
    free = r->next_free;
    r->next_free = UINT32_MAX;
    return r;
  }
  // Returns a record to the free list.
  void Free(OpRecord* r) {
    r->bounce.clear();
    r->scatter.clear();
    r->user_context = nullptr;
    r->suppress = false;
    r->next_free = free;
    free = static_cast<uint32_t>(r - slots.data());
  }
  // The record an engine context is, or null for the application's own.
  OpRecord* Of(void* ctx) {
    if (slots.empty()) return nullptr;
    const auto p = reinterpret_cast<uintptr_t>(ctx);
    const auto lo = reinterpret_cast<uintptr_t>(slots.data());
    if (p < lo || p >= lo + slots.size() * sizeof(OpRecord)) return nullptr;
    return static_cast<OpRecord*>(ctx);
  }
  // Frees the records' memory, not just their size (fi_close).
  void Release() {
    std::vector<OpRecord>().swap(slots);
    lazy = 0;
  }
};

// The CQs an endpoint's completions go to (fi_ep_bind with FI_TRANSMIT,
// FI_RECV), each with whether only operations that ask for a completion
// get one (FI_SELECTIVE_COMPLETION).
struct EpCqs {
  Cq* tx = nullptr;
  Cq* rx = nullptr;
  bool tx_selective = false;
  bool rx_selective = false;
};

// The counters bound to an endpoint (fi_ep_bind with FI_SEND, FI_RECV,
// ...), one per kind of event; one counter may count several kinds.
struct EpCntrs {
  Cntr* send = nullptr;
  Cntr* recv = nullptr;
  Cntr* read = nullptr;
  Cntr* write = nullptr;
  Cntr* remote_read = nullptr;
  Cntr* remote_write = nullptr;
};

// fi_addr_t to engine peer and back, filled from the bound AV once the
// engine exists: the data path maps a destination, the progress path a
// completion's source.
struct PeerMap {
  std::vector<rdm::PeerId> peer_of;  // by fi_addr
  std::vector<fi_addr_t> addr_of;    // by PeerId.slot()

  // The peer of an fi_addr; false if it has none (not inserted, removed).
  bool Find(fi_addr_t a, rdm::PeerId* out) const {
    if (a >= peer_of.size() || peer_of[a].value == UINT32_MAX) return false;
    *out = peer_of[a];
    return true;
  }
  // The fi_addr of a peer, or FI_ADDR_NOTAVAIL.
  fi_addr_t AddrOf(rdm::PeerId p) const {
    const uint32_t slot = p.slot();
    return slot < addr_of.size() ? addr_of[slot] : FI_ADDR_NOTAVAIL;
  }
  // Per AV entry (AvEntry: an fi_rx_addr's context index stripped, or a
  // vector by fi_addr would reach 2^64): a buffered send or inject was
  // posted to it (fi_av_remove lets those finish first), and a failure
  // after such an operation's completion is owed to the next operation to
  // it (no EQ to report it).
  std::vector<bool> buffered;
  std::vector<bool> late_error;
  void NoteBuffered(fi_addr_t fa) {
    if (buffered.size() <= fa) buffered.resize(fa + 1);
    buffered[fa] = true;
  }
  // Named receive contexts (fi_rx_addr, an AV with rx_ctx_bits): the AV's
  // addresses by fi_addr, and the peers made for fi_addrs with a context
  // index (the address's UDP port plus the index), made on first use.
  std::vector<std::optional<rdm::Address>> av_addr;
  absl::flat_hash_map<fi_addr_t, rdm::PeerId> named;
  // By PeerId.slot(): a peer the engine learned that SourceOf found in no
  // AV entry's receive contexts (looked for again when the AV grows).
  std::vector<bool> unnamed;
  void Set(fi_addr_t fa, rdm::PeerId p) {
    if (peer_of.size() <= fa) peer_of.resize(fa + 1);
    peer_of[fa] = p;
    const uint32_t slot = p.slot();
    if (addr_of.size() <= slot) addr_of.resize(slot + 1, FI_ADDR_NOTAVAIL);
    addr_of[slot] = fa;
  }
};

// A deferred operation (fi_trigger(3), trigger.h) posted and not yet
// complete: the context its CQ entry carries, its completion counter, and
// whether the endpoint reports it (FI_COMPLETION).
struct DeferredOp {
  void* context = nullptr;
  Cntr* done = nullptr;
  bool report = false;
};

// An endpoint, or an alias of one (`base` says which).
struct Ep {
  fid_ep fid;
  Obj obj;
  Ep* base = this;  // an alias (fi_ep_alias) or a context points at its endpoint
  uint64_t tx_op_flags = 0;
  uint64_t rx_op_flags = 0;
  // A transmit or receive context of a scalable endpoint (sep.h): one side
  // of the slot endpoint it points at, enabled on its own.
  enum Side : uint8_t { kWhole, kTx, kRx };
  Side side = kWhole;
  bool side_enabled = false;
  // Everything below lives in the base endpoint only.
  Domain* domain = nullptr;
  // The device queue its engine endpoint is on and the lock every call
  // takes: the domain's (lock: the domain's), or, for a slot of a scalable
  // endpoint, the slot's own queue (lane.h) with its lock.
  std::shared_ptr<Lane> lane;
  DomainLock* lock = nullptr;
  Sep* sep = nullptr;          // a slot: its scalable endpoint
  uint32_t sep_index = 0;      // a slot: its context index
  Ep* contexts[2] = {};        // a slot: its transmit and receive contexts
  fi_ep_type type = FI_EP_RDM;
  uint64_t caps = 0;
  uint16_t udp_port = 0;
  // The application named the port (src_addr, fi_setname); otherwise a
  // port another process of the host holds is passed over at fi_enable.
  bool port_given = false;
  // The loopback address (127.0.0.0/8) the application named this endpoint
  // by (src_addr, fi_setname), which names the device with the host's
  // address: fi_getname answers it, as it answers the port it was given.
  std::optional<driver::Ipv4Address> loopback_name;
  // What fi_enable creates the engine endpoint with, and the options set
  // before it (applied to the engine then).
  rdm::EndpointConfig config;
  std::optional<uint8_t> dscp;
  size_t min_multi_recv = 0;
  bool min_multi_recv_set = false;
  // FI_OPT_FI_HMEM_P2P as set (every transfer is of system memory: it
  // changes nothing but what fi_getopt answers).
  int hmem_p2p = FI_HMEM_P2P_ENABLED;
  // Bound objects (fi_ep_bind, before fi_enable; MRs with FI_MR_ENDPOINT).
  EpCqs cqs;
  EpCntrs cntrs;
  Av* av = nullptr;
  Eq* eq = nullptr;
  std::vector<Mr*> mrs;  // FI_MR_ENDPOINT regions bound here
  // Shared contexts (shared_ctx.h): the sides opened with
  // FI_SHARED_CONTEXT, the contexts bound to them, and this endpoint's
  // part of the stx's outstanding operations.
  bool shared_rx = false;
  bool shared_tx = false;
  Srx* srx = nullptr;
  Stx* stx = nullptr;
  size_t stx_outstanding = 0;
  // After fi_enable: the engine's endpoint (rdm for FI_EP_RDM, dgram for
  // FI_EP_DGRAM) and what the facade keeps beside it, the same for both.
  // An accepted FI_EP_MSG connection shares its listener's (msg_ep.h).
  std::shared_ptr<rdm::Endpoint> rdm;
  std::unique_ptr<rdm::DatagramEndpoint> dgram;
  std::unique_ptr<DrainBuffers> drain;  // progress.h
  PeerMap peers;
  OpRecords records;
  // FI_EP_MSG: the connection (msg_ep.h), owned; null for other types.
  MsgConn* msg = nullptr;
  // Connections sharing one port (msg_ep.h): on an accepted connection,
  // the listening endpoint whose engine endpoint (port, lock, lane) it
  // uses; on that listening endpoint, its connections by peer.
  Ep* shares = nullptr;
  MsgPort* port_share = nullptr;
  // FI_EP_DGRAM: its multicast memberships (fi_join, mcast.h).
  std::vector<Mc*> groups;
  // Deferred operations in flight, by the request they were posted with.
  absl::flat_hash_map<void*, DeferredOp> deferred;
  // FI_EP_RDM opened with the FI_BUFFERED_RECV mode bit (buffered.h).
  std::unique_ptr<BufferedRecvs> buffered;
  // FI_EP_DGRAM opened with the FI_MSG_PREFIX mode bit: the bytes of
  // prefix space ahead of every send and receive buffer (0: none).
  size_t msg_prefix = 0;
  // Collectives (coll.h): its groups and their operations; null until the
  // first fi_join_collective, freed when its last group is closed.
  Coll* coll = nullptr;
  // The application's progress passes of this endpoint's engine
  // (ProgressAll; a connection's count on its listener, `shares`), and the
  // count of its engine the domain's progress thread saw at its last look
  // (written by that thread only, under the domain lock): while the
  // application polls, the thread progresses only the endpoints it did not
  // (ProgressDomain).
  std::atomic<uint64_t> app_passes{0};
  uint64_t thread_seen_app_passes = 0;
};
static_assert(offsetof(Ep, fid) == 0);

// An endpoint, an alias, or a transmit or receive context.
inline Ep* AsEp(const void* f) {
  if (f != nullptr) {
    const size_t c = static_cast<const ::fid*>(f)->fclass;
    if (c == FI_CLASS_TX_CTX || c == FI_CLASS_RX_CTX) return As<Ep>(f, c);
  }
  return As<Ep>(f, FI_CLASS_EP);
}

inline bool Enabled(const Ep* ep) { return ep->rdm != nullptr || ep->dgram != nullptr; }

// fi_endpoint (FI_EP_RDM, FI_EP_DGRAM or FI_EP_MSG).
int OpenEp(fid_domain* domain, fi_info* info, fid_ep** ep, void* context);
// An endpoint of d made from info (its port chosen, not yet one of d's
// endpoints), or a negative fi_errno; max_ctx: the ep_attr->tx_ctx_cnt and
// rx_ctx_cnt it accepts (1; a scalable endpoint's slots more). REQUIRES:
// d's lock is held.
int NewEp(Domain* d, const fi_info* info, void* context, size_t max_ctx, std::unique_ptr<Ep>* out);
// fi_enable of an endpoint (or a slot of a scalable endpoint): its engine
// endpoint on its lane. REQUIRES: the domain's and the endpoint's locks.
int EnableEp(Ep* ep);
// Undoes EnableEp of an endpoint nothing has used yet (a failed enable; a
// scalable endpoint moving its ports). REQUIRES: the same locks.
void DisableEp(Ep* ep);
// Closes an endpoint's (or slot's) engine side and takes it off its
// domain: lingers, unbinds, frees its port. REQUIRES: the domain's lock.
void CloseEngineEp(Ep* ep);
// Drops an endpoint's CQs and counters of its transmit side, its receive
// side, or both. REQUIRES: the domain's and the endpoint's locks.
void UnbindCompletions(Ep* ep, bool tx, bool rx);
// fi_getname's answer: a in *addr (FI_SOCKADDR_IN), or -FI_ETOOSMALL with
// the size needed in *addrlen.
int PutName(const rdm::Address& a, void* addr, size_t* addrlen);
// The calls on a transmit or receive context (sep.cc), from the endpoint
// calls: a bind's check (CQs and counters of its side only), fi_enable,
// and fi_close (REQUIRES: the domain's lock).
int CheckContextBind(const Ep* ctx, const fid* bfid, uint64_t flags);
int EnableContext(Ep* ctx);
void CloseContext(Ep* ctx);
// Wires an AV entry into an enabled endpoint's engine.
int AddPeerToEp(Ep* ep, fi_addr_t fa, const rdm::Address& a);
// The engine peer of a destination: an AV entry, or, through an AV with
// rx_ctx_bits, a receive context of one (fi_rx_addr: the entry's UDP port
// plus the index; its peer is made on first use). False if there is none.
bool FindPeer(Ep* ep, fi_addr_t fa, rdm::PeerId* out);
// The source a completion from peer p reports (FI_SOURCE): p's AV entry,
// or, through an AV with rx_ctx_bits, fi_rx_addr(entry, i) when p is at
// an entry's UDP port + i (a scalable endpoint's context i: sep.h);
// FI_ADDR_NOTAVAIL when neither.
fi_addr_t SourceOf(Ep* ep, rdm::PeerId p);
// Before fi_av_remove forgets fa: the buffered sends and injects to it
// (whose completions the application has had, or which have none) finish
// first rather than vanish, a failure owed to fa is forgotten, and the
// peers made for its receive contexts (FindPeer) are removed.
void FinishBeforeRemove(Ep* ep, fi_addr_t fa);

// The data-path tables every endpoint points at (ep_ops.cc).
extern fi_ops_msg g_msg_ops;
extern fi_ops_tagged g_tagged_ops;
extern fi_ops_rma g_rma_ops;
extern fi_ops_atomic g_atomic_ops;  // atomic.cc
extern fi_ops_collective g_collective_ops;  // coll.cc

// Shared by the data paths (ep_ops.cc, atomic.cc). REQUIRES: the domain guard.
// A failure reported after its completion, owed to the next op to dest (once).
bool TakeLateError(Ep* ep, fi_addr_t dest);
// FI_FENCE: earlier operations to dest are not all complete yet.
bool FenceHolds(const Ep* ep, rdm::PeerId dest);
// Copies the bytes of count buffers into out, in order (through d's
// fi_hmem_override_ops where set: hmem.h).
void Gather(const Domain* d, const iovec* iov, size_t count, uint8_t* out);

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_EP_H_
