// TRANSIENT (this session): bodies of the API declared for RMA, multi-receive,
// peek/claim, cancel and peer removal, so the fi_* facade compiles against
// the declarations while the engine work lands. Each body moves to its real
// file when implemented; this file is deleted before the session ends.
#include "fabric/rdm/engine.h"

namespace bypass::rdm {

// Owned by the RMA/rendezvous work.
Result Engine::PostWrite(const RmaRequest&) { return Result::kInvalid; }
Result Engine::PostRead(const RmaRequest&) { return Result::kInvalid; }
absl::StatusOr<uint64_t> Engine::RegisterRegion(const RegionRequest&) {
  return absl::UnimplementedError("RMA regions are not implemented yet");
}
absl::Status Engine::DeregisterRegion(uint64_t) {
  return absl::UnimplementedError("RMA regions are not implemented yet");
}

// Owned by the receive-side work.
bool Engine::CancelRecv(void*) { return false; }
uint32_t Engine::SendSlotsFree() const { return 0; }
uint32_t Engine::RecvSlotsFree() const { return 0; }
void Engine::SetMinMultiRecv(size_t) {}
size_t Engine::min_multi_recv() const { return 0; }
absl::Status Engine::RemovePeer(PeerId) {
  return absl::UnimplementedError("peer removal is not implemented yet");
}
absl::Status Engine::SetDscp(uint8_t) {
  return absl::UnimplementedError("DSCP is not implemented yet");
}

}  // namespace bypass::rdm
