#include "fabric/rdm/peer_table.h"

#include <bit>
#include <cstdint>

namespace bypass::rdm {

PeerTable::PeerTable(uint32_t max_peers, uint32_t ring_size)
    : max_(max_peers),
      ring_size_(ring_size),
      generation_(new uint32_t[max_peers]()),
      free_(new uint32_t[max_peers]),
      peers_(new Peer[max_peers]),
      tx_rings_(new TxEntry[uint64_t{max_peers} * ring_size]),
      held_(new HeldPacket[uint64_t{max_peers} * ring_size]),
      index_mask_(std::bit_ceil(2 * max_peers) - 1),
      index_keys_(new uint64_t[index_mask_ + 1]()),
      index_vals_(new uint32_t[index_mask_ + 1]) {
  for (uint32_t i = 0; i <= index_mask_; ++i) index_vals_[i] = kNone;
}

uint32_t PeerTable::Slot(uint64_t key) const {
  uint32_t s = Home(key);
  while (index_vals_[s] != kNone && index_keys_[s] != key) s = (s + 1) & index_mask_;
  return s;
}

uint32_t PeerTable::Find(uint32_t ip, uint16_t port) const {
  return index_vals_[Slot(Key(ip, port))];
}

uint32_t PeerTable::Add(uint32_t ip, uint16_t port) {
  if (count_ == max_ && free_count_ == 0) return kNone;
  const uint64_t key = Key(ip, port);
  const uint32_t s = Slot(key);
  const uint32_t i = free_count_ > 0 ? free_[--free_count_] : count_++;
  index_keys_[s] = key;
  index_vals_[s] = i;
  Peer& p = peers_[i];
  const bool queued = p.queued;
  p = Peer{};
  p.queued = queued;
  p.in_use = true;
  p.tx_ring = &tx_rings_[uint64_t{i} * ring_size_];
  p.held = &held_[uint64_t{i} * ring_size_];
  p.ring_mask = ring_size_ - 1;
  return i;
}

void PeerTable::Remove(uint32_t i) {
  Peer& p = peers_[i];
  // Backward-shift deletion keeps every probe chain unbroken without
  // tombstones: entries after the hole move into it when their home slot
  // does not lie cyclically in (hole, their position].
  uint32_t hole = Slot(Key(p.addr.ip.value, p.addr.udp_port));
  index_vals_[hole] = kNone;
  for (uint32_t s = (hole + 1) & index_mask_; index_vals_[s] != kNone; s = (s + 1) & index_mask_) {
    const uint32_t home = Home(index_keys_[s]);
    const bool stays = hole <= s ? (hole < home && home <= s) : (hole < home || home <= s);
    if (stays) continue;
    index_keys_[hole] = index_keys_[s];
    index_vals_[hole] = index_vals_[s];
    index_vals_[s] = kNone;
    hole = s;
  }
  const bool queued = p.queued;
  p = Peer{};
  p.queued = queued;
  p.tx_ring = &tx_rings_[uint64_t{i} * ring_size_];
  p.held = &held_[uint64_t{i} * ring_size_];
  p.ring_mask = ring_size_ - 1;
  generation_[i] = (generation_[i] + 1) % kGenerations;
  free_[free_count_++] = i;
}

}  // namespace bypass::rdm
