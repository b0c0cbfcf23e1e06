// The ping protocol (tools/ping_wire.h) once for every layer: what a server
// does with each PingKind, and how a client runs round trips, windowed data,
// reports, the kRateStart, the kFin and fi's kHello. A layer supplies only a
// transport of whole messages (raw.cc; slots.h for rdm and fi, whose
// receives are posted buffers); the machine is a template over it, so a
// message costs no indirect call and no allocation.
#ifndef BYPASS_TOOLS_PINGPONG_MACHINE_H_
#define BYPASS_TOOLS_PINGPONG_MACHINE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "tools/latency.h"
#include "tools/ping_wire.h"
#include "tools/pingpong/phases.h"
#include "tools/pingpong/raw.h"

namespace bypass::tools {

// kReportAsk, kReport, kRateStart and kFin messages.
inline constexpr size_t kCtlBytes = 32;
// A kReport: its header (whose seq is the count), then the elapsed ns.
inline constexpr size_t kReportBytes = sizeof(PingHeader) + sizeof(uint64_t);
// Sequence numbers of the control round trips, apart from any ping's.
inline constexpr uint64_t kReportSeq = 1ull << 62;
inline constexpr uint64_t kRateStartSeq = 1ull << 61;

// Serves one client until its kFin: echoes kPing (and kRateStart, after
// OpenWindow), counts kData, answers kReportAsk with a kReport in the same
// buffer, inserts the client's address from a kHello where the layer needs
// it. T, the server's transport, offers:
//   T::Msg             a received message: data (uint8_t*), len, and what
//                      the transport needs to give it back or answer it
//   T::kBurst          messages one Poll returns at most
//   T::kHello          the client's address comes in a kHello (fi):
//                      absl::Status AcceptHello(Msg&, const uint8_t* addr, uint32_t len)
//                      makes the Msg's sender that address
//   T::kFinLingerNs    how long to stay after the kFin, progressing, so its
//                      acknowledgement and the last replies leave
//   absl::Status Flush()                 hands the layer what Reply and Release queued
//   bool Idle() const                    no reply waits to be sent
//   absl::StatusOr<size_t> Poll(Msg*)    a progress pass, then what arrived
//   void Release(Msg&)                   the buffer receives again (or is freed)
//   void Reply(Msg&)                     sends the buffer, len bytes, back to its sender
//   void OpenWindow()                    posts every receive buffer, not two
template <class T>
absl::Status Serve(T& t) {
  uint64_t data_count = 0, first_ns = 0, last_ns = 0, fin_at = 0;
  typename T::Msg msgs[T::kBurst];
  for (;;) {
    if (absl::Status s = t.Flush(); !s.ok()) return s;
    if (fin_at != 0 && t.Idle() && NowNs() - fin_at >= T::kFinLingerNs) return absl::OkStatus();
    absl::StatusOr<size_t> n = t.Poll(msgs);
    if (!n.ok()) return n.status();
    for (size_t k = 0; k < *n; ++k) {
      typename T::Msg& m = msgs[k];
      PingHeader h{};
      if (!ReadPingHeader(m.data, m.len, &h)) {
        t.Release(m);
        continue;
      }
      switch (static_cast<PingKind>(h.kind)) {
        case PingKind::kPing:
          t.Reply(m);
          break;
        case PingKind::kRateStart:
          t.OpenWindow();  // posted at the next Flush, before the echo goes
          t.Reply(m);
          break;
        case PingKind::kData:
          last_ns = NowNs();
          if (data_count++ == 0) first_ns = last_ns;
          t.Release(m);
          break;
        case PingKind::kReportAsk: {
          if (m.len < kReportBytes) {
            t.Release(m);
            break;
          }
          const PingHeader r{data_count, static_cast<uint32_t>(PingKind::kReport), kPingMagic};
          const uint64_t elapsed = last_ns - first_ns;
          std::memcpy(m.data, &r, sizeof(r));
          std::memcpy(m.data + sizeof(r), &elapsed, sizeof(elapsed));
          t.Reply(m);  // as long as the ask: the client sends kCtlBytes
          data_count = 0;
          break;
        }
        case PingKind::kHello: {
          if constexpr (T::kHello) {
            const uint8_t* addr = nullptr;
            uint32_t addr_len = 0;
            if (ReadHello(m.data, m.len, &addr, &addr_len)) {
              if (absl::Status s = t.AcceptHello(m, addr, addr_len); !s.ok()) return s;
              t.Reply(m);
              break;
            }
          }
          t.Release(m);
          break;
        }
        case PingKind::kFin:
          if (fin_at == 0) fin_at = NowNs();
          t.Release(m);
          break;
        case PingKind::kReport:
        default:
          t.Release(m);
          break;
      }
    }
  }
}

// A received message as the client reads it.
struct Received {
  const uint8_t* data = nullptr;  // the ping header first
  size_t len = 0;
};

// The client's side of the protocol over any layer's transport T, which offers:
//   T::kReliable       every message arrives, once and in order (rdm, fi): the
//                      one reply that arrives is the awaited one, sends
//                      complete (InFlight), and the server posts receives, so
//                      the first rate phase sends a kRateStart. Else (raw) a
//                      reply that is not the awaited one is stale and passed
//                      over, and a message with no reply in 200 ms goes again.
//   T::kHello          the server learns this side's address from a kHello
//                      first (fi): std::span<const uint8_t> address() const
//   T::kBurst          messages one Poll returns at most
//   std::string Cannot(uint64_t size) const  why size cannot go (empty: it can)
//   std::string Hint() const                 the server's flags, for errors
//   uint32_t window() const; uint64_t max_inflight_bytes() const  (WindowFor)
//   uint32_t InFlight() const                sends not complete yet
//   absl::Status Progress()                  one pass of the layer's progress
//   absl::StatusOr<bool> ArmReply()          readies the receive of one reply
//   uint8_t* Buffer(size_t len)              a buffer for the next message
//   bool Data(uint64_t size, uint64_t seq)   readies kData seq of size as the next message
//   absl::StatusOr<bool> Send(size_t len, bool more)
//                                            sends the next message (more: others follow
//                                            at once, and it may wait for them)
//   void Flush()                             sends what Send held back (raw's burst)
//   absl::StatusOr<size_t> Poll(Received*)   what arrived, valid until Release()
//   void Release()
// A false or nullptr is "not now": the machine runs Progress and asks again,
// for 5 s at most.
template <class T>
class PingClient final : public PhaseDriver {
 public:
  explicit PingClient(T& t) : t_(t) {}

  // The hello where the layer has one, the phases opts asks for, the kFin.
  absl::Status Run(const PingOptions& opts, RunResult* result) {
    more_ = opts.more;
    if constexpr (T::kHello) {
      if (absl::Status s = Hello(); !s.ok()) return s;
    }
    absl::Status s = RunPhases(opts, *this, result);
    result->resent = resent_;
    if (!s.ok()) return s;
    return Finish();
  }

  std::string Cannot(uint64_t size) const override { return t_.Cannot(size); }
  uint32_t Window(uint64_t size) const override {
    return WindowFor(t_.window(), t_.max_inflight_bytes(), size);
  }
  bool reliable() const override { return T::kReliable; }

  absl::StatusOr<uint64_t> Ping(uint64_t size, uint64_t seq) override {
    const size_t bytes = PingPayloadBytes(size);
    bool intact = false;
    absl::StatusOr<uint64_t> rtt = RoundTrip(PingKind::kPing, seq, size, [&](const Received& m) {
      intact = m.len == bytes && VerifyPing(m.data, m.len, size, seq, PingKind::kPing);
    });
    if (rtt.ok() && !intact) {
      return absl::DataLossError(
          absl::StrCat("the reply to ping ", seq, " came back with different bytes"));
    }
    return rtt;
  }

  absl::Status StartRate() override {
    if constexpr (!T::kReliable) {
      return absl::OkStatus();  // the server's ring needs no receives posted
    } else {
      bool echoed = false;
      absl::StatusOr<uint64_t> rt =
          RoundTrip(PingKind::kRateStart, kRateStartSeq, kCtlBytes, [&](const Received& m) {
            echoed = IsPingHeader(m.data, m.len, kRateStartSeq, PingKind::kRateStart);
          });
      if (!rt.ok()) return rt.status();
      if (!echoed) {
        return absl::DataLossError("the server's answer to the rate phase's start is malformed");
      }
      return absl::OkStatus();
    }
  }

  absl::Status SendData(uint64_t size, uint64_t n) override {
    const uint32_t limit = Window(size);
    const size_t bytes = PingPayloadBytes(size);
    auto room = [&]() -> absl::StatusOr<bool> {
      return t_.InFlight() < limit && t_.Data(size, data_seq_);
    };
    for (uint64_t i = 0; i < n; ++i) {
      if (absl::Status s = Until(room, "no send buffer came free"); !s.ok()) return s;
      ++data_seq_;
      // The window's last send, or the run's, goes without `more`; a
      // window that fills is progressed (Until), which sends what waits.
      const bool more = more_ && i + 1 < n && t_.InFlight() + 1 < limit;
      if (absl::Status s = Send(bytes, more); !s.ok()) return s;
    }
    t_.Flush();
    return absl::OkStatus();
  }

  absl::StatusOr<Report> AskReport() override {
    // Every data message completed first, so the ask cannot overtake one.
    absl::Status s = Until([&]() -> absl::StatusOr<bool> { return t_.InFlight() == 0; },
                           "sends stay incomplete");
    if (!s.ok()) return s;
    Report rep;
    bool ok = false;
    absl::StatusOr<uint64_t> rt =
        RoundTrip(PingKind::kReportAsk, kReportSeq, kCtlBytes, [&](const Received& m) {
          PingHeader h{};
          ok = ReadPingHeader(m.data, m.len, &h) &&
               h.kind == static_cast<uint32_t>(PingKind::kReport) && m.len >= kReportBytes;
          if (!ok) return;
          rep.count = h.seq;
          std::memcpy(&rep.elapsed_ns, m.data + sizeof(h), sizeof(rep.elapsed_ns));
        });
    if (!rt.ok()) return rt.status();
    if (!ok) return absl::DataLossError("the server's report is malformed");
    return rep;
  }

 private:
  static constexpr uint64_t kTimeoutNs = 5'000'000'000;  // reliable layers, and waits
  static constexpr uint64_t kResendNs = 200'000'000;     // raw: a lost message goes again
  static constexpr uint32_t kMaxSends = 51;              // raw: the first and 50 more
  static constexpr uint64_t kFinWaitNs = 1'000'000'000;

  // fi: the server learns this endpoint's address and echoes it back.
  absl::Status Hello() {
    bool mine = false;
    auto check = [&](const Received& m) {
      const uint8_t* addr = nullptr;
      uint32_t len = 0;
      mine = ReadHello(m.data, m.len, &addr, &len) && len == t_.address().size() &&
             std::memcmp(addr, t_.address().data(), len) == 0;
    };
    absl::StatusOr<uint64_t> rt = RoundTrip(PingKind::kHello, 0, kHelloBytes, check);
    if (!rt.ok()) return rt.status();
    if (!mine) {
      return absl::DataLossError("the server's answer to the hello is not this endpoint's address");
    }
    return absl::OkStatus();
  }

  // The kFin, then a while (1 s at most) for it to complete: a reliable
  // server acknowledges it before it leaves, and may leave first.
  absl::Status Finish() {
    if (absl::Status s = Post(PingKind::kFin, 0, kCtlBytes, nullptr); !s.ok()) return s;
    t_.Flush();
    const uint64_t t0 = NowNs();
    while (t_.InFlight() != 0 && NowNs() - t0 < kFinWaitNs) {
      if (absl::Status s = t_.Progress(); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // Sends message `kind` of `size` with `seq` and waits for its reply, which
  // on_reply(const Received&) checks off the clock. Returns the round trip:
  // from handing the written message to the layer to seeing the reply.
  template <class OnReply>
  absl::StatusOr<uint64_t> RoundTrip(PingKind kind, uint64_t seq, uint64_t size,
                                     OnReply&& on_reply) {
    absl::Status s = Until([&] { return t_.ArmReply(); }, "the endpoint refuses receives");
    if (!s.ok()) return s;
    uint64_t t0 = 0;  // the clock starts once the message is written
    if (s = Post(kind, seq, size, &t0); !s.ok()) return s;
    uint64_t sent_at = t0;
    uint32_t sends = 1;
    for (SpinCheck spin;;) {
      absl::StatusOr<size_t> n = t_.Poll(msgs_);
      if (!n.ok()) return n.status();
      uint64_t got_at = 0;
      for (size_t i = 0; i < *n && got_at == 0; ++i) {
        if (!T::kReliable && !Awaited(msgs_[i], kind, seq)) continue;  // stale or foreign
        got_at = NowNs();
        on_reply(msgs_[i]);
      }
      t_.Release();
      if (got_at != 0) return got_at - t0;
      if (!spin.Due()) continue;
      const uint64_t now = NowNs();
      if constexpr (T::kReliable) {
        if (now - t0 > kTimeoutNs) {
          return absl::DeadlineExceededError(absl::StrCat(
              "no reply to message ", seq, " within 5 s: is the server running with ",
              t_.Hint(), "?"));
        }
      } else if (now - sent_at > kResendNs) {
        if (sends >= kMaxSends) {
          return absl::DeadlineExceededError(absl::StrCat(
              "no reply to message ", seq, " after 50 tries 200 ms apart: is the server running?"));
        }
        // Sent again, written again: the clock runs on.
        ++sends;
        ++resent_;
        sent_at = now;
        if (s = Post(kind, seq, size, nullptr); !s.ok()) return s;
      }
    }
  }

  // Whether m is the reply to message `kind` `seq` (any kReport answers a kReportAsk).
  static bool Awaited(const Received& m, PingKind kind, uint64_t seq) {
    if (kind != PingKind::kReportAsk) return IsPingHeader(m.data, m.len, seq, kind);
    PingHeader h{};
    return ReadPingHeader(m.data, m.len, &h) &&
           h.kind == static_cast<uint32_t>(PingKind::kReport) && m.len >= kReportBytes;
  }

  // Writes message `kind` of `size` with `seq` (a kHello: this side's
  // address) into a free buffer and sends it; *written, if given, is when it
  // was written, as it is handed to the layer.
  absl::Status Post(PingKind kind, uint64_t seq, uint64_t size, uint64_t* written) {
    const size_t bytes = PingPayloadBytes(size);
    uint8_t* buf = nullptr;
    auto take = [&]() -> absl::StatusOr<bool> { return (buf = t_.Buffer(bytes)) != nullptr; };
    if (absl::Status s = Until(take, "no send buffer came free"); !s.ok()) return s;
    if constexpr (T::kHello) {
      if (kind == PingKind::kHello) {
        WriteHello(buf, t_.address().data(), static_cast<uint32_t>(t_.address().size()));
      } else {
        WritePing(buf, size, seq, kind);
      }
    } else {
      WritePing(buf, size, seq, kind);
    }
    if (written != nullptr) *written = NowNs();
    return Send(bytes);
  }

  // Sends the message Buffer or Data readied.
  absl::Status Send(size_t bytes, bool more = false) {
    return Until([&] { return t_.Send(bytes, more); }, "the endpoint refuses sends");
  }

  // Calls op (returning absl::StatusOr<bool>) until it returns true, with a
  // pass of the layer's progress between calls; gives up after 5 s, saying
  // `what`. The clock is read only once op has said "not now".
  template <class Op>
  absl::Status Until(Op&& op, const char* what) {
    uint64_t t0 = 0;
    for (SpinCheck spin;;) {
      absl::StatusOr<bool> done = op();
      if (!done.ok()) return done.status();
      if (*done) return absl::OkStatus();
      if (absl::Status s = t_.Progress(); !s.ok()) return s;
      if (t0 == 0) {
        t0 = NowNs();
      } else if (spin.Due() && NowNs() - t0 > kTimeoutNs) {
        return absl::DeadlineExceededError(
            absl::StrCat(what, " for 5 s: is the server running with ", t_.Hint(), "?"));
      }
    }
  }

  T& t_;
  Received msgs_[T::kBurst];
  uint64_t data_seq_ = 0;  // kData messages never repeat a sequence number within a run
  uint64_t resent_ = 0;
  bool more_ = false;  // PingOptions::more
};

}  // namespace bypass::tools

#endif  // BYPASS_TOOLS_PINGPONG_MACHINE_H_
