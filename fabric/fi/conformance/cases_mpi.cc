// What Open MPI's OFI MTL does with the provider (test/mpi/), as cases
// that need no MPI.
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_tagged.h>

#include "fabric/fi/conformance/conformance.h"

namespace bypass::fi::conformance {
namespace {

// MPI_Finalize: every rank removes every peer from its AV (the MTL's
// del_procs) right after its last message, and stops progressing. b takes
// a's last message (an inject: its completion came at once, its delivery
// is still owed) and removes a at once; then a removes b, which finishes
// that inject first (fi_av_remove waits for buffered sends, av.cc). b must
// acknowledge what it took before forgetting a: before, it never did, and
// a's fi_av_remove waited for the peer timeout (10 s by default: the last
// rank of every Open MPI job waited that long in MPI_Finalize), then
// reported the inject failed on a's EQ.
CONFORMANCE_CASE(av_remove_after_last_message, kShm) {
  fi_info* info = c.Info(c.Hints(FI_TAGGED));
  fid_fabric* fabric = c.Fabric(info);
  fid_domain* da = c.Domain(fabric, info);
  fid_eq* eq = c.Eq(fabric);
  fid_ep* raw = nullptr;
  CHECK_RET(fi_endpoint(da, info, &raw, nullptr), 0);
  c.Own(&raw->fid);
  CHECK_RET(fi_ep_bind(raw, &eq->fid, 0), 0);
  EpOpts with_eq;
  with_eq.opened = raw;
  Pair p;
  p.a = c.OpenEp(da, info, with_eq);
  p.b = c.OpenEp(c.Domain(fabric, info), info);
  p.a_to_b = c.Insert(p.a.av, p.b.name);
  p.b_to_a = c.Insert(p.b.av, p.a.name);

  char* out = c.Buf(8, 'l');
  char* in = c.Buf(8);
  // A round trip first, as MPI_Init's: the peers know each other, so a's
  // inject goes out with no handshake that a would have to progress.
  CHECK_RET(fi_trecv(p.a.ep, in, 8, nullptr, p.a_to_b, 6, 0, nullptr), 0);
  c.Post("fi_tsend", [&] { return fi_tsend(p.b.ep, out, 8, nullptr, p.b_to_a, 6, nullptr); });
  c.Wait(p.a.rx, "a's receive of b's first message");
  c.Wait(p.b.tx, "b's first send");
  int rctx;
  CHECK_RET(fi_trecv(p.b.ep, in, 8, nullptr, p.b_to_a, 7, 0, &rctx), 0);
  c.Post("fi_tinject", [&] { return fi_tinject(p.a.ep, out, 8, p.a_to_b, 7); });
  // Only b progresses now: a sees no ACK before b removes it.
  fi_cq_tagged_entry e{};
  {
    HangGuard guard(kHangSeconds, "b's receive of a's inject");
    ssize_t n;
    while ((n = fi_cq_read(p.b.rx, &e, 1)) == -FI_EAGAIN) {
    }
    CHECK(n == 1, "b's receive: " << Err(n));
  }
  CHECK(e.op_context == &rctx, "b's receive completion has another op_context");
  CHECK_RET(fi_av_remove(p.b.av, &p.b_to_a, 1, 0), 0);
  {
    HangGuard guard(kHangSeconds, "a's fi_av_remove of b");
    CHECK_RET(fi_av_remove(p.a.av, &p.a_to_b, 1, 0), 0);
  }
  fi_eq_err_entry err{};
  const ssize_t n = fi_eq_readerr(eq, &err, 0);
  CHECK(n == -FI_EAGAIN, "a's EQ has an error after fi_av_remove (" << Err(n) << "): "
                             << (n > 0 ? fi_eq_strerror(eq, err.prov_errno, err.err_data, nullptr, 0)
                                       : "")
                             << " (the inject b took was never acknowledged)");
}

}  // namespace
}  // namespace bypass::fi::conformance
