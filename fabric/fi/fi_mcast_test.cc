// Multicast on FI_EP_DGRAM (fi_cm(3) fi_join, fi_mc_addr, FI_MULTICAST) and
// traffic classes on the wire (fi_endpoint(3) tclass), through the public
// libfabric API over in-process loopback domains of one segment. A raw
// loopback port on the same segment is the sniffer of the DSCP test.
#include <arpa/inet.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "driver/device.h"
#include "driver/net_headers.h"
#include "gtest/gtest.h"

namespace {

constexpr const char* kDev[] = {"loopback:mcast,ip=10.78.0.1", "loopback:mcast,ip=10.78.0.2",
                                "loopback:mcast,ip=10.78.0.3", "loopback:mcast,ip=10.78.0.4"};
constexpr char kDefaultDomain[] = "shm:+udp:";
constexpr char kSniffer[] = "loopback:mcast,ip=10.78.0.9";

const bool kEnvironment = [] {
  std::string list;
  for (const char* d : kDev) list += std::string(d) + ";";
  list += kDefaultDomain;
  setenv("FI_BYPASS_DEVICES", list.c_str(), 1);
  return true;
}();

sockaddr_in Sockaddr(const char* ip, uint16_t port) {
  sockaddr_in s{};
  s.sin_family = AF_INET;
  s.sin_port = htons(port);
  EXPECT_EQ(inet_pton(AF_INET, ip, &s.sin_addr), 1);
  return s;
}

fi_info* Hints(fi_ep_type type, uint64_t caps) {
  fi_info* h = fi_allocinfo();
  h->ep_attr->type = type;
  h->caps = caps;
  h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED;
  return h;
}

// The domains fi_getinfo returns for these hints.
std::vector<std::string> Domains(fi_ep_type type, uint64_t caps) {
  fi_info* hints = Hints(type, caps);
  fi_info* list = nullptr;
  const int ret = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list);
  fi_freeinfo(hints);
  std::vector<std::string> out;
  if (ret != 0) return out;
  for (fi_info* i = list; i != nullptr; i = i->next) out.push_back(i->domain_attr->name);
  fi_freeinfo(list);
  return out;
}

// One FI_EP_DGRAM endpoint with FI_MULTICAST on a domain of its own, its
// CQ (both directions, FI_SOURCE), AV and EQ.
struct Member {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_cq* cq = nullptr;
  fid_eq* eq = nullptr;
  fid_ep* ep = nullptr;
  char buf[64] = {};

  void Open(const char* dev, fi_ep_type type = FI_EP_DGRAM, uint32_t tclass = FI_TC_UNSPEC,
            bool bind_eq = true) {
    const uint64_t caps = type == FI_EP_DGRAM ? FI_MSG | FI_MULTICAST | FI_SOURCE : FI_MSG;
    fi_info* hints = Hints(type, caps);
    fi_info* list = nullptr;
    ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list), 0);
    fi_freeinfo(hints);
    for (fi_info* i = list; i != nullptr && info == nullptr; i = i->next) {
      if (std::strcmp(i->domain_attr->name, dev) == 0) info = fi_dupinfo(i);
    }
    fi_freeinfo(list);
    ASSERT_NE(info, nullptr) << dev;
    info->tx_attr->tclass = tclass;
    ASSERT_EQ(fi_fabric(info->fabric_attr, &fabric, nullptr), 0);
    ASSERT_EQ(fi_domain(fabric, info, &domain, nullptr), 0);
    OpenEp(bind_eq);
  }
  // Another endpoint on the domain of `other`.
  void OpenBeside(const Member& other) {
    info = fi_dupinfo(other.info);
    domain = other.domain;
    fabric = other.fabric;
    OpenEp(true);
    domain = nullptr;  // other's
    fabric = nullptr;
  }
  void OpenEp(bool bind_eq) {
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    ASSERT_EQ(fi_av_open(domain, &av_attr, &av, nullptr), 0);
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_DATA;
    ASSERT_EQ(fi_cq_open(domain, &cq_attr, &cq, nullptr), 0);
    fi_eq_attr eq_attr{};
    ASSERT_EQ(fi_eq_open(fabric, &eq_attr, &eq, nullptr), 0);
    ASSERT_EQ(fi_endpoint(domain, info, &ep, nullptr), 0);
    ASSERT_EQ(fi_ep_bind(ep, &av->fid, 0), 0);
    ASSERT_EQ(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
    if (bind_eq) {
      ASSERT_EQ(fi_ep_bind(ep, &eq->fid, 0), 0);
    }
    ASSERT_EQ(fi_enable(ep), 0);
  }
  void Close() {
    for (fid* f : {&ep->fid, &cq->fid, &eq->fid, &av->fid}) EXPECT_EQ(fi_close(f), 0);
    if (domain != nullptr) {
      EXPECT_EQ(fi_close(&domain->fid), 0);
    }
    if (fabric != nullptr) {
      EXPECT_EQ(fi_close(&fabric->fid), 0);
    }
    fi_freeinfo(info);
  }

  // Joins group:port and reads its FI_JOIN_COMPLETE.
  fid_mc* Join(const sockaddr_in& group, uint64_t flags = 0) {
    fid_mc* mc = nullptr;
    int ctx = 0;
    EXPECT_EQ(fi_join(ep, &group, flags, &mc, &ctx), 0);
    if (mc == nullptr) return nullptr;
    uint32_t event = 0;
    fi_eq_entry entry{};
    EXPECT_EQ(fi_eq_read(eq, &event, &entry, sizeof(entry), 0), static_cast<ssize_t>(sizeof(entry)));
    EXPECT_EQ(event, static_cast<uint32_t>(FI_JOIN_COMPLETE));
    EXPECT_EQ(entry.fid, &mc->fid);
    EXPECT_EQ(entry.context, &ctx);
    return mc;
  }
  fi_addr_t Insert(const Member& peer) {
    char name[64];
    size_t len = sizeof(name);
    EXPECT_EQ(fi_getname(&peer.ep->fid, name, &len), 0);
    fi_addr_t a = FI_ADDR_NOTAVAIL;
    EXPECT_EQ(fi_av_insert(av, name, 1, &a, 0, nullptr), 1);
    return a;
  }
  void PostRecv() { ASSERT_EQ(fi_recv(ep, buf, sizeof(buf), nullptr, FI_ADDR_UNSPEC, this), 0); }
  void SendMulticast(fid_mc* mc, const char* text) {
    iovec iov{const_cast<char*>(text), std::strlen(text) + 1};
    fi_msg msg{};
    msg.msg_iov = &iov;
    msg.iov_count = 1;
    msg.addr = fi_mc_addr(mc);
    ssize_t ret;
    while ((ret = fi_sendmsg(ep, &msg, FI_MULTICAST | FI_COMPLETION)) == -FI_EAGAIN) Poll();
    ASSERT_EQ(ret, 0);
  }

  // What one pass of fi_cq_readfrom returned.
  struct Got {
    uint64_t flags = 0;
    fi_addr_t src = FI_ADDR_NOTAVAIL;
    std::string text;
  };
  std::vector<Got> received;
  int sends_done = 0;
  void Poll() {
    fi_cq_data_entry e[4];
    fi_addr_t src[4];
    const ssize_t n = fi_cq_readfrom(cq, e, 4, src);
    for (ssize_t i = 0; i < n; ++i) {
      if (e[i].flags & FI_SEND) {
        ++sends_done;
      } else {
        received.push_back({e[i].flags, src[i], std::string(static_cast<char*>(e[i].buf))});
      }
    }
  }
};

// Polls every member until each of `expect` has `n` receives (the test's
// own deadline: a lost datagram fails here rather than hanging), then a
// little longer so that a duplicate would show.
void PollUntil(const std::vector<Member*>& all, const std::vector<Member*>& expect, size_t n) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  auto all_there = [&] {
    for (Member* m : expect) {
      if (m->received.size() < n) return false;
    }
    return true;
  };
  while (!all_there() && std::chrono::steady_clock::now() < deadline) {
    for (Member* m : all) m->Poll();
  }
  for (int i = 0; i < 2000; ++i) {
    for (Member* m : all) m->Poll();
  }
}

TEST(McastInfoTest, OfferedOnDatagramsOnly) {
  // Every domain here carries multicast: loopback, and the default one
  // through its kernel UDP device.
  EXPECT_EQ(Domains(FI_EP_DGRAM, FI_MSG | FI_MULTICAST).size(), 5u);
  EXPECT_TRUE(Domains(FI_EP_RDM, FI_MSG | FI_MULTICAST).empty());
}

TEST(McastTest, EveryMemberReceivesOnceNonMembersNoneAndLeavingStops) {
  Member a, b, c, b2, outsider;
  a.Open(kDev[0]);
  b.Open(kDev[1]);
  c.Open(kDev[2]);
  b2.OpenBeside(b);  // a second member on b's queue: the port copies
  outsider.Open(kDev[3]);
  const std::vector<Member*> all{&a, &b, &c, &b2, &outsider};
  const sockaddr_in group = Sockaddr("239.1.2.3", 7600);
  fid_mc* ma = a.Join(group);
  fid_mc* mb = b.Join(group);
  fid_mc* mc = c.Join(group);
  fid_mc* mb2 = b2.Join(group, FI_RECV);
  ASSERT_NE(ma, nullptr);
  ASSERT_NE(mb, nullptr);
  ASSERT_NE(mc, nullptr);
  ASSERT_NE(mb2, nullptr);
  // The outsider joined another group on the same port: not this one's.
  fid_mc* other = outsider.Join(Sockaddr("239.1.2.4", 7600));
  ASSERT_NE(other, nullptr);
  const fi_addr_t a_at_b = b.Insert(a);
  for (Member* m : all) {
    m->PostRecv();
    m->PostRecv();
  }

  a.SendMulticast(ma, "first");
  PollUntil(all, {&a, &b, &c, &b2}, 1);
  EXPECT_EQ(a.sends_done, 1);
  for (Member* m : {&a, &b, &c, &b2}) {
    ASSERT_EQ(m->received.size(), 1u);
    EXPECT_EQ(m->received[0].text, "first");
    EXPECT_TRUE(m->received[0].flags & FI_MULTICAST);
    EXPECT_TRUE(m->received[0].flags & FI_RECV);
  }
  EXPECT_EQ(b.received[0].src, a_at_b);  // FI_SOURCE: the sender, as usual
  EXPECT_EQ(c.received[0].src, FI_ADDR_NOTAVAIL);  // a is not in c's AV
  EXPECT_TRUE(outsider.received.empty());

  // b leaves: it gets nothing more, the others do.
  ASSERT_EQ(fi_close(&mb->fid), 0);
  a.SendMulticast(ma, "second");
  PollUntil(all, {&a, &c, &b2}, 2);
  EXPECT_EQ(b.received.size(), 1u);
  for (Member* m : {&a, &c, &b2}) {
    ASSERT_EQ(m->received.size(), 2u);
    EXPECT_EQ(m->received[1].text, "second");
  }
  EXPECT_TRUE(outsider.received.empty());

  // A receive-only membership has no address to send to.
  EXPECT_EQ(fi_send(b2.ep, "x", 2, nullptr, fi_mc_addr(mb2), nullptr), -FI_EINVAL);
  // FI_MULTICAST to an address that is no group is refused.
  iovec iov{const_cast<char*>("x"), 2};
  fi_msg msg{};
  msg.msg_iov = &iov;
  msg.iov_count = 1;
  msg.addr = a_at_b;
  EXPECT_EQ(fi_sendmsg(b.ep, &msg, FI_MULTICAST), -FI_EINVAL);
  // The endpoint is held while a membership is open.
  EXPECT_EQ(fi_close(&a.ep->fid), -FI_EBUSY);
  for (fid_mc* m : {ma, mc, mb2, other}) EXPECT_EQ(fi_close(&m->fid), 0);
  EXPECT_EQ(fi_close(&ma->fid), -FI_EBADF);  // closed already
  b2.Close();
  for (Member* m : {&a, &b, &c, &outsider}) m->Close();
}

// The default domain (shm:+udp:): groups are the kernel UDP device's (a
// socket per group on each queue, IP_ADD_MEMBERSHIP; the kernel loops the
// datagram back to this host's members). Two domains of the process are
// two instances of the device (two sockets on the group); b2 shares b's.
TEST(McastDefaultDomainTest, EveryMemberReceivesOnceAndLeavingStops) {
  Member a, b, b2, outsider;
  a.Open(kDefaultDomain);
  b.Open(kDefaultDomain);
  b2.OpenBeside(b);
  outsider.Open(kDefaultDomain);
  const std::vector<Member*> all{&a, &b, &b2, &outsider};
  // A group of this process's own (tests of other processes may run beside).
  const std::string ip = "239.78." + std::to_string((getpid() >> 8) & 0xff) + "." +
                         std::to_string(getpid() & 0xff);
  const sockaddr_in group = Sockaddr(ip.c_str(), 7601);
  fid_mc* ma = a.Join(group);
  fid_mc* mb = b.Join(group);
  fid_mc* mb2 = b2.Join(group);
  ASSERT_NE(ma, nullptr);
  ASSERT_NE(mb, nullptr);
  ASSERT_NE(mb2, nullptr);
  for (Member* m : all) {
    m->PostRecv();
    m->PostRecv();
  }
  a.SendMulticast(ma, "first");
  PollUntil(all, {&a, &b, &b2}, 1);
  for (Member* m : {&a, &b, &b2}) {
    ASSERT_EQ(m->received.size(), 1u);
    EXPECT_EQ(m->received[0].text, "first");
    EXPECT_TRUE(m->received[0].flags & FI_MULTICAST);
  }
  EXPECT_TRUE(outsider.received.empty());
  ASSERT_EQ(fi_close(&mb->fid), 0);
  a.SendMulticast(ma, "second");
  PollUntil(all, {&a, &b2}, 2);
  EXPECT_EQ(b.received.size(), 1u);
  for (Member* m : {&a, &b2}) {
    ASSERT_EQ(m->received.size(), 2u);
    EXPECT_EQ(m->received[1].text, "second");
  }
  EXPECT_TRUE(outsider.received.empty());
  for (fid_mc* m : {ma, mb2}) EXPECT_EQ(fi_close(&m->fid), 0);
  b2.Close();
  for (Member* m : {&a, &b, &outsider}) m->Close();
}

TEST(McastTest, BadJoinsAreRefusedWithTheDocumentedErrors) {
  Member a, no_eq, rdm;
  a.Open(kDev[0]);
  no_eq.Open(kDev[1], FI_EP_DGRAM, FI_TC_UNSPEC, /*bind_eq=*/false);
  rdm.Open(kDev[2], FI_EP_RDM);
  fid_mc* mc = nullptr;
  const sockaddr_in good = Sockaddr("239.1.2.3", 7600);
  EXPECT_EQ(fi_join(a.ep, nullptr, 0, &mc, nullptr), -FI_EINVAL);
  sockaddr_in6 six{};
  six.sin6_family = AF_INET6;
  EXPECT_EQ(fi_join(a.ep, &six, 0, &mc, nullptr), -FI_EINVAL);  // wrong family
  const sockaddr_in unicast = Sockaddr("10.78.0.2", 7600);
  EXPECT_EQ(fi_join(a.ep, &unicast, 0, &mc, nullptr), -FI_EINVAL);  // not multicast
  const sockaddr_in no_port = Sockaddr("239.1.2.3", 0);
  EXPECT_EQ(fi_join(a.ep, &no_port, 0, &mc, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_join(a.ep, &good, FI_TAGGED, &mc, nullptr), -FI_EBADFLAGS);
  EXPECT_EQ(fi_join(a.ep, &good, 0, nullptr, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_join(no_eq.ep, &good, 0, &mc, nullptr), -FI_ENOEQ);
  EXPECT_EQ(fi_join(rdm.ep, &good, 0, &mc, nullptr), -FI_EOPNOTSUPP);
  EXPECT_EQ(mc, nullptr);
  // Joined once; a second join of the same group is refused, and nothing
  // else was posted to the EQ.
  fid_mc* once = a.Join(good);
  ASSERT_NE(once, nullptr);
  EXPECT_EQ(fi_join(a.ep, &good, 0, &mc, nullptr), -FI_EALREADY);
  uint32_t event = 0;
  fi_eq_entry entry{};
  EXPECT_EQ(fi_eq_read(a.eq, &event, &entry, sizeof(entry), 0), -FI_EAGAIN);
  EXPECT_EQ(fi_close(&once->fid), 0);
  for (Member* m : {&a, &no_eq, &rdm}) m->Close();
}

// DSCP expected in the IPv4 header for each class (fabric/fi/tclass.h).
struct ClassCase {
  uint32_t tclass;
  uint8_t dscp;
};
constexpr ClassCase kClasses[] = {
    {FI_TC_UNSPEC, 0},           {FI_TC_BEST_EFFORT, 0},   {FI_TC_LOW_LATENCY, 46},
    {FI_TC_DEDICATED_ACCESS, 34}, {FI_TC_BULK_DATA, 10},   {FI_TC_SCAVENGER, 8},
    {FI_TC_NETWORK_CTRL, 48},    {FI_TC_DSCP | 26, 26},
};

// The TOS byte's DSCP of the next frame to udp_port the sniffer sees.
std::optional<uint8_t> SniffDscp(bypass::driver::Device& sniffer, uint16_t udp_port,
                                 Member* progress) {
  bypass::driver::QueuePair& qp = sniffer.queue(0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (progress != nullptr) progress->Poll();
    bypass::driver::Packet* pkts[8];
    const uint16_t n = qp.RxBurst(pkts);
    std::optional<uint8_t> dscp;
    for (uint16_t i = 0; i < n; ++i) {
      const auto f = bypass::driver::ParseUdpFrame({pkts[i]->data, pkts[i]->len});
      if (!dscp && f && f->flow.dst_port == udp_port) {
        dscp = static_cast<uint8_t>(pkts[i]->data[14 + 1] >> 2);  // TOS = DSCP << 2 | ECN
        EXPECT_EQ(*dscp, f->flow.dscp);
      }
    }
    qp.FreeBulk({pkts, n});
    if (dscp) return dscp;
  }
  return std::nullopt;
}

TEST(TclassTest, EachClassIsItsDscpOnTheWire) {
  absl::StatusOr<std::unique_ptr<bypass::driver::Device>> sniffer =
      bypass::driver::OpenDevice(kSniffer);
  ASSERT_TRUE(sniffer.ok()) << sniffer.status();
  const sockaddr_in to = Sockaddr("10.78.0.9", 7700);
  for (const fi_ep_type type : {FI_EP_DGRAM, FI_EP_RDM}) {
    for (const ClassCase& k : kClasses) {
      SCOPED_TRACE(testing::Message() << (type == FI_EP_DGRAM ? "DGRAM" : "RDM") << " tclass 0x"
                                      << std::hex << k.tclass);
      Member m;
      m.Open(kDev[0], type, k.tclass);
      fi_addr_t dest = FI_ADDR_NOTAVAIL;
      ASSERT_EQ(fi_av_insert(m.av, &to, 1, &dest, 0, nullptr), 1);
      // A datagram, or the RDM endpoint's first packet (its handshake).
      ASSERT_EQ(fi_send(m.ep, "tc", 3, nullptr, dest, nullptr), 0);
      const std::optional<uint8_t> dscp = SniffDscp(**sniffer, 7700, &m);
      ASSERT_TRUE(dscp.has_value());
      EXPECT_EQ(*dscp, k.dscp);
      m.Close();
    }
  }
}

TEST(TclassTest, NoClassIsRefused) {
  for (const uint32_t bad : {uint32_t{FI_TC_DSCP | 64}, uint32_t{FI_TC_NETWORK_CTRL + 1}}) {
    fi_info* hints = Hints(FI_EP_DGRAM, FI_MSG);
    fi_info* list = nullptr;
    ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list), 0);
    fi_freeinfo(hints);
    fi_info* info = fi_dupinfo(list);
    fi_freeinfo(list);
    info->tx_attr->tclass = bad;
    fid_fabric* fabric = nullptr;
    fid_domain* domain = nullptr;
    fid_ep* ep = nullptr;
    ASSERT_EQ(fi_fabric(info->fabric_attr, &fabric, nullptr), 0);
    ASSERT_EQ(fi_domain(fabric, info, &domain, nullptr), 0);
    EXPECT_EQ(fi_endpoint(domain, info, &ep, nullptr), -FI_EINVAL);
    EXPECT_EQ(fi_close(&domain->fid), 0);
    EXPECT_EQ(fi_close(&fabric->fid), 0);
    fi_freeinfo(info);
  }
}

}  // namespace
