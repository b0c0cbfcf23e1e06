#include "fabric/rdm/config.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace bypass::rdm {
namespace {

// "EndpointConfig.window_packets = 0: must be 1..256".
absl::Status Bad(const char* config, const char* field, uint64_t v, const char* want) {
  return absl::InvalidArgumentError(absl::StrCat(config, ".", field, " = ", v, ": must be ", want));
}

}  // namespace

absl::Status ValidateConfig(const EndpointConfig& c) {
  const auto bad = [](const char* field, uint64_t v, const char* want) {
    return Bad("EndpointConfig", field, v, want);
  };
  if (c.udp_port == 0) return bad("udp_port", 0, "a non-zero UDP port");
  if (c.incarnation && *c.incarnation == 0) return bad("incarnation", 0, "non-zero");
  if (c.max_peers == 0 || c.max_peers > (1u << 20)) return bad("max_peers", c.max_peers, "1..2^20");
  if (c.max_send_ops == 0 || c.max_send_ops > (1u << 20)) {
    return bad("max_send_ops", c.max_send_ops, "1..2^20");
  }
  if (c.max_posted_recvs == 0 || c.max_posted_recvs > (1u << 20)) {
    return bad("max_posted_recvs", c.max_posted_recvs, "1..2^20");
  }
  if (c.inject_size > 65536) return bad("inject_size", c.inject_size, "at most 65536");
  if (c.max_msg_size == 0 || c.max_msg_size > (uint64_t{1} << 32)) {
    return bad("max_msg_size", c.max_msg_size, "1..4 GiB");
  }
  if (c.max_regions == 0 || c.max_regions > (1u << 20)) {
    return bad("max_regions", c.max_regions, "1..2^20");
  }
  if (c.max_rma_ops < 2 || c.max_rma_ops > (1u << 20)) {
    // Pulls may take all but a quarter (at least one) of them: PROTOCOL.md.
    return bad("max_rma_ops", c.max_rma_ops, "2..2^20 (one at least is kept for answers)");
  }
  if (c.window_packets == 0 || c.window_packets > kMaxWindowPackets) {
    return bad("window_packets", c.window_packets, "1..256 (the SACK bitmap)");
  }
  if (c.max_unexpected_msgs == 0) return bad("max_unexpected_msgs", 0, "at least 1");
  if (c.unexpected_chunk_bytes < 64 || c.unexpected_chunk_bytes > (1u << 24)) {
    return bad("unexpected_chunk_bytes", c.unexpected_chunk_bytes, "64..16 MiB");
  }
  if (c.unexpected_bytes / c.unexpected_chunk_bytes > (1u << 24)) {
    return bad("unexpected_bytes", c.unexpected_bytes, "at most 2^24 chunks");
  }
  if (c.ack_delay_ns == 0) return bad("ack_delay_ns", 0, "at least 1");
  if (c.ack_every_packets == 0) return bad("ack_every_packets", 0, "at least 1");
  if (c.fast_retransmit_threshold == 0) return bad("fast_retransmit_threshold", 0, "at least 1");
  if (c.cc_initial_window < 2 || c.cc_initial_window > kMaxWindowPackets) {
    return bad("cc_initial_window", c.cc_initial_window, "2..256");
  }
  if (c.rto_min_ns == 0 || c.rto_min_ns > c.rto_max_ns) {
    return bad("rto_min_ns", c.rto_min_ns, "non-zero and at most rto_max_ns");
  }
  if (c.rto_initial_ns < c.rto_min_ns || c.rto_initial_ns > c.rto_max_ns) {
    return bad("rto_initial_ns", c.rto_initial_ns, "within [rto_min_ns, rto_max_ns]");
  }
  if (c.rnr_retry_min_ns == 0 || c.rnr_retry_min_ns > c.rnr_retry_max_ns) {
    return bad("rnr_retry_min_ns", c.rnr_retry_min_ns, "non-zero and at most rnr_retry_max_ns");
  }
  if (c.rnr_give_up_ns < c.rnr_retry_min_ns) {
    return bad("rnr_give_up_ns", c.rnr_give_up_ns, "at least rnr_retry_min_ns");
  }
  if (c.peer_timeout_ns <= c.rto_min_ns || c.peer_timeout_ns <= c.rnr_retry_max_ns) {
    return bad("peer_timeout_ns", c.peer_timeout_ns,
               "longer than rto_min_ns and rnr_retry_max_ns (RNR retries keep a peer alive)");
  }
  if (c.rx_burst == 0 || c.rx_burst > 256) return bad("rx_burst", c.rx_burst, "1..256");
  if (c.tx_burst == 0 || c.tx_burst > 256) return bad("tx_burst", c.tx_burst, "1..256");
  if (c.tx_bursts_per_pass == 0) return bad("tx_bursts_per_pass", 0, "at least 1");
  if (c.idle_passes_per_clock_read == 0) return bad("idle_passes_per_clock_read", 0, "at least 1");
  return absl::OkStatus();
}

absl::Status ValidateConfig(const DatagramConfig& c) {
  const auto bad = [](const char* field, uint64_t v, const char* want) {
    return Bad("DatagramConfig", field, v, want);
  };
  if (c.udp_port == 0) return bad("udp_port", 0, "a non-zero UDP port");
  if (c.max_peers == 0 || c.max_peers > (1u << 20)) return bad("max_peers", c.max_peers, "1..2^20");
  if (c.max_posted_recvs == 0 || c.max_posted_recvs > (1u << 20)) {
    return bad("max_posted_recvs", c.max_posted_recvs, "1..2^20");
  }
  if (c.max_unread_sends == 0 || c.max_unread_sends > (1u << 20)) {
    return bad("max_unread_sends", c.max_unread_sends, "1..2^20");
  }
  if (c.rx_burst == 0 || c.rx_burst > 256) return bad("rx_burst", c.rx_burst, "1..256");
  if (c.dscp > 63) return bad("dscp", c.dscp, "0..63");
  return absl::OkStatus();
}

}  // namespace bypass::rdm
