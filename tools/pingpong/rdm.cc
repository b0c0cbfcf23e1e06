#include "tools/pingpong/rdm.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "driver/clock.h"
#include "driver/fault/fault_device.h"
#include "fabric/rdm/endpoint.h"
#include "tools/ping_wire.h"

namespace bypass::tools {
namespace {

constexpr size_t kCtlBytes = 32;  // kReportAsk, kReport and kFin messages
constexpr uint64_t kReplyTimeoutNs = 5'000'000'000;

// The device (fault-wrapped if asked), its port and one endpoint on it.
struct Side {
  std::unique_ptr<driver::Device> dev;
  driver::fault::FaultDevice* fault = nullptr;  // dev, if wrapped
  std::unique_ptr<rdm::Port<>> port;
  std::unique_ptr<rdm::Endpoint<>> ep;

  ~Side() {
    ep.reset();  // detaches from the port and frees its packets first
    port.reset();
  }
};

size_t MessageBytes(const PingOptions& o) { return std::max(PingPayloadBytes(o.size), kCtlBytes); }

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
  side->port = std::make_unique<rdm::Port<>>(side->dev->queue(0), side->dev->info());
  rdm::EndpointConfig c;
  c.udp_port = kPingUdpPort;
  c.idle_passes_per_clock_read = 16;  // a cheaper busy-poll loop
  c.max_msg_size = std::max<uint64_t>(c.max_msg_size, MessageBytes(o));
  c.max_send_ops = std::max<uint32_t>(c.max_send_ops, 2 * posted + 8);
  c.max_posted_recvs = std::max<uint32_t>(c.max_posted_recvs, posted + 8);
  auto ep = rdm::Endpoint<>::Create(*side->port, driver::SteadyClock::Get(), c);
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
  const uint32_t slots = std::max<uint32_t>(rdm_opts.window, 4);
  auto side = Open(std::move(dev), opts, rdm_opts, slots);
  if (!side.ok()) return side.status();
  rdm::Endpoint<>& ep = *(*side)->ep;
  const auto& clock = driver::SteadyClock::Get();
  const size_t bytes = MessageBytes(opts);
  // One buffer per slot: posted as a receive, or echoed back as a send.
  std::vector<std::vector<uint8_t>> buf(slots, std::vector<uint8_t>(bytes));
  std::deque<uint32_t> to_post;                 // slots to post again
  std::deque<std::pair<uint32_t, rdm::SendRequest>> to_send;  // sends refused for now
  for (uint32_t i = 0; i < slots; ++i) to_post.push_back(i);
  auto ctx = [](uint32_t i) { return reinterpret_cast<void*>(uintptr_t{i}); };
  uint64_t data_count = 0, first_ns = 0, last_ns = 0;
  uint64_t fin_at = 0;
  rdm::Completion comps[64];
  rdm::ErrorCompletion err;
  for (;;) {
    while (!to_post.empty()) {
      const uint32_t i = to_post.front();
      if (ep.PostRecv({.buf = buf[i].data(), .len = bytes, .context = ctx(i)}) != rdm::Result::kOk) break;
      to_post.pop_front();
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
      PingHeader h{};
      if (!ReadPingHeader(buf[i].data(), c.len, &h)) {
        to_post.push_back(i);
        continue;
      }
      const rdm::SendRequest echo{.dest = c.source, .buf = buf[i].data(), .len = c.len, .context = ctx(i)};
      switch (static_cast<PingKind>(h.kind)) {
        case PingKind::kPing:
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
          std::memcpy(buf[i].data(), &r, sizeof(r));
          std::memcpy(buf[i].data() + sizeof(r), &elapsed, sizeof(elapsed));
          to_send.emplace_back(i, rdm::SendRequest{.dest = c.source, .buf = buf[i].data(),
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
  const uint32_t window = std::max<uint32_t>(rdm_opts.window, 1);
  auto side_or = Open(std::move(dev), opts, rdm_opts, window);
  if (!side_or.ok()) return side_or.status();
  Side& side = **side_or;
  rdm::Endpoint<>& ep = *side.ep;
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
  result.size = opts.size;
  result.iters = opts.iters;
  result.mode = opts.mode;
  const size_t bytes = MessageBytes(opts);
  const size_t ping_bytes = PingPayloadBytes(opts.size);

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
  // Sends `kind` (len bytes, pattern of seq) from a free slot.
  auto send = [&](uint64_t seq, PingKind kind, size_t len) -> absl::Status {
    const uint64_t t0 = clock.NowNs();
    while (free_slots.empty()) {
      if (absl::Status s = pump(); !s.ok()) return s;
      if (clock.NowNs() - t0 > kReplyTimeoutNs) {
        return absl::DeadlineExceededError(absl::StrCat(
            "sends stay unacknowledged for 5 s: is the server running with --layer=rdm?"));
      }
    }
    const uint32_t slot = free_slots.back();
    free_slots.pop_back();
    WritePing(sbuf[slot].data(), len, seq, kind);
    const rdm::SendRequest r{.dest = peer, .buf = sbuf[slot].data(), .len = len,
                             .context = reinterpret_cast<void*>(uintptr_t{slot})};
    while (ep.Send(r) != rdm::Result::kOk) {
      if (absl::Status s = pump(); !s.ok()) return s;
      if (clock.NowNs() - t0 > kReplyTimeoutNs) {
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
    const uint64_t t0 = clock.NowNs();
    if (absl::Status s = send(seq, kind, len); !s.ok()) return s;
    while (!got_reply) {
      if (absl::Status s = pump(); !s.ok()) return s;
      if (clock.NowNs() - t0 > kReplyTimeoutNs) {
        return absl::DeadlineExceededError(absl::StrCat(
            "no reply to message ", seq, " within 5 s: is the server running with --layer=rdm?"));
      }
    }
    return clock.NowNs() - t0;
  };

  if (opts.mode == "latency") {
    std::vector<uint64_t> samples;
    samples.reserve(opts.iters);
    uint64_t measured_ns = 0;
    for (uint64_t i = 0; i < opts.warmup + opts.iters; ++i) {
      auto rtt = round_trip(i, PingKind::kPing, ping_bytes);
      if (!rtt.ok()) return rtt.status();
      if (!VerifyPing(rbuf.data(), reply_len, opts.size, i, PingKind::kPing) ||
          reply_len != ping_bytes) {
        return absl::DataLossError(
            absl::StrCat("the reply to ping ", i, " came back with different bytes"));
      }
      if (i >= opts.warmup) {
        samples.push_back(*rtt);
        measured_ns += *rtt;
      }
    }
    result.rtt_ns = Percentiles::Of(samples);
    result.msgs_per_sec = measured_ns == 0 ? 0 : 1e9 * static_cast<double>(opts.iters) /
                                                     static_cast<double>(measured_ns);
  } else if (opts.mode == "rate") {
    uint64_t sent = 0;
    const uint64_t total = opts.warmup + opts.iters;
    PingHeader h{};
    uint64_t elapsed = 0;
    for (int phase = 0; phase < 2; ++phase) {
      const uint64_t goal = phase == 0 ? opts.warmup : total;
      while (sent < goal) {
        if (absl::Status s = send(sent, PingKind::kData, ping_bytes); !s.ok()) return s;
        ++sent;
      }
      auto rt = round_trip(1ull << 62, PingKind::kReportAsk, kCtlBytes);
      if (!rt.ok()) return rt.status();
      if (!ReadPingHeader(rbuf.data(), reply_len, &h) ||
          h.kind != static_cast<uint32_t>(PingKind::kReport) || reply_len < 24) {
        return absl::DataLossError("the server's report is malformed");
      }
      std::memcpy(&elapsed, rbuf.data() + sizeof(h), sizeof(elapsed));
    }
    if (h.seq != opts.iters) {
      return absl::DataLossError(absl::StrCat("the server received ", h.seq, " of ", opts.iters,
                                              " reliable messages"));
    }
    result.msgs_per_sec =
        elapsed == 0 ? 0 : 1e9 * static_cast<double>(h.seq) / static_cast<double>(elapsed);
    result.extra_json = absl::StrCat(",\"received\":", h.seq, ",\"sent\":", opts.iters);
    result.extra_text = absl::StrCat("received    ", h.seq, " of ", opts.iters, " messages\n");
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--mode=", opts.mode, " is not latency or rate"));
  }
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
                  ",\"duplicates_dropped\":", c.duplicates_dropped, ",\"srtt_ns\":", srtt,
                  ",\"tx_packets\":", c.tx_packets, ",\"tx_acks\":", c.tx_acks);
  absl::StrAppend(&result.extra_text, "retransmits fast ", c.retransmits_fast, ", timed ",
                  c.retransmits_timeout, "; duplicates dropped ", c.duplicates_dropped,
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
