// fi_domain(3) "Resource Management" (resource_mgmt): with FI_RM_ENABLED,
// the default, the provider protects the queues it owns: a full
// completion queue holds completions back instead of overrunning, a full
// transmit or receive queue answers -FI_EAGAIN, and nothing is lost.
// FI_RM_DISABLED is accepted (the man page lets a provider protect
// anyway).
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include <vector>

#include "fabric/fi/conformance/conformance.h"

namespace bypass::fi::conformance {
namespace {

// "Completion queues ... will not be overrun": a receiver whose CQ holds 4
// entries takes 16 messages; every receive completes exactly once, in the
// order posted, once the application reads.
CONFORMANCE_CASE(rm_cq_full_holds_completions, kShm) {
  constexpr int kMessages = 16;
  fi_info* info = c.Info(c.Hints());
  CHECK(info->domain_attr->resource_mgmt == FI_RM_ENABLED,
        "resource_mgmt is " << info->domain_attr->resource_mgmt << ", not FI_RM_ENABLED");
  EpOpts o;
  o.cq_size = 4;
  Pair p = c.PairFrom(info, o);
  char* in = c.Buf(kMessages * 8);
  char* out = c.Buf(8, 'm');
  static int ctx[kMessages];
  for (int i = 0; i < kMessages; ++i) {
    CHECK_RET(fi_recv(p.b.ep, in + i * 8, 8, nullptr, FI_ADDR_UNSPEC, &ctx[i]), 0);
  }
  for (int i = 0; i < kMessages; ++i) {
    c.Post("fi_send", [&] { return fi_send(p.a.ep, out, 8, nullptr, p.a_to_b, nullptr); });
    const Completion s = c.Wait(p.a.tx, "a send");
    CHECK(!s.error, "send " << i << " failed: " << Err(-s.err.err));
  }
  for (int i = 0; i < kMessages; ++i) {
    const Completion r = c.Wait(p.b.rx, "a receive");
    CHECK(!r.error, "receive " << i << " failed: " << Err(-r.err.err));
    CHECK(r.entry.op_context == &ctx[i], "receive " << i << " completed out of order or twice");
  }
  Completion extra;
  CHECK(!c.Poll(p.b.rx, &extra, 100), "a 17th completion for 16 messages");
}

// "Transmit contexts ... -FI_EAGAIN" when full: sends posted with no
// progress at all end in -FI_EAGAIN, no later than tx_attr->size; every
// send accepted then completes once.
CONFORMANCE_CASE(rm_tx_queue_full_eagain, kShm) {
  Pair p = c.OpenPair(c.Hints());
  const size_t size = p.a.info->tx_attr->size;
  CHECK(size > 0 && size <= 1u << 16, "tx_attr->size is " << size);
  char* out = c.Buf(8, 't');
  size_t posted = 0;
  ssize_t r = 0;
  while (posted <= size && (r = fi_send(p.a.ep, out, 8, nullptr, p.a_to_b, nullptr)) == 0) {
    ++posted;
  }
  CHECK(r == -FI_EAGAIN, "after " << posted << " sends, fi_send answers " << Err(r));
  // (None accepted is allowed: a provider may need progress first.)
  CHECK(posted <= size, posted << " sends accepted for a queue of " << size);
  char* in = c.Buf(8);
  for (size_t i = 0; i < posted; ++i) {
    c.Post("fi_recv", [&] { return fi_recv(p.b.ep, in, 8, nullptr, FI_ADDR_UNSPEC, nullptr); });
    const Completion s = c.Wait(p.a.tx, "a send");
    CHECK(!s.error, "send " << i << " failed: " << Err(-s.err.err));
    CHECK(!c.Wait(p.b.rx, "a receive").error, "receive " << i << " failed");
  }
}

// A full receive queue: rx_attr->size receives are taken, one more answers
// -FI_EAGAIN, and after one completes there is room again.
CONFORMANCE_CASE(rm_rx_queue_full_eagain, kShm) {
  Pair p = c.OpenPair(c.Hints());
  const size_t size = p.b.info->rx_attr->size;
  CHECK(size > 0 && size <= 1u << 16, "rx_attr->size is " << size);
  char* in = c.Buf(8);
  size_t posted = 0;
  ssize_t r = 0;
  while (posted <= size && (r = fi_recv(p.b.ep, in, 8, nullptr, FI_ADDR_UNSPEC, nullptr)) == 0) {
    ++posted;
  }
  CHECK(posted == size && r == -FI_EAGAIN,
        posted << " receives taken for a queue of " << size << ", then " << Err(r));
  char* out = c.Buf(8, 'r');
  c.Post("fi_send", [&] { return fi_send(p.a.ep, out, 8, nullptr, p.a_to_b, nullptr); });
  CHECK(!c.Wait(p.b.rx, "a receive").error, "the receive failed");
  CHECK_RET(fi_recv(p.b.ep, in, 8, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
}

// FI_RM_DISABLED asked: the domain opens and messages flow (fi_domain(3):
// the provider may still protect its resources).
CONFORMANCE_CASE(rm_disabled_accepted, kShm) {
  fi_info* h = c.Hints();
  h->domain_attr->resource_mgmt = FI_RM_DISABLED;
  Pair p = c.OpenPair(h);
  char* in = c.Buf(8);
  char* out = c.Buf(8, 'd');
  CHECK_RET(fi_recv(p.b.ep, in, 8, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  c.Post("fi_send", [&] { return fi_send(p.a.ep, out, 8, nullptr, p.a_to_b, nullptr); });
  CHECK(!c.Wait(p.a.tx, "the send").error, "the send failed");
  CHECK(!c.Wait(p.b.rx, "the receive").error, "the receive failed");
}

}  // namespace
}  // namespace bypass::fi::conformance
