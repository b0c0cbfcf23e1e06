#include "tools/pingpong/rdm.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "driver/clock.h"
#include "driver/fault/fault_device.h"
#include "fabric/rdm/rdm.h"
#include "fabric/stats/stats.h"
#include "tools/ping_wire.h"
#include "tools/pingpong/machine.h"
#include "tools/pingpong/slots.h"

namespace bypass::tools {
namespace {

// The device (fault-wrapped if asked), its port and one endpoint on it.
struct Side {
  std::unique_ptr<driver::Device> dev;
  driver::fault::FaultDevice* fault = nullptr;  // dev, if wrapped
  std::unique_ptr<rdm::Port> port;
  std::unique_ptr<rdm::Endpoint> ep;

  ~Side() {
    ep.reset();  // detaches from the port and frees its packets first
    port.reset();
  }
};

// The largest message either side sends.
size_t MessageBytes(const PingOptions& o) { return std::max(PingPayloadBytes(o.MaxSize()), kCtlBytes); }

absl::StatusOr<std::unique_ptr<Side>> Open(std::unique_ptr<driver::Device> dev,
                                           const PingOptions& o, const RdmPingOptions& r,
                                           uint32_t posted) {
  // The engine's counters while the run goes on: bypass-stat (BYPASS_STATS=1)
  // or dpdk-telemetry.py on a DPDK device (fabric/stats/README.md).
  if (absl::Status st = stats::Enable(); !st.ok()) {
    std::fprintf(stderr, "pingpong: counters not served: %s\n", std::string(st.message()).c_str());
  }
  auto side = std::make_unique<Side>();
  if (r.loss > 0 || r.dup > 0 || r.reorder > 0) {
    driver::fault::FaultOptions f;
    f.drop = r.loss;
    f.dup = r.dup;
    f.reorder = r.reorder;
    f.seed = r.fault_seed;
    auto wrapped = driver::fault::FaultDevice::Create(std::move(dev), f);
    if (!wrapped.ok()) return wrapped.status();
    side->fault = wrapped->get();
    side->dev = *std::move(wrapped);
  } else {
    side->dev = std::move(dev);
  }
  side->port = std::make_unique<rdm::Port>(side->dev->queue(0), side->dev->info());
  rdm::EndpointConfig c;
  c.udp_port = kPingUdpPort;
  c.idle_passes_per_clock_read = 16;  // a cheaper busy-poll loop
  // Two busy-polling processes on a small shared machine can starve each
  // other for seconds: give the peer longer than the engine's default 2 s
  // before failing its operations.
  c.peer_timeout_ns = 10'000'000'000;
  c.max_msg_size = std::max<uint64_t>(c.max_msg_size, MessageBytes(o));
  c.max_send_ops = std::max<uint32_t>(c.max_send_ops, 2 * posted + 8);
  c.max_posted_recvs = std::max<uint32_t>(c.max_posted_recvs, posted + 8);
  auto ep = rdm::Endpoint::Create(*side->port, driver::SteadyClock::Get(), c);
  if (!ep.ok()) return ep.status();
  side->ep = *std::move(ep);
  return side;
}

absl::Status ErrorOf(const rdm::ErrorCompletion& e) {
  return absl::UnavailableError(
      absl::StrCat("an rdm operation failed (errno ", e.err, "): ", e.message));
}

// An rdm endpoint as the slot transports (slots.h) use it: a slot's index
// is its operations' context.
class RdmLink {
 public:
  using Peer = rdm::PeerId;
  static constexpr bool kHello = false;

  // max_bytes: the largest message this run was set up for.
  RdmLink(rdm::Endpoint& ep, size_t max_bytes) : ep_(ep), max_bytes_(max_bytes) {}

  absl::StatusOr<bool> PostRecv(uint8_t* buf, size_t len, uint32_t slot) {
    return Posted(ep_.PostRecv({.buf = buf, .len = len, .context = Context(slot)}), "a receive");
  }
  absl::StatusOr<bool> Send(const uint8_t* buf, size_t len, Peer to, uint32_t slot,
                            bool more = false) {
    return Posted(ep_.Send({.dest = to, .buf = buf, .len = len, .context = Context(slot),
                            .flags = more ? rdm::kSendMore : 0u}),
                  "a send");
  }
  absl::StatusOr<size_t> Poll(SlotCompletion<Peer>* out, size_t max) {
    ep_.Progress();
    if (ep_.PollErrors({&err_, 1}) > 0) return ErrorOf(err_);
    const size_t n = ep_.PollCompletions({comps_, std::min(max, kMaxPoll)});
    for (size_t k = 0; k < n; ++k) {
      const auto slot = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(comps_[k].context));
      out[k] = SlotCompletion<Peer>{slot, comps_[k].len, comps_[k].source};
    }
    return n;
  }
  // Whatever the layer can carry: the buffers fit every size asked for.
  std::string Cannot(uint64_t size) const {
    if (PingPayloadBytes(size) <= max_bytes_) return "";
    return absl::StrCat(size, " B is more than the ", max_bytes_, " B this run was set up for");
  }
  std::string Hint() const { return "--layer=rdm"; }

 private:
  static constexpr size_t kMaxPoll = 64;
  static void* Context(uint32_t slot) { return reinterpret_cast<void*>(uintptr_t{slot}); }
  static absl::StatusOr<bool> Posted(rdm::Result r, const char* what) {
    if (r == rdm::Result::kOk) return true;
    if (r == rdm::Result::kAgain) return false;
    return absl::InternalError(
        absl::StrCat("the endpoint refused ", what, ": ", rdm::ResultName(r)));
  }

  rdm::Endpoint& ep_;
  const size_t max_bytes_;
  rdm::Completion comps_[kMaxPoll];
  rdm::ErrorCompletion err_;
};

}  // namespace

absl::Status RunRdmServer(std::unique_ptr<driver::Device> dev, const PingOptions& opts,
                          const RdmPingOptions& rdm_opts) {
  const SlotLayout layout = SlotLayout::Server(opts, RdmLink::kHello);
  std::unique_ptr<uint8_t[]> region(new uint8_t[layout.region_bytes]);  // outlives the endpoint
  auto side = Open(std::move(dev), opts, rdm_opts, layout.slots);
  if (!side.ok()) return side.status();
  RdmLink link(*(*side)->ep, MessageBytes(opts));
  SlotServer<RdmLink> server(link, region.get(), layout);
  return Serve(server);
}

absl::StatusOr<RunResult> RunRdmClient(std::unique_ptr<driver::Device> dev, const PingOptions& opts,
                                       const RdmPingOptions& rdm_opts) {
  if (opts.peer_ip.value == 0) {
    return absl::InvalidArgumentError(
        "--layer=rdm needs the server's address: --connect=MAC/IPv4 (or use --local)");
  }
  const uint32_t window = std::max<uint32_t>(opts.window, 1);
  const SlotLayout layout = SlotLayout::Client(opts, RdmLink::kHello);
  std::unique_ptr<uint8_t[]> region(new uint8_t[layout.region_bytes]);  // outlives the endpoint
  auto side_or = Open(std::move(dev), opts, rdm_opts, window);
  if (!side_or.ok()) return side_or.status();
  Side& side = **side_or;
  rdm::Endpoint& ep = *side.ep;
  rdm::Address server;
  server.mac = opts.peer_mac;
  server.ip = opts.peer_ip;
  server.udp_port = kPingUdpPort;
  auto peer_or = ep.InsertPeer(server);
  if (!peer_or.ok()) return peer_or.status();
  const rdm::PeerId peer = *peer_or;

  RunResult result;
  result.layer = "rdm";
  result.device = side.dev->info().uri;
  RdmLink link(ep, MessageBytes(opts));
  // The engine has no congestion control yet: a window of multi-megabyte
  // messages overruns memif's rings and collapses into timeouts. Keep
  // about 4 MiB in flight.
  SlotClient<RdmLink> transport(link, region.get(), layout, peer, window, 4u << 20);
  PingClient<SlotClient<RdmLink>> client(transport);
  if (absl::Status s = client.Run(opts, &result); !s.ok()) return s;

  const rdm::Counters& c = ep.counters();
  const std::optional<rdm::PeerStats> ps = ep.peer_stats(peer);
  const uint64_t srtt = ps ? ps->srtt_ns : 0;
  absl::StrAppend(&result.extra_json, ",\"retransmits_fast\":", c.retransmits_fast,
                  ",\"retransmits_timeout\":", c.retransmits_timeout,
                  ",\"tail_probes\":", c.tail_probes,
                  ",\"duplicates_dropped\":", c.duplicates_dropped, ",\"srtt_ns\":", srtt,
                  ",\"tx_packets\":", c.tx_packets, ",\"tx_acks\":", c.tx_acks,
                  ",\"tx_data_packets\":", c.tx_data_packets,
                  ",\"tx_bundled_msgs\":", c.tx_bundled_msgs,
                  ",\"rto_expirations\":", c.rto_expirations, ",\"rto_spurious\":",
                  c.rto_spurious, ",\"rnr_received\":", c.rnr_received);
  absl::StrAppend(&result.extra_text, "retransmits fast ", c.retransmits_fast, ", timed ",
                  c.retransmits_timeout, " (tail probes ", c.tail_probes,
                  "); duplicates dropped ", c.duplicates_dropped,
                  "; srtt ", static_cast<double>(srtt) / 1000.0, " us\n");
  if (side.fault != nullptr) {
    const driver::fault::FaultCounters f = side.fault->counters();
    absl::StrAppend(&result.extra_json, ",\"faults\":{\"dropped\":", f.dropped,
                    ",\"duplicated\":", f.duplicated, ",\"reordered\":", f.reordered, "}");
    absl::StrAppend(&result.extra_text, "faults      this side's device dropped ", f.dropped,
                    ", duplicated ", f.duplicated, ", reordered ", f.reordered, " packets\n");
  }
  return result;
}

}  // namespace bypass::tools
