// The value types of the driver contract: MAC and IPv4 addresses, link state.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/str_format.h"
#include "driver/device.h"

namespace bypass::driver {
namespace {

// Abseil here is built with its own string_view (ABSL_OPTION_USE_STD_* = 0).
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

absl::StatusOr<MacAddress> MacAddress::Parse(std::string_view text) {
  // Exactly "xx:xx:xx:xx:xx:xx" (or with '-'), one separator kind throughout.
  MacAddress mac;
  const bool shape_ok = text.size() == 17 && (text[2] == ':' || text[2] == '-');
  for (size_t i = 0; shape_ok && i < 6; ++i) {
    const int hi = HexDigit(text[i * 3]);
    const int lo = HexDigit(text[i * 3 + 1]);
    if (hi < 0 || lo < 0 || (i < 5 && text[i * 3 + 2] != text[2])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MAC address '", Sv(text), "': expected six hex pairs like 02:00:00:00:00:01"));
    }
    mac.bytes[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  if (!shape_ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MAC address '", Sv(text), "': expected six hex pairs like 02:00:00:00:00:01"));
  }
  return mac;
}

std::string MacAddress::ToString() const {
  return absl::StrFormat("%02x:%02x:%02x:%02x:%02x:%02x", bytes[0], bytes[1], bytes[2],
                         bytes[3], bytes[4], bytes[5]);
}

bool MacAddress::IsBroadcast() const { return *this == kBroadcastMac; }

absl::StatusOr<Ipv4Address> Ipv4Address::Parse(std::string_view text) {
  // Strict dotted quad: four decimal numbers 0-255 without leading zeros
  // (which some parsers read as octal).
  const auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("IPv4 address '", Sv(text), "': expected four numbers 0-255 like 10.0.0.1"));
  };
  uint32_t value = 0;
  size_t pos = 0;
  for (int part = 0; part < 4; ++part) {
    if (part > 0) {
      if (pos >= text.size() || text[pos] != '.') return bad();
      ++pos;
    }
    const size_t start = pos;
    uint32_t n = 0;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9' && pos - start < 3) {
      n = n * 10 + static_cast<uint32_t>(text[pos] - '0');
      ++pos;
    }
    const size_t digits = pos - start;
    if (digits == 0 || n > 255 || (digits > 1 && text[start] == '0')) return bad();
    value = value << 8 | n;
  }
  if (pos != text.size()) return bad();
  return Ipv4Address{value};
}

std::string Ipv4Address::ToString() const {
  return absl::StrFormat("%u.%u.%u.%u", value >> 24, (value >> 16) & 0xff, (value >> 8) & 0xff,
                         value & 0xff);
}

std::string_view LinkStateName(LinkState s) {
  switch (s) {
    case LinkState::kDown:
      return "down";
    case LinkState::kUp:
      return "up";
  }
  return "unknown";
}

std::string_view PeerLivenessName(PeerLiveness l) {
  switch (l) {
    case PeerLiveness::kUnknown:
      break;
    case PeerLiveness::kAlive:
      return "alive";
    case PeerLiveness::kDead:
      return "dead";
    case PeerLiveness::kNoDeathSeen:
      return "no death seen";
  }
  return "unknown";
}

void AppendNamed(NamedCounters* out, std::string_view prefix,
                 std::initializer_list<std::pair<const char*, uint64_t>> counters) {
  for (const auto& [name, value] : counters) {
    out->push_back({absl::StrCat(Sv(prefix), name), value});
  }
}

}  // namespace bypass::driver
