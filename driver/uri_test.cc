#include "driver/uri.h"

#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace bypass::driver {
namespace {

using Params = std::vector<std::pair<std::string, std::string>>;

DeviceUri MustParse(std::string_view text) {
  absl::StatusOr<DeviceUri> uri = DeviceUri::Parse(text);
  EXPECT_TRUE(uri.ok()) << text << ": " << uri.status();
  return uri.ok() ? *uri : DeviceUri{};
}

// An error is InvalidArgument, one line, and names the URI.
void ExpectBad(std::string_view text) {
  absl::StatusOr<DeviceUri> uri = DeviceUri::Parse(text);
  ASSERT_FALSE(uri.ok()) << "accepted '" << text << "'";
  EXPECT_EQ(uri.status().code(), absl::StatusCode::kInvalidArgument) << text;
  const std::string msg(uri.status().message());
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::string(text)), std::string::npos) << msg;
}

TEST(DeviceUriTest, SchemeTargetAndParamsInOrder) {
  DeviceUri uri = MustParse("memif:/run/a.sock,role=auto,id=3");
  EXPECT_EQ(uri.text, "memif:/run/a.sock,role=auto,id=3");
  EXPECT_EQ(uri.scheme, "memif");
  EXPECT_EQ(uri.target, "/run/a.sock");
  EXPECT_EQ(uri.params, (Params{{"role", "auto"}, {"id", "3"}}));
}

TEST(DeviceUriTest, FirstElementWithEqualsIsAParameter) {
  DeviceUri uri = MustParse("dpdk:port=0,queues=0-3");
  EXPECT_EQ(uri.target, "");
  EXPECT_EQ(uri.params, (Params{{"port", "0"}, {"queues", "0-3"}}));
}

TEST(DeviceUriTest, TargetMayContainColons) {
  DeviceUri uri = MustParse("dpdk:0000:3b:00.0,ip=10.0.0.1");
  EXPECT_EQ(uri.scheme, "dpdk");
  EXPECT_EQ(uri.target, "0000:3b:00.0");
  EXPECT_EQ(uri.Get("ip"), "10.0.0.1");
}

TEST(DeviceUriTest, BracketedListsStayWhole) {
  DeviceUri uri = MustParse("dpdk:net_mlx5,representor=[0,1],x=y");
  EXPECT_EQ(uri.target, "net_mlx5");
  EXPECT_EQ(uri.params, (Params{{"representor", "[0,1]"}, {"x", "y"}}));
}

TEST(DeviceUriTest, ValuesMayContainEqualsAndColons) {
  DeviceUri uri = MustParse("memif:/s,secret=a=b:c");
  EXPECT_EQ(uri.Get("secret"), "a=b:c");
}

TEST(DeviceUriTest, EmptyBodyGivesEmptyTarget) {
  DeviceUri uri = MustParse("loopback:");
  EXPECT_EQ(uri.scheme, "loopback");
  EXPECT_TRUE(uri.target.empty());
  EXPECT_TRUE(uri.params.empty());
}

TEST(DeviceUriTest, RejectsMalformedUris) {
  ExpectBad("");
  ExpectBad("loopback");
  ExpectBad(":x");
  ExpectBad("Loopback:x");
  ExpectBad("loop back:x");
  ExpectBad("dpdk:a,,b=c");
  ExpectBad("dpdk:a,");
  ExpectBad("dpdk:,a=b");
  ExpectBad("dpdk:a,bare");
  ExpectBad("dpdk:a,=v");
  ExpectBad("dpdk:a,k=");
  ExpectBad("dpdk:a,k=1,k=2");
  ExpectBad("dpdk:a,x=[1,2");
  ExpectBad("dpdk:a,x=1]");
}

TEST(DeviceUriTest, GetHasTake) {
  DeviceUri uri = MustParse("loopback:seg,ip=10.0.0.1,mac=02:00:00:00:00:01");
  EXPECT_TRUE(uri.Has("ip"));
  EXPECT_FALSE(uri.Has("mtu"));
  EXPECT_EQ(uri.Get("nope"), std::nullopt);
  EXPECT_EQ(uri.Take("ip"), "10.0.0.1");
  EXPECT_FALSE(uri.Has("ip"));
  EXPECT_EQ(uri.Take("ip"), std::nullopt);
  EXPECT_EQ(uri.params, (Params{{"mac", "02:00:00:00:00:01"}}));
  EXPECT_EQ(uri.text, "loopback:seg,ip=10.0.0.1,mac=02:00:00:00:00:01");  // unchanged
}

TEST(DeviceUriTest, RestJoinsTargetAndRemainingParams) {
  DeviceUri uri = MustParse("dpdk:net_af_xdp0,iface=veth0,ip=10.0.0.1,start_queue=1");
  uri.Take("ip");
  EXPECT_EQ(uri.Rest(), "net_af_xdp0,iface=veth0,start_queue=1");
  DeviceUri attach = MustParse("dpdk:port=0,queues=0-3");
  EXPECT_EQ(attach.Rest(), "port=0,queues=0-3");
  EXPECT_EQ(MustParse("dpdk:net_ring0").Rest(), "net_ring0");
}

TEST(DeviceUriTest, CheckKnownNamesTheFirstUnknownParam) {
  DeviceUri uri = MustParse("memif:/s,role=server,colour=blue");
  EXPECT_TRUE(MustParse("memif:/s,role=server").CheckKnown({"role", "id"}).ok());
  absl::Status s = uri.CheckKnown({"role", "id"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(s.message());
  EXPECT_NE(msg.find("'colour'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("role, id"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos);
  EXPECT_FALSE(MustParse("x:y,a=b").CheckKnown({}).ok());
}

}  // namespace
}  // namespace bypass::driver
