// reflector: opens a device and sends every frame it receives back with the
// Ethernet addresses swapped, until it is killed or its parent exits. The
// peer process of multi-process driver tests. Prints "ready MAC IP" once the
// device is open and its link is up.
//
//   reflector URI [--netns=NAME]
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "driver/device.h"
#include "driver/net_headers.h"

int main(int argc, char** argv) {
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (argc < 2) {
    std::fprintf(stderr, "usage: reflector URI [--netns=NAME]\n");
    return 2;
  }
  for (int i = 2; i < argc; ++i) {
    if (std::strncmp(argv[i], "--netns=", 8) == 0) {
      const std::string path = std::string("/var/run/netns/") + (argv[i] + 8);
      int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
        std::fprintf(stderr, "reflector: cannot enter %s: %s\n", path.c_str(), std::strerror(errno));
        return 1;
      }
      close(fd);
    }
  }
  auto dev = bypass::driver::OpenDevice(argv[1]);
  if (!dev.ok()) {
    std::fprintf(stderr, "reflector: %s\n", std::string(dev.status().message()).c_str());
    return 1;
  }
  bypass::driver::QueuePair& qp = (*dev)->queue(0);
  bool announced = false;
  bypass::driver::Packet* pkts[32];
  for (uint64_t spins = 0;; ++spins) {
    if (!announced && (spins & 0xffff) == 0 &&
        (*dev)->link_state() == bypass::driver::LinkState::kUp) {
      std::printf("ready %s %s\n", (*dev)->info().mac.ToString().c_str(),
                  (*dev)->info().ipv4.ToString().c_str());
      std::fflush(stdout);
      announced = true;
    }
    const uint16_t n = qp.RxBurst(absl::MakeSpan(pkts));
    for (uint16_t i = 0; i < n; ++i) {
      auto* eth = reinterpret_cast<bypass::driver::EthernetHeader*>(pkts[i]->data);
      uint8_t tmp[6];
      std::memcpy(tmp, eth->dst, 6);
      std::memcpy(eth->dst, eth->src, 6);
      std::memcpy(eth->src, tmp, 6);
    }
    uint16_t done = 0;
    while (done < n) done += qp.TxBurst(absl::MakeConstSpan(pkts + done, n - done));
  }
}
