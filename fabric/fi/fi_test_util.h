// Test helpers for the fi_* facade, over the public libfabric API only: two
// loopback domains on one in-process segment (FI_BYPASS_DEVICES set before
// anything reads it), and a connected pair of RDM endpoints on them.
#ifndef BYPASS_FABRIC_FI_FI_TEST_UTIL_H_
#define BYPASS_FABRIC_FI_FI_TEST_UTIL_H_

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <stdlib.h>

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace bypass::fi::testing {

inline constexpr char kDevA[] = "loopback:fitest,ip=10.77.1.1";
inline constexpr char kDevB[] = "loopback:fitest,ip=10.77.1.2";

// Set before main, so the first fi_getinfo reads it.
inline const bool kEnvironment = [] {
  setenv("FI_BYPASS_DEVICES", (std::string(kDevA) + ";" + kDevB).c_str(), 1);
  return true;
}();

// Hints for an RDM endpoint; the caller adds to them.
inline fi_info* RdmHints(uint64_t caps = FI_MSG | FI_TAGGED) {
  fi_info* h = fi_allocinfo();
  h->ep_attr->type = FI_EP_RDM;
  h->caps = caps;
  h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED;
  return h;
}

// The entry of `list` whose domain is `dev`, or null.
inline fi_info* ForDomain(fi_info* list, const char* dev) {
  for (fi_info* i = list; i != nullptr; i = i->next) {
    if (i->domain_attr->name != nullptr && std::strcmp(i->domain_attr->name, dev) == 0) return i;
  }
  return nullptr;
}

// One side: fabric, domain, AV, CQs and an enabled endpoint.
// fi_getname of an endpoint (or anything with a name).
inline std::vector<char> NameOf(fid_t f) {
  std::vector<char> name(64);
  size_t len = name.size();
  EXPECT_EQ(fi_getname(f, name.data(), &len), 0);
  name.resize(len);
  return name;
}

struct Node {
  fi_info* info = nullptr;  // owned (a copy)
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_cq* txcq = nullptr;
  fid_cq* rxcq = nullptr;
  fid_ep* ep = nullptr;
  fid_eq* eq = nullptr;   // opened and bound when want_eq is set before Open
  bool want_eq = false;
  fi_addr_t peer = FI_ADDR_NOTAVAIL;

  void Open(const fi_info* entry, fi_cq_format format, uint64_t tx_bind_flags = 0) {
    info = fi_dupinfo(entry);
    ASSERT_NE(info, nullptr);
    ASSERT_EQ(fi_fabric(info->fabric_attr, &fabric, nullptr), 0);
    ASSERT_EQ(fi_domain(fabric, info, &domain, nullptr), 0);
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    ASSERT_EQ(fi_av_open(domain, &av_attr, &av, nullptr), 0);
    fi_cq_attr cq_attr{};
    cq_attr.format = format;
    ASSERT_EQ(fi_cq_open(domain, &cq_attr, &txcq, nullptr), 0);
    ASSERT_EQ(fi_cq_open(domain, &cq_attr, &rxcq, nullptr), 0);
    ASSERT_EQ(fi_endpoint(domain, info, &ep, nullptr), 0);
    ASSERT_EQ(fi_ep_bind(ep, &av->fid, 0), 0);
    ASSERT_EQ(fi_ep_bind(ep, &txcq->fid, FI_TRANSMIT | tx_bind_flags), 0);
    ASSERT_EQ(fi_ep_bind(ep, &rxcq->fid, FI_RECV), 0);
    if (want_eq) {
      fi_eq_attr eq_attr{};
      ASSERT_EQ(fi_eq_open(fabric, &eq_attr, &eq, nullptr), 0);
      ASSERT_EQ(fi_ep_bind(ep, &eq->fid, 0), 0);
    }
    ASSERT_EQ(fi_enable(ep), 0);
  }

  std::vector<char> Name() const { return NameOf(&ep->fid); }

  void Close() {
    if (ep != nullptr) {
      EXPECT_EQ(fi_close(&ep->fid), 0);
    }
    if (txcq != nullptr) {
      EXPECT_EQ(fi_close(&txcq->fid), 0);
    }
    if (rxcq != nullptr) {
      EXPECT_EQ(fi_close(&rxcq->fid), 0);
    }
    if (eq != nullptr) {
      EXPECT_EQ(fi_close(&eq->fid), 0);
    }
    if (av != nullptr) {
      EXPECT_EQ(fi_close(&av->fid), 0);
    }
    if (domain != nullptr) {
      EXPECT_EQ(fi_close(&domain->fid), 0);
    }
    if (fabric != nullptr) {
      EXPECT_EQ(fi_close(&fabric->fid), 0);
    }
    fi_freeinfo(info);
    *this = Node();
  }
};

// Two connected endpoints, a on domain A and b on domain B.
struct Pair {
  Node a, b;

  void Open(fi_info* hints, fi_cq_format format = FI_CQ_FORMAT_TAGGED, uint64_t tx_bind = 0,
            uint32_t version = FI_VERSION(1, 17)) {
    fi_info* list = nullptr;
    ASSERT_EQ(fi_getinfo(version, nullptr, nullptr, 0, hints, &list), 0);
    fi_info* ia = ForDomain(list, kDevA);
    fi_info* ib = ForDomain(list, kDevB);
    ASSERT_NE(ia, nullptr) << "no fi_info for " << kDevA;
    ASSERT_NE(ib, nullptr) << "no fi_info for " << kDevB;
    a.Open(ia, format, tx_bind);
    b.Open(ib, format, tx_bind);
    fi_freeinfo(list);
    std::vector<char> na = a.Name(), nb = b.Name();
    ASSERT_EQ(fi_av_insert(a.av, nb.data(), 1, &a.peer, 0, nullptr), 1);
    ASSERT_EQ(fi_av_insert(b.av, na.data(), 1, &b.peer, 0, nullptr), 1);
  }

  // One progress pass of both endpoints (a read of nothing).
  void Pump() {
    fi_cq_read(a.txcq, nullptr, 0);
    fi_cq_read(b.txcq, nullptr, 0);
  }

  // The next completion of cq (format TAGGED or wider), progressing both
  // sides; false on an error completion or when none comes in many passes.
  bool Wait(fid_cq* cq, fi_cq_tagged_entry* e, fi_addr_t* src = nullptr) {
    for (int i = 0; i < 2'000'000; ++i) {
      const ssize_t n = src != nullptr ? fi_cq_readfrom(cq, e, 1, src) : fi_cq_read(cq, e, 1);
      if (n == 1) return true;
      if (n != -FI_EAGAIN) return false;
      Pump();
    }
    return false;
  }

  // Progresses both sides until cq has an error, which it returns.
  bool WaitError(fid_cq* cq, fi_cq_err_entry* err) {
    for (int i = 0; i < 2'000'000; ++i) {
      fi_cq_tagged_entry e;
      const ssize_t n = fi_cq_read(cq, &e, 1);
      if (n == -FI_EAVAIL) return fi_cq_readerr(cq, err, 0) == 1;
      if (n != -FI_EAGAIN) return false;
      Pump();
    }
    return false;
  }

  void Close() {
    a.Close();
    b.Close();
  }
};

}  // namespace bypass::fi::testing

#endif  // BYPASS_FABRIC_FI_FI_TEST_UTIL_H_
