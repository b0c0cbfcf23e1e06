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

}  // namespace bypass::tools

#endif  // BYPASS_TOOLS_PING_WIRE_H_
