#include "fabric/rdm/peer_table.h"

#include <bit>
#include <cstdint>

namespace bypass::rdm {

PeerTable::PeerTable(uint32_t max_peers, uint32_t ring_size)
    : max_(max_peers),
      ring_size_(ring_size),
      peers_(new Peer[max_peers]),
      tx_rings_(new TxEntry[uint64_t{max_peers} * ring_size]),
      held_(new HeldPacket[uint64_t{max_peers} * ring_size]),
      index_mask_(std::bit_ceil(2 * max_peers) - 1),
      index_keys_(new uint64_t[index_mask_ + 1]()),
      index_vals_(new uint32_t[index_mask_ + 1]) {
  for (uint32_t i = 0; i <= index_mask_; ++i) index_vals_[i] = kNone;
}

uint32_t PeerTable::Slot(uint64_t key) const {
  // Fibonacci hashing of the 48-bit key.
  uint32_t s = static_cast<uint32_t>((key * 0x9e3779b97f4a7c15ull) >> 40) & index_mask_;
  while (index_vals_[s] != kNone && index_keys_[s] != key) s = (s + 1) & index_mask_;
  return s;
}

uint32_t PeerTable::Find(uint32_t ip, uint16_t port) const {
  return index_vals_[Slot(Key(ip, port))];
}

uint32_t PeerTable::Add(uint32_t ip, uint16_t port) {
  if (count_ == max_) return kNone;
  const uint64_t key = Key(ip, port);
  const uint32_t s = Slot(key);
  const uint32_t i = count_++;
  index_keys_[s] = key;
  index_vals_[s] = i;
  Peer& p = peers_[i];
  p = Peer{};
  p.in_use = true;
  p.tx_ring = &tx_rings_[uint64_t{i} * ring_size_];
  p.held = &held_[uint64_t{i} * ring_size_];
  p.ring_mask = ring_size_ - 1;
  return i;
}

}  // namespace bypass::rdm
