// The process's list of endpoints for telemetry (rdm.h, SnapshotEndpoints):
// a slot per endpoint where its owner thread publishes a snapshot when a
// reader asks. Readers wait on the slot; the owner's hot path only loads
// the slot's `wanted` flag (relaxed) once per Progress pass.
#ifndef BYPASS_FABRIC_RDM_STATS_REGISTRY_H_
#define BYPASS_FABRIC_RDM_STATS_REGISTRY_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

#include "fabric/rdm/rdm.h"

namespace bypass::rdm {

// One endpoint's published state. Shared by the endpoint and the readers
// holding it (a reader may outlive the endpoint).
class StatsSlot {
 public:
  explicit StatsSlot(uint32_t id) { snapshot_.id = id; }

  uint32_t id() const { return snapshot_.id; }
  // Hot path (owner): a reader is waiting for a snapshot.
  bool wanted() const { return wanted_.load(std::memory_order_relaxed); }
  // Owner: fill(s) writes the endpoint's state into s (under the slot's
  // lock; s keeps its vectors' capacity from one publication to the next).
  template <typename Fill>
  void Publish(Fill fill) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      fill(snapshot_);
      ++snapshot_.published;
      wanted_.store(false, std::memory_order_relaxed);
    }
    published_.notify_all();
  }
  // Readers: ask for a publication (returns the count to wait past).
  uint64_t Ask();
  // Readers: the snapshot published after `asked`, or the last one when the
  // deadline (steady clock, ns) passes first (fresh false).
  EndpointSnapshot WaitPast(uint64_t asked, uint64_t deadline_ns);

 private:
  std::mutex mu_;
  std::condition_variable published_;
  std::atomic<bool> wanted_{false};
  EndpointSnapshot snapshot_;
};

// Cold path: lists a new endpoint's slot (its id the next one) / unlists it.
std::shared_ptr<StatsSlot> RegisterEndpoint();
void UnregisterEndpoint(uint32_t id);
// The next Port id (from 1).
uint32_t NextPortId();

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_STATS_REGISTRY_H_
