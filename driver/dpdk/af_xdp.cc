#include "driver/dpdk/af_xdp.h"

#include <dirent.h>
#include <linux/bpf.h>
#include <rte_errno.h>
#include <rte_mbuf.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "driver/clock.h"
#include "driver/dpdk/port.h"
#include "driver/host.h"
#include "driver/uri.h"

namespace bypass::driver::dpdk {
namespace {

// The kernel frees an interface queue some tens of milliseconds after the
// AF_XDP socket bound to it closed (in a work queue): binding a queue that a
// socket, here or in a process that just exited, released a moment ago
// answers EBUSY, which the PMD reports as EINVAL. Open tries again for this
// long, each time with a new port: the PMD cannot set up a queue again after
// two failures (libxdp leaves the fill ring's cached producer index of the
// failed try in the PMD's queue, and the next fill ring looks full), and a
// failed setup keeps the kAfXdpFillReserve mbufs it took from the pool.
constexpr uint64_t kAfXdpQueueBusyMs = 2000;

// An af_xdp pool's flags: no IOVA (AF_XDP copies or maps by address), and no
// spreading of objects over memory channels, whose padding (a cache line per
// object when its size is an even number of them) would make a page-sized
// object, the largest MTU's, take more than a page.
constexpr unsigned kUmemPoolFlags = RTE_MEMPOOL_F_NO_IOVA_CONTIG | RTE_MEMPOOL_F_NO_SPREAD;

// Whether this process has CAP_IPC_LOCK, with which the kernel does not
// count AF_XDP packet memory (UMEM) against RLIMIT_MEMLOCK.
bool HasCapIpcLock() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return false;
  char line[256];
  unsigned long long eff = 0;
  bool found = false;
  while (!found && std::fgets(line, sizeof(line), f) != nullptr) {
    found = std::sscanf(line, "CapEff: %llx", &eff) == 1;
  }
  std::fclose(f);
  return found && (eff & (1ull << 14)) != 0;  // CAP_IPC_LOCK
}

// AF_XDP registers its packet memory (UMEM) as locked memory: the kernel
// counts it against RLIMIT_MEMLOCK, per user across all of that user's
// AF_XDP sockets, unless the process has CAP_IPC_LOCK. Returns the limit
// that applies, or 0 when none does (raising it where we may).
uint64_t AfXdpMemlockLimit() {
  if (HasCapIpcLock()) return 0;
  rlimit lim{};
  getrlimit(RLIMIT_MEMLOCK, &lim);
  if (lim.rlim_cur == RLIM_INFINITY) return 0;
  rlimit want{RLIM_INFINITY, RLIM_INFINITY};
  if (setrlimit(RLIMIT_MEMLOCK, &want) == 0) return 0;
  return lim.rlim_cur;
}

// How many buffers of `object_bytes` the application's share of an af_xdp
// pool may have: `wanted` when no limit applies; fewer, said once, when only
// part fits in RLIMIT_MEMLOCK; a one-line error when not even `needed` fit
// beside the PMD's fill ring.
absl::StatusOr<uint32_t> AfXdpBufferCap(uint32_t object_bytes, uint32_t wanted, uint32_t needed) {
  const uint64_t limit = AfXdpMemlockLimit();
  if (limit == 0) return wanted;
  // Less a page: the UMEM starts at the page below the first object.
  const uint64_t fit = limit > 4096 ? (limit - 4096) / object_bytes : 0;
  const uint64_t app_fit = fit > kAfXdpFillReserve ? fit - kAfXdpFillReserve : 0;
  if (app_fit < needed) {
    return absl::PermissionDeniedError(absl::StrCat(
        "dpdk: af_xdp locks at least ",
        ((uint64_t{needed} + kAfXdpFillReserve) * object_bytes + 4096) >> 10,
        " KiB of packet memory per queue and RLIMIT_MEMLOCK is ", limit >> 10,
        " KiB, which this process can neither raise nor bypass (no CAP_IPC_LOCK): run with "
        "`ulimit -l unlimited` (LimitMEMLOCK=infinity) or as root with CAP_IPC_LOCK"));
  }
  if (app_fit < wanted) {
    static bool said = false;
    if (!said) {
      std::fprintf(stderr,
                   "bypass: af_xdp pools limited to %llu buffers by RLIMIT_MEMLOCK (%llu KiB for "
                   "all of this user's AF_XDP sockets, no CAP_IPC_LOCK); `ulimit -l unlimited` "
                   "lifts this\n",
                   static_cast<unsigned long long>(app_fit),
                   static_cast<unsigned long long>(limit >> 10));
      said = true;
    }
    return static_cast<uint32_t>(app_fit);
  }
  return wanted;
}

// The inode of `fd` if it is an AF_XDP socket. Read from /proc/self/fd,
// not with fstat: the descriptors scanned include those of DPDK's interrupt
// thread (its epoll and event fds), and TSan takes an fstat for an access to
// the descriptor that races with that thread creating it.
std::optional<ino_t> AfXdpSocketInode(int fd) {
  char path[48];
  std::snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  char target[64];
  const ssize_t n = readlink(path, target, sizeof(target) - 1);
  if (n <= 0) return std::nullopt;
  target[n] = '\0';
  unsigned long long ino = 0;
  if (std::sscanf(target, "socket:[%llu]", &ino) != 1) return std::nullopt;
  int domain = 0;
  socklen_t len = sizeof(domain);
  if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 || domain != AF_XDP) {
    return std::nullopt;
  }
  return static_cast<ino_t>(ino);
}

}  // namespace

uint32_t AfXdpMtuFor(uint32_t link_mtu) {
  constexpr uint32_t kDefault = DeviceOptions{}.mtu;
  if (link_mtu <= kDefault) return kDefault;
  return std::min(link_mtu, AfXdpMaxMtu());
}

std::string WithAfXdpDefaults(const std::string& devargs) {
  for (absl::string_view kv : absl::StrSplit(devargs, ',')) {
    if (absl::StartsWith(kv, "busy_budget=")) return devargs;
  }
  return absl::StrCat(devargs, ",busy_budget=0");
}

uint32_t PoolObjectBytes(uint32_t data_room) {
  rte_mempool_objsz sz{};
  return rte_mempool_calc_obj_size(sizeof(rte_mbuf) + data_room, kUmemPoolFlags, &sz);
}

uint32_t AfXdpDataRoom(uint32_t mtu) {
  return RTE_PKTMBUF_HEADROOM + XDP_PACKET_HEADROOM + std::max<uint32_t>(mtu + 18, 2048);
}

uint32_t AfXdpMaxMtu() {
  const uint32_t page = static_cast<uint32_t>(getpagesize());
  uint32_t mtu = page;  // the first that fits, downwards (objects grow by cache lines)
  while (mtu > 0 && PoolObjectBytes(AfXdpDataRoom(mtu)) > page) --mtu;
  return mtu;
}

absl::Status CheckAfXdpObjectFits(uint32_t mtu, uint32_t data_room) {
  if (PoolObjectBytes(data_room) > static_cast<uint32_t>(getpagesize())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dpdk: af_xdp buffers for MTU ", mtu, " take ", PoolObjectBytes(data_room),
        " bytes and the kernel takes at most a page (", getpagesize(), "): mtu= up to ",
        AfXdpMaxMtu()));
  }
  return absl::OkStatus();
}

rte_mempool* CreateUmemPool(const std::string& name, uint32_t count, uint16_t data_room,
                            int socket) {
  rte_mempool* mp = rte_mempool_create_empty(name.c_str(), count, sizeof(rte_mbuf) + data_room, 0,
                                             sizeof(rte_pktmbuf_pool_private), socket,
                                             kUmemPoolFlags);
  if (mp == nullptr) return nullptr;
  rte_pktmbuf_pool_private priv{};
  priv.mbuf_data_room_size = data_room;
  priv.mbuf_priv_size = 0;
  int rc = rte_mempool_set_ops_byname(mp, "ring_sp_sc", nullptr);
  if (rc == 0) {
    rte_pktmbuf_pool_init(mp, &priv);
    rc = rte_mempool_populate_default(mp);
  }
  if (rc < 0) {
    rte_mempool_free(mp);
    rte_errno = -rc;
    return nullptr;
  }
  if (mp->nb_mem_chunks != 1) {  // DPDK split it when memory was short
    rte_mempool_free(mp);
    rte_errno = ENOMEM;
    return nullptr;
  }
  rte_mempool_obj_iter(mp, rte_pktmbuf_init, nullptr);
  return mp;
}

std::vector<XskSocket> XskSockets() {
  std::vector<XskSocket> out;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return out;
  while (const dirent* e = readdir(dir)) {
    int fd = -1;
    if (!absl::SimpleAtoi(e->d_name, &fd) || fd == dirfd(dir)) continue;
    if (const std::optional<ino_t> ino = AfXdpSocketInode(fd)) out.emplace_back(fd, *ino);
  }
  closedir(dir);
  return out;
}

void NoteNewXskSockets(const std::vector<XskSocket>& before, std::vector<XskSocket>* opened) {
  for (const XskSocket& s : XskSockets()) {
    if (std::find(before.begin(), before.end(), s) == before.end() &&
        std::find(opened->begin(), opened->end(), s) == opened->end()) {
      opened->push_back(s);
    }
  }
}

// DPDK 22.11's af_xdp PMD (from 22.11.5 on, Debian 12 ships 22.11.11) never
// frees a queue's UMEM when it closes the port: a backported fix tests
// `__atomic_sub_fetch(&refcnt, 1) - 1 == 0`, which is false when the count
// drops to zero, so xsk_umem__delete is not called. libxdp gives the first
// socket of a UMEM the UMEM's descriptor, so that AF_XDP socket stays open
// and bound to the interface's queue until the process exits, and opening
// the same interface again in this process fails (bind: EBUSY, logged as
// "Failed to create xsk socket", returned as EINVAL). The PMD has already
// unmapped the socket's rings and detached its XDP program by then; closing
// the descriptor releases the socket and its UMEM. Closes the sockets of
// `fds` that are still the same AF_XDP sockets (a PMD that closes them
// itself leaves nothing to do).
void CloseLeftXskSockets(const std::vector<XskSocket>& fds) {
  for (const auto& [fd, ino] : fds) {
    if (AfXdpSocketInode(fd) == ino) close(fd);
  }
}

absl::StatusOr<std::unique_ptr<Device>> OpenAfXdp(const std::string& devargs,
                                                  const std::string& uri_text,
                                                  const DeviceOptions& opts,
                                                  const std::optional<std::string>& iface) {
  DeviceOptions o = opts;
  absl::StatusOr<DeviceUri> parsed = DeviceUri::Parse(uri_text);
  const bool mtu_given = !parsed.ok() || parsed->Has("mtu") || o.mtu != DeviceOptions{}.mtu;
  if (!mtu_given && iface) o.mtu = AfXdpMtuFor(InterfaceMtu(*iface));
  // Its RX and TX rings are AF_XDP rings, which the kernel sizes in powers
  // of two only (EINVAL otherwise).
  if (!std::has_single_bit(static_cast<uint32_t>(o.ring_size))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dpdk: af_xdp rings are powers of two and ring_size is ", o.ring_size,
        ": use e.g. ring_size=", std::bit_floor(std::max<uint32_t>(o.ring_size, 64))));
  }
  const uint32_t wanted = o.pool_buffers != 0 ? o.pool_buffers : 4u * o.ring_size;
  const uint32_t object = PoolObjectBytes(AfXdpDataRoom(o.mtu));
  auto cap = AfXdpBufferCap(object, wanted, std::min<uint32_t>(wanted, 2u * 64));
  if (!cap.ok()) return cap.status();
  // The PMD keeps kAfXdpFillReserve of the pool in its fill ring: add them,
  // so the application still has the buffers it asked for.
  o.pool_buffers = *cap + kAfXdpFillReserve;
  // Leave the application's share at least two rings' worth.
  while (o.ring_size > 64 && 2u * o.ring_size > *cap) o.ring_size /= 2;
  const uint64_t deadline = SteadyClock::Get().NowNs() + kAfXdpQueueBusyMs * 1'000'000;
  for (;;) {
    auto dev = DpdkDevice::OpenOwned(WithAfXdpDefaults(devargs), uri_text, o, -1, iface);
    if (dev.ok() || !absl::IsAborted(dev.status())) return dev;
    if (SteadyClock::Get().NowNs() >= deadline) {
      const uint64_t memlock = AfXdpMemlockLimit();
      return absl::UnavailableError(absl::StrCat(
          dev.status().message(), " for ", kAfXdpQueueBusyMs,
          " ms: close whatever else uses that interface queue (an AF_XDP socket or XDP "
          "program of another process)",
          memlock == 0 ? ""
                       : absl::StrCat(", or free RLIMIT_MEMLOCK (", memlock >> 10,
                                      " KiB for all of this user's AF_XDP sockets, no "
                                      "CAP_IPC_LOCK; `ulimit -l unlimited` lifts it)"),
          "; DPDK's log above says more"));
    }
    usleep(10000);
  }
}

}  // namespace bypass::driver::dpdk
