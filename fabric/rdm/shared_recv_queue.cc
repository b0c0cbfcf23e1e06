// SharedRecvQueue (rdm.h): the API over SharedMatch (shared_recv.h).
#include <memory>

#include "fabric/rdm/messaging.h"
#include "fabric/rdm/rdm.h"
#include "fabric/rdm/shared_recv.h"

namespace bypass::rdm {

absl::StatusOr<std::unique_ptr<SharedRecvQueue>> SharedRecvQueue::Create(
    Port& port, const SharedRecvConfig& config) {
  // The same bounds as an endpoint's own queues.
  EndpointConfig check;
  check.udp_port = 1;
  check.max_posted_recvs = config.max_posted_recvs;
  check.max_unexpected_msgs = config.max_unexpected_msgs;
  check.unexpected_bytes = config.unexpected_bytes;
  check.unexpected_chunk_bytes = config.unexpected_chunk_bytes;
  if (absl::Status s = ValidateConfig(check); !s.ok()) return s;
  return std::unique_ptr<SharedRecvQueue>(new SharedRecvQueue(port, config));
}

SharedRecvQueue::SharedRecvQueue(Port& port, const SharedRecvConfig& config)
    : port_(port), config_(config), impl_(std::make_unique<SharedMatch>(config)) {}

SharedRecvQueue::~SharedRecvQueue() = default;

Result SharedRecvQueue::PostRecv(const RecvRequest& r) {
  if (r.flags != 0 || !(r.source == kAnyPeer) || (r.len > 0 && r.buf == nullptr)) {
    return Result::kInvalid;
  }
  return impl_->PostRecv(r);
}

Result SharedRecvQueue::PostRecvFrom(const RecvRequest& r, const Address& source) {
  if (r.flags != 0 || !(r.source == kAnyPeer) || (r.len > 0 && r.buf == nullptr)) {
    return Result::kInvalid;
  }
  RecvRequest q = r;
  q.source = impl_->IdOf(source);
  return impl_->PostRecv(q);
}

bool SharedRecvQueue::CancelRecv(void* context) { return impl_->CancelRecv(context); }
uint32_t SharedRecvQueue::RecvSlotsFree() const {
  return impl_->queues().recv_slots_free();
}
uint32_t SharedRecvQueue::endpoints() const { return impl_->members(); }

}  // namespace bypass::rdm
