// A receive queue shared by endpoints of one Port (shared_recv.h).
#include "fabric/rdm/shared_recv.h"

#include "fabric/rdm/messaging.h"

namespace bypass::rdm {

SharedMatch::SharedMatch(const SharedRecvConfig& c)
    : queues_(c.max_posted_recvs, c.max_unexpected_msgs, c.unexpected_bytes,
              c.unexpected_chunk_bytes, PoolOf(c.unexpected_pool)) {}

uint32_t SharedMatch::Join(Messaging* m) {
  ++live_;
  for (size_t i = 0; i < members_.size(); ++i) {
    if (members_[i] == nullptr) {
      members_[i] = m;
      return static_cast<uint32_t>(i + 1);
    }
  }
  members_.push_back(m);
  return static_cast<uint32_t>(members_.size());
}

void SharedMatch::Leave(uint32_t member) {
  members_[member - 1] = nullptr;
  --live_;
}

PeerId SharedMatch::IdOf(const Address& a) {
  const uint64_t key = uint64_t{a.ip.value} << 16 | a.udp_port;
  const auto [it, added] = ids_.try_emplace(key, PeerId{static_cast<uint32_t>(ids_.size())});
  return it->second;
}

Result SharedMatch::PostRecv(const RecvRequest& r) {
  const uint32_t e = queues_.FindUnexpected(r);
  if (e != kNone) return members_[queues_.unexpected(e).owner - 1]->ReceiveShared(r, e);
  const uint32_t slot = queues_.AllocRecv(r);
  if (slot == kNone) return Result::kAgain;
  queues_.QueueRecv(slot);
  NoteFreed();  // a member that refused a message for want of a receive retries
  return Result::kOk;
}

bool SharedMatch::CancelRecv(void* context) {
  for (Messaging* m : members_) {
    if (m == nullptr) continue;
    const Result r = m->CancelShared(context);
    if (r != Result::kAgain) return r == Result::kOk;
  }
  return false;
}

void SharedMatch::NoteFreed() {
  for (Messaging* m : members_) {
    if (m != nullptr) m->NoteFreedHere();
  }
}

}  // namespace bypass::rdm
