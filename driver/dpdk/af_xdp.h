// What DPDK 22.11's af_xdp PMD needs that other ports do not: UMEM-shaped
// pools, a queue pair that counts the PMD's own mbufs, the memlock limit,
// the AF_XDP sockets the PMD leaks, and retrying a queue the kernel has not
// released yet. Internal to driver/dpdk.
#ifndef BYPASS_DRIVER_DPDK_AF_XDP_H_
#define BYPASS_DRIVER_DPDK_AF_XDP_H_

#include <rte_ethdev.h>
#include <rte_mempool.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "driver/device.h"
#include "driver/dpdk/queue_pair.h"

namespace bypass::driver::dpdk {

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
inline constexpr uint32_t kAfXdpFillReserve = 2048;  // XSK_RING_CONS__DEFAULT_NUM_DESCS

// Whether `devargs` (or a device name) is an af_xdp vdev.
inline bool IsAfXdp(const std::string& devargs) { return devargs.rfind("net_af_xdp", 0) == 0; }

// `devargs` with bypass's defaults for the af_xdp PMD where they name none:
// busy_budget=0. The PMD's default (64) turns on the kernel's preferred
// busy polling, for which every RxBurst that finds the ring empty makes a
// recvfrom: a syscall per empty poll (17 per 64 B round trip across two
// namespaces over veth), which the kernel needs only where the NIC's
// interrupts are deferred (napi_defer_hard_irqs, gro_flush_timeout); over
// veth, and a NIC in its default setting, the frames reach the ring from
// softirq without it. Giving busy_budget= keeps the PMD's behaviour.
std::string WithAfXdpDefaults(const std::string& devargs);

// The MTU of an af_xdp device given no mtu= (nor another MTU than the
// default in its options) on an interface of MTU `link_mtu` (0: unknown):
// the link's, from 1500 up to AfXdpMaxMtu(), as the kernel UDP device
// follows its link; a 9000-byte link gets 3502-byte frames.
uint32_t AfXdpMtuFor(uint32_t link_mtu);

// The bytes one pool object of `data_room` takes (mempool header included).
uint32_t PoolObjectBytes(uint32_t data_room);

// The data room of an af_xdp pool's mbufs for `mtu`. The kernel writes a
// received frame XDP_PACKET_HEADROOM (256) bytes into the UMEM chunk past
// the headroom the PMD gives it (mempool header, mbuf, RTE_PKTMBUF_HEADROOM)
// and drops, counting it in XDP_STATISTICS' rx_dropped only, a frame longer
// than what is left of the chunk: the data room holds that headroom too.
// Without it, an MTU above about 1770 lost its longest frames silently.
uint32_t AfXdpDataRoom(uint32_t mtu);

// The largest MTU whose af_xdp pool object (AfXdpDataRoom) fits in a page:
// 3502 with 4 KiB pages. DPDK 22.11's PMD reports 3542 (it counts the
// mempool header as 24 bytes; a pool's is cache-line aligned, 64).
uint32_t AfXdpMaxMtu();

// An error unless one pool object of `data_room` fits in the page the kernel
// takes as a UMEM chunk at most.
absl::Status CheckAfXdpObjectFits(uint32_t mtu, uint32_t data_room);

// A pktmbuf pool in one memory chunk with its objects packed back to back
// across page boundaries, as the af_xdp PMD's UMEM needs (see
// kAfXdpFillReserve); rte_pktmbuf_pool_create cannot ask for that. Its
// mbufs have no IOVA, which AF_XDP (the kernel copies or maps by address)
// does not use. Null with rte_errno set when it cannot.
rte_mempool* CreateUmemPool(const std::string& name, uint32_t count, uint16_t data_room,
                            int socket);

// An AF_XDP socket of this process: its descriptor and inode.
using XskSocket = std::pair<int, ino_t>;

// The AF_XDP sockets open in this process.
std::vector<XskSocket> XskSockets();

// Appends to `*opened` the AF_XDP sockets open now that are neither in
// `before` nor already in `*opened`: those an RX queue setup just opened.
void NoteNewXskSockets(const std::vector<XskSocket>& before, std::vector<XskSocket>* opened);

// Closes the sockets of `fds` that are still the same AF_XDP sockets, which
// DPDK 22.11.5+'s af_xdp PMD leaves open when it closes a port (see af_xdp.cc).
void CloseLeftXskSockets(const std::vector<XskSocket>& fds);

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
  AfXdpQueuePair(const AfXdpQueuePair&) = delete;
  AfXdpQueuePair& operator=(const AfXdpQueuePair&) = delete;

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
  void AppendCounters(NamedCounters* out) const override { inner_.AppendCounters(out); }
  uint16_t id() const override { return inner_.id(); }
  uint16_t hw_queue() const { return hw_queue_; }

 private:
  DpdkQueuePair inner_;
  uint16_t port_;
  uint16_t hw_queue_;
};

// Opens the af_xdp vdev `devargs` (dpdk:net_af_xdp...): takes the MTU of
// interface `iface` where none is given (AfXdpMtuFor), checks its ring
// size, sizes its pools to RLIMIT_MEMLOCK and the PMD's fill ring, and
// retries while the kernel still holds the interface queue.
absl::StatusOr<std::unique_ptr<Device>> OpenAfXdp(const std::string& devargs,
                                                  const std::string& uri_text,
                                                  const DeviceOptions& opts,
                                                  const std::optional<std::string>& iface);

}  // namespace bypass::driver::dpdk

#endif  // BYPASS_DRIVER_DPDK_AF_XDP_H_
