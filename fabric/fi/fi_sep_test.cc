// Scalable endpoints (fi_endpoint(3) "SCALABLE ENDPOINTS", fabric/fi/sep.h)
// and several domains on one device (fabric/fi/lane.h), over the public
// libfabric API (and the provider's objects behind the handles, to check
// which lock each context takes): a thread per context, each sending a fixed count of
// messages to the peer's receive context of the same index (fi_rx_addr), on
// the default domain (a device instance per context) and on loopback ports
// with several steered queues; named receive contexts; closing order; two
// domains of one process on one device.
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <stdlib.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fabric/fi/domain.h"
#include "fabric/fi/ep.h"
#include "gtest/gtest.h"

namespace {

constexpr char kDefault[] = "shm:+udp:";
// Two ports of one in-process segment, three queues each that steer: the
// domain takes queue 0, contexts 1 and 2.
constexpr char kSteerA[] = "loopback:sepq,queues=3,ip=10.77.9.1";
constexpr char kSteerB[] = "loopback:sepq,queues=3,ip=10.77.9.2";
// One queue: domains share it, contexts are demultiplexed in software.
constexpr char kOneQueue[] = "loopback:sep1,ip=10.77.10.1";
constexpr char kOneQueuePeer[] = "loopback:sep1,ip=10.77.10.2";

const bool kEnvironment = [] {
  setenv("FI_BYPASS_DEVICES",
         (std::string(kDefault) + ";" + kSteerA + ";" + kSteerB + ";" + kOneQueue + ";" +
          kOneQueuePeer)
             .c_str(),
         1);
  return true;
}();

constexpr int kRxBits = 2;

// The lock a call on a context (or on the domain) takes (fabric/fi/lane.h):
// what the test checks to say the contexts progress independently.
const bypass::fi::DomainLock* LockOf(const bypass::fi::DomainLock* l) {
  return l->shared != nullptr ? l->shared : l;
}
const bypass::fi::DomainLock* LockOf(fid_ep* context) {
  return LockOf(bypass::fi::AsEp(context)->base->lock);
}
const bypass::fi::DomainLock* LockOf(fid_domain* domain) {
  return LockOf(&bypass::fi::AsDomain(domain)->lock);
}

fi_info* Hints(size_t contexts, fi_threading threading = FI_THREAD_SAFE) {
  fi_info* h = fi_allocinfo();
  h->ep_attr->type = FI_EP_RDM;
  h->caps = FI_MSG | FI_TAGGED | FI_NAMED_RX_CTX;
  h->ep_attr->tx_ctx_cnt = contexts;
  h->ep_attr->rx_ctx_cnt = contexts;
  h->domain_attr->threading = threading;
  h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED;
  return h;
}

// The fi_info of domain `dev`, owned by the caller.
fi_info* InfoFor(const char* dev, size_t contexts, fi_threading threading = FI_THREAD_SAFE) {
  fi_info* hints = Hints(contexts, threading);
  fi_info* list = nullptr;
  const int ret = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list);
  fi_freeinfo(hints);
  EXPECT_EQ(ret, 0) << fi_strerror(-ret);
  fi_info* found = nullptr;
  for (fi_info* i = list; i != nullptr && found == nullptr; i = i->next) {
    if (std::strcmp(i->domain_attr->name, dev) == 0) found = fi_dupinfo(i);
  }
  fi_freeinfo(list);
  EXPECT_NE(found, nullptr) << "no fi_info for " << dev;
  return found;
}

// A domain and an AV with receive context bits.
struct Domain {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;

  void Open(const char* dev, size_t contexts, fi_threading threading = FI_THREAD_SAFE) {
    info = InfoFor(dev, contexts, threading);
    ASSERT_NE(info, nullptr);
    ASSERT_EQ(fi_fabric(info->fabric_attr, &fabric, nullptr), 0);
    ASSERT_EQ(fi_domain(fabric, info, &domain, nullptr), 0);
    fi_av_attr attr{};
    attr.type = FI_AV_TABLE;
    attr.rx_ctx_bits = kRxBits;
    ASSERT_EQ(fi_av_open(domain, &attr, &av, nullptr), 0);
  }
  void Close() {
    EXPECT_EQ(fi_close(&av->fid), 0);
    EXPECT_EQ(fi_close(&domain->fid), 0);
    EXPECT_EQ(fi_close(&fabric->fid), 0);
    fi_freeinfo(info);
  }
};

// A scalable endpoint with k transmit and k receive contexts, each with
// its own CQ, all enabled.
struct Scalable {
  fid_ep* sep = nullptr;
  std::vector<fid_ep*> tx, rx;
  std::vector<fid_cq*> txcq, rxcq;

  void Open(Domain& d, size_t k) {
    Create(d);
    OpenContexts(d, k);
  }
  // The scalable endpoint and its AV, no context yet.
  void Create(Domain& d) {
    ASSERT_EQ(fi_scalable_ep(d.domain, d.info, &sep, nullptr), 0);
    ASSERT_EQ(fi_scalable_ep_bind(sep, &d.av->fid, 0), 0);
  }
  void OpenContexts(Domain& d, size_t k) {
    tx.resize(k);
    rx.resize(k);
    txcq.resize(k);
    rxcq.resize(k);
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    cq_attr.wait_obj = FI_WAIT_UNSPEC;  // BlockingReadsOnContexts sleeps in fi_cq_sread
    for (size_t i = 0; i < k; ++i) {
      ASSERT_EQ(fi_tx_context(sep, static_cast<int>(i), nullptr, &tx[i], nullptr), 0);
      ASSERT_EQ(fi_rx_context(sep, static_cast<int>(i), nullptr, &rx[i], nullptr), 0);
      ASSERT_EQ(fi_cq_open(d.domain, &cq_attr, &txcq[i], nullptr), 0);
      ASSERT_EQ(fi_cq_open(d.domain, &cq_attr, &rxcq[i], nullptr), 0);
      ASSERT_EQ(fi_ep_bind(tx[i], &txcq[i]->fid, FI_TRANSMIT), 0);
      ASSERT_EQ(fi_ep_bind(rx[i], &rxcq[i]->fid, FI_RECV), 0);
      ASSERT_EQ(fi_enable(tx[i]), 0);
      ASSERT_EQ(fi_enable(rx[i]), 0);
    }
    ASSERT_EQ(fi_enable(sep), 0);
  }
  std::vector<char> Name() const {
    std::vector<char> name(64);
    size_t len = name.size();
    EXPECT_EQ(fi_getname(&sep->fid, name.data(), &len), 0);
    name.resize(len);
    return name;
  }
  void Close() {
    for (size_t i = 0; i < tx.size(); ++i) {
      EXPECT_EQ(fi_close(&tx[i]->fid), 0);
      EXPECT_EQ(fi_close(&rx[i]->fid), 0);
      EXPECT_EQ(fi_close(&txcq[i]->fid), 0);
      EXPECT_EQ(fi_close(&rxcq[i]->fid), 0);
    }
    EXPECT_EQ(fi_close(&sep->fid), 0);
  }
};

struct Payload {
  uint32_t context;
  uint32_t seq;
};

// Context i of `from` sends `count` messages to receive context i of `to`
// (fi_rx_addr(to_addr, i)), in one thread that progresses both sides'
// context i only. Returns the messages received in order on context i.
int RunContext(Scalable& from, Scalable& to, fi_addr_t to_addr, size_t i, int count) {
  constexpr int kWindow = 32;
  Payload rx_buf[kWindow];
  Payload tx_buf[kWindow];  // a send's buffer stays untouched until it completes
  int posted = 0, received = 0, sent = 0, sent_done = 0, in_order = 0, spins = 0;
  const fi_addr_t dest = fi_rx_addr(to_addr, static_cast<int>(i), kRxBits);
  while (received < count || sent_done < count) {
    if (++spins > 50'000'000) break;  // a hang fails the counts below, not a timer
    while (posted < count && posted - received < kWindow) {
      Payload* b = &rx_buf[posted % kWindow];
      if (fi_recv(to.rx[i], b, sizeof(*b), nullptr, FI_ADDR_UNSPEC, b) != 0) break;
      ++posted;
    }
    if (sent < count && sent - sent_done < kWindow) {
      Payload* p = &tx_buf[sent % kWindow];  // free: its send (sent - kWindow) completed
      *p = Payload{static_cast<uint32_t>(i), static_cast<uint32_t>(sent)};
      if (fi_send(from.tx[i], p, sizeof(*p), nullptr, dest, nullptr) == 0) ++sent;
    }
    fi_cq_tagged_entry e[16];
    ssize_t n = fi_cq_read(from.txcq[i], e, 16);
    if (n > 0) sent_done += static_cast<int>(n);
    n = fi_cq_read(to.rxcq[i], e, 16);
    for (ssize_t j = 0; j < n; ++j) {
      const auto* p = static_cast<const Payload*>(e[j].op_context);
      if (p->context == i && p->seq == static_cast<uint32_t>(received)) ++in_order;
      ++received;
    }
  }
  EXPECT_EQ(sent_done, count) << "context " << i;
  return in_order;
}

// own_queues: each context has a queue and a lock of its own, none the
// domain's; otherwise every context takes the domain's.
void TwoThreads(const char* dev_a, const char* dev_b, bool own_queues) {
  constexpr size_t kContexts = 2;
  constexpr int kMessages = 2000;
  Domain da, db;
  da.Open(dev_a, kContexts);
  if (dev_b != dev_a) db.Open(dev_b, kContexts);
  Domain& b_dom = dev_b != dev_a ? db : da;
  Scalable a, b;
  a.Open(da, kContexts);
  b.Open(b_dom, kContexts);
  if (::testing::Test::HasFatalFailure()) return;
  for (Scalable* s : {&a, &b}) {
    fid_domain* domain = s == &a ? da.domain : b_dom.domain;
    for (size_t i = 0; i < kContexts; ++i) {
      EXPECT_EQ(LockOf(s->tx[i]), LockOf(s->rx[i])) << "context " << i << ": one engine endpoint";
      if (own_queues) {
        EXPECT_NE(LockOf(s->tx[i]), LockOf(domain)) << "context " << i;
        for (size_t j = 0; j < i; ++j) EXPECT_NE(LockOf(s->tx[i]), LockOf(s->tx[j]));
      } else {
        EXPECT_EQ(LockOf(s->tx[i]), LockOf(domain)) << "context " << i;
      }
    }
  }
  fi_addr_t b_addr = FI_ADDR_NOTAVAIL;
  std::vector<char> nb = b.Name();
  ASSERT_EQ(fi_av_insert(da.av, nb.data(), 1, &b_addr, 0, nullptr), 1);
  if (&b_dom != &da) {
    std::vector<char> na = a.Name();
    fi_addr_t a_addr;
    ASSERT_EQ(fi_av_insert(b_dom.av, na.data(), 1, &a_addr, 0, nullptr), 1);
  }
  int in_order[kContexts] = {};
  std::vector<std::thread> threads;
  for (size_t i = 0; i < kContexts; ++i) {
    threads.emplace_back([&, i] { in_order[i] = RunContext(a, b, b_addr, i, kMessages); });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < kContexts; ++i) EXPECT_EQ(in_order[i], kMessages) << "context " << i;
  a.Close();
  b.Close();
  if (&b_dom != &da) db.Close();
  da.Close();
}

TEST(ScalableEndpoint, TwoThreadsOnTheDefaultDomain) { TwoThreads(kDefault, kDefault, true); }

// Open MPI's thread grouping (mtl_ofi_thread_grouping with more
// communicators than mtl_ofi_num_ctxts) gives two threads one context:
// under FI_THREAD_SAFE both send (fi_tinject and fi_tsend), post tagged
// receives and read the context's CQs at once, each completion going to
// whichever thread reads it. Every message must arrive, once, intact.
struct SharedContextThread {
  std::atomic<int> received{0}, sent_done{0}, bad{0};
};

void RunSharedContext(Scalable& from, Scalable& to, fi_addr_t dest, uint64_t tag, int count,
                      SharedContextThread* mine) {
  constexpr int kWindow = 16;
  struct Slot {
    fi_context2 ctx;  // first: a completion's op_context names the slot
    SharedContextThread* owner;
    Payload p;
  };
  std::vector<Slot> rx(kWindow), tx(kWindow);
  int posted = 0, sent = 0, spins = 0;
  auto drain = [&](fid_cq* cq, bool is_rx) {
    fi_cq_tagged_entry e[8];
    const ssize_t n = fi_cq_read(cq, e, 8);
    for (ssize_t j = 0; j < n; ++j) {
      if (e[j].op_context == nullptr) continue;  // an inject's (none expected)
      Slot* slot = static_cast<Slot*>(e[j].op_context);
      if (is_rx) {
        const uint64_t t = e[j].tag;
        if (slot->p.context != t) slot->owner->bad++;
        slot->owner->received++;
      } else {
        slot->owner->sent_done++;
      }
    }
  };
  while (mine->received < count || mine->sent_done < count) {
    if (++spins > 50'000'000) break;  // a hang fails the counts below, not a timer
    while (posted < count && posted - mine->received < kWindow) {
      Slot* b = &rx[posted % kWindow];
      b->owner = mine;
      if (fi_trecv(to.rx[0], &b->p, sizeof(b->p), nullptr, FI_ADDR_UNSPEC, tag, 0, &b->ctx) != 0) {
        break;
      }
      ++posted;
    }
    if (sent < count && sent - mine->sent_done < kWindow) {
      Slot* b = &tx[sent % kWindow];
      b->owner = mine;
      b->p = Payload{static_cast<uint32_t>(tag), static_cast<uint32_t>(sent)};
      // Every other message as an inject, as the MTL sends small messages;
      // an inject has no completion, so count it done at once.
      if (sent % 2 == 0) {
        if (fi_tinject(from.tx[0], &b->p, sizeof(b->p), dest, tag) == 0) {
          ++sent;
          mine->sent_done++;
        }
      } else if (fi_tsend(from.tx[0], &b->p, sizeof(b->p), nullptr, dest, tag, &b->ctx) == 0) {
        ++sent;
      }
    }
    drain(from.txcq[0], false);
    drain(to.rxcq[0], true);
  }
}

TEST(ScalableEndpoint, TwoThreadsShareOneContext) {
  constexpr int kMessages = 3000;
  Domain da;
  da.Open(kDefault, 1);
  Scalable a, b;
  a.Open(da, 1);
  b.Open(da, 1);
  if (::testing::Test::HasFatalFailure()) return;
  fi_addr_t b_addr = FI_ADDR_NOTAVAIL;
  std::vector<char> nb = b.Name();
  ASSERT_EQ(fi_av_insert(da.av, nb.data(), 1, &b_addr, 0, nullptr), 1);
  const fi_addr_t dest = fi_rx_addr(b_addr, 0, kRxBits);
  SharedContextThread t[2];
  std::vector<std::thread> threads;
  for (uint64_t i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] { RunSharedContext(a, b, dest, i, kMessages, &t[i]); });
  }
  for (std::thread& th : threads) th.join();
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(t[i].received.load(), kMessages) << "thread " << i;
    EXPECT_EQ(t[i].sent_done.load(), kMessages) << "thread " << i;
    EXPECT_EQ(t[i].bad.load(), 0) << "thread " << i;
  }
  a.Close();
  b.Close();
  da.Close();
}

// Open MPI (mtl_ofi_enable_sep) publishes the scalable endpoint's name
// before it enables the contexts: the name must be of ports that are the
// endpoint's. Two fabrics on the default device know nothing of each
// other's ports, as two processes: the second's run must move, and its
// name say so, both after fi_enable(sep) and from fi_getname alone. Then a
// message to a named receive context, and an inject to one (its
// per-address state is kept by AV entry, not by an fi_addr with context
// bits), arrive where they were sent.
TEST(ScalableEndpoint, NamedBeforeItsContextsAreEnabled) {
  constexpr size_t kContexts = 2;
  Domain da, db;
  da.Open(kDefault, kContexts);
  db.Open(kDefault, kContexts);
  Scalable a, b;
  a.Create(da);
  b.Create(db);
  if (::testing::Test::HasFatalFailure()) return;
  ASSERT_EQ(fi_enable(a.sep), 0);
  const std::vector<char> na = a.Name();
  const std::vector<char> nb = b.Name();  // not enabled: named all the same
  EXPECT_NE(na, nb) << "two scalable endpoints named with one run of ports";
  a.OpenContexts(da, kContexts);
  b.OpenContexts(db, kContexts);
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_EQ(a.Name(), na);
  EXPECT_EQ(b.Name(), nb);
  fi_addr_t a_addr, b_addr;
  ASSERT_EQ(fi_av_insert(da.av, nb.data(), 1, &b_addr, 0, nullptr), 1);
  ASSERT_EQ(fi_av_insert(db.av, na.data(), 1, &a_addr, 0, nullptr), 1);
  EXPECT_EQ(RunContext(a, b, b_addr, 1, 100), 100);
  uint32_t got = 0, value = 42;
  ASSERT_EQ(fi_recv(b.rx[1], &got, sizeof(got), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  ASSERT_EQ(fi_inject(a.tx[1], &value, sizeof(value), fi_rx_addr(b_addr, 1, kRxBits)), 0);
  fi_cq_tagged_entry e;
  ssize_t n = 0;
  for (int spins = 0; n != 1 && spins < 50'000'000; ++spins) {
    fi_cq_read(a.txcq[1], &e, 1);  // progresses the sender
    n = fi_cq_read(b.rxcq[1], &e, 1);
  }
  EXPECT_EQ(n, 1);
  EXPECT_EQ(got, 42u);
  a.Close();
  b.Close();
  db.Close();
  da.Close();
}

TEST(ScalableEndpoint, TwoThreadsOnSteeredQueues) { TwoThreads(kSteerA, kSteerB, true); }

TEST(ScalableEndpoint, TwoThreadsDemultiplexedInSoftware) {
  TwoThreads(kOneQueue, kOneQueuePeer, false);
}

TEST(ScalableEndpoint, InfoSaysWhichQueuesAreIndependent) {
  fi_info* def = InfoFor(kDefault, 4);
  fi_info* steer = InfoFor(kSteerA, 2);
  fi_info* one = InfoFor(kOneQueue, 2);
  ASSERT_NE(def, nullptr);
  ASSERT_NE(steer, nullptr);
  ASSERT_NE(one, nullptr);
  EXPECT_GE(def->domain_attr->max_ep_tx_ctx, 4u);
  EXPECT_GE(def->domain_attr->max_ep_rx_ctx, 4u);
  EXPECT_EQ(def->ep_attr->tx_ctx_cnt, 4u);
  EXPECT_NE(def->caps & FI_NAMED_RX_CTX, 0u);
  EXPECT_GE(def->domain_attr->tx_ctx_cnt, 4u);  // an instance per context
  EXPECT_EQ(steer->domain_attr->rx_ctx_cnt, 3u);  // its steered queues
  EXPECT_EQ(one->domain_attr->rx_ctx_cnt, 1u);    // software demultiplexing
  fi_freeinfo(def);
  fi_freeinfo(steer);
  fi_freeinfo(one);
}

// A thread blocked in fi_cq_sread on a context's CQ is served by the
// domain's progress thread, which then progresses every context of the
// domain under that context's own lock (under FI_THREAD_DOMAIN the contexts'
// locks start untaken and are switched on for it). TSan sees a race here if
// the progress thread touched a context without its lock while the
// application reads that context's CQ.
TEST(ScalableEndpoint, BlockingReadsOnContexts) {
  constexpr size_t kContexts = 2;
  constexpr int kMessages = 200;
  Domain da, db;
  da.Open(kDefault, kContexts);
  db.Open(kDefault, kContexts, FI_THREAD_DOMAIN);
  Scalable a, b;
  a.Open(da, kContexts);
  b.Open(db, kContexts);
  if (::testing::Test::HasFatalFailure()) return;
  for (size_t i = 0; i < kContexts; ++i) EXPECT_FALSE(LockOf(b.rx[i])->thread_safe);
  std::vector<char> nb = b.Name();
  fi_addr_t b_addr = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(fi_av_insert(da.av, nb.data(), 1, &b_addr, 0, nullptr), 1);
  std::vector<Payload> rx_buf(kContexts * kMessages);
  for (size_t i = 0; i < kContexts; ++i) {
    for (int m = 0; m < kMessages; ++m) {
      Payload* buf = &rx_buf[i * kMessages + m];
      ASSERT_EQ(fi_recv(b.rx[i], buf, sizeof(*buf), nullptr, FI_ADDR_UNSPEC, buf), 0);
    }
  }
  // The sender progresses only its own side: b's ACKs come from b's
  // progress thread while the main thread sleeps in fi_cq_sread.
  int sent_done = 0;
  std::thread sender([&] {
    std::vector<Payload> tx_buf(kContexts * kMessages);
    for (int m = 0; m < kMessages; ++m) {
      for (size_t i = 0; i < kContexts; ++i) {
        Payload* p = &tx_buf[i * kMessages + m];
        *p = Payload{static_cast<uint32_t>(i), static_cast<uint32_t>(m)};
        const fi_addr_t dest = fi_rx_addr(b_addr, static_cast<int>(i), kRxBits);
        ssize_t ret;
        while ((ret = fi_send(a.tx[i], p, sizeof(*p), nullptr, dest, nullptr)) == -FI_EAGAIN) {
          fi_cq_tagged_entry e[16];
          for (size_t j = 0; j < kContexts; ++j) {
            const ssize_t n = fi_cq_read(a.txcq[j], e, 16);
            if (n > 0) sent_done += static_cast<int>(n);
          }
        }
        ASSERT_EQ(ret, 0);
      }
    }
    for (int spins = 0; sent_done < static_cast<int>(kContexts) * kMessages && spins < 50'000'000;
         ++spins) {
      fi_cq_tagged_entry e[16];
      for (size_t j = 0; j < kContexts; ++j) {
        const ssize_t n = fi_cq_read(a.txcq[j], e, 16);
        if (n > 0) sent_done += static_cast<int>(n);
      }
    }
  });
  for (size_t i = kContexts; i-- > 0;) {  // the last context first: the others wait meanwhile
    int received = 0, in_order = 0;
    while (received < kMessages) {
      fi_cq_tagged_entry e[16];
      const ssize_t n = fi_cq_sread(b.rxcq[i], e, 16, nullptr, 10'000);
      ASSERT_GT(n, 0) << "context " << i << " after " << received << ": " << fi_strerror(-n);
      for (ssize_t j = 0; j < n; ++j) {
        const auto* p = static_cast<const Payload*>(e[j].op_context);
        if (p->context == i && p->seq == static_cast<uint32_t>(received)) ++in_order;
        ++received;
      }
    }
    EXPECT_EQ(in_order, kMessages) << "context " << i;
    EXPECT_TRUE(LockOf(b.rx[i])->thread_safe) << "context " << i;
  }
  sender.join();
  EXPECT_EQ(sent_done, static_cast<int>(kContexts) * kMessages);
  a.Close();
  b.Close();
  db.Close();
  da.Close();
}

// A named AV refreshes every endpoint on it from any caller's call: it
// cannot serve contexts that each run under their own lock.
TEST(ScalableEndpoint, NamedAvRefused) {
  Domain d;
  d.Open(kDefault, 2);
  fid_ep* sep = nullptr;
  ASSERT_EQ(fi_scalable_ep(d.domain, d.info, &sep, nullptr), 0);
  fi_av_attr attr{};
  attr.type = FI_AV_TABLE;
  attr.name = "bypass-sep-test-named-av";
  fid_av* named = nullptr;
  ASSERT_EQ(fi_av_open(d.domain, &attr, &named, nullptr), 0);
  EXPECT_EQ(fi_scalable_ep_bind(sep, &named->fid, 0), -FI_EOPNOTSUPP);
  EXPECT_EQ(fi_close(&named->fid), 0);
  EXPECT_EQ(fi_close(&sep->fid), 0);
  d.Close();
}

// Reads one completion of cq with its source, progressing `also` (whose
// completions it drops); 1, or fi_cq_readfrom's answer when none came.
ssize_t ReadOne(fid_cq* cq, fid_cq* also, fi_cq_tagged_entry* e, fi_addr_t* src) {
  ssize_t n = 0;
  for (int i = 0; i < 1'000'000 && n != 1; ++i) {
    fi_cq_tagged_entry dropped;
    fi_cq_read(also, &dropped, 1);
    n = fi_cq_readfrom(cq, e, 1, src);
  }
  return n;
}

// A plain endpoint names receive context 1 of a scalable endpoint with
// fi_rx_addr; context 0 gets nothing, and the source of the messages on
// context 1 is the sender's fi_addr.
TEST(ScalableEndpoint, NamedReceiveContext) {
  Domain d;
  d.Open(kSteerA, 2);
  Scalable s;
  s.Open(d, 2);
  fid_ep* ep = nullptr;
  fid_cq* cq = nullptr;
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_TAGGED;
  fi_info* plain = fi_dupinfo(d.info);
  plain->ep_attr->tx_ctx_cnt = 1;
  plain->ep_attr->rx_ctx_cnt = 1;
  ASSERT_EQ(fi_cq_open(d.domain, &cq_attr, &cq, nullptr), 0);
  ASSERT_EQ(fi_endpoint(d.domain, plain, &ep, nullptr), 0);
  ASSERT_EQ(fi_ep_bind(ep, &d.av->fid, 0), 0);
  ASSERT_EQ(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
  ASSERT_EQ(fi_enable(ep), 0);
  std::vector<char> sep_name = s.Name();
  std::vector<char> ep_name(64);
  size_t len = ep_name.size();
  ASSERT_EQ(fi_getname(&ep->fid, ep_name.data(), &len), 0);
  fi_addr_t sep_addr, ep_addr;
  ASSERT_EQ(fi_av_insert(d.av, sep_name.data(), 1, &sep_addr, 0, nullptr), 1);
  ASSERT_EQ(fi_av_insert(d.av, ep_name.data(), 1, &ep_addr, 0, nullptr), 1);

  char got[2][8] = {};
  ASSERT_EQ(fi_recv(s.rx[0], got[0], 8, nullptr, FI_ADDR_UNSPEC, got[0]), 0);
  ASSERT_EQ(fi_recv(s.rx[1], got[1], 8, nullptr, FI_ADDR_UNSPEC, got[1]), 0);
  char msg[8] = "ctx one";
  ASSERT_EQ(fi_send(ep, msg, sizeof(msg), nullptr, fi_rx_addr(sep_addr, 1, kRxBits), nullptr), 0);
  fi_cq_tagged_entry e;
  fi_addr_t src = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(ReadOne(s.rxcq[1], cq, &e, &src), 1);
  EXPECT_EQ(e.op_context, got[1]);
  EXPECT_STREQ(got[1], "ctx one");
  EXPECT_EQ(src, ep_addr);
  EXPECT_EQ(fi_cq_read(s.rxcq[0], &e, 1), -FI_EAGAIN);  // context 0 received nothing
  // Transmit context 1 to receive context 0 of the same scalable endpoint:
  // the source is context 1's address, fi_rx_addr(sep_addr, 1).
  char from1[8] = "from 1";
  ASSERT_EQ(fi_send(s.tx[1], from1, sizeof(from1), nullptr, sep_addr, nullptr), 0);
  ASSERT_EQ(ReadOne(s.rxcq[0], s.txcq[1], &e, &src), 1);
  EXPECT_EQ(e.op_context, got[0]);
  EXPECT_STREQ(got[0], "from 1");
  EXPECT_EQ(src, fi_rx_addr(sep_addr, 1, kRxBits));
  // Context 0 is the scalable endpoint's own address (fi_rx_addr(a, 0) == a).
  ASSERT_EQ(fi_recv(s.rx[0], got[0], 8, nullptr, FI_ADDR_UNSPEC, got[0]), 0);
  ASSERT_EQ(fi_send(ep, msg, sizeof(msg), nullptr, sep_addr, nullptr), 0);
  ASSERT_EQ(ReadOne(s.rxcq[0], cq, &e, &src), 1);
  EXPECT_EQ(e.op_context, got[0]);
  EXPECT_STREQ(got[0], "ctx one");
  EXPECT_EQ(src, ep_addr);
  EXPECT_EQ(fi_close(&ep->fid), 0);
  EXPECT_EQ(fi_close(&cq->fid), 0);
  fi_freeinfo(plain);
  s.Close();
  d.Close();
}

// Counters bound to a transmit context (FI_SEND) and to the receive
// context of the same index (FI_RECV) count its operations; reading them
// progresses the context.
TEST(ScalableEndpoint, CountersOnContexts) {
  Domain d;
  d.Open(kDefault, 1);
  fid_ep* sep = nullptr;
  ASSERT_EQ(fi_scalable_ep(d.domain, d.info, &sep, nullptr), 0);
  ASSERT_EQ(fi_scalable_ep_bind(sep, &d.av->fid, 0), 0);
  fid_ep *tx = nullptr, *rx = nullptr;
  fid_cntr *sent = nullptr, *received = nullptr;
  fi_cntr_attr cntr_attr{};
  cntr_attr.events = FI_CNTR_EVENTS_COMP;
  ASSERT_EQ(fi_cntr_open(d.domain, &cntr_attr, &sent, nullptr), 0);
  ASSERT_EQ(fi_cntr_open(d.domain, &cntr_attr, &received, nullptr), 0);
  ASSERT_EQ(fi_tx_context(sep, 0, nullptr, &tx, nullptr), 0);
  ASSERT_EQ(fi_rx_context(sep, 0, nullptr, &rx, nullptr), 0);
  ASSERT_EQ(fi_ep_bind(tx, &sent->fid, FI_SEND), 0);
  ASSERT_EQ(fi_ep_bind(rx, &received->fid, FI_RECV), 0);
  ASSERT_EQ(fi_enable(tx), 0);
  ASSERT_EQ(fi_enable(rx), 0);
  std::vector<char> name(64);
  size_t len = name.size();
  ASSERT_EQ(fi_getname(&sep->fid, name.data(), &len), 0);
  fi_addr_t self;
  ASSERT_EQ(fi_av_insert(d.av, name.data(), 1, &self, 0, nullptr), 1);
  char in[3][4], out[4] = "abc";
  for (auto& b : in) ASSERT_EQ(fi_recv(rx, b, sizeof(b), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(fi_send(tx, out, sizeof(out), nullptr, self, nullptr), 0);
  for (int i = 0; i < 1'000'000 && (fi_cntr_read(sent) < 3 || fi_cntr_read(received) < 3); ++i) {
  }
  EXPECT_EQ(fi_cntr_read(sent), 3u);
  EXPECT_EQ(fi_cntr_read(received), 3u);
  EXPECT_EQ(fi_close(&tx->fid), 0);
  EXPECT_EQ(fi_close(&rx->fid), 0);
  EXPECT_EQ(fi_close(&sent->fid), 0);
  EXPECT_EQ(fi_close(&received->fid), 0);
  EXPECT_EQ(fi_close(&sep->fid), 0);
  d.Close();
}

// fi_endpoint(3): a scalable endpoint with open contexts, and the CQs bound
// to open contexts, do not close (-FI_EBUSY); each closes after them.
TEST(ScalableEndpoint, ClosingOrder) {
  Domain d;
  d.Open(kSteerA, 2);
  Scalable s;
  s.Open(d, 2);
  EXPECT_EQ(fi_close(&s.sep->fid), -FI_EBUSY);
  EXPECT_EQ(fi_close(&s.txcq[0]->fid), -FI_EBUSY);
  EXPECT_EQ(fi_close(&d.av->fid), -FI_EBUSY);
  EXPECT_EQ(fi_close(&d.domain->fid), -FI_EBUSY);
  EXPECT_EQ(fi_close(&s.tx[0]->fid), 0);
  EXPECT_EQ(fi_close(&s.txcq[0]->fid), 0);  // its context is closed
  EXPECT_EQ(fi_close(&s.sep->fid), -FI_EBUSY);  // three contexts left
  EXPECT_EQ(fi_close(&s.rx[0]->fid), 0);
  EXPECT_EQ(fi_close(&s.rxcq[0]->fid), 0);
  for (size_t i = 1; i < 2; ++i) {
    EXPECT_EQ(fi_close(&s.tx[i]->fid), 0);
    EXPECT_EQ(fi_close(&s.rx[i]->fid), 0);
    EXPECT_EQ(fi_close(&s.txcq[i]->fid), 0);
    EXPECT_EQ(fi_close(&s.rxcq[i]->fid), 0);
  }
  EXPECT_EQ(fi_close(&s.sep->fid), 0);
  EXPECT_EQ(fi_close(&s.sep->fid), -FI_EBADF);  // a closed handle
  d.Close();
}

TEST(ScalableEndpoint, Errors) {
  Domain d;
  d.Open(kSteerA, 2);
  fid_ep* sep = nullptr;
  ASSERT_EQ(fi_scalable_ep(d.domain, d.info, &sep, nullptr), 0);
  fid_ep* ctx = nullptr;
  EXPECT_EQ(fi_tx_context(sep, 2, nullptr, &ctx, nullptr), -FI_EINVAL);  // tx_ctx_cnt 2
  EXPECT_EQ(fi_rx_context(sep, -1, nullptr, &ctx, nullptr), -FI_EINVAL);
  fid_cq* cq = nullptr;
  fid_cq* other = nullptr;
  fi_cq_attr cq_attr{};
  ASSERT_EQ(fi_cq_open(d.domain, &cq_attr, &cq, nullptr), 0);
  ASSERT_EQ(fi_cq_open(d.domain, &cq_attr, &other, nullptr), 0);
  EXPECT_EQ(fi_scalable_ep_bind(sep, &cq->fid, FI_TRANSMIT), -FI_EINVAL);  // AV only
  fid_ep* tx0 = nullptr;
  fid_ep* tx1 = nullptr;
  fi_tx_attr tx_attr{};
  ASSERT_EQ(fi_tx_context(sep, 0, &tx_attr, &tx0, nullptr), 0);
  EXPECT_EQ(tx_attr.size, d.info->tx_attr->size);  // the attributes it was given
  EXPECT_EQ(fi_tx_context(sep, 0, nullptr, &ctx, nullptr), -FI_EBUSY);  // open already
  ASSERT_EQ(fi_tx_context(sep, 1, nullptr, &tx1, nullptr), 0);
  EXPECT_EQ(fi_ep_bind(tx0, &d.av->fid, 0), -FI_EINVAL);       // the sep's AV
  EXPECT_EQ(fi_ep_bind(tx0, &cq->fid, FI_RECV), -FI_EINVAL);   // its side only
  EXPECT_EQ(fi_enable(tx0), -FI_ENOCQ);
  ASSERT_EQ(fi_ep_bind(tx0, &cq->fid, FI_TRANSMIT), 0);
  // Contexts 0 and 1 are on queues of their own (steered): one CQ cannot
  // serve both under one lock.
  EXPECT_EQ(fi_ep_bind(tx1, &cq->fid, FI_TRANSMIT), -FI_EINVAL);
  EXPECT_EQ(fi_enable(tx0), -FI_ENOAV);
  ASSERT_EQ(fi_scalable_ep_bind(sep, &d.av->fid, 0), 0);
  ASSERT_EQ(fi_enable(tx0), 0);
  char buf[8];
  EXPECT_EQ(fi_recv(tx0, buf, sizeof(buf), nullptr, FI_ADDR_UNSPEC, nullptr), -FI_EOPNOTSUPP);
  EXPECT_EQ(fi_send(sep, buf, sizeof(buf), nullptr, 0, nullptr), -FI_EINVAL);  // not an endpoint
  EXPECT_EQ(fi_send(tx1, buf, sizeof(buf), nullptr, 0, nullptr), -FI_EOPBADSTATE);
  EXPECT_EQ(fi_close(&tx0->fid), 0);
  EXPECT_EQ(fi_close(&tx1->fid), 0);
  EXPECT_EQ(fi_close(&sep->fid), 0);
  EXPECT_EQ(fi_close(&cq->fid), 0);
  EXPECT_EQ(fi_close(&other->fid), 0);
  // Datagram endpoints are not scalable; rx_ctx_bits beyond a UDP port's.
  fi_info* dgram = fi_dupinfo(d.info);
  dgram->ep_attr->type = FI_EP_DGRAM;
  EXPECT_EQ(fi_scalable_ep(d.domain, dgram, &sep, nullptr), -FI_ENOSYS);
  fi_freeinfo(dgram);
  fi_av_attr av_attr{};
  av_attr.rx_ctx_bits = 17;
  fid_av* av = nullptr;
  EXPECT_EQ(fi_av_open(d.domain, &av_attr, &av, nullptr), -FI_EINVAL);
  d.Close();
}

// Two domains of one process on one loopback port (opened once, lane.h):
// the first takes queue 0, the second queue 1, and their endpoints talk.
// On a port with one queue they share it (and its lock).
void TwoDomainsOnOneDevice(const char* dev, bool share_queue) {
  Domain d1, d2;
  d1.Open(dev, 1);
  d2.Open(dev, 1);
  EXPECT_EQ(LockOf(d1.domain) == LockOf(d2.domain), share_queue);
  fid_ep* ep[2] = {};
  fid_cq* cq[2] = {};
  Domain* ds[2] = {&d1, &d2};
  fi_addr_t peer[2];
  std::vector<char> names[2];
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_TAGGED;
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(fi_cq_open(ds[i]->domain, &cq_attr, &cq[i], nullptr), 0);
    ASSERT_EQ(fi_endpoint(ds[i]->domain, ds[i]->info, &ep[i], nullptr), 0);
    ASSERT_EQ(fi_ep_bind(ep[i], &ds[i]->av->fid, 0), 0);
    ASSERT_EQ(fi_ep_bind(ep[i], &cq[i]->fid, FI_TRANSMIT | FI_RECV), 0);
    ASSERT_EQ(fi_enable(ep[i]), 0);
    names[i].resize(64);
    size_t len = 64;
    ASSERT_EQ(fi_getname(&ep[i]->fid, names[i].data(), &len), 0);
  }
  EXPECT_NE(std::memcmp(names[0].data(), names[1].data(), names[0].size()), 0);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(fi_av_insert(ds[i]->av, names[1 - i].data(), 1, &peer[i], 0, nullptr), 1);
  }
  constexpr int kMessages = 100;
  uint32_t got[2] = {}, want = 0;
  for (int m = 0; m < kMessages; ++m) {
    ASSERT_EQ(fi_recv(ep[1], &got[1], sizeof(uint32_t), nullptr, FI_ADDR_UNSPEC, &got[1]), 0);
    ASSERT_EQ(fi_recv(ep[0], &got[0], sizeof(uint32_t), nullptr, FI_ADDR_UNSPEC, &got[0]), 0);
    want = static_cast<uint32_t>(m);
    ASSERT_EQ(fi_send(ep[0], &want, sizeof(want), nullptr, peer[0], nullptr), 0);
    ASSERT_EQ(fi_send(ep[1], &want, sizeof(want), nullptr, peer[1], nullptr), 0);
    int done = 0;
    for (int spin = 0; spin < 1'000'000 && done < 4; ++spin) {
      fi_cq_tagged_entry e;
      for (fid_cq* c : cq) done += fi_cq_read(c, &e, 1) == 1 ? 1 : 0;
    }
    ASSERT_EQ(done, 4) << "message " << m;
    EXPECT_EQ(got[0], want);
    EXPECT_EQ(got[1], want);
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(fi_close(&ep[i]->fid), 0);
    EXPECT_EQ(fi_close(&cq[i]->fid), 0);
  }
  d2.Close();
  d1.Close();
}

TEST(Domains, TwoOnOneSteeredDevice) { TwoDomainsOnOneDevice(kSteerA, false); }

TEST(Domains, TwoOnOneQueue) { TwoDomainsOnOneDevice(kOneQueue, true); }

TEST(Domains, TwoOnTheDefaultDevice) { TwoDomainsOnOneDevice(kDefault, false); }

// A domain that takes no lock (FI_THREAD_DOMAIN) does not share its only
// queue: a second domain on the device is refused with one line, and opens
// once the first is closed.
TEST(Domains, ThreadDomainKeepsItsQueue) {
  Domain d1;
  d1.Open(kOneQueue, 1, FI_THREAD_DOMAIN);
  fi_info* info = InfoFor(kOneQueue, 1);
  ASSERT_NE(info, nullptr);
  fid_domain* d2 = nullptr;
  EXPECT_EQ(fi_domain(d1.fabric, info, &d2, nullptr), -FI_EBUSY);
  d1.Close();
  Domain again;
  again.Open(kOneQueue, 1);
  again.Close();
  fi_freeinfo(info);
}

}  // namespace
