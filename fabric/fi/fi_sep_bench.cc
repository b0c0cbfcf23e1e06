// Message rate of a scalable endpoint with K = 1, 2, 4 contexts, one thread
// per context, each sending 8-byte messages from transmit context i of one
// scalable endpoint to receive context i of another (fi_rx_addr) and
// progressing both: the rates, and each as a ratio against K = 1 measured
// in the same round, the median of 5 rounds (fabric/fi/sep.h). Over the default domain (a device
// instance per context), loopback ports with steered queues, and one
// loopback queue (software demultiplexing, the domain's lock shared).
//
//   bazel run -c opt //fabric/fi:fi_sep_bench [-- MESSAGES_PER_CONTEXT]
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kRxBits = 2;
constexpr int kWindow = 64;

#define MUST(call)                                                                   \
  do {                                                                               \
    const long r = static_cast<long>(call);                                          \
    if (r < 0) {                                                                     \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, fi_strerror(static_cast<int>(-r))); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

struct Side {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_ep* sep = nullptr;
  std::vector<fid_ep*> tx, rx;
  std::vector<fid_cq*> txcq, rxcq;
};

fi_info* InfoFor(const std::string& dev, size_t k) {
  fi_info* hints = fi_allocinfo();
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_MSG | FI_NAMED_RX_CTX;
  hints->ep_attr->tx_ctx_cnt = k;
  hints->ep_attr->rx_ctx_cnt = k;
  hints->domain_attr->threading = FI_THREAD_SAFE;
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED;
  fi_info* list = nullptr;
  MUST(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list));
  fi_freeinfo(hints);
  fi_info* found = nullptr;
  for (fi_info* i = list; i != nullptr && found == nullptr; i = i->next) {
    if (dev == i->domain_attr->name) found = fi_dupinfo(i);
  }
  fi_freeinfo(list);
  if (found == nullptr) {
    std::fprintf(stderr, "no fi_info for %s\n", dev.c_str());
    std::exit(1);
  }
  return found;
}

void Open(Side& s, const std::string& dev, size_t k) {
  s.info = InfoFor(dev, k);
  MUST(fi_fabric(s.info->fabric_attr, &s.fabric, nullptr));
  MUST(fi_domain(s.fabric, s.info, &s.domain, nullptr));
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  av_attr.rx_ctx_bits = kRxBits;
  MUST(fi_av_open(s.domain, &av_attr, &s.av, nullptr));
  MUST(fi_scalable_ep(s.domain, s.info, &s.sep, nullptr));
  MUST(fi_scalable_ep_bind(s.sep, &s.av->fid, 0));
  s.tx.resize(k);
  s.rx.resize(k);
  s.txcq.resize(k);
  s.rxcq.resize(k);
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_CONTEXT;
  for (size_t i = 0; i < k; ++i) {
    MUST(fi_tx_context(s.sep, static_cast<int>(i), nullptr, &s.tx[i], nullptr));
    MUST(fi_rx_context(s.sep, static_cast<int>(i), nullptr, &s.rx[i], nullptr));
    MUST(fi_cq_open(s.domain, &cq_attr, &s.txcq[i], nullptr));
    MUST(fi_cq_open(s.domain, &cq_attr, &s.rxcq[i], nullptr));
    MUST(fi_ep_bind(s.tx[i], &s.txcq[i]->fid, FI_TRANSMIT));
    MUST(fi_ep_bind(s.rx[i], &s.rxcq[i]->fid, FI_RECV));
    MUST(fi_enable(s.tx[i]));
    MUST(fi_enable(s.rx[i]));
  }
  MUST(fi_enable(s.sep));
}

void Close(Side& s) {
  for (size_t i = 0; i < s.tx.size(); ++i) {
    MUST(fi_close(&s.tx[i]->fid));
    MUST(fi_close(&s.rx[i]->fid));
    MUST(fi_close(&s.txcq[i]->fid));
    MUST(fi_close(&s.rxcq[i]->fid));
  }
  MUST(fi_close(&s.sep->fid));
  MUST(fi_close(&s.av->fid));
  MUST(fi_close(&s.domain->fid));
  MUST(fi_close(&s.fabric->fid));
  fi_freeinfo(s.info);
}

// Context i: `count` sends from a.tx[i] to b's receive context i, and the
// receives, with kWindow of each in flight.
void Stream(Side& a, Side& b, fi_addr_t dest, size_t i, int count) {
  char rx_buf[kWindow][8];
  char tx_buf[kWindow][8] = {};
  int posted = 0, received = 0, sent = 0, sent_done = 0;
  fi_cq_entry e[32];
  while (received < count || sent_done < count) {
    while (posted < count && posted - received < kWindow &&
           fi_recv(b.rx[i], rx_buf[posted % kWindow], 8, nullptr, FI_ADDR_UNSPEC, nullptr) == 0) {
      ++posted;
    }
    while (sent < count && sent - sent_done < kWindow &&
           fi_send(a.tx[i], tx_buf[sent % kWindow], 8, nullptr, dest, nullptr) == 0) {
      ++sent;
    }
    ssize_t n = fi_cq_read(a.txcq[i], e, 32);
    if (n > 0) sent_done += static_cast<int>(n);
    n = fi_cq_read(b.rxcq[i], e, 32);
    if (n > 0) received += static_cast<int>(n);
  }
}

// Messages per second of k contexts, each in its own thread.
double Rate(const std::string& dev_a, const std::string& dev_b, size_t k, int count) {
  Side a, b;
  Open(a, dev_a, k);
  Open(b, dev_b, k);
  std::vector<char> name(64);
  size_t len = name.size();
  MUST(fi_getname(&b.sep->fid, name.data(), &len));
  fi_addr_t b_addr;
  MUST(fi_av_insert(a.av, name.data(), 1, &b_addr, 0, nullptr));
  // A short warm-up per context (handshakes), then the measured run.
  std::vector<std::thread> threads;
  for (size_t i = 0; i < k; ++i) {
    threads.emplace_back([&, i] { Stream(a, b, fi_rx_addr(b_addr, static_cast<int>(i), kRxBits), i, 1000); });
  }
  for (std::thread& t : threads) t.join();
  threads.clear();
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < k; ++i) {
    threads.emplace_back([&, i] { Stream(a, b, fi_rx_addr(b_addr, static_cast<int>(i), kRxBits), i, count); });
  }
  for (std::thread& t : threads) t.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Close(a);
  Close(b);
  return static_cast<double>(k) * count / secs;
}

}  // namespace

int main(int argc, char** argv) {
  const int count = argc > 1 ? std::atoi(argv[1]) : 200000;
  struct Setup {
    const char* what;
    const char* a;
    const char* b;
  } setups[] = {
      {"default domain (an instance per context)", "shm:+udp:", "shm:+udp:"},
      {"loopback, steered queues", "loopback:sepbench,queues=5,ip=10.77.20.1",
       "loopback:sepbench,queues=5,ip=10.77.20.2"},
      {"loopback, one queue (software demultiplexing)", "loopback:sepbench1,ip=10.77.21.1",
       "loopback:sepbench1,ip=10.77.21.2"},
  };
  std::string devices;
  for (const Setup& s : setups) devices += std::string(s.a) + ";" + s.b + ";";
  setenv("FI_BYPASS_DEVICES", devices.c_str(), 1);
  std::printf("%d messages of 8 B per context, one thread per context, %u hardware threads\n",
              count, std::thread::hardware_concurrency());
  // Rounds of K = 1, 2, 4 back to back, each ratio against its round's
  // K = 1: on a shared machine the median round says more than one run.
  constexpr int kRounds = 5;
  const size_t ks[] = {1, 2, 4};
  for (const Setup& s : setups) {
    std::printf("%s:\n", s.what);
    std::vector<double> rates[3], ratios[3];
    for (int round = 0; round < kRounds; ++round) {
      for (size_t j = 0; j < 3; ++j) {
        rates[j].push_back(Rate(s.a, s.b, ks[j], count));
        ratios[j].push_back(rates[j].back() / rates[0].back());
      }
    }
    for (size_t j = 0; j < 3; ++j) {
      std::sort(rates[j].begin(), rates[j].end());
      std::sort(ratios[j].begin(), ratios[j].end());
      std::printf("  K=%zu  median %10.0f msg/s (%.0f..%.0f)  x%.2f vs K=1 (rounds %.2f..%.2f)\n",
                  ks[j], rates[j][kRounds / 2], rates[j].front(), rates[j].back(),
                  ratios[j][kRounds / 2], ratios[j].front(), ratios[j].back());
    }
  }
  return 0;
}
