// A DPDK RX/TX queue pair behind the driver contract.
#ifndef BYPASS_DRIVER_DPDK_QUEUE_PAIR_H_
#define BYPASS_DRIVER_DPDK_QUEUE_PAIR_H_

#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <cstdint>
#include <memory>

#include "driver/device.h"

namespace bypass::driver::dpdk {

// One queue of a DPDK port. Packets are descriptors from a fixed table sized
// at open (mbufs may come from an application's mempool, whose private area
// we cannot use); Packet::backend is the rte_mbuf*. Single-threaded.
class DpdkQueuePair final : public QueuePair {
 public:
  // `descriptors` bounds how many packets the caller may hold at once; size
  // it to every mbuf that can reach this queue.
  DpdkQueuePair(uint16_t id, uint16_t port, uint16_t hw_queue, rte_mempool* tx_pool,
                uint32_t descriptors);
  DpdkQueuePair(const DpdkQueuePair&) = delete;
  DpdkQueuePair& operator=(const DpdkQueuePair&) = delete;

  uint16_t RxBurst(absl::Span<Packet*> out) override;
  uint16_t TxBurst(absl::Span<Packet* const> pkts) override;
  bool AllocBulk(absl::Span<Packet*> out) override;
  void FreeBulk(absl::Span<Packet* const> pkts) override;
  uint32_t PoolAvailable() const override;
  uint32_t PoolCapacity() const override;
  QueueStats stats() const override { return stats_; }
  // The port's rte_eth_stats (eth_) and xstats (xstat_): port_stats.cc.
  void AppendCounters(NamedCounters* out) const override;
  uint16_t id() const override { return id_; }

  uint16_t hw_queue() const { return hw_queue_; }
  // PacketOffload bits every received frame carries besides the NIC's
  // checksum verdicts (kRxIntact on memif).
  void set_rx_flags(uint16_t flags) { rx_flags_ = flags; }

 private:
  static constexpr uint16_t kChunk = 64;

  Packet* TakeDescriptor() { return free_[--free_count_]; }
  void ReturnDescriptor(Packet* p) { free_[free_count_++] = p; }
  void Describe(rte_mbuf* m, Packet* p) const;

  uint16_t id_;
  uint16_t port_;
  uint16_t hw_queue_;
  rte_mempool* pool_;
  std::unique_ptr<Packet[]> table_;
  std::unique_ptr<Packet*[]> free_;
  uint32_t free_count_ = 0;
  uint32_t descriptors_ = 0;
  uint16_t rx_flags_ = 0;
  QueueStats stats_;
};

}  // namespace bypass::driver::dpdk

#endif  // BYPASS_DRIVER_DPDK_QUEUE_PAIR_H_
