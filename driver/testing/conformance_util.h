// Helpers of the conformance suite: test frames with a sequence number, and
// bounded polling loops. Usable by backend-specific tests too.
#ifndef BYPASS_DRIVER_TESTING_CONFORMANCE_UTIL_H_
#define BYPASS_DRIVER_TESTING_CONFORMANCE_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/types/span.h"
#include "driver/device.h"
#include "driver/net_headers.h"
#include "driver/testing/conformance.h"

namespace bypass::driver::testing {

// Test payloads start with this and a 64-bit sequence number, then a byte
// pattern derived from the sequence number.
inline constexpr uint32_t kTestMagic = 0x62797073;  // "byps"
// 42 header bytes + 18 = 60, the shortest Ethernet frame without FCS.
inline constexpr size_t kMinPayload = 18;

// The flow from `from` to `to` (MACs and IPv4s of the devices), source port
// dst_port + 1.
UdpFlow FlowBetween(const Device& from, const Device& to, uint16_t dst_port);

// Writes a test frame with `payload_len` >= kMinPayload bytes into p.
// Returns false if it does not fit p->capacity.
bool WriteTestFrame(Packet* p, const UdpFlow& flow, uint64_t seq, size_t payload_len);

// The sequence number of an intact test frame; nothing for anything else
// (another protocol, a bad checksum, a damaged pattern).
std::optional<uint64_t> TestFrameSeq(const Packet* p);

// Bounded burst loops: every loop stops after the factory's poll budget, so
// a broken backend fails a test instead of hanging it. Frames that are not
// test frames (e.g. a kernel's IPv6 router solicitations on a veth) are
// freed and counted in foreign().
class Pump {
 public:
  explicit Pump(const BackendFeatures& features) : budget_(features.poll_budget) {}

  // Transmits all of pkts from q, retrying what TxBurst hands back. On an
  // exhausted budget frees the rest and returns false.
  bool SendAll(QueuePair& q, absl::Span<Packet* const> pkts);
  // Receives n test frames from q (fewer if the budget runs out), in order.
  // The caller owns them.
  std::vector<Packet*> Receive(QueuePair& q, size_t n);
  // Receives up to n test frames, calls fn on each and frees it; returns how
  // many. For counts larger than the receiver's pool.
  size_t Consume(QueuePair& q, size_t n, absl::FunctionRef<void(const Packet&)> fn);
  // One RxBurst into scratch; frees what arrives and returns how many were
  // test frames.
  size_t PollOnce(QueuePair& q, absl::Span<Packet*> scratch);
  // Polls q a fixed number of times and frees what arrives; returns how many
  // test frames that was. Used to check that nothing arrives.
  size_t PollOurs(QueuePair& q, absl::Span<Packet*> scratch);

  uint64_t foreign() const { return foreign_; }

 private:
  // Moves the test frames of pkts[0, n) to the front, freeing the others;
  // returns how many remain.
  size_t KeepOurs(QueuePair& q, Packet** pkts, size_t n);

  uint64_t budget_;
  uint64_t foreign_ = 0;
};

// 127.P.P.host, P.P the low 16 bits of this process's id: an address of
// this process, so that test binaries running at once do not contend for
// the same addresses and ports.
std::string LocalIp(int host);

}  // namespace bypass::driver::testing

#endif  // BYPASS_DRIVER_TESTING_CONFORMANCE_UTIL_H_
