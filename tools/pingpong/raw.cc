#include "tools/pingpong/raw.h"

#include <cstddef>
#include <cstring>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "driver/clock.h"
#include "driver/net_headers.h"
#include "tools/ping_wire.h"
#include "tools/pingpong/phases.h"

namespace bypass::tools {
namespace {

using driver::Packet;

constexpr uint64_t kResendNs = 200'000'000;  // a lost raw frame is sent again

// The ping payload of a frame (inside p's buffer), or nullptr if the frame is
// not a well-formed UDP frame to the ping port. Header checks only, like the
// bare baseline's: the ping pattern verifies the payload end to end.
uint8_t* PingPayload(Packet* p, size_t* len) {
  const std::optional<driver::UdpFrameLayout> f = driver::LocateUdpFrame({p->data, p->len});
  if (!f) return nullptr;
  uint8_t* udp = p->data + sizeof(driver::EthernetHeader) + f->ipv4_header_bytes;
  if (((udp[2] << 8) | udp[3]) != kPingUdpPort) return nullptr;  // destination port
  *len = f->udp_bytes - sizeof(driver::UdpHeader);
  return udp + sizeof(driver::UdpHeader);
}

driver::UdpFlow FlowTo(const driver::Device& dev, const PingOptions& opts) {
  driver::UdpFlow f;
  f.src_mac = dev.info().mac;
  f.dst_mac = opts.peer_mac;
  f.src_ip = dev.info().ipv4;
  f.dst_ip = opts.peer_ip;
  f.src_port = kPingUdpPort;
  f.dst_port = kPingUdpPort;
  return f;
}

void Fill(Packet* p, const driver::UdpFlow& flow, size_t size, uint64_t seq, PingKind kind) {
  const size_t payload = PingPayloadBytes(size);
  // No UDP checksum: the ping pattern is verified end to end instead.
  p->len = static_cast<uint32_t>(driver::WriteUdpHeaders(flow, payload, {p->data, p->capacity},
                                                         driver::UdpChecksumFill::kNone));
  WritePing(p->data + driver::kUdpFrameHeaderBytes, size, seq, kind);
}

// Transmits all of pkts, spinning while the ring is full.
void SendAll(driver::QueuePair& qp, Packet** pkts, uint16_t n) {
  uint16_t done = 0;
  while (done < n) done += qp.TxBurst(absl::MakeConstSpan(pkts + done, n - done));
}

// Why a message of `size` cannot go as one frame of dev (empty: it can).
std::string CannotCarry(const driver::Device& dev, uint64_t size) {
  const uint64_t max_payload = dev.info().mtu - 28;
  if (PingPayloadBytes(size) <= max_payload) return "";
  return absl::StrCat("raw sends one frame per message and ", size, " B does not fit one frame of ",
                      dev.info().driver, " (MTU ", dev.info().mtu, ", payload up to ", max_payload,
                      " B): use --layer=rdm for larger messages");
}

}  // namespace

absl::Status WaitForLink(driver::Device& dev, uint64_t timeout_ms) {
  const auto& clock = driver::SteadyClock::Get();
  const uint64_t deadline = clock.NowNs() + timeout_ms * 1'000'000;
  while (dev.link_state() != driver::LinkState::kUp) {
    if (clock.NowNs() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the link of ", dev.info().uri, " did not come up within ", timeout_ms / 1000,
          " s: is the other side running (for memif, the same socket in another process)?"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return absl::OkStatus();
}

absl::Status RunRawServer(driver::Device& dev, const PingOptions& /*opts*/) {
  // Echoes and counts whatever size arrives: the device's MTU is the limit.
  driver::QueuePair& qp = dev.queue(0);
  const auto& clock = driver::SteadyClock::Get();
  Packet* rx[32];
  Packet* tx[32];
  Packet* drop[32];  // freed once per burst
  uint64_t data_count = 0, first_ns = 0, last_ns = 0;
  for (;;) {
    const uint16_t n = qp.RxBurst(absl::MakeSpan(rx));
    uint16_t ntx = 0;
    uint16_t ndrop = 0;
    bool fin = false;
    for (uint16_t i = 0; i < n; ++i) {
      Packet* p = rx[i];
      size_t len = 0;
      uint8_t* payload = PingPayload(p, &len);
      PingHeader h{};
      if (payload == nullptr || !ReadPingHeader(payload, len, &h)) {
        drop[ndrop++] = p;
        continue;
      }
      switch (static_cast<PingKind>(h.kind)) {
        case PingKind::kPing:
          driver::ReverseUdpFrame(p->data);
          tx[ntx++] = p;
          break;
        case PingKind::kData:
          last_ns = clock.NowNs();
          if (data_count++ == 0) first_ns = last_ns;
          drop[ndrop++] = p;
          break;
        case PingKind::kReportAsk: {
          PingHeader r{data_count, static_cast<uint32_t>(PingKind::kReport), kPingMagic};
          const uint64_t elapsed = last_ns - first_ns;
          if (len < sizeof(r) + sizeof(elapsed)) {
            drop[ndrop++] = p;
            break;
          }
          driver::ReverseUdpFrame(p->data);
          std::memcpy(payload, &r, sizeof(r));
          std::memcpy(payload + sizeof(r), &elapsed, sizeof(elapsed));
          // The payload changed: any UDP checksum the ask carried is stale.
          std::memset(payload - sizeof(driver::UdpHeader) + offsetof(driver::UdpHeader, checksum),
                      0, sizeof(uint16_t));
          tx[ntx++] = p;
          data_count = 0;
          break;
        }
        case PingKind::kFin:
          fin = true;
          drop[ndrop++] = p;
          break;
        case PingKind::kReport:
          drop[ndrop++] = p;
          break;
        default:
          drop[ndrop++] = p;
          break;
      }
    }
    if (ndrop != 0) qp.FreeBulk(absl::MakeConstSpan(drop, ndrop));
    if (ntx != 0) SendAll(qp, tx, ntx);
    if (fin) return absl::OkStatus();
  }
}

absl::StatusOr<RunResult> RunRawClient(driver::Device& dev, const PingOptions& opts) {
  driver::QueuePair& qp = dev.queue(0);
  const auto& clock = driver::SteadyClock::Get();
  const driver::UdpFlow flow = FlowTo(dev, opts);
  RunResult result;
  result.layer = "raw";
  result.device = dev.info().uri;
  Packet* rx[32];

  auto alloc_one = [&]() -> absl::StatusOr<Packet*> {
    Packet* p = nullptr;
    for (int tries = 0; !qp.AllocBulk({&p, 1}); ++tries) {
      if (tries > 1000000) {
        return absl::ResourceExhaustedError("the queue's buffer pool stays empty: buffers leak");
      }
    }
    return p;
  };

  // Sends `kind` of `size` with `seq` until a verified reply of
  // `reply_kind` arrives; a kReport's first 24 bytes land in *reply.
  auto round_trip = [&](uint64_t size, uint64_t seq, PingKind kind, PingKind reply_kind,
                        uint8_t* reply) -> absl::StatusOr<uint64_t> {
    // The first frame is written before the clock starts (a resend's
    // writing counts: the clock runs on).
    auto first = alloc_one();
    if (!first.ok()) return first.status();
    Fill(*first, flow, size, seq, kind);
    const uint64_t t0 = clock.NowNs();
    uint64_t sent_at = t0;
    for (int attempt = 0;; ++attempt) {
      Packet* p = *first;
      if (attempt > 0) {
        auto again = alloc_one();
        if (!again.ok()) return again.status();
        p = *again;
        Fill(p, flow, size, seq, kind);
      }
      SendAll(qp, &p, 1);
      for (SpinCheck spin;;) {
        const uint16_t n = qp.RxBurst(absl::MakeSpan(rx));
        uint64_t got_at = 0;
        for (uint16_t i = 0; i < n; ++i) {
          size_t len = 0;
          const uint8_t* payload = PingPayload(rx[i], &len);
          if (got_at != 0 || payload == nullptr) continue;
          if (reply_kind == PingKind::kPing) {
            if (!IsPingHeader(payload, len, seq, PingKind::kPing)) continue;  // stale or foreign
            got_at = clock.NowNs();  // the pattern is checked off the clock
            if (!VerifyPing(payload, len, size, seq, PingKind::kPing)) {
              qp.FreeBulk(absl::MakeConstSpan(rx, n));
              return absl::DataLossError(
                  absl::StrCat("the reply to ping ", seq, " came back with different bytes"));
            }
          } else {
            PingHeader h{};
            if (ReadPingHeader(payload, len, &h) && h.kind == static_cast<uint32_t>(reply_kind) &&
                len >= 24) {
              got_at = clock.NowNs();
              std::memcpy(reply, payload, 24);
            }
          }
        }
        qp.FreeBulk(absl::MakeConstSpan(rx, n));
        if (got_at != 0) return got_at - t0;
        if (spin.Due() && clock.NowNs() - sent_at > kResendNs) break;
      }
      if (attempt >= 50) {
        return absl::DeadlineExceededError(absl::StrCat(
            "no reply to message ", seq, " after 50 tries 200 ms apart: is the server running?"));
      }
      ++result.resent;
      sent_at = clock.NowNs();
    }
  };

  LatencyOps lat;
  lat.cannot = [&](uint64_t size) { return CannotCarry(dev, size); };
  lat.ping = [&](uint64_t size, uint64_t seq) {
    return round_trip(size, seq, PingKind::kPing, PingKind::kPing, nullptr);
  };

  std::vector<Packet*> pending(opts.burst);
  RateOps rate;
  rate.window = opts.burst;
  rate.cannot = lat.cannot;
  uint64_t seq = 0;
  rate.send = [&](uint64_t size, uint64_t n) -> absl::Status {
    for (uint64_t done = 0; done < n;) {
      const uint32_t b = static_cast<uint32_t>(std::min<uint64_t>(opts.burst, n - done));
      while (!qp.AllocBulk(absl::MakeSpan(pending.data(), b))) {
      }
      for (uint32_t i = 0; i < b; ++i) Fill(pending[i], flow, size, seq++, PingKind::kData);
      SendAll(qp, pending.data(), static_cast<uint16_t>(b));
      done += b;
      // Drain anything that arrives so the RX ring never backs up.
      const uint16_t r = qp.RxBurst(absl::MakeSpan(rx));
      qp.FreeBulk(absl::MakeConstSpan(rx, r));
    }
    return absl::OkStatus();
  };
  rate.report = [&]() -> absl::StatusOr<Report> {
    uint8_t reply[24] = {};
    auto rt = round_trip(32, 1ull << 62, PingKind::kReportAsk, PingKind::kReport, reply);
    if (!rt.ok()) return rt.status();
    PingHeader h;
    Report rep;
    std::memcpy(&h, reply, sizeof(h));
    std::memcpy(&rep.elapsed_ns, reply + sizeof(h), sizeof(rep.elapsed_ns));
    rep.count = h.seq;
    return rep;
  };
  if (absl::Status s = RunPhases(opts, lat, rate, &result); !s.ok()) return s;
  auto fin = alloc_one();
  if (!fin.ok()) return fin.status();
  Fill(*fin, flow, 32, 0, PingKind::kFin);
  SendAll(qp, &*fin, 1);
  return result;
}

}  // namespace bypass::tools
