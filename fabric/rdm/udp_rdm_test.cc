// The engine over the kernel UDP device: two endpoints on two UDP devices
// on lo (distinct addresses of 127.0.0.0/8) exchange 1,000 messages of 1 B
// to 64 KiB and one of 1 MiB each way, every byte checked.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "fabric/rdm/udp_exchange.h"
#include "gtest/gtest.h"

namespace bypass::rdm::udp_exchange {
namespace {

// Addresses of this process (127.P.P.host), so that test binaries running
// at once do not contend for ports.
std::string LocalIp(int host) {
  const unsigned pid = static_cast<unsigned>(getpid());
  return absl::StrCat("127.", (pid >> 8) & 0xff, ".", pid & 0xff, ".", host);
}

// Sides on the devices uri_a and uri_b, both on `port`, connect to each
// other and run the exchange.
void Exchange(const std::string& uri_a, const std::string& uri_b, uint16_t port) {
  auto a = Side::Create(uri_a, port, 0);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = Side::Create(uri_b, port, 1);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE((*a)->Connect((*b)->address()).ok());
  ASSERT_TRUE((*b)->Connect((*a)->address()).ok());
  const absl::Status s = RunBoth(**a, **b);
  EXPECT_TRUE(s.ok()) << s;
  std::fprintf(stderr, "%s\n%s\n", (*a)->Report().c_str(), (*b)->Report().c_str());
}

TEST(RdmOverUdp, ExchangeOnLoopbackInterface) {
  Exchange("udp:lo,ip=" + LocalIp(1), "udp:lo,ip=" + LocalIp(2), 4791);
}

TEST(RdmOverUdp, ExchangeWithJumboMtu) {
  // 65000-byte frames: one datagram per 64 KiB message.
  Exchange("udp:lo,ip=" + LocalIp(3) + ",mtu=65000", "udp:lo,ip=" + LocalIp(4) + ",mtu=65000",
           4792);
}

}  // namespace
}  // namespace bypass::rdm::udp_exchange
