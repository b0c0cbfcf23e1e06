// The stages of one endpoint's engine (README.md), built and wired in
// dependency order: the Engine runs them, and the stages' unit tests build
// them alone (stage_rig.h).
#ifndef BYPASS_FABRIC_RDM_STAGES_H_
#define BYPASS_FABRIC_RDM_STAGES_H_

#include <cstdint>

#include "fabric/rdm/completions.h"
#include "fabric/rdm/config.h"
#include "fabric/rdm/context.h"
#include "fabric/rdm/messaging.h"
#include "fabric/rdm/ops.h"
#include "fabric/rdm/reliability.h"
#include "fabric/rdm/rma.h"
#include "fabric/rdm/session.h"

namespace bypass::rdm {

// Every stage of one endpoint, each holding references to those below it.
struct Stages {
  // REQUIRES: ring_size a power of two at least config.window_packets.
  // shared: the receive queue shared with other endpoints, or null.
  Stages(const EndpointConfig& config, const DeviceParams& dev, uint32_t max_datagram,
         uint32_t ring_size, uint32_t held_budget, uint64_t seed, uint32_t incarnation,
         SharedMatch* shared = nullptr)
      : ctx(config, dev, max_datagram, incarnation, seed, held_budget + kReleaseSlack),
        session(ctx, config.max_peers),
        completions(ctx.counters, session.peers(), config.max_send_ops + config.max_posted_recvs,
                    config.max_send_ops),
        ops(ctx, config.max_send_ops, config.max_rma_ops, config.inject_size),
        reliability(ctx, session, ops, completions, ring_size, held_budget),
        messaging(ctx, session, ops, completions, reliability, shared),
        rma(ctx, session, ops, completions, reliability) {}
  Stages(const Stages&) = delete;
  Stages& operator=(const Stages&) = delete;

  // A new peer in slot pi (Session made it): every stage's state for it
  // starts fresh.
  void AddPeer(uint32_t pi) {
    ctx.ResetPeerCounts(pi);
    reliability.AddPeer(pi);
    messaging.AddPeer(pi);
    rma.AddPeer(pi);
  }

  // Room in the released packets beyond the held budget: the largest batch
  // the engine takes in one step.
  static constexpr uint32_t kReleaseSlack = 1024;

  Context ctx;
  Session session;
  Completions completions;
  OpTable ops;
  Reliability reliability;
  Messaging messaging;
  Rma rma;
};

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_STAGES_H_
