#include "tools/pingpong/fi.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
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
#include <deque>
#include <fstream>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tools/ping_wire.h"
#include "tools/pingpong/libfabric.h"
#include "tools/pingpong/phases.h"

namespace bypass::tools {
namespace {

constexpr size_t kCtlBytes = 32;     // kReportAsk, kReport and kFin messages
constexpr uint64_t kTag = 0x6279707370696e67;  // "bypsping": every tagged message
constexpr uint64_t kReplyTimeoutNs = 5'000'000'000;

// libfabric's entry points; PrepareProvider loaded them before any fi call.
const Libfabric& Fi() { return **LoadLibfabric(); }

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

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
  ssize_t Send(const void* buf, size_t len, fi_addr_t dest, void* ctx) {
    return tagged ? fi_tsend(ep, buf, len, desc, dest, kTag, ctx)
                  : fi_send(ep, buf, len, desc, dest, ctx);
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
};

// fi_getinfo for an FI_EP_RDM endpoint of o.provider with what the tools
// use; the caller frees the list.
absl::StatusOr<fi_info*> GetInfo(const FiPingOptions& o) {
  fi_info* hints = Fi().dupinfo(nullptr);
  if (hints == nullptr) return absl::ResourceExhaustedError("fi_allocinfo failed");
  hints->ep_attr->type = FI_EP_RDM;
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
    return absl::NotFoundError(absl::StrCat(
        "libfabric has no provider '", o.provider, "' with an FI_EP_RDM endpoint for ",
        o.tagged ? "FI_TAGGED" : "FI_MSG",
        " and manual progress (see fi_info -p ", o.provider, " -t FI_EP_RDM)"));
  }
  if (r != 0) return FiError("fi_getinfo", r);
  return info;
}

absl::StatusOr<std::unique_ptr<FiEndpoint>> OpenEndpoint(const FiPingOptions& o, Region& region,
                                                         size_t cq_size) {
  if (absl::Status s = PrepareProvider(o.provider); !s.ok()) return s;
  if (!o.devices.empty()) setenv("FI_BYPASS_DEVICES", o.devices.c_str(), 1);
  auto e = std::make_unique<FiEndpoint>();
  e->tagged = o.tagged;
  e->provider = o.provider;
  auto info_or = GetInfo(o);
  if (!info_or.ok()) return info_or.status();
  e->info = *info_or;
  fi_info* info = e->info;
  int ret = Fi().fabric(info->fabric_attr, &e->fabric, nullptr);
  if (ret != 0) return FiError("fi_fabric", ret);
  ret = fi_domain(e->fabric, info, &e->domain, nullptr);
  if (ret != 0) return FiError("fi_domain", ret);
  fi_cq_attr cq_attr{};
  cq_attr.size = cq_size;
  cq_attr.format = FI_CQ_FORMAT_MSG;
  cq_attr.wait_obj = FI_WAIT_NONE;  // busy-polled
  ret = fi_cq_open(e->domain, &cq_attr, &e->cq, nullptr);
  if (ret != 0) return FiError("fi_cq_open", ret);
  fi_av_attr av_attr{};
  av_attr.type = info->domain_attr->av_type == FI_AV_UNSPEC ? FI_AV_TABLE : info->domain_attr->av_type;
  av_attr.count = 4;
  ret = fi_av_open(e->domain, &av_attr, &e->av, nullptr);
  if (ret != 0) return FiError("fi_av_open", ret);
  ret = fi_endpoint(e->domain, info, &e->ep, nullptr);
  if (ret != 0) return FiError("fi_endpoint", ret);
  ret = fi_ep_bind(e->ep, &e->av->fid, 0);
  if (ret != 0) return FiError("fi_ep_bind (av)", ret);
  ret = fi_ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV);
  if (ret != 0) return FiError("fi_ep_bind (cq)", ret);
  ret = fi_enable(e->ep);
  if (ret != 0) return FiError("fi_enable", ret);
  if ((info->domain_attr->mr_mode & FI_MR_LOCAL) != 0) {
    ret = fi_mr_reg(e->domain, region.bytes.get(), region.len, FI_SEND | FI_RECV, 0, 0, 0, &e->mr,
                    nullptr);
    if (ret != 0) return FiError("fi_mr_reg", ret);
    e->desc = fi_mr_desc(e->mr);
  }
  size_t len = 0;
  fi_getname(&e->ep->fid, nullptr, &len);
  if (len == 0 || len > kMaxHelloAddrBytes) {
    return absl::InternalError(absl::StrCat("the endpoint's address is ", len,
                                            " bytes; the ping tools carry up to ",
                                            kMaxHelloAddrBytes));
  }
  e->name.resize(len);
  ret = fi_getname(&e->ep->fid, e->name.data(), &len);
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

// Operation contexts: libfabric may use each (FI_CONTEXT/FI_CONTEXT2 mode),
// and the slot index is the offset in the array.
struct Contexts {
  std::vector<fi_context2> ctx;
  explicit Contexts(size_t n) : ctx(n) {}
  void* of(size_t i) { return &ctx[i]; }
  size_t index(void* p) const { return static_cast<size_t>(static_cast<fi_context2*>(p) - ctx.data()); }
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
  if (!fi.devices.empty()) setenv("FI_BYPASS_DEVICES", fi.devices.c_str(), 1);
  auto info = GetInfo(fi);
  if (!info.ok()) return info.status();
  Fi().freeinfo(*info);
  return absl::OkStatus();
}

absl::Status RunFiServer(const PingOptions& opts, const FiPingOptions& fi) {
  const size_t bytes = std::max({PingPayloadBytes(opts.MaxSize()), kCtlBytes, kHelloBytes});
  const uint32_t slots = ServerSlots(std::max<uint32_t>(opts.window, 4), bytes);
  Region region;
  region.len = bytes * slots;
  region.bytes.reset(new uint8_t[region.len]);
  auto ep_or = OpenEndpoint(fi, region, 2 * slots + 64);
  if (!ep_or.ok()) return ep_or.status();
  FiEndpoint& ep = **ep_or;
  if (bytes > ep.max_msg_size()) {
    return absl::InvalidArgumentError(absl::StrCat(opts.MaxSize(), " B is over provider ", fi.provider,
                                                   "'s largest message (", ep.max_msg_size(), " B)"));
  }
  auto buf = [&](uint32_t i) { return region.bytes.get() + size_t{i} * bytes; };
  Contexts ctx(slots);
  // Slots to post, taken last-in first-out, and how many may be posted:
  // two while the client measures round trips, so they land in two warm
  // buffers (a ping-pong application reuses its buffer; cycling through
  // the window's buffers would measure cache misses), all of them once it
  // sends a kRateStart.
  std::vector<uint32_t> to_post;
  uint32_t posted = 0, post_limit = std::min<uint32_t>(2, slots);
  auto post = [&]() -> absl::Status {
    while (!to_post.empty() && posted < post_limit) {
      const uint32_t i = to_post.back();
      const ssize_t r = ep.PostRecv(buf(i), bytes, ctx.of(i));
      if (r == -FI_EAGAIN) break;
      if (r != 0) return FiError("posting a receive", r);
      to_post.pop_back();
      ++posted;
    }
    return absl::OkStatus();
  };
  std::deque<std::pair<uint32_t, size_t>> to_send;  // slot, length
  for (uint32_t i = slots; i > 0; --i) to_post.push_back(i - 1);
  // Post the receives before the client can learn the address.
  if (absl::Status s = post(); !s.ok()) return s;
  if (absl::Status s = PublishAddress(fi, ep.name); !s.ok()) return s;
  fi_addr_t client = FI_ADDR_UNSPEC;
  std::vector<uint8_t> sending(slots, 0);  // the slot's buffer is out as a send, not a receive
  uint64_t data_count = 0, first_ns = 0, last_ns = 0, fin_at = 0;
  fi_cq_msg_entry comps[64];
  for (;;) {
    if (absl::Status s = post(); !s.ok()) return s;
    while (!to_send.empty() && client != FI_ADDR_UNSPEC) {
      const auto [i, len] = to_send.front();
      const ssize_t r = ep.Send(buf(i), len, client, ctx.of(i));
      if (r == -FI_EAGAIN) break;
      if (r != 0) return FiError("sending a reply", r);
      sending[i] = 1;
      to_send.pop_front();
    }
    auto n = ep.Poll(comps, 64);
    if (!n.ok()) return n.status();
    for (size_t k = 0; k < *n; ++k) {
      const uint32_t i = static_cast<uint32_t>(ctx.index(comps[k].op_context));
      if (i >= slots) continue;
      if (sending[i] != 0) {
        sending[i] = 0;
        to_post.push_back(i);  // the reply left: the buffer receives again
        continue;
      }
      --posted;
      PingHeader h{};
      const size_t len = comps[k].len;
      if (!ReadPingHeader(buf(i), len, &h)) {
        to_post.push_back(i);
        continue;
      }
      switch (static_cast<PingKind>(h.kind)) {
        case PingKind::kHello: {
          const uint8_t* addr = nullptr;
          uint32_t addr_len = 0;
          if (!ReadHello(buf(i), len, &addr, &addr_len)) {
            to_post.push_back(i);
            break;
          }
          if (client == FI_ADDR_UNSPEC) {
            auto a = ep.Insert(addr);
            if (!a.ok()) return a.status();
            client = *a;
          }
          to_send.emplace_back(i, len);
          break;
        }
        case PingKind::kPing:
          to_send.emplace_back(i, len);
          break;
        case PingKind::kRateStart:
          post_limit = slots;  // posted at the loop's top, before the echo goes
          to_send.emplace_back(i, len);
          break;
        case PingKind::kData:
          last_ns = NowNs();
          if (data_count++ == 0) first_ns = last_ns;
          to_post.push_back(i);
          break;
        case PingKind::kReportAsk: {
          PingHeader r{data_count, static_cast<uint32_t>(PingKind::kReport), kPingMagic};
          const uint64_t elapsed = last_ns - first_ns;
          std::memcpy(buf(i), &r, sizeof(r));
          std::memcpy(buf(i) + sizeof(r), &elapsed, sizeof(elapsed));
          to_send.emplace_back(i, kCtlBytes);
          data_count = 0;
          break;
        }
        case PingKind::kFin:
          if (fin_at == 0) fin_at = NowNs();
          to_post.push_back(i);
          break;
        case PingKind::kReport:
          to_post.push_back(i);
          break;
        default:
          to_post.push_back(i);
          break;
      }
    }
    // After the kFin, a moment for the last replies to leave.
    if (fin_at != 0 && to_send.empty() && NowNs() - fin_at > 50'000'000) return absl::OkStatus();
  }
}

absl::StatusOr<RunResult> RunFiClient(const PingOptions& opts, const FiPingOptions& fi) {
  const uint32_t window = std::max<uint32_t>(opts.window, 1);
  // Slots hold pings and control messages; rate-mode data goes from one
  // shared buffer.
  const size_t largest = PingPayloadBytes(opts.MaxSize());
  const size_t bytes = std::max({opts.latency ? largest : 0, kCtlBytes, kHelloBytes});
  const size_t data_bytes = opts.rate ? largest : 0;
  // Layout: window + 1 send slots, the reply buffer, the shared data buffer.
  const uint32_t nslots = window + 1;
  Region region;
  region.len = bytes * (nslots + 1) + data_bytes;
  region.bytes.reset(new uint8_t[region.len]);
  uint8_t* const rbuf = region.bytes.get() + bytes * nslots;
  uint8_t* const dbuf = rbuf + bytes;
  auto sbuf = [&](uint32_t i) { return region.bytes.get() + size_t{i} * bytes; };
  auto ep_or = OpenEndpoint(fi, region, 2 * nslots + 64);
  if (!ep_or.ok()) return ep_or.status();
  FiEndpoint& ep = **ep_or;
  auto server_name = FetchAddress(fi);
  if (!server_name.ok()) return server_name.status();
  auto server_or = ep.Insert(server_name->data());
  if (!server_or.ok()) return server_or.status();
  const fi_addr_t server = *server_or;

  RunResult result;
  result.layer = "fi";
  result.provider = fi.provider;
  result.device = ep.info->domain_attr->name != nullptr ? ep.info->domain_attr->name : "";

  Contexts ctx(nslots + 1);
  const uint32_t kRecvSlot = nslots;
  std::vector<uint32_t> free_slots;
  for (uint32_t i = 0; i < nslots; ++i) free_slots.push_back(i);
  bool got_reply = false;
  size_t reply_len = 0;
  fi_cq_msg_entry comps[64];

  auto pump = [&]() -> absl::Status {
    auto n = ep.Poll(comps, 64);
    if (!n.ok()) return n.status();
    for (size_t k = 0; k < *n; ++k) {
      const uint32_t i = static_cast<uint32_t>(ctx.index(comps[k].op_context));
      if (i == kRecvSlot) {
        got_reply = true;
        reply_len = comps[k].len;
      } else if (i < nslots) {
        free_slots.push_back(i);
      }
    }
    return absl::OkStatus();
  };
  SpinCheck spin;
  auto timed_out = [&](uint64_t t0, const char* what) -> absl::Status {
    if (!spin.Due() || NowNs() - t0 <= kReplyTimeoutNs) return absl::OkStatus();
    return absl::DeadlineExceededError(absl::StrCat(
        what, " for 5 s: is the server running with --layer=fi --provider=", fi.provider, "?"));
  };
  // Sends len bytes from a free slot (data from dbuf, written beforehand).
  // *started, if given, is when the message was written and handed to
  // libfabric.
  auto send = [&](const uint8_t* from_or_null, uint64_t seq, PingKind kind, size_t len,
                  uint64_t* started = nullptr) -> absl::Status {
    const uint64_t t0 = NowNs();
    while (free_slots.empty()) {
      if (absl::Status s = pump(); !s.ok()) return s;
      if (absl::Status s = timed_out(t0, "sends stay incomplete"); !s.ok()) return s;
    }
    const uint32_t slot = free_slots.back();
    free_slots.pop_back();
    const uint8_t* from = from_or_null;
    if (from == nullptr) {
      WritePing(sbuf(slot), len, seq, kind);
      from = sbuf(slot);
    }
    if (started != nullptr) *started = NowNs();
    for (;;) {
      const ssize_t r = ep.Send(from, len, server, ctx.of(slot));
      if (r == 0) return absl::OkStatus();
      if (r != -FI_EAGAIN) return FiError("fi_send", r);
      if (absl::Status s = pump(); !s.ok()) return s;
      if (absl::Status s = timed_out(t0, "the endpoint refuses sends"); !s.ok()) return s;
    }
  };
  auto drain = [&]() -> absl::Status {
    const uint64_t t0 = NowNs();
    while (free_slots.size() < nslots) {
      if (absl::Status s = pump(); !s.ok()) return s;
      if (absl::Status s = timed_out(t0, "sends stay incomplete"); !s.ok()) return s;
    }
    return absl::OkStatus();
  };
  // Posts the reply's receive, sends (from slot buffer `prepared` if
  // given, else a fresh ping), and waits for the reply.
  auto round_trip = [&](uint64_t seq, PingKind kind, size_t len,
                        const uint8_t* prepared) -> absl::StatusOr<uint64_t> {
    got_reply = false;
    const uint64_t t0 = NowNs();
    for (;;) {
      const ssize_t r = ep.PostRecv(rbuf, bytes, ctx.of(kRecvSlot));
      if (r == 0) break;
      if (r != -FI_EAGAIN) return FiError("fi_recv", r);
      if (absl::Status s = pump(); !s.ok()) return s;
      if (absl::Status s = timed_out(t0, "the endpoint refuses receives"); !s.ok()) return s;
    }
    uint64_t started = 0;  // the clock starts once the ping is written
    if (absl::Status s = send(prepared, seq, kind, len, &started); !s.ok()) return s;
    while (!got_reply) {
      if (absl::Status s = pump(); !s.ok()) return s;
      if (spin.Due() && NowNs() - t0 > kReplyTimeoutNs) {
        return absl::DeadlineExceededError(absl::StrCat(
            "no reply to message ", seq, " within 5 s: is the server running with --layer=fi --provider=",
            fi.provider, "?"));
      }
    }
    return NowNs() - started;
  };

  // Hello: the server learns this endpoint's address and echoes it back.
  {
    std::vector<uint8_t> hello(kHelloBytes);
    WriteHello(hello.data(), ep.name.data(), static_cast<uint32_t>(ep.name.size()));
    std::memcpy(sbuf(0), hello.data(), hello.size());  // slot 0 is free: nothing was sent yet
    free_slots.erase(std::find(free_slots.begin(), free_slots.end(), 0u));
    free_slots.push_back(0);  // taken next by send()
    auto rt = round_trip(0, PingKind::kHello, kHelloBytes, sbuf(0));
    if (!rt.ok()) return rt.status();
    const uint8_t* addr = nullptr;
    uint32_t addr_len = 0;
    if (!ReadHello(rbuf, reply_len, &addr, &addr_len) || addr_len != ep.name.size() ||
        std::memcmp(addr, ep.name.data(), addr_len) != 0) {
      return absl::DataLossError("the server's answer to the hello is not this endpoint's address");
    }
  }

  auto cannot = [&](uint64_t size) -> std::string {
    if (PingPayloadBytes(size) > ep.max_msg_size()) {
      return absl::StrCat("provider ", fi.provider, "'s largest message is ", ep.max_msg_size(), " B");
    }
    return "";
  };
  LatencyOps lat;
  lat.cannot = cannot;
  lat.ping = [&](uint64_t size, uint64_t seq) -> absl::StatusOr<uint64_t> {
    const size_t ping_bytes = PingPayloadBytes(size);
    auto rtt = round_trip(seq, PingKind::kPing, ping_bytes, nullptr);
    if (!rtt.ok()) return rtt.status();
    if (reply_len != ping_bytes || !VerifyPing(rbuf, reply_len, size, seq, PingKind::kPing)) {
      return absl::DataLossError(absl::StrCat("the reply to ping ", seq, " came back with different bytes"));
    }
    return rtt;
  };
  RateOps rate;
  rate.window = window;
  rate.reliable = true;
  rate.cannot = cannot;
  rate.begin = [&]() -> absl::Status {
    const auto rt = round_trip(kRateStartSeq, PingKind::kRateStart, kCtlBytes, nullptr);
    return CheckRateStartReply(rt, rbuf, reply_len);
  };
  uint64_t seq = 0;
  uint64_t written = ~uint64_t{0};
  rate.send = [&](uint64_t size, uint64_t n) -> absl::Status {
    if (written != size) {
      WritePing(dbuf, size, 0, PingKind::kData);
      written = size;
    }
    for (uint64_t i = 0; i < n; ++i) {
      if (absl::Status s = send(dbuf, seq++, PingKind::kData, PingPayloadBytes(size)); !s.ok()) return s;
    }
    return absl::OkStatus();
  };
  rate.report = [&]() -> absl::StatusOr<Report> {
    // Every data message completed first, so the ask cannot overtake one.
    if (absl::Status s = drain(); !s.ok()) return s;
    auto rt = round_trip(1ull << 62, PingKind::kReportAsk, kCtlBytes, nullptr);
    if (!rt.ok()) return rt.status();
    PingHeader h{};
    if (!ReadPingHeader(rbuf, reply_len, &h) || h.kind != static_cast<uint32_t>(PingKind::kReport) ||
        reply_len < 24) {
      return absl::DataLossError("the server's report is malformed");
    }
    Report rep;
    rep.count = h.seq;
    std::memcpy(&rep.elapsed_ns, rbuf + sizeof(h), sizeof(rep.elapsed_ns));
    return rep;
  };
  if (absl::Status s = RunPhases(opts, lat, rate, &result); !s.ok()) return s;
  if (absl::Status s = send(nullptr, 0, PingKind::kFin, kCtlBytes); !s.ok()) return s;
  if (absl::Status s = drain(); !s.ok()) return s;
  absl::StrAppend(&result.extra_json, ",\"fi_provider\":\"", JsonEscape(ep.info->fabric_attr->prov_name),
                  "\",\"fi_api\":\"", ep.tagged ? "tagged" : "msg", "\"");
  absl::StrAppend(&result.extra_text, "libfabric   provider ", ep.info->fabric_attr->prov_name,
                  ", domain ", result.device, ", ", ep.tagged ? "fi_tsend/fi_trecv" : "fi_send/fi_recv",
                  "\n");
  return result;
}

}  // namespace bypass::tools
