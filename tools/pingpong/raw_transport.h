// The raw layer's transports (machine.h): the server's and the client's,
// over one queue pair of a device. A header so that tools/bare:raw_cost can
// count the instructions of their round trip against bare DPDK's in one
// process; pingpong runs them through raw.cc.
#ifndef BYPASS_TOOLS_PINGPONG_RAW_TRANSPORT_H_
#define BYPASS_TOOLS_PINGPONG_RAW_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "driver/device.h"
#include "driver/net_headers.h"
#include "tools/ping_wire.h"
#include "tools/pingpong/machine.h"
#include "tools/pingpong/raw.h"

namespace bypass::tools::raw {

using driver::Packet;

// The ping payload of a frame (inside p's buffer), or nullptr if the frame is
// not a well-formed UDP frame to the ping port. Header checks only, like the
// bare baseline's: the ping pattern verifies the payload end to end.
inline uint8_t* PingPayload(Packet* p, size_t* len) {
  const std::optional<driver::UdpFrameLayout> f = driver::LocateUdpFrame({p->data, p->len});
  if (!f) return nullptr;
  uint8_t* udp = p->data + sizeof(driver::EthernetHeader) + f->ipv4_header_bytes;
  if (((udp[2] << 8) | udp[3]) != kPingUdpPort) return nullptr;  // destination port
  *len = f->udp_bytes - sizeof(driver::UdpHeader);
  return udp + sizeof(driver::UdpHeader);
}

inline driver::UdpFlow FlowTo(const driver::Device& dev, const PingOptions& opts) {
  driver::UdpFlow f;
  f.src_mac = dev.info().mac;
  f.dst_mac = opts.peer_mac;
  f.src_ip = dev.info().ipv4;
  f.dst_ip = opts.peer_ip;
  f.src_port = kPingUdpPort;
  f.dst_port = kPingUdpPort;
  return f;
}

// Writes the headers of a frame carrying `payload` bytes into p and returns
// where the payload goes. No UDP checksum: the ping pattern is verified end
// to end instead.
inline uint8_t* Frame(Packet* p, const driver::UdpFlow& flow, size_t payload) {
  p->len = static_cast<uint32_t>(driver::WriteUdpHeaders(flow, payload, {p->data, p->capacity},
                                                         driver::UdpChecksumFill::kNone));
  return p->data + driver::kUdpFrameHeaderBytes;
}

// Transmits all of pkts, spinning while the ring is full.
inline void SendAll(driver::QueuePair& qp, Packet** pkts, uint16_t n) {
  uint16_t done = 0;
  while (done < n) done += qp.TxBurst(absl::MakeConstSpan(pkts + done, n - done));
}

// Why a message of `size` cannot go as one frame of dev (empty: it can).
inline std::string CannotCarry(const driver::Device& dev, uint64_t size) {
  const uint64_t max_payload = dev.info().mtu - 28;
  if (PingPayloadBytes(size) <= max_payload) return "";
  return absl::StrCat("raw sends one frame per message and ", size, " B does not fit one frame of ",
                      dev.info().driver, " (MTU ", dev.info().mtu, ", payload up to ", max_payload,
                      " B): use --layer=rdm for larger messages");
}

// The server's transport (machine.h: Serve) on the raw layer: the frames of
// the device's queue, echoed in place; what is dropped is freed once a burst.
class RawServer {
 public:
  struct Msg {
    uint8_t* data;
    size_t len;
    Packet* frame;
  };
  static constexpr size_t kBurst = 32;
  static constexpr bool kHello = false;
  static constexpr uint64_t kFinLingerNs = 0;  // nothing to acknowledge

  explicit RawServer(driver::QueuePair& qp) : qp_(qp) {}
  RawServer(const RawServer&) = delete;
  RawServer& operator=(const RawServer&) = delete;
  ~RawServer() { Flush().IgnoreError(); }

  absl::Status Flush() {
    if (ndrop_ != 0) qp_.FreeBulk(absl::MakeConstSpan(drop_, ndrop_));
    if (ntx_ != 0) SendAll(qp_, tx_, ntx_);
    ndrop_ = ntx_ = 0;
    return absl::OkStatus();
  }
  bool Idle() const { return ntx_ == 0; }
  absl::StatusOr<size_t> Poll(Msg* out) {
    Packet* rx[kBurst];
    const uint16_t n = qp_.RxBurst(absl::MakeSpan(rx));
    size_t k = 0;
    for (uint16_t i = 0; i < n; ++i) {
      size_t len = 0;
      uint8_t* payload = PingPayload(rx[i], &len);
      if (payload == nullptr) {
        drop_[ndrop_++] = rx[i];
      } else {
        out[k++] = Msg{payload, len, rx[i]};
      }
    }
    return k;
  }
  void Release(Msg& m) { drop_[ndrop_++] = m.frame; }
  void Reply(Msg& m) {
    driver::ReverseUdpFrame(m.frame->data);
    // The payload may have changed (a kReport): no UDP checksum, as the
    // clients send none.
    std::memset(m.data - sizeof(driver::UdpHeader) + offsetof(driver::UdpHeader, checksum), 0,
                sizeof(uint16_t));
    tx_[ntx_++] = m.frame;
  }
  void OpenWindow() {}  // the ring needs no receives posted

 private:
  driver::QueuePair& qp_;
  // Flush runs before every Poll, and a Poll's frames are each dropped or sent once.
  Packet* drop_[kBurst];
  Packet* tx_[kBurst];
  uint16_t ndrop_ = 0, ntx_ = 0;
};

// The client's transport (machine.h: PingClient) on the raw layer: one frame
// a message, nothing acknowledged. Frames are allocated a burst at a time
// (pings too: one AllocBulk per `burst` pings rather than one per ping), and
// a frame's 42 bytes of headers are copied from the previous frame's when
// its length is the same rather than written field by field. Data frames go
// a burst at a time, and the receive ring is drained after each burst so it
// never backs up.
class RawClient {
 public:
  static constexpr bool kReliable = false;
  static constexpr bool kHello = false;
  static constexpr size_t kBurst = 32;

  RawClient(driver::Device& dev, const PingOptions& opts)
      : dev_(dev), qp_(dev.queue(0)), flow_(FlowTo(dev, opts)), burst_(opts.burst) {}
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;
  ~RawClient() {
    Flush();
    if (nstash_ != 0) qp_.FreeBulk(absl::MakeConstSpan(stash_, nstash_));
  }

  std::string Cannot(uint64_t size) const { return CannotCarry(dev_, size); }
  std::string Hint() const { return "--layer=raw"; }
  uint32_t window() const { return burst_; }
  uint64_t max_inflight_bytes() const { return 0; }
  uint32_t InFlight() const { return 0; }
  absl::Status Progress() {
    SendPending(true);
    return absl::OkStatus();
  }
  absl::StatusOr<bool> ArmReply() { return true; }  // frames arrive in the ring
  uint8_t* Buffer(size_t len) {
    if (!Take()) return nullptr;
    data_ = false;
    return Headers(len);
  }
  bool Data(uint64_t size, uint64_t seq) {
    if (!Take()) return false;
    WritePing(Headers(PingPayloadBytes(size)), size, seq, PingKind::kData);
    data_ = true;
    return true;
  }
  absl::StatusOr<bool> Send(size_t /*len*/, bool /*more: raw holds a burst anyway*/ = false) {
    pending_[npending_++] = next_;
    if (!data_) {
      SendPending(false);  // at once, and the ring keeps its reply
    } else if (npending_ == burst_) {
      SendPending(true);
    }
    return true;
  }
  void Flush() {
    if (npending_ != 0) SendPending(true);
  }
  absl::StatusOr<size_t> Poll(Received* out) {
    nrx_ = qp_.RxBurst(absl::MakeSpan(rx_));
    size_t k = 0;
    for (uint16_t i = 0; i < nrx_; ++i) {
      size_t len = 0;
      const uint8_t* payload = PingPayload(rx_[i], &len);
      if (payload != nullptr) out[k++] = Received{payload, len};
    }
    return k;
  }
  void Release() {
    if (nrx_ != 0) qp_.FreeBulk(absl::MakeConstSpan(rx_, nrx_));
    nrx_ = 0;
  }

 private:
  // Makes next_ an empty frame from the stash, refilled a burst at a time.
  bool Take() {
    if (nstash_ == 0) {
      if (!qp_.AllocBulk(absl::MakeSpan(stash_, burst_))) return false;
      nstash_ = burst_;
    }
    next_ = stash_[--nstash_];
    return true;
  }

  // Frame() for next_, from the cached headers when the payload's length
  // is the one they were written for (the flow never changes).
  uint8_t* Headers(size_t payload) {
    Packet* p = next_;
    if (payload == header_payload_ && p->capacity >= driver::kUdpFrameHeaderBytes + payload) {
      std::memcpy(p->data, header_, sizeof(header_));
      p->len = static_cast<uint32_t>(driver::kUdpFrameHeaderBytes + payload);
      return p->data + driver::kUdpFrameHeaderBytes;
    }
    uint8_t* at = Frame(p, flow_, payload);
    if (p->len != 0) {
      std::memcpy(header_, p->data, sizeof(header_));
      header_payload_ = payload;
    }
    return at;
  }

  // Transmits what is pending; with `drain`, then frees whatever arrived.
  void SendPending(bool drain) {
    SendAll(qp_, pending_, npending_);
    npending_ = 0;
    if (!drain) return;
    const uint16_t r = qp_.RxBurst(absl::MakeSpan(rx_));
    if (r != 0) qp_.FreeBulk(absl::MakeConstSpan(rx_, r));
  }

  driver::Device& dev_;
  driver::QueuePair& qp_;
  const driver::UdpFlow flow_;
  const uint32_t burst_;  // 1..32
  Packet* next_ = nullptr;
  bool data_ = false;
  Packet* pending_[kBurst];
  uint16_t npending_ = 0;
  Packet* stash_[kBurst];  // allocated frames not yet written
  uint32_t nstash_ = 0;
  uint8_t header_[driver::kUdpFrameHeaderBytes];  // the last headers Frame wrote
  size_t header_payload_ = SIZE_MAX;              // the payload length they say
  Packet* rx_[kBurst];
  uint16_t nrx_ = 0;
};

}  // namespace bypass::tools::raw

#endif  // BYPASS_TOOLS_PINGPONG_RAW_TRANSPORT_H_
