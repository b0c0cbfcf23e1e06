#include "fabric/rdm/completions.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>

namespace bypass::rdm {
namespace {

// The record of a message received into r (len bytes of it).
void FillReceived(Completion& c, PeerId src, const RecvRequest& r, const MessageInfo& m,
                  uint64_t flags, uint64_t len) {
  c.context = r.context;
  c.flags = flags;
  c.len = len;
  c.buf = r.buf;
  c.data = m.data;
  c.tag = m.tag;
  c.source = src;
}

}  // namespace

Completions::Completions(Counters& counters, const PeerTable& peers, uint32_t capacity,
                         uint32_t extra_errors)
    : counters_(counters), peers_(peers), cq_(capacity, extra_errors) {}

void Completions::PushOpError(const SendOp& op, const ErrorCompletion& ec) {
  ++counters_.ops_failed;
  if (op.inject) {
    // No reservation was taken for it: reported while there is extra room,
    // marked so that it is not taken for a completion of the operation.
    ErrorCompletion late = ec;
    late.op.flags |= kCompAfterCompletion;
    if (!cq_.PushUnreservedError(late)) ++counters_.inject_errors_dropped;
  } else {
    cq_.PushError(ec);
  }
}

void Completions::OpFailed(const SendOp& op, int err, const char* why) {
  RevokeOffer(op);
  ErrorCompletion ec;
  ec.op = RecordOf(op);
  ec.op.len = 0;
  ec.err = err;
  NamePeer(ec.message, sizeof(ec.message), op.peer, why);
  PushOpError(op, ec);
}

void Completions::OpFailedWith(const SendOp& op, int err, const char* message) {
  RevokeOffer(op);
  ErrorCompletion ec;
  ec.op = RecordOf(op);
  ec.op.len = 0;
  ec.err = err;
  std::snprintf(ec.message, sizeof(ec.message), "%s", message);
  PushOpError(op, ec);
}

void Completions::Received(PeerId src, const RecvRequest& r, const MessageInfo& m,
                           uint64_t extra_flags) {
  if (r.flags & kRecvDiscard) {
    // A discarded rendezvous message, pulled with no bytes: the peek or
    // claim that discarded it has completed already.
    cq_.Unreserve();
    return;
  }
  const uint64_t flags = kCompRecv | kCompMsg | (r.tagged ? kCompTagged : 0) |
                        (m.remote_data ? kCompRemoteData : 0) | extra_flags;
  if (m.total <= r.len) {
    // Written in its ring entry, not copied there.
    FillReceived(cq_.Next(), src, r, m, flags, m.total);
    return;
  }
  ErrorCompletion ec;
  FillReceived(ec.op, src, r, m, flags, r.len);
  ec.err = EMSGSIZE;
  ec.olen = m.total - r.len;
  std::snprintf(ec.message, sizeof(ec.message),
                "message of %llu bytes truncated to the %zu-byte receive buffer",
                static_cast<unsigned long long>(m.total), r.len);
  ++counters_.truncated;
  cq_.PushError(ec);
}

void Completions::ReceiveFailed(PeerId src, const RecvRequest& r, const MessageInfo& m,
                                uint64_t len, uint64_t extra_flags, int err, const char* message,
                                bool failure) {
  ErrorCompletion ec;
  ec.op.context = r.context;
  ec.op.flags = kCompRecv | kCompMsg | (r.tagged ? kCompTagged : 0) | extra_flags;
  ec.op.buf = r.buf;
  ec.op.len = len;
  ec.op.tag = m.tag;
  ec.op.source = src;
  ec.err = err;
  std::snprintf(ec.message, sizeof(ec.message), "%s", message);
  if (failure) ++counters_.ops_failed;
  cq_.PushError(ec);
}

void Completions::NamePeer(char* out, size_t size, uint32_t pi, const char* what) const {
  const Address& a = peers_.address(pi);
  std::snprintf(out, size, "peer %s:%u (incarnation 0x%08x) %s", a.ip.ToString().c_str(),
                a.udp_port, a.incarnation, what);
}

}  // namespace bypass::rdm
