// Connected endpoints against RDM in one run, one process, two loopback
// domains, through the public libfabric API (the static library):
//   - connection setup: both endpoints opened, fi_connect until the
//     client's FI_CONNECTED (the listener's FI_CONNREQ, fi_endpoint +
//     fi_accept on the other side), progressed only by fi_eq_read, against
//     two RDM endpoints opened on the same domains, each other's name
//     inserted and their first 8-byte round trip (the engine's handshake);
//   - 8-byte ping-pong with fi_inject over a connection against the same on
//     an RDM pair.
// Medians; ratios against the RDM figures of the same run.
//   bazel run -c opt //fabric/fi:fi_msg_bench
#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "fabric/fi/fi_test_util.h"

namespace bypass::fi {
namespace {

using Clock = std::chrono::steady_clock;
using testing::kDevA;
using testing::kDevB;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double Us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

struct Side {
  fid_eq* eq = nullptr;
  fid_cq* cq = nullptr;
  fid_ep* ep = nullptr;
  void Close() {
    if (ep) fi_close(&ep->fid);
    if (cq) fi_close(&cq->fid);
    if (eq) fi_close(&eq->fid);
    *this = Side();
  }
};

Side Open(fid_fabric* fab, fid_domain* dom, fi_info* info) {
  Side s;
  fi_eq_attr ea{};
  fi_cq_attr ca{};
  ca.format = FI_CQ_FORMAT_CONTEXT;
  fi_eq_open(fab, &ea, &s.eq, nullptr);
  fi_cq_open(dom, &ca, &s.cq, nullptr);
  fi_endpoint(dom, info, &s.ep, nullptr);
  fi_ep_bind(s.ep, &s.eq->fid, 0);
  fi_ep_bind(s.ep, &s.cq->fid, FI_TRANSMIT | FI_RECV);
  fi_enable(s.ep);
  return s;
}

// The next event of eq, reading (progressing) the others meanwhile.
uint32_t Next(fid_eq* eq, std::initializer_list<fid_eq*> others, fi_eq_cm_entry* e) {
  for (;;) {
    uint32_t ev;
    if (fi_eq_read(eq, &ev, e, sizeof(*e), 0) >= 0) return ev;
    for (fid_eq* o : others) fi_eq_read(o, &ev, e, sizeof(*e), FI_PEEK);
  }
}

void WaitCq(fid_cq* cq, fid_cq* other) {
  fi_cq_entry e;
  while (fi_cq_read(cq, &e, 1) != 1) fi_cq_read(other, nullptr, 0);
}

// Round trips of 8 bytes with fi_inject between a and b (dest ignored on
// connected endpoints).
std::vector<double> PingPong(fid_ep* a, fid_cq* acq, fi_addr_t a_to_b, fid_ep* b, fid_cq* bcq,
                             fi_addr_t b_to_a, int n) {
  uint64_t out = 1, in_a = 0, in_b = 0;
  std::vector<double> rtt;
  for (int i = 0; i < n; ++i) {
    fi_recv(b, &in_b, 8, nullptr, FI_ADDR_UNSPEC, nullptr);
    fi_recv(a, &in_a, 8, nullptr, FI_ADDR_UNSPEC, nullptr);
    const auto t0 = Clock::now();
    while (fi_inject(a, &out, 8, a_to_b) == -FI_EAGAIN) fi_cq_read(acq, nullptr, 0);
    WaitCq(bcq, acq);
    while (fi_inject(b, &in_b, 8, b_to_a) == -FI_EAGAIN) fi_cq_read(bcq, nullptr, 0);
    WaitCq(acq, bcq);
    rtt.push_back(Us(t0, Clock::now()));
  }
  return rtt;
}

int Main() {
  constexpr int kConnects = 50, kRoundTrips = 20000;
  fi_info* hints = fi_allocinfo();
  hints->caps = FI_MSG;
  hints->ep_attr->type = FI_EP_MSG;
  hints->domain_attr->threading = FI_THREAD_SAFE;  // the listener shares the device's queue
  fi_info* infos = nullptr;
  if (fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &infos) != 0) return 1;
  fi_info* a = testing::ForDomain(infos, kDevA);
  fi_info* b = testing::ForDomain(infos, kDevB);
  fid_fabric* fab = nullptr;
  fid_domain *da = nullptr, *db = nullptr;
  fi_fabric(a->fabric_attr, &fab, nullptr);
  fi_domain(fab, a, &da, nullptr);
  fi_domain(fab, b, &db, nullptr);
  fid_eq* peq = nullptr;
  fid_pep* pep = nullptr;
  fi_eq_attr ea{};
  fi_eq_open(fab, &ea, &peq, nullptr);
  fi_passive_ep(fab, a, &pep, nullptr);
  fi_pep_bind(pep, &peq->fid, 0);
  sockaddr_in name{};
  name.sin_family = AF_INET;
  name.sin_addr.s_addr = htonl(0x0A4D0101);  // kDevA's 10.77.1.1
  name.sin_port = htons(9000);
  fi_setname(&pep->fid, &name, sizeof(name));
  if (fi_listen(pep) != 0) return 1;

  // Connection setup: each connect from a new endpoint to the listener.
  std::vector<double> setup;
  Side client, server;
  for (int i = 0; i < kConnects; ++i) {
    fi_eq_cm_entry e;
    const auto t0 = Clock::now();  // both endpoints' opening counts, as for RDM
    client = Open(fab, db, b);
    fi_connect(client.ep, &name, nullptr, 0);
    if (Next(peq, {client.eq}, &e) != FI_CONNREQ) return 1;
    server = Open(fab, da, e.info);
    fi_freeinfo(e.info);
    fi_accept(server.ep, nullptr, 0);
    if (Next(client.eq, {server.eq}, &e) != FI_CONNECTED) return 1;
    setup.push_back(Us(t0, Clock::now()));
    if (Next(server.eq, {client.eq}, &e) != FI_CONNECTED) return 1;
    if (i + 1 == kConnects) break;  // the last connection carries the ping-pong
    fi_shutdown(client.ep, 0);
    Next(server.eq, {client.eq}, &e);
    server.Close();
    client.Close();
  }
  const std::vector<double> msg_rtt =
      PingPong(client.ep, client.cq, 0, server.ep, server.cq, 0, kRoundTrips);

  // RDM on the same domains: two new endpoints (an AV each, the other's
  // name inserted) and their first round trip, the engine's handshake;
  // then the same ping-pong on one pair.
  fi_info* rdm_hints = fi_allocinfo();
  rdm_hints->caps = FI_MSG;
  rdm_hints->ep_attr->type = FI_EP_RDM;
  rdm_hints->domain_attr->threading = FI_THREAD_SAFE;
  fi_info* rdm_infos = nullptr;
  if (fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, rdm_hints, &rdm_infos) != 0) return 1;
  struct RdmEp {
    Side s;
    fid_av* av = nullptr;
    fi_addr_t peer = 0;
  };
  auto open_rdm = [&](fid_domain* dom, fi_info* info, RdmEp* r) {
    fi_av_attr aa{};
    aa.type = FI_AV_TABLE;
    fi_av_open(dom, &aa, &r->av, nullptr);
    fi_cq_attr ca{};
    ca.format = FI_CQ_FORMAT_CONTEXT;
    fi_cq_open(dom, &ca, &r->s.cq, nullptr);
    fi_endpoint(dom, info, &r->s.ep, nullptr);
    fi_ep_bind(r->s.ep, &r->av->fid, 0);
    fi_ep_bind(r->s.ep, &r->s.cq->fid, FI_TRANSMIT | FI_RECV);
    fi_enable(r->s.ep);
  };
  auto insert = [](RdmEp* from, RdmEp* to) {
    char addr[64];
    size_t len = sizeof(addr);
    fi_getname(&to->s.ep->fid, addr, &len);
    fi_av_insert(from->av, addr, 1, &from->peer, 0, nullptr);
  };
  std::vector<double> rdm_first;
  for (int i = 0; i < kConnects; ++i) {
    RdmEp x, y;
    const auto t0 = Clock::now();
    open_rdm(da, testing::ForDomain(rdm_infos, kDevA), &x);
    open_rdm(db, testing::ForDomain(rdm_infos, kDevB), &y);
    insert(&x, &y);
    insert(&y, &x);
    PingPong(x.s.ep, x.s.cq, x.peer, y.s.ep, y.s.cq, y.peer, 1);
    rdm_first.push_back(Us(t0, Clock::now()));
    std::vector<double> rdm_rtt;
    if (i + 1 == kConnects) {
      rdm_rtt = PingPong(x.s.ep, x.s.cq, x.peer, y.s.ep, y.s.cq, y.peer, kRoundTrips);
      const double ms = Median(setup), rs = Median(rdm_first);
      const double mr = Median(msg_rtt), rr = Median(rdm_rtt);
      std::printf("connection setup (open, fi_connect, FI_CONNREQ, open, fi_accept -> FI_CONNECTED), "
                  "median of %d: %.1f us\n", kConnects, ms);
      std::printf("RDM: two endpoints opened, names inserted, first round trip (baseline), median of "
                  "%d: %.1f us; ratio %.2fx\n", kConnects, rs, ms / rs);
      std::printf("8 B fi_inject round trip, RDM (baseline), median of %d: %.2f us\n", kRoundTrips, rr);
      std::printf("8 B fi_inject round trip, FI_EP_MSG, median of %d: %.2f us; ratio %.2fx\n",
                  kRoundTrips, mr, mr / rr);
    }
    x.s.Close();
    y.s.Close();
    fi_close(&x.av->fid);
    fi_close(&y.av->fid);
  }
  fi_freeinfo(rdm_infos);
  fi_freeinfo(rdm_hints);
  server.Close();
  client.Close();
  fi_close(&pep->fid);
  fi_close(&peq->fid);
  fi_close(&da->fid);
  fi_close(&db->fid);
  fi_close(&fab->fid);
  fi_freeinfo(infos);
  fi_freeinfo(hints);
  return 0;
}

}  // namespace
}  // namespace bypass::fi

int main() {
  setenv("FI_BYPASS_LINGER_MS", "0", 1);  // closes of the setup loop do not wait
  setenv("FI_BYPASS_MAX_PEERS", "16", 1);
  return bypass::fi::Main();
}
