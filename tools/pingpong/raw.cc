#include "tools/pingpong/raw.h"

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "driver/clock.h"
#include "tools/pingpong/machine.h"
#include "tools/pingpong/raw_transport.h"

namespace bypass::tools {

absl::Status WaitForLink(driver::Device& dev, uint64_t timeout_ms) {
  const auto& clock = driver::SteadyClock::Get();
  const uint64_t deadline = clock.NowNs() + timeout_ms * 1'000'000;
  while (dev.link_state() != driver::LinkState::kUp) {
    if (clock.NowNs() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the link of ", dev.info().uri, " did not come up within ", timeout_ms / 1000,
          " s: is the other side running (for memif, the same socket in another process)?"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return absl::OkStatus();
}

absl::Status RunRawServer(driver::Device& dev, const PingOptions& /*opts*/) {
  // Echoes and counts whatever size arrives: the device's MTU is the limit.
  raw::RawServer t(dev.queue(0));
  return Serve(t);
}

absl::StatusOr<RunResult> RunRawClient(driver::Device& dev, const PingOptions& opts) {
  RunResult result;
  result.layer = "raw";
  result.device = dev.info().uri;
  raw::RawClient t(dev, opts);
  PingClient<raw::RawClient> client(t);
  if (absl::Status s = client.Run(opts, &result); !s.ok()) return s;
  return result;
}

}  // namespace bypass::tools
