// The ping-pong tools' payload: a 16-byte header and a pattern derived from
// the sequence number, so every reply's bytes can be verified.
#ifndef BYPASS_TOOLS_PING_WIRE_H_
#define BYPASS_TOOLS_PING_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace bypass::tools {

enum class PingKind : uint32_t {
  kPing = 1,         // echo me
  kFin = 2,          // the client is done; the server exits
  kData = 3,         // rate mode: count me, no reply
  kReportAsk = 4,    // rate mode: reply with a kReport
  kReport = 5,       // rate mode: count and first-to-last ns of kData seen
  kHello = 6,        // fi layer: the client's fi_getname address; echoed once inserted
  kRateStart = 7,    // post the window of receives (rdm, fi), then echo me
};

struct PingHeader {
  uint64_t seq;
  uint32_t kind;     // PingKind
  uint32_t magic;    // kPingMagic
};
static_assert(sizeof(PingHeader) == 16);
inline constexpr uint32_t kPingMagic = 0x62797073;  // "bpys"
inline constexpr uint16_t kPingUdpPort = 47000;

// Payload bytes are max(size, 16): the header then the pattern.
inline size_t PingPayloadBytes(size_t size) { return size < sizeof(PingHeader) ? sizeof(PingHeader) : size; }

inline uint8_t PatternByte(uint64_t seq, size_t i) {
  return static_cast<uint8_t>(seq * 131u + i * 7u + 1u);
}

inline void WritePing(uint8_t* payload, size_t size, uint64_t seq, PingKind kind) {
  PingHeader h{seq, static_cast<uint32_t>(kind), kPingMagic};
  std::memcpy(payload, &h, sizeof(h));
  for (size_t i = sizeof(h); i < PingPayloadBytes(size); ++i) payload[i] = PatternByte(seq, i);
}

// True if payload is a well-formed kind message of `size` whose pattern is intact.
inline bool VerifyPing(const uint8_t* payload, size_t len, size_t size, uint64_t seq,
                       PingKind kind) {
  if (len < PingPayloadBytes(size)) return false;
  PingHeader h;
  std::memcpy(&h, payload, sizeof(h));
  if (h.magic != kPingMagic || h.kind != static_cast<uint32_t>(kind) || h.seq != seq) return false;
  for (size_t i = sizeof(h); i < PingPayloadBytes(size); ++i) {
    if (payload[i] != PatternByte(seq, i)) return false;
  }
  return true;
}

inline bool ReadPingHeader(const uint8_t* payload, size_t len, PingHeader* h) {
  if (len < sizeof(PingHeader)) return false;
  std::memcpy(h, payload, sizeof(*h));
  return h->magic == kPingMagic;
}

// True if payload's header says it is message `seq` of `kind`. The pattern
// is not read: the tools stop the clock on this and run VerifyPing after,
// as they write the pattern before starting it, so a round trip measures
// the layer, not the tool's byte loops.
inline bool IsPingHeader(const uint8_t* payload, size_t len, uint64_t seq, PingKind kind) {
  PingHeader h{};
  return ReadPingHeader(payload, len, &h) && h.seq == seq && h.kind == static_cast<uint32_t>(kind);
}

// kHello: the header, a 32-bit length, then that many address bytes.
inline constexpr size_t kMaxHelloAddrBytes = 256;
inline constexpr size_t kHelloBytes = sizeof(PingHeader) + 4 + kMaxHelloAddrBytes;

// Writes a kHello carrying addr (REQUIRES: len <= kMaxHelloAddrBytes) into
// payload (kHelloBytes).
inline void WriteHello(uint8_t* payload, const void* addr, uint32_t len) {
  PingHeader h{0, static_cast<uint32_t>(PingKind::kHello), kPingMagic};
  std::memset(payload, 0, kHelloBytes);
  std::memcpy(payload, &h, sizeof(h));
  std::memcpy(payload + sizeof(h), &len, sizeof(len));
  std::memcpy(payload + sizeof(h) + sizeof(len), addr, len);
}

// The address a kHello carries: sets *addr (inside payload) and *addr_len;
// false if payload is not a well-formed kHello.
inline bool ReadHello(const uint8_t* payload, size_t len, const uint8_t** addr, uint32_t* addr_len) {
  PingHeader h{};
  if (!ReadPingHeader(payload, len, &h) || h.kind != static_cast<uint32_t>(PingKind::kHello)) {
    return false;
  }
  if (len < sizeof(h) + sizeof(uint32_t)) return false;
  uint32_t n = 0;
  std::memcpy(&n, payload + sizeof(h), sizeof(n));
  if (n == 0 || n > kMaxHelloAddrBytes || len - sizeof(h) - sizeof(n) < n) return false;
  *addr = payload + sizeof(h) + sizeof(n);
  *addr_len = n;
  return true;
}

// An fi address as the --addr_file holds it: lower-case hex, two digits a
// byte, 1..kMaxHelloAddrBytes bytes. False (and *out unspecified) for
// anything else.
inline bool ParseHexAddress(const char* text, size_t len, uint8_t* out, size_t* out_len) {
  if (len == 0 || len % 2 != 0 || len / 2 > kMaxHelloAddrBytes) return false;
  auto digit = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  for (size_t i = 0; i < len; i += 2) {
    const int hi = digit(text[i]);
    const int lo = digit(text[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i / 2] = static_cast<uint8_t>(hi * 16 + lo);
  }
  *out_len = len / 2;
  return true;
}

}  // namespace bypass::tools

#endif  // BYPASS_TOOLS_PING_WIRE_H_
