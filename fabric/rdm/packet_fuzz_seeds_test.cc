// packet_fuzz's seeds carry the current wire version: after a version bump
// that leaves them behind, the parser drops every frame they hold at its
// version check, and the fuzzer starts from nothing that reaches the engine
// (it did from wire v6 until the seeds were rewritten). This walks each
// seed's records as packet_fuzz.cc's Harness::Run does (op, a 16-bit
// big-endian length, then for ops 0 and 1 that many bytes: a whole frame,
// or a datagram after the UDP headers) and checks the version of each
// bypass header it finds (the magic "BY" first).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fabric/rdm/wire.h"
#include "gtest/gtest.h"

namespace bypass::rdm {
namespace {

TEST(PacketFuzzSeedsTest, EverySeedsFramesAreOfTheCurrentWireVersion) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const std::filesystem::path dir =
      std::filesystem::path(srcdir != nullptr ? srcdir : ".") / "bypass/fabric/rdm/testdata/packet_fuzz";
  int seeds = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    const std::vector<uint8_t> s{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    const std::string name = entry.path().filename().string();
    // Seeds that are meant to hold no frame: bytes the parser must refuse,
    // and timer records alone.
    if (name == "raw_garbage" || name == "timeout") continue;
    size_t at = !s.empty() && s[0] == 0xff ? 1 : 0;  // a keyed run
    int headers = 0;
    while (s.size() - at >= 3) {
      const uint8_t op = s[at];
      const size_t field = size_t{s[at + 1]} << 8 | s[at + 2];
      const size_t len = op % 4 < 2 ? std::min(s.size() - at - 3, field) : 0;
      const uint8_t* bytes = s.data() + at + 3;
      const size_t skip = op % 4 == 0 ? wire::kUdpHeadersBytes : 0;
      if (op % 4 < 2 && len >= skip + 3 && bytes[skip] == (wire::kMagic >> 8) &&
          bytes[skip + 1] == (wire::kMagic & 0xff)) {
        ++headers;
        EXPECT_EQ(bytes[skip + 2], wire::kVersion)
            << name << ": a frame at byte " << (at + 3 + skip) << " has wire version "
            << int{bytes[skip + 2]} << "; rewrite the seed's version bytes";
      }
      at += 3 + len;
    }
    EXPECT_GT(headers, 0) << name << " holds no bypass frame";
    ++seeds;
  }
  EXPECT_GT(seeds, 10);  // the directory was found and read
}

}  // namespace
}  // namespace bypass::rdm
