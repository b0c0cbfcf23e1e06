// The attributes the provider claims, each against its man page: domain
// limits that hold and are enforced (fi_domain(3)), memory registration
// access rights and modes (fi_mr(3)), the insert forms and fi_av_straddr
// (fi_av(3)), addresses in the format asked (fi_getinfo(3)) and closing
// order (fi_endpoint(3), fi_domain(3)). Two loopback domains
// (fi_test_util.h).
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <stdlib.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "fabric/fi/fi_test_util.h"
#include "gtest/gtest.h"

namespace bypass::fi::testing {
namespace {

// Endpoints allocate their peer tables at fi_enable: keep the many-endpoint
// test small.
const bool kSmallPeers = [] {
  setenv("FI_BYPASS_MAX_PEERS", "4", 1);
  return true;
}();

// ---- memory registration access rights (fi_mr(3): access) ----

// A pair with RMA, and a target region on b registered with `access`.
class MrAccessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fi_info* hints = RdmHints(FI_MSG | FI_RMA);
    p_.Open(hints, FI_CQ_FORMAT_TAGGED);
    fi_freeinfo(hints);
    std::iota(local_.begin(), local_.end(), 1);
  }
  void TearDown() override {
    if (mr_ != nullptr) {
      EXPECT_EQ(fi_close(&mr_->fid), 0);
    }
    p_.Close();
  }
  void Register(uint64_t access) {
    ASSERT_EQ(fi_mr_reg(p_.b.domain, target_.data(), target_.size(), access, 0, 0, 0, &mr_,
                        nullptr),
              0);
  }
  uint64_t Addr() const { return reinterpret_cast<uint64_t>(target_.data()); }  // VIRT_ADDR
  // The error number of a write (or 0 when it completes).
  int Write() {
    EXPECT_EQ(fi_write(p_.a.ep, local_.data(), 64, nullptr, p_.a.peer, Addr(), fi_mr_key(mr_),
                       nullptr),
              0);
    return Complete();
  }
  int Read() {
    EXPECT_EQ(fi_read(p_.a.ep, back_.data(), 64, nullptr, p_.a.peer, Addr(), fi_mr_key(mr_),
                      nullptr),
              0);
    return Complete();
  }
  int Complete() {
    for (int i = 0; i < 2'000'000; ++i) {
      fi_cq_tagged_entry e;
      const ssize_t n = fi_cq_read(p_.a.txcq, &e, 1);
      if (n == 1) return 0;
      if (n == -FI_EAVAIL) {
        fi_cq_err_entry err{};
        EXPECT_EQ(fi_cq_readerr(p_.a.txcq, &err, 0), 1);
        return err.err;
      }
      EXPECT_EQ(n, -FI_EAGAIN);
      p_.Pump();
    }
    ADD_FAILURE() << "no completion";
    return -1;
  }
  bool TargetUntouched() const {
    for (uint8_t b : target_) {
      if (b != 0) return false;
    }
    return true;
  }

  Pair p_;
  fid_mr* mr_ = nullptr;
  std::vector<uint8_t> target_ = std::vector<uint8_t>(256, 0);
  std::vector<uint8_t> local_ = std::vector<uint8_t>(256);
  std::vector<uint8_t> back_ = std::vector<uint8_t>(256, 0);
};

// No access bit: no remote access at all (the engine never hears of the key).
TEST_F(MrAccessTest, AccessZeroGrantsNoRemoteAccess) {
  Register(0);
  EXPECT_EQ(Write(), FI_EKEYREJECTED);
  EXPECT_EQ(Read(), FI_EKEYREJECTED);
  EXPECT_TRUE(TargetUntouched());
}

// FI_SEND, FI_RECV, FI_READ and FI_WRITE are the local side's rights only.
TEST_F(MrAccessTest, LocalFlagsGrantNothingRemote) {
  Register(FI_SEND | FI_RECV | FI_READ | FI_WRITE);
  EXPECT_EQ(Write(), FI_EKEYREJECTED);
  EXPECT_EQ(Read(), FI_EKEYREJECTED);
  EXPECT_TRUE(TargetUntouched());
}

TEST_F(MrAccessTest, RemoteReadGrantsReadsOnly) {
  Register(FI_REMOTE_READ);
  target_[0] = 42;
  EXPECT_EQ(Read(), 0);
  EXPECT_EQ(back_[0], 42);
  EXPECT_EQ(Write(), FI_EACCES);
  EXPECT_EQ(target_[1], 0);
}

TEST_F(MrAccessTest, RemoteWriteGrantsWritesOnly) {
  Register(FI_REMOTE_WRITE);
  EXPECT_EQ(Write(), 0);
  EXPECT_EQ(std::memcmp(target_.data(), local_.data(), 64), 0);
  EXPECT_EQ(Read(), FI_EACCES);
  EXPECT_EQ(back_[0], 0);
}

// ---- domain limits (fi_domain(3)) ----

// One fabric and domain (loopback A), closed in order.
struct Dom {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;

  // The entry of RDM hints with these caps.
  void Open(uint64_t caps) {
    fi_info* hints = RdmHints(caps);
    fi_info* list = nullptr;
    const int ret = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list);
    fi_freeinfo(hints);
    ASSERT_EQ(ret, 0);
    fi_info* entry = ForDomain(list, kDevA);
    ASSERT_NE(entry, nullptr);
    info = fi_dupinfo(entry);
    fi_freeinfo(list);
    ASSERT_EQ(fi_fabric(info->fabric_attr, &fabric, nullptr), 0);
    ASSERT_EQ(fi_domain(fabric, info, &domain, nullptr), 0);
  }
  void Close() {
    if (domain != nullptr) {
      EXPECT_EQ(fi_close(&domain->fid), 0);
    }
    if (fabric != nullptr) {
      EXPECT_EQ(fi_close(&fabric->fid), 0);
    }
    fi_freeinfo(info);
    *this = Dom();
  }
};

// ep_cnt endpoints on one domain, each with its own address, and two of them
// talk; the ep_cnt+1-th fi_endpoint is refused until one closes.
TEST(DomainLimitsTest, EpCntEndpointsEachWithItsOwnAddress) {
  Dom d;
  d.Open(FI_MSG | FI_TAGGED);
  const size_t n = d.info->domain_attr->ep_cnt;
  ASSERT_GT(n, 1u);
  fid_av* av = nullptr;
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  ASSERT_EQ(fi_av_open(d.domain, &av_attr, &av, nullptr), 0);
  fid_cq* cq = nullptr;
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_TAGGED;
  ASSERT_EQ(fi_cq_open(d.domain, &cq_attr, &cq, nullptr), 0);
  std::vector<fid_ep*> eps(n, nullptr);
  std::set<std::string> names;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(fi_endpoint(d.domain, d.info, &eps[i], nullptr), 0) << "endpoint " << i;
    ASSERT_EQ(fi_ep_bind(eps[i], &av->fid, 0), 0);
    ASSERT_EQ(fi_ep_bind(eps[i], &cq->fid, FI_TRANSMIT | FI_RECV), 0);
    ASSERT_EQ(fi_enable(eps[i]), 0) << "endpoint " << i;
    char name[64];
    size_t len = sizeof(name);
    ASSERT_EQ(fi_getname(&eps[i]->fid, name, &len), 0);
    names.insert(std::string(name, len));
  }
  EXPECT_EQ(names.size(), n);
  fid_ep* extra = nullptr;
  EXPECT_EQ(fi_endpoint(d.domain, d.info, &extra, nullptr), -FI_EINVAL);

  // The first endpoint sends to the last, both on this domain.
  char last[64];
  size_t len = sizeof(last);
  ASSERT_EQ(fi_getname(&eps[n - 1]->fid, last, &len), 0);
  fi_addr_t to = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(fi_av_insert(av, last, 1, &to, 0, nullptr), 1);
  char in[8] = {}, out[8] = "hello";
  ASSERT_EQ(fi_recv(eps[n - 1], in, sizeof(in), nullptr, FI_ADDR_UNSPEC, in), 0);
  ASSERT_EQ(fi_send(eps[0], out, sizeof(out), nullptr, to, out), 0);
  int completions = 0;
  for (int i = 0; i < 200'000 && completions < 2; ++i) {
    fi_cq_tagged_entry e;
    const ssize_t r = fi_cq_read(cq, &e, 1);
    ASSERT_TRUE(r == 1 || r == -FI_EAGAIN) << r;
    if (r == 1) ++completions;
  }
  EXPECT_EQ(completions, 2);
  EXPECT_STREQ(in, "hello");

  ASSERT_EQ(fi_close(&eps[0]->fid), 0);
  ASSERT_EQ(fi_endpoint(d.domain, d.info, &eps[0], nullptr), 0);  // room again
  for (fid_ep* ep : eps) EXPECT_EQ(fi_close(&ep->fid), 0);
  EXPECT_EQ(fi_close(&cq->fid), 0);
  EXPECT_EQ(fi_close(&av->fid), 0);
  d.Close();
}

// mr_cnt regions register; the mr_cnt+1-th is refused until one closes.
TEST(DomainLimitsTest, MrCntIsEnforced) {
  Dom d;
  d.Open(FI_MSG | FI_RMA);
  const size_t n = d.info->domain_attr->mr_cnt;
  ASSERT_GT(n, 0u);
  std::vector<uint8_t> buf(64);
  std::vector<fid_mr*> mrs(n, nullptr);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(fi_mr_reg(d.domain, buf.data(), buf.size(), FI_REMOTE_READ, 0, i, 0, &mrs[i],
                        nullptr),
              0)
        << "region " << i;
  }
  fid_mr* extra = nullptr;
  EXPECT_EQ(fi_mr_reg(d.domain, buf.data(), buf.size(), FI_REMOTE_READ, 0, n, 0, &extra, nullptr),
            -FI_EINVAL);
  ASSERT_EQ(fi_close(&mrs[0]->fid), 0);
  ASSERT_EQ(fi_mr_reg(d.domain, buf.data(), buf.size(), 0, 0, n, 0, &mrs[0], nullptr), 0);
  for (fid_mr* mr : mrs) EXPECT_EQ(fi_close(&mr->fid), 0);
  d.Close();
}

// cq_cnt CQs and cntr_cnt counters open; one more of either is refused
// until one closes.
TEST(DomainLimitsTest, CqCntAndCntrCntAreEnforced) {
  Dom d;
  d.Open(FI_MSG | FI_TAGGED);
  std::vector<fid_cq*> cqs(d.info->domain_attr->cq_cnt, nullptr);
  fi_cq_attr cq_attr{};
  cq_attr.size = 1;
  for (fid_cq*& cq : cqs) ASSERT_EQ(fi_cq_open(d.domain, &cq_attr, &cq, nullptr), 0);
  fid_cq* extra_cq = nullptr;
  EXPECT_EQ(fi_cq_open(d.domain, &cq_attr, &extra_cq, nullptr), -FI_EINVAL);
  ASSERT_EQ(fi_close(&cqs[0]->fid), 0);
  ASSERT_EQ(fi_cq_open(d.domain, &cq_attr, &cqs[0], nullptr), 0);
  for (fid_cq* cq : cqs) EXPECT_EQ(fi_close(&cq->fid), 0);

  std::vector<fid_cntr*> cntrs(d.info->domain_attr->cntr_cnt, nullptr);
  for (fid_cntr*& c : cntrs) ASSERT_EQ(fi_cntr_open(d.domain, nullptr, &c, nullptr), 0);
  fid_cntr* extra_cntr = nullptr;
  EXPECT_EQ(fi_cntr_open(d.domain, nullptr, &extra_cntr, nullptr), -FI_EINVAL);
  ASSERT_EQ(fi_close(&cntrs[0]->fid), 0);
  ASSERT_EQ(fi_cntr_open(d.domain, nullptr, &cntrs[0], nullptr), 0);
  for (fid_cntr* c : cntrs) EXPECT_EQ(fi_close(&c->fid), 0);
  d.Close();
}

// fi_endpoint with an entry raised beyond what fi_getinfo offered.
TEST(DomainLimitsTest, EndpointAttributesBeyondTheOfferAreRefused) {
  Dom d;
  d.Open(FI_MSG | FI_RMA);
  fi_info* info = d.info;
  struct Raise {
    size_t* field;
    const char* name;
  };
  const Raise raises[] = {
      {&info->tx_attr->iov_limit, "tx iov_limit"},
      {&info->tx_attr->rma_iov_limit, "rma_iov_limit"},
      {&info->tx_attr->inject_size, "inject_size"},
      {&info->rx_attr->iov_limit, "rx iov_limit"},
      {&info->ep_attr->max_msg_size, "max_msg_size"},
      {&info->ep_attr->tx_ctx_cnt, "tx_ctx_cnt"},
      {&info->ep_attr->rx_ctx_cnt, "rx_ctx_cnt"},
  };
  fid_ep* ep = nullptr;
  for (const Raise& r : raises) {
    const size_t saved = *r.field;
    *r.field = saved + 1;
    EXPECT_EQ(fi_endpoint(d.domain, info, &ep, nullptr), -FI_EINVAL) << r.name;
    *r.field = saved;
  }
  ASSERT_EQ(fi_endpoint(d.domain, info, &ep, nullptr), 0);
  EXPECT_EQ(fi_close(&ep->fid), 0);
  d.Close();
}

// Hints asking more than a domain has match nothing.
TEST(DomainLimitsTest, HintsAskingMoreGetNoData) {
  fi_info* list = nullptr;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, nullptr, &list), 0);
  const fi_domain_attr offered = *ForDomain(list, kDevA)->domain_attr;
  const size_t max_msg = ForDomain(list, kDevA)->ep_attr->max_msg_size;
  fi_freeinfo(list);
  fi_info* hints = RdmHints();
  hints->domain_attr->ep_cnt = offered.ep_cnt + 1;
  EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list), -FI_ENODATA);
  hints->domain_attr->ep_cnt = offered.ep_cnt;
  hints->domain_attr->mr_cnt = offered.mr_cnt + 1;
  EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list), -FI_ENODATA);
  hints->domain_attr->mr_cnt = 0;
  hints->ep_attr->max_msg_size = max_msg + 1;
  EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list), -FI_ENODATA);
  hints->ep_attr->max_msg_size = max_msg;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list), 0);
  fi_freeinfo(list);
  fi_freeinfo(hints);
}

// ---- memory registration modes and forms (fi_mr(3)) ----

// Device memory is refused: the provider offers no FI_HMEM.
TEST(MrModeTest, DeviceMemoryIsRefused) {
  Dom d;
  d.Open(FI_MSG | FI_RMA);
  std::vector<uint8_t> buf(64);
  iovec iov{buf.data(), buf.size()};
  fi_mr_attr attr{};
  attr.mr_iov = &iov;
  attr.iov_count = 1;
  attr.access = FI_REMOTE_READ;
  attr.iface = FI_HMEM_CUDA;
  fid_mr* mr = nullptr;
  EXPECT_EQ(fi_mr_regattr(d.domain, &attr, 0, &mr), -FI_EOPNOTSUPP);
  attr.iface = FI_HMEM_SYSTEM;
  ASSERT_EQ(fi_mr_regattr(d.domain, &attr, 0, &mr), 0);
  EXPECT_EQ(fi_close(&mr->fid), 0);
  d.Close();
}

// FI_REG_MR: registration reports FI_MR_COMPLETE on the domain's EQ, with
// the region and the registration's context; with no room for it the call
// fails and may be retried.
TEST(MrModeTest, AsynchronousRegistrationReportsOnTheEq) {
  Dom d;
  d.Open(FI_MSG | FI_RMA);
  fid_eq* eq = nullptr;
  fi_eq_attr eq_attr{};
  eq_attr.size = 1;
  ASSERT_EQ(fi_eq_open(d.fabric, &eq_attr, &eq, nullptr), 0);
  ASSERT_EQ(fi_domain_bind(d.domain, &eq->fid, FI_REG_MR), 0);
  std::vector<uint8_t> buf(64);
  int ctx1 = 0, ctx2 = 0;
  fid_mr* mr = nullptr;
  ASSERT_EQ(fi_mr_reg(d.domain, buf.data(), buf.size(), FI_REMOTE_READ, 0, 1, 0, &mr, &ctx1), 0);
  fid_mr* second = nullptr;
  EXPECT_EQ(fi_mr_reg(d.domain, buf.data(), buf.size(), FI_REMOTE_READ, 0, 2, 0, &second, &ctx2),
            -FI_EAGAIN);  // the EQ holds one event
  uint32_t event = 0;
  fi_eq_entry entry{};
  ASSERT_EQ(fi_eq_read(eq, &event, &entry, sizeof(entry), 0), static_cast<ssize_t>(sizeof(entry)));
  EXPECT_EQ(event, static_cast<uint32_t>(FI_MR_COMPLETE));
  EXPECT_EQ(entry.fid, &mr->fid);
  EXPECT_EQ(entry.context, &ctx1);
  ASSERT_EQ(fi_mr_reg(d.domain, buf.data(), buf.size(), FI_REMOTE_READ, 0, 2, 0, &second, &ctx2),
            0);
  ASSERT_EQ(fi_eq_read(eq, &event, &entry, sizeof(entry), 0), static_cast<ssize_t>(sizeof(entry)));
  EXPECT_EQ(entry.fid, &second->fid);
  EXPECT_EQ(fi_close(&mr->fid), 0);
  EXPECT_EQ(fi_close(&second->fid), 0);
  EXPECT_EQ(fi_close(&d.domain->fid), 0);
  d.domain = nullptr;
  EXPECT_EQ(fi_close(&eq->fid), 0);
  d.Close();
}

// FI_MR_ENDPOINT is not offered: fi_getinfo clears it, fi_mr_bind refuses.
TEST(MrModeTest, EndpointModeIsNotOffered) {
  fi_info* hints = RdmHints(FI_MSG | FI_RMA);
  hints->domain_attr->mr_mode |= FI_MR_ENDPOINT;
  Pair p;
  p.Open(hints);
  fi_freeinfo(hints);
  EXPECT_EQ(p.a.info->domain_attr->mr_mode & FI_MR_ENDPOINT, 0);
  std::vector<uint8_t> buf(64);
  fid_mr* mr = nullptr;
  ASSERT_EQ(fi_mr_reg(p.a.domain, buf.data(), buf.size(), FI_REMOTE_READ, 0, 0, 0, &mr, nullptr),
            0);
  EXPECT_EQ(fi_mr_bind(mr, &p.a.ep->fid, 0), -FI_EINVAL);
  EXPECT_EQ(fi_mr_enable(mr), 0);  // enabled at registration
  EXPECT_EQ(fi_close(&mr->fid), 0);
  p.Close();
}

// A pair for a legacy (API < 1.5) application's mr_mode.
void OpenLegacy(Pair* p, int mr_mode) {
  fi_info* hints = RdmHints(FI_MSG | FI_RMA);
  hints->domain_attr->mr_mode = mr_mode;
  fi_info* list = nullptr;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 4), nullptr, nullptr, 0, hints, &list), 0);
  fi_freeinfo(hints);
  ASSERT_EQ(ForDomain(list, kDevA)->domain_attr->mr_mode, mr_mode);
  p->a.Open(ForDomain(list, kDevA), FI_CQ_FORMAT_TAGGED);
  p->b.Open(ForDomain(list, kDevB), FI_CQ_FORMAT_TAGGED);
  fi_freeinfo(list);
  std::vector<char> nb = p->b.Name();
  ASSERT_EQ(fi_av_insert(p->a.av, nb.data(), 1, &p->a.peer, 0, nullptr), 1);
}

// FI_MR_BASIC: the provider's keys and virtual addresses.
TEST(MrModeTest, LegacyBasicUsesProviderKeysAndVirtualAddresses) {
  Pair p;
  OpenLegacy(&p, FI_MR_BASIC);
  std::vector<uint8_t> target(64, 0), local(64, 7);
  fid_mr* mr = nullptr;
  ASSERT_EQ(fi_mr_reg(p.b.domain, target.data(), target.size(), FI_REMOTE_WRITE, 0, 5, 0, &mr,
                      nullptr),
            0);
  EXPECT_NE(fi_mr_key(mr), 5u);  // requested_key is ignored
  ASSERT_EQ(fi_write(p.a.ep, local.data(), 64, nullptr, p.a.peer,
                     reinterpret_cast<uint64_t>(target.data()), fi_mr_key(mr), nullptr),
            0);
  fi_cq_tagged_entry e;
  ASSERT_TRUE(p.Wait(p.a.txcq, &e));
  EXPECT_EQ(target, local);
  EXPECT_EQ(fi_close(&mr->fid), 0);
  p.Close();
}

// FI_MR_SCALABLE: the application's keys and offsets from the region's start.
TEST(MrModeTest, LegacyScalableUsesRequestedKeysAndOffsets) {
  Pair p;
  OpenLegacy(&p, FI_MR_SCALABLE);
  std::vector<uint8_t> target(64, 0), local(64, 9);
  fid_mr* mr = nullptr;
  ASSERT_EQ(fi_mr_reg(p.b.domain, target.data(), target.size(), FI_REMOTE_WRITE, 0, 5, 0, &mr,
                      nullptr),
            0);
  EXPECT_EQ(fi_mr_key(mr), 5u);
  ASSERT_EQ(fi_write(p.a.ep, local.data(), 32, nullptr, p.a.peer, 32, 5, nullptr), 0);
  fi_cq_tagged_entry e;
  ASSERT_TRUE(p.Wait(p.a.txcq, &e));
  EXPECT_EQ(std::memcmp(target.data() + 32, local.data(), 32), 0);
  EXPECT_EQ(target[0], 0);
  EXPECT_EQ(fi_close(&mr->fid), 0);
  p.Close();
}

// ---- addressing (fi_av(3), fi_cm(3), fi_getinfo(3)) ----

// fi_av_straddr: the buffer back, truncated to len (still terminated), and
// *len set to the size the whole string needs.
TEST(AddressTest, StraddrTruncatesAndTellsTheFullSize) {
  Pair p;
  fi_info* hints = RdmHints();
  p.Open(hints);
  fi_freeinfo(hints);
  std::vector<char> name = p.b.Name();
  char full[128];
  size_t len = sizeof(full);
  ASSERT_EQ(fi_av_straddr(p.a.av, name.data(), full, &len), full);
  EXPECT_EQ(len, std::strlen(full) + 1);
  EXPECT_EQ(std::string(full).rfind("fi_sockaddr_in://10.77.1.2:", 0), 0u) << full;
  char small[8];
  size_t small_len = sizeof(small);
  ASSERT_EQ(fi_av_straddr(p.a.av, name.data(), small, &small_len), small);
  EXPECT_EQ(small_len, len);
  EXPECT_EQ(std::string(small), std::string(full, sizeof(small) - 1));
  p.Close();
}

// fi_av_insertsvc and fi_av_insertsym name what fi_getname names; an
// address of the FI_SOCKADDR format inserts as itself.
TEST(AddressTest, InsertFormsNameTheSamePeer) {
  Pair p;
  fi_info* hints = RdmHints();
  hints->addr_format = FI_SOCKADDR;
  p.Open(hints);
  fi_freeinfo(hints);
  EXPECT_EQ(p.a.info->addr_format, FI_SOCKADDR);
  std::vector<char> name = p.b.Name();
  sockaddr_in b;
  std::memcpy(&b, name.data(), sizeof(b));
  ASSERT_EQ(b.sin_family, AF_INET);
  const std::string port = std::to_string(ntohs(b.sin_port));
  fi_addr_t svc = FI_ADDR_NOTAVAIL, sym[2] = {FI_ADDR_NOTAVAIL, FI_ADDR_NOTAVAIL};
  ASSERT_EQ(fi_av_insertsvc(p.a.av, "10.77.1.2", port.c_str(), &svc, 0, nullptr), 1);
  ASSERT_EQ(fi_av_insertsym(p.a.av, "10.77.1.2", 1, port.c_str(), 2, sym, 0, nullptr), 2);
  sockaddr_in got;
  size_t len = sizeof(got);
  for (fi_addr_t fa : {svc, sym[0]}) {
    ASSERT_EQ(fi_av_lookup(p.a.av, fa, &got, &len), 0);
    EXPECT_EQ(got.sin_addr.s_addr, b.sin_addr.s_addr);
    EXPECT_EQ(got.sin_port, b.sin_port);
  }
  ASSERT_EQ(fi_av_lookup(p.a.av, sym[1], &got, &len), 0);
  EXPECT_EQ(ntohs(got.sin_port), ntohs(b.sin_port) + 1);
  // A service name (fi_av(3): "service name or port number"), and names
  // that resolve to nothing.
  fi_addr_t named = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(fi_av_insertsvc(p.a.av, "10.77.1.2", "domain", &named, 0, nullptr), 1)
      << "needs the service \"domain\" in /etc/services (Debian package netbase)";
  ASSERT_EQ(fi_av_lookup(p.a.av, named, &got, &len), 0);
  EXPECT_EQ(ntohs(got.sin_port), 53);
  fi_addr_t bad = 0;
  EXPECT_EQ(fi_av_insertsvc(p.a.av, "10.77.1.2", "no-such-service", &bad, 0, nullptr), 0);
  EXPECT_EQ(bad, FI_ADDR_NOTAVAIL);
  EXPECT_EQ(fi_av_insertsvc(p.a.av, "10.77.1.2", "0", &bad, 0, nullptr), 0);
  // A message to the peer named by its service.
  char in[4] = {}, out[4] = "svc";
  ASSERT_EQ(fi_recv(p.b.ep, in, sizeof(in), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  ASSERT_EQ(fi_send(p.a.ep, out, sizeof(out), nullptr, svc, nullptr), 0);
  fi_cq_tagged_entry e;
  ASSERT_TRUE(p.Wait(p.b.rxcq, &e));
  EXPECT_STREQ(in, "svc");
  p.Close();
}

// ---- closing order (fi_endpoint(3), fi_domain(3), fi_cq(3)) ----

TEST(CloseOrderTest, EverythingBoundToAnOpenObjectIsBusy) {
  Dom d;
  d.Open(FI_MSG | FI_RMA);
  fid_eq* eq = nullptr;
  fi_eq_attr eq_attr{};
  ASSERT_EQ(fi_eq_open(d.fabric, &eq_attr, &eq, nullptr), 0);
  fid_av* av = nullptr;
  fi_av_attr av_attr{};
  ASSERT_EQ(fi_av_open(d.domain, &av_attr, &av, nullptr), 0);
  fid_cq* cq = nullptr;
  fi_cq_attr cq_attr{};
  ASSERT_EQ(fi_cq_open(d.domain, &cq_attr, &cq, nullptr), 0);
  fid_cntr* cntr = nullptr;
  fi_cntr_attr cntr_attr{};
  ASSERT_EQ(fi_cntr_open(d.domain, &cntr_attr, &cntr, nullptr), 0);
  std::vector<uint8_t> buf(64);
  fid_mr* mr = nullptr;
  ASSERT_EQ(fi_mr_reg(d.domain, buf.data(), buf.size(), FI_REMOTE_READ, 0, 0, 0, &mr, nullptr),
            0);
  fid_ep* ep = nullptr;
  ASSERT_EQ(fi_endpoint(d.domain, d.info, &ep, nullptr), 0);
  ASSERT_EQ(fi_ep_bind(ep, &eq->fid, 0), 0);
  ASSERT_EQ(fi_ep_bind(ep, &av->fid, 0), 0);
  ASSERT_EQ(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
  ASSERT_EQ(fi_ep_bind(ep, &cntr->fid, FI_SEND), 0);
  ASSERT_EQ(fi_enable(ep), 0);

  for (fid* f : {&cq->fid, &cntr->fid, &eq->fid, &av->fid, &d.domain->fid, &d.fabric->fid}) {
    EXPECT_EQ(fi_close(f), -FI_EBUSY) << "class " << f->fclass;
  }
  ASSERT_EQ(fi_close(&ep->fid), 0);
  EXPECT_EQ(fi_close(&ep->fid), -FI_EBADF);  // a closed handle, not a crash
  EXPECT_EQ(fi_close(&d.domain->fid), -FI_EBUSY);  // its MR, AV, CQ, counter
  for (fid* f : {&mr->fid, &cq->fid, &cntr->fid, &av->fid}) EXPECT_EQ(fi_close(f), 0);
  EXPECT_EQ(fi_close(&d.fabric->fid), -FI_EBUSY);  // its domain and EQ
  EXPECT_EQ(fi_close(&eq->fid), 0);
  d.Close();
}

}  // namespace
}  // namespace bypass::fi::testing
