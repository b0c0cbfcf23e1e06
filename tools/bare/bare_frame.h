// The bare baseline's frame: what tools/bare's loops write into an mbuf
// (memif_pingpong, and raw_cost's bare round trip).
#ifndef BYPASS_TOOLS_BARE_BARE_FRAME_H_
#define BYPASS_TOOLS_BARE_BARE_FRAME_H_

#include <arpa/inet.h>
#include <rte_mbuf.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "tools/ping_wire.h"

namespace bypass::tools::bare {

inline constexpr size_t kHdr = 42;  // Ethernet + IPv4 + UDP

// Appends a broadcast frame to m with the ping of `size`: only the fields a
// receiver looks at (no lengths, no checksum), as a bare loop would.
inline void Fill(rte_mbuf* m, size_t size, uint64_t seq, bypass::tools::PingKind kind) {
  const size_t payload = bypass::tools::PingPayloadBytes(size);
  uint8_t* d = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, static_cast<uint16_t>(kHdr + payload)));
  if (d == nullptr) std::abort();  // checked against the data room in main
  std::memset(d, 0xff, 6);           // broadcast
  std::memset(d + 6, 0x02, 6);
  d[12] = 0x08;
  d[13] = 0x00;
  std::memset(d + 14, 0, 28);
  d[14] = 0x45;
  d[23] = 17;
  const uint16_t port_be = htons(bypass::tools::kPingUdpPort);
  std::memcpy(d + 36, &port_be, 2);
  bypass::tools::WritePing(d + kHdr, size, seq, kind);
}

}  // namespace bypass::tools::bare

#endif  // BYPASS_TOOLS_BARE_BARE_FRAME_H_
