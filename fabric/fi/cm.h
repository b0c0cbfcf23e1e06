// The connection manager's wire format (FI_EP_MSG, fabric/fi/msg_ep.h): the
// small messages a connecting endpoint, a passive endpoint and an accepted
// endpoint exchange to set a connection up and take it down. They ride the
// engine as tagged injects whose tag has kCmTagBit set (reliable, in order,
// authenticated like every engine message); an application's tags on a
// connected endpoint never have that bit. fabric/fi/README.md ("Connected
// endpoints") describes the protocol.
#ifndef BYPASS_FABRIC_FI_CM_H_
#define BYPASS_FABRIC_FI_CM_H_

#include <cstddef>
#include <cstdint>
#include <optional>

#include "fabric/rdm/types.h"

namespace bypass::fi {

// The tag bit of connection-manager messages (tags are 63 bits on FI_EP_MSG).
inline constexpr uint64_t kCmTagBit = 1ull << 63;
// ... and, beside it, of the messages to a passive endpoint (kConnReq): the
// listener's receives take only those, the connections that share its port
// only the others.
inline constexpr uint64_t kCmListenerBit = 1ull << 62;
// Connection data of fi_connect, fi_accept and fi_reject (FI_OPT_CM_DATA_SIZE).
inline constexpr size_t kCmDataSize = 128;

enum class CmType : uint8_t {
  kConnReq = 1,   // connecting endpoint -> passive endpoint: address, data
  kAccept = 2,    // accepted endpoint -> connecting endpoint: data
  kReject = 3,    // passive endpoint -> connecting endpoint: data
  kAck = 4,       // connecting endpoint -> accepted endpoint: connected
  kShutdown = 5,  // either side -> the other: disconnected
};

struct CmMessage {
  CmType type = CmType::kConnReq;
  uint64_t conn_id = 0;  // chosen by the connecting side, echoed in every reply
  rdm::Address addr;     // kConnReq: the connecting endpoint's address
  uint8_t data_len = 0;
  uint8_t data[kCmDataSize] = {};
};

// magic (4) version (1) type (1) data_len (2) conn_id (8) ip (4) port (2)
// mac (6) incarnation (4), then data_len bytes; little-endian.
inline constexpr size_t kCmHeaderSize = 32;
inline constexpr size_t kCmMaxPacket = kCmHeaderSize + kCmDataSize;
inline constexpr uint32_t kCmMagic = 0x4d435942;  // "BYCM"
// 2: connection requests carry kCmListenerBit (connections share the port).
inline constexpr uint8_t kCmVersion = 2;

// Writes m into out (kCmMaxPacket bytes); returns the bytes written.
size_t EncodeCm(const CmMessage& m, uint8_t* out);
// The message in bytes, or nothing when they are not one: a wrong magic,
// version, type, data length beyond kCmDataSize or beyond len.
std::optional<CmMessage> ParseCm(const uint8_t* bytes, size_t len);

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_CM_H_
