#include "tools/pingpong/rdm.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "driver/clock.h"
#include "driver/fault/fault_device.h"
#include "fabric/rdm/rdm.h"
#include "tools/ping_wire.h"
#include "tools/pingpong/phases.h"

namespace bypass::tools {
namespace {

constexpr size_t kCtlBytes = 32;  // kReportAsk, kReport and kFin messages
constexpr uint64_t kReplyTimeoutNs = 5'000'000'000;

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

}  // namespace

absl::Status RunRdmServer(std::unique_ptr<driver::Device> dev, const PingOptions& opts,
                          const RdmPingOptions& rdm_opts) {
  const size_t bytes = MessageBytes(opts);
  const uint32_t slots = ServerSlots(std::max<uint32_t>(opts.window, 4), bytes);
  auto side = Open(std::move(dev), opts, rdm_opts, slots);
  if (!side.ok()) return side.status();
  rdm::Endpoint& ep = *(*side)->ep;
  const auto& clock = driver::SteadyClock::Get();
  // One buffer per slot: posted as a receive, or echoed back as a send.
  // Left uninitialised: pages are touched only by messages that fill them.
  std::vector<std::unique_ptr<uint8_t[]>> storage;
  std::vector<uint8_t*> buf;
  for (uint32_t i = 0; i < slots; ++i) {
    storage.emplace_back(new uint8_t[bytes]);
    buf.push_back(storage.back().get());
  }
  // Slots to post, taken last-in first-out, and how many may be posted:
  // two while the client measures round trips, so they land in two warm
  // buffers (a ping-pong application reuses its buffer; cycling through
  // the window's buffers would measure cache misses), all of them once it
  // sends a kRateStart.
  std::vector<uint32_t> to_post;
  uint32_t posted = 0, post_limit = std::min<uint32_t>(2, slots);
  std::deque<std::pair<uint32_t, rdm::SendRequest>> to_send;  // sends refused for now
  for (uint32_t i = slots; i > 0; --i) to_post.push_back(i - 1);
  auto ctx = [](uint32_t i) { return reinterpret_cast<void*>(uintptr_t{i}); };
  uint64_t data_count = 0, first_ns = 0, last_ns = 0;
  uint64_t fin_at = 0;
  rdm::Completion comps[64];
  rdm::ErrorCompletion err;
  for (;;) {
    while (!to_post.empty() && posted < post_limit) {
      const uint32_t i = to_post.back();
      if (ep.PostRecv({.buf = buf[i], .len = bytes, .context = ctx(i)}) != rdm::Result::kOk) break;
      to_post.pop_back();
      ++posted;
    }
    while (!to_send.empty()) {
      if (ep.Send(to_send.front().second) != rdm::Result::kOk) break;
      to_send.pop_front();
    }
    ep.Progress();
    if (ep.PollErrors({&err, 1}) > 0) return ErrorOf(err);
    const size_t n = ep.PollCompletions(comps);
    for (size_t k = 0; k < n; ++k) {
      const rdm::Completion& c = comps[k];
      const uint32_t i = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(c.context));
      if (c.flags & rdm::kCompSend) {
        to_post.push_back(i);  // the echo left: the buffer receives again
        continue;
      }
      --posted;
      PingHeader h{};
      if (!ReadPingHeader(buf[i], c.len, &h)) {
        to_post.push_back(i);
        continue;
      }
      const rdm::SendRequest echo{.dest = c.source, .buf = buf[i], .len = c.len, .context = ctx(i)};
      switch (static_cast<PingKind>(h.kind)) {
        case PingKind::kPing:
          to_send.emplace_back(i, echo);
          break;
        case PingKind::kRateStart:
          post_limit = slots;  // posted at the loop's top, before the echo goes
          to_send.emplace_back(i, echo);
          break;
        case PingKind::kData:
          last_ns = clock.NowNs();
          if (data_count++ == 0) first_ns = last_ns;
          to_post.push_back(i);
          break;
        case PingKind::kReportAsk: {
          PingHeader r{data_count, static_cast<uint32_t>(PingKind::kReport), kPingMagic};
          const uint64_t elapsed = last_ns - first_ns;
          std::memcpy(buf[i], &r, sizeof(r));
          std::memcpy(buf[i] + sizeof(r), &elapsed, sizeof(elapsed));
          to_send.emplace_back(i, rdm::SendRequest{.dest = c.source, .buf = buf[i],
                                                   .len = kCtlBytes, .context = ctx(i)});
          data_count = 0;
          break;
        }
        case PingKind::kFin:
          if (fin_at == 0) fin_at = clock.NowNs();
          to_post.push_back(i);
          break;
        default:
          to_post.push_back(i);
          break;
      }
    }
    // After the kFin, stay a moment so its acknowledgement reaches the client.
    if (fin_at != 0 && clock.NowNs() - fin_at > 50'000'000) return absl::OkStatus();
  }
}

absl::StatusOr<RunResult> RunRdmClient(std::unique_ptr<driver::Device> dev, const PingOptions& opts,
                                       const RdmPingOptions& rdm_opts) {
  if (opts.peer_ip.value == 0) {
    return absl::InvalidArgumentError(
        "--layer=rdm needs the server's address: --connect=MAC/IPv4 (or use --local)");
  }
  const uint32_t window = std::max<uint32_t>(opts.window, 1);
  auto side_or = Open(std::move(dev), opts, rdm_opts, window);
  if (!side_or.ok()) return side_or.status();
  Side& side = **side_or;
  rdm::Endpoint& ep = *side.ep;
  const auto& clock = driver::SteadyClock::Get();
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
  // Pings and control messages; rate-mode data goes from one shared buffer
  // (the server counts it, it does not verify it).
  const size_t bytes = opts.latency ? MessageBytes(opts) : kCtlBytes;
  std::vector<uint8_t> dbuf(opts.rate ? MessageBytes(opts) : 0);

  // Send buffers: a slot is free again when its send completes.
  std::vector<std::vector<uint8_t>> sbuf(window + 1, std::vector<uint8_t>(bytes));
  std::vector<uint32_t> free_slots;
  for (uint32_t i = 0; i <= window; ++i) free_slots.push_back(i);
  std::vector<uint8_t> rbuf(bytes);
  constexpr uintptr_t kRecvCtx = ~uintptr_t{0};
  bool got_reply = false;
  size_t reply_len = 0;
  rdm::Completion comps[64];
  rdm::ErrorCompletion err;

  // One progress pass and its completions.
  auto pump = [&]() -> absl::Status {
    ep.Progress();
    if (ep.PollErrors({&err, 1}) > 0) return ErrorOf(err);
    const size_t n = ep.PollCompletions(comps);
    for (size_t k = 0; k < n; ++k) {
      const uintptr_t c = reinterpret_cast<uintptr_t>(comps[k].context);
      if (c == kRecvCtx) {
        got_reply = true;
        reply_len = comps[k].len;
      } else {
        free_slots.push_back(static_cast<uint32_t>(c));
      }
    }
    return absl::OkStatus();
  };
  // Sends `kind` (len bytes, pattern of seq) from a free slot; data
  // (kData) from dbuf, written beforehand.
  // At most `limit` sends outstanding (of window + 1 slots). *started,
  // if given, is when the message was written and handed to the engine.
  auto send = [&](uint64_t seq, PingKind kind, size_t len, uint32_t limit = ~0u,
                  uint64_t* started = nullptr) -> absl::Status {
    const uint64_t t0 = clock.NowNs();
    SpinCheck spin;
    while (free_slots.empty() || window + 1 - free_slots.size() >= limit) {
      if (absl::Status s = pump(); !s.ok()) return s;
      if (spin.Due() && clock.NowNs() - t0 > kReplyTimeoutNs) {
        return absl::DeadlineExceededError(absl::StrCat(
            "sends stay unacknowledged for 5 s: is the server running with --layer=rdm?"));
      }
    }
    const uint32_t slot = free_slots.back();
    free_slots.pop_back();
    uint8_t* from = sbuf[slot].data();
    if (kind == PingKind::kData) {
      from = dbuf.data();
    } else {
      WritePing(from, len, seq, kind);
    }
    if (started != nullptr) *started = clock.NowNs();
    const rdm::SendRequest r{.dest = peer, .buf = from, .len = len,
                             .context = reinterpret_cast<void*>(uintptr_t{slot})};
    while (ep.Send(r) != rdm::Result::kOk) {
      if (absl::Status s = pump(); !s.ok()) return s;
      if (spin.Due() && clock.NowNs() - t0 > kReplyTimeoutNs) {
        return absl::DeadlineExceededError("the endpoint refuses sends for 5 s");
      }
    }
    return absl::OkStatus();
  };
  // Posts the reply's receive, sends, and waits for the reply.
  auto round_trip = [&](uint64_t seq, PingKind kind, size_t len) -> absl::StatusOr<uint64_t> {
    got_reply = false;
    if (ep.PostRecv({.buf = rbuf.data(), .len = rbuf.size(),
                     .context = reinterpret_cast<void*>(kRecvCtx)}) != rdm::Result::kOk) {
      return absl::ResourceExhaustedError("the endpoint refused a receive");
    }
    uint64_t t0 = 0;  // the clock starts once the ping is written
    if (absl::Status s = send(seq, kind, len, ~0u, &t0); !s.ok()) return s;
    for (SpinCheck spin; !got_reply;) {
      if (absl::Status s = pump(); !s.ok()) return s;
      if (spin.Due() && clock.NowNs() - t0 > kReplyTimeoutNs) {
        return absl::DeadlineExceededError(absl::StrCat(
            "no reply to message ", seq, " within 5 s: is the server running with --layer=rdm?"));
      }
    }
    return clock.NowNs() - t0;
  };

  // Whatever the layer can carry: the buffers fit every size asked for.
  auto cannot = [&](uint64_t size) -> std::string {
    if (PingPayloadBytes(size) <= MessageBytes(opts)) return "";
    return absl::StrCat(size, " B is more than the ", MessageBytes(opts), " B this run was set up for");
  };
  LatencyOps lat;
  lat.cannot = cannot;
  lat.ping = [&](uint64_t size, uint64_t seq) -> absl::StatusOr<uint64_t> {
    const size_t ping_bytes = PingPayloadBytes(size);
    auto rtt = round_trip(seq, PingKind::kPing, ping_bytes);
    if (!rtt.ok()) return rtt.status();
    if (reply_len != ping_bytes || !VerifyPing(rbuf.data(), reply_len, size, seq, PingKind::kPing)) {
      return absl::DataLossError(absl::StrCat("the reply to ping ", seq, " came back with different bytes"));
    }
    return rtt;
  };
  RateOps rate;
  rate.window = window;
  rate.reliable = true;
  // The engine has no congestion control yet: a window of multi-megabyte
  // messages overruns memif's rings and collapses into timeouts. Keep
  // about 4 MiB in flight.
  rate.max_inflight_bytes = 4u << 20;
  rate.cannot = cannot;
  rate.begin = [&]() -> absl::Status {
    const auto rt = round_trip(kRateStartSeq, PingKind::kRateStart, kCtlBytes);
    return CheckRateStartReply(rt, rbuf.data(), reply_len);
  };
  uint64_t seq = 0;
  uint64_t written = ~uint64_t{0};
  rate.send = [&](uint64_t size, uint64_t n) -> absl::Status {
    if (written != size) {
      WritePing(dbuf.data(), size, 0, PingKind::kData);
      written = size;
    }
    const uint32_t limit = WindowFor(rate, size);
    for (uint64_t i = 0; i < n; ++i) {
      if (absl::Status s = send(seq++, PingKind::kData, PingPayloadBytes(size), limit); !s.ok()) return s;
    }
    return absl::OkStatus();
  };
  rate.report = [&]() -> absl::StatusOr<Report> {
    auto rt = round_trip(1ull << 62, PingKind::kReportAsk, kCtlBytes);
    if (!rt.ok()) return rt.status();
    PingHeader h{};
    if (!ReadPingHeader(rbuf.data(), reply_len, &h) ||
        h.kind != static_cast<uint32_t>(PingKind::kReport) || reply_len < 24) {
      return absl::DataLossError("the server's report is malformed");
    }
    Report rep;
    rep.count = h.seq;
    std::memcpy(&rep.elapsed_ns, rbuf.data() + sizeof(h), sizeof(rep.elapsed_ns));
    return rep;
  };
  if (absl::Status s = RunPhases(opts, lat, rate, &result); !s.ok()) return s;
  // kFin, and wait (a while) until it is acknowledged.
  if (absl::Status s = send(0, PingKind::kFin, kCtlBytes); !s.ok()) return s;
  const uint64_t t0 = clock.NowNs();
  while (free_slots.size() < window + 1 && clock.NowNs() - t0 < 1'000'000'000) {
    if (absl::Status s = pump(); !s.ok()) return s;
  }

  const rdm::Counters& c = ep.counters();
  const std::optional<rdm::PeerStats> ps = ep.peer_stats(peer);
  const uint64_t srtt = ps ? ps->srtt_ns : 0;
  absl::StrAppend(&result.extra_json, ",\"retransmits_fast\":", c.retransmits_fast,
                  ",\"retransmits_timeout\":", c.retransmits_timeout,
                  ",\"tail_probes\":", c.tail_probes,
                  ",\"duplicates_dropped\":", c.duplicates_dropped, ",\"srtt_ns\":", srtt,
                  ",\"tx_packets\":", c.tx_packets, ",\"tx_acks\":", c.tx_acks);
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
