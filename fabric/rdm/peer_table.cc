#include "fabric/rdm/peer_table.h"

#include <bit>
#include <cstdint>

namespace bypass::rdm {

PeerTable::PeerTable(uint32_t max_peers)
    : max_(max_peers),
      generation_(new uint32_t[max_peers]()),
      in_use_(new bool[max_peers]()),
      addrs_(new Address[max_peers]),
      free_(new uint32_t[max_peers]),
      index_mask_(std::bit_ceil(2 * max_peers) - 1),
      index_(new uint32_t[index_mask_ + 1]) {
  static_assert(PeerId::kSlotBits + 11 < 32, "an entry's tag and slot are never kNone");
  for (uint32_t i = 0; i <= index_mask_; ++i) index_[i] = kNone;
}

uint32_t PeerTable::Slot(uint64_t key) const {
  const uint64_t h = Hash(key);
  const uint32_t tag = Tag(h);
  uint32_t s = Home(h);
  for (uint32_t e; (e = index_[s]) != kNone; s = (s + 1) & index_mask_) {
    if (e >> PeerId::kSlotBits == tag && KeyOf(e & PeerId::kSlotMask) == key) break;
  }
  return s;
}

uint32_t PeerTable::Find(uint32_t ip, uint16_t port) const {
  const uint32_t e = index_[Slot(Key(ip, port))];
  return e == kNone ? kNone : e & PeerId::kSlotMask;
}

uint32_t PeerTable::Add(const Address& addr) {
  if (count_ == max_ && free_count_ == 0) return kNone;
  const uint64_t key = Key(addr.ip.value, addr.udp_port);
  const uint32_t s = Slot(key);
  const uint32_t i = free_count_ > 0 ? free_[--free_count_] : count_++;
  index_[s] = Tag(Hash(key)) << PeerId::kSlotBits | i;
  in_use_[i] = true;
  addrs_[i] = addr;
  return i;
}

void PeerTable::Remove(uint32_t i) {
  // Backward-shift deletion keeps every probe chain unbroken without
  // tombstones: entries after the hole move into it when their home slot
  // does not lie cyclically in (hole, their position].
  uint32_t hole = Slot(KeyOf(i));
  index_[hole] = kNone;
  for (uint32_t s = (hole + 1) & index_mask_; index_[s] != kNone; s = (s + 1) & index_mask_) {
    const uint32_t home = Home(Hash(KeyOf(index_[s] & PeerId::kSlotMask)));
    const bool stays = hole <= s ? (hole < home && home <= s) : (hole < home || home <= s);
    if (stays) continue;
    index_[hole] = index_[s];
    index_[s] = kNone;
    hole = s;
  }
  in_use_[i] = false;
  addrs_[i] = Address{};
  generation_[i] = (generation_[i] + 1) % kGenerations;
  free_[free_count_++] = i;
}

}  // namespace bypass::rdm
