#include "tools/pingpong/fi.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tools/ping_wire.h"
#include "tools/pingpong/libfabric.h"
#include "tools/pingpong/machine.h"
#include "tools/pingpong/phases.h"
#include "tools/pingpong/slots.h"

namespace bypass::tools {
namespace {

constexpr uint64_t kTag = 0x6279707370696e67;  // "bypsping": every tagged message

// libfabric's entry points; PrepareProvider loaded them before any fi call.
const Libfabric& Fi() { return **LoadLibfabric(); }

absl::Status FiError(const char* what, long ret) {
  return absl::UnavailableError(
      absl::StrCat(what, " failed: ", Fi().strerror(static_cast<int>(ret < 0 ? -ret : ret))));
}

// A buffer region, registered with the domain when the provider asks for
// FI_MR_LOCAL. Left uninitialised: pages are touched as messages fill them.
struct Region {
  std::unique_ptr<uint8_t[]> bytes;
  size_t len = 0;
};

// One endpoint and everything under it, closed in reverse order.
struct FiEndpoint {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_cq* cq = nullptr;
  fid_av* av = nullptr;
  fid_eq* eq = nullptr;    // FI_EP_MSG: connection events
  fid_pep* pep = nullptr;  // FI_EP_MSG server: the passive endpoint, until accepted
  fid_ep* ep = nullptr;
  fid_mr* mr = nullptr;
  void* desc = nullptr;
  bool tagged = false;
  std::string provider;  // as asked
  std::vector<uint8_t> name;  // fi_getname

  FiEndpoint() = default;
  FiEndpoint(const FiEndpoint&) = delete;
  FiEndpoint& operator=(const FiEndpoint&) = delete;
  ~FiEndpoint() {
    if (ep != nullptr) fi_close(&ep->fid);
    if (pep != nullptr) fi_close(&pep->fid);
    if (eq != nullptr) fi_close(&eq->fid);
    if (mr != nullptr) fi_close(&mr->fid);
    if (av != nullptr) fi_close(&av->fid);
    if (cq != nullptr) fi_close(&cq->fid);
    if (domain != nullptr) fi_close(&domain->fid);
    if (fabric != nullptr) fi_close(&fabric->fid);
    if (info != nullptr) Fi().freeinfo(info);
  }

  ssize_t PostRecv(void* buf, size_t len, void* ctx) {
    return tagged ? fi_trecv(ep, buf, len, desc, FI_ADDR_UNSPEC, kTag, 0, ctx)
                  : fi_recv(ep, buf, len, desc, FI_ADDR_UNSPEC, ctx);
  }
  // more: FI_MORE (fi_msg(3)), through fi_sendmsg with the endpoint's
  // default flags.
  ssize_t Send(const void* buf, size_t len, fi_addr_t dest, void* ctx, bool more = false) {
    if (!more) {
      return tagged ? fi_tsend(ep, buf, len, desc, dest, kTag, ctx)
                    : fi_send(ep, buf, len, desc, dest, ctx);
    }
    iovec iov{const_cast<void*>(buf), len};
    void* d = desc;
    const uint64_t flags = info->tx_attr->op_flags | FI_MORE;
    if (tagged) {
      fi_msg_tagged m{};
      m.msg_iov = &iov;
      m.desc = &d;
      m.iov_count = 1;
      m.addr = dest;
      m.tag = kTag;
      m.context = ctx;
      return fi_tsendmsg(ep, &m, flags);
    }
    fi_msg m{};
    m.msg_iov = &iov;
    m.desc = &d;
    m.iov_count = 1;
    m.addr = dest;
    m.context = ctx;
    return fi_sendmsg(ep, &m, flags);
  }
  // Reads completions: how many, or an error for a failed operation.
  absl::StatusOr<size_t> Poll(fi_cq_msg_entry* out, size_t n) {
    const ssize_t r = fi_cq_read(cq, out, n);
    if (r > 0) return static_cast<size_t>(r);
    if (r == -FI_EAGAIN) return size_t{0};
    if (r == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      if (fi_cq_readerr(cq, &err, 0) < 0) return FiError("fi_cq_readerr", r);
      return absl::UnavailableError(absl::StrCat(
          "an fi operation completed in error: ", Fi().strerror(err.err), " (",
          fi_cq_strerror(cq, err.prov_errno, err.err_data, nullptr, 0), ")"));
    }
    return FiError("fi_cq_read", r);
  }
  // The peer's address in this endpoint's AV.
  absl::StatusOr<fi_addr_t> Insert(const void* addr) {
    fi_addr_t a = FI_ADDR_UNSPEC;
    const int n = fi_av_insert(av, addr, 1, &a, 0, nullptr);
    if (n != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("fi_av_insert refused the peer's address (", n < 0 ? Fi().strerror(-n) : "0 inserted",
                       "): is the other side using the same --provider?"));
    }
    return a;
  }
  uint64_t max_msg_size() const { return info->ep_attr->max_msg_size; }

  // The endpoint from `with` (the domain's entry, or a connection
  // request's), bound and enabled: to the AV for FI_EP_RDM, to the EQ for
  // FI_EP_MSG.
  absl::Status Open(fi_info* with) {
    int ret = fi_endpoint(domain, with, &ep, nullptr);
    if (ret != 0) return FiError("fi_endpoint", ret);
    ret = av != nullptr ? fi_ep_bind(ep, &av->fid, 0) : fi_ep_bind(ep, &eq->fid, 0);
    if (ret != 0) return FiError(av != nullptr ? "fi_ep_bind (av)" : "fi_ep_bind (eq)", ret);
    ret = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV);
    if (ret != 0) return FiError("fi_ep_bind (cq)", ret);
    ret = fi_enable(ep);
    if (ret != 0) return FiError("fi_enable", ret);
    return absl::OkStatus();
  }

  // The next connection event, progressing through fi_eq_read; its
  // fi_info (FI_CONNREQ) goes to *req.
  absl::StatusOr<uint32_t> NextEvent(uint32_t timeout_ms, fi_info** req = nullptr) {
    const uint64_t deadline = NowNs() + uint64_t{timeout_ms} * 1'000'000;
    for (;;) {
      uint32_t event = 0;
      fi_eq_cm_entry entry{};
      const ssize_t n = fi_eq_read(eq, &event, &entry, sizeof(entry), 0);
      if (n >= 0) {
        if (req != nullptr) *req = entry.info;
        else if (entry.info != nullptr) Fi().freeinfo(entry.info);
        return event;
      }
      if (n == -FI_EAVAIL) {
        fi_eq_err_entry err{};
        fi_eq_readerr(eq, &err, 0);
        return absl::UnavailableError(
            absl::StrCat("the connection failed: ", Fi().strerror(err.err)));
      }
      if (n != -FI_EAGAIN) return FiError("fi_eq_read", n);
      if (cq != nullptr) fi_cq_read(cq, nullptr, 0);  // progress the endpoint too
      if (NowNs() > deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("no connection event within ", timeout_ms / 1000, " s"));
      }
    }
  }

  // FI_EP_MSG server: waits for the first connection request and opens
  // its endpoint (Accept then accepts it).
  absl::Status TakeRequest() {
    fi_info* req = nullptr;
    absl::StatusOr<uint32_t> ev = NextEvent(UINT32_MAX / 2, &req);
    if (!ev.ok()) return ev.status();
    if (*ev != FI_CONNREQ) return absl::InternalError("a connection event other than FI_CONNREQ");
    absl::Status s = Open(req);
    Fi().freeinfo(req);
    return s;
  }
  absl::Status Accept(uint32_t timeout_ms) {
    const int ret = fi_accept(ep, nullptr, 0);
    if (ret != 0) return FiError("fi_accept", ret);
    return Connected(timeout_ms);
  }

  // FI_EP_MSG client: connects to the server's passive endpoint.
  absl::Status Connect(const std::vector<uint8_t>& server, uint32_t timeout_ms) {
    const int ret = fi_connect(ep, server.data(), nullptr, 0);
    if (ret != 0) return FiError("fi_connect", ret);
    return Connected(timeout_ms);
  }

  absl::Status Connected(uint32_t timeout_ms) {
    absl::StatusOr<uint32_t> ev = NextEvent(timeout_ms);
    if (!ev.ok()) return ev.status();
    if (*ev != FI_CONNECTED) return absl::InternalError("a connection event other than FI_CONNECTED");
    return absl::OkStatus();
  }
};

// fi_getinfo for an FI_EP_RDM endpoint of o.provider with what the tools
// use; the caller frees the list.
absl::StatusOr<fi_info*> GetInfo(const FiPingOptions& o) {
  fi_info* hints = Fi().dupinfo(nullptr);
  if (hints == nullptr) return absl::ResourceExhaustedError("fi_allocinfo failed");
  hints->ep_attr->type = o.connected ? FI_EP_MSG : FI_EP_RDM;
  hints->caps = o.tagged ? FI_TAGGED : FI_MSG;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->domain_attr->data_progress = FI_PROGRESS_MANUAL;
  hints->domain_attr->control_progress = FI_PROGRESS_MANUAL;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  hints->tx_attr->msg_order = FI_ORDER_SAS;
  hints->rx_attr->msg_order = FI_ORDER_SAS;
  hints->fabric_attr->prov_name = strdup(o.provider.c_str());
  const char* node = o.node.empty() ? nullptr : o.node.c_str();
  fi_info* info = nullptr;
  const int r = Fi().getinfo(FI_VERSION(1, 17), node, nullptr, node != nullptr ? FI_SOURCE : 0, hints, &info);
  Fi().freeinfo(hints);
  if (r == -FI_ENODATA) {
    const char* type = o.connected ? "FI_EP_MSG" : "FI_EP_RDM";
    return absl::NotFoundError(absl::StrCat(
        "libfabric has no provider '", o.provider, "' with an ", type, " endpoint for ",
        o.tagged ? "FI_TAGGED" : "FI_MSG", " and manual progress (see fi_info -p ", o.provider,
        " -t ", type, ")"));
  }
  if (r != 0) return FiError("fi_getinfo", r);
  return info;
}

// FI_BYPASS_DEVICES for bypass's provider in this process: "default" is
// the provider's default domain (the variable unset), "" leaves it as it is.
void ApplyDevices(const FiPingOptions& o) {
  if (o.devices == "default") {
    unsetenv("FI_BYPASS_DEVICES");
  } else if (!o.devices.empty()) {
    setenv("FI_BYPASS_DEVICES", o.devices.c_str(), 1);
  }
}

// server: an FI_EP_MSG server opens a passive endpoint (its endpoint comes
// with the connection request, Accept); otherwise the endpoint.
absl::StatusOr<std::unique_ptr<FiEndpoint>> OpenEndpoint(const FiPingOptions& o, Region& region,
                                                         size_t cq_size, bool server) {
  if (absl::Status s = PrepareProvider(o.provider); !s.ok()) return s;
  ApplyDevices(o);
  auto e = std::make_unique<FiEndpoint>();
  e->tagged = o.tagged;
  e->provider = o.provider;
  auto info_or = GetInfo(o);
  if (!info_or.ok()) return info_or.status();
  e->info = *info_or;
  fi_info* info = e->info;
  int ret = Fi().fabric(info->fabric_attr, &e->fabric, nullptr);
  if (ret != 0) return FiError("fi_fabric", ret);
  if (o.connected) {
    fi_eq_attr eq_attr{};
    eq_attr.wait_obj = FI_WAIT_UNSPEC;
    ret = fi_eq_open(e->fabric, &eq_attr, &e->eq, nullptr);
    if (ret != 0) return FiError("fi_eq_open", ret);
  }
  if (o.connected && server) {
    // A passive endpoint, whose name the client connects to. It listens
    // before this process opens its domain: on a device with one queue
    // (memif) the listener's domain (thread-safe) opens it first, and the
    // FI_THREAD_DOMAIN domain below shares it.
    ret = fi_passive_ep(e->fabric, info, &e->pep, nullptr);
    if (ret != 0) return FiError("fi_passive_ep", ret);
    ret = fi_pep_bind(e->pep, &e->eq->fid, 0);
    if (ret != 0) return FiError("fi_pep_bind", ret);
    ret = fi_listen(e->pep);
    if (ret != 0) return FiError("fi_listen", ret);
  }
  ret = fi_domain(e->fabric, info, &e->domain, nullptr);
  if (ret != 0) return FiError("fi_domain", ret);
  fi_cq_attr cq_attr{};
  cq_attr.size = cq_size;
  cq_attr.format = FI_CQ_FORMAT_MSG;
  cq_attr.wait_obj = FI_WAIT_NONE;  // busy-polled
  ret = fi_cq_open(e->domain, &cq_attr, &e->cq, nullptr);
  if (ret != 0) return FiError("fi_cq_open", ret);
  if (!o.connected) {
    fi_av_attr av_attr{};
    av_attr.type =
        info->domain_attr->av_type == FI_AV_UNSPEC ? FI_AV_TABLE : info->domain_attr->av_type;
    av_attr.count = 4;
    ret = fi_av_open(e->domain, &av_attr, &e->av, nullptr);
    if (ret != 0) return FiError("fi_av_open", ret);
  }
  if ((info->domain_attr->mr_mode & FI_MR_LOCAL) != 0) {
    ret = fi_mr_reg(e->domain, region.bytes.get(), region.len, FI_SEND | FI_RECV, 0, 0, 0, &e->mr,
                    nullptr);
    if (ret != 0) return FiError("fi_mr_reg", ret);
    e->desc = fi_mr_desc(e->mr);
  }
  if (e->pep == nullptr) {  // a server of connections opens its endpoint per request
    if (absl::Status s = e->Open(info); !s.ok()) return s;
  }
  fid* named = e->pep != nullptr ? &e->pep->fid : &e->ep->fid;
  size_t len = 0;
  fi_getname(named, nullptr, &len);
  if (len == 0 || len > kMaxHelloAddrBytes) {
    return absl::InternalError(absl::StrCat("the endpoint's address is ", len,
                                            " bytes; the ping tools carry up to ",
                                            kMaxHelloAddrBytes));
  }
  e->name.resize(len);
  ret = fi_getname(named, e->name.data(), &len);
  if (ret != 0) return FiError("fi_getname", ret);
  e->name.resize(len);
  return e;
}

std::string Hex(const std::vector<uint8_t>& b) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s;
  for (uint8_t c : b) {
    s.push_back(kDigits[c >> 4]);
    s.push_back(kDigits[c & 15]);
  }
  return s;
}

// The server's side of the address exchange: the file, or one client on the socket.
absl::Status PublishAddress(const FiPingOptions& o, const std::vector<uint8_t>& name) {
  if (!o.addr_file.empty()) {
    const std::string tmp = o.addr_file + ".tmp";
    {
      std::ofstream f(tmp, std::ios::trunc);
      f << Hex(name) << "\n";
      if (!f) return absl::InvalidArgumentError(absl::StrCat("cannot write --addr_file=", o.addr_file));
    }
    if (rename(tmp.c_str(), o.addr_file.c_str()) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("cannot write --addr_file=", o.addr_file, ": ",
                                                     std::strerror(errno)));
    }
    return absl::OkStatus();
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(o.oob_port);
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(fd, 1) != 0) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot listen on TCP port ", o.oob_port,
                                               " for the address exchange (", std::strerror(err),
                                               "): pick another with --oob_port"));
  }
  std::fprintf(stderr, "pingpong: fi server (%s) waiting for a client on TCP port %u\n",
               o.provider.c_str(), o.oob_port);
  const int c = accept(fd, nullptr, nullptr);
  close(fd);
  if (c < 0) return absl::InternalError(absl::StrCat("accept: ", std::strerror(errno)));
  const uint32_t len = htonl(static_cast<uint32_t>(name.size()));
  const bool ok = write(c, &len, sizeof(len)) == sizeof(len) &&
                  write(c, name.data(), name.size()) == static_cast<ssize_t>(name.size());
  close(c);
  if (!ok) return absl::UnavailableError("the client went away during the address exchange");
  return absl::OkStatus();
}

// The client's side: the server's address from the file or the socket.
absl::StatusOr<std::vector<uint8_t>> FetchAddress(const FiPingOptions& o) {
  const uint64_t deadline = NowNs() + uint64_t{o.timeout_ms} * 1'000'000;
  std::vector<uint8_t> name;
  if (!o.addr_file.empty()) {
    for (;;) {
      std::ifstream f(o.addr_file);
      std::string line;
      if (f && std::getline(f, line)) {
        name.resize(kMaxHelloAddrBytes);
        size_t n = 0;
        if (!ParseHexAddress(line.data(), line.size(), name.data(), &n)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "--addr_file=", o.addr_file, " does not hold an address a pingpong server wrote"));
        }
        name.resize(n);
        return name;
      }
      if (NowNs() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "no server address appeared in ", o.addr_file, " within ", o.timeout_ms / 1000,
            " s: is pingpong --layer=fi --server --addr_file=", o.addr_file, " running?"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  if (o.connect.empty()) {
    return absl::InvalidArgumentError(
        "--layer=fi needs the server: --connect=HOST[:PORT] (its address exchange socket), "
        "--addr_file=PATH, or --local");
  }
  std::string host = o.connect;
  uint16_t port = kFiOobPort;
  if (const size_t colon = host.rfind(':'); colon != std::string::npos) {
    uint32_t p = 0;
    if (!absl::SimpleAtoi(host.substr(colon + 1), &p) || p == 0 || p > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("--connect=", o.connect, ": the port is not 1..65535"));
    }
    port = static_cast<uint16_t>(p);
    host = host.substr(0, colon);
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || res == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("--connect=", o.connect, ": cannot resolve ", host));
  }
  int fd = -1;
  for (;;) {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) break;
    if (fd >= 0) close(fd);
    fd = -1;
    if (NowNs() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  freeaddrinfo(res);
  if (fd < 0) {
    return absl::DeadlineExceededError(absl::StrCat(
        "cannot reach the fi server's address exchange at ", host, ":", port,
        ": is pingpong --layer=fi --server running there?"));
  }
  uint32_t len = 0;
  bool ok = read(fd, &len, sizeof(len)) == sizeof(len);
  len = ntohl(len);
  ok = ok && len != 0 && len <= kMaxHelloAddrBytes;
  if (ok) {
    name.resize(len);
    size_t got = 0;
    while (got < len) {
      const ssize_t n = read(fd, name.data() + got, len - got);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    ok = got == len;
  }
  close(fd);
  if (!ok) return absl::DataLossError("the fi server sent no valid address over the exchange socket");
  return name;
}

// An fi endpoint as the slot transports (slots.h) use it: one peer, and an
// operation context a slot (libfabric may use each, FI_CONTEXT/FI_CONTEXT2
// mode), whose offset in the array is the slot's index.
class FiLink {
 public:
  using Peer = fi_addr_t;
  static constexpr bool kHello = true;

  // slots: the layout's (a client's reply slot is one more). peer: the
  // server, for a client; a server learns its client from the hello.
  FiLink(FiEndpoint& ep, uint32_t slots, fi_addr_t peer) : ep_(ep), ctx_(slots + 1), peer_(peer) {}

  absl::StatusOr<bool> PostRecv(uint8_t* buf, size_t len, uint32_t slot) {
    return Posted(ep_.PostRecv(buf, len, &ctx_[slot]), "fi_recv");
  }
  absl::StatusOr<bool> Send(const uint8_t* buf, size_t len, fi_addr_t to, uint32_t slot,
                            bool more = false) {
    // A reply queued before the client's hello goes once the hello names it.
    const fi_addr_t dest = to != FI_ADDR_UNSPEC ? to : peer_;
    if (dest == FI_ADDR_UNSPEC) return false;
    return Posted(ep_.Send(buf, len, dest, &ctx_[slot], more), more ? "fi_sendmsg" : "fi_send");
  }
  absl::StatusOr<size_t> Poll(SlotCompletion<Peer>* out, size_t max) {
    absl::StatusOr<size_t> n = ep_.Poll(comps_, std::min(max, kMaxPoll));
    if (!n.ok()) return n.status();
    for (size_t k = 0; k < *n; ++k) {
      const auto slot = static_cast<uint32_t>(static_cast<fi_context2*>(comps_[k].op_context) -
                                              ctx_.data());
      out[k] = SlotCompletion<Peer>{slot, comps_[k].len, peer_};
    }
    return n;
  }
  absl::StatusOr<fi_addr_t> Hello(const uint8_t* addr, uint32_t /*len*/) {
    if (peer_ == FI_ADDR_UNSPEC) {
      absl::StatusOr<fi_addr_t> a = ep_.Insert(addr);
      if (!a.ok()) return a.status();
      peer_ = *a;
    }
    return peer_;
  }
  std::span<const uint8_t> address() const { return ep_.name; }
  std::string Cannot(uint64_t size) const {
    if (PingPayloadBytes(size) <= ep_.max_msg_size()) return "";
    return absl::StrCat("provider ", ep_.provider, "'s largest message is ", ep_.max_msg_size(),
                        " B");
  }
  std::string Hint() const { return absl::StrCat("--layer=fi --provider=", ep_.provider); }

 private:
  static constexpr size_t kMaxPoll = 64;
  static absl::StatusOr<bool> Posted(ssize_t r, const char* what) {
    if (r == 0) return true;
    if (r == -FI_EAGAIN) return false;
    return FiError(what, r);
  }

  FiEndpoint& ep_;
  std::vector<fi_context2> ctx_;
  fi_addr_t peer_;
  fi_cq_msg_entry comps_[kMaxPoll];
};

}  // namespace

absl::Status PrepareProvider(const std::string& provider) {
  if (auto lib = LoadLibfabric(); !lib.ok()) return lib.status();
  if (provider != "bypass" || getenv("FI_PROVIDER_PATH") != nullptr) return absl::OkStatus();
  std::vector<std::string> candidates;
  for (const char* env : {"RUNFILES_DIR", "TEST_SRCDIR"}) {
    if (const char* d = getenv(env); d != nullptr) candidates.push_back(absl::StrCat(d, "/bypass/fabric/fi"));
  }
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    exe[n] = '\0';
    const std::string self(exe);
    candidates.push_back(self + ".runfiles/bypass/fabric/fi");
    // bazel-bin/tools/<tool>/<tool> -> bazel-bin/fabric/fi
    const std::string dir = self.substr(0, self.rfind('/'));
    candidates.push_back(dir + "/../../fabric/fi");
  }
  for (const std::string& d : candidates) {
    if (access((d + "/libbypass-fi.so").c_str(), R_OK) == 0) {
      char real[4096];
      setenv("FI_PROVIDER_PATH", realpath(d.c_str(), real) != nullptr ? real : d.c_str(), 1);
      return absl::OkStatus();
    }
  }
  return absl::FailedPreconditionError(
      "the bypass libfabric provider is not built: run bazel build //fabric/fi:libbypass-fi.so "
      "(or set FI_PROVIDER_PATH to its directory), or use --provider=shm or tcp");
}

absl::Status ProbeProvider(const FiPingOptions& fi) {
  if (absl::Status s = PrepareProvider(fi.provider); !s.ok()) return s;
  ApplyDevices(fi);
  auto info = GetInfo(fi);
  if (!info.ok()) return info.status();
  Fi().freeinfo(*info);
  return absl::OkStatus();
}

absl::Status RunFiServer(const PingOptions& opts, const FiPingOptions& fi) {
  const SlotLayout layout = SlotLayout::Server(opts, FiLink::kHello);
  Region region;  // outlives the endpoint, which registers it
  region.len = layout.region_bytes;
  region.bytes.reset(new uint8_t[region.len]);
  auto ep_or = OpenEndpoint(fi, region, 2 * layout.slots + 64, /*server=*/true);
  if (!ep_or.ok()) return ep_or.status();
  FiEndpoint& ep = **ep_or;
  if (layout.bytes > ep.max_msg_size()) {
    return absl::InvalidArgumentError(absl::StrCat(opts.MaxSize(), " B is over provider ", fi.provider,
                                                   "'s largest message (", ep.max_msg_size(), " B)"));
  }
  // A connected endpoint's destination is its peer: any fi_addr will do.
  FiLink link(ep, layout.slots, fi.connected ? 0 : FI_ADDR_UNSPEC);
  SlotServer<FiLink> server(link, region.bytes.get(), layout);
  if (fi.connected) {
    // The passive endpoint's name out; the receives posted before the
    // connection is accepted, so the client's first message finds them.
    if (absl::Status s = PublishAddress(fi, ep.name); !s.ok()) return s;
    if (absl::Status s = ep.TakeRequest(); !s.ok()) return s;
    if (absl::Status s = server.Flush(); !s.ok()) return s;
    if (absl::Status s = ep.Accept(fi.timeout_ms); !s.ok()) return s;
    return Serve(server);
  }
  // Post the receives before the client can learn the address.
  if (absl::Status s = server.Flush(); !s.ok()) return s;
  if (absl::Status s = PublishAddress(fi, ep.name); !s.ok()) return s;
  return Serve(server);
}

absl::StatusOr<RunResult> RunFiClient(const PingOptions& opts, const FiPingOptions& fi) {
  const SlotLayout layout = SlotLayout::Client(opts, FiLink::kHello);
  Region region;  // outlives the endpoint, which registers it
  region.len = layout.region_bytes;
  region.bytes.reset(new uint8_t[region.len]);
  auto ep_or = OpenEndpoint(fi, region, 2 * layout.slots + 64, /*server=*/false);
  if (!ep_or.ok()) return ep_or.status();
  FiEndpoint& ep = **ep_or;
  auto server_name = FetchAddress(fi);
  if (!server_name.ok()) return server_name.status();
  absl::StatusOr<fi_addr_t> server = fi_addr_t{0};  // connected: the peer, whatever the address
  if (fi.connected) {
    if (absl::Status s = ep.Connect(*server_name, fi.timeout_ms); !s.ok()) return s;
  } else {
    server = ep.Insert(server_name->data());
    if (!server.ok()) return server.status();
  }

  RunResult result;
  result.layer = "fi";
  result.provider = fi.provider;
  result.device = ep.info->domain_attr->name != nullptr ? ep.info->domain_attr->name : "";
  FiLink link(ep, layout.slots, *server);
  SlotClient<FiLink> transport(link, region.bytes.get(), layout, *server,
                               std::max<uint32_t>(opts.window, 1), 0);
  PingClient<SlotClient<FiLink>> client(transport);
  if (absl::Status s = client.Run(opts, &result); !s.ok()) return s;
  absl::StrAppend(&result.extra_json, ",\"fi_provider\":\"", JsonEscape(ep.info->fabric_attr->prov_name),
                  "\",\"fi_api\":\"", ep.tagged ? "tagged" : "msg", "\",\"fi_ep\":\"",
                  fi.connected ? "msg" : "rdm", "\"");
  absl::StrAppend(&result.extra_text, "libfabric   provider ", ep.info->fabric_attr->prov_name,
                  ", domain ", result.device, ", ", ep.tagged ? "fi_tsend/fi_trecv" : "fi_send/fi_recv",
                  fi.connected ? ", connected (FI_EP_MSG)" : "", "\n");
  return result;
}

}  // namespace bypass::tools
