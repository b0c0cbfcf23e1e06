// fi_msg(3) / fi_tagged(3) with a receiver that is not ready (issue 21):
// messages sent before any receive is posted wait for their receives,
// every send completes once, with its context, and the receives take the
// messages in the order sent.
#include <cstdint>
#include <vector>

#include "fabric/fi/conformance/conformance.h"

namespace bypass::fi::conformance {
namespace {

constexpr uint64_t kTag = 0x51;
constexpr int kCount = 2000;

uint64_t Value(int i) { return 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i + 1); }

// Reads what tx has, counting each send's completion by context; false on
// an error entry.
bool DrainSends(fid_cq* tx, const std::vector<int>& ctx, std::vector<int>* done) {
  fi_cq_tagged_entry e[16];
  for (;;) {
    const ssize_t n = fi_cq_read(tx, e, 16);
    if (n == -FI_EAGAIN) return true;
    if (n < 0) return false;
    for (ssize_t k = 0; k < n; ++k) {
      const int* c = static_cast<const int*>(e[k].op_context);
      if (c >= ctx.data() && c < ctx.data() + ctx.size()) ++(*done)[c - ctx.data()];
    }
  }
}

}  // namespace

// 2000 tagged sends to a peer that posts no receive until the sender has
// posted them all or is held back (-FI_EAGAIN for 1000 passes in a row: a
// provider may make the sender wait, never drop or fail a message its
// receiver will take); then the receiver posts one receive at a time: each
// takes the next message in the order sent, with its bytes, and each send
// completes exactly once, without error.
CONFORMANCE_CASE(rnr_unexpected_flood_in_order, kShm) {
  fi_info* h = c.Hints(FI_TAGGED);
  Pair p = c.OpenPair(h);
  static uint64_t out[kCount];
  std::vector<int> ctx(kCount), done(kCount);
  for (int i = 0; i < kCount; ++i) out[i] = Value(i);
  int sent = 0, received = 0, held = 0, rctx = 0;
  bool receiving = false, late = false;
  uint64_t in = 0;
  for (int pass = 0; received < kCount; ++pass) {
    CHECK(pass < 20000000, "hang: " << sent << " sent, " << received << " received");
    if (sent < kCount) {
      const ssize_t r =
          fi_tsend(p.a.ep, &out[sent], sizeof out[sent], nullptr, p.a_to_b, kTag, &ctx[sent]);
      CHECK(r == 0 || r == -FI_EAGAIN, "fi_tsend " << sent << " answered " << Err(r));
      held = r == 0 ? 0 : held + 1;
      if (r == 0) ++sent;
    }
    late = late || sent == kCount || held >= 1000;
    if (late && !receiving) {
      CHECK_RET(fi_trecv(p.b.ep, &in, sizeof in, nullptr, FI_ADDR_UNSPEC, kTag, 0, &rctx), 0);
      receiving = true;
    }
    if (receiving) {
      fi_cq_tagged_entry e;
      const ssize_t n = fi_cq_read(p.b.rx, &e, 1);
      CHECK(n == 1 || n == -FI_EAGAIN, "receive " << received << ": fi_cq_read answered " << Err(n));
      if (n == 1) {
        CHECK(e.op_context == &rctx, "receive " << received << ": the entry's op_context is not its own");
        CHECK(in == Value(received), "receive " << received << " took another message (0x" << std::hex << in << ")");
        ++received;
        receiving = false;
      }
    }
    CHECK(DrainSends(p.a.tx, ctx, &done), "a send failed (error entry)");
    c.Progress();
  }
  for (int pass = 0;; ++pass) {
    CHECK(DrainSends(p.a.tx, ctx, &done), "a send failed (error entry)");
    int complete = 0;
    for (int d : done) {
      CHECK(d <= 1, "a send completed twice");
      complete += d;
    }
    if (complete == kCount) break;
    CHECK(pass < 10000000, "hang: " << kCount - complete << " sends never complete");
    c.Progress();
  }
}

}  // namespace bypass::fi::conformance
