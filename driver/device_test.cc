// The value types of the contract, and the shared option checks.
#include <string>

#include "absl/status/status.h"
#include "driver/device.h"
#include "driver/options.h"
#include "driver/uri.h"
#include "gtest/gtest.h"

namespace bypass::driver {
namespace {

TEST(MacAddressTest, ParsesAndPrints) {
  absl::StatusOr<MacAddress> mac = MacAddress::Parse("02:0A:ff:00:10:9b");
  ASSERT_TRUE(mac.ok()) << mac.status();
  EXPECT_EQ(mac->bytes, (std::array<uint8_t, 6>{0x02, 0x0a, 0xff, 0x00, 0x10, 0x9b}));
  EXPECT_EQ(mac->ToString(), "02:0a:ff:00:10:9b");
  EXPECT_EQ(MacAddress::Parse("02-0a-ff-00-10-9b").value(), *mac);
  EXPECT_FALSE(mac->IsMulticast());
  EXPECT_FALSE(mac->IsBroadcast());
  EXPECT_TRUE(kBroadcastMac.IsBroadcast());
  EXPECT_TRUE(kBroadcastMac.IsMulticast());
  EXPECT_TRUE(MacAddress::Parse("01:00:5e:00:00:01")->IsMulticast());
}

TEST(MacAddressTest, RejectsMalformed) {
  for (const char* bad : {"", "02:00:00:00:00", "02:00:00:00:00:00:00", "02:00:00:00:00:0g",
                          "02-00:00:00:00:00", "2:00:00:00:00:00:0", "020000000000",
                          "02:00:00:00:00:001"}) {
    absl::StatusOr<MacAddress> mac = MacAddress::Parse(bad);
    EXPECT_EQ(mac.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(Ipv4AddressTest, ParsesAndPrints) {
  absl::StatusOr<Ipv4Address> ip = Ipv4Address::Parse("10.77.0.255");
  ASSERT_TRUE(ip.ok()) << ip.status();
  EXPECT_EQ(ip->value, 0x0a4d00ffu);
  EXPECT_EQ(ip->ToString(), "10.77.0.255");
  EXPECT_EQ(Ipv4Address::Parse("0.0.0.0")->value, 0u);
  EXPECT_EQ(Ipv4Address::Parse("255.255.255.255")->value, 0xffffffffu);
}

TEST(Ipv4AddressTest, RejectsMalformed) {
  for (const char* bad : {"", "10.0.0", "10.0.0.1.", "10.0.0.256", "10.0.0.01", "10..0.1",
                          "a.b.c.d", " 10.0.0.1", "10.0.0.1 ", "-1.0.0.0", "1000.0.0.1"}) {
    EXPECT_EQ(Ipv4Address::Parse(bad).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(LinkStateTest, Names) {
  EXPECT_EQ(LinkStateName(LinkState::kUp), "up");
  EXPECT_EQ(LinkStateName(LinkState::kDown), "down");
}

TEST(OptionsTest, TakesBypassKeysAndLeavesTheRest) {
  DeviceUri uri = DeviceUri::Parse("memif:/s,ip=10.1.2.3,mtu=9000,queues=4,ring=256,id=2").value();
  DeviceOptions opts;
  ASSERT_TRUE(TakeUriOptions(uri, opts).ok());
  EXPECT_EQ(opts.ipv4, Ipv4Address{0x0a010203});
  EXPECT_EQ(opts.mtu, 9000u);
  EXPECT_EQ(opts.queues, 4);
  EXPECT_EQ(opts.ring_size, 256);
  EXPECT_EQ(uri.Rest(), "/s,id=2");
  EXPECT_TRUE(TakeUriOptions(uri, opts).ok()) << "taking twice is harmless";
}

TEST(OptionsTest, DpdkAttachFormKeepsQueues) {
  DeviceUri attach = DeviceUri::Parse("dpdk:port=0,queues=0-3,ip=10.0.0.1").value();
  DeviceOptions opts;
  ASSERT_TRUE(TakeUriOptions(attach, opts).ok());
  EXPECT_EQ(attach.Get("queues"), "0-3");
  EXPECT_EQ(opts.queues, 1);
  DeviceUri vdev = DeviceUri::Parse("dpdk:net_ring0,queues=2").value();
  ASSERT_TRUE(TakeUriOptions(vdev, opts).ok());
  EXPECT_EQ(opts.queues, 2);
  EXPECT_FALSE(vdev.Has("queues"));
}

TEST(OptionsTest, BadValuesSayWhatIsAccepted) {
  // A bad input and a phrase its error must contain.
  struct Case {
    const char* uri;
    const char* expect;
  };
  for (const Case& c : {Case{"loopback:x,ip=10.0.0.256", "IPv4 address"},
                        Case{"loopback:x,mtu=67", "68 to 9000"},
                        Case{"loopback:x,mtu=9001", "68 to 9000"},
                        Case{"loopback:x,mtu=+1500", "68 to 9000"},
                        Case{"loopback:x,queues=0", "1 to 1024"},
                        Case{"loopback:x,queues=two", "1 to 1024"},
                        Case{"loopback:x,ring=100", "power of two"},
                        Case{"loopback:x,ring=4", "power of two"},
                        Case{"loopback:x,ring=65536", "power of two"}}) {
    DeviceUri uri = DeviceUri::Parse(c.uri).value();
    DeviceOptions opts;
    absl::Status s = TakeUriOptions(uri, opts);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.uri;
    const std::string msg(s.message());
    EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.uri), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(OptionsTest, ValidateChecksRanges) {
  EXPECT_TRUE(ValidateOptions(DeviceOptions{}).ok());
  DeviceOptions o;
  o.ring_size = 1000;
  EXPECT_FALSE(ValidateOptions(o).ok());
  o = {};
  o.queues = 0;
  EXPECT_FALSE(ValidateOptions(o).ok());
  o = {};
  o.mtu = 9216;
  EXPECT_FALSE(ValidateOptions(o).ok());
  // A backend with a higher ceiling (the kernel UDP device) passes its own.
  EXPECT_TRUE(ValidateOptions(o, kMaxUdpSocketMtu).ok());
  o.mtu = kMaxUdpSocketMtu + 1;
  EXPECT_FALSE(ValidateOptions(o, kMaxUdpSocketMtu).ok());
}

TEST(OptionsTest, TakeUriOptionsHonoursTheBackendsMtuCeiling) {
  DeviceUri uri = DeviceUri::Parse("udp:lo,mtu=65000").value();
  DeviceOptions opts;
  ASSERT_TRUE(TakeUriOptions(uri, opts, kMaxUdpSocketMtu).ok());
  EXPECT_EQ(opts.mtu, 65000u);
  DeviceUri nic = DeviceUri::Parse("loopback:x,mtu=65000").value();
  const absl::Status s = TakeUriOptions(nic, opts);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("68 to 9000"), std::string::npos) << s;
}

}  // namespace
}  // namespace bypass::driver
