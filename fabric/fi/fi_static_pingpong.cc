// A libfabric application linked with the static library (no libfabric at
// all): a server (this process) and a client (a forked child) exchange
// endpoint names over a socketpair, then ping-pong messages of 1 B to 1 MiB
// with their contents checked, over FI_BYPASS_DEVICES (default: the memif
// device). Exits 0 when every message came back intact and libfabric.so was
// never mapped. `-e msg`: connected endpoints (FI_EP_MSG) instead: the
// server listens on a passive endpoint and sends its name, the client
// connects, the server accepts, and the same exchange runs over the
// connection (the address arguments ignored).
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

#define CHECK_FI(call)                                                                    \
  do {                                                                                    \
    const int ret_ = static_cast<int>(call);                                              \
    if (ret_ != 0) {                                                                      \
      std::fprintf(stderr, "%s: %s failed: %s\n", g_role, #call, fi_strerror(-ret_));     \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

const char* g_role = "server";
bool g_msg = false;  // -e msg: FI_EP_MSG with fi_connect / fi_accept
constexpr size_t kSizes[] = {1, 64, 1000, 4096, 65536, 1u << 20};
constexpr int kIters = 20;

bool LibfabricMapped() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("libfabric.so") != std::string::npos) return true;
  }
  return false;
}

struct Side {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_cq* cq = nullptr;
  fid_av* av = nullptr;
  fid_ep* ep = nullptr;
  fi_addr_t peer = FI_ADDR_UNSPEC;
  // -e msg: the EQ of the endpoint and of the server's passive endpoint.
  fid_eq* eq = nullptr;
  fid_pep* pep = nullptr;

  void Open() {
    fi_info* hints = fi_allocinfo();
    hints->ep_attr->type = g_msg ? FI_EP_MSG : FI_EP_RDM;
    hints->caps = FI_MSG | FI_TAGGED;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    CHECK_FI(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info));
    fi_freeinfo(hints);
    CHECK_FI(fi_fabric(info->fabric_attr, &fabric, nullptr));
    if (g_msg) {
      fi_eq_attr eq_attr{};
      eq_attr.wait_obj = FI_WAIT_UNSPEC;
      CHECK_FI(fi_eq_open(fabric, &eq_attr, &eq, nullptr));
    }
  }

  // The endpoint of `entry` (the FI_CONNREQ's info on an accepting server).
  void OpenEp(fi_info* entry) {
    CHECK_FI(fi_domain(fabric, entry, &domain, nullptr));
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    CHECK_FI(fi_cq_open(domain, &cq_attr, &cq, nullptr));
    CHECK_FI(fi_endpoint(domain, entry, &ep, nullptr));
    if (g_msg) {
      CHECK_FI(fi_ep_bind(ep, &eq->fid, 0));
    } else {
      fi_av_attr av_attr{};
      av_attr.type = FI_AV_TABLE;
      CHECK_FI(fi_av_open(domain, &av_attr, &av, nullptr));
      CHECK_FI(fi_ep_bind(ep, &av->fid, 0));
    }
    CHECK_FI(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
    CHECK_FI(fi_enable(ep));
  }

  // A passive endpoint on the EQ, listening.
  void Listen() {
    CHECK_FI(fi_passive_ep(fabric, info, &pep, nullptr));
    CHECK_FI(fi_pep_bind(pep, &eq->fid, 0));
    CHECK_FI(fi_listen(pep));
  }

  std::vector<char> Name() {
    fid_t f = pep != nullptr ? &pep->fid : &ep->fid;
    size_t len = 0;
    if (fi_getname(f, nullptr, &len) != -FI_ETOOSMALL) std::exit(1);
    std::vector<char> name(len);
    CHECK_FI(fi_getname(f, name.data(), &len));
    return name;
  }

  // The next event, which must be `want`; its entry in *e.
  void Event(uint32_t want, fi_eq_cm_entry* e) {
    uint32_t event = 0;
    const ssize_t n = fi_eq_sread(eq, &event, e, sizeof(*e), 10000, 0);
    if (n == -FI_EAVAIL) {
      fi_eq_err_entry err{};
      fi_eq_readerr(eq, &err, 0);
      std::fprintf(stderr, "%s: connection error %d\n", g_role, err.err);
      std::exit(1);
    }
    if (n < 0 || event != want) {
      std::fprintf(stderr, "%s: event %u (%zd), want %u\n", g_role, event, n, want);
      std::exit(1);
    }
  }

  void AddPeer(const std::vector<char>& name) {
    if (g_msg) return;  // connected: the address arguments are ignored
    if (fi_av_insert(av, name.data(), 1, &peer, 0, nullptr) != 1) {
      std::fprintf(stderr, "%s: fi_av_insert failed\n", g_role);
      std::exit(1);
    }
  }

  // Waits for one completion; exits on an error completion.
  void Wait() {
    fi_cq_tagged_entry e;
    for (;;) {
      const ssize_t n = fi_cq_read(cq, &e, 1);
      if (n == 1) return;
      if (n == -FI_EAGAIN) continue;
      fi_cq_err_entry err{};
      fi_cq_readerr(cq, &err, 0);
      std::fprintf(stderr, "%s: completion error %d: %s\n", g_role, err.err,
                   fi_cq_strerror(cq, err.prov_errno, err.err_data, nullptr, 0));
      std::exit(1);
    }
  }

  void Send(const void* buf, size_t len, uint64_t tag) {
    for (;;) {
      const ssize_t r = fi_tsend(ep, buf, len, nullptr, peer, tag, nullptr);
      if (r == 0) break;
      if (r != -FI_EAGAIN) CHECK_FI(r);
      fi_cq_read(cq, nullptr, 0);  // progress
    }
    Wait();
  }

  void Recv(void* buf, size_t len, uint64_t tag) {
    CHECK_FI(fi_trecv(ep, buf, len, nullptr, FI_ADDR_UNSPEC, tag, 0, nullptr));
    Wait();
  }

  void Close() {
    CHECK_FI(fi_close(&ep->fid));
    if (av != nullptr) CHECK_FI(fi_close(&av->fid));
    CHECK_FI(fi_close(&cq->fid));
    CHECK_FI(fi_close(&domain->fid));
    if (pep != nullptr) CHECK_FI(fi_close(&pep->fid));
    if (eq != nullptr) CHECK_FI(fi_close(&eq->fid));
    CHECK_FI(fi_close(&fabric->fid));
    fi_freeinfo(info);
  }
};

void Fill(std::vector<uint8_t>& b, size_t len, int seed) {
  for (size_t i = 0; i < len; ++i) b[i] = static_cast<uint8_t>(i * 7 + seed);
}

int Run(bool server, int fd) {
  Side s;
  std::vector<char> peer_name;
  auto read_name = [&] {
    uint32_t len = 0;
    if (read(fd, &len, sizeof(len)) != sizeof(len) || len > 1024) std::exit(1);
    peer_name.resize(len);
    if (read(fd, peer_name.data(), len) != static_cast<ssize_t>(len)) std::exit(1);
  };
  auto write_name = [&](const std::vector<char>& name) {
    const uint32_t len = static_cast<uint32_t>(name.size());
    if (write(fd, &len, sizeof(len)) != sizeof(len)) std::exit(1);
    if (write(fd, name.data(), len) != static_cast<ssize_t>(len)) std::exit(1);
  };
  if (g_msg && server) {
    s.Open();
    s.Listen();
    write_name(s.Name());
    fi_eq_cm_entry e{};
    s.Event(FI_CONNREQ, &e);
    s.OpenEp(e.info);
    fi_freeinfo(e.info);
    CHECK_FI(fi_accept(s.ep, nullptr, 0));
    s.Event(FI_CONNECTED, &e);
  } else if (g_msg) {
    read_name();
    s.Open();
    s.OpenEp(s.info);
    CHECK_FI(fi_connect(s.ep, peer_name.data(), nullptr, 0));
    fi_eq_cm_entry e{};
    s.Event(FI_CONNECTED, &e);
  } else if (server) {
    s.Open();
    s.OpenEp(s.info);
    write_name(s.Name());
    read_name();
  } else {
    read_name();  // the server has its device open: this side connects to it
    s.Open();
    s.OpenEp(s.info);
    write_name(s.Name());
  }
  s.AddPeer(peer_name);
  std::vector<uint8_t> out(1u << 20), in(1u << 20);
  for (size_t size : kSizes) {
    for (int i = 0; i < kIters; ++i) {
      if (server) {
        s.Recv(in.data(), size, 1);
        s.Send(in.data(), size, 2);  // echo
      } else {
        Fill(out, size, i);
        s.Send(out.data(), size, 1);
        std::memset(in.data(), 0, size);
        s.Recv(in.data(), size, 2);
        if (std::memcmp(in.data(), out.data(), size) != 0) {
          std::fprintf(stderr, "client: the %zu-byte echo %d came back different\n", size, i);
          return 1;
        }
      }
    }
    if (!server) std::printf("%zu bytes: %d round trips, contents checked\n", size, kIters);
  }
  // The server leaves last: the client's final ACKs reach it while it closes.
  char done = 0;
  if (server) {
    if (read(fd, &done, 1) != 1) return 1;
  } else if (write(fd, &done, 1) != 1) {
    return 1;
  }
  if (LibfabricMapped()) {
    std::fprintf(stderr, "%s: libfabric.so is mapped; the static library must not need it\n",
                 g_role);
    return 1;
  }
  s.Close();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "-e") == 0 && std::strcmp(argv[2], "msg") == 0) {
    g_msg = true;
  } else if (argc != 1) {
    std::fprintf(stderr, "usage: %s [-e msg]\n", argv[0]);
    return 2;
  }
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return 1;
  const pid_t child = fork();
  if (child < 0) return 1;
  if (child == 0) {
    g_role = "client";
    close(fds[0]);
    const int rc = Run(false, fds[1]);
    std::fflush(stdout);
    _exit(rc);
  }
  close(fds[1]);
  const int rc = Run(true, fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (rc != 0) return rc;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "the client failed (status %d)\n", status);
    return 1;
  }
  std::printf("PASS: server and client over the static library%s, no libfabric loaded\n",
              g_msg ? " (connected endpoints)" : "");
  return 0;
}
