// Capture through the provider: FI_BYPASS_DEVICES names the default
// domain's devices with `pcap=FILE` (driver/pcap), two endpoints of this
// process exchange a tagged message over it, and the capture, read by
// tshark with tools/wireshark/bypass.lua once the domain is closed, holds
// their handshake and the message with its tag. Uses the host's
// /run/bypass (tag local).
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tools/wireshark/tshark.h"

namespace {

std::string CapturePattern() {
  const char* tmp = getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/fi-%p.pcap";
}

const bool kEnvironment = [] {
  setenv("FI_BYPASS_DEVICES", ("shm:+udp:pcap=" + CapturePattern()).c_str(), 1);
  return true;
}();

// An endpoint of the domain with its CQ.
struct Ep {
  fid_ep* ep = nullptr;
  fid_cq* cq = nullptr;
  fi_addr_t peer = FI_ADDR_NOTAVAIL;
};

TEST(FiCaptureTest, TheDefaultDomainCapturesToTheFileItsUriNames) {
  const std::string tshark = bypass::wireshark::FindTshark();
  ASSERT_FALSE(tshark.empty()) << bypass::wireshark::kTsharkMissing;
  std::string path = CapturePattern();
  path.replace(path.find("%p"), 2, std::to_string(getpid()));

  fi_info* hints = fi_allocinfo();
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_TAGGED;
  fi_info* info = nullptr;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info), 0);
  fi_freeinfo(hints);
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  ASSERT_EQ(fi_fabric(info->fabric_attr, &fabric, nullptr), 0);
  ASSERT_EQ(fi_domain(fabric, info, &domain, nullptr), 0);
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  ASSERT_EQ(fi_av_open(domain, &av_attr, &av, nullptr), 0);
  Ep e[2];
  std::vector<char> names[2];
  for (Ep& x : e) {
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    ASSERT_EQ(fi_cq_open(domain, &cq_attr, &x.cq, nullptr), 0);
    ASSERT_EQ(fi_endpoint(domain, info, &x.ep, nullptr), 0);
    ASSERT_EQ(fi_ep_bind(x.ep, &av->fid, 0), 0);
    ASSERT_EQ(fi_ep_bind(x.ep, &x.cq->fid, FI_TRANSMIT | FI_RECV), 0);
    ASSERT_EQ(fi_enable(x.ep), 0);
  }
  for (int i = 0; i < 2; ++i) {
    names[i].resize(64);
    size_t len = names[i].size();
    ASSERT_EQ(fi_getname(&e[i].ep->fid, names[i].data(), &len), 0);
    names[i].resize(len);
  }
  ASSERT_EQ(fi_av_insert(av, names[1].data(), 1, &e[0].peer, 0, nullptr), 1);
  ASSERT_EQ(fi_av_insert(av, names[0].data(), 1, &e[1].peer, 0, nullptr), 1);

  char out[64] = "captured", in[64] = {};
  constexpr uint64_t kTag = 0x5ca9;
  ASSERT_EQ(fi_trecv(e[1].ep, in, sizeof(in), nullptr, FI_ADDR_UNSPEC, kTag, 0, nullptr), 0);
  ASSERT_EQ(fi_tsend(e[0].ep, out, sizeof(out), nullptr, e[0].peer, kTag, nullptr), 0);
  int done = 0;
  for (int i = 0; i < 2'000'000 && done < 2; ++i) {
    for (Ep& x : e) {
      fi_cq_tagged_entry c;
      const ssize_t n = fi_cq_read(x.cq, &c, 1);
      ASSERT_TRUE(n == 1 || n == -FI_EAGAIN) << fi_strerror(static_cast<int>(-n));
      if (n == 1) ++done;
    }
  }
  ASSERT_EQ(done, 2);
  EXPECT_STREQ(in, "captured");

  for (Ep& x : e) {
    EXPECT_EQ(fi_close(&x.ep->fid), 0);
    EXPECT_EQ(fi_close(&x.cq->fid), 0);
  }
  EXPECT_EQ(fi_close(&av->fid), 0);
  EXPECT_EQ(fi_close(&domain->fid), 0);  // closes the device: the capture is written
  EXPECT_EQ(fi_close(&fabric->fid), 0);
  fi_freeinfo(info);

  ASSERT_EQ(access(path.c_str(), R_OK), 0) << path;
  const bypass::wireshark::TsharkResult r = bypass::wireshark::RunTshark(
      tshark, path, {"-Y", "bypass", "-T", "fields", "-e", "bypass.type", "-e", "bypass.msg.tag",
                     "-e", "bypass.crc.status"});
  ASSERT_EQ(r.status, 0) << r.command;
  // The handshake (HELLO, COOKIE, HELLO again, HELLO_ACK) both ways round
  // (each endpoint sends and receives through the one device), then the
  // message: every packet twice, once sent and once received. A process
  // descheduled for longer than the first retransmission timeout (1 ms)
  // between the DATA's arrival and its ACK sends the DATA again, so the
  // message shows at least twice, not exactly (a loaded CI host did).
  int hellos = 0, data = 0, bad = 0;
  size_t pos = 0;
  while (pos < r.out.size()) {
    const size_t eol = r.out.find('\n', pos);
    const std::string line = r.out.substr(pos, eol - pos);
    pos = eol == std::string::npos ? r.out.size() : eol + 1;
    if (line.rfind("1\t", 0) == 0) ++hellos;
    if (line.rfind("5\t0x0000000000005ca9\t", 0) == 0) ++data;
    // Good, or Unverified for an UNCHECKED packet (shared memory carries
    // DATA, RMA and ACK without a CRC after the handshake); never Bad.
    if (line.size() < 2 || line.substr(line.size() - 2) == "\t0") ++bad;
  }
  EXPECT_GE(hellos, 2) << r.out;
  EXPECT_GE(data, 2) << r.out;
  EXPECT_EQ(bad, 0) << "CRC-32C Bad:\n" << r.out;
  std::remove(path.c_str());
}

}  // namespace
