// Addressing as applications type it, on the default domain (no
// configuration at all: shm:+udp:): fi_getinfo's node as 127.0.0.1, the
// host's address or its name, FI_SOURCE with a service alone, hints asking
// FI_SOCKADDR; then endpoints of this process named by fi_av_insertsvc,
// fi_av_insertsym and fi_setname with 127.0.0.1 (fi_getinfo(3), fi_av(3),
// fi_cm(3)). Uses the host's /run/bypass (tag local).
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace {

const bool kNoConfiguration = [] {
  unsetenv("FI_BYPASS_DEVICES");
  setenv("FI_BYPASS_MAX_PEERS", "8", 1);
  return true;
}();

constexpr uint32_t kV = FI_VERSION(1, 17);

// fi_getinfo for an RDM endpoint; the first entry (owned by the caller).
fi_info* Get(const char* node, const char* service, uint64_t flags = 0,
             uint32_t addr_format = FI_FORMAT_UNSPEC) {
  fi_info* hints = fi_allocinfo();
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_MSG;
  hints->addr_format = addr_format;
  fi_info* info = nullptr;
  const int ret = fi_getinfo(kV, node, service, flags, hints, &info);
  fi_freeinfo(hints);
  EXPECT_EQ(ret, 0) << "node " << (node ? node : "(null)") << " service "
                    << (service ? service : "(null)") << ": " << fi_strerror(-ret);
  return ret == 0 ? info : nullptr;
}

sockaddr_in Sin(const void* addr, size_t len) {
  sockaddr_in s{};
  EXPECT_EQ(len, sizeof(s));
  if (addr != nullptr) std::memcpy(&s, addr, sizeof(s));
  EXPECT_EQ(s.sin_family, AF_INET);
  return s;
}

// The default domain's own IPv4, as its entries name it.
std::string HostAddress() {
  fi_info* info = Get(nullptr, nullptr);
  if (info == nullptr) return "";
  EXPECT_STREQ(info->domain_attr->name, "shm:+udp:");
  const sockaddr_in s = Sin(info->src_addr, info->src_addrlen);
  fi_freeinfo(info);
  char text[INET_ADDRSTRLEN];
  return inet_ntop(AF_INET, &s.sin_addr, text, sizeof(text));
}

// Node as 127.0.0.1, the host's address and its name all name this host's
// domain, with the service's port; the destination is the address as typed
// (127.0.0.1 stays 127.0.0.1: fi_av_insert maps it to the domain's).
TEST(DefaultAddressTest, NodeAsApplicationsTypeIt) {
  const std::string host = HostAddress();
  ASSERT_FALSE(host.empty());
  char name[256] = {};
  ASSERT_EQ(gethostname(name, sizeof(name) - 1), 0);
  for (const std::string& node : {std::string("127.0.0.1"), host, std::string(name)}) {
    fi_info* info = Get(node.c_str(), "7999");
    ASSERT_NE(info, nullptr) << node;
    const sockaddr_in d = Sin(info->dest_addr, info->dest_addrlen);
    EXPECT_EQ(ntohs(d.sin_port), 7999) << node;
    char text[INET_ADDRSTRLEN];
    // A loopback address (127.0.0.1, or the name when /etc/hosts maps it to
    // 127.0.1.1) stays as typed; the host's address is itself.
    std::string want = host;
    addrinfo hint{};
    hint.ai_family = AF_INET;
    addrinfo* res = nullptr;
    if (getaddrinfo(node.c_str(), nullptr, &hint, &res) == 0) {
      const in_addr a = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
      if ((ntohl(a.s_addr) >> 24) == 127) want = inet_ntop(AF_INET, &a, text, sizeof(text));
      freeaddrinfo(res);
    }
    EXPECT_STREQ(inet_ntop(AF_INET, &d.sin_addr, text, sizeof(text)), want.c_str()) << node;
    fi_freeinfo(info);
  }
}

// FI_SOURCE with node NULL: the service is the local port.
TEST(DefaultAddressTest, SourceServiceAlone) {
  fi_info* info = Get(nullptr, "7998", FI_SOURCE);
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(ntohs(Sin(info->src_addr, info->src_addrlen).sin_port), 7998);
  EXPECT_EQ(info->dest_addr, nullptr);
  fi_freeinfo(info);
  fi_info* hints = fi_allocinfo();
  fi_info* none = nullptr;
  // fi_getinfo(3): with FI_SOURCE, node or service must be given.
  EXPECT_EQ(fi_getinfo(kV, nullptr, nullptr, FI_SOURCE, hints, &none), -FI_EINVAL);
  hints->addr_format = FI_SOCKADDR_IN6;  // no device has an IPv6 address
  EXPECT_EQ(fi_getinfo(kV, "127.0.0.1", "7998", 0, hints, &none), -FI_ENODATA);
  fi_freeinfo(hints);
}

// An endpoint of the default domain, with its own CQ and AV.
struct Ep {
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_cq* cq = nullptr;
  fid_ep* ep = nullptr;

  void Open(fi_info* info) { ASSERT_EQ(Open(info, nullptr), 0); }
  // With a name given by fi_setname; fi_enable's result (the port may be
  // another process's).
  int Open(fi_info* info, const sockaddr_in* name) {
    EXPECT_EQ(fi_fabric(info->fabric_attr, &fabric, nullptr), 0);
    EXPECT_EQ(fi_domain(fabric, info, &domain, nullptr), 0);
    fi_av_attr av_attr{};
    EXPECT_EQ(fi_av_open(domain, &av_attr, &av, nullptr), 0);
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_CONTEXT;
    EXPECT_EQ(fi_cq_open(domain, &cq_attr, &cq, nullptr), 0);
    EXPECT_EQ(fi_endpoint(domain, info, &ep, nullptr), 0);
    EXPECT_EQ(fi_ep_bind(ep, &av->fid, 0), 0);
    EXPECT_EQ(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
    if (name != nullptr) {
      EXPECT_EQ(fi_setname(&ep->fid, const_cast<sockaddr_in*>(name), sizeof(*name)), 0);
    }
    return fi_enable(ep);
  }
  sockaddr_in Name() const {
    sockaddr_in s{};
    size_t len = sizeof(s);
    EXPECT_EQ(fi_getname(&ep->fid, &s, &len), 0);
    EXPECT_EQ(len, sizeof(s));
    return s;
  }
  void Close() {
    EXPECT_EQ(fi_close(&ep->fid), 0);
    EXPECT_EQ(fi_close(&cq->fid), 0);
    EXPECT_EQ(fi_close(&av->fid), 0);
    EXPECT_EQ(fi_close(&domain->fid), 0);
    EXPECT_EQ(fi_close(&fabric->fid), 0);
  }
};

// Sends one message from `from` to `to` (fi_addr `dest` in from's AV).
void Deliver(Ep& from, Ep& to, fi_addr_t dest, const char* what) {
  char in[16] = {}, out[16];
  std::snprintf(out, sizeof(out), "%s", what);
  ASSERT_EQ(fi_recv(to.ep, in, sizeof(in), nullptr, FI_ADDR_UNSPEC, in), 0);
  ASSERT_EQ(fi_send(from.ep, out, sizeof(out), nullptr, dest, out), 0);
  int done = 0;
  for (int i = 0; i < 2'000'000 && done < 2; ++i) {
    fi_cq_entry e;
    for (fid_cq* cq : {from.cq, to.cq}) {
      const ssize_t n = fi_cq_read(cq, &e, 1);
      ASSERT_TRUE(n == 1 || n == -FI_EAGAIN) << what << ": " << n;
      if (n == 1) ++done;
    }
  }
  EXPECT_EQ(done, 2) << what;
  EXPECT_STREQ(in, what);
}

// Hints asking FI_SOCKADDR: entries, names and AV inserts in that format;
// peers named by fi_av_insertsvc ("127.0.0.1", port) and fi_av_insertsym,
// and an endpoint named by fi_setname with 127.0.0.1; fi_av_straddr.
TEST(DefaultAddressTest, EndpointsNamedEveryWay) {
  fi_info* info = Get(nullptr, nullptr, 0, FI_SOCKADDR);
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->addr_format, FI_SOCKADDR);
  Ep a, b;
  a.Open(info);
  b.Open(info);
  const sockaddr_in nb = b.Name();
  const std::string port = std::to_string(ntohs(nb.sin_port));

  fi_addr_t by_name = FI_ADDR_NOTAVAIL, by_svc = FI_ADDR_NOTAVAIL, by_sym = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(fi_av_insert(a.av, &nb, 1, &by_name, 0, nullptr), 1);
  ASSERT_EQ(fi_av_insertsvc(a.av, "127.0.0.1", port.c_str(), &by_svc, 0, nullptr), 1);
  ASSERT_EQ(fi_av_insertsym(a.av, "127.0.0.1", 1, port.c_str(), 1, &by_sym, 0, nullptr), 1);
  Deliver(a, b, by_name, "by name");
  Deliver(a, b, by_svc, "by service");
  Deliver(a, b, by_sym, "by symbol");

  char text[64];
  size_t len = sizeof(text);
  ASSERT_EQ(fi_av_straddr(a.av, &nb, text, &len), text);
  EXPECT_NE(std::string(text).find(":" + port), std::string::npos) << text;
  EXPECT_EQ(len, std::strlen(text) + 1);

  // fi_setname with 127.0.0.1: the next port no one holds.
  Ep c;
  sockaddr_in want{};
  want.sin_family = AF_INET;
  want.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int ret = -FI_EADDRINUSE;
  for (uint16_t p = ntohs(nb.sin_port) + 1; ret == -FI_EADDRINUSE && p < 65535; ++p) {
    want.sin_port = htons(p);
    ret = c.Open(info, &want);
    if (ret == -FI_EADDRINUSE) c.Close();
  }
  ASSERT_EQ(ret, 0) << fi_strerror(-ret);
  const sockaddr_in nc = c.Name();
  EXPECT_EQ(nc.sin_port, want.sin_port);
  EXPECT_EQ(nc.sin_addr.s_addr, want.sin_addr.s_addr);  // the name it was given
  fi_addr_t to_c = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(fi_av_insert(a.av, &nc, 1, &to_c, 0, nullptr), 1);
  Deliver(a, c, to_c, "by setname");
  c.Close();
  b.Close();
  a.Close();
  fi_freeinfo(info);
}

// The default domain holds ep_cnt endpoints, each with its own port; the
// first and the last talk through it.
TEST(DefaultAddressTest, EpCntEndpointsOnOneDomain) {
  fi_info* info = Get(nullptr, nullptr);
  ASSERT_NE(info, nullptr);
  const size_t n = info->domain_attr->ep_cnt;
  Ep first;
  first.Open(info);
  std::vector<fid_ep*> eps{first.ep};
  std::vector<uint16_t> ports{ntohs(first.Name().sin_port)};
  for (size_t i = 1; i < n; ++i) {
    fid_ep* ep = nullptr;
    ASSERT_EQ(fi_endpoint(first.domain, info, &ep, nullptr), 0) << "endpoint " << i;
    eps.push_back(ep);
    ASSERT_EQ(fi_ep_bind(ep, &first.av->fid, 0), 0);
    ASSERT_EQ(fi_ep_bind(ep, &first.cq->fid, FI_TRANSMIT | FI_RECV), 0);
    ASSERT_EQ(fi_enable(ep), 0) << "endpoint " << i;
    sockaddr_in s{};
    size_t len = sizeof(s);
    ASSERT_EQ(fi_getname(&ep->fid, &s, &len), 0);
    ports.push_back(ntohs(s.sin_port));
  }
  std::sort(ports.begin(), ports.end());
  EXPECT_EQ(std::unique(ports.begin(), ports.end()), ports.end()) << "two endpoints share a port";
  fid_ep* extra = nullptr;
  EXPECT_EQ(fi_endpoint(first.domain, info, &extra, nullptr), -FI_EINVAL);

  sockaddr_in last{};
  size_t len = sizeof(last);
  ASSERT_EQ(fi_getname(&eps.back()->fid, &last, &len), 0);
  fi_addr_t to = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(fi_av_insert(first.av, &last, 1, &to, 0, nullptr), 1);
  char in[8] = {}, out[8] = "last";
  ASSERT_EQ(fi_recv(eps.back(), in, sizeof(in), nullptr, FI_ADDR_UNSPEC, in), 0);
  ASSERT_EQ(fi_send(first.ep, out, sizeof(out), nullptr, to, out), 0);
  int done = 0;
  for (int i = 0; i < 200'000 && done < 2; ++i) {
    fi_cq_entry e;
    const ssize_t r = fi_cq_read(first.cq, &e, 1);
    ASSERT_TRUE(r == 1 || r == -FI_EAGAIN) << r;
    if (r == 1) ++done;
  }
  EXPECT_EQ(done, 2);
  EXPECT_STREQ(in, "last");
  for (size_t i = 1; i < eps.size(); ++i) EXPECT_EQ(fi_close(&eps[i]->fid), 0);
  first.Close();
  fi_freeinfo(info);
}

}  // namespace
