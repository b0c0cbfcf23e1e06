// DpdkDevice: a configured port's queues, pools, flows, link and info.
#include "driver/dpdk/port.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <rte_dev.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_flow.h>
#include <rte_mbuf.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "driver/dpdk/af_xdp.h"
#include "driver/dpdk/eal.h"
#include "driver/dpdk/queue_pair.h"

namespace bypass::driver::dpdk {
namespace {

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

}  // namespace

std::string ErrnoText(int err) { return rte_strerror(err < 0 ? -err : err); }

int NextObjectSerial() {
  static std::atomic<int> counter{0};
  return counter++;
}

bool LooksLikePci(const std::string& name) {
  // dddd:bb:dd.f or bb:dd.f
  int colons = 0;
  for (char c : name) colons += c == ':';
  return (colons == 1 || colons == 2) && name.find('.') != std::string::npos &&
         name.rfind("net_", 0) != 0;
}

DpdkDevice::~DpdkDevice() {
  for (rte_flow* f : flows_) {
    rte_flow_error err;
    rte_flow_destroy(port_, f, &err);
  }
  if (info_.owns_port) {
    if (started_) {
      if (info_.driver == "net_memif") {
        // On the thread memif's own disconnect runs on (RunOnInterruptThread).
        RunOnInterruptThread([](uint32_t port) { rte_eth_dev_stop(static_cast<uint16_t>(port)); },
                             port_);
      } else {
        rte_eth_dev_stop(port_);
      }
    }
    AwaitInterruptThread();
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

absl::Status DpdkDevice::SteerUdpPort(uint16_t udp_port, uint16_t q) {
  if (!info_.can_steer) {
    return absl::UnimplementedError(absl::StrCat(
        info_.driver, " cannot steer flows; demultiplex UDP ports in software from queue 0"));
  }
  if (q >= info_.num_queues) {
    return absl::InvalidArgumentError(absl::StrCat("queue ", q, " >= ", info_.num_queues));
  }
  rte_flow_error err{};
  rte_flow* flow = CreateUdpFlow(udp_port, queue_hw(q), &err);
  if (flow == nullptr) {
    return absl::InternalError(absl::StrCat("rte_flow_create for UDP port ", udp_port, ": ",
                                            err.message ? err.message : "unknown error"));
  }
  flows_.push_back(flow);
  return absl::OkStatus();
}

LinkState DpdkDevice::link_state() const {
  rte_eth_link link{};
  if (rte_eth_link_get_nowait(port_, &link) != 0) return LinkState::kDown;
  return link.link_status == RTE_ETH_LINK_UP ? LinkState::kUp : LinkState::kDown;
}

absl::Status DpdkDevice::SetLinkState(LinkState state) {
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

uint16_t DpdkDevice::queue_hw(uint16_t q) const {
  if (const auto* x = dynamic_cast<const AfXdpQueuePair*>(queues_[q].get())) return x->hw_queue();
  return static_cast<const DpdkQueuePair&>(*queues_[q]).hw_queue();
}

rte_flow* DpdkDevice::CreateUdpFlow(uint16_t udp_port, uint16_t hw_queue, rte_flow_error* err) {
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
  return rte_flow_create(port_, &attr, pattern, actions, err);
}

absl::Status DpdkDevice::CreatePools(const DeviceOptions& opts, uint16_t n, uint32_t data_room,
                                     int socket, bool af_xdp) {
  const uint32_t count = opts.pool_buffers != 0 ? opts.pool_buffers : 4u * opts.ring_size;
  for (uint16_t q = 0; q < n; ++q) {
    std::string name = absl::StrCat("bypass", getpid() % 100000, "_", NextObjectSerial());
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
  // memif's TX takes only what the peer's ring has room for: no drops.
  info_.lossless = info_.driver == "net_memif";
  // Nor can they change a byte: frames are copied through shared memory.
  info_.integrity = info_.driver == "net_memif";
  if (info_.integrity) {
    for (auto& q : queues_) static_cast<DpdkQueuePair&>(*q).set_rx_flags(kRxIntact);
  }
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

}  // namespace bypass::driver::dpdk
