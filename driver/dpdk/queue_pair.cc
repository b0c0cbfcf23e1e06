#include "driver/dpdk/queue_pair.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace bypass::driver::dpdk {

DpdkQueuePair::DpdkQueuePair(uint16_t id, uint16_t port, uint16_t hw_queue,
                             rte_mempool* tx_pool, uint32_t descriptors)
    : id_(id),
      port_(port),
      hw_queue_(hw_queue),
      pool_(tx_pool),
      table_(new Packet[descriptors]()),
      free_(new Packet*[descriptors]),
      descriptors_(descriptors) {
  for (uint32_t i = 0; i < descriptors; ++i) free_[free_count_++] = &table_[descriptors - 1 - i];
}

void DpdkQueuePair::Describe(rte_mbuf* m, Packet* p) const {
  p->data = rte_pktmbuf_mtod(m, uint8_t*);
  p->len = rte_pktmbuf_pkt_len(m);
  p->capacity = m->buf_len - m->data_off;
  p->backend = reinterpret_cast<uint64_t>(m);
  p->rx_queue = id_;
  uint16_t ol = 0;
  if ((m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK) == RTE_MBUF_F_RX_IP_CKSUM_GOOD) {
    ol |= kRxIpChecksumGood;
  }
  if ((m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK) == RTE_MBUF_F_RX_L4_CKSUM_GOOD) {
    ol |= kRxL4ChecksumGood;
  }
  p->ol_flags = ol;
}

uint16_t DpdkQueuePair::RxBurst(absl::Span<Packet*> out) {
  rte_mbuf* mbufs[kChunk];
  const uint16_t want = static_cast<uint16_t>(
      std::min<size_t>({out.size(), static_cast<size_t>(kChunk), free_count_}));
  if (want == 0) return 0;
  const uint16_t got = rte_eth_rx_burst(port_, hw_queue_, mbufs, want);
  uint16_t n = 0;
  for (uint16_t i = 0; i < got; ++i) {
    rte_mbuf* m = mbufs[i];
    // Ports are configured without scatter and with buffers that hold a whole
    // frame, so a chained mbuf means a frame longer than the MTU: drop it.
    if (m->nb_segs != 1) {
      rte_pktmbuf_free(m);
      ++stats_.rx_dropped;
      continue;
    }
    Packet* p = TakeDescriptor();
    Describe(m, p);
    p->ol_flags |= rx_flags_;
    stats_.rx_bytes += p->len;
    out[n++] = p;
  }
  stats_.rx_packets += n;
  return n;
}

uint16_t DpdkQueuePair::TxBurst(absl::Span<Packet* const> pkts) {
  rte_mbuf* mbufs[kChunk];
  uint32_t lens[kChunk];
  size_t done = 0;
  while (done < pkts.size()) {
    const uint16_t n = static_cast<uint16_t>(std::min<size_t>(kChunk, pkts.size() - done));
    for (uint16_t i = 0; i < n; ++i) {
      Packet* p = pkts[done + i];
      rte_mbuf* m = reinterpret_cast<rte_mbuf*>(p->backend);
      m->data_off = static_cast<uint16_t>(p->data - static_cast<uint8_t*>(m->buf_addr));
      m->data_len = static_cast<uint16_t>(p->len);
      m->pkt_len = p->len;
      uint64_t ol = 0;
      if (p->ol_flags & kTxIpChecksum) ol |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM;
      if (p->ol_flags & kTxUdpChecksum) ol |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_UDP_CKSUM;
      m->ol_flags = ol;
      if (ol != 0) {
        m->l2_len = 14;
        m->l3_len = 20;
      }
      lens[i] = p->len;
      mbufs[i] = m;
    }
    // The PMD may free sent mbufs inside tx_burst: lengths were kept above.
    const uint16_t sent = rte_eth_tx_burst(port_, hw_queue_, mbufs, n);
    for (uint16_t i = 0; i < sent; ++i) {
      stats_.tx_bytes += lens[i];
      ReturnDescriptor(pkts[done + i]);
    }
    stats_.tx_packets += sent;
    done += sent;
    if (sent != n) {
      stats_.tx_ring_full += pkts.size() - done;
      break;
    }
  }
  return static_cast<uint16_t>(done);
}

bool DpdkQueuePair::AllocBulk(absl::Span<Packet*> out) {
  if (out.size() > free_count_) {
    ++stats_.alloc_failures;
    return false;
  }
  rte_mbuf* mbufs[kChunk];
  size_t done = 0;
  while (done < out.size()) {
    const unsigned n = static_cast<unsigned>(std::min<size_t>(kChunk, out.size() - done));
    if (rte_pktmbuf_alloc_bulk(pool_, mbufs, n) != 0) {
      FreeBulk(out.subspan(0, done));  // all or nothing
      ++stats_.alloc_failures;
      return false;
    }
    for (unsigned i = 0; i < n; ++i) {
      Packet* p = TakeDescriptor();
      Describe(mbufs[i], p);
      p->len = 0;
      out[done + i] = p;
    }
    done += n;
  }
  return true;
}

void DpdkQueuePair::FreeBulk(absl::Span<Packet* const> pkts) {
  rte_mbuf* mbufs[kChunk];
  size_t done = 0;
  while (done < pkts.size()) {
    const unsigned n = static_cast<unsigned>(std::min<size_t>(kChunk, pkts.size() - done));
    for (unsigned i = 0; i < n; ++i) {
      Packet* p = pkts[done + i];
      if (free_count_ >= descriptors_ || p < &table_[0] || p >= &table_[descriptors_]) {
        std::fprintf(stderr, "bypass: FreeBulk of a packet not owned by dpdk queue %u\n", id_);
        std::abort();
      }
      mbufs[i] = reinterpret_cast<rte_mbuf*>(p->backend);
      ReturnDescriptor(p);
    }
    rte_pktmbuf_free_bulk(mbufs, n);
    done += n;
  }
}

uint32_t DpdkQueuePair::PoolAvailable() const { return rte_mempool_avail_count(pool_); }
uint32_t DpdkQueuePair::PoolCapacity() const { return pool_->size; }

}  // namespace bypass::driver::dpdk
