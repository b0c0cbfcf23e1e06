// The /bypass/ commands: engine snapshots as telemetry dicts.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "driver/dpdk/eal.h"
#include "driver/dpdk/telemetry.h"
#include "fabric/rdm/rdm.h"
#include "fabric/stats/stats.h"

namespace bypass::stats {
namespace {

using driver::dpdk::TelemetryDict;

// Every field of rdm::Counters, in its order (the static_assert below
// catches a field added there and not here).
constexpr CounterField kCounterFields[] = {
    {"tx_packets", &rdm::Counters::tx_packets},
    {"tx_data_packets", &rdm::Counters::tx_data_packets},
    {"tx_bundled_msgs", &rdm::Counters::tx_bundled_msgs},
    {"tx_acks", &rdm::Counters::tx_acks},
    {"rx_packets", &rdm::Counters::rx_packets},
    {"rx_data_packets", &rdm::Counters::rx_data_packets},
    {"rx_unchecked", &rdm::Counters::rx_unchecked},
    {"retransmits_fast", &rdm::Counters::retransmits_fast},
    {"retransmits_timeout", &rdm::Counters::retransmits_timeout},
    {"rto_expirations", &rdm::Counters::rto_expirations},
    {"rto_spurious", &rdm::Counters::rto_spurious},
    {"tail_probes", &rdm::Counters::tail_probes},
    {"duplicates_dropped", &rdm::Counters::duplicates_dropped},
    {"out_of_window_dropped", &rdm::Counters::out_of_window_dropped},
    {"reorder_buffer_full", &rdm::Counters::reorder_buffer_full},
    {"out_of_order_held", &rdm::Counters::out_of_order_held},
    {"malformed_dropped", &rdm::Counters::malformed_dropped},
    {"checksum_dropped", &rdm::Counters::checksum_dropped},
    {"not_for_us_dropped", &rdm::Counters::not_for_us_dropped},
    {"auth_dropped", &rdm::Counters::auth_dropped},
    {"stale_dropped", &rdm::Counters::stale_dropped},
    {"protocol_errors", &rdm::Counters::protocol_errors},
    {"peer_table_full", &rdm::Counters::peer_table_full},
    {"handshake_auth_failed", &rdm::Counters::handshake_auth_failed},
    {"handshake_unproven", &rdm::Counters::handshake_unproven},
    {"cookies_sent", &rdm::Counters::cookies_sent},
    {"cookies_dropped", &rdm::Counters::cookies_dropped},
    {"cookie_rejected", &rdm::Counters::cookie_rejected},
    {"resets_probed", &rdm::Counters::resets_probed},
    {"learned_evicted", &rdm::Counters::learned_evicted},
    {"window_stalls", &rdm::Counters::window_stalls},
    {"tx_rings_allocated", &rdm::Counters::tx_rings_allocated},
    {"cwnd_stalls", &rdm::Counters::cwnd_stalls},
    {"cwnd_reductions", &rdm::Counters::cwnd_reductions},
    {"pacing_waits", &rdm::Counters::pacing_waits},
    {"rnr_sent", &rdm::Counters::rnr_sent},
    {"rnr_received", &rdm::Counters::rnr_received},
    {"rnr_give_ups", &rdm::Counters::rnr_give_ups},
    {"tx_no_buffer", &rdm::Counters::tx_no_buffer},
    {"tx_ring_full", &rdm::Counters::tx_ring_full},
    {"handshakes", &rdm::Counters::handshakes},
    {"peer_restarts", &rdm::Counters::peer_restarts},
    {"peer_resets", &rdm::Counters::peer_resets},
    {"peer_timeouts", &rdm::Counters::peer_timeouts},
    {"peers_dead", &rdm::Counters::peers_dead},
    {"liveness_checks", &rdm::Counters::liveness_checks},
    {"resets_sent", &rdm::Counters::resets_sent},
    {"ops_failed", &rdm::Counters::ops_failed},
    {"unexpected_msgs", &rdm::Counters::unexpected_msgs},
    {"unexpected_depth", &rdm::Counters::unexpected_depth},
    {"unexpected_depth_max", &rdm::Counters::unexpected_depth_max},
    {"unexpected_bytes", &rdm::Counters::unexpected_bytes},
    {"truncated", &rdm::Counters::truncated},
    {"inject_errors_dropped", &rdm::Counters::inject_errors_dropped},
    {"rma_ops", &rdm::Counters::rma_ops},
    {"rma_errors", &rdm::Counters::rma_errors},
    {"rma_refused", &rdm::Counters::rma_refused},
    {"rma_served", &rdm::Counters::rma_served},
    {"rma_no_slot", &rdm::Counters::rma_no_slot},
    {"atomic_ops", &rdm::Counters::atomic_ops},
    {"atomic_served", &rdm::Counters::atomic_served},
    {"rendezvous_sent", &rdm::Counters::rendezvous_sent},
    {"rendezvous_pulled", &rdm::Counters::rendezvous_pulled},
    {"rendezvous_lost", &rdm::Counters::rendezvous_lost},
    {"rendezvous_copied_in_place", &rdm::Counters::rendezvous_copied_in_place},
    {"rendezvous_in_place_failed", &rdm::Counters::rendezvous_in_place_failed},
    {"rendezvous_read_by_peer", &rdm::Counters::rendezvous_read_by_peer},
    {"rendezvous_in_place_vouched", &rdm::Counters::rendezvous_in_place_vouched},
    {"rendezvous_in_place_reads", &rdm::Counters::rendezvous_in_place_reads},
};
static_assert(sizeof(rdm::Counters) == sizeof(kCounterFields) / sizeof(CounterField) * 8,
              "a field of rdm::Counters is missing from kCounterFields");

// Every field of rdm::DatagramCounters, in its order.
constexpr DatagramField kDatagramFields[] = {
    {"sent", &rdm::DatagramCounters::sent},
    {"received", &rdm::DatagramCounters::received},
    {"truncated", &rdm::DatagramCounters::truncated},
    {"no_receive_dropped", &rdm::DatagramCounters::no_receive_dropped},
    {"not_for_us_dropped", &rdm::DatagramCounters::not_for_us_dropped},
    {"tx_no_buffer", &rdm::DatagramCounters::tx_no_buffer},
    {"tx_ring_full", &rdm::DatagramCounters::tx_ring_full},
};
static_assert(sizeof(rdm::DatagramCounters) == sizeof(kDatagramFields) / sizeof(DatagramField) * 8,
              "a field of rdm::DatagramCounters is missing from kDatagramFields");

// Every field of driver::QueueStats, in its order.
constexpr QueueField kQueueFields[] = {
    {"rx_packets", &driver::QueueStats::rx_packets},
    {"rx_bytes", &driver::QueueStats::rx_bytes},
    {"tx_packets", &driver::QueueStats::tx_packets},
    {"tx_bytes", &driver::QueueStats::tx_bytes},
    {"tx_ring_full", &driver::QueueStats::tx_ring_full},
    {"rx_dropped", &driver::QueueStats::rx_dropped},
    {"alloc_failures", &driver::QueueStats::alloc_failures},
};
static_assert(sizeof(driver::QueueStats) == sizeof(kQueueFields) / sizeof(QueueField) * 8,
              "a field of driver::QueueStats is missing from kQueueFields");

// A device answer's entries beyond the fixed ones stop here: DPDK 22.11's
// dicts hold 256 (RTE_TEL_MAX_DICT_ENTRIES).
constexpr size_t kMaxDictEntries = 256;

// A few sums named as the issue names them, beside the fields.
void AddDerived(const rdm::Counters& c, TelemetryDict* d) {
  d->Add("retransmits", c.retransmits_fast + c.retransmits_timeout);
  d->Add("handshake_failures", c.handshake_auth_failed + c.handshake_unproven + c.cookie_rejected);
}

void AddCounters(const rdm::Counters& c, TelemetryDict* d) {
  for (const CounterField& f : kCounterFields) d->Add(f.name, c.*f.member);
  AddDerived(c, d);
}

absl::StatusOr<rdm::EndpointSnapshot> One(std::string_view params) {
  uint32_t id = 0;
  if (!absl::SimpleAtoi(absl::string_view(params.data(), params.size()), &id)) {
    return absl::InvalidArgumentError("expects an engine id: /bypass/engines lists them");
  }
  const uint32_t ids[] = {id};
  std::vector<rdm::EndpointSnapshot> s = rdm::SnapshotEndpoints(ids, kWaitNs);
  if (s.empty()) return absl::NotFoundError(absl::StrCat("no engine ", id));
  return std::move(s[0]);
}

std::vector<rdm::EndpointSnapshot> All() {
  return rdm::SnapshotEndpoints(rdm::ListEndpoints(), kWaitNs);
}

void AddDatagramCounters(const rdm::DatagramCounters& c, TelemetryDict* d) {
  for (const DatagramField& f : kDatagramFields) d->Add(absl::StrCat("dgram_", f.name), c.*f.member);
}

void AddPortCounters(const rdm::EndpointSnapshot& s, TelemetryDict* d) {
  d->Add("port_id", s.port_id);
  d->Add("port_rx_packets", s.port.rx_packets);
  d->Add("port_no_endpoint", s.port.no_endpoint);
  d->Add("port_inbox_full", s.port.inbox_full);
  d->Add("port_group_copies", s.port.group_copies);
}

// /bypass/engines: the ids (RDM endpoints, then datagram endpoints), and
// every counter summed over them.
absl::Status Engines(std::string_view, TelemetryDict* d) {
  std::vector<uint64_t> listed, datagram;
  rdm::Counters total;
  rdm::DatagramCounters dgram_total;
  uint64_t peers = 0;
  for (const rdm::EndpointSnapshot& s : All()) {
    if (s.datagram) {
      datagram.push_back(s.id);
      for (const DatagramField& f : kDatagramFields) {
        dgram_total.*f.member += s.datagram_counters.*f.member;
      }
      continue;
    }
    listed.push_back(s.id);
    for (const CounterField& f : kCounterFields) total.*f.member += s.counters.*f.member;
    peers += s.peers.size();
  }
  d->Add("engines", std::move(listed));
  d->Add("datagram_endpoints", std::move(datagram));
  d->Add("peers", peers);
  AddCounters(total, d);
  AddDatagramCounters(dgram_total, d);
  return absl::OkStatus();
}

// /bypass/engine,<id>: its counters, its port's, and how fresh they are.
absl::Status Engine(std::string_view params, TelemetryDict* d) {
  absl::StatusOr<rdm::EndpointSnapshot> s = One(params);
  if (!s.ok()) return s.status();
  d->Add("id", s->id);
  d->Add("type", s->datagram ? "dgram" : "rdm");
  d->Add("address", s->address.ToString());
  d->Add("fresh", uint64_t{s->fresh});
  d->Add("published", s->published);
  if (s->datagram) {
    d->Add("peers", s->datagram_peers.size());
    for (const DatagramField& f : kDatagramFields) d->Add(f.name, s->datagram_counters.*f.member);
  } else {
    d->Add("peers", s->peers.size());
    AddCounters(s->counters, d);
  }
  AddPortCounters(*s, d);
  return absl::OkStatus();
}

// /bypass/peers,<id>: a table, one array per column, one entry per peer.
absl::Status Peers(std::string_view params, TelemetryDict* d) {
  absl::StatusOr<rdm::EndpointSnapshot> s = One(params);
  if (!s.ok()) return s.status();
  std::vector<std::string> address;
  struct Column {
    const char* name;
    uint64_t (*get)(const rdm::PeerSnapshot&);
  };
  static constexpr Column kColumns[] = {
      {"id", [](const rdm::PeerSnapshot& p) -> uint64_t { return p.id.value; }},
      {"established", [](const rdm::PeerSnapshot& p) -> uint64_t { return p.stats.established; }},
      {"tx_packets", [](const rdm::PeerSnapshot& p) { return p.counters.tx_packets; }},
      {"rx_packets", [](const rdm::PeerSnapshot& p) { return p.counters.rx_packets; }},
      {"retransmits", [](const rdm::PeerSnapshot& p) -> uint64_t { return p.counters.retransmits; }},
      {"duplicates", [](const rdm::PeerSnapshot& p) -> uint64_t { return p.counters.duplicates; }},
      {"out_of_order",
       [](const rdm::PeerSnapshot& p) -> uint64_t { return p.counters.out_of_order; }},
      {"rnr_sent", [](const rdm::PeerSnapshot& p) -> uint64_t { return p.counters.rnr_sent; }},
      {"rnr_received",
       [](const rdm::PeerSnapshot& p) -> uint64_t { return p.counters.rnr_received; }},
      {"credit_stalls",
       [](const rdm::PeerSnapshot& p) -> uint64_t { return p.counters.credit_stalls; }},
      {"handshake_failures",
       [](const rdm::PeerSnapshot& p) -> uint64_t { return p.counters.handshake_failures; }},
      {"srtt_ns", [](const rdm::PeerSnapshot& p) { return p.stats.srtt_ns; }},
      {"rttvar_ns", [](const rdm::PeerSnapshot& p) { return p.stats.rttvar_ns; }},
      {"rto_ns", [](const rdm::PeerSnapshot& p) { return p.stats.rto_ns; }},
      {"inflight", [](const rdm::PeerSnapshot& p) -> uint64_t { return p.stats.inflight; }},
      {"send_window", [](const rdm::PeerSnapshot& p) -> uint64_t { return p.stats.send_window; }},
      {"cwnd", [](const rdm::PeerSnapshot& p) -> uint64_t { return p.stats.cwnd; }},
      {"queued_ops", [](const rdm::PeerSnapshot& p) -> uint64_t { return p.stats.queued_ops; }},
      {"held_packets",
       [](const rdm::PeerSnapshot& p) -> uint64_t { return p.stats.held_packets; }},
  };
  d->Add("engine", s->id);
  d->Add("fresh", uint64_t{s->fresh});
  if (s->datagram) {  // datagram peers are addresses only
    for (const rdm::Address& a : s->datagram_peers) address.push_back(a.ToString());
    d->Add("address", std::move(address));
    return absl::OkStatus();
  }
  for (const rdm::PeerSnapshot& p : s->peers) address.push_back(p.address.ToString());
  d->Add("address", std::move(address));
  for (const Column& c : kColumns) {
    std::vector<uint64_t> v;
    v.reserve(s->peers.size());
    for (const rdm::PeerSnapshot& p : s->peers) v.push_back(c.get(p));
    d->Add(c.name, std::move(v));
  }
  return absl::OkStatus();
}

// The endpoints' snapshots grouped by Port (one device queue each), in
// port id order; each port's first snapshot stands for it (they are one
// thread's: any fresh one is as recent).
std::map<uint32_t, std::vector<rdm::EndpointSnapshot>> ByPort() {
  std::map<uint32_t, std::vector<rdm::EndpointSnapshot>> out;
  for (rdm::EndpointSnapshot& s : All()) out[s.port_id].push_back(std::move(s));
  return out;
}

// /bypass/devices: a table of the device queues the endpoints poll.
absl::Status Devices(std::string_view, TelemetryDict* d) {
  std::vector<uint64_t> id, queue, endpoints, rx, tx;
  std::vector<std::string> uri;
  for (const auto& [port, snaps] : ByPort()) {
    const rdm::QueueSnapshot& q = snaps[0].device;
    id.push_back(port);
    uri.push_back(q.uri.substr(0, 120));  // telemetry strings are under 128 bytes
    queue.push_back(q.queue);
    endpoints.push_back(snaps.size());
    rx.push_back(q.stats.rx_packets);
    tx.push_back(q.stats.tx_packets);
  }
  d->Add("id", std::move(id));
  d->Add("uri", std::move(uri));
  d->Add("queue", std::move(queue));
  d->Add("endpoints", std::move(endpoints));
  d->Add("rx_packets", std::move(rx));
  d->Add("tx_packets", std::move(tx));
  return absl::OkStatus();
}

// /bypass/device,<port id>: one device queue's counters, its backend's
// (for a DPDK port, the port's rte_eth_stats and xstats) and its Port's.
absl::Status Device(std::string_view params, TelemetryDict* d) {
  uint32_t id = 0;
  if (!absl::SimpleAtoi(absl::string_view(params.data(), params.size()), &id)) {
    return absl::InvalidArgumentError("expects a device id: /bypass/devices lists them");
  }
  std::map<uint32_t, std::vector<rdm::EndpointSnapshot>> ports = ByPort();
  auto it = ports.find(id);
  if (it == ports.end()) return absl::NotFoundError(absl::StrCat("no device ", id));
  const rdm::EndpointSnapshot& s = it->second[0];
  std::vector<uint64_t> endpoints;
  for (const rdm::EndpointSnapshot& e : it->second) endpoints.push_back(e.id);
  d->Add("id", id);
  d->Add("uri", s.device.uri.substr(0, 120));
  d->Add("queue", s.device.queue);
  d->Add("fresh", uint64_t{s.fresh});
  d->Add("endpoints", std::move(endpoints));
  for (const QueueField& f : kQueueFields) d->Add(f.name, s.device.stats.*f.member);
  AddPortCounters(s, d);
  uint64_t left_out = 0;
  for (const driver::NamedCounter& c : s.device.counters) {
    if (d->entries().size() + 1 >= kMaxDictEntries) {
      ++left_out;
    } else {
      d->Add(c.name, c.value);
    }
  }
  d->Add("counters_left_out", left_out);
  return absl::OkStatus();
}

struct Command {
  const char* name;
  const char* help;
  absl::Status (*fn)(std::string_view, TelemetryDict*);
};
constexpr Command kCommands[] = {
    {"/bypass/engines", "bypass: the engine ids of this process and their counters summed",
     Engines},
    {"/bypass/engine", "bypass: one engine's and its port's counters. Parameter: engine id",
     Engine},
    {"/bypass/peers",
     "bypass: one engine's peers, an array per counter, one entry per peer. Parameter: engine id",
     Peers},
    {"/bypass/devices", "bypass: the device queues the engines poll, a table", Devices},
    {"/bypass/device",
     "bypass: one device queue's counters, its backend's and its port's. Parameter: device id",
     Device},
};

// Registers the commands once; the status of that.
const absl::Status& Registered() {
  static const absl::Status* status = [] {
    for (const Command& c : kCommands) {
      absl::Status s = driver::dpdk::RegisterTelemetryCommand(c.name, c.help, c.fn);
      if (!s.ok()) return new absl::Status(s);
    }
    return new absl::Status();
  }();
  return *status;
}

}  // namespace

absl::Span<const CounterField> CounterFields() { return kCounterFields; }
absl::Span<const DatagramField> DatagramFields() { return kDatagramFields; }
absl::Span<const QueueField> QueueFields() { return kQueueFields; }

std::string Answer(const std::string& cmd) {
  const absl::Status& registered = Registered();
  const size_t comma = cmd.find(',');
  const std::string name = cmd.substr(0, comma);
  const std::string params = comma == std::string::npos ? "" : cmd.substr(comma + 1);
  std::string json;
  if (!registered.ok() || !driver::dpdk::AnswerTelemetryCommand(name, params, &json).ok()) {
    return absl::StrCat("{\"", name, "\": null}");
  }
  return json;
}

absl::Status Enable() {
  static std::mutex mu;
  static std::unique_ptr<Server> server;  // closed and unlinked at exit
  std::lock_guard<std::mutex> lock(mu);
  if (const absl::Status& registered = Registered(); !registered.ok()) return registered;
  if (server == nullptr && driver::dpdk::StatsRequested()) {
    absl::StatusOr<std::unique_ptr<Server>> s = Server::Start(SocketPath(getpid()));
    if (!s.ok()) return s.status();
    server = *std::move(s);
  }
  return absl::OkStatus();
}

}  // namespace bypass::stats
