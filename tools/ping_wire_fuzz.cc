// Fuzz target: the ping-pong payload parsers (ReadPingHeader, IsPingHeader, VerifyPing,
// ReadHello, ParseHexAddress) over hostile payloads, checked against plain
// oracles: ReadPingHeader accepts any 16 bytes carrying the magic,
// VerifyPing accepts exactly the bytes WritePing would have written, and
// the others accept exactly their documented layouts.
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

// ReadHello accepts exactly a header of kind kHello, a length in
// 1..kMaxHelloAddrBytes and that many bytes, and points inside the input.
void FuzzHello(const uint8_t* data, size_t size) {
  const uint8_t* addr = nullptr;
  uint32_t n = 0;
  const bool ok = ReadHello(data, size, &addr, &n);
  bool want = false;
  if (size >= sizeof(PingHeader) + 4) {
    PingHeader h;
    std::memcpy(&h, data, sizeof(h));
    uint32_t len = 0;
    std::memcpy(&len, data + sizeof(h), 4);
    want = h.magic == kPingMagic && h.kind == static_cast<uint32_t>(PingKind::kHello) && len != 0 &&
           len <= kMaxHelloAddrBytes && sizeof(h) + 4 + static_cast<size_t>(len) <= size;
  }
  Require(ok == want, "ReadHello disagrees with the layout");
  if (ok) {
    Require(addr == data + sizeof(PingHeader) + 4 && addr + n <= data + size,
            "ReadHello points outside the payload");
    // What WriteHello makes of it reads back the same.
    std::vector<uint8_t> again(kHelloBytes);
    WriteHello(again.data(), addr, n);
    const uint8_t* addr2 = nullptr;
    uint32_t n2 = 0;
    Require(ReadHello(again.data(), again.size(), &addr2, &n2) && n2 == n &&
                std::memcmp(addr2, addr, n) == 0,
            "WriteHello does not round-trip");
  }
}

// ParseHexAddress accepts exactly an even number (2..512) of lower-case hex
// digits, and what it decodes prints back as the same text.
void FuzzHex(const uint8_t* data, size_t size) {
  const char* text = reinterpret_cast<const char*>(data);
  uint8_t out[kMaxHelloAddrBytes];
  size_t n = 0;
  const bool ok = ParseHexAddress(text, size, out, &n);
  bool want = size != 0 && size % 2 == 0 && size / 2 <= kMaxHelloAddrBytes;
  for (size_t i = 0; want && i < size; ++i) {
    want = (text[i] >= '0' && text[i] <= '9') || (text[i] >= 'a' && text[i] <= 'f');
  }
  Require(ok == want, "ParseHexAddress disagrees with the format");
  if (ok) {
    Require(n == size / 2, "ParseHexAddress decoded the wrong length");
    static const char kDigits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; ++i) {
      Require(text[2 * i] == kDigits[out[i] >> 4] && text[2 * i + 1] == kDigits[out[i] & 15],
              "ParseHexAddress does not round-trip");
    }
  }
}

void FuzzOne(const uint8_t* data, size_t size) {
  FuzzHello(data, size);
  FuzzHex(data, size);
  PingHeader h{};
  const bool read = ReadPingHeader(data, size, &h);
  uint32_t magic = 0;
  if (size >= sizeof(PingHeader)) std::memcpy(&magic, data + offsetof(PingHeader, magic), 4);
  Require(read == (size >= sizeof(PingHeader) && magic == kPingMagic),
          "ReadPingHeader disagrees with the layout");
  if (!read) {
    Require(size >= sizeof(PingHeader) || !VerifyPing(data, size, size, 0, PingKind::kPing),
            "VerifyPing accepted a payload shorter than a header");
    Require(!IsPingHeader(data, size, 0, PingKind::kPing), "IsPingHeader accepted what ReadPingHeader refused");
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
        // The clock stops on IsPingHeader: it must hold whenever VerifyPing
        // does, and say exactly whether seq and kind match.
        const bool header = IsPingHeader(data, size, seq, kind);
        Require(header == (h.seq == seq && h.kind == static_cast<uint32_t>(kind)),
                "IsPingHeader disagrees with the header");
        Require(header || !VerifyPing(data, size, want, seq, kind),
                "VerifyPing accepted a payload IsPingHeader refused");
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
