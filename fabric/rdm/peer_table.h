// The peers of an endpoint: a fixed array found by (IPv4, UDP port) through
// an open-addressing index sized at creation. Peers are never removed; a
// peer that restarts or times out keeps its slot and PeerId.
#ifndef BYPASS_FABRIC_RDM_PEER_TABLE_H_
#define BYPASS_FABRIC_RDM_PEER_TABLE_H_

#include <cstdint>
#include <memory>

#include "fabric/rdm/index_list.h"
#include "fabric/rdm/peer.h"

namespace bypass::rdm {

// Fixed storage for max_peers peers with their TX rings and held-packet rings.
class PeerTable {
 public:
  // ring_size: a power of two, at least the largest window.
  PeerTable(uint32_t max_peers, uint32_t ring_size);
  PeerTable(const PeerTable&) = delete;
  PeerTable& operator=(const PeerTable&) = delete;

  // The peer at (ip, port), or kNone.
  uint32_t Find(uint32_t ip, uint16_t port) const;
  // A new peer at (ip, port), reset to defaults; kNone when full.
  // REQUIRES: Find(ip, port) == kNone.
  uint32_t Add(uint32_t ip, uint16_t port);

  Peer& operator[](uint32_t i) { return peers_[i]; }
  const Peer& operator[](uint32_t i) const { return peers_[i]; }
  uint32_t size() const { return count_; }  // peers 0..size()-1 are in use
  uint32_t capacity() const { return max_; }
  bool Valid(PeerId id) const { return id.value < count_; }

 private:
  static uint64_t Key(uint32_t ip, uint16_t port) { return uint64_t{ip} << 16 | port; }
  uint32_t Slot(uint64_t key) const;

  uint32_t max_;
  uint32_t ring_size_;
  uint32_t count_ = 0;
  std::unique_ptr<Peer[]> peers_;
  std::unique_ptr<TxEntry[]> tx_rings_;
  std::unique_ptr<HeldPacket[]> held_;
  // Open addressing, linear probing, never more than half full.
  uint32_t index_mask_;
  std::unique_ptr<uint64_t[]> index_keys_;
  std::unique_ptr<uint32_t[]> index_vals_;  // kNone: empty
};

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_PEER_TABLE_H_
