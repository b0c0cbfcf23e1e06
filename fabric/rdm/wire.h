// The bypass wire format (fabric/rdm/PROTOCOL.md): the bypass header that
// follows Ethernet + IPv4 + UDP, one extension header per packet type, the
// parser that treats every received byte as hostile, and the builders.
// Wire structs are packed, big-endian, without bitfields; the engine sees
// only the decoded host-order forms.
#ifndef BYPASS_FABRIC_RDM_WIRE_H_
#define BYPASS_FABRIC_RDM_WIRE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "absl/types/span.h"
#include "driver/net_headers.h"
#include "fabric/rdm/psn.h"
#include "fabric/rdm/config.h"
#include "fabric/rdm/types.h"

namespace bypass::rdm::wire {

// memcpy through libc's function, never expanded inline: for a size GCC
// knows or bounds between 33 B and 8 KiB its generic tuning emits `rep
// movsq`/`rep stosq`, whose start-up on this AMD machine (23-25 ns for 264
// bytes, against 6 ns for the call) outweighs the copy. The size goes
// through an empty asm, so that GCC cannot see it.
inline void LibcCopy(void* dst, const void* src, size_t n) {
  asm("" : "+r"(n));
  std::memcpy(dst, src, n);
}

inline constexpr uint16_t kMagic = 0x4259;  // "BY"
inline constexpr uint8_t kVersion = kWireVersion;

// What a packet is. Values are never reused once retired (PROTOCOL.md).
enum class PacketType : uint8_t {
  kHello = 1,     // first contact: incarnation, initial PSN, receive window
  kHelloAck = 2,  // the answer to a HELLO, same fields
  kReset = 3,     // "I have no session for your incarnation": tear yours down
  kAck = 4,       // standalone cumulative ACK with a SACK bitmap
  kData = 5,      // one segment of a message (sequenced)
  kRma = 6,       // RMA write, read request, read data or response (sequenced)
  kCookie = 7,    // "prove you receive at your address": echo this cookie in your HELLO
};

// Bits of CommonHeader::flags; any other bit set makes a packet malformed.
inline constexpr uint16_t kFlagAckValid =
    1u << 0;  // ack_psn and credit acknowledge the receiver's stream
inline constexpr uint16_t kFlagAckReq = 1u << 1;  // acknowledge at once
inline constexpr uint16_t kFlagRnr =
    1u << 2;  // (ACK) ack_psn was refused: receiver not ready, retry later
inline constexpr uint16_t kFlagRetransmit = 1u << 3;  // (DATA) this PSN was sent before
// (DATA, RMA, ACK) crc is 0 and was not computed: the receiver said in its
// handshake (kCapUnchecked) that our frames reach it through memory only,
// and accepts this packet only if it came so (driver::kRxIntact).
inline constexpr uint16_t kFlagUnchecked = 1u << 4;
inline constexpr uint16_t kKnownFlags =
    kFlagAckValid | kFlagAckReq | kFlagRnr | kFlagRetransmit | kFlagUnchecked;

// Bits of HelloHeader::capabilities (HELLO and HELLO_ACK; 0 in a COOKIE).
// Frames from you reach me through memory only (my device says
// DeviceInfo::integrity, or you are on this host): send me DATA, RMA and
// ACK packets without their CRC, flagged kFlagUnchecked.
inline constexpr uint32_t kCapUnchecked = 1u << 0;
// I take DATA packets that carry several whole messages (kMsgBundle): send
// me your small messages that wait at the same time in one packet.
inline constexpr uint32_t kCapBundle = 1u << 1;
inline constexpr uint32_t kKnownCapabilities = kCapUnchecked | kCapBundle;

// Bits of MsgHeader::msg_flags.
inline constexpr uint16_t kMsgTagged = 1u << 0;  // tag is meaningful: goes to the tagged queues
inline constexpr uint16_t kMsgRemoteData =
    1u << 1;  // data is remote CQ data for the receiver's completion
// The sender gave this message up (its receiver refused it for too long):
// no payload; the receiver consumes the PSN and delivers nothing.
inline constexpr uint16_t kMsgAbandoned = 1u << 2;
// (Only to a peer that announced kCapBundle.) Another whole message follows
// this one's bytes in the packet: its MsgHeader, then its bytes; the last
// message of the packet has no kMsgBundle. Every message of such a packet
// (a bundle) is eager and whole: offset 0, its total_length bytes right
// after its header (none if abandoned), and its msg_id one more than the
// one before (PROTOCOL.md, "Bundles").
inline constexpr uint16_t kMsgBundle = 1u << 3;
inline constexpr uint16_t kKnownMsgFlags =
    kMsgTagged | kMsgRemoteData | kMsgAbandoned | kMsgBundle;

// MsgHeader::protocol.
enum class MsgProtocol : uint8_t {
  kEager = 0,       // the payload is the message's bytes at `offset`
  kRendezvous = 1,  // request to send: the receiver pulls total_length bytes; no payload, or
                    // an InPlaceOffer
};

// The payload a request to send may carry (PROTOCOL.md, "Reading in
// place"): where the receiver, a process of the same host, may read the
// message itself.
struct InPlaceOfferWire {
  uint32_t pid;       // the sender's process id, never 0
  uint32_t reserved;  // 0
  uint64_t addr;      // the message's first byte in the sender's address space
  uint64_t length;    // must equal the header's total_length
  // A word of the sender's that holds `guard` while the offer stands and
  // is cleared before the send ends (0, 0: no guard). A receiver that
  // reads it back after the message may complete at once.
  uint64_t guard_addr;
  uint64_t guard;
};

// What an RMA packet (PacketType::kRma, RmaHeader) does.
enum class RmaOp : uint8_t {
  kWrite = 1,     // payload: bytes of a write at addr + offset of region `key`
  kReadReq = 2,   // read total_length bytes at addr of region `key` (or pull message `key`)
  kReadData = 3,  // payload: bytes of a read's answer at `offset`
  kResponse = 4,  // the target's verdict on a write (or a read it refused): `status`
  // An atomic (PROTOCOL.md, "Atomics"): `data` packs its operation,
  // datatype and count (AtomicFields); total_length is count elements'
  // bytes, at most kMaxAtomicBytes; payload: the operands, then the compare
  // operands (compare ops), nothing for ATOMIC_READ. One packet.
  kAtomic = 5,
  // The target's answer to an atomic: `status`, `data` echoed; payload: the
  // target's values from before (total_length bytes) when it fetched and
  // succeeded, else none. Sent once, retransmitted from its own copy.
  kAtomicResp = 6,
};
// Bits of RmaHeader::flags.
inline constexpr uint8_t kRmaFlagRemoteData = 1u << 0;  // (WRITE) data is remote CQ data
inline constexpr uint8_t kRmaFlagMessage = 1u << 1;     // (READ_REQ, READ_DATA) a rendezvous pull
// (READ_REQ with kRmaFlagMessage) the receiver read the message in place
// (cross-memory attach): nothing to stream; answer with a RESPONSE.
inline constexpr uint8_t kRmaFlagCopied = 1u << 2;
// (ATOMIC, ATOMIC_RESP) the initiator wants the target's old values back.
inline constexpr uint8_t kRmaFlagFetch = 1u << 3;
// READ_REQ MESSAGE|COPIED only: the sender's guard vouched for the bytes
// read; the receive has completed, the send completes on this READ_REQ and
// no RESPONSE is sent (PROTOCOL.md, Reading in place).
inline constexpr uint8_t kRmaFlagVouched = 1u << 4;
inline constexpr uint8_t kKnownRmaFlags =
    kRmaFlagRemoteData | kRmaFlagMessage | kRmaFlagCopied | kRmaFlagFetch | kRmaFlagVouched;
// RmaHeader::status of a RESPONSE.
enum class RmaStatus : uint8_t {
  kOk = 0,
  kBadKey = 1,       // no region with that key (never registered, or deregistered)
  kNoAccess = 2,     // the region does not grant that access
  kOutOfRange = 3,   // [addr, addr + total_length) is not inside the region
  kNoMessage = 4,    // (pull) no message with that id waits to be pulled
  kNoAtomic = 5,     // (atomic) the operation is not defined on the datatype
};
inline constexpr uint8_t kMaxRmaStatus = 5;

// Why a RESET was sent.
enum class ResetReason : uint8_t {
  kUnknownIncarnation = 1,  // the packet was addressed to an incarnation that is not mine
  kNoSession = 2,           // I know your incarnation but have no session with you
};

// The key that authenticates handshakes (EndpointConfig::handshake_key,
// same_host_key) and the truncated MAC every HELLO, HELLO_ACK, COOKIE and
// RESET carries (all zero without a key); a receiver's cookie.
using MacKey = std::array<uint8_t, 32>;
using Mac = std::array<uint8_t, 16>;
using Cookie = std::array<uint8_t, 16>;

#pragma pack(push, 1)
// The header every bypass packet starts with, right after the UDP header.
struct CommonHeader {
  uint16_t magic;            // kMagic
  uint8_t version;           // kVersion
  uint8_t type;              // PacketType
  uint16_t flags;            // HeaderFlag bits
  uint16_t credit;           // receive window, packets from ack_psn (with kFlagAckValid or HELLO*)
  uint32_t src_incarnation;  // the sender's, never 0
  uint32_t dst_incarnation;  // the receiver's; 0 only in a HELLO to an unknown peer
  uint32_t auth_key;         // must equal the receiver's
  uint32_t psn;              // DATA: its PSN; HELLO*: initial PSN; others: sender's next PSN
  uint32_t ack_psn;          // every PSN before it was received (with kFlagAckValid)
  uint16_t length;           // bytes after this header: extension header + payload
  uint16_t reserved;         // 0
  uint32_t crc;              // CRC-32C over pseudo header, this header (crc 0) and the rest
};
// HELLO, HELLO_ACK and COOKIE.
struct HelloHeader {
  uint16_t max_datagram;  // largest UDP payload the sender can receive
  uint16_t reserved;      // 0
  uint32_t capabilities;  // 0 in version 1
  uint64_t nonce;         // the sender's fresh nonce of this handshake (0 in a COOKIE)
  uint64_t echo;          // HELLO_ACK, COOKIE: the nonce of the HELLO answered; HELLO: 0
  uint8_t cookie[16];     // COOKIE: the receiver's cookie; HELLO: it echoed (or 0)
  uint8_t mac[16];        // keyed MAC of the packet (PROTOCOL.md), 0 without a key
};
// RESET. Its psn is the PSN of the packet that caused it.
struct ResetHeader {
  uint8_t reason;  // ResetReason
  uint8_t reserved[3];
  uint32_t incarnation;  // the dst_incarnation that packet carried
  uint8_t mac[16];       // keyed MAC of the packet, 0 without a key
};
// ACK: which PSNs after ack_psn are held by the receiver.
struct AckHeader {
  uint64_t sack[4];  // bit i (word i/64, bit i%64) set: PSN ack_psn + 1 + i was received
  // With kFlagRnr: the msg_id of the next message the receiver takes from
  // the sender (it took every message before it: the first messages of a
  // bundle refused at ack_psn). Else 0.
  uint32_t next_msg_id;
  uint32_t reserved;  // 0
};
// DATA: which message this segment belongs to and where it goes.
struct MsgHeader {
  uint32_t msg_id;        // per direction of a peer pair, from 0, +1 per message
  uint16_t msg_flags;     // MsgFlag bits
  uint8_t protocol;       // MsgProtocol
  uint8_t reserved;       // 0
  uint64_t total_length;  // bytes of the whole message
  uint64_t offset;        // of this segment's payload in the message
  uint64_t tag;           // with kMsgTagged, else 0
  uint64_t data;          // with kMsgRemoteData, else 0
};
// RMA: writes, reads and their answers, and the pulls of rendezvous messages.
struct RmaHeader {
  uint8_t op;             // RmaOp
  uint8_t flags;          // RmaFlag bits
  uint8_t status;         // RmaStatus (RESPONSE), else 0
  uint8_t reserved;       // 0
  uint32_t rma_id;        // the initiator's id of the operation, echoed in its answers
  uint64_t key;           // region key; a pull: the message's msg_id
  uint64_t addr;          // where the operation starts in the target's region
  uint64_t total_length;  // bytes of the whole operation
  uint64_t offset;        // of this packet's payload in the operation
  uint64_t data;          // (WRITE with kRmaFlagRemoteData) remote CQ data, else 0
};
#pragma pack(pop)
static_assert(sizeof(RmaHeader) == 48);
static_assert(sizeof(CommonHeader) + sizeof(RmaHeader) == kAtomicHeaderBytes);
static_assert(sizeof(CommonHeader) == 36);
static_assert(sizeof(HelloHeader) == 56);
static_assert(sizeof(ResetHeader) == 24);
static_assert(sizeof(AckHeader) == 40);
static_assert(sizeof(MsgHeader) == 40);
static_assert(sizeof(InPlaceOfferWire) == 40);

inline constexpr size_t kUdpHeadersBytes = driver::kUdpFrameHeaderBytes;  // 42
inline constexpr size_t kCommonOffset = kUdpHeadersBytes;
inline constexpr size_t kExtOffset = kCommonOffset + sizeof(CommonHeader);   // 78
inline constexpr size_t kDataHeadersBytes = kExtOffset + sizeof(MsgHeader);  // 118
inline constexpr size_t kSackBits = 256;
static_assert(kSackBits == kMaxWindowPackets);
// IPv4 + UDP headers: the UDP payload of a device with MTU m is m - 28.
inline constexpr uint32_t kIpUdpBytes = 28;

// Payload bytes one DATA packet carries when UDP payloads are at most
// `max_datagram` bytes (0 if none fit).
constexpr uint32_t MaxDataPayload(uint32_t max_datagram) {
  constexpr uint32_t kOverhead = sizeof(CommonHeader) + sizeof(MsgHeader);
  return max_datagram > kOverhead ? max_datagram - kOverhead : 0;
}

// What one type of packet looks like.
struct TypeInfo {
  const char* name;
  uint16_t ext_bytes;  // extension header size
  bool has_payload;    // bytes may follow the extension header
  bool sequenced;      // carries a PSN that is acknowledged and retransmitted
};
// The description of a raw type byte; nothing for an unknown one.
constexpr std::optional<TypeInfo> DescribeType(uint8_t raw_type) {
  // The one switch over PacketType outside the engine's dispatcher.
  switch (static_cast<PacketType>(raw_type)) {
    case PacketType::kHello:
      return TypeInfo{"HELLO", sizeof(HelloHeader), false, false};
    case PacketType::kHelloAck:
      return TypeInfo{"HELLO_ACK", sizeof(HelloHeader), false, false};
    case PacketType::kReset:
      return TypeInfo{"RESET", sizeof(ResetHeader), false, false};
    case PacketType::kAck:
      return TypeInfo{"ACK", sizeof(AckHeader), false, false};
    case PacketType::kData:
      return TypeInfo{"DATA", sizeof(MsgHeader), true, true};
    case PacketType::kRma:
      return TypeInfo{"RMA", sizeof(RmaHeader), true, true};
    case PacketType::kCookie:
      return TypeInfo{"COOKIE", sizeof(HelloHeader), false, false};
  }
  return std::nullopt;
}

// CommonHeader in host order.
struct Common {
  PacketType type = PacketType::kAck;
  uint16_t flags = 0;
  uint16_t credit = 0;
  uint32_t src_incarnation = 0;
  uint32_t dst_incarnation = 0;
  uint32_t auth_key = 0;
  Psn psn;
  Psn ack_psn;
};
// HelloHeader in host order.
struct HelloFields {
  uint16_t max_datagram = 0;
  uint32_t capabilities = 0;  // kCap* bits (HELLO, HELLO_ACK)
  uint64_t nonce = 0;
  uint64_t echo = 0;
  Cookie cookie{};
  Mac mac{};  // as received (builders compute it)
};
// ResetHeader in host order.
struct ResetFields {
  ResetReason reason = ResetReason::kNoSession;
  uint32_t incarnation = 0;  // which incarnation of the receiver it is about
  Mac mac{};                 // as received (builders compute it)
};
// The SACK bitmap of an ACK: Has(i) means PSN ack_psn + 1 + i was received.
struct AckFields {
  std::array<uint64_t, 4> sack{};
  uint32_t next_msg_id = 0;  // with kFlagRnr (AckHeader)
  bool Has(uint32_t i) const { return (sack[i / 64] >> (i % 64)) & 1; }
  void Set(uint32_t i) { sack[i / 64] |= uint64_t{1} << (i % 64); }
};
// MsgHeader in host order.
struct MsgFields {
  uint32_t msg_id = 0;
  uint16_t msg_flags = 0;
  MsgProtocol protocol = MsgProtocol::kEager;
  // Set by Parse: how many messages a bundle (kMsgBundle) carries, at most
  // 255 (more counts as 255); 1 for any other DATA packet.
  uint8_t messages = 1;
  uint64_t total_length = 0;
  uint64_t offset = 0;
  uint64_t tag = 0;
  uint64_t data = 0;
  // A request to send's InPlaceOffer: the sender's process id (0: none
  // offered, no payload) and the message's address there. Only the
  // receiver's engine decides whether to act on it (kRxSameHost frames).
  uint32_t offer_pid = 0;
  uint64_t offer_addr = 0;
  // Its guard word there and the value it holds while the offer stands
  // (0: none). Meaningful only with offer_pid.
  uint64_t offer_guard_addr = 0;
  uint64_t offer_guard = 0;
};

// An atomic's RmaHeader::data: op in bits 0-7, datatype in 8-15, count in
// 16-31, the rest 0.
struct AtomicFields {
  AtomicOp op = AtomicOp::kSum;
  AtomicType type = AtomicType::kUint64;
  uint16_t count = 0;
};
inline uint64_t PackAtomic(const AtomicFields& a) {
  return uint64_t{static_cast<uint8_t>(a.op)} | uint64_t{static_cast<uint8_t>(a.type)} << 8 |
         uint64_t{a.count} << 16;
}

// RmaHeader in host order.
struct RmaFields {
  RmaOp op = RmaOp::kWrite;
  uint8_t flags = 0;
  RmaStatus status = RmaStatus::kOk;
  uint32_t rma_id = 0;
  uint64_t key = 0;
  uint64_t addr = 0;
  uint64_t total_length = 0;
  uint64_t offset = 0;
  uint64_t data = 0;
  AtomicFields atomic{};  // (ATOMIC, ATOMIC_RESP) decoded from data by Parse
};

// A received packet, decoded. Only the extension of common.type is filled;
// payload points into the frame.
struct View {
  driver::UdpFlow flow;
  Common common;
  HelloFields hello;
  ResetFields reset;
  AckFields ack;
  MsgFields msg;
  RmaFields rma;
  absl::Span<const uint8_t> payload;
  // The whole UDP payload (bypass header onwards), for VerifyMac.
  absl::Span<const uint8_t> datagram;
};

// Why a frame was rejected.
enum class ParseStatus : uint8_t {
  kOk,
  kNotUdp,       // not an intact, unfragmented Ethernet/IPv4/UDP frame
  kTooShort,     // shorter than the bypass header
  kBadMagic,     // not a bypass packet
  kBadVersion,   // another version of the protocol
  kBadType,      // unknown packet type
  kBadLength,    // length field disagrees with the datagram or the type
  kBadField,     // flags, reserved bytes, reason, protocol or offsets out of range
  kBadChecksum,  // CRC-32C mismatch: corrupted
  kUnchecked,    // flagged UNCHECKED but did not come through memory only: may be corrupted
};
const char* ParseStatusName(ParseStatus s);

// Parses a whole frame. Every length is checked before it is used; on
// anything but kOk, *out is unspecified. On kOk it has set flow, common,
// payload, datagram and the fields of the packet's type (hello for HELLO,
// HELLO_ACK and COOKIE; reset; ack; msg for DATA; rma for RMA), and left
// the other types' fields as they were (the engine reuses one View). A
// DATA packet with kMsgBundle has its first message in msg and everything
// after that header in payload (the first message's bytes, then each
// further header and bytes), the whole bundle checked; BundleReader walks
// it. `intact`: the frame came through memory only (driver::kRxIntact), so a packet flagged kFlagUnchecked is
// taken without a CRC; without it such a packet is kUnchecked.
ParseStatus Parse(absl::Span<const uint8_t> frame, View* out, bool intact = false);

// Builders: write a whole frame (Ethernet, IPv4, UDP, bypass header,
// extension, payload, CRC) into `frame`; return its length, or 0 if it does
// not fit. `c.type` must match the builder. With kFlagUnchecked in c.flags
// (DATA, RMA, ACK only) the CRC is left 0.
// HELLO, HELLO_ACK or COOKIE (c.type); with `key`, MACed (else the MAC is 0).
size_t BuildHello(const driver::UdpFlow& flow, const Common& c, const HelloFields& h,
                  const MacKey* key, absl::Span<uint8_t> frame);
size_t BuildReset(const driver::UdpFlow& flow, const Common& c, const ResetFields& r,
                  const MacKey* key, absl::Span<uint8_t> frame);

// Whether a parsed HELLO, HELLO_ACK, COOKIE or RESET is authentic: with
// `key`, its MAC is HMAC-SHA-256 under key, truncated to 16 bytes, of the
// addresses and every byte of the packet (crc and mac taken as 0), checked
// in constant time; without, its MAC is all zero (a sender with a key never
// talks to one without). REQUIRES: v came from Parse (v.datagram is set).
bool VerifyMac(const View& v, const MacKey* key);
// Writes the MAC under key into a HELLO, HELLO_ACK, COOKIE or RESET
// datagram (the bypass header onwards, as sent on flow); the CRC is to be
// computed after. False (nothing written) for another type or size.
bool SealMac(const driver::UdpFlow& flow, absl::Span<uint8_t> datagram, const MacKey& key);
size_t BuildAck(const driver::UdpFlow& flow, const Common& c, const AckFields& a,
                absl::Span<uint8_t> frame);
// `payload` is copied from the caller's buffer into the frame. A request to
// send with m.offer_pid carries its InPlaceOffer as the payload instead.
size_t BuildData(const driver::UdpFlow& flow, const Common& c, const MsgFields& m,
                 absl::Span<const uint8_t> payload, absl::Span<uint8_t> frame);

// One message of a bundle: eager and whole (offset 0, total_length its
// bytes' size, or no bytes with kMsgAbandoned).
struct BundledMsg {
  MsgFields m;
  absl::Span<const uint8_t> bytes;
};
// Writes a DATA packet of several whole messages into `frame`, one message
// at a time: Add each (at least two; consecutive msg_ids, eager, offset 0),
// then Finish. kMsgBundle goes on every header but the last.
class BundleWriter {
 public:
  explicit BundleWriter(absl::Span<uint8_t> frame) : frame_(frame) {}
  // Appends a message and its bytes (none with kMsgAbandoned); false, and
  // nothing written, if the packet would not fit.
  bool Add(const MsgFields& m, absl::Span<const uint8_t> bytes);
  // The frame's length; 0 if fewer than two messages were added.
  size_t Finish(const driver::UdpFlow& flow, const Common& c);

 private:
  absl::Span<uint8_t> frame_;
  size_t end_ = 0;          // bytes written after the first header
  size_t last_ = 0;         // where the last added header is, after the first header
  MsgHeader first_{};       // the extension header, written by Finish
  size_t count_ = 0;
};
// The same for messages in an array (tests, fuzzing).
size_t BuildBundle(const driver::UdpFlow& flow, const Common& c,
                   absl::Span<const BundledMsg> msgs, absl::Span<uint8_t> frame);

// The messages of a DATA packet that Parse accepted with kMsgBundle (its
// View's msg and payload), in order, each without kMsgBundle.
class BundleReader {
 public:
  BundleReader(const MsgFields& first, absl::Span<const uint8_t> payload)
      : next_(first), rest_(payload) {}
  // The next message and its bytes; false after the last.
  bool Next(MsgFields* m, absl::Span<const uint8_t>* bytes);

 private:
  MsgFields next_;
  absl::Span<const uint8_t> rest_;
  bool more_ = true;
};

// `payload` (WRITE, READ_DATA only) is copied into the frame.
size_t BuildRma(const driver::UdpFlow& flow, const Common& c, const RmaFields& r,
                absl::Span<const uint8_t> payload, absl::Span<uint8_t> frame);

// The smallest max_datagram a HELLO may announce: room for one payload byte
// after the largest extension header (RmaHeader).
inline constexpr uint32_t kMinMaxDatagram = sizeof(CommonHeader) + sizeof(RmaHeader) + 1;

// Payload bytes one RMA packet carries when UDP payloads are at most
// `max_datagram` bytes (0 if none fit).
constexpr uint32_t MaxRmaPayload(uint32_t max_datagram) {
  constexpr uint32_t kOverhead = sizeof(CommonHeader) + sizeof(RmaHeader);
  return max_datagram > kOverhead ? max_datagram - kOverhead : 0;
}

// "DATA psn=.. ack=.. src=0x.. dst=0x.. msg=3 off=0/100 len=100": for traces and tests.
std::string ToString(const View& v);

}  // namespace bypass::rdm::wire

#endif  // BYPASS_FABRIC_RDM_WIRE_H_
