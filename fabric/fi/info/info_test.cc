// fi_getinfo's matching for the bypass provider, against libfabric's public
// headers: every hinted attribute's match and mismatch, caps trimming,
// node/service/FI_SOURCE resolution, errors, and lists libfabric frees.
#include "fabric/fi/info/info.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "fabric/rdm/types.h"
#include "gtest/gtest.h"

namespace bypass::fi {
namespace {

constexpr uint32_t kV = FI_VERSION(1, 17);

DomainOffer Offer(const char* name, const char* ip, const char* driver = "net_af_xdp") {
  DomainOffer o;
  o.name = name;
  o.device.uri = name;
  o.device.driver = driver;
  o.device.mtu = 1500;
  o.device.num_queues = 4;
  o.device.ring_size = 512;
  o.device.mac.bytes = {0x02, 0, 0, 0, 0, 0x01};
  o.device.ipv4.value = ntohl(inet_addr(ip));
  o.default_port = 7000;
  return o;
}

// Owns a hints entry (allocated like fi_allocinfo) and a result list.
class InfoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    hints_ = DupInfo(nullptr);
    ASSERT_NE(hints_, nullptr);
    offers_ = {Offer("af_xdp:eth0", "10.0.0.1")};
  }
  void TearDown() override {
    FreeInfo(hints_);
    FreeInfo(result_);
  }
  int Get(const char* node = nullptr, const char* service = nullptr, uint64_t flags = 0,
          uint32_t version = kV) {
    FreeInfo(result_);
    result_ = nullptr;
    return GetInfo(version, node, service, flags, hints_, offers_, &result_);
  }
  std::vector<fi_info*> List() const {
    std::vector<fi_info*> v;
    for (fi_info* i = result_; i != nullptr; i = i->next) v.push_back(i);
    return v;
  }
  // Expects a match with exactly n entries.
  void ExpectEntries(size_t n, const char* node = nullptr, const char* service = nullptr,
                     uint64_t flags = 0) {
    ASSERT_EQ(Get(node, service, flags), 0) << LastMismatch();
    EXPECT_EQ(List().size(), n);
    EXPECT_STREQ(LastMismatch(), "");
  }
  // Expects no match, with a reason containing `text`.
  void ExpectNoMatch(const char* text, const char* node = nullptr, const char* service = nullptr,
                     uint64_t flags = 0) {
    EXPECT_EQ(Get(node, service, flags), -FI_ENODATA);
    EXPECT_EQ(result_, nullptr);
    EXPECT_NE(std::string(LastMismatch()).find(text), std::string::npos) << LastMismatch();
  }
  sockaddr_in Src(const fi_info* i) const {
    sockaddr_in s;
    EXPECT_EQ(i->src_addrlen, sizeof(s));
    std::memcpy(&s, i->src_addr, sizeof(s));
    return s;
  }
  sockaddr_in Dest(const fi_info* i) const {
    sockaddr_in s;
    EXPECT_EQ(i->dest_addrlen, sizeof(s));
    std::memcpy(&s, i->dest_addr, sizeof(s));
    return s;
  }

  fi_info* hints_ = nullptr;
  fi_info* result_ = nullptr;
  std::vector<DomainOffer> offers_;
};

TEST_F(InfoTest, NoHintsGivesRdmThenDgramPerDomain) {
  offers_.push_back(Offer("af_xdp:eth1", "10.0.1.1"));
  ASSERT_EQ(GetInfo(kV, nullptr, nullptr, 0, nullptr, offers_, &result_), 0);
  auto v = List();
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(v[0]->ep_attr->type, FI_EP_RDM);
  EXPECT_EQ(v[1]->ep_attr->type, FI_EP_DGRAM);
  EXPECT_STREQ(v[0]->domain_attr->name, "af_xdp:eth0");
  EXPECT_STREQ(v[2]->domain_attr->name, "af_xdp:eth1");
  const fi_info* rdm = v[0];
  // FI_COLLECTIVE only when asked (fabric/fi/coll.h).
  EXPECT_EQ(rdm->caps, (kRdmCaps & ~FI_COLLECTIVE) | FI_LOCAL_COMM | FI_REMOTE_COMM);
  EXPECT_EQ(rdm->mode, 0u);
  EXPECT_EQ(rdm->addr_format, FI_SOCKADDR_IN);
  EXPECT_STREQ(rdm->fabric_attr->name, kFabricName);
  EXPECT_EQ(rdm->fabric_attr->prov_name, nullptr);  // the core fills it
  EXPECT_EQ(rdm->fabric_attr->prov_version, kProviderVersion);
  EXPECT_EQ(rdm->fabric_attr->api_version, kV);
  const fi_domain_attr* d = rdm->domain_attr;
  EXPECT_EQ(d->threading, FI_THREAD_DOMAIN);
  EXPECT_EQ(d->control_progress, FI_PROGRESS_MANUAL);
  EXPECT_EQ(d->data_progress, FI_PROGRESS_MANUAL);
  EXPECT_EQ(d->resource_mgmt, FI_RM_ENABLED);
  EXPECT_EQ(d->av_type, FI_AV_UNSPEC);
  EXPECT_EQ(d->mr_mode, 0);
  EXPECT_EQ(d->mr_key_size, 8u);
  EXPECT_EQ(d->cq_data_size, 8u);
  EXPECT_EQ(d->ep_cnt, kMaxEndpoints);
  EXPECT_EQ(d->max_ep_tx_ctx, 1u);
  EXPECT_EQ(d->max_ep_stx_ctx, 1u);  // shared contexts, one each way
  EXPECT_EQ(d->max_ep_srx_ctx, 1u);
  EXPECT_EQ(v[1]->domain_attr->max_ep_stx_ctx, 0u);  // none for datagrams
  EXPECT_EQ(d->mr_iov_limit, 1u);
  EXPECT_EQ(d->caps, FI_LOCAL_COMM | FI_REMOTE_COMM);
  EXPECT_EQ(d->auth_key_size, 4u);
  EXPECT_EQ(d->auth_key, nullptr);
  EXPECT_GT(d->max_err_data, 0u);
  const rdm::EndpointConfig limits;
  EXPECT_EQ(rdm->ep_attr->protocol, kProtoBypassRdm);
  EXPECT_EQ(rdm->ep_attr->protocol_version, uint32_t{bypass::rdm::kWireVersion});
  EXPECT_EQ(rdm->ep_attr->max_msg_size, limits.max_msg_size);
  EXPECT_EQ(rdm->ep_attr->msg_prefix_size, 0u);
  EXPECT_EQ(rdm->ep_attr->max_order_raw_size, size_t{bypass::rdm::kMaxAtomicBytes});
  EXPECT_EQ(rdm->ep_attr->max_order_waw_size, size_t{bypass::rdm::kMaxAtomicBytes});
  EXPECT_EQ(rdm->ep_attr->max_order_war_size, 0u);
  EXPECT_EQ(rdm->ep_attr->mem_tag_format, kDefaultTagFormat);
  EXPECT_EQ(rdm->ep_attr->tx_ctx_cnt, 1u);
  constexpr uint64_t kOrder = FI_ORDER_SAS | FI_ORDER_ATOMIC_RAR | FI_ORDER_ATOMIC_RAW |
                              FI_ORDER_ATOMIC_WAR | FI_ORDER_ATOMIC_WAW;
  EXPECT_EQ(rdm->tx_attr->msg_order, kOrder);
  EXPECT_EQ(rdm->rx_attr->msg_order, kOrder);
  EXPECT_EQ(rdm->tx_attr->comp_order, FI_ORDER_NONE);
  EXPECT_EQ(rdm->tx_attr->inject_size, limits.inject_size);
  EXPECT_EQ(rdm->tx_attr->size, limits.max_send_ops);
  EXPECT_EQ(rdm->rx_attr->size, limits.max_posted_recvs);
  EXPECT_EQ(rdm->rx_attr->total_buffered_recv, limits.unexpected_bytes);
  EXPECT_EQ(rdm->tx_attr->iov_limit, kMsgIovLimit);
  EXPECT_EQ(rdm->rx_attr->iov_limit, kMsgIovLimit);
  EXPECT_EQ(rdm->tx_attr->rma_iov_limit, 1u);
  EXPECT_EQ(rdm->tx_attr->caps & (FI_RECV | FI_REMOTE_READ), 0u);
  EXPECT_EQ(rdm->rx_attr->caps & (FI_SEND | FI_READ), 0u);
  EXPECT_NE(rdm->rx_attr->caps & FI_MULTI_RECV, 0u);
  // The source address: the device's IPv4 and MAC, and port 0 (the
  // endpoint takes a free one at fi_enable).
  sockaddr_in s = Src(rdm);
  EXPECT_EQ(s.sin_family, AF_INET);
  EXPECT_EQ(ntohl(s.sin_addr.s_addr), ntohl(inet_addr("10.0.0.1")));
  EXPECT_EQ(ntohs(s.sin_port), 0);
  EXPECT_EQ(std::memcmp(s.sin_zero, offers_[0].device.mac.bytes.data(), 6), 0);
  EXPECT_EQ(rdm->dest_addr, nullptr);

  const fi_info* dgram = v[1];
  EXPECT_EQ(dgram->caps, kDgramCaps | FI_LOCAL_COMM | FI_REMOTE_COMM);
  EXPECT_EQ(dgram->ep_attr->protocol, FI_PROTO_UDP);
  EXPECT_EQ(dgram->ep_attr->max_msg_size, 1500u - 28u);
  EXPECT_EQ(dgram->ep_attr->mem_tag_format, 0u);
  EXPECT_EQ(dgram->domain_attr->cq_data_size, 0u);
  EXPECT_EQ(dgram->tx_attr->size, 512u);
  EXPECT_EQ(dgram->tx_attr->rma_iov_limit, 0u);
  EXPECT_EQ(dgram->tx_attr->msg_order, FI_ORDER_NONE);
}

TEST_F(InfoTest, LibfabricFreesOurList) {
  ASSERT_EQ(GetInfo(kV, "10.0.0.9", "7001", 0, nullptr, offers_, &result_), 0);
  fi_freeinfo(result_);  // libfabric's own, free() on every part
  result_ = nullptr;
  // With the auth keys set too.
  uint8_t key[4] = {1, 2, 3, 4};
  hints_->domain_attr->auth_key = static_cast<uint8_t*>(std::malloc(4));
  std::memcpy(hints_->domain_attr->auth_key, key, 4);
  hints_->domain_attr->auth_key_size = 4;
  hints_->ep_attr->auth_key = static_cast<uint8_t*>(std::malloc(4));
  std::memcpy(hints_->ep_attr->auth_key, key, 4);
  hints_->ep_attr->auth_key_size = 4;
  ASSERT_EQ(Get(), 0) << LastMismatch();
  fi_info* dup = fi_dupinfo(result_);  // libfabric copies ours
  ASSERT_NE(dup, nullptr);
  EXPECT_EQ(std::memcmp(dup->domain_attr->auth_key, key, 4), 0);
  FreeInfo(dup);  // and we free libfabric's copy
  fi_freeinfo(result_);
  result_ = nullptr;
}

TEST_F(InfoTest, DupInfoIsDeep) {
  ASSERT_EQ(Get("10.0.0.9", "7001"), 0);
  fi_info* dup = DupInfo(result_);
  ASSERT_NE(dup, nullptr);
  EXPECT_EQ(dup->next, nullptr);
  EXPECT_NE(dup->domain_attr, result_->domain_attr);
  EXPECT_NE(dup->domain_attr->name, result_->domain_attr->name);
  EXPECT_STREQ(dup->domain_attr->name, result_->domain_attr->name);
  EXPECT_NE(dup->src_addr, result_->src_addr);
  EXPECT_EQ(std::memcmp(dup->dest_addr, result_->dest_addr, sizeof(sockaddr_in)), 0);
  EXPECT_EQ(dup->tx_attr->size, result_->tx_attr->size);
  result_->domain_attr->name[0] = 'X';
  EXPECT_EQ(dup->domain_attr->name[0], 'a');
  fi_freeinfo(dup);
  // An empty entry dups to an empty entry with every attribute allocated.
  fi_info* empty = DupInfo(hints_);
  ASSERT_NE(empty, nullptr);
  EXPECT_NE(empty->fabric_attr, nullptr);
  EXPECT_EQ(empty->fabric_attr->name, nullptr);
  FreeInfo(empty);
}

TEST_F(InfoTest, CapsAreMatchedAndTrimmed) {
  hints_->caps = FI_MSG;
  ExpectEntries(2);
  for (fi_info* i : List()) {
    EXPECT_EQ(i->caps & ~(FI_MSG | FI_MULTI_RECV | FI_SOURCE | FI_SHARED_AV | FI_LOCAL_COMM |
                          FI_REMOTE_COMM | FI_TRIGGER),
              0u)
        << i->caps;
    EXPECT_NE(i->caps & FI_MSG, 0u);
    // FI_TRIGGER: a secondary capability of RDM endpoints (trigger.h).
    const uint64_t trigger = i->ep_attr->type == FI_EP_RDM ? FI_TRIGGER : 0;
    EXPECT_EQ(i->caps & FI_TRIGGER, trigger);
    EXPECT_EQ(i->tx_attr->caps, FI_MSG | trigger);
    EXPECT_EQ(i->ep_attr->mem_tag_format, 0u);
    EXPECT_EQ(i->tx_attr->rma_iov_limit, 0u);
  }
  hints_->caps = FI_TAGGED | FI_SEND;
  ExpectEntries(1);
  EXPECT_EQ(result_->ep_attr->type, FI_EP_RDM);
  EXPECT_EQ(result_->caps,
            FI_TAGGED | FI_SEND | FI_MULTI_RECV | FI_SOURCE | FI_SHARED_AV | FI_LOCAL_COMM |
                FI_REMOTE_COMM | FI_TRIGGER);
  EXPECT_EQ(result_->tx_attr->caps, FI_TAGGED | FI_SEND | FI_TRIGGER);
  EXPECT_EQ(result_->rx_attr->caps & FI_TAGGED, FI_TAGGED);
  hints_->caps = FI_RMA | FI_MSG | FI_LOCAL_COMM | FI_REMOTE_COMM;
  ExpectEntries(1);
  EXPECT_EQ(result_->tx_attr->rma_iov_limit, 1u);
  hints_->caps = FI_ATOMIC | FI_READ | FI_WRITE;  // RDM only
  ExpectEntries(1);
  EXPECT_EQ(result_->ep_attr->type, FI_EP_RDM);
  // FI_COLLECTIVE: RDM only, when asked, with 63-bit tags (fabric/fi/coll.h).
  hints_->caps = FI_TAGGED | FI_COLLECTIVE;
  ExpectEntries(1);
  EXPECT_EQ(result_->ep_attr->type, FI_EP_RDM);
  EXPECT_EQ(result_->caps & FI_COLLECTIVE, FI_COLLECTIVE);
  EXPECT_EQ(result_->tx_attr->caps & FI_COLLECTIVE, FI_COLLECTIVE);
  EXPECT_EQ(result_->ep_attr->mem_tag_format, kMsgTagFormat);
  hints_->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT;  // collectives need their own receive queue
  ExpectNoMatch("FI_COLLECTIVE");
  hints_->ep_attr->rx_ctx_cnt = 0;
  hints_->caps = FI_TAGGED;
  ExpectEntries(1);
  EXPECT_EQ(result_->caps & FI_COLLECTIVE, 0u);
  EXPECT_EQ(result_->tx_attr->caps & FI_COLLECTIVE, 0u);
  EXPECT_EQ(result_->ep_attr->mem_tag_format, kDefaultTagFormat);
  hints_->caps = FI_MSG | FI_FENCE;
  ExpectNoMatch("caps");
  hints_->caps = FI_MSG | FI_HMEM;
  ExpectNoMatch("caps");
  // FI_RMA_EVENT comes with FI_RMA, or when asked.
  hints_->caps = FI_RMA;
  ExpectEntries(1);
  EXPECT_EQ(result_->caps & FI_RMA_EVENT, FI_RMA_EVENT);
  EXPECT_EQ(result_->rx_attr->caps & FI_RMA_EVENT, FI_RMA_EVENT);
  hints_->caps = FI_MSG | FI_RMA_EVENT;
  ExpectEntries(1);
  EXPECT_EQ(result_->caps & FI_RMA_EVENT, FI_RMA_EVENT);
  // A domain that lacks RMA today.
  hints_->caps = FI_RMA;
  offers_[0].rdm_caps =
      kRdmCaps & ~(FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE);
  ExpectNoMatch("caps");
}

TEST_F(InfoTest, LocalAndRemoteCommFollowTheDevice) {
  offers_[0] = Offer("memif:/run/bypass/fi.sock", "10.0.0.1", "net_memif");
  hints_->caps = FI_MSG | FI_LOCAL_COMM;
  ExpectEntries(2);
  EXPECT_EQ(result_->caps & FI_REMOTE_COMM, 0u);
  EXPECT_EQ(result_->domain_attr->caps, FI_LOCAL_COMM);
  hints_->caps = FI_MSG | FI_REMOTE_COMM;
  ExpectNoMatch("caps");
  hints_->caps = FI_MSG;
  hints_->domain_attr->caps = FI_REMOTE_COMM;
  ExpectNoMatch("domain caps");
  offers_[0].comm_caps = FI_LOCAL_COMM | FI_REMOTE_COMM;
  ExpectEntries(2);
}

TEST_F(InfoTest, EndpointTypesADomainDoesNotOffer) {
  offers_[0].dgram_caps = 0;
  ExpectEntries(1);
  EXPECT_EQ(result_->ep_attr->type, FI_EP_RDM);
  hints_->ep_attr->type = FI_EP_DGRAM;
  ExpectNoMatch("FI_EP_DGRAM: not offered");
}

// FI_EP_MSG where the offer has it: the RDM engine's caps less those of an
// AV (FI_SOURCE, FI_DIRECTED_RECV, FI_SHARED_AV), 63-bit tags, no shared
// contexts.
TEST_F(InfoTest, ConnectedEndpointsWhereOffered) {
  hints_->ep_attr->type = FI_EP_MSG;
  ExpectNoMatch("FI_EP_MSG: not offered");
  offers_[0].msg_caps = kMsgCaps;
  ExpectEntries(1);
  const fi_info* m = result_;
  EXPECT_EQ(m->ep_attr->type, FI_EP_MSG);
  EXPECT_EQ(m->caps & ~(FI_LOCAL_COMM | FI_REMOTE_COMM), kMsgCaps);
  EXPECT_EQ(m->caps & (FI_SOURCE | FI_DIRECTED_RECV | FI_SHARED_AV), 0u);
  EXPECT_EQ(m->ep_attr->mem_tag_format >> 63, 0u);
  EXPECT_EQ(m->domain_attr->max_ep_srx_ctx, 0u);
  EXPECT_EQ(m->domain_attr->cq_data_size, kCqDataSize);
  hints_->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT;
  ExpectNoMatch("FI_EP_MSG has none");
  // Without the RDM engine's RMA, none on FI_EP_MSG either.
  hints_->ep_attr->rx_ctx_cnt = 0;
  offers_[0].rdm_caps = kRdmCaps & ~(FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE);
  ExpectEntries(1);
  EXPECT_EQ(result_->caps & FI_RMA, 0u);
}

// FI_SOURCE_ERR changes what a stranger's message gives (an error entry):
// offered with FI_SOURCE, kept only when the hints ask for it.
TEST_F(InfoTest, SourceErrOnlyWhenAsked) {
  hints_->caps = FI_MSG;
  ExpectEntries(2);
  for (fi_info* i : List()) EXPECT_EQ(i->caps & FI_SOURCE_ERR, 0u);
  hints_->caps = FI_MSG | FI_SOURCE | FI_SOURCE_ERR;
  ExpectEntries(2);
  for (fi_info* i : List()) {
    EXPECT_NE(i->caps & FI_SOURCE_ERR, 0u);
    EXPECT_NE(i->rx_attr->caps & FI_SOURCE_ERR, 0u);
  }
  offers_[0].rdm_caps &= ~FI_SOURCE;
  offers_[0].dgram_caps &= ~FI_SOURCE;
  ExpectNoMatch("not offered");  // FI_SOURCE_ERR rides on FI_SOURCE
}

// No mode bit is required; FI_MSG_PREFIX (FI_EP_DGRAM) and FI_BUFFERED_RECV
// (FI_EP_RDM) are offered only to hints that set them.
TEST_F(InfoTest, ModeNeedsNothingOfTheApplication) {
  hints_->mode = 0;
  ExpectEntries(2);
  for (fi_info* i : List()) EXPECT_EQ(i->mode, 0u);
  hints_->mode = FI_CONTEXT | FI_CONTEXT2 | FI_MSG_PREFIX | FI_LOCAL_MR | FI_RX_CQ_DATA;
  hints_->tx_attr->mode = FI_CONTEXT;
  ExpectEntries(2);
  for (fi_info* i : List()) {
    const bool dgram = i->ep_attr->type == FI_EP_DGRAM;
    EXPECT_EQ(i->mode, dgram ? static_cast<uint64_t>(FI_MSG_PREFIX) : 0u);
    EXPECT_EQ(i->tx_attr->mode, dgram ? static_cast<uint64_t>(FI_MSG_PREFIX) : 0u);
    EXPECT_EQ(i->ep_attr->msg_prefix_size, dgram ? kDgramMsgPrefixSize : 0u);
  }
  hints_->mode = FI_BUFFERED_RECV;
  ExpectEntries(2);
  for (fi_info* i : List()) {
    const bool rdm = i->ep_attr->type == FI_EP_RDM;
    EXPECT_EQ(i->mode, rdm ? static_cast<uint64_t>(FI_BUFFERED_RECV) : 0u);
    EXPECT_EQ(i->ep_attr->msg_prefix_size, 0u);
  }
}

TEST_F(InfoTest, EndpointTypes) {
  hints_->ep_attr->type = FI_EP_RDM;
  ExpectEntries(1);
  EXPECT_EQ(result_->ep_attr->type, FI_EP_RDM);
  hints_->ep_attr->type = FI_EP_DGRAM;
  ExpectEntries(1);
  EXPECT_EQ(result_->ep_attr->type, FI_EP_DGRAM);
  hints_->ep_attr->type = FI_EP_MSG;
  ExpectNoMatch("endpoint type");
}

TEST_F(InfoTest, AddressFormats) {
  hints_->addr_format = FI_SOCKADDR_IN;
  ExpectEntries(2);
  hints_->addr_format = FI_FORMAT_UNSPEC;
  ExpectEntries(2);
  EXPECT_EQ(result_->addr_format, FI_SOCKADDR_IN);
  for (uint32_t f : {FI_SOCKADDR_IN6, FI_SOCKADDR_IB, FI_ADDR_STR, FI_ADDR_EFA}) {
    hints_->addr_format = f;
    ExpectNoMatch("addr_format");
  }
}

// fi_getinfo(3): FI_SOCKADDR is a sockaddr told by its sa_family: asked for,
// it is returned as asked, and the addresses are AF_INET sockaddr_ins.
TEST_F(InfoTest, SockaddrFormatAnswersInThatFormat) {
  hints_->addr_format = FI_SOCKADDR;
  ASSERT_EQ(Get("10.0.0.9", "7100"), 0) << LastMismatch();
  for (fi_info* i : List()) {
    EXPECT_EQ(i->addr_format, FI_SOCKADDR);
    ASSERT_EQ(i->dest_addrlen, sizeof(sockaddr_in));
    sockaddr_in d;
    std::memcpy(&d, i->dest_addr, sizeof(d));
    EXPECT_EQ(d.sin_family, AF_INET);
    EXPECT_EQ(ntohs(d.sin_port), 7100);
    EXPECT_EQ(Src(i).sin_family, AF_INET);
  }
  hints_->addr_format = FI_SOCKADDR_IN;
  ASSERT_EQ(Get("10.0.0.9", "7100"), 0) << LastMismatch();
  EXPECT_EQ(result_->addr_format, FI_SOCKADDR_IN);
}

// A hinted FI_SOCKADDR src_addr of another family matches nothing.
TEST_F(InfoTest, SockaddrOfAnotherFamilyIsRefused) {
  sockaddr_in6 six{};
  six.sin6_family = AF_INET6;
  hints_->addr_format = FI_SOCKADDR;
  hints_->src_addr = std::malloc(sizeof(six));
  std::memcpy(hints_->src_addr, &six, sizeof(six));
  hints_->src_addrlen = sizeof(six);
  ExpectNoMatch("not AF_INET");
}

TEST_F(InfoTest, Threading) {
  for (fi_threading t : {FI_THREAD_SAFE, FI_THREAD_FID, FI_THREAD_DOMAIN, FI_THREAD_COMPLETION,
                         FI_THREAD_ENDPOINT}) {
    hints_->domain_attr->threading = t;
    ExpectEntries(2);
    EXPECT_EQ(result_->domain_attr->threading, t);
  }
  hints_->domain_attr->threading = FI_THREAD_UNSPEC;
  ExpectEntries(2);
  EXPECT_EQ(result_->domain_attr->threading, FI_THREAD_DOMAIN);
  hints_->domain_attr->threading = static_cast<fi_threading>(77);
  ExpectNoMatch("threading");
}

TEST_F(InfoTest, ProgressManualUnlessAutoAsked) {
  hints_->domain_attr->control_progress = FI_PROGRESS_MANUAL;
  hints_->domain_attr->data_progress = FI_PROGRESS_MANUAL;
  ExpectEntries(2);
  hints_->domain_attr->data_progress = FI_PROGRESS_UNSPEC;
  ExpectEntries(2);
  EXPECT_EQ(result_->domain_attr->data_progress, FI_PROGRESS_MANUAL);
  EXPECT_EQ(result_->domain_attr->control_progress, FI_PROGRESS_MANUAL);
  hints_->domain_attr->data_progress = FI_PROGRESS_AUTO;
  ASSERT_EQ(Get(), 0);
  EXPECT_EQ(result_->domain_attr->data_progress, FI_PROGRESS_AUTO);
  EXPECT_EQ(result_->domain_attr->control_progress, FI_PROGRESS_MANUAL);
  hints_->domain_attr->data_progress = FI_PROGRESS_UNSPEC;
  hints_->domain_attr->control_progress = FI_PROGRESS_AUTO;
  ASSERT_EQ(Get(), 0);
  EXPECT_EQ(result_->domain_attr->control_progress, FI_PROGRESS_AUTO);
  EXPECT_EQ(result_->domain_attr->data_progress, FI_PROGRESS_MANUAL);
  hints_->domain_attr->control_progress = static_cast<fi_progress>(9);
  ExpectNoMatch("control_progress 9");
}

TEST_F(InfoTest, ResourceManagementAndAvType) {
  hints_->domain_attr->resource_mgmt = FI_RM_DISABLED;
  ExpectEntries(2);
  EXPECT_EQ(result_->domain_attr->resource_mgmt, FI_RM_DISABLED);
  hints_->domain_attr->resource_mgmt = FI_RM_ENABLED;
  ExpectEntries(2);
  EXPECT_EQ(result_->domain_attr->resource_mgmt, FI_RM_ENABLED);
  hints_->domain_attr->resource_mgmt = static_cast<fi_resource_mgmt>(9);
  ExpectNoMatch("resource_mgmt");
  hints_->domain_attr->resource_mgmt = FI_RM_UNSPEC;
  for (fi_av_type t : {FI_AV_MAP, FI_AV_TABLE}) {
    hints_->domain_attr->av_type = t;
    ExpectEntries(2);
    EXPECT_EQ(result_->domain_attr->av_type, t);
  }
  hints_->domain_attr->av_type = static_cast<fi_av_type>(5);
  ExpectNoMatch("av_type");
}

TEST_F(InfoTest, MrModeBitsAndLegacyValues) {
  hints_->domain_attr->mr_mode =
      FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
  ExpectEntries(2);
  EXPECT_EQ(result_->domain_attr->mr_mode, FI_MR_VIRT_ADDR | FI_MR_PROV_KEY);
  // FI_MR_RMA_EVENT is followed when offered (regions registered with
  // FI_RMA_EVENT then wait for fi_mr_enable).
  hints_->domain_attr->mr_mode = FI_MR_RMA_EVENT | FI_MR_ENDPOINT;
  ExpectEntries(2);
  EXPECT_EQ(result_->domain_attr->mr_mode, FI_MR_RMA_EVENT);
  hints_->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_ENDPOINT;
  ExpectEntries(2);
  EXPECT_EQ(result_->domain_attr->mr_mode, 0);
  hints_->domain_attr->mr_mode = FI_MR_BASIC;
  ExpectEntries(2);
  EXPECT_EQ(result_->domain_attr->mr_mode, FI_MR_BASIC);
  hints_->domain_attr->mr_mode = FI_MR_SCALABLE;
  ExpectEntries(2);
  EXPECT_EQ(result_->domain_attr->mr_mode, FI_MR_SCALABLE);
  hints_->domain_attr->mr_mode = FI_MR_BASIC | FI_MR_LOCAL;
  ExpectNoMatch("mr_mode");
  // libfabric's core passes every bit but the legacy ones for "any mode".
  hints_->domain_attr->mr_mode = ~(FI_MR_BASIC | FI_MR_SCALABLE);
  ExpectEntries(2);
  EXPECT_EQ(result_->domain_attr->mr_mode, FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_RMA_EVENT);
  hints_->domain_attr->mr_mode = 1 << 20;
  ExpectEntries(2);
  EXPECT_EQ(result_->domain_attr->mr_mode, 0);
  // Before 1.5 mr_mode is an enum.
  hints_->domain_attr->mr_mode = FI_MR_UNSPEC;
  ASSERT_EQ(Get(nullptr, nullptr, 0, FI_VERSION(1, 4)), 0) << LastMismatch();
  EXPECT_EQ(result_->domain_attr->mr_mode, FI_MR_SCALABLE);
  EXPECT_EQ(result_->fabric_attr->api_version, FI_VERSION(1, 4));
  EXPECT_EQ(result_->domain_attr->auth_key_size, 0u);
  hints_->domain_attr->mr_mode = FI_MR_BASIC;
  ASSERT_EQ(Get(nullptr, nullptr, 0, FI_VERSION(1, 4)), 0);
  EXPECT_EQ(result_->domain_attr->mr_mode, FI_MR_BASIC);
  hints_->domain_attr->mr_mode = FI_MR_LOCAL;
  EXPECT_EQ(Get(nullptr, nullptr, 0, FI_VERSION(1, 4)), -FI_ENODATA);
}

TEST_F(InfoTest, DomainSizesAndCounts) {
  fi_domain_attr* d = hints_->domain_attr;
  d->mr_key_size = 8;
  d->cq_data_size = 8;
  d->cq_cnt = kMaxCqs;
  d->ep_cnt = kMaxEndpoints;
  // Independent queues: none here (4 queues, no steering: software
  // demultiplexing), so one each way.
  const size_t queues = IndependentQueues(offers_[0].device);
  ASSERT_EQ(queues, 1u);
  d->tx_ctx_cnt = queues;
  d->rx_ctx_cnt = queues;
  d->max_ep_tx_ctx = 1;
  d->max_ep_rx_ctx = 1;
  d->cntr_cnt = kMaxCntrs;
  d->mr_iov_limit = 1;
  d->mr_cnt = offers_[0].limits.max_regions;
  d->max_err_data = 64;
  ExpectEntries(1);  // cq_data_size 8: not DGRAM
  EXPECT_EQ(result_->ep_attr->type, FI_EP_RDM);
  struct Case {
    size_t fi_domain_attr::*field;
    size_t bad;
    const char* name;
  };
  const Case cases[] = {
      {&fi_domain_attr::mr_key_size, 16, "mr_key_size"},
      {&fi_domain_attr::cq_data_size, 9, "cq_data_size"},
      {&fi_domain_attr::cq_cnt, kMaxCqs + 1, "cq_cnt"},
      {&fi_domain_attr::ep_cnt, kMaxEndpoints + 1, "ep_cnt"},
      {&fi_domain_attr::tx_ctx_cnt, queues + 1, "tx_ctx_cnt"},
      {&fi_domain_attr::rx_ctx_cnt, queues + 1, "rx_ctx_cnt"},
      {&fi_domain_attr::max_ep_tx_ctx, 2, "max_ep_tx_ctx"},
      {&fi_domain_attr::max_ep_rx_ctx, 2, "max_ep_rx_ctx"},
      {&fi_domain_attr::max_ep_stx_ctx, 2, "max_ep_stx_ctx"},
      {&fi_domain_attr::max_ep_srx_ctx, 2, "max_ep_srx_ctx"},
      {&fi_domain_attr::cntr_cnt, kMaxCntrs + 1, "cntr_cnt"},
      {&fi_domain_attr::mr_iov_limit, 2, "mr_iov_limit"},
      {&fi_domain_attr::mr_cnt, offers_[0].limits.max_regions + 1u, "mr_cnt"},
      {&fi_domain_attr::max_err_data, 100000, "max_err_data"},
  };
  for (const Case& c : cases) {
    const size_t saved = d->*c.field;
    d->*c.field = c.bad;
    ExpectNoMatch(c.name);
    d->*c.field = saved;
  }
  // A domain that has scalable endpoints.
  offers_[0].max_ep_ctx = 4;
  d->max_ep_tx_ctx = 4;
  hints_->ep_attr->tx_ctx_cnt = 4;
  ExpectEntries(1);
  EXPECT_EQ(result_->domain_attr->max_ep_tx_ctx, 4u);
  EXPECT_EQ(result_->ep_attr->tx_ctx_cnt, 4u);
  // Scalable endpoints are FI_EP_RDM's: a datagram entry offers one context.
  hints_->ep_attr->type = FI_EP_DGRAM;
  d->cq_data_size = 0;
  ExpectNoMatch("max_ep_tx_ctx");
}

TEST_F(InfoTest, IndependentQueuesSayHowContextsProgress) {
  driver::DeviceInfo dev = offers_[0].device;
  EXPECT_EQ(IndependentQueues(dev), 1u);  // 4 queues, no steering: software
  dev.can_steer = true;
  EXPECT_EQ(IndependentQueues(dev), 4u);  // steered hardware queues
  dev.num_queues = 1;
  EXPECT_EQ(IndependentQueues(dev), 1u);
  dev.host_address = true;  // delivered by port: an instance per context
  EXPECT_EQ(IndependentQueues(dev), kMaxEndpoints);
  offers_[0].device.can_steer = true;
  ExpectEntries(2);
  EXPECT_EQ(result_->domain_attr->tx_ctx_cnt, 4u);
  EXPECT_EQ(result_->domain_attr->rx_ctx_cnt, 4u);
}

TEST_F(InfoTest, AuthKeys) {
  const uint8_t key[4] = {9, 8, 7, 6};
  hints_->domain_attr->auth_key_size = 4;
  hints_->domain_attr->auth_key = static_cast<uint8_t*>(std::malloc(4));
  std::memcpy(hints_->domain_attr->auth_key, key, 4);
  ExpectEntries(2);
  ASSERT_NE(result_->domain_attr->auth_key, nullptr);
  EXPECT_EQ(std::memcmp(result_->domain_attr->auth_key, key, 4), 0);
  EXPECT_EQ(result_->domain_attr->auth_key_size, 4u);
  EXPECT_EQ(result_->ep_attr->auth_key, nullptr);
  hints_->domain_attr->auth_key_size = 8;
  ExpectNoMatch("auth_key_size");
  hints_->domain_attr->auth_key_size = 0;
  hints_->ep_attr->auth_key_size = 4;
  hints_->ep_attr->auth_key = static_cast<uint8_t*>(std::malloc(4));
  std::memcpy(hints_->ep_attr->auth_key, key, 4);
  ExpectEntries(2);
  ASSERT_NE(result_->ep_attr->auth_key, nullptr);
  EXPECT_EQ(result_->ep_attr->auth_key_size, 4u);
  EXPECT_EQ(std::memcmp(result_->ep_attr->auth_key, key, 4), 0);
  hints_->ep_attr->auth_key_size = 2;
  ExpectNoMatch("endpoint auth_key_size");
}

// 32 bytes and more: a key that authenticates handshakes, copied whole.
TEST_F(InfoTest, HandshakeAuthKeys) {
  constexpr size_t kLen = 40;
  hints_->domain_attr->auth_key_size = kLen;
  hints_->domain_attr->auth_key = static_cast<uint8_t*>(std::malloc(kLen));
  for (size_t i = 0; i < kLen; ++i) hints_->domain_attr->auth_key[i] = static_cast<uint8_t>(i);
  ExpectEntries(2);
  ASSERT_NE(result_->domain_attr->auth_key, nullptr);
  EXPECT_EQ(result_->domain_attr->auth_key_size, kLen);
  EXPECT_EQ(std::memcmp(result_->domain_attr->auth_key, hints_->domain_attr->auth_key, kLen), 0);
  hints_->domain_attr->auth_key_size = 31;
  ExpectNoMatch("domain auth_key_size 31 asked; bypass keys are 4 bytes, or 32 and more");
}

TEST_F(InfoTest, TrafficClass) {
  hints_->domain_attr->tclass = fi_tc_dscp_set(46);
  hints_->tx_attr->tclass = FI_TC_LOW_LATENCY;
  ExpectEntries(2);
  EXPECT_EQ(result_->domain_attr->tclass, fi_tc_dscp_set(46));
  EXPECT_EQ(result_->tx_attr->tclass, static_cast<uint32_t>(FI_TC_LOW_LATENCY));
  hints_->tx_attr->tclass = 0x1234;
  ExpectNoMatch("tx tclass");
  hints_->tx_attr->tclass = 0;
  hints_->domain_attr->tclass = FI_TC_DSCP | 64;
  ExpectNoMatch("domain tclass");
}

TEST_F(InfoTest, EndpointAttributes) {
  fi_ep_attr* e = hints_->ep_attr;
  e->protocol = FI_PROTO_UDP;
  ExpectEntries(1);
  EXPECT_EQ(result_->ep_attr->type, FI_EP_DGRAM);
  e->protocol = kProtoBypassRdm;
  e->protocol_version = bypass::rdm::kWireVersion;
  e->max_msg_size = 1 << 20;
  e->mem_tag_format = 0x30FF;
  e->tx_ctx_cnt = 1;
  e->rx_ctx_cnt = 1;
  ExpectEntries(1);
  EXPECT_EQ(result_->ep_attr->type, FI_EP_RDM);
  EXPECT_EQ(result_->ep_attr->mem_tag_format, 0x30FFu);
  e->protocol = FI_PROTO_IB_UD;
  ExpectNoMatch("protocol");
  e->protocol = FI_PROTO_UNSPEC;
  e->protocol_version = bypass::rdm::kWireVersion + 1;
  ExpectNoMatch("protocol_version");
  e->protocol_version = 0;
  e->max_msg_size = 1ull << 40;
  ExpectNoMatch("max_msg_size");
  e->max_msg_size = 0;
  e->msg_prefix_size = 16;  // DGRAM offers 8 (FI_MSG_PREFIX), RDM none
  ExpectNoMatch("msg_prefix_size");
  e->msg_prefix_size = 0;
  for (size_t fi_ep_attr::*f : {&fi_ep_attr::max_order_raw_size, &fi_ep_attr::max_order_war_size,
                                &fi_ep_attr::max_order_waw_size}) {
    e->*f = size_t{bypass::rdm::kMaxAtomicBytes} + 1;
    ExpectNoMatch("max_order_");
    e->*f = 0;
  }
  // Shared contexts: FI_EP_RDM only.
  e->tx_ctx_cnt = FI_SHARED_CONTEXT;
  ExpectEntries(1);
  EXPECT_EQ(result_->ep_attr->type, FI_EP_RDM);
  EXPECT_EQ(result_->ep_attr->tx_ctx_cnt, FI_SHARED_CONTEXT);
  e->tx_ctx_cnt = 0;
  e->rx_ctx_cnt = FI_SHARED_CONTEXT;
  ExpectEntries(1);
  EXPECT_EQ(result_->ep_attr->rx_ctx_cnt, FI_SHARED_CONTEXT);
  e->type = FI_EP_DGRAM;
  ExpectNoMatch("FI_SHARED_CONTEXT");
  e->type = FI_EP_UNSPEC;
  e->rx_ctx_cnt = 2;
  ExpectNoMatch("rx_ctx_cnt");
}

TEST_F(InfoTest, TransmitAttributes) {
  fi_tx_attr* t = hints_->tx_attr;
  t->op_flags = FI_TRANSMIT_COMPLETE | FI_COMPLETION;
  t->msg_order = FI_ORDER_SAS;
  t->inject_size = 64;
  t->size = 128;
  t->iov_limit = 1;
  ExpectEntries(1);  // SAS: RDM only
  EXPECT_EQ(result_->tx_attr->op_flags, FI_TRANSMIT_COMPLETE | FI_COMPLETION);
  EXPECT_EQ(result_->tx_attr->msg_order & FI_ORDER_SAS, FI_ORDER_SAS);
  t->msg_order = FI_ORDER_NONE;
  ExpectEntries(2);
  t->op_flags = FI_REMOTE_CQ_DATA | FI_INJECT;
  ExpectEntries(1);  // no remote CQ data on DGRAM
  EXPECT_EQ(result_->ep_attr->type, FI_EP_RDM);
  t->op_flags = FI_DELIVERY_COMPLETE;
  ExpectEntries(1);  // datagrams are not acknowledged: RDM only
  EXPECT_EQ(result_->ep_attr->type, FI_EP_RDM);
  t->op_flags = FI_MATCH_COMPLETE;
  ExpectNoMatch("tx op_flags");
  t->op_flags = 0;
  t->msg_order = FI_ORDER_SAS | FI_ORDER_RAW;
  ExpectNoMatch("tx msg_order");
  t->msg_order = 0;
  t->comp_order = FI_ORDER_STRICT;
  ExpectNoMatch("tx comp_order");
  t->comp_order = 0;
  t->inject_size = 1 << 20;
  ExpectNoMatch("inject_size");
  t->inject_size = 0;
  t->size = 1 << 20;
  ExpectNoMatch("tx size");
  t->size = 0;
  t->iov_limit = kMsgIovLimit + 1;
  ExpectNoMatch("tx iov_limit");
  t->iov_limit = 0;
  t->rma_iov_limit = 2;
  ExpectNoMatch("rma_iov_limit");
  t->rma_iov_limit = 0;
  t->caps = FI_HMEM;
  ExpectNoMatch("tx caps");
}

TEST_F(InfoTest, ReceiveAttributes) {
  fi_rx_attr* r = hints_->rx_attr;
  r->op_flags = FI_MULTI_RECV;
  r->msg_order = FI_ORDER_SAS;
  r->total_buffered_recv = 1024;
  r->size = 64;
  r->iov_limit = 1;
  ExpectEntries(1);
  EXPECT_EQ(result_->rx_attr->op_flags, FI_MULTI_RECV);
  r->msg_order = 0;
  r->total_buffered_recv = 0;
  ExpectEntries(1);  // no multi-receive buffers on DGRAM
  EXPECT_EQ(result_->ep_attr->type, FI_EP_RDM);
  r->op_flags = FI_COMPLETION;
  ExpectEntries(2);
  r->op_flags = FI_PEEK;
  ExpectNoMatch("rx op_flags");
  r->op_flags = 0;
  r->comp_order = FI_ORDER_DATA;
  ExpectNoMatch("rx comp_order");
  r->comp_order = 0;
  r->total_buffered_recv = 1ull << 40;
  ExpectNoMatch("total_buffered_recv");
  r->total_buffered_recv = 0;
  r->size = 1 << 20;
  ExpectNoMatch("rx size");
  r->size = 0;
  r->iov_limit = kMsgIovLimit + 1;
  ExpectNoMatch("rx iov_limit");
  r->iov_limit = 0;
  r->caps = FI_REMOTE_COMM | FI_RMA_EVENT;
  ExpectNoMatch("rx caps");
}

TEST_F(InfoTest, FabricProviderAndDomainNames) {
  offers_.push_back(Offer("af_xdp:eth1", "10.0.1.1"));
  hints_->fabric_attr->name = strdup("bypass");
  hints_->fabric_attr->prov_name = strdup("BYPASS");
  hints_->domain_attr->name = strdup("af_xdp:eth1");
  ExpectEntries(2);
  EXPECT_STREQ(result_->domain_attr->name, "af_xdp:eth1");
  std::free(hints_->domain_attr->name);
  hints_->domain_attr->name = strdup("af_xdp:eth9");
  ExpectNoMatch("domain \"af_xdp:eth9\"");
  std::free(hints_->domain_attr->name);
  hints_->domain_attr->name = nullptr;
  std::free(hints_->fabric_attr->prov_name);
  hints_->fabric_attr->prov_name = strdup("tcp");
  ExpectNoMatch("provider \"tcp\"");
  std::free(hints_->fabric_attr->prov_name);
  hints_->fabric_attr->prov_name = strdup("bypass;^ofi_rxm");  // as libfabric's core asks
  ExpectEntries(4);
  std::free(hints_->fabric_attr->prov_name);
  hints_->fabric_attr->prov_name = strdup("bypass;ofi_rxm");
  ExpectNoMatch("provider \"bypass;ofi_rxm\"");
  std::free(hints_->fabric_attr->prov_name);
  hints_->fabric_attr->prov_name = nullptr;
  std::free(hints_->fabric_attr->name);
  hints_->fabric_attr->name = strdup("IB-0xfe80");
  ExpectNoMatch("fabric name");
}

class NodeServiceTest : public InfoTest {
 protected:
  void SetUp() override {
    InfoTest::SetUp();
    const char* dir = std::getenv("TEST_TMPDIR");
    arp_path_ = std::string(dir != nullptr ? dir : "/tmp") + "/arp";
    std::ofstream arp(arp_path_);
    arp << "IP address       HW type     Flags       HW address            Mask     Device\n"
        << "10.0.0.2         0x1         0x2         0a:bb:cc:dd:ee:02     *        eth0\n"
        << "10.0.0.3         0x1         0x0         00:00:00:00:00:00     *        eth0\n";
    arp.close();
    SetNeighbourTablePath(arp_path_.c_str());
  }
  void TearDown() override {
    SetNeighbourTablePath(nullptr);
    InfoTest::TearDown();
  }
  static std::string Mac(const sockaddr_in& s) {
    char buf[32];
    const auto* m = reinterpret_cast<const unsigned char*>(s.sin_zero);
    std::snprintf(buf, sizeof(buf), "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4],
                  m[5]);
    return buf;
  }
  std::string arp_path_;
};

TEST_F(NodeServiceTest, NodeAndServiceAreTheDestination) {
  ExpectEntries(2, "10.0.0.2", "9000");
  sockaddr_in d = Dest(result_);
  EXPECT_EQ(d.sin_family, AF_INET);
  EXPECT_EQ(d.sin_addr.s_addr, inet_addr("10.0.0.2"));
  EXPECT_EQ(ntohs(d.sin_port), 9000);
  EXPECT_EQ(Mac(d), "0a:bb:cc:dd:ee:02");  // from the neighbour table
  sockaddr_in s = Src(result_);
  EXPECT_EQ(s.sin_addr.s_addr, inet_addr("10.0.0.1"));
  EXPECT_EQ(ntohs(s.sin_port), 0);  // any free port
  // Incomplete and unknown neighbours: zero, the engine finds it.
  ExpectEntries(2, "10.0.0.3", "9000");
  EXPECT_EQ(Mac(Dest(result_)), "00:00:00:00:00:00");
  ExpectEntries(2, "10.9.9.9", "9000");
  EXPECT_EQ(Mac(Dest(result_)), "00:00:00:00:00:00");
  // This host: the device's own MAC; a service alone names a local port.
  ExpectEntries(2, nullptr, "9001");
  d = Dest(result_);
  EXPECT_EQ(d.sin_addr.s_addr, inet_addr("10.0.0.1"));
  EXPECT_EQ(ntohs(d.sin_port), 9001);
  EXPECT_EQ(Mac(d), "02:00:00:00:00:01");
  // A node alone: the default port.
  ExpectEntries(2, "10.0.0.2", nullptr);
  EXPECT_EQ(ntohs(Dest(result_).sin_port), 7000);
}

TEST_F(NodeServiceTest, HostNamesAndServiceNames) {
  addrinfo want{};
  want.ai_family = AF_INET;
  addrinfo* res = nullptr;
  if (getaddrinfo("localhost", nullptr, &want, &res) != 0) {
    GTEST_SKIP() << "this machine does not resolve localhost to IPv4 (/etc/hosts)";
  }
  freeaddrinfo(res);
  ExpectEntries(2, "localhost", "9000");
  EXPECT_EQ(Dest(result_).sin_addr.s_addr, htonl(INADDR_LOOPBACK));
  EXPECT_EQ(Get("localhost", "9000", FI_NUMERICHOST), -FI_ENODATA);
  EXPECT_NE(std::string(LastMismatch()).find("FI_NUMERICHOST"), std::string::npos);
  EXPECT_EQ(Get("no-such-host.invalid", "9000"), -FI_ENODATA);
  EXPECT_NE(std::string(LastMismatch()).find("no-such-host.invalid"), std::string::npos);
  EXPECT_EQ(Get("10.0.0.2", "70000"), -FI_ENODATA);
  EXPECT_NE(std::string(LastMismatch()).find("70000"), std::string::npos);
  EXPECT_EQ(Get("10.0.0.2", "no-such-service-xyz"), -FI_ENODATA);
}

TEST_F(NodeServiceTest, AddrStrNodes) {
  ExpectEntries(2, "fi_sockaddr_in://10.0.0.2:7100");
  EXPECT_EQ(Dest(result_).sin_addr.s_addr, inet_addr("10.0.0.2"));
  EXPECT_EQ(ntohs(Dest(result_).sin_port), 7100);
  EXPECT_EQ(Get("fi_sockaddr_in://10.0.0.2:7100", "7000"), -FI_ENODATA);
  EXPECT_NE(std::string(LastMismatch()).find("service must then be null"), std::string::npos);
  EXPECT_EQ(Get("fi_sockaddr_in://10.0.0.2"), -FI_ENODATA);
  EXPECT_EQ(Get("fi_sockaddr_in://host:1"), -FI_ENODATA);
  EXPECT_NE(std::string(LastMismatch()).find("fi_sockaddr_in://<IPv4>:<port>"), std::string::npos);
}

TEST_F(NodeServiceTest, SourceFlagMakesThemTheSource) {
  offers_.push_back(Offer("af_xdp:eth1", "10.0.1.1"));
  ExpectEntries(2, "10.0.1.1", "5555", FI_SOURCE);
  EXPECT_STREQ(result_->domain_attr->name, "af_xdp:eth1");
  sockaddr_in s = Src(result_);
  EXPECT_EQ(s.sin_addr.s_addr, inet_addr("10.0.1.1"));
  EXPECT_EQ(ntohs(s.sin_port), 5555);
  EXPECT_EQ(result_->dest_addr, nullptr);
  // A port alone: every domain, at that port.
  ExpectEntries(4, nullptr, "5556", FI_SOURCE);
  EXPECT_EQ(ntohs(Src(result_).sin_port), 5556);
  // The wildcard address: every domain.
  ExpectEntries(4, "0.0.0.0", "5557", FI_SOURCE);
  ExpectNoMatch("is not this domain's IPv4", "10.7.7.7", "5555", FI_SOURCE);
  EXPECT_EQ(Get(nullptr, nullptr, FI_SOURCE), -FI_EINVAL);
  // With FI_SOURCE the hints' dest_addr is the destination.
  sockaddr_in dest{};
  dest.sin_family = AF_INET;
  dest.sin_port = htons(4000);
  dest.sin_addr.s_addr = inet_addr("10.0.0.2");
  hints_->dest_addr = std::malloc(sizeof(dest));
  std::memcpy(hints_->dest_addr, &dest, sizeof(dest));
  hints_->dest_addrlen = sizeof(dest);
  ExpectEntries(2, "10.0.0.1", "5555", FI_SOURCE);
  EXPECT_EQ(Dest(result_).sin_addr.s_addr, inet_addr("10.0.0.2"));
  EXPECT_EQ(Mac(Dest(result_)), "0a:bb:cc:dd:ee:02");
}

// A domain with the host's address (kernel UDP, intra-host) answers to
// every address of the host: 127.0.0.1 and the host's own, as source or
// destination, name the domain; the entries keep the address as typed
// (fi_getinfo(3): node and service are the source or the destination).
TEST_F(NodeServiceTest, HostAddressDomainAnswersToEveryLocalAddress) {
  offers_ = {Offer("shm:+udp:", "192.0.2.7", "shm+udp")};
  offers_[0].device.host_address = true;
  ExpectEntries(2, "127.0.0.1", "5555", FI_SOURCE);
  EXPECT_EQ(Src(result_).sin_addr.s_addr, inet_addr("127.0.0.1"));
  EXPECT_EQ(ntohs(Src(result_).sin_port), 5555);
  ExpectEntries(2, "127.0.0.1", "6000");
  EXPECT_EQ(Dest(result_).sin_addr.s_addr, inet_addr("127.0.0.1"));
  EXPECT_EQ(ntohs(Dest(result_).sin_port), 6000);
  ExpectEntries(2, "localhost", "6000");
  EXPECT_EQ(Dest(result_).sin_addr.s_addr, inet_addr("127.0.0.1"));
  ExpectEntries(2, "192.0.2.7", "6000");
  EXPECT_EQ(Dest(result_).sin_addr.s_addr, inet_addr("192.0.2.7"));
  // Another host's address stays what it is.
  ExpectEntries(2, "10.9.9.9", "6000");
  EXPECT_EQ(Dest(result_).sin_addr.s_addr, inet_addr("10.9.9.9"));
  // Without the flag, a source must be the domain's own IPv4.
  offers_[0].device.host_address = false;
  ExpectNoMatch("is not this domain's IPv4", "127.0.0.1", "5555", FI_SOURCE);
}

TEST_F(NodeServiceTest, HintAddressesChooseTheDomain) {
  offers_.push_back(Offer("af_xdp:eth1", "10.0.1.1"));
  sockaddr_in src{};
  src.sin_family = AF_INET;
  src.sin_port = htons(6000);
  src.sin_addr.s_addr = inet_addr("10.0.1.1");
  hints_->src_addr = std::malloc(sizeof(src));
  std::memcpy(hints_->src_addr, &src, sizeof(src));
  hints_->src_addrlen = sizeof(src);
  ExpectEntries(2);
  EXPECT_STREQ(result_->domain_attr->name, "af_xdp:eth1");
  EXPECT_EQ(ntohs(Src(result_).sin_port), 6000);
  EXPECT_EQ(result_->dest_addr, nullptr);
  // No node: the hints' dest_addr.
  sockaddr_in dest{};
  dest.sin_family = AF_INET;
  dest.sin_port = htons(4000);
  dest.sin_addr.s_addr = inet_addr("10.0.0.2");
  hints_->dest_addr = std::malloc(sizeof(dest));
  std::memcpy(hints_->dest_addr, &dest, sizeof(dest));
  hints_->dest_addrlen = sizeof(dest);
  ExpectEntries(2);
  EXPECT_EQ(ntohs(Dest(result_).sin_port), 4000);
  // A node overrides the hints' dest_addr.
  ExpectEntries(2, "10.0.0.3", "4001");
  EXPECT_EQ(ntohs(Dest(result_).sin_port), 4001);
  // Another family or a short address: no match.
  reinterpret_cast<sockaddr_in*>(hints_->dest_addr)->sin_family = AF_INET6;
  ExpectNoMatch("hints dest_addr family");
  hints_->src_addrlen = 8;
  ExpectNoMatch("hints src_addr of 8 bytes");
  hints_->src_addrlen = sizeof(src);
  reinterpret_cast<sockaddr_in*>(hints_->src_addr)->sin_addr.s_addr = inet_addr("10.5.5.5");
  ExpectNoMatch("source 10.5.5.5");
}

TEST(ProviderNameTest, CoreNameFirstThenExclusions) {
  EXPECT_TRUE(ProviderNameMatches("bypass"));
  EXPECT_TRUE(ProviderNameMatches("ByPass"));
  EXPECT_TRUE(ProviderNameMatches("bypass;^ofi_rxm;^ofi_rxd"));
  EXPECT_FALSE(ProviderNameMatches("bypass;ofi_rxm"));
  EXPECT_FALSE(ProviderNameMatches("bypassx"));
  EXPECT_FALSE(ProviderNameMatches("tcp;ofi_rxm"));
  EXPECT_FALSE(ProviderNameMatches(""));
}

TEST_F(InfoTest, Errors) {
  EXPECT_EQ(GetInfo(kV, nullptr, nullptr, 0, nullptr, offers_, nullptr), -FI_EINVAL);
  EXPECT_EQ(Get(nullptr, nullptr, 0, FI_VERSION(2, 0)), -FI_ENOSYS);
  EXPECT_NE(std::string(LastMismatch()).find("2.0"), std::string::npos);
  offers_.clear();
  ExpectNoMatch("no bypass device");
}

TEST_F(InfoTest, ProviderAttributesOnly) {
  hints_->caps = FI_ATOMIC;  // ignored
  ASSERT_EQ(Get(nullptr, nullptr, FI_PROV_ATTR_ONLY), 0);
  ASSERT_EQ(List().size(), 1u);
  EXPECT_EQ(result_->fabric_attr->prov_version, kProviderVersion);
  offers_.clear();
  ASSERT_EQ(Get(nullptr, nullptr, FI_PROV_ATTR_ONLY), 0);
  EXPECT_EQ(List().size(), 1u);
}

std::vector<std::string>* g_logged = nullptr;

TEST_F(InfoTest, MismatchesAreLogged) {
  std::vector<std::string> logged;
  g_logged = &logged;
  SetMismatchLog([](const char* line) { g_logged->push_back(line); });
  hints_->caps = FI_HMEM;
  ExpectNoMatch("caps");
  SetMismatchLog(nullptr);
  g_logged = nullptr;
  ASSERT_EQ(logged.size(), 3u);  // RDM, DGRAM, and MSG (not offered here)
  EXPECT_NE(logged[0].find("af_xdp:eth0 FI_EP_RDM: caps"), std::string::npos) << logged[0];
  EXPECT_NE(logged[1].find("FI_EP_DGRAM"), std::string::npos);
  EXPECT_NE(logged[2].find("FI_EP_MSG: not offered"), std::string::npos);
  // A match clears the last reason.
  hints_->caps = 0;
  ExpectEntries(2);
}

}  // namespace
}  // namespace bypass::fi
