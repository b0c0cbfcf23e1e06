#include "fabric/rdm/types.h"

#include <sodium.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace bypass::rdm {

uint64_t RandomRegionKey() {
  static const int init = sodium_init();  // idempotent; makes randombytes thread-safe
  if (init < 0) {
    std::fprintf(stderr, "rdm: libsodium cannot start (sodium_init failed); no region keys\n");
    std::abort();
  }
  uint64_t key = 0;
  while (key == 0) randombytes_buf(&key, sizeof(key));
  return key;
}

std::string Address::ToString() const {
  return absl::StrFormat("%s:%u/%s#0x%08x", ip.ToString(), udp_port, mac.ToString(), incarnation);
}

const char* ResultName(Result r) {
  switch (r) {
    case Result::kOk:
      return "ok";
    case Result::kAgain:
      return "EAGAIN";
    case Result::kInvalid:
      return "EINVAL";
    case Result::kTooLong:
      return "EMSGSIZE";
  }
  return "?";
}

std::string Counters::ToString() const {
  return absl::StrCat(
      "tx=", tx_packets, " (data ", tx_data_packets, ", bundled msgs ", tx_bundled_msgs, ", acks ", tx_acks, ") rx=", rx_packets,
      " (data ", rx_data_packets, ", unchecked ", rx_unchecked, ") retx fast=", retransmits_fast,
      " timeout=", retransmits_timeout, " rto=", rto_expirations, " (spurious ", rto_spurious, ")",
      " tlp=", tail_probes, " dup=", duplicates_dropped,
      " oow=", out_of_window_dropped, " reorder_full=", reorder_buffer_full,
      " malformed=", malformed_dropped, " checksum=", checksum_dropped,
      " not_for_us=", not_for_us_dropped, " auth=", auth_dropped, " stale=", stale_dropped,
      " proto_err=", protocol_errors, " hs_auth_failed=", handshake_auth_failed,
      " hs_unproven=", handshake_unproven, " cookies sent=", cookies_sent,
      " dropped=", cookies_dropped, " rejected=", cookie_rejected,
      " resets_probed=", resets_probed, " learned_evicted=", learned_evicted, " window_stalls=", window_stalls,
      " tx_rings_allocated=", tx_rings_allocated,
      " cwnd_stalls=", cwnd_stalls, " cwnd_reductions=", cwnd_reductions,
      " pacing_waits=", pacing_waits, " rnr sent=", rnr_sent,
      " recv=", rnr_received, " give_ups=", rnr_give_ups, " tx_no_buffer=", tx_no_buffer,
      " tx_ring_full=", tx_ring_full,
      " handshakes=", handshakes, " restarts=", peer_restarts, " resets=", peer_resets,
      " timeouts=", peer_timeouts, " dead=", peers_dead,
      " liveness_checks=", liveness_checks, " resets_sent=", resets_sent, " ops_failed=", ops_failed,
      " unexpected=", unexpected_msgs, " depth=", unexpected_depth,
      " max_depth=", unexpected_depth_max, " truncated=", truncated,
      " rma_ops=", rma_ops, " rma_errors=", rma_errors, " rma_refused=", rma_refused,
      " rma_served=", rma_served, " rma_no_slot=", rma_no_slot, " atomic_ops=", atomic_ops,
      " atomic_served=", atomic_served,
      " rendezvous sent=", rendezvous_sent, " pulled=", rendezvous_pulled,
      " lost=", rendezvous_lost, " in_place=", rendezvous_copied_in_place,
      " in_place_failed=", rendezvous_in_place_failed, " read_by_peer=", rendezvous_read_by_peer,
      " in_place_vouched=", rendezvous_in_place_vouched,
      " in_place_reads=", rendezvous_in_place_reads);
}

}  // namespace bypass::rdm
