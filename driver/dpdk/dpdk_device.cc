#include "driver/dpdk/dpdk_device.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <rte_bus.h>
#include <rte_dev.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_flow.h>
#include <rte_mbuf.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "driver/clock.h"
#include "driver/dpdk/eal.h"
#include "driver/dpdk/queue_pair.h"

namespace bypass::driver::dpdk {
namespace {

std::atomic<int> g_counter{0};

// How long a memif client keeps trying to reach its server at open.
constexpr uint64_t kMemifConnectMs = 10000;

std::string ErrnoText(int err) { return rte_strerror(err < 0 ? -err : err); }

// The IPv4 address of a kernel interface in this network namespace, if any.
std::optional<Ipv4Address> KernelIpv4(const std::string& iface) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, iface.c_str(), IFNAMSIZ - 1);
  std::optional<Ipv4Address> out;
  if (ioctl(fd, SIOCGIFADDR, &ifr) == 0) {
    const auto* sin = reinterpret_cast<const sockaddr_in*>(&ifr.ifr_addr);
    out = Ipv4Address{ntohl(sin->sin_addr.s_addr)};
  }
  close(fd);
  return out;
}

// What the DPDK 22.11 af_xdp PMD needs of the pool of each RX queue, read
// from its source (drivers/net/af_xdp/rte_eth_af_xdp.c):
//  - It registers the pool's memory as the socket's UMEM, assuming the pool
//    is one memory chunk of densely packed objects starting at its first
//    chunk: UMEM = [page below the first object, + populated_size *
//    object size). rte_pktmbuf_pool_create's pools are not so: their objects
//    never cross a page (2 MiB with hugepages, 4 KiB with --no-huge, where
//    that puts one 2.3 KiB mbuf in each page and half the pool past the
//    UMEM's end), and with hugepages they come in several chunks. The
//    kernel drops the frames of mbufs past the end: lost frames, lost mbufs.
//  - At queue setup it takes kAfXdpFillReserve mbufs for the fill ring and
//    keeps that many there for the life of the queue, whatever nb_desc is;
//    with fewer in the pool the setup fails with EINVAL ("Failed to
//    configure xdp socket"), which is what a pool capped below it gave.
//  - An object (mempool header + mbuf + data room) is one UMEM chunk, and
//    the kernel takes chunks of at most a page.
constexpr uint32_t kAfXdpFillReserve = 2048;  // XSK_RING_CONS__DEFAULT_NUM_DESCS

// The kernel frees an interface queue some tens of milliseconds after the
// AF_XDP socket bound to it closed (in a work queue): binding a queue that a
// socket, here or in a process that just exited, released a moment ago
// answers EBUSY, which the PMD reports as EINVAL. Open tries again for this
// long, each time with a new port: the PMD cannot set up a queue again after
// two failures (libxdp leaves the fill ring's cached producer index of the
// failed try in the PMD's queue, and the next fill ring looks full), and a
// failed setup keeps the kAfXdpFillReserve mbufs it took from the pool.
constexpr uint64_t kAfXdpQueueBusyMs = 2000;

// The bytes one pool object of `data_room` takes (mempool header included).
uint32_t PoolObjectBytes(uint32_t data_room) {
  rte_mempool_objsz sz{};
  return rte_mempool_calc_obj_size(sizeof(rte_mbuf) + data_room, RTE_MEMPOOL_F_NO_IOVA_CONTIG,
                                   &sz);
}

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

// The AF_XDP sockets open in this process, by descriptor and inode.
std::vector<std::pair<int, ino_t>> XskSockets() {
  std::vector<std::pair<int, ino_t>> out;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return out;
  while (const dirent* e = readdir(dir)) {
    int fd = -1;
    struct stat st {};
    int domain = 0;
    socklen_t len = sizeof(domain);
    if (absl::SimpleAtoi(e->d_name, &fd) && fd != dirfd(dir) && fstat(fd, &st) == 0 &&
        S_ISSOCK(st.st_mode) && getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 &&
        domain == AF_XDP) {
      out.emplace_back(fd, st.st_ino);
    }
  }
  closedir(dir);
  return out;
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
void CloseLeftXskSockets(const std::vector<std::pair<int, ino_t>>& fds) {
  for (const auto& [fd, ino] : fds) {
    struct stat st {};
    int domain = 0;
    socklen_t len = sizeof(domain);
    if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == ino &&
        getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && domain == AF_XDP) {
      close(fd);
    }
  }
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

// An af_xdp queue. The PMD takes back the mbufs of sent frames from the
// completion ring only at the start of its next tx_burst, so after the last
// TxBurst a burst's worth is neither in the pool nor the caller's: count
// those as the contract asks, reclaiming them (a tx_burst of nothing) before
// reading the pool. The pool's kAfXdpFillReserve mbufs of the fill ring are
// never the caller's and are not part of its capacity.
class AfXdpQueuePair final : public QueuePair {
 public:
  AfXdpQueuePair(uint16_t id, uint16_t port, uint16_t hw_queue, rte_mempool* pool,
                 uint32_t descriptors)
      : inner_(id, port, hw_queue, pool, descriptors), port_(port), hw_queue_(hw_queue) {}

  uint16_t RxBurst(absl::Span<Packet*> out) override { return inner_.RxBurst(out); }
  uint16_t TxBurst(absl::Span<Packet* const> pkts) override { return inner_.TxBurst(pkts); }
  bool AllocBulk(absl::Span<Packet*> out) override { return inner_.AllocBulk(out); }
  void FreeBulk(absl::Span<Packet* const> pkts) override { inner_.FreeBulk(pkts); }
  uint32_t PoolAvailable() const override {
    rte_eth_tx_burst(port_, hw_queue_, nullptr, 0);
    return inner_.PoolAvailable();
  }
  uint32_t PoolCapacity() const override {
    const uint32_t cap = inner_.PoolCapacity();
    return cap > kAfXdpFillReserve ? cap - kAfXdpFillReserve : 0;
  }
  QueueStats stats() const override { return inner_.stats(); }
  uint16_t id() const override { return inner_.id(); }
  uint16_t hw_queue() const { return hw_queue_; }

 private:
  DpdkQueuePair inner_;
  uint16_t port_;
  uint16_t hw_queue_;
};

bool LooksLikePci(const std::string& name) {
  // dddd:bb:dd.f or bb:dd.f
  int colons = 0;
  for (char c : name) colons += c == ':';
  return (colons == 1 || colons == 2) && name.find('.') != std::string::npos &&
         name.rfind("net_", 0) != 0;
}

// Parses "A-B" or "A" into a queue range.
absl::Status ParseQueueRange(const std::string& text, uint16_t* first, uint16_t* last) {
  std::vector<std::string> parts = absl::StrSplit(text, '-');
  uint32_t a = 0, b = 0;
  if (parts.size() == 1 && absl::SimpleAtoi(parts[0], &a)) {
    b = a;
  } else if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &a) ||
             !absl::SimpleAtoi(parts[1], &b) || b < a || b > 1023) {
    return absl::InvalidArgumentError(
        absl::StrCat("dpdk: queues=", text, " is not a queue range: write queues=A-B, e.g. queues=0-1"));
  }
  *first = static_cast<uint16_t>(a);
  *last = static_cast<uint16_t>(b);
  return absl::OkStatus();
}

// A DPDK port behind the driver contract.
class DpdkDevice final : public Device {
 public:
  DpdkDevice() = default;
  DpdkDevice(const DpdkDevice&) = delete;
  DpdkDevice& operator=(const DpdkDevice&) = delete;

  ~DpdkDevice() override {
    for (rte_flow* f : flows_) {
      rte_flow_error err;
      rte_flow_destroy(port_, f, &err);
    }
    if (info_.owns_port) {
      if (started_) rte_eth_dev_stop(port_);
      rte_eth_dev_close(port_);
      if (!dev_name_.empty()) {  // bypass hotplugged it
        rte_eal_hotplug_remove(LooksLikePci(dev_name_) ? "pci" : "vdev", dev_name_.c_str());
      }
      CloseLeftXskSockets(xsk_fds_);
    }
    queues_.clear();
    for (rte_mempool* mp : pools_) rte_mempool_free(mp);
    if (lock_fd_ >= 0) close(lock_fd_);  // releases the memif server lock
  }

  const DeviceInfo& info() const override { return info_; }
  QueuePair& queue(uint16_t q) override { return *queues_[q]; }

  absl::Status SteerUdpPort(uint16_t udp_port, uint16_t q) override {
    if (!info_.can_steer) {
      return absl::UnimplementedError(absl::StrCat(
          info_.driver, " cannot steer flows; demultiplex UDP ports in software from queue 0"));
    }
    if (q >= info_.num_queues) {
      return absl::InvalidArgumentError(absl::StrCat("queue ", q, " >= ", info_.num_queues));
    }
    rte_flow_error err{};
    rte_flow* flow = CreateUdpFlow(udp_port, queue_hw(q), /*validate_only=*/false, &err);
    if (flow == nullptr) {
      return absl::InternalError(absl::StrCat("rte_flow_create for UDP port ", udp_port, ": ",
                                              err.message ? err.message : "unknown error"));
    }
    flows_.push_back(flow);
    return absl::OkStatus();
  }

  LinkState link_state() const override {
    rte_eth_link link{};
    if (rte_eth_link_get_nowait(port_, &link) != 0) return LinkState::kDown;
    return link.link_status == RTE_ETH_LINK_UP ? LinkState::kUp : LinkState::kDown;
  }

  absl::Status SetLinkState(LinkState state) override {
    int rc = state == LinkState::kUp ? rte_eth_dev_set_link_up(port_)
                                     : rte_eth_dev_set_link_down(port_);
    if (rc == -ENOTSUP) {
      return absl::UnimplementedError(
          absl::StrCat(info_.driver, " cannot set its link state"));
    }
    if (rc != 0) {
      return absl::InternalError(absl::StrCat("set link ", std::string(LinkStateName(state)), ": ", ErrnoText(rc)));
    }
    return absl::OkStatus();
  }

  static absl::StatusOr<std::unique_ptr<Device>> OpenOwned(const std::string& devargs,
                                                           const std::string& uri_text,
                                                           const DeviceOptions& opts,
                                                           int lock_fd,
                                                           std::optional<std::string> iface,
                                                           uint64_t start_retry_ms = 0);
  static absl::StatusOr<std::unique_ptr<Device>> Attach(const DeviceUri& uri,
                                                        const DeviceOptions& opts);

 private:
  uint16_t queue_hw(uint16_t q) const {
    if (const auto* x = dynamic_cast<const AfXdpQueuePair*>(queues_[q].get())) return x->hw_queue();
    return static_cast<const DpdkQueuePair&>(*queues_[q]).hw_queue();
  }

  rte_flow* CreateUdpFlow(uint16_t udp_port, uint16_t hw_queue, bool validate_only,
                          rte_flow_error* err) {
    rte_flow_attr attr{};
    attr.ingress = 1;
    rte_flow_item_udp udp_spec{};
    rte_flow_item_udp udp_mask{};
    udp_spec.hdr.dst_port = htons(udp_port);
    udp_mask.hdr.dst_port = 0xffff;
    rte_flow_item pattern[4] = {};
    pattern[0].type = RTE_FLOW_ITEM_TYPE_ETH;
    pattern[1].type = RTE_FLOW_ITEM_TYPE_IPV4;
    pattern[2].type = RTE_FLOW_ITEM_TYPE_UDP;
    pattern[2].spec = &udp_spec;
    pattern[2].mask = &udp_mask;
    pattern[3].type = RTE_FLOW_ITEM_TYPE_END;
    rte_flow_action_queue queue{};
    queue.index = hw_queue;
    rte_flow_action actions[2] = {};
    actions[0].type = RTE_FLOW_ACTION_TYPE_QUEUE;
    actions[0].conf = &queue;
    actions[1].type = RTE_FLOW_ACTION_TYPE_END;
    if (validate_only) {
      return rte_flow_validate(port_, &attr, pattern, actions, err) == 0
                 ? reinterpret_cast<rte_flow*>(1)
                 : nullptr;
    }
    return rte_flow_create(port_, &attr, pattern, actions, err);
  }

  // af_xdp: pools laid out as its PMD registers them as UMEM (see
  // kAfXdpFillReserve).
  absl::Status CreatePools(const DeviceOptions& opts, uint16_t n, uint32_t data_room,
                           int socket, bool af_xdp = false);
  void FillInfo(const DeviceOptions& opts, std::optional<std::string> iface);

  DeviceInfo info_;
  uint16_t port_ = 0;
  std::string dev_name_;  // set when bypass hotplugged the device
  bool started_ = false;
  int lock_fd_ = -1;
  // af_xdp: the AF_XDP sockets its queues opened (see CloseLeftXskSockets).
  std::vector<std::pair<int, ino_t>> xsk_fds_;
  std::vector<rte_mempool*> pools_;
  std::vector<std::unique_ptr<QueuePair>> queues_;
  std::vector<rte_flow*> flows_;
};

// A pktmbuf pool in one memory chunk with its objects packed back to back
// across page boundaries, as the af_xdp PMD's UMEM needs (see
// kAfXdpFillReserve); rte_pktmbuf_pool_create cannot ask for that. Its
// mbufs have no IOVA, which AF_XDP (the kernel copies or maps by address)
// does not use.
rte_mempool* CreateUmemPool(const std::string& name, uint32_t count, uint16_t data_room,
                            int socket) {
  rte_mempool* mp = rte_mempool_create_empty(name.c_str(), count, sizeof(rte_mbuf) + data_room, 0,
                                             sizeof(rte_pktmbuf_pool_private), socket,
                                             RTE_MEMPOOL_F_NO_IOVA_CONTIG);
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

absl::Status DpdkDevice::CreatePools(const DeviceOptions& opts, uint16_t n, uint32_t data_room,
                                     int socket, bool af_xdp) {
  const uint32_t count = opts.pool_buffers != 0 ? opts.pool_buffers : 4u * opts.ring_size;
  for (uint16_t q = 0; q < n; ++q) {
    std::string name = absl::StrCat("bypass", getpid() % 100000, "_", g_counter++);
    // Each queue's pool is used by the one thread that owns the queue (the
    // PMD allocates and frees inside rx/tx_burst on that thread): a
    // single-producer/single-consumer ring needs no atomics.
    rte_mempool* mp =
        af_xdp ? CreateUmemPool(name, count, static_cast<uint16_t>(data_room), socket)
               : rte_pktmbuf_pool_create_by_ops(name.c_str(), count, 0, 0,
                                                static_cast<uint16_t>(data_room), socket,
                                                "ring_sp_sc");
    if (mp == nullptr && af_xdp) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "dpdk: af_xdp needs each pool in one contiguous area and cannot get ", count,
          " buffers of ", PoolObjectBytes(data_room), " bytes so (", rte_strerror(rte_errno),
          "): reserve more hugepages (tools/setup.sh) or lower pool_buffers / ring_size"));
    }
    if (mp == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "dpdk: cannot create a pool of ", count, " buffers of ", data_room, " bytes (",
          rte_strerror(rte_errno),
          "): reserve more hugepages (tools/setup.sh) or lower pool_buffers"));
    }
    pools_.push_back(mp);
  }
  return absl::OkStatus();
}

void DpdkDevice::FillInfo(const DeviceOptions& opts, std::optional<std::string> iface) {
  rte_eth_dev_info dev_info{};
  rte_eth_dev_info_get(port_, &dev_info);
  info_.driver = dev_info.driver_name ? dev_info.driver_name : "dpdk";
  rte_ether_addr mac{};
  rte_eth_macaddr_get(port_, &mac);
  std::memcpy(info_.mac.bytes.data(), mac.addr_bytes, 6);
  if (info_.mac == MacAddress{} && info_.owns_port) {
    // Some virtual ports (net_ring) have no address: give them a locally
    // administered one, unique per process and port.
    const uint32_t pid = static_cast<uint32_t>(getpid());
    info_.mac = MacAddress{{0x02, 0xb9, static_cast<uint8_t>(pid >> 16), static_cast<uint8_t>(pid >> 8),
                            static_cast<uint8_t>(pid), static_cast<uint8_t>(port_)}};
    rte_ether_addr set{};
    std::memcpy(set.addr_bytes, info_.mac.bytes.data(), 6);
    rte_eth_dev_default_mac_addr_set(port_, &set);  // where the PMD can keep it
  }
  uint16_t mtu = 0;
  info_.mtu = rte_eth_dev_get_mtu(port_, &mtu) == 0 && mtu != 0 ? mtu : opts.mtu;
  if (opts.ipv4) {
    info_.ipv4 = *opts.ipv4;
  } else if (iface) {
    if (auto ip = KernelIpv4(*iface)) info_.ipv4 = *ip;
  }
  if (info_.ipv4.value == 0) {
    // A label for devices with no kernel address (memif, ring): unique
    // enough per port, and overridable with ip=.
    info_.ipv4.value = (10u << 24) | (79u << 16) | (uint32_t{info_.mac.bytes[4]} << 8) |
                       info_.mac.bytes[5];
  }
  uint32_t off = 0;
  if (dev_info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_IPV4_CKSUM) off |= kOffloadRxIpChecksum;
  if (dev_info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_UDP_CKSUM) off |= kOffloadRxUdpChecksum;
  if (dev_info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_IPV4_CKSUM) off |= kOffloadTxIpChecksum;
  if (dev_info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_UDP_CKSUM) off |= kOffloadTxUdpChecksum;
  info_.offloads = off;
}

absl::StatusOr<std::unique_ptr<Device>> DpdkDevice::OpenOwned(const std::string& devargs,
                                                              const std::string& uri_text,
                                                              const DeviceOptions& opts,
                                                              int lock_fd,
                                                              std::optional<std::string> iface,
                                                              uint64_t start_retry_ms) {
  auto dev = std::make_unique<DpdkDevice>();
  dev->lock_fd_ = lock_fd;
  dev->info_.uri = uri_text;
  const std::string name = std::string(devargs.substr(0, devargs.find(',')));
  const bool pci = LooksLikePci(name);
  EalRequest req;
  if (pci) req.pci_address = name;
  if (absl::Status s = EnsureEal(req); !s.ok()) return s;

  uint16_t port = 0;
  if (rte_eth_dev_get_port_by_name(name.c_str(), &port) != 0) {
    int rc = rte_dev_probe(devargs.c_str());
    if (rc != 0) {
      return absl::UnavailableError(absl::StrCat(
          "dpdk: cannot open '", devargs, "' (", ErrnoText(rc),
          "): check the devargs, that the interface exists in this network namespace and "
          "is not taken by another process; DPDK's log above says more"));
    }
    if (rte_eth_dev_get_port_by_name(name.c_str(), &port) != 0) {
      return absl::NotFoundError(absl::StrCat("dpdk: '", devargs, "' probed but made no port"));
    }
    dev->dev_name_ = name;
  } else if (!pci) {
    return absl::AlreadyExistsError(absl::StrCat(
        "dpdk: ", name, " is already open in this process: close it first or use another name"));
  }
  dev->port_ = port;
  dev->info_.owns_port = true;

  rte_eth_dev_info dev_info{};
  if (int rc = rte_eth_dev_info_get(port, &dev_info); rc != 0) {
    return absl::InternalError(absl::StrCat("dpdk: rte_eth_dev_info_get: ", ErrnoText(rc)));
  }
  const uint16_t nq = opts.queues;
  if (nq == 0 || nq > dev_info.max_rx_queues || nq > dev_info.max_tx_queues) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dpdk: ", name, " supports up to ", std::min(dev_info.max_rx_queues, dev_info.max_tx_queues),
        " queue pairs, ", nq, " were asked for: lower queues="));
  }
  // ethdev checks the frame (MTU + 14 + 4) against max_rx_pktlen too; some
  // PMDs (memif in 22.11) report a large max_mtu but a 1518-byte frame.
  const uint32_t max_mtu = std::min<uint32_t>(
      dev_info.max_mtu, dev_info.max_rx_pktlen > 18 ? dev_info.max_rx_pktlen - 18 : 0);
  if (opts.mtu > max_mtu) {
    return absl::InvalidArgumentError(absl::StrCat("dpdk: ", name, " supports MTU up to ", max_mtu,
                                                   ", not ", opts.mtu, ": lower mtu="));
  }
  rte_eth_conf conf{};
  conf.rxmode.mtu = opts.mtu;
  conf.rxmode.offloads = dev_info.rx_offload_capa &
                         (RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_UDP_CKSUM);
  conf.txmode.offloads = dev_info.tx_offload_capa &
                         (RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_UDP_CKSUM);
  if (int rc = rte_eth_dev_configure(port, nq, nq, &conf); rc != 0) {
    return absl::InternalError(absl::StrCat("dpdk: configuring ", name, ": ", ErrnoText(rc)));
  }
  if (int rc = rte_eth_dev_set_mtu(port, static_cast<uint16_t>(opts.mtu));
      rc != 0 && rc != -ENOTSUP) {
    return absl::InvalidArgumentError(absl::StrCat("dpdk: ", name, " refused MTU ", opts.mtu,
                                                   " (", ErrnoText(rc), "): lower mtu="));
  }
  uint16_t nb_rxd = opts.ring_size, nb_txd = opts.ring_size;
  rte_eth_dev_adjust_nb_rx_tx_desc(port, &nb_rxd, &nb_txd);
  dev->info_.ring_size = nb_rxd;
  const int socket = rte_eth_dev_socket_id(port) < 0 ? SOCKET_ID_ANY : rte_eth_dev_socket_id(port);
  const uint32_t frame = opts.mtu + 14 + 4;
  const uint32_t data_room = RTE_PKTMBUF_HEADROOM + std::max<uint32_t>(frame, 2048);
  const bool af_xdp = name.rfind("net_af_xdp", 0) == 0;
  if (af_xdp && PoolObjectBytes(data_room) > static_cast<uint32_t>(getpagesize())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dpdk: af_xdp buffers for MTU ", opts.mtu, " take ", PoolObjectBytes(data_room),
        " bytes and the kernel takes at most a page (", getpagesize(), "): lower mtu="));
  }
  if (absl::Status s = dev->CreatePools(opts, nq, data_room, socket, af_xdp); !s.ok()) return s;
  const std::vector<std::pair<int, ino_t>> xsk_before =
      af_xdp ? XskSockets() : std::vector<std::pair<int, ino_t>>{};
  for (uint16_t q = 0; q < nq; ++q) {
    int rc = rte_eth_rx_queue_setup(port, q, nb_rxd, socket, nullptr, dev->pools_[q]);
    if (af_xdp) {
      for (const auto& s : XskSockets()) {
        if (std::find(xsk_before.begin(), xsk_before.end(), s) == xsk_before.end() &&
            std::find(dev->xsk_fds_.begin(), dev->xsk_fds_.end(), s) == dev->xsk_fds_.end()) {
          dev->xsk_fds_.push_back(s);
        }
      }
    }
    if (rc != 0 && af_xdp) {  // Open tries again on kAborted (see kAfXdpQueueBusyMs)
      return absl::AbortedError(absl::StrCat("dpdk: RX queue ", q, " of ", name, ": ",
                                             ErrnoText(rc)));
    }
    if (rc != 0) {
      return absl::InternalError(absl::StrCat("dpdk: RX queue ", q, " of ", name, ": ", ErrnoText(rc)));
    }
    rc = rte_eth_tx_queue_setup(port, q, nb_txd, socket, nullptr);
    if (rc != 0) {
      return absl::InternalError(absl::StrCat("dpdk: TX queue ", q, " of ", name, ": ", ErrnoText(rc)));
    }
  }
  // A memif client connects in dev_start and fails while its server is not
  // listening yet; and about one connection in ten here stalls in memif's
  // handshake with the link never coming up. So a client retries the start,
  // and reconnects (stop, start) when its link is not up within a second,
  // until start_retry_ms runs out. Open returns with the link up.
  const SteadyClock& clock = SteadyClock::Get();
  const uint64_t deadline = clock.NowNs() + start_retry_ms * 1'000'000;
  for (;;) {
    int rc = rte_eth_dev_start(port);
    if (rc == 0) {
      if (start_retry_ms == 0) break;
      const uint64_t link_deadline = clock.NowNs() + 1'000'000'000;
      rte_eth_link link{};
      while (rte_eth_link_get_nowait(port, &link) == 0 && link.link_status != RTE_ETH_LINK_UP &&
             clock.NowNs() < link_deadline) {
        usleep(1000);
      }
      if (link.link_status == RTE_ETH_LINK_UP) break;
      rte_eth_dev_stop(port);
      rc = -ETIMEDOUT;
    }
    if (clock.NowNs() >= deadline) {
      return absl::UnavailableError(absl::StrCat(
          "dpdk: starting ", name, ": ",
          rc == -ETIMEDOUT ? "the link did not come up" : ErrnoText(rc),
          start_retry_ms != 0 ? absl::StrCat(" after trying for ", start_retry_ms / 1000,
                                             " s: is the memif server on that socket running?")
                              : ""));
    }
    usleep(5000);
  }
  dev->started_ = true;
  for (uint16_t q = 0; q < nq; ++q) {
    // Every mbuf of the pool can be in the caller's hands at once.
    if (af_xdp) {
      dev->queues_.push_back(std::make_unique<AfXdpQueuePair>(q, port, q, dev->pools_[q],
                                                              dev->pools_[q]->size + nb_rxd));
      continue;
    }
    dev->queues_.push_back(
        std::make_unique<DpdkQueuePair>(q, port, q, dev->pools_[q], dev->pools_[q]->size + nb_rxd));
  }
  dev->info_.num_queues = nq;
  dev->FillInfo(opts, std::move(iface));
  rte_flow_error err{};
  dev->info_.can_steer = dev->CreateUdpFlow(4791, 0, /*validate_only=*/true, &err) != nullptr;
  return std::unique_ptr<Device>(std::move(dev));
}

absl::StatusOr<std::unique_ptr<Device>> DpdkDevice::Attach(const DeviceUri& uri,
                                                           const DeviceOptions& opts) {
  if (rte_lcore_count() == 0 && !CurrentEal().initialized) {
    return absl::FailedPreconditionError(
        "dpdk: port= attaches to a port the application set up, but this process has no EAL: "
        "call rte_eal_init and configure the port first, or name a device (dpdk:DEVARGS)");
  }
  if (absl::Status s = EnsureEal({}); !s.ok()) return s;
  if (absl::Status s = uri.CheckKnown({"port", "queues"}); !s.ok()) return s;
  uint32_t port = 0;
  if (!absl::SimpleAtoi(uri.Get("port").value_or(""), &port) || port >= RTE_MAX_ETHPORTS ||
      !rte_eth_dev_is_valid_port(static_cast<uint16_t>(port))) {
    return absl::NotFoundError(absl::StrCat("dpdk: port=", uri.Get("port").value_or(""),
                                            " is not a DPDK port of this process (it has ",
                                            rte_eth_dev_count_avail(), ")"));
  }
  uint16_t first = 0, last = 0;
  if (absl::Status s = ParseQueueRange(uri.Get("queues").value_or("0"), &first, &last); !s.ok()) {
    return s;
  }
  rte_eth_dev_info dev_info{};
  rte_eth_dev_info_get(static_cast<uint16_t>(port), &dev_info);
  if (last >= dev_info.nb_rx_queues || last >= dev_info.nb_tx_queues) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dpdk: port ", port, " has ", dev_info.nb_rx_queues, " RX and ", dev_info.nb_tx_queues,
        " TX queues configured; queues=", first, "-", last, " is outside them"));
  }
  auto dev = std::make_unique<DpdkDevice>();
  dev->port_ = static_cast<uint16_t>(port);
  dev->info_.uri = uri.text;
  dev->info_.owns_port = false;
  const uint16_t nq = static_cast<uint16_t>(last - first + 1);
  const int socket = rte_eth_dev_socket_id(dev->port_) < 0 ? SOCKET_ID_ANY
                                                         : rte_eth_dev_socket_id(dev->port_);
  uint16_t mtu = 1500;
  rte_eth_dev_get_mtu(dev->port_, &mtu);
  const uint32_t data_room = RTE_PKTMBUF_HEADROOM + std::max<uint32_t>(mtu + 18u, 2048);
  if (absl::Status s = dev->CreatePools(opts, nq, data_room, socket); !s.ok()) return s;
  for (uint16_t i = 0; i < nq; ++i) {
    const uint16_t hwq = static_cast<uint16_t>(first + i);
    rte_eth_rxq_info rxq{};
    uint32_t app_mbufs = 0;
    if (rte_eth_rx_queue_info_get(dev->port_, hwq, &rxq) == 0 && rxq.mp != nullptr) {
      app_mbufs = rxq.mp->size;
    } else {
      app_mbufs = 8192;
    }
    dev->queues_.push_back(std::make_unique<DpdkQueuePair>(
        i, dev->port_, hwq, dev->pools_[i], dev->pools_[i]->size + app_mbufs));
    dev->info_.ring_size = rxq.nb_desc;
  }
  dev->info_.num_queues = nq;
  dev->FillInfo(opts, std::nullopt);
  dev->info_.can_steer = false;  // flows are the application's port configuration
  return std::unique_ptr<Device>(std::move(dev));
}

// True once a server listens on the UNIX socket at path, read from
// /proc/net/unix (flag __SO_ACCEPTCON). Connecting to find out would not do:
// DPDK's memif server takes the first connection as its client, and a memif
// client whose first dev_start failed may never come up.
bool MemifServerListens(const std::string& path) {
  std::FILE* f = std::fopen("/proc/net/unix", "r");
  if (f == nullptr) return false;
  char line[512];
  bool listening = false;
  while (!listening && std::fgets(line, sizeof(line), f) != nullptr) {
    unsigned long flags = 0;
    char sock_path[256] = {0};
    // Num RefCount Protocol Flags Type St Inode Path
    if (std::sscanf(line, "%*s %*s %*s %lx %*s %*s %*s %255s", &flags, sock_path) == 2 &&
        (flags & 0x10000) != 0 && path == sock_path) {
      listening = true;
    }
  }
  std::fclose(f);
  return listening;
}

// memif:SOCKET[,role=server|client|auto][,id=N]
absl::StatusOr<std::unique_ptr<Device>> OpenMemif(const DeviceUri& uri, const DeviceOptions& opts) {
  if (absl::Status s = uri.CheckKnown({"role", "id"}); !s.ok()) return s;
  const std::string& socket_path = uri.target;
  if (socket_path.empty() || socket_path[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "memif: '", socket_path, "' is not an absolute socket path: write memif:/run/bypass/NAME.sock"));
  }
  const std::string dir = socket_path.substr(0, socket_path.rfind('/'));
  struct stat st {};
  if (!dir.empty() && (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))) {
    return absl::NotFoundError(absl::StrCat("memif: socket directory ", dir,
                                            " does not exist: create it (mkdir -p ", dir,
                                            ") or choose another socket path"));
  }
  std::string role = uri.Get("role").value_or("auto");
  if (role != "server" && role != "client" && role != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("memif: role=", role, " is not server, client or auto"));
  }
  uint32_t id = 0;
  if (auto v = uri.Get("id"); v && !absl::SimpleAtoi(*v, &id)) {
    return absl::InvalidArgumentError(absl::StrCat("memif: id=", *v, " is not a number"));
  }
  // The server of a socket holds an exclusive lock on SOCKET.lock for its
  // lifetime. With role=auto the first to take it serves and the rest
  // connect; the kernel arbitrates, so two processes starting together
  // cannot both become servers, and a dead server's lock is released.
  int lock_fd = -1;
  if (role != "client") {
    const std::string lock_path = socket_path + ".lock";
    lock_fd = open(lock_path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    if (lock_fd < 0) {
      return absl::PermissionDeniedError(absl::StrCat("memif: cannot open ", lock_path, ": ",
                                                      std::strerror(errno),
                                                      ": choose a socket path you can write"));
    }
    if (flock(lock_fd, LOCK_EX | LOCK_NB) == 0) {
      role = "server";
      unlink(socket_path.c_str());  // a stale socket of a dead server
    } else {
      close(lock_fd);
      lock_fd = -1;
      if (role == "server") {
        return absl::AlreadyExistsError(absl::StrCat(
            "memif: ", socket_path, " is already served by another process: use role=client, "
            "role=auto, or another socket path"));
      }
      role = "client";
    }
  }
  if (role == "client") {
    // DPDK's memif client connects once, in dev_start. Wait until the server
    // listens, so the two sides may start in either order.
    const uint64_t deadline = SteadyClock::Get().NowNs() + kMemifConnectMs * 1'000'000;
    while (!MemifServerListens(socket_path)) {
      if (SteadyClock::Get().NowNs() > deadline) {
        return absl::UnavailableError(absl::StrCat(
            "memif: no server listens on ", socket_path, " after ", kMemifConnectMs / 1000,
            " s: start the other side (role=server or role=auto) first"));
      }
      usleep(2000);
    }
  }
  const std::string devargs =
      absl::StrCat("net_memif_bypass", getpid(), "_", g_counter++, ",socket=", socket_path,
                   ",socket-abstract=no,role=", role, ",id=", id,
                   // memif sizes its shared rings itself (default 1024 slots):
                   // make them the queue size asked for.
                   ",rsize=", std::countr_zero(static_cast<uint32_t>(opts.ring_size)));
  // OpenOwned owns lock_fd from here, also when it fails.
  return DpdkDevice::OpenOwned(devargs, uri.text, opts, lock_fd, std::nullopt,
                               role == "client" ? kMemifConnectMs : 0);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Device>> Open(DeviceUri uri, const DeviceOptions& opts) {
  if (uri.scheme == "memif") return OpenMemif(uri, opts);
  if (uri.scheme != "dpdk") {
    return absl::InvalidArgumentError(absl::StrCat("dpdk: scheme ", uri.scheme, " is not dpdk or memif"));
  }
  if (uri.target.empty() && uri.Has("port")) return DpdkDevice::Attach(uri, opts);
  if (uri.target.empty()) {
    return absl::InvalidArgumentError(
        "dpdk: no device named: write dpdk:DEVARGS (e.g. dpdk:net_ring0, dpdk:0000:3b:00.0) or "
        "dpdk:port=N,queues=A-B");
  }
  std::optional<std::string> iface = uri.Get("iface");
  const std::string devargs = uri.Rest();
  DeviceOptions o = opts;
  if (devargs.rfind("net_af_xdp", 0) == 0) {
    // Its RX and TX rings are AF_XDP rings, which the kernel sizes in powers
    // of two only (EINVAL otherwise).
    if (!std::has_single_bit(static_cast<uint32_t>(o.ring_size))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dpdk: af_xdp rings are powers of two and ring_size is ", o.ring_size,
          ": use e.g. ring_size=", std::bit_floor(std::max<uint32_t>(o.ring_size, 64))));
    }
    const uint32_t wanted = o.pool_buffers != 0 ? o.pool_buffers : 4u * o.ring_size;
    const uint32_t object =
        PoolObjectBytes(RTE_PKTMBUF_HEADROOM + std::max<uint32_t>(o.mtu + 18, 2048));
    auto cap = AfXdpBufferCap(object, wanted, std::min<uint32_t>(wanted, 2u * 64));
    if (!cap.ok()) return cap.status();
    // The PMD keeps kAfXdpFillReserve of the pool in its fill ring: add them,
    // so the application still has the buffers it asked for.
    o.pool_buffers = *cap + kAfXdpFillReserve;
    // Leave the application's share at least two rings' worth.
    while (o.ring_size > 64 && 2u * o.ring_size > *cap) o.ring_size /= 2;
    const uint64_t deadline = SteadyClock::Get().NowNs() + kAfXdpQueueBusyMs * 1'000'000;
    for (;;) {
      auto dev = DpdkDevice::OpenOwned(devargs, uri.text, o, -1, iface);
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
  return DpdkDevice::OpenOwned(devargs, uri.text, o, -1, std::move(iface));
}

}  // namespace bypass::driver::dpdk
