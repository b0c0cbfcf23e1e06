// The connection manager's parser (cm.h) on arbitrary bytes: it never reads
// beyond them, accepts only what EncodeCm could have written, and what it
// accepts encodes back to the same bytes.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "fabric/fi/cm.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using bypass::fi::CmMessage;
  // A copy of exactly `size` bytes, so a read past them is caught by ASan.
  auto* copy = static_cast<uint8_t*>(std::malloc(size == 0 ? 1 : size));
  if (size > 0) std::memcpy(copy, data, size);
  const std::optional<CmMessage> m = bypass::fi::ParseCm(copy, size);
  if (m) {
    if (m->data_len > bypass::fi::kCmDataSize) std::abort();
    uint8_t out[bypass::fi::kCmMaxPacket];
    const size_t n = bypass::fi::EncodeCm(*m, out);
    if (n != size || std::memcmp(out, copy, n) != 0) std::abort();
  }
  std::free(copy);
  return 0;
}
