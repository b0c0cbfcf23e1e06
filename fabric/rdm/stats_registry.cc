#include "fabric/rdm/stats_registry.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <vector>

namespace bypass::rdm {
namespace {

uint64_t SteadyNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// The list: endpoints are created and destroyed on the cold path only.
struct Registry {
  std::mutex mu;
  uint32_t next_id = 1;
  std::map<uint32_t, std::shared_ptr<StatsSlot>> slots;
};

Registry& TheRegistry() {
  static Registry* r = new Registry;  // never destroyed: endpoints may outlive static teardown
  return *r;
}

}  // namespace

uint64_t StatsSlot::Ask() {
  std::lock_guard<std::mutex> lock(mu_);
  wanted_.store(true, std::memory_order_relaxed);
  return snapshot_.published;
}

EndpointSnapshot StatsSlot::WaitPast(uint64_t asked, uint64_t deadline_ns) {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t now = SteadyNs();
  const bool fresh = published_.wait_for(
      lock, std::chrono::nanoseconds(deadline_ns > now ? deadline_ns - now : 0),
      [&] { return snapshot_.published > asked; });
  EndpointSnapshot s = snapshot_;
  s.fresh = fresh;
  return s;
}

std::shared_ptr<StatsSlot> RegisterEndpoint() {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto slot = std::make_shared<StatsSlot>(r.next_id++);
  r.slots.emplace(slot->id(), slot);
  return slot;
}

void UnregisterEndpoint(uint32_t id) {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.slots.erase(id);
}

uint32_t NextPortId() {
  static std::atomic<uint32_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

std::vector<uint32_t> ListEndpoints() {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<uint32_t> ids;
  ids.reserve(r.slots.size());
  for (const auto& [id, slot] : r.slots) ids.push_back(id);
  return ids;
}

std::vector<EndpointSnapshot> SnapshotEndpoints(absl::Span<const uint32_t> ids, uint64_t wait_ns) {
  std::vector<std::shared_ptr<StatsSlot>> slots;
  {
    Registry& r = TheRegistry();
    std::lock_guard<std::mutex> lock(r.mu);
    for (uint32_t id : ids) {
      if (auto it = r.slots.find(id); it != r.slots.end()) slots.push_back(it->second);
    }
  }
  // Ask every owner first, then wait: they publish in parallel.
  std::vector<uint64_t> asked;
  asked.reserve(slots.size());
  for (const auto& slot : slots) asked.push_back(slot->Ask());
  const uint64_t deadline = SteadyNs() + wait_ns;
  std::vector<EndpointSnapshot> out;
  out.reserve(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) out.push_back(slots[i]->WaitPast(asked[i], deadline));
  return out;
}

}  // namespace bypass::rdm
