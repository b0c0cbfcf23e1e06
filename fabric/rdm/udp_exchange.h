// The RDM engine over the kernel UDP device (driver/udp): one side of an
// exchange of messages between two endpoints, each on its own UDP device,
// stepped by its owner thread. Shared by the test over lo (one thread, two
// devices) and the one across two network namespaces (a thread each).
#ifndef BYPASS_FABRIC_RDM_UDP_EXCHANGE_H_
#define BYPASS_FABRIC_RDM_UDP_EXCHANGE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "driver/device.h"
#include "fabric/rdm/rdm.h"

namespace bypass::rdm::udp_exchange {

// Each side sends kMessages of 1 B to 64 KiB, then one of kBigMessage,
// and receives the other's, checking every byte.
inline constexpr int kMessages = 1000;
inline constexpr size_t kBigMessage = 1 << 20;

class Side {
 public:
  // Opens `uri` (a udp: device) and an endpoint on `udp_port`; side 0 or 1;
  // `configure`, if set, adjusts the endpoint's settings (keys, sizes).
  static absl::StatusOr<std::unique_ptr<Side>> Create(
      const std::string& uri, uint16_t udp_port, int side,
      const std::function<void(EndpointConfig*)>& configure = nullptr);
  ~Side();

  // The address to give the other side (MAC left unknown: it is learned).
  Address address() const;
  absl::Status Connect(const Address& other);
  // One pass: posts the sends that fit, progresses, checks completions.
  absl::Status Step();
  bool Done() const { return send_done_ == kMessages + 1 && recv_done_ == kMessages + 1; }
  std::string Report() const;
  Endpoint& endpoint() { return *ep_; }
  PeerId peer() const { return peer_; }

 private:
  Side() = default;

  int side_ = 0;
  std::unique_ptr<driver::Device> dev_;
  std::unique_ptr<Port> port_;
  std::unique_ptr<Endpoint> ep_;
  PeerId peer_;
  std::vector<std::vector<uint8_t>> out_, in_;
  int sent_ = 0, send_done_ = 0, recv_done_ = 0;
};

// Steps both sides in this thread until both are done, an error, or a
// generous deadline (a bound on a broken run, not a timing assertion).
absl::Status RunBoth(Side& a, Side& b);

}  // namespace bypass::rdm::udp_exchange

#endif  // BYPASS_FABRIC_RDM_UDP_EXCHANGE_H_
