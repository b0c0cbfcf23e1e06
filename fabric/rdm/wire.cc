#include "fabric/rdm/wire.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "fabric/rdm/crc32c.h"
#include "sodium.h"

namespace bypass::rdm::wire {
namespace {

uint16_t Be16(uint16_t v) { return __builtin_bswap16(v); }
uint32_t Be32(uint32_t v) { return __builtin_bswap32(v); }
uint64_t Be64(uint64_t v) { return __builtin_bswap64(v); }
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the Be* helpers assume a little-endian host");

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// The 12-byte pseudo header: IPv4 source and destination, UDP ports.
void PseudoHeader(const driver::UdpFlow& flow, uint8_t* out) {
  const uint32_t src = Be32(flow.src_ip.value);
  const uint32_t dst = Be32(flow.dst_ip.value);
  const uint16_t sp = Be16(flow.src_port);
  const uint16_t dp = Be16(flow.dst_port);
  std::memcpy(out, &src, 4);
  std::memcpy(out + 4, &dst, 4);
  std::memcpy(out + 8, &sp, 2);
  std::memcpy(out + 10, &dp, 2);
}

// The CRC over the pseudo header (IPv4 addresses and UDP ports, so a
// corrupted address is caught too), the common header with crc taken as 0,
// and everything after it. `bypass` is the UDP payload.
uint32_t PacketCrc(const driver::UdpFlow& flow, const uint8_t* bypass, size_t len) {
  uint8_t pseudo[12];
  PseudoHeader(flow, pseudo);
  return Crc32cFinish(Crc32cPacket(pseudo, bypass, len, offsetof(CommonHeader, crc)));
}

CommonHeader Encode(const Common& c, size_t rest) {
  CommonHeader h;
  h.magic = Be16(kMagic);
  h.version = kVersion;
  h.type = static_cast<uint8_t>(c.type);
  h.flags = Be16(c.flags);
  h.credit = Be16(c.credit);
  h.src_incarnation = Be32(c.src_incarnation);
  h.dst_incarnation = Be32(c.dst_incarnation);
  h.auth_key = Be32(c.auth_key);
  h.psn = Be32(c.psn.value());
  h.ack_psn = Be32(c.ack_psn.value());
  h.length = Be16(static_cast<uint16_t>(rest));
  h.reserved = 0;
  h.crc = 0;
  return h;
}

// Where a type's MAC lies in its datagram (0: it has none).
size_t MacOffset(PacketType type) {
  if (type == PacketType::kReset) return sizeof(CommonHeader) + offsetof(ResetHeader, mac);
  const bool hello =
      type == PacketType::kHello || type == PacketType::kHelloAck || type == PacketType::kCookie;
  return hello ? sizeof(CommonHeader) + offsetof(HelloHeader, mac) : 0;
}

// HMAC-SHA-256 under key, truncated, of the addresses (as the CRC's pseudo
// header) and the datagram with its crc and mac taken as 0.
Mac ComputeMac(const driver::UdpFlow& flow, const uint8_t* bypass, size_t len, size_t mac_at,
               const MacKey& key) {
  uint8_t buf[12 + sizeof(CommonHeader) + sizeof(HelloHeader)];
  PseudoHeader(flow, buf);
  std::memcpy(buf + 12, bypass, len);
  std::memset(buf + 12 + offsetof(CommonHeader, crc), 0, 4);
  std::memset(buf + 12 + mac_at, 0, sizeof(Mac));
  uint8_t full[crypto_auth_hmacsha256_BYTES];
  crypto_auth_hmacsha256(full, buf, 12 + len, key.data());
  Mac m;
  std::memcpy(m.data(), full, m.size());
  return m;
}

// Writes common header + extension after the UDP header (the payload's
// `payload_len` bytes already follow them in the frame), the MAC (with a
// key, for the types that carry one), the CRC, then the UDP/IPv4/Ethernet
// headers. REQUIRES: Fits(ext_len, payload_len, frame). Inlined into each
// builder, where ext_len is a constant: the extension's copy is then a few
// moves, not a call (callgrind: 126 instructions a 64 B round trip when
// it was not).
__attribute__((always_inline)) inline size_t Seal(const driver::UdpFlow& flow, const Common& c,
                                                  const void* ext, size_t ext_len,
                                                  size_t payload_len, absl::Span<uint8_t> frame,
                                                  const MacKey* key = nullptr) {
  const size_t rest = ext_len + payload_len;
  const size_t datagram = sizeof(CommonHeader) + rest;
  uint8_t* b = frame.data() + kCommonOffset;
  const CommonHeader h = Encode(c, rest);
  std::memcpy(b, &h, sizeof(h));
  LibcCopy(b + sizeof(h), ext, ext_len);  // bounded: GCC would `rep movsq` the middle
  if (key != nullptr) SealMac(flow, {b, datagram}, *key);
  if ((c.flags & kFlagUnchecked) == 0) {
    const uint32_t crc = Be32(PacketCrc(flow, b, datagram));
    std::memcpy(b + offsetof(CommonHeader, crc), &crc, sizeof(crc));
  }
  return driver::WriteUdpHeaders(flow, datagram, frame, driver::UdpChecksumFill::kNone);
}

// Whether a packet of this extension and payload fits the protocol's
// limits and `frame`.
bool Fits(size_t ext_len, size_t payload_len, absl::Span<uint8_t> frame) {
  const size_t rest = ext_len + payload_len;
  const size_t datagram = sizeof(CommonHeader) + rest;
  return rest <= UINT16_MAX && datagram <= driver::kMaxUdpPayloadBytes &&
         frame.size() >= kUdpHeadersBytes + datagram;
}

// Seal, with the payload copied into place first.
size_t Finish(const driver::UdpFlow& flow, const Common& c, const void* ext, size_t ext_len,
              absl::Span<const uint8_t> payload, absl::Span<uint8_t> frame,
              const MacKey* key = nullptr) {
  if (!Fits(ext_len, payload.size(), frame)) return 0;
  if (!payload.empty()) {
    std::memcpy(frame.data() + kExtOffset + ext_len, payload.data(), payload.size());
  }
  return Seal(flow, c, ext, ext_len, payload.size(), frame, key);
}

MsgHeader EncodeMsg(const MsgFields& m) {
  MsgHeader e;
  e.msg_id = Be32(m.msg_id);
  e.msg_flags = Be16(m.msg_flags);
  e.protocol = static_cast<uint8_t>(m.protocol);
  e.reserved = 0;
  e.total_length = Be64(m.total_length);
  e.offset = Be64(m.offset);
  e.tag = Be64(m.tag);
  e.data = Be64(m.data);
  return e;
}

// Decodes a MsgHeader (no offer); false if a flag, the protocol or the
// reserved byte is out of range.
bool DecodeMsg(const MsgHeader& e, MsgFields* m) {
  m->msg_id = Be32(e.msg_id);
  m->msg_flags = Be16(e.msg_flags);
  m->total_length = Be64(e.total_length);
  m->offset = Be64(e.offset);
  m->tag = Be64(e.tag);
  m->data = Be64(e.data);
  m->offer_pid = 0;
  m->offer_addr = 0;
  m->offer_guard_addr = 0;
  m->offer_guard = 0;
  m->messages = 1;
  if ((m->msg_flags & ~kKnownMsgFlags) != 0 || e.reserved != 0 ||
      e.protocol > static_cast<uint8_t>(MsgProtocol::kRendezvous)) {
    return false;
  }
  m->protocol = static_cast<MsgProtocol>(e.protocol);
  return true;
}

// The bytes a whole message of a bundle carries after its header.
uint64_t BundledBytes(const MsgFields& m) {
  return (m.msg_flags & kMsgAbandoned) ? 0 : m.total_length;
}

// Whether a message may be in a bundle (kMsgBundle).
bool Bundleable(const MsgFields& m) {
  return m.protocol == MsgProtocol::kEager && m.offset == 0;
}

// How many messages the bundle carries, or 0 unless `payload`, after the
// first message's header, holds that message's bytes and then whole
// messages, each header valid, msg_ids consecutive, the last without
// kMsgBundle, ending at the payload's end.
uint32_t ValidBundle(const MsgFields& first, absl::Span<const uint8_t> payload) {
  MsgFields m = first;
  size_t at = 0;
  for (uint32_t n = 1;; ++n) {
    if (!Bundleable(m) || BundledBytes(m) > payload.size() - at) return 0;
    at += BundledBytes(m);
    if ((m.msg_flags & kMsgBundle) == 0) return at == payload.size() ? n : 0;
    if (payload.size() - at < sizeof(MsgHeader)) return 0;
    const uint32_t id = m.msg_id;
    if (!DecodeMsg(Load<MsgHeader>(payload.data() + at), &m) || m.msg_id != id + 1) return 0;
    at += sizeof(MsgHeader);
  }
}

}  // namespace

bool BundleReader::Next(MsgFields* m, absl::Span<const uint8_t>* bytes) {
  if (!more_) return false;
  *m = next_;
  more_ = (m->msg_flags & kMsgBundle) != 0;
  m->msg_flags &= static_cast<uint16_t>(~kMsgBundle);
  m->messages = 1;
  const size_t n = std::min<size_t>(BundledBytes(*m), rest_.size());
  *bytes = rest_.first(n);
  rest_.remove_prefix(n);
  if (more_) {
    // Parse checked the whole bundle; a short one ends here all the same.
    if (rest_.size() < sizeof(MsgHeader) ||
        !DecodeMsg(Load<MsgHeader>(rest_.data()), &next_)) {
      more_ = false;
      return true;
    }
    rest_.remove_prefix(sizeof(MsgHeader));
  }
  return true;
}

namespace {

// The atomic fields of an ATOMIC or ATOMIC_RESP (r decoded, payload_len
// its payload's size): one packet, known op and type, count elements in
// total_length, operands of the right size (PROTOCOL.md, "Atomics").
// Whether the op is defined on the type is the target's to answer.
bool ParseAtomic(RmaFields& r, size_t payload_len) {
  const uint32_t op = r.data & 0xff;
  const uint32_t type = (r.data >> 8) & 0xff;
  const uint32_t count = (r.data >> 16) & 0xffff;
  if ((r.data >> 32) != 0 || op >= kAtomicOps || type >= kAtomicTypes || count == 0 ||
      (r.flags & ~kRmaFlagFetch) != 0 || r.offset != 0) {
    return false;
  }
  r.atomic.op = static_cast<AtomicOp>(op);
  r.atomic.type = static_cast<AtomicType>(type);
  r.atomic.count = static_cast<uint16_t>(count);
  const uint64_t bytes = uint64_t{count} * AtomicTypeSize(r.atomic.type);
  if (bytes != r.total_length || bytes > kMaxAtomicBytes) return false;
  const bool fetch = (r.flags & kRmaFlagFetch) != 0;
  if (r.op == RmaOp::kAtomicResp) {
    return payload_len == 0 || (fetch && r.status == RmaStatus::kOk && payload_len == bytes);
  }
  const bool compares = AtomicCompares(r.atomic.op);
  if (r.status != RmaStatus::kOk || ((compares || r.atomic.op == AtomicOp::kRead) && !fetch)) {
    return false;
  }
  const uint64_t operands = r.atomic.op == AtomicOp::kRead ? 0 : compares ? 2 * bytes : bytes;
  return payload_len == operands;
}

}  // namespace

const char* ParseStatusName(ParseStatus s) {
  switch (s) {
    case ParseStatus::kOk:
      return "ok";
    case ParseStatus::kNotUdp:
      return "not an intact IPv4/UDP frame";
    case ParseStatus::kTooShort:
      return "shorter than the bypass header";
    case ParseStatus::kBadMagic:
      return "bad magic";
    case ParseStatus::kBadVersion:
      return "unsupported version";
    case ParseStatus::kBadType:
      return "unknown packet type";
    case ParseStatus::kBadLength:
      return "bad length";
    case ParseStatus::kBadField:
      return "field out of range";
    case ParseStatus::kBadChecksum:
      return "CRC-32C mismatch";
    case ParseStatus::kUnchecked:
      return "unchecked (no CRC) but not through memory only";
  }
  return "?";
}

namespace {
// Types that may travel without a CRC (kFlagUnchecked): all but the
// handshake and RESET, which are sent before the capability is known.
bool MayBeUnchecked(uint8_t raw_type) {
  return raw_type == static_cast<uint8_t>(PacketType::kData) ||
         raw_type == static_cast<uint8_t>(PacketType::kRma) ||
         raw_type == static_cast<uint8_t>(PacketType::kAck);
}
}  // namespace

ParseStatus Parse(absl::Span<const uint8_t> frame, View* out, bool intact) {
  const std::optional<driver::ParsedUdpFrame> udp = driver::ParseUdpFrame(frame);
  if (!udp) return ParseStatus::kNotUdp;
  const absl::Span<const uint8_t> d = udp->payload;
  if (d.size() < sizeof(CommonHeader)) return ParseStatus::kTooShort;
  const auto h = Load<CommonHeader>(d.data());
  if (Be16(h.magic) != kMagic) return ParseStatus::kBadMagic;
  if (h.version != kVersion) return ParseStatus::kBadVersion;
  // Types are numbered from 1 without gaps: a table, not DescribeType's switch.
  static constexpr std::optional<TypeInfo> kTypes[] = {
      DescribeType(0), DescribeType(1), DescribeType(2), DescribeType(3),
      DescribeType(4), DescribeType(5), DescribeType(6), DescribeType(7)};
  if (h.type >= std::size(kTypes) || !kTypes[h.type]) return ParseStatus::kBadType;
  const std::optional<TypeInfo>& info = kTypes[h.type];
  const size_t rest = Be16(h.length);
  if (rest != d.size() - sizeof(CommonHeader) || rest < info->ext_bytes ||
      (!info->has_payload && rest != info->ext_bytes)) {
    return ParseStatus::kBadLength;
  }
  const uint16_t flags = Be16(h.flags);
  if ((flags & ~kKnownFlags) != 0 || h.reserved != 0) return ParseStatus::kBadField;
  if ((flags & kFlagUnchecked) != 0) {
    if (!MayBeUnchecked(h.type) || h.crc != 0) return ParseStatus::kBadField;
    // A corrupted flag bit lands here too: only memory may skip the CRC.
    if (!intact) return ParseStatus::kUnchecked;
  } else if (Be32(h.crc) != PacketCrc(udp->flow, d.data(), d.size())) {
    return ParseStatus::kBadChecksum;
  }

  out->flow = udp->flow;
  Common& c = out->common;
  c.type = static_cast<PacketType>(h.type);
  c.flags = flags;
  c.credit = Be16(h.credit);
  c.src_incarnation = Be32(h.src_incarnation);
  c.dst_incarnation = Be32(h.dst_incarnation);
  c.auth_key = Be32(h.auth_key);
  c.psn = Psn(Be32(h.psn));
  c.ack_psn = Psn(Be32(h.ack_psn));
  if (c.src_incarnation == 0) return ParseStatus::kBadField;
  const uint8_t* ext = d.data() + sizeof(CommonHeader);
  out->payload = d.subspan(sizeof(CommonHeader) + info->ext_bytes);
  out->datagram = d;

  switch (c.type) {
    case PacketType::kHello:
    case PacketType::kHelloAck:
    case PacketType::kCookie: {
      const auto e = Load<HelloHeader>(ext);
      HelloFields& hf = out->hello;
      hf.capabilities = Be32(e.capabilities);
      if (e.reserved != 0 || (hf.capabilities & ~kKnownCapabilities) != 0 ||
          (c.type == PacketType::kCookie && hf.capabilities != 0)) {
        return ParseStatus::kBadField;
      }
      hf.max_datagram = Be16(e.max_datagram);
      hf.nonce = Be64(e.nonce);
      hf.echo = Be64(e.echo);
      std::memcpy(hf.cookie.data(), e.cookie, hf.cookie.size());
      std::memcpy(hf.mac.data(), e.mac, hf.mac.size());
      if (hf.max_datagram < kMinMaxDatagram) return ParseStatus::kBadField;
      // A HELLO or HELLO_ACK names its sender's nonce (never 0, so that no
      // echo of 0 proves anything); a HELLO echoes none, a COOKIE has none.
      if ((c.type == PacketType::kCookie) != (hf.nonce == 0) ||
          (c.type == PacketType::kHello && hf.echo != 0)) {
        return ParseStatus::kBadField;
      }
      break;
    }
    case PacketType::kReset: {
      const auto e = Load<ResetHeader>(ext);
      if (e.reserved[0] != 0 || e.reserved[1] != 0 || e.reserved[2] != 0) {
        return ParseStatus::kBadField;
      }
      if (e.reason != static_cast<uint8_t>(ResetReason::kUnknownIncarnation) &&
          e.reason != static_cast<uint8_t>(ResetReason::kNoSession)) {
        return ParseStatus::kBadField;
      }
      out->reset.reason = static_cast<ResetReason>(e.reason);
      out->reset.incarnation = Be32(e.incarnation);
      std::memcpy(out->reset.mac.data(), e.mac, out->reset.mac.size());
      break;
    }
    case PacketType::kAck: {
      const auto e = Load<AckHeader>(ext);
      for (size_t i = 0; i < 4; ++i) out->ack.sack[i] = Be64(e.sack[i]);
      out->ack.next_msg_id = Be32(e.next_msg_id);
      if (e.reserved != 0 || ((c.flags & kFlagRnr) == 0 && out->ack.next_msg_id != 0)) {
        return ParseStatus::kBadField;
      }
      if ((c.flags & kFlagAckValid) == 0) return ParseStatus::kBadField;
      break;
    }
    case PacketType::kData: {
      MsgFields& m = out->msg;
      if (!DecodeMsg(Load<MsgHeader>(ext), &m)) return ParseStatus::kBadField;
      if (m.msg_flags & kMsgBundle) {
        const uint32_t n = ValidBundle(m, out->payload);
        if (n == 0) return ParseStatus::kBadField;
        m.messages = static_cast<uint8_t>(std::min<uint32_t>(n, 255));
        break;
      }
      if (m.protocol == MsgProtocol::kRendezvous) {
        // A request to send is one packet: offset 0, no payload or an
        // InPlaceOffer naming the message's whole length.
        if (m.offset != 0) return ParseStatus::kBadField;
        if (out->payload.empty()) break;
        if (out->payload.size() != sizeof(InPlaceOfferWire)) return ParseStatus::kBadField;
        const auto o = Load<InPlaceOfferWire>(out->payload.data());
        m.offer_pid = Be32(o.pid);
        m.offer_addr = Be64(o.addr);
        m.offer_guard_addr = Be64(o.guard_addr);
        m.offer_guard = Be64(o.guard);
        if (m.offer_pid == 0 || o.reserved != 0 || Be64(o.length) != m.total_length ||
            (m.offer_guard_addr == 0) != (m.offer_guard == 0)) {
          return ParseStatus::kBadField;
        }
        out->payload = {};  // not the message's bytes
        break;
      }
      // offset + payload <= total, written so that nothing can overflow.
      if (m.offset > m.total_length || out->payload.size() > m.total_length - m.offset) {
        return ParseStatus::kBadField;
      }
      break;
    }
    case PacketType::kRma: {
      const auto e = Load<RmaHeader>(ext);
      RmaFields& r = out->rma;
      if (e.op < static_cast<uint8_t>(RmaOp::kWrite) ||
          e.op > static_cast<uint8_t>(RmaOp::kAtomicResp) || (e.flags & ~kKnownRmaFlags) != 0 ||
          e.reserved != 0 || e.status > kMaxRmaStatus) {
        return ParseStatus::kBadField;
      }
      r.op = static_cast<RmaOp>(e.op);
      r.flags = e.flags;
      r.status = static_cast<RmaStatus>(e.status);
      r.rma_id = Be32(e.rma_id);
      r.key = Be64(e.key);
      r.addr = Be64(e.addr);
      r.total_length = Be64(e.total_length);
      r.offset = Be64(e.offset);
      r.data = Be64(e.data);
      if (r.op == RmaOp::kAtomic || r.op == RmaOp::kAtomicResp) {
        if (!ParseAtomic(r, out->payload.size())) return ParseStatus::kBadField;
        break;
      }
      const bool carries = r.op == RmaOp::kWrite || r.op == RmaOp::kReadData;
      // Flags only where they mean something; status only in a RESPONSE;
      // requests and responses are one packet without payload.
      if (((r.flags & kRmaFlagRemoteData) != 0 && r.op != RmaOp::kWrite) ||
          (r.flags & kRmaFlagFetch) != 0 ||
          ((r.flags & kRmaFlagMessage) != 0 && r.op == RmaOp::kWrite) ||
          ((r.flags & kRmaFlagCopied) != 0 &&
           (r.op != RmaOp::kReadReq || (r.flags & kRmaFlagMessage) == 0)) ||
          ((r.flags & kRmaFlagVouched) != 0 && (r.flags & kRmaFlagCopied) == 0) ||
          (r.status != RmaStatus::kOk && r.op != RmaOp::kResponse) ||
          (!carries && (r.offset != 0 || !out->payload.empty()))) {
        return ParseStatus::kBadField;
      }
      // offset + payload <= total, written so that nothing can overflow.
      if (r.offset > r.total_length || out->payload.size() > r.total_length - r.offset) {
        return ParseStatus::kBadField;
      }
      break;
    }
  }
  return ParseStatus::kOk;
}

size_t BuildHello(const driver::UdpFlow& flow, const Common& c, const HelloFields& h,
                  const MacKey* key, absl::Span<uint8_t> frame) {
  HelloHeader e{};
  e.max_datagram = Be16(h.max_datagram);
  e.capabilities = Be32(h.capabilities);
  e.nonce = Be64(h.nonce);
  e.echo = Be64(h.echo);
  std::memcpy(e.cookie, h.cookie.data(), sizeof(e.cookie));
  return Finish(flow, c, &e, sizeof(e), {}, frame, key);
}

size_t BuildReset(const driver::UdpFlow& flow, const Common& c, const ResetFields& r,
                  const MacKey* key, absl::Span<uint8_t> frame) {
  ResetHeader e{};
  e.reason = static_cast<uint8_t>(r.reason);
  e.incarnation = Be32(r.incarnation);
  return Finish(flow, c, &e, sizeof(e), {}, frame, key);
}

bool SealMac(const driver::UdpFlow& flow, absl::Span<uint8_t> datagram, const MacKey& key) {
  if (datagram.size() < sizeof(CommonHeader)) return false;
  const size_t at = MacOffset(static_cast<PacketType>(datagram[offsetof(CommonHeader, type)]));
  if (at == 0 || datagram.size() != at + sizeof(Mac)) return false;
  const Mac m = ComputeMac(flow, datagram.data(), datagram.size(), at, key);
  std::memcpy(datagram.data() + at, m.data(), m.size());
  return true;
}

bool VerifyMac(const View& v, const MacKey* key) {
  const Mac& got = v.common.type == PacketType::kReset ? v.reset.mac : v.hello.mac;
  if (key == nullptr) return sodium_is_zero(got.data(), got.size()) == 1;
  const size_t at = MacOffset(v.common.type);
  if (at == 0 || v.datagram.size() != at + sizeof(Mac)) return false;
  const Mac want = ComputeMac(v.flow, v.datagram.data(), v.datagram.size(), at, *key);
  return crypto_verify_16(got.data(), want.data()) == 0;
}

size_t BuildAck(const driver::UdpFlow& flow, const Common& c, const AckFields& a,
                absl::Span<uint8_t> frame) {
  AckHeader e;
  for (size_t i = 0; i < 4; ++i) e.sack[i] = Be64(a.sack[i]);
  e.next_msg_id = Be32((c.flags & kFlagRnr) ? a.next_msg_id : 0);
  e.reserved = 0;
  return Finish(flow, c, &e, sizeof(e), {}, frame);
}

size_t BuildData(const driver::UdpFlow& flow, const Common& c, const MsgFields& m,
                 absl::Span<const uint8_t> payload, absl::Span<uint8_t> frame) {
  const MsgHeader e = EncodeMsg(m);
  if (m.protocol == MsgProtocol::kRendezvous && m.offer_pid != 0) {
    InPlaceOfferWire o;
    o.pid = Be32(m.offer_pid);
    o.reserved = 0;
    o.addr = Be64(m.offer_addr);
    o.length = Be64(m.total_length);
    o.guard_addr = Be64(m.offer_guard_addr);
    o.guard = Be64(m.offer_guard);
    return Finish(flow, c, &e, sizeof(e),
                  {reinterpret_cast<const uint8_t*>(&o), sizeof(o)}, frame);
  }
  return Finish(flow, c, &e, sizeof(e), payload, frame);
}

bool BundleWriter::Add(const MsgFields& m, absl::Span<const uint8_t> bytes) {
  const size_t header = count_ > 0 ? sizeof(MsgHeader) : 0;
  if (!Fits(sizeof(MsgHeader), end_ + header + bytes.size(), frame_)) return false;
  MsgFields f = m;
  f.msg_flags |= kMsgBundle;
  const MsgHeader e = EncodeMsg(f);
  uint8_t* payload = frame_.data() + kDataHeadersBytes;
  if (count_ == 0) {
    first_ = e;
  } else {
    last_ = end_;
    std::memcpy(payload + end_, &e, sizeof(e));
  }
  end_ += header;
  if (!bytes.empty()) LibcCopy(payload + end_, bytes.data(), bytes.size());
  end_ += bytes.size();
  ++count_;
  return true;
}

size_t BundleWriter::Finish(const driver::UdpFlow& flow, const Common& c) {
  if (count_ < 2) return 0;
  // The last message has no kMsgBundle.
  uint8_t* last = frame_.data() + kDataHeadersBytes + last_ + offsetof(MsgHeader, msg_flags);
  uint16_t flags;
  std::memcpy(&flags, last, sizeof(flags));
  flags = Be16(static_cast<uint16_t>(Be16(flags) & ~kMsgBundle));
  std::memcpy(last, &flags, sizeof(flags));
  return Seal(flow, c, &first_, sizeof(first_), end_, frame_);
}

size_t BuildBundle(const driver::UdpFlow& flow, const Common& c,
                   absl::Span<const BundledMsg> msgs, absl::Span<uint8_t> frame) {
  BundleWriter w(frame);
  for (const BundledMsg& b : msgs) {
    if (!w.Add(b.m, b.bytes)) return 0;
  }
  return w.Finish(flow, c);
}

size_t BuildRma(const driver::UdpFlow& flow, const Common& c, const RmaFields& r,
                absl::Span<const uint8_t> payload, absl::Span<uint8_t> frame) {
  RmaHeader e;
  e.op = static_cast<uint8_t>(r.op);
  e.flags = r.flags;
  e.status = static_cast<uint8_t>(r.status);
  e.reserved = 0;
  e.rma_id = Be32(r.rma_id);
  e.key = Be64(r.key);
  e.addr = Be64(r.addr);
  e.total_length = Be64(r.total_length);
  e.offset = Be64(r.offset);
  const bool atomic = r.op == RmaOp::kAtomic || r.op == RmaOp::kAtomicResp;
  e.data = Be64(atomic ? PackAtomic(r.atomic) : r.data);
  return Finish(flow, c, &e, sizeof(e), payload, frame);
}

std::string ToString(const View& v) {
  const Common& c = v.common;
  const std::optional<TypeInfo> info = DescribeType(static_cast<uint8_t>(c.type));
  std::string s = absl::StrFormat(
      "%s %s:%d->%s:%d psn=%u ack=%u%s credit=%u src=0x%08x dst=0x%08x flags=0x%x",
      info ? info->name : "?", v.flow.src_ip.ToString(), v.flow.src_port, v.flow.dst_ip.ToString(),
      v.flow.dst_port, c.psn.value(), c.ack_psn.value(), (c.flags & kFlagAckValid) ? "" : "(none)",
      c.credit, c.src_incarnation, c.dst_incarnation, c.flags);
  if (c.type == PacketType::kData) {
    absl::StrAppendFormat(&s, " msg=%u off=%u/%u len=%u tag=0x%x data=0x%x mflags=0x%x",
                          v.msg.msg_id, v.msg.offset, v.msg.total_length, v.payload.size(),
                          v.msg.tag, v.msg.data, v.msg.msg_flags);
    if (v.msg.offer_pid != 0) {
      absl::StrAppendFormat(&s, " offer=%u@0x%x", v.msg.offer_pid, v.msg.offer_addr);
    }
    if (v.msg.msg_flags & kMsgBundle) {
      BundleReader r(v.msg, v.payload);
      MsgFields m;
      absl::Span<const uint8_t> bytes;
      size_t n = 0;
      while (r.Next(&m, &bytes)) ++n;
      absl::StrAppendFormat(&s, " bundle=%u msgs (to msg=%u)", n, m.msg_id);
    }
  } else if (c.type == PacketType::kRma) {
    absl::StrAppendFormat(&s, " rma op=%u id=%u key=0x%x addr=0x%x off=%u/%u len=%u status=%u rflags=0x%x",
                          static_cast<unsigned>(v.rma.op), v.rma.rma_id, v.rma.key, v.rma.addr,
                          v.rma.offset, v.rma.total_length, v.payload.size(),
                          static_cast<unsigned>(v.rma.status), v.rma.flags);
  } else if (c.type == PacketType::kHello || c.type == PacketType::kHelloAck ||
             c.type == PacketType::kCookie) {
    absl::StrAppendFormat(&s, " max_datagram=%u nonce=0x%x echo=0x%x", v.hello.max_datagram,
                          v.hello.nonce, v.hello.echo);
  }
  return s;
}

}  // namespace bypass::rdm::wire
