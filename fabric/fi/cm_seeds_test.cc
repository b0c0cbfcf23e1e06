// cm_fuzz's seeds are messages of the current CM version: a version bump
// that leaves them behind makes ParseCm refuse every one, and the fuzzer
// then starts from nothing that reaches the encode round trip (it did from
// the bump to version 2 until the seeds were rewritten).
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "fabric/fi/cm.h"
#include "gtest/gtest.h"

namespace bypass::fi {
namespace {

std::vector<uint8_t> Seed(const std::string& name) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const std::string path =
      std::string(srcdir != nullptr ? srcdir : ".") + "/bypass/fabric/fi/testdata/cm_fuzz/" + name;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(CmSeedsTest, EachValidSeedParsesAndEncodesBack) {
  for (const char* name : {"accept", "connreq", "reject", "shutdown"}) {
    const std::vector<uint8_t> bytes = Seed(name);
    ASSERT_GT(bytes.size(), 4u) << name;
    EXPECT_EQ(bytes[4], kCmVersion) << name << ": rewrite the seed's version byte (offset 4)";
    const std::optional<CmMessage> m = ParseCm(bytes.data(), bytes.size());
    ASSERT_TRUE(m.has_value()) << name << " is not a CM message ParseCm accepts";
    uint8_t out[kCmMaxPacket];
    const size_t n = EncodeCm(*m, out);
    EXPECT_EQ(std::vector<uint8_t>(out, out + n), bytes) << name;
  }
}

TEST(CmSeedsTest, TheTooLongSeedIsRefusedForItsLengthAlone) {
  const std::vector<uint8_t> bytes = Seed("too_long");
  ASSERT_GT(bytes.size(), kCmMaxPacket);
  EXPECT_EQ(bytes[4], kCmVersion);
  EXPECT_FALSE(ParseCm(bytes.data(), bytes.size()).has_value());
}

}  // namespace
}  // namespace bypass::fi
