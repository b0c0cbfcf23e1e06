// Fuzz target over the packet parser and the engine's dispatcher. The input
// is a script of records, each [op][len:2] followed by len bytes for ops 0
// and 1:
//   op % 4 == 0  bytes are a whole frame, as received
//   op % 4 == 1  bytes are a bypass datagram, wrapped in good Ethernet/IPv4/
//                UDP headers from the peer; with op & 4 its incarnations are
//                set to the live ones, with op & 8 its ack_psn to the
//                engine's last PSN, with op & 16 its CRC is made good, and
//                with op & 32 it arrives with kRxSameHost and kRxIntact (an
//                UNCHECKED packet is taken without a CRC; an offer to read
//                in place is acted on: the peer's "memory" is kPeerMem
//                bytes at kPeerBase of process kPeerPid, read without a
//                system call); with op & 64 a HELLO echoes the last cookie
//                the engine sent and a HELLO_ACK or COOKIE the nonce of the
//                engine's last HELLO (so the proven paths are reached), and
//                in a keyed run the MAC is made good too
//   op % 4 == 2  the clock moves len microseconds and timers run
//   op % 4 == 3  a receive (op & 4) of len bytes is posted; else, by
//                op & 24: 0 a send (messages over 512 bytes go by
//                rendezvous), 8 an RMA write, 16 an RMA read of the peer's
//                region kPeerKey, 24 with op & 32 an atomic on kPeerKey (op
//                len % 19, datatype len / 19 % 16, one element, fetching
//                with op & 64), else the local region kLocalKey (4 KiB, both
//                rights) is deregistered or registered again
// After each record every frame the engine wants to send is built (and read
// back through the parser), and every packet it releases is freed. An input
// starting with 0xff is a keyed run (handshake_key set; the byte is skipped).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "driver/device.h"
#include "driver/net_headers.h"
#include "driver/packet.h"
#include "fabric/rdm/crc32c.h"
#include "fabric/rdm/engine.h"
#include "fabric/rdm/inbox.h"
#include "fabric/rdm/wire.h"

namespace bypass::rdm {
namespace {

constexpr uint32_t kSelfInc = 0xa0a0a0a0;
constexpr uint32_t kPeerInc = 0xb0b0b0b0;
constexpr uint32_t kFrameCap = 1514;
constexpr uint64_t kLocalKey = 0x1234;  // peers' WRITE and READ_REQ name it
constexpr uint64_t kPeerKey = 0x5678;
constexpr uint32_t kSelfPid = 4242;  // offered in our requests to send
constexpr uint32_t kPeerPid = 7;
constexpr uint64_t kPeerBase = 0x10000;
constexpr size_t kPeerMem = 8192;

driver::Packet* NewPacket() {
  auto* p = new driver::Packet{};
  p->data = new uint8_t[kFrameCap];
  p->capacity = kFrameCap;
  return p;
}

void FreePacket(driver::Packet* p) {
  delete[] p->data;
  delete p;
}

// The state of one run.
class Harness {
 public:
  explicit Harness(bool keyed) : keyed_(keyed) {
    self_.mac = {{0x02, 0, 0, 0, 0, 0xa}};
    self_.ip = {0x0a000001};
    peer_.mac = {{0x02, 0, 0, 0, 0, 0xb}};
    peer_.ip = {0x0a000002};
    peer_.udp_port = 6000;
    peer_.incarnation = kPeerInc;
    DeviceParams dev{self_.mac, self_.ip, 1500, kFrameCap, 64};
    dev.pid = kSelfPid;
    dev.read_peer_memory = &Harness::ReadPeer;
    dev.read_peer_memory_arg = this;
    EndpointConfig c;
    c.udp_port = 5000;
    c.incarnation = kSelfInc;
    c.random_seed = 1;
    c.max_peers = 4;
    c.max_send_ops = 8;
    c.max_posted_recvs = 8;
    c.inject_size = 64;
    c.max_msg_size = 1u << 20;
    c.rendezvous_threshold = 512;
    c.max_regions = 2;
    c.max_rma_ops = 2;  // small, so that peers' requests find none free
    c.window_packets = 16;
    c.max_unexpected_msgs = 4;
    c.unexpected_bytes = 16 * 1024;
    c.unexpected_chunk_bytes = 256;
    c.rto_max_ns = 10'000'000;
    c.peer_timeout_ns = 50'000'000;
    if (keyed_) c.handshake_key = key_;
    engine_ = *Engine::Create(dev, c);
    peer_id_ = *engine_->InsertPeer(peer_);
    Register();
  }
  ~Harness() {
    engine_->ReleaseAll();
    FreeReleased();
  }

  void Run(const uint8_t* data, size_t size) {
    while (size >= 3) {
      const uint8_t op = data[0];
      const size_t field = size_t{data[1]} << 8 | data[2];
      // Records 0 and 1 carry `field` bytes; 2 and 3 only the number.
      const size_t len = op % 4 < 2 ? std::min(size - 3, field) : field;
      const size_t record = op % 4 < 2 ? 3 + len : 3;
      const uint8_t* bytes = data + 3;
      switch (op % 4) {
        case 0:
          Receive(bytes, len);
          break;
        case 1:
          ReceiveDatagram(op, bytes, len);
          break;
        case 2:
          now_ += len * 1000;
          engine_->SetNow(now_);
          engine_->RunTimers();
          break;
        case 3:
          Post(op, len);
          break;
      }
      FreeReleased();
      Transmit();
      data += record;
      size -= record;
    }
  }

 private:
  void Receive(const uint8_t* bytes, size_t len) {
    if (len > kFrameCap) len = kFrameCap;
    driver::Packet* p = NewPacket();
    std::memcpy(p->data, bytes, len);
    p->len = static_cast<uint32_t>(len);
    engine_->HandleRx({&p, 1});
  }

  void ReceiveDatagram(uint8_t op, const uint8_t* bytes, size_t len) {
    if (len > kFrameCap - wire::kUdpHeadersBytes) len = kFrameCap - wire::kUdpHeadersBytes;
    std::vector<uint8_t> d(bytes, bytes + len);
    if (d.size() >= sizeof(wire::CommonHeader)) {
      if (op & 4) {
        Store32(&d[offsetof(wire::CommonHeader, src_incarnation)], kPeerInc);
        Store32(&d[offsetof(wire::CommonHeader, dst_incarnation)], kSelfInc);
      }
      if (op & 8) Store32(&d[offsetof(wire::CommonHeader, ack_psn)], last_psn_);
      if (op & 64) Prove(d);
      if (op & 16) {
        std::memset(&d[offsetof(wire::CommonHeader, crc)], 0, 4);
        const uint8_t pseudo[12] = {10, 0, 0,         2,           10,        0,
                                    0,  1, 6000 >> 8, 6000 & 0xff, 5000 >> 8, 5000 & 0xff};
        uint32_t s = Crc32cExtend(kCrc32cInit, pseudo, sizeof(pseudo));
        s = Crc32cExtend(s, d.data(), d.size());
        Store32(&d[offsetof(wire::CommonHeader, crc)], Crc32cFinish(s));
      }
    }
    driver::UdpFlow flow{peer_.mac, self_.mac, peer_.ip, self_.ip, 6000, 5000, 0};
    driver::Packet* p = NewPacket();
    p->len = static_cast<uint32_t>(
        driver::BuildUdpFrame(flow, d, {p->data, p->capacity}, driver::UdpChecksumFill::kNone));
    if (op & 32) p->ol_flags = driver::kRxSameHost | driver::kRxIntact;
    engine_->HandleRx({&p, 1});
  }

  // Puts the proofs the engine asked for into a handshake datagram (see
  // the top), and in a keyed run its MAC.
  void Prove(std::vector<uint8_t>& d) {
    constexpr size_t kExt = sizeof(wire::CommonHeader);
    const auto type = static_cast<wire::PacketType>(d[offsetof(wire::CommonHeader, type)]);
    if (d.size() >= kExt + sizeof(wire::HelloHeader)) {
      if (type == wire::PacketType::kHello) {
        std::memcpy(&d[kExt + offsetof(wire::HelloHeader, cookie)], last_cookie_.data(), 16);
      } else if (type == wire::PacketType::kHelloAck || type == wire::PacketType::kCookie) {
        const size_t echo = kExt + offsetof(wire::HelloHeader, echo);
        Store32(&d[echo], static_cast<uint32_t>(last_nonce_ >> 32));
        Store32(&d[echo + 4], static_cast<uint32_t>(last_nonce_));
      }
    }
    if (keyed_) {
      const driver::UdpFlow flow{peer_.mac, self_.mac, peer_.ip, self_.ip, 6000, 5000, 0};
      wire::SealMac(flow, absl::MakeSpan(d), key_);
    }
  }

  // The peer process's memory as the engine reads it in place.
  static int64_t ReadPeer(void* arg, uint32_t pid, absl::Span<const driver::PeerRange> ranges) {
    Harness* h = static_cast<Harness*>(arg);
    if (pid != kPeerPid) return -3;  // -ESRCH
    int64_t total = 0;
    for (const driver::PeerRange& r : ranges) {
      if (r.addr < kPeerBase || r.addr - kPeerBase > kPeerMem ||
          r.len > kPeerMem - (r.addr - kPeerBase)) {
        return total == 0 ? -14 : total;  // -EFAULT
      }
      std::memcpy(r.dst, h->peer_mem_ + (r.addr - kPeerBase), r.len);
      total += static_cast<int64_t>(r.len);
    }
    return total;
  }

  void Register() {
    registered_ = engine_->RegisterRegion({.addr = region_,
                                          .len = sizeof(region_),
                                          .access = kAccessRemoteRead | kAccessRemoteWrite,
                                          .key = kLocalKey})
                      .ok();
  }

  void Post(uint8_t op, size_t len) {
    len %= sizeof(buf_[0]) + 1;
    if (op & 4) {
      RecvRequest r{.buf = buf_[next_buf_ % 4],
                    .len = len,
                    .tagged = (op & 8) != 0,
                    .tag = len,
                    .ignore = (op & 16) ? ~uint64_t{0} : 0};
      ++next_buf_;
      engine_->PostRecv(r);
    } else if ((op & 24) == 0) {
      SendRequest r{.dest = peer_id_,
                    .buf = out_,
                    .len = len,
                    .tag = len,
                    .data = op,
                    .flags = static_cast<uint32_t>(op >> 5)};
      engine_->PostSend(r);
    } else if ((op & 24) == 8) {
      // op bits 5 and 6: kRmaRemoteData, kRmaInject.
      engine_->PostWrite({.dest = peer_id_,
                          .buf = out_,
                          .len = len,
                          .addr = op,
                          .key = kPeerKey,
                          .data = len,
                          .flags = static_cast<uint32_t>((op >> 5) & 3)});
    } else if ((op & 24) == 16) {
      engine_->PostRead({.dest = peer_id_, .buf = read_buf_, .len = len, .addr = op, .key = kPeerKey});
    } else if (op & 32) {
      const bool fetch = (op & 64) != 0;
      engine_->PostAtomic({.dest = peer_id_,
                           .op = static_cast<AtomicOp>(len % kAtomicOps),
                           .type = static_cast<AtomicType>(len / kAtomicOps % kAtomicTypes),
                           .count = 1,
                           .operand = out_,
                           .compare = out_ + 64,
                           .result = fetch ? read_buf_ : nullptr,
                           .fetch = fetch,
                           .key = kPeerKey});
    } else if (registered_) {
      registered_ = !engine_->DeregisterRegion(kLocalKey).ok();  // refused while reads stream
    } else {
      Register();
    }
  }

  void Transmit() {
    for (int rounds = 0; rounds < 8 && engine_->HasTxWork(); ++rounds) {
      driver::Packet* bufs[16];
      for (driver::Packet*& b : bufs) b = NewPacket();
      const size_t n = engine_->BuildTx(bufs);
      for (size_t i = 0; i < n; ++i) {
        wire::View v;
        if (wire::Parse({bufs[i]->data, bufs[i]->len}, &v, /*intact=*/true) !=
            wire::ParseStatus::kOk) {
          __builtin_trap();  // the engine built a frame its own parser rejects
        }
        const bool sequenced =
            v.common.type == wire::PacketType::kData || v.common.type == wire::PacketType::kRma;
        if (sequenced || v.common.type == wire::PacketType::kHello) {
          last_psn_ = v.common.psn.value() + (sequenced ? 1 : 0);
        }
        if (v.common.type == wire::PacketType::kHello) last_nonce_ = v.hello.nonce;
        if (v.common.type == wire::PacketType::kCookie) last_cookie_ = v.hello.cookie;
        const bool handshake = v.common.type == wire::PacketType::kHello ||
                               v.common.type == wire::PacketType::kHelloAck ||
                               v.common.type == wire::PacketType::kCookie ||
                               v.common.type == wire::PacketType::kReset;
        if (handshake && !wire::VerifyMac(v, keyed_ ? &key_ : nullptr)) {
          __builtin_trap();  // the engine built a handshake its own check refuses
        }
      }
      for (driver::Packet* b : bufs) FreePacket(b);
      if (n == 0) break;
    }
    Completion c[8];
    while (engine_->PollCompletions(c) > 0) {
    }
    ErrorCompletion e[8];
    while (engine_->PollErrors(e) > 0) {
    }
  }

  void FreeReleased() {
    for (driver::Packet* p : engine_->released()) FreePacket(p);
    engine_->ClearReleased();
  }

  static void Store32(uint8_t* at, uint32_t v) {
    at[0] = static_cast<uint8_t>(v >> 24);
    at[1] = static_cast<uint8_t>(v >> 16);
    at[2] = static_cast<uint8_t>(v >> 8);
    at[3] = static_cast<uint8_t>(v);
  }

  const bool keyed_;
  const wire::MacKey key_{{0x6b, 0x65, 0x79}};
  uint64_t last_nonce_ = 0;
  wire::Cookie last_cookie_{};
  Address self_;
  Address peer_;
  std::unique_ptr<Engine> engine_;
  PeerId peer_id_;
  uint64_t now_ = 0;
  uint32_t last_psn_ = 0;
  uint8_t buf_[4][4096] = {};
  uint32_t next_buf_ = 0;
  uint8_t out_[4096] = {};
  uint8_t read_buf_[4096] = {};
  uint8_t region_[4096] = {};
  uint8_t peer_mem_[kPeerMem] = {};
  bool registered_ = false;
};

// The Port's peek (the destination it demultiplexes and multicasts by)
// agrees with the full parse on every frame the parse accepts.
void CheckPeek(const uint8_t* data, size_t size) {
  const std::optional<driver::ParsedUdpFrame> f = driver::ParseUdpFrame({data, size});
  if (!f) return;
  const std::optional<UdpDst> d = PeekUdpDst(data, static_cast<uint32_t>(size));
  if (!d || d->ip != f->flow.dst_ip.value || d->port != f->flow.dst_port) __builtin_trap();
}

}  // namespace
}  // namespace bypass::rdm

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bypass::rdm::CheckPeek(data, size);
  const bool keyed = size > 0 && data[0] == 0xff;
  bypass::rdm::Harness h(keyed);
  h.Run(data + (keyed ? 1 : 0), size - (keyed ? 1 : 0));
  return 0;
}
