// The connection manager's messages: encoding and a parser that trusts
// nothing it is given (fabric/fi:cm_fuzz).
#include "fabric/fi/cm.h"

#include <cstring>

namespace bypass::fi {
namespace {

template <class T>
void Put(uint8_t*& p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) *p++ = static_cast<uint8_t>(v >> (8 * i));
}

template <class T>
T Get(const uint8_t*& p) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(static_cast<T>(*p++) << (8 * i));
  return v;
}

}  // namespace

size_t EncodeCm(const CmMessage& m, uint8_t* out) {
  uint8_t* p = out;
  Put<uint32_t>(p, kCmMagic);
  Put<uint8_t>(p, kCmVersion);
  Put<uint8_t>(p, static_cast<uint8_t>(m.type));
  const size_t n = m.data_len <= kCmDataSize ? m.data_len : kCmDataSize;
  Put<uint16_t>(p, static_cast<uint16_t>(n));
  Put<uint64_t>(p, m.conn_id);
  Put<uint32_t>(p, m.addr.ip.value);
  Put<uint16_t>(p, m.addr.udp_port);
  std::memcpy(p, m.addr.mac.bytes.data(), 6);
  p += 6;
  Put<uint32_t>(p, m.addr.incarnation);
  if (n > 0) std::memcpy(p, m.data, n);
  return kCmHeaderSize + n;
}

std::optional<CmMessage> ParseCm(const uint8_t* bytes, size_t len) {
  if (bytes == nullptr || len < kCmHeaderSize) return std::nullopt;
  const uint8_t* p = bytes;
  if (Get<uint32_t>(p) != kCmMagic || Get<uint8_t>(p) != kCmVersion) return std::nullopt;
  const uint8_t type = Get<uint8_t>(p);
  if (type < static_cast<uint8_t>(CmType::kConnReq) ||
      type > static_cast<uint8_t>(CmType::kShutdown)) {
    return std::nullopt;
  }
  const uint16_t n = Get<uint16_t>(p);
  if (n > kCmDataSize || len != kCmHeaderSize + n) return std::nullopt;
  CmMessage m;
  m.type = static_cast<CmType>(type);
  m.data_len = static_cast<uint8_t>(n);
  m.conn_id = Get<uint64_t>(p);
  m.addr.ip.value = Get<uint32_t>(p);
  m.addr.udp_port = Get<uint16_t>(p);
  std::memcpy(m.addr.mac.bytes.data(), p, 6);
  p += 6;
  m.addr.incarnation = Get<uint32_t>(p);
  if (n > 0) std::memcpy(m.data, p, n);
  return m;
}

}  // namespace bypass::fi
