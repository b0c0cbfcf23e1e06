// DpdkDevice::OpenOwned and DpdkDevice::Attach: bringing a port up, or
// taking queues of one the application brought up.
#include <rte_dev.h>
#include <rte_ethdev.h>
#include <rte_flow.h>
#include <rte_mbuf.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "driver/clock.h"
#include "driver/dpdk/af_xdp.h"
#include "driver/dpdk/eal.h"
#include "driver/dpdk/port.h"
#include "driver/dpdk/queue_pair.h"

namespace bypass::driver::dpdk {
namespace {

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

}  // namespace

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
  const bool af_xdp = IsAfXdp(name);
  const uint32_t data_room =
      af_xdp ? AfXdpDataRoom(opts.mtu) : RTE_PKTMBUF_HEADROOM + std::max<uint32_t>(frame, 2048);
  if (af_xdp) {
    if (absl::Status s = CheckAfXdpObjectFits(opts.mtu, data_room); !s.ok()) return s;
  }
  if (absl::Status s = dev->CreatePools(opts, nq, data_room, socket, af_xdp); !s.ok()) return s;
  // af_xdp: the sockets its queues open, for the destructor to close the
  // ones the PMD leaves (see CloseLeftXskSockets).
  const std::vector<XskSocket> xsk_before = af_xdp ? XskSockets() : std::vector<XskSocket>{};
  for (uint16_t q = 0; q < nq; ++q) {
    int rc = rte_eth_rx_queue_setup(port, q, nb_rxd, socket, nullptr, dev->pools_[q]);
    if (af_xdp) NoteNewXskSockets(xsk_before, &dev->xsk_fds_);
    // OpenAfXdp tries again on kAborted (see kAfXdpQueueBusyMs in af_xdp.cc).
    if (rc != 0 && af_xdp) {
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
      // On the thread memif's handshake runs on (RunOnInterruptThread).
      RunOnInterruptThread([](uint32_t p) { rte_eth_dev_stop(static_cast<uint16_t>(p)); }, port);
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
  // Whether the port can steer: create a rule and take it away again.
  // rte_flow_validate is not enough: net_tap validates rules it then cannot
  // create when the kernel lacks the multiq qdisc.
  rte_flow_error err{};
  if (rte_flow* probe = dev->CreateUdpFlow(4791, 0, &err); probe != nullptr) {
    dev->info_.can_steer = rte_flow_destroy(port, probe, &err) == 0;
  }
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

}  // namespace bypass::driver::dpdk
