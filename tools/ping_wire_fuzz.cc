// Fuzz target: the ping-pong payload parsers (ReadPingHeader, VerifyPing)
// over hostile payloads, checked against a plain oracle: ReadPingHeader
// accepts any 16 bytes carrying the magic, and VerifyPing accepts exactly
// the bytes WritePing would have written.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tools/ping_wire.h"
#include "test/fuzz/fuzz_check.h"

namespace bypass::tools {
namespace {

using ::bypass::fuzz::Require;

// What VerifyPing should say, computed the long way round.
bool Expected(const uint8_t* data, size_t size, size_t want, uint64_t seq, PingKind kind) {
  const size_t n = PingPayloadBytes(want);
  if (size < n) return false;
  std::vector<uint8_t> written(n);
  WritePing(written.data(), want, seq, kind);
  return std::memcmp(written.data(), data, n) == 0;
}

void FuzzOne(const uint8_t* data, size_t size) {
  PingHeader h{};
  const bool read = ReadPingHeader(data, size, &h);
  uint32_t magic = 0;
  if (size >= sizeof(PingHeader)) std::memcpy(&magic, data + offsetof(PingHeader, magic), 4);
  Require(read == (size >= sizeof(PingHeader) && magic == kPingMagic),
          "ReadPingHeader disagrees with the layout");
  if (!read) {
    Require(size >= sizeof(PingHeader) || !VerifyPing(data, size, size, 0, PingKind::kPing),
            "VerifyPing accepted a payload shorter than a header");
    return;
  }
  // The sizes a caller might expect, around what arrived, and the header's
  // own seq and kind as well as near misses.
  const size_t sizes[] = {0, sizeof(PingHeader) - 1, sizeof(PingHeader), size - 1, size, size + 1};
  const uint64_t seqs[] = {h.seq, h.seq ^ 1};
  const PingKind kinds[] = {static_cast<PingKind>(h.kind), PingKind::kPing, PingKind::kReport};
  for (size_t want : sizes) {
    for (uint64_t seq : seqs) {
      for (PingKind kind : kinds) {
        Require(VerifyPing(data, size, want, seq, kind) == Expected(data, size, want, seq, kind),
                "VerifyPing disagrees with WritePing");
      }
    }
  }
}

}  // namespace
}  // namespace bypass::tools

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bypass::tools::FuzzOne(data, size);
  return 0;
}
