// The static library's libfabric core, tested against a tiny provider
// defined here (fi_prov_ini below), and against libfabric itself (dlopen)
// for the text of fi_tostr and fi_strerror.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_ext.h>
#include <rdma/providers/fi_log.h>
#include <rdma/providers/fi_prov.h>
#include <stdlib.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fabric/fi/core/internal.h"
#include "fabric/fi/info/info.h"
#include "gtest/gtest.h"

namespace {

// What the test provider saw and answers.
struct ProviderCalls {
  int getinfo = 0;
  uint32_t version = 0;
  std::string node;
  std::string service;
  uint64_t flags = 0;
  int answer = 0;  // 0: two entries; else returned as is
  int fabric = 0;
  std::string fabric_name;
};
ProviderCalls g_calls;
std::mutex g_calls_mu;  // the provider may be called from several threads

int TestGetinfo(uint32_t version, const char* node, const char* service, uint64_t flags,
                const fi_info*, fi_info** info) {
  std::lock_guard<std::mutex> lock(g_calls_mu);
  ++g_calls.getinfo;
  g_calls.version = version;
  g_calls.node = node != nullptr ? node : "";
  g_calls.service = service != nullptr ? service : "";
  g_calls.flags = flags;
  if (g_calls.answer != 0) return g_calls.answer;
  fi_info* a = fi_allocinfo();
  fi_info* b = fi_allocinfo();
  a->fabric_attr->name = strdup("bypass");
  b->fabric_attr->name = strdup("bypass");
  b->fabric_attr->prov_name = strdup("bypass;ofi_rxm");  // a provider's own stays
  a->next = b;
  *info = a;
  return 0;
}

struct TestFabric {
  fid_fabric fabric;
};

int CloseFabric(fid* f) {
  delete reinterpret_cast<TestFabric*>(f);
  return 0;
}
fi_ops g_fabric_ops = {sizeof(fi_ops), CloseFabric, nullptr, nullptr, nullptr, nullptr, nullptr};

int TestFabricOpen(fi_fabric_attr* attr, fid_fabric** fabric, void* context) {
  std::lock_guard<std::mutex> lock(g_calls_mu);
  ++g_calls.fabric;
  g_calls.fabric_name = attr->name;
  auto* f = new TestFabric{};
  f->fabric.fid.fclass = FI_CLASS_FABRIC;
  f->fabric.fid.context = context;
  f->fabric.fid.ops = &g_fabric_ops;
  *fabric = &f->fabric;
  return 0;
}

fi_provider g_test_prov = {
    FI_VERSION(1, 0), FI_VERSION(1, 17), {}, "bypass", TestGetinfo, TestFabricOpen, nullptr,
};

}  // namespace

extern "C" fi_provider* fi_prov_ini(void) { return &g_test_prov; }

namespace {

// libfabric itself, for comparisons.
class Libfabric {
 public:
  static Libfabric& Get() {
    static Libfabric lib;
    return lib;
  }
  bool ok() const { return tostr_r_ != nullptr && strerror_ != nullptr; }
  std::string ToStr(const void* data, fi_type type, size_t len = 8192) {
    std::vector<char> buf(len + 1, '#');
    char* r = tostr_r_(buf.data(), len, data, type);
    return r != nullptr ? r : "<null>";
  }
  std::string StrError(int e) { return strerror_(e); }

 private:
  Libfabric() {
    handle_ = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) return;
    tostr_r_ = reinterpret_cast<decltype(tostr_r_)>(dlsym(handle_, "fi_tostr_r"));
    strerror_ = reinterpret_cast<decltype(strerror_)>(dlsym(handle_, "fi_strerror"));
  }
  void* handle_ = nullptr;
  char* (*tostr_r_)(char*, size_t, const void*, fi_type) = nullptr;
  const char* (*strerror_)(int) = nullptr;
};

std::string Ours(const void* data, fi_type type, size_t len = 8192) {
  std::vector<char> buf(len + 1, '#');
  char* r = fi_tostr_r(buf.data(), len, data, type);
  return r != nullptr ? r : "<null>";
}

// The first line where two texts differ, for readable failures.
std::string FirstDiff(const std::string& a, const std::string& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  const size_t start = a.rfind('\n', i == 0 ? 0 : i - 1);
  const size_t from = start == std::string::npos ? 0 : start + 1;
  return "ours: [" + a.substr(from, a.find('\n', i) - from) + "] libfabric: [" +
         b.substr(from, b.find('\n', i) - from) + "]";
}

class CoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_calls = ProviderCalls{};
    unsetenv("FI_PROVIDER");
  }
};

TEST_F(CoreTest, Version) {
  EXPECT_EQ(fi_version(), FI_VERSION(1, 17));
  EXPECT_STREQ(fi_tostr(&g_calls, FI_TYPE_VERSION), "1.17.0");
}

TEST_F(CoreTest, GetinfoCallsTheProviderAndNamesIt) {
  fi_info* info = nullptr;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 9), "10.0.0.2", "7000", FI_NUMERICHOST, nullptr, &info), 0);
  EXPECT_EQ(g_calls.getinfo, 1);
  EXPECT_EQ(g_calls.version, FI_VERSION(1, 9));
  EXPECT_EQ(g_calls.node, "10.0.0.2");
  EXPECT_EQ(g_calls.service, "7000");
  EXPECT_EQ(g_calls.flags, FI_NUMERICHOST);
  ASSERT_NE(info, nullptr);
  ASSERT_NE(info->next, nullptr);
  EXPECT_STREQ(info->fabric_attr->prov_name, "bypass");
  EXPECT_EQ(info->fabric_attr->prov_version, FI_VERSION(1, 0));
  EXPECT_STREQ(info->next->fabric_attr->prov_name, "bypass;ofi_rxm");
  fi_freeinfo(info);
}

TEST_F(CoreTest, GetinfoErrors) {
  fi_info* info = reinterpret_cast<fi_info*>(&g_calls);
  EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, nullptr, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_getinfo(FI_VERSION(1, 18), nullptr, nullptr, 0, nullptr, &info), -FI_ENOSYS);
  EXPECT_EQ(info, nullptr);
  EXPECT_EQ(fi_getinfo(FI_VERSION(2, 0), nullptr, nullptr, 0, nullptr, &info), -FI_ENOSYS);
  g_calls.answer = -FI_ENODATA;
  EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, nullptr, &info), -FI_ENODATA);
  g_calls.answer = -FI_ENOMEM;
  EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, nullptr, &info), -FI_ENOMEM);
  EXPECT_EQ(g_calls.getinfo, 2);
}

TEST_F(CoreTest, ProviderFilters) {
  fi_info* info = nullptr;
  struct Case {
    const char* env;
    bool allowed;
  };
  for (const Case& c : {Case{"tcp", false}, Case{"^bypass", false}, Case{"tcp,BYPASS", true},
                        Case{"^tcp,shm", true}, Case{"bypass", true}, Case{"bypassx", false}}) {
    setenv("FI_PROVIDER", c.env, 1);
    const int ret = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, nullptr, &info);
    EXPECT_EQ(ret, c.allowed ? 0 : -FI_ENODATA) << c.env;
    fi_freeinfo(info);
    info = nullptr;
  }
  unsetenv("FI_PROVIDER");
  fi_info* hints = fi_allocinfo();
  hints->fabric_attr->prov_name = strdup("tcp");
  EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info), -FI_ENODATA);
  std::free(hints->fabric_attr->prov_name);
  hints->fabric_attr->prov_name = strdup("Bypass");
  EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info), 0);
  fi_freeinfo(info);
  std::free(hints->fabric_attr->prov_name);
  hints->fabric_attr->prov_name = strdup("bypass;ofi_rxm");  // no utility providers here
  EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info), -FI_ENODATA);
  fi_freeinfo(hints);
}

TEST_F(CoreTest, FabricDispatchesToTheProvider) {
  fi_fabric_attr attr{};
  attr.name = const_cast<char*>("bypass");
  fid_fabric* fabric = nullptr;
  int context = 0;
  ASSERT_EQ(fi_fabric(&attr, &fabric, &context), 0);
  EXPECT_EQ(g_calls.fabric, 1);
  EXPECT_EQ(g_calls.fabric_name, "bypass");
  EXPECT_EQ(fabric->fid.context, &context);
  EXPECT_EQ(fi_close(&fabric->fid), 0);
  attr.prov_name = const_cast<char*>("tcp");
  EXPECT_EQ(fi_fabric(&attr, &fabric, nullptr), -FI_ENODEV);
  EXPECT_EQ(fi_fabric(nullptr, &fabric, nullptr), -FI_EINVAL);
  attr.prov_name = nullptr;
  attr.name = nullptr;
  EXPECT_EQ(fi_fabric(&attr, &fabric, nullptr), -FI_EINVAL);
  EXPECT_EQ(g_calls.fabric, 1);
}

TEST_F(CoreTest, DupinfoIsADeepCopy) {
  fi_info* info = fi_allocinfo();
  ASSERT_NE(info, nullptr);
  info->caps = FI_MSG;
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(9);
  info->src_addr = std::malloc(sizeof(sin));
  std::memcpy(info->src_addr, &sin, sizeof(sin));
  info->src_addrlen = sizeof(sin);
  info->domain_attr->name = strdup("memif:/x");
  info->domain_attr->auth_key = static_cast<uint8_t*>(std::malloc(4));
  std::memset(info->domain_attr->auth_key, 7, 4);
  info->domain_attr->auth_key_size = 4;
  info->ep_attr->auth_key = static_cast<uint8_t*>(std::malloc(4));
  std::memset(info->ep_attr->auth_key, 8, 4);
  info->ep_attr->auth_key_size = 4;
  info->fabric_attr->name = strdup("bypass");
  info->fabric_attr->prov_name = strdup("bypass");
  info->next = fi_allocinfo();  // not copied
  fi_info* dup = fi_dupinfo(info);
  ASSERT_NE(dup, nullptr);
  EXPECT_EQ(dup->next, nullptr);
  EXPECT_EQ(dup->caps, FI_MSG);
  EXPECT_NE(dup->src_addr, info->src_addr);
  EXPECT_EQ(std::memcmp(dup->src_addr, &sin, sizeof(sin)), 0);
  EXPECT_NE(dup->domain_attr->name, info->domain_attr->name);
  EXPECT_STREQ(dup->domain_attr->name, "memif:/x");
  EXPECT_NE(dup->domain_attr->auth_key, info->domain_attr->auth_key);
  EXPECT_EQ(dup->ep_attr->auth_key[3], 8);
  EXPECT_STREQ(dup->fabric_attr->prov_name, "bypass");
  EXPECT_EQ(Ours(dup, FI_TYPE_INFO), Ours(info, FI_TYPE_INFO));
  fi_freeinfo(info);  // the whole list; the copy lives on
  EXPECT_STREQ(dup->domain_attr->name, "memif:/x");
  fi_freeinfo(dup);
  fi_freeinfo(nullptr);
}

TEST_F(CoreTest, StrerrorMatchesLibfabric) {
  Libfabric& lib = Libfabric::Get();
  ASSERT_TRUE(lib.ok()) << "libfabric.so.1 (Debian libfabric1) is needed for this comparison";
  for (int e = -300; e <= 300; ++e) {
    EXPECT_EQ(std::string(fi_strerror(e)), lib.StrError(e)) << e;
  }
  EXPECT_STREQ(fi_strerror(-FI_ETRUNC), "Truncation error");
  EXPECT_STREQ(fi_strerror(FI_EAGAIN), "Resource temporarily unavailable");
}

// Every enum type over its range and past it.
TEST_F(CoreTest, TostrOfEnumsAndFlagsMatchesLibfabric) {
  Libfabric& lib = Libfabric::Get();
  ASSERT_TRUE(lib.ok());
  for (fi_type t :
       {FI_TYPE_EP_TYPE, FI_TYPE_ADDR_FORMAT, FI_TYPE_THREADING, FI_TYPE_PROGRESS, FI_TYPE_PROTOCOL,
        FI_TYPE_AV_TYPE, FI_TYPE_ATOMIC_TYPE, FI_TYPE_ATOMIC_OP, FI_TYPE_EQ_EVENT, FI_TYPE_OP_TYPE,
        FI_TYPE_COLLECTIVE_OP, FI_TYPE_HMEM_IFACE, FI_TYPE_CQ_FORMAT, FI_TYPE_LOG_LEVEL,
        FI_TYPE_LOG_SUBSYS, FI_TYPE_VERSION, FI_TYPE_MR_MODE}) {
    for (uint32_t v = 0; v < 40; ++v) {
      EXPECT_EQ(Ours(&v, t), lib.ToStr(&v, t)) << "type " << t << " value " << v;
    }
    uint32_t prov = FI_PROV_SPECIFIC | 3;
    EXPECT_EQ(Ours(&prov, t), lib.ToStr(&prov, t)) << "type " << t;
  }
  std::mt19937_64 rng(17);
  for (fi_type t : {FI_TYPE_CAPS, FI_TYPE_OP_FLAGS, FI_TYPE_MSG_ORDER, FI_TYPE_MODE,
                    FI_TYPE_CQ_EVENT_FLAGS, FI_TYPE_MR_MODE}) {
    std::vector<uint64_t> values = {0, ~0ull, FI_MSG | FI_TAGGED, FI_ORDER_SAS, FI_ORDER_DATA};
    for (int i = 0; i < 64; ++i) values.push_back(1ull << i);
    for (int i = 0; i < 200; ++i) values.push_back(rng());
    for (uint64_t v : values) EXPECT_EQ(Ours(&v, t), lib.ToStr(&v, t)) << t << " " << v;
  }
  fid f{};
  EXPECT_EQ(Ours(&f, FI_TYPE_FID), lib.ToStr(&f, FI_TYPE_FID));
  EXPECT_EQ(Ours(nullptr, FI_TYPE_INFO), lib.ToStr(nullptr, FI_TYPE_INFO));
  EXPECT_EQ(fi_tostr(nullptr, FI_TYPE_CAPS), nullptr);
  uint32_t any = 0;
  EXPECT_EQ(Ours(&any, static_cast<fi_type>(99)), lib.ToStr(&any, static_cast<fi_type>(99)));
}

// An fi_info with every field random (strings, addresses of each format).
fi_info* RandomInfo(std::mt19937_64& rng, uint32_t format) {
  fi_info* i = fi_allocinfo();
  auto small = [&](uint32_t n) { return static_cast<uint32_t>(rng() % n); };
  i->caps = rng();
  i->mode = rng();
  i->addr_format = format;
  std::vector<uint8_t> bytes(64);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  if (format == FI_SOCKADDR_IN || format == FI_SOCKADDR) {
    sockaddr_in s{};
    s.sin_family = AF_INET;
    s.sin_port = static_cast<uint16_t>(rng());
    s.sin_addr.s_addr = static_cast<uint32_t>(rng());
    std::memcpy(bytes.data(), &s, sizeof(s));
  } else if (format == FI_SOCKADDR_IN6) {
    sockaddr_in6 s{};
    s.sin6_family = AF_INET6;
    s.sin6_port = static_cast<uint16_t>(rng());
    for (auto& b : s.sin6_addr.s6_addr) b = static_cast<uint8_t>(rng() % 3);
    std::memcpy(bytes.data(), &s, sizeof(s));
  } else if (format == FI_ADDR_STR) {
    const char* text = "fi_sockaddr_in://10.1.2.3:4567";
    std::memcpy(bytes.data(), text, std::strlen(text) + 1);
  }
  if (small(4) != 0) {
    i->src_addr = std::malloc(bytes.size());
    std::memcpy(i->src_addr, bytes.data(), bytes.size());
    i->src_addrlen = bytes.size();
  }
  if (small(2) != 0) {
    i->dest_addr = std::malloc(bytes.size());
    std::memcpy(i->dest_addr, bytes.data(), bytes.size());
    i->dest_addrlen = bytes.size();
  }
  fi_tx_attr* tx = i->tx_attr;
  tx->caps = rng();
  tx->mode = rng();
  tx->op_flags = rng();
  tx->msg_order = rng();
  tx->comp_order = small(2) != 0 ? rng() : (small(2) != 0 ? FI_ORDER_STRICT : 0);
  tx->inject_size = rng();
  tx->size = small(1000);
  tx->iov_limit = small(8);
  tx->rma_iov_limit = small(8);
  tx->tclass = static_cast<uint32_t>(rng());
  fi_rx_attr* rx = i->rx_attr;
  rx->caps = rng();
  rx->mode = rng();
  rx->op_flags = rng();
  rx->msg_order = rng();
  rx->comp_order = rng();
  rx->total_buffered_recv = rng();
  rx->size = rng();
  rx->iov_limit = rng();
  fi_ep_attr* ep = i->ep_attr;
  ep->type = static_cast<fi_ep_type>(small(8));
  ep->protocol = small(2) != 0 ? small(30) : (FI_PROV_SPECIFIC | small(4));
  ep->protocol_version = static_cast<uint32_t>(rng());
  ep->max_msg_size = rng();
  ep->msg_prefix_size = small(64);
  ep->max_order_raw_size = rng();
  ep->max_order_war_size = small(2) != 0 ? SIZE_MAX : 0;
  ep->max_order_waw_size = rng();
  ep->mem_tag_format = rng();
  ep->tx_ctx_cnt = small(2) != 0 ? FI_SHARED_CONTEXT : small(9);
  ep->rx_ctx_cnt = small(9);
  ep->auth_key_size = small(9);
  fi_domain_attr* d = i->domain_attr;
  d->domain = reinterpret_cast<fid_domain*>(static_cast<uintptr_t>(rng()) & ~uintptr_t{7});
  if (small(3) != 0) d->name = strdup("memif:/run/bypass/fi.sock");
  d->threading = static_cast<fi_threading>(small(8));
  d->control_progress = static_cast<fi_progress>(small(4));
  d->data_progress = static_cast<fi_progress>(small(4));
  d->resource_mgmt = static_cast<fi_resource_mgmt>(small(4));
  d->av_type = static_cast<fi_av_type>(small(4));
  d->mr_mode = static_cast<int>(rng());
  d->mr_key_size = small(16);
  d->cq_data_size = small(16);
  d->cq_cnt = rng();
  d->ep_cnt = rng();
  d->tx_ctx_cnt = rng();
  d->rx_ctx_cnt = rng();
  d->max_ep_tx_ctx = rng();
  d->max_ep_rx_ctx = rng();
  d->max_ep_stx_ctx = rng();
  d->max_ep_srx_ctx = rng();
  d->cntr_cnt = rng();
  d->mr_iov_limit = rng();
  d->caps = rng();
  d->mode = rng();
  d->auth_key_size = small(9);
  d->max_err_data = rng();
  d->mr_cnt = rng();
  d->tclass = static_cast<uint32_t>(rng());
  fi_fabric_attr* fab = i->fabric_attr;
  if (small(3) != 0) fab->name = strdup("bypass");
  if (small(3) != 0) fab->prov_name = strdup("bypass");
  fab->prov_version = static_cast<uint32_t>(rng());
  fab->api_version = static_cast<uint32_t>(rng());
  return i;
}

TEST_F(CoreTest, TostrOfInfosMatchesLibfabric) {
  Libfabric& lib = Libfabric::Get();
  ASSERT_TRUE(lib.ok());
  // What the provider really returns.
  bypass::fi::DomainOffer offer;
  offer.name = "memif:/run/bypass/fi.sock";
  offer.device.driver = "net_memif";
  offer.device.ipv4.value = 0x0a000001;
  offer.default_port = 7000;
  fi_info* real = nullptr;
  ASSERT_EQ(
      bypass::fi::GetInfo(FI_VERSION(1, 17), "10.0.0.2", "7001", 0, nullptr, {&offer, 1}, &real),
      0);
  for (fi_info* i = real; i != nullptr; i = i->next) {
    EXPECT_EQ(Ours(i, FI_TYPE_INFO), lib.ToStr(i, FI_TYPE_INFO));
    EXPECT_EQ(Ours(i->tx_attr, FI_TYPE_TX_ATTR), lib.ToStr(i->tx_attr, FI_TYPE_TX_ATTR));
    EXPECT_EQ(Ours(i->rx_attr, FI_TYPE_RX_ATTR), lib.ToStr(i->rx_attr, FI_TYPE_RX_ATTR));
    EXPECT_EQ(Ours(i->ep_attr, FI_TYPE_EP_ATTR), lib.ToStr(i->ep_attr, FI_TYPE_EP_ATTR));
    EXPECT_EQ(Ours(i->domain_attr, FI_TYPE_DOMAIN_ATTR),
              lib.ToStr(i->domain_attr, FI_TYPE_DOMAIN_ATTR));
    EXPECT_EQ(Ours(i->fabric_attr, FI_TYPE_FABRIC_ATTR),
              lib.ToStr(i->fabric_attr, FI_TYPE_FABRIC_ATTR));
  }
  EXPECT_NE(Ours(real, FI_TYPE_INFO).find("fi_sockaddr_in://10.0.0.1:0"), std::string::npos);
  // Truncated at every length, as libfabric truncates.
  const std::string full = Ours(real, FI_TYPE_INFO);
  for (size_t len = 0; len < full.size() + 4; ++len) {
    ASSERT_EQ(Ours(real, FI_TYPE_INFO, len), lib.ToStr(real, FI_TYPE_INFO, len)) << len;
  }
  bypass::fi::FreeInfo(real);

  // Random entries, each address format, missing attributes.
  std::mt19937_64 rng(5);
  const uint32_t formats[] = {
      FI_FORMAT_UNSPEC, FI_SOCKADDR, FI_SOCKADDR_IN, FI_SOCKADDR_IN6, FI_ADDR_PSMX,
      FI_ADDR_GNI,      FI_ADDR_STR, FI_ADDR_PSMX2,  FI_ADDR_IB_UD,   FI_ADDR_EFA,
      FI_ADDR_PSMX3,    FI_ADDR_OPX, FI_ADDR_CXI,    FI_ADDR_BGQ,     FI_ADDR_MLX,
      FI_SOCKADDR_IB,   77};
  for (int n = 0; n < 300; ++n) {
    fi_info* i = RandomInfo(rng, formats[n % (sizeof(formats) / sizeof(formats[0]))]);
    if (n % 7 == 0) {
      std::free(i->tx_attr);
      i->tx_attr = nullptr;
    }
    if (n % 11 == 0) {
      std::free(i->rx_attr);
      i->rx_attr = nullptr;
      std::free(i->fabric_attr->name);
      std::free(i->fabric_attr->prov_name);
      std::free(i->fabric_attr);
      i->fabric_attr = nullptr;
    }
    const std::string ours = Ours(i, FI_TYPE_INFO);
    const std::string theirs = lib.ToStr(i, FI_TYPE_INFO);
    ASSERT_TRUE(ours == theirs) << "entry " << n << ": " << FirstDiff(ours, theirs);
    for (size_t len : {1, 2, 3, 40, 333}) {
      ASSERT_EQ(Ours(i, FI_TYPE_INFO, len), lib.ToStr(i, FI_TYPE_INFO, len)) << n << " " << len;
    }
    if (i->domain_attr != nullptr) {
      ASSERT_EQ(Ours(i->domain_attr, FI_TYPE_DOMAIN_ATTR),
                lib.ToStr(i->domain_attr, FI_TYPE_DOMAIN_ATTR));
    }
    fi_freeinfo(i);
  }
  char small[4];
  EXPECT_EQ(fi_tostr_r(small, 0, &rng, FI_TYPE_CAPS), nullptr);
  EXPECT_EQ(fi_tostr_r(nullptr, 10, &rng, FI_TYPE_CAPS), nullptr);
}

TEST_F(CoreTest, TostrIsPerThreadBuffer) {
  uint64_t caps = FI_MSG;
  char* a = fi_tostr(&caps, FI_TYPE_CAPS);
  EXPECT_STREQ(a, "FI_MSG");
  caps = FI_RMA;
  char* b = fi_tostr(&caps, FI_TYPE_CAPS);
  EXPECT_EQ(a, b);
  EXPECT_STREQ(b, "FI_RMA");
}

// fi_getinfo(3): "Multiple threads may call fi_getinfo simultaneously";
// fi_tostr's buffer is per thread. Run under --config=tsan too.
TEST_F(CoreTest, ThreadsCallConcurrently) {
  bypass::fi::DomainOffer offer;
  offer.name = "loopback:a";
  offer.device.ipv4.value = 0x0a000001;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int n = 0; n < 200; ++n) {
        fi_info* list = nullptr;
        fi_info* hints = fi_allocinfo();
        hints->caps = (n % 2 == 0) ? FI_MSG : FI_HMEM;  // every other call matches nothing
        const int ret = bypass::fi::GetInfo(FI_VERSION(1, 17), "10.0.0.2", "7000", 0, hints,
                                            {&offer, 1}, &list);
        if (ret != ((n % 2 == 0) ? 0 : -FI_ENODATA)) ++failures;
        if (ret == -FI_ENODATA && std::strstr(bypass::fi::LastMismatch(), "caps") == nullptr) {
          ++failures;
        }
        if (list != nullptr) {
          const std::string text = fi_tostr(list, FI_TYPE_INFO);
          if (text.find("fi_sockaddr_in://10.0.0.2:7000") == std::string::npos) ++failures;
        }
        uint64_t caps = FI_MSG << t;
        if (std::string(fi_tostr(&caps, FI_TYPE_CAPS)).empty()) ++failures;
        fi_freeinfo(list);
        fi_freeinfo(hints);
        fi_info* via_core = nullptr;
        if (fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, nullptr, &via_core) != 0) {
          ++failures;
        }
        fi_freeinfo(via_core);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

fi_provider g_other = {FI_VERSION(1, 0), FI_VERSION(1, 17), {},     "bypass",
                       nullptr,          nullptr,           nullptr};

TEST_F(CoreTest, ParamsDefineGetAndList) {
  EXPECT_EQ(fi_param_define(&g_other, "rx_size", FI_PARAM_SIZE_T, "receive queue %s", "entries"),
            0);
  EXPECT_EQ(fi_param_define(&g_other, "rx_size", FI_PARAM_SIZE_T, "again"), 0);
  EXPECT_EQ(fi_param_define(&g_other, "use_hugepages", FI_PARAM_BOOL, "hugepages"), 0);
  EXPECT_EQ(fi_param_define(&g_other, "devices", FI_PARAM_STRING, "device URIs"), 0);
  EXPECT_EQ(fi_param_define(&g_other, "port", FI_PARAM_INT, "UDP port"), 0);
  EXPECT_EQ(fi_param_define(&g_other, "bad", static_cast<fi_param_type>(9), "x"), -FI_EINVAL);
  EXPECT_EQ(fi_param_define(&g_other, "odd-name.x", FI_PARAM_INT, "kept as written"), 0);

  size_t size = 0;
  unsetenv("FI_BYPASS_RX_SIZE");
  EXPECT_EQ(fi_param_get_size_t(&g_other, "rx_size", &size), -FI_ENODATA);
  setenv("FI_BYPASS_RX_SIZE", "4096", 1);
  EXPECT_EQ(fi_param_get_size_t(&g_other, "rx_size", &size), 0);
  EXPECT_EQ(size, 4096u);
  setenv("FI_BYPASS_RX_SIZE", "-1", 1);
  EXPECT_EQ(fi_param_get_size_t(&g_other, "rx_size", &size), -FI_EINVAL);
  int b = -1;
  for (const char* t : {"1", "on", "YES", "true"}) {
    setenv("FI_BYPASS_USE_HUGEPAGES", t, 1);
    EXPECT_EQ(fi_param_get_bool(&g_other, "use_hugepages", &b), 0);
    EXPECT_EQ(b, 1) << t;
  }
  for (const char* f : {"0", "off", "No", "false"}) {
    setenv("FI_BYPASS_USE_HUGEPAGES", f, 1);
    EXPECT_EQ(fi_param_get_bool(&g_other, "use_hugepages", &b), 0);
    EXPECT_EQ(b, 0) << f;
  }
  setenv("FI_BYPASS_USE_HUGEPAGES", "maybe", 1);
  EXPECT_EQ(fi_param_get_bool(&g_other, "use_hugepages", &b), -FI_EINVAL);
  char* s = nullptr;
  setenv("FI_BYPASS_DEVICES", "memif:/a;memif:/b", 1);
  EXPECT_EQ(fi_param_get_str(&g_other, "devices", &s), 0);
  EXPECT_STREQ(s, "memif:/a;memif:/b");
  int port = 0;
  setenv("FI_BYPASS_PORT", "0x1f40", 1);
  EXPECT_EQ(fi_param_get_int(&g_other, "port", &port), 0);
  EXPECT_EQ(port, 8000);
  setenv("FI_BYPASS_PORT", "12x", 1);
  EXPECT_EQ(fi_param_get_int(&g_other, "port", &port), -FI_EINVAL);
  EXPECT_EQ(fi_param_get_int(&g_other, "never_defined", &port), -FI_ENOENT);
  EXPECT_EQ(fi_param_get_int(nullptr, "port", &port), -FI_ENOENT);  // that is FI_PORT

  fi_param* params = nullptr;
  int count = 0;
  ASSERT_EQ(fi_getparams(&params, &count), 0);
  bool saw_rx = false, saw_devices = false, saw_level = false, saw_odd = false;
  for (int i = 0; i < count; ++i) {
    const std::string name = params[i].name;
    if (name == "FI_BYPASS_RX_SIZE") {
      saw_rx = true;
      EXPECT_EQ(params[i].type, FI_PARAM_SIZE_T);
      EXPECT_STREQ(params[i].help_string, "receive queue entries");
      EXPECT_STREQ(params[i].value, "-1");
    }
    if (name == "FI_BYPASS_DEVICES") {
      saw_devices = true;
      EXPECT_STREQ(params[i].value, "memif:/a;memif:/b");
    }
    if (name == "FI_LOG_LEVEL") saw_level = true;
    if (name == "FI_BYPASS_ODD-NAME.X") saw_odd = true;
    EXPECT_NE(name, "FI_BYPASS_BAD");
  }
  EXPECT_EQ(params[count].name, nullptr);
  EXPECT_TRUE(saw_rx && saw_devices && saw_level && saw_odd);
  fi_freeparams(params);
  for (const char* v :
       {"FI_BYPASS_RX_SIZE", "FI_BYPASS_USE_HUGEPAGES", "FI_BYPASS_DEVICES", "FI_BYPASS_PORT"}) {
    unsetenv(v);
  }
}

fi_provider g_tcp = {FI_VERSION(1, 0), FI_VERSION(1, 17), {}, "tcp", nullptr, nullptr, nullptr};

class LogTest : public CoreTest {
 protected:
  void TearDown() override {
    for (const char* v : {"FI_LOG_LEVEL", "FI_LOG_PROV", "FI_LOG_SUBSYS", "FI_LOG_INTERVAL"}) {
      unsetenv(v);
    }
    bypass::fi::core::ReloadLogConfig();
    bypass::fi::core::ForgetImportedLogger();
  }
  void Configure(const char* level, const char* prov, const char* subsys) {
    for (auto [name, value] : {std::pair{"FI_LOG_LEVEL", level}, std::pair{"FI_LOG_PROV", prov},
                               std::pair{"FI_LOG_SUBSYS", subsys}}) {
      if (value != nullptr) {
        setenv(name, value, 1);
      } else {
        unsetenv(name);
      }
    }
    bypass::fi::core::ReloadLogConfig();
  }
};

TEST_F(LogTest, LevelsDefaultToWarn) {
  Configure(nullptr, nullptr, nullptr);
  EXPECT_TRUE(fi_log_enabled(&g_test_prov, FI_LOG_WARN, FI_LOG_CORE));
  EXPECT_FALSE(fi_log_enabled(&g_test_prov, FI_LOG_INFO, FI_LOG_CORE));
  Configure("info", nullptr, nullptr);
  EXPECT_TRUE(fi_log_enabled(&g_test_prov, FI_LOG_TRACE, FI_LOG_EP_DATA));
  EXPECT_TRUE(fi_log_enabled(&g_test_prov, FI_LOG_INFO, FI_LOG_EP_DATA));
  EXPECT_FALSE(fi_log_enabled(&g_test_prov, FI_LOG_DEBUG, FI_LOG_EP_DATA));
  Configure("DEBUG", nullptr, nullptr);
  EXPECT_TRUE(fi_log_enabled(&g_test_prov, FI_LOG_DEBUG, FI_LOG_CQ));
  EXPECT_FALSE(fi_log_enabled(&g_test_prov, static_cast<fi_log_level>(9), FI_LOG_CQ));
}

TEST_F(LogTest, ProviderAndSubsystemFilters) {
  Configure("warn", "bypass", nullptr);
  EXPECT_TRUE(fi_log_enabled(&g_test_prov, FI_LOG_WARN, FI_LOG_CORE));
  EXPECT_FALSE(fi_log_enabled(&g_tcp, FI_LOG_WARN, FI_LOG_CORE));
  Configure("warn", "^bypass", nullptr);
  EXPECT_FALSE(fi_log_enabled(&g_test_prov, FI_LOG_WARN, FI_LOG_CORE));
  EXPECT_TRUE(fi_log_enabled(&g_tcp, FI_LOG_WARN, FI_LOG_CORE));
  Configure("warn", nullptr, "cq,av");
  EXPECT_TRUE(fi_log_enabled(&g_test_prov, FI_LOG_WARN, FI_LOG_CQ));
  EXPECT_TRUE(fi_log_enabled(&g_test_prov, FI_LOG_WARN, FI_LOG_AV));
  EXPECT_FALSE(fi_log_enabled(&g_test_prov, FI_LOG_WARN, FI_LOG_EP_DATA));
  Configure("warn", nullptr, "^cq");
  EXPECT_FALSE(fi_log_enabled(&g_test_prov, FI_LOG_WARN, FI_LOG_CQ));
  EXPECT_TRUE(fi_log_enabled(&g_test_prov, FI_LOG_WARN, FI_LOG_MR));
}

TEST_F(LogTest, LineFormatIsLibfabrics) {
  Configure(nullptr, nullptr, nullptr);
  testing::internal::CaptureStderr();
  fi_log(&g_test_prov, FI_LOG_WARN, FI_LOG_CQ, "poll", 42, "lost %d\n", 7);
  const std::string line = testing::internal::GetCapturedStderr();
  const std::string pid = std::to_string(getpid());
  ASSERT_EQ(line.rfind("libfabric:" + pid + ":", 0), 0u) << line;
  EXPECT_NE(line.find("::bypass:cq:poll():42<warn> lost 7\n"), std::string::npos) << line;
}

TEST_F(LogTest, SparseLoggingIsRateLimited) {
  setenv("FI_LOG_INTERVAL", "3600000", 1);  // an hour: the second call is always inside it
  Configure(nullptr, nullptr, nullptr);
  uint64_t showtime = 0;
  EXPECT_TRUE(fi_log_ready(&g_test_prov, FI_LOG_WARN, FI_LOG_CORE, &showtime));
  EXPECT_FALSE(fi_log_ready(&g_test_prov, FI_LOG_WARN, FI_LOG_CORE, &showtime));
  EXPECT_FALSE(fi_log_ready(&g_test_prov, FI_LOG_INFO, FI_LOG_CORE, &showtime));
  setenv("FI_LOG_INTERVAL", "0", 1);
  Configure(nullptr, nullptr, nullptr);
  showtime = 0;
  EXPECT_TRUE(fi_log_ready(&g_test_prov, FI_LOG_WARN, FI_LOG_CORE, &showtime));
  EXPECT_TRUE(fi_log_ready(&g_test_prov, FI_LOG_WARN, FI_LOG_CORE, &showtime));
}

std::vector<std::string>* g_imported_lines = nullptr;

TEST_F(LogTest, ImportedLoggerTakesOver) {
  static fi_ops_log ops;
  ops.size = sizeof(ops);
  ops.enabled = [](const fi_provider*, fi_log_level level, fi_log_subsys, uint64_t) -> int {
    return level == FI_LOG_DEBUG;
  };
  ops.ready = [](const fi_provider*, fi_log_level, fi_log_subsys, uint64_t, uint64_t*) -> int {
    return 1;
  };
  ops.log = [](const fi_provider* prov, fi_log_level, fi_log_subsys, const char* func, int,
               const char* msg) {
    g_imported_lines->push_back(std::string(prov->name) + " " + func + " " + msg);
  };
  fid_logging logging{};
  logging.ops = &ops;
  std::vector<std::string> lines;
  g_imported_lines = &lines;
  ASSERT_EQ(fi_import_log(FI_VERSION(1, 17), 0, &logging), 0);
  EXPECT_TRUE(fi_log_enabled(&g_test_prov, FI_LOG_DEBUG, FI_LOG_CORE));
  EXPECT_FALSE(fi_log_enabled(&g_test_prov, FI_LOG_WARN, FI_LOG_CORE));
  fi_log(&g_test_prov, FI_LOG_DEBUG, FI_LOG_CORE, "fn", 1, "x=%d", 3);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "bypass fn x=3");
  fid* other = nullptr;
  EXPECT_EQ(fi_open(FI_VERSION(1, 17), "mr_cache", nullptr, 0, 0, &other, nullptr), -FI_ENOSYS);
  EXPECT_EQ(fi_open(FI_VERSION(1, 17), nullptr, nullptr, 0, 0, &other, nullptr), -FI_EINVAL);
  // A logger without its functions is refused.
  fi_ops_log empty{};
  empty.size = sizeof(empty);
  fid_logging bad{};
  bad.ops = &empty;
  EXPECT_EQ(fi_import_log(FI_VERSION(1, 17), 0, &bad), -FI_EINVAL);
  g_imported_lines = nullptr;
}

}  // namespace
