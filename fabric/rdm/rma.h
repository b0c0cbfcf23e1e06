// The Rma stage: registered regions (keys, access rights, bounds) and RMA
// reads and writes (fi_rma(3)), both as initiator and as target. A target
// checks a whole access before it touches a byte and answers every write
// and refused read with a RESPONSE, so errors complete at the initiator.
// Remote CQ data completes at the target. Atomics (rma_atomic.cc) are
// checked the same way and executed once at the target, which keeps the
// values it fetched in its answer until the initiator acknowledges it.
#ifndef BYPASS_FABRIC_RDM_RMA_H_
#define BYPASS_FABRIC_RDM_RMA_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "fabric/rdm/completions.h"
#include "fabric/rdm/context.h"
#include "fabric/rdm/index_list.h"
#include "fabric/rdm/ops.h"
#include "fabric/rdm/record_pool.h"
#include "fabric/rdm/reliability.h"
#include "fabric/rdm/session.h"
#include "fabric/rdm/types.h"
#include "fabric/rdm/wire.h"

namespace bypass::rdm {

// The RMA write a peer is applying to us, between its first and last
// segment (one of a single segment needs none: ConsumeWrite starts and ends
// it at once).
struct RxRma {
  uint32_t rma_id = 0;
  uint64_t key = 0;
  uint64_t addr = 0;
  uint64_t total = 0;
  uint64_t received = 0;
  uint64_t data = 0;
  uint8_t flags = 0;
  wire::RmaStatus status = wire::RmaStatus::kOk;  // decided at offset 0
  uint32_t region = kNone;
  uint32_t region_generation = 0;
};

// Regions and RMA operations of one endpoint.
class Rma {
 public:
  Rma(Context& ctx, Session& session, OpTable& ops, Completions& completions,
      Reliability& reliability);
  Rma(const Rma&) = delete;
  Rma& operator=(const Rma&) = delete;

  void AddPeer(uint32_t pi) { EndWrite(pi); }

  // Regions peers may read and write; the key is the one to give them.
  absl::StatusOr<uint64_t> RegisterRegion(const RegionRequest& r);
  // NotFound for an unknown key. Accesses arriving later fail at the initiator.
  absl::Status DeregisterRegion(uint64_t key);

  Result PostWrite(const RmaRequest& r);
  Result PostRead(const RmaRequest& r);
  Result PostAtomic(const AtomicRequest& r);

  // Sequenced packets from peer pi, in order (false: refused, comes again).
  bool ConsumeWrite(uint32_t pi, const wire::RmaFields& r, absl::Span<const uint8_t> payload);
  bool ConsumeReadRequest(uint32_t pi, const wire::RmaFields& r);
  // The answer to a read of ours (READ_DATA), or the target's verdict on a
  // write or read of ours (RESPONSE).
  void ConsumeReadData(uint32_t pi, const wire::RmaFields& r, absl::Span<const uint8_t> payload);
  void ConsumeResponse(uint32_t pi, const wire::RmaFields& r);
  // A peer's atomic (executed here once, its answer queued), and the
  // target's answer to one of ours (false: refused, comes again).
  bool ConsumeAtomic(uint32_t pi, const wire::RmaFields& r, absl::Span<const uint8_t> payload);
  void ConsumeAtomicResp(uint32_t pi, const wire::RmaFields& r, absl::Span<const uint8_t> payload);
  // A write from pi is between its first and last segment.
  bool Receiving(uint32_t pi) const { return rx_[pi] != kNone; }
  // Peer pi's session ended: a write it was applying is forgotten.
  void EndSession(uint32_t pi) { EndWrite(pi); }

 private:
  // A region peers may access.
  struct Region {
    bool in_use = false;
    uint32_t generation = 0;  // +1 per registration of the slot
    uint8_t* addr = nullptr;
    uint64_t len = 0;
    uint32_t access = 0;
    uint64_t base = 0;
    uint64_t key = 0;
    void* context = nullptr;
    uint32_t reads = 0;  // READ_DATA answers streaming from it (their ops hold it)
  };

  // Its write of several segments ended (or never began): the record goes back.
  void EndWrite(uint32_t pi) {
    if (rx_[pi] == kNone) return;
    writes_.Give(rx_[pi]);
    rx_[pi] = kNone;
  }
  // A peer's access to region g as a completion here (its room reserved).
  void PushTargetEvent(uint32_t pi, const Region& g, uint64_t flags, uint64_t len, uint8_t* buf,
                       uint64_t data);
  // Op o's target refused it (status): its error completion, and its end.
  void FailRefused(uint32_t pi, uint32_t o, const char* what, wire::RmaStatus status);
  wire::RmaStatus CheckAccess(uint64_t key, uint64_t addr, uint64_t len, uint32_t access,
                              uint32_t* region) const;
  // The registered region with this key, or kNone, and the index's upkeep.
  uint32_t FindRegion(uint64_t key) const;
  void IndexRegion(uint32_t i);
  void UnindexRegion(uint32_t i);

  Context& ctx_;
  Session& session_;
  OpTable& ops_;
  Completions& completions_;
  Reliability& reliability_;
  std::unique_ptr<Region[]> regions_;
  FreeSlots free_regions_;
  // Key -> region slot, open addressing with linear probing (kNone: empty),
  // at least twice max_regions entries: a peer's access costs one probe or
  // a few, not a scan of max_regions.
  std::unique_ptr<uint32_t[]> region_index_;
  uint32_t region_index_mask_;
  // The write of several segments each peer is applying to us, in
  // writes_ (kNone: none): 4 B per peer, the record only while one arrives.
  std::unique_ptr<uint32_t[]> rx_;
  RecordPool<RxRma> writes_;
};

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_RMA_H_
