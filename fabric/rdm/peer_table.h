// Who an endpoint's peers are: a fixed array of addresses found by (IPv4,
// UDP port) through an open-addressing index sized at creation. A removed
// peer's slot is reused by a later Add under a new generation, so its old
// PeerId stays invalid (Valid() is false) instead of naming the newcomer;
// generations count modulo kGenerations, so an id aliases again only after
// that many removals of the same slot. The stages keep their own per-peer
// state in arrays indexed by the same slots.
#ifndef BYPASS_FABRIC_RDM_PEER_TABLE_H_
#define BYPASS_FABRIC_RDM_PEER_TABLE_H_

#include <cstdint>
#include <memory>

#include "fabric/rdm/index_list.h"
#include "fabric/rdm/types.h"

namespace bypass::rdm {

// Slots, generations and the address index of up to max_peers peers.
class PeerTable {
 public:
  explicit PeerTable(uint32_t max_peers);
  PeerTable(const PeerTable&) = delete;
  PeerTable& operator=(const PeerTable&) = delete;

  // 0..kGenerations-1; never 0xfff, so no PeerId equals kAnyPeer.
  static constexpr uint32_t kGenerations = (1u << (32 - PeerId::kSlotBits)) - 1;

  // The peer at (ip, port), or kNone.
  uint32_t Find(uint32_t ip, uint16_t port) const;
  // A new slot for addr; kNone when full. REQUIRES: Find(ip, port) == kNone.
  uint32_t Add(const Address& addr);
  // Frees slot i and gives it a new generation. REQUIRES: i is in use.
  void Remove(uint32_t i);

  bool in_use(uint32_t i) const { return in_use_[i]; }
  // Its address; the engine updates the incarnation and a learned MAC (the
  // IPv4 and port, which the index is keyed by, never change).
  Address& address(uint32_t i) { return addrs_[i]; }
  const Address& address(uint32_t i) const { return addrs_[i]; }
  // Slots 0..size()-1 have been used; those in_use are peers now.
  uint32_t size() const { return count_; }
  uint32_t capacity() const { return max_; }
  bool full() const { return count_ == max_ && free_count_ == 0; }
  bool Valid(PeerId id) const {
    const uint32_t i = id.slot();
    return i < count_ && in_use_[i] && (id.value >> PeerId::kSlotBits) == generation_[i];
  }
  // The id of slot i.
  PeerId Id(uint32_t i) const { return PeerId{generation_[i] << PeerId::kSlotBits | i}; }

 private:
  static uint64_t Key(uint32_t ip, uint16_t port) { return uint64_t{ip} << 16 | port; }
  uint64_t KeyOf(uint32_t i) const { return Key(addrs_[i].ip.value, addrs_[i].udp_port); }
  // Fibonacci hashing of the 48-bit key: where its probe starts (the top
  // bits), and a tag of 11 bits below them that an index entry keeps, so a
  // probe compares an address only when the tags match.
  static uint64_t Hash(uint64_t key) { return key * 0x9e3779b97f4a7c15ull; }
  uint32_t Home(uint64_t hash) const { return static_cast<uint32_t>(hash >> 40) & index_mask_; }
  static uint32_t Tag(uint64_t hash) {
    return static_cast<uint32_t>(hash >> 29) & 0x7ff;
  }
  // The index position holding key, or the empty one where it would go.
  uint32_t Slot(uint64_t key) const;

  uint32_t max_;
  uint32_t count_ = 0;
  std::unique_ptr<uint32_t[]> generation_;
  std::unique_ptr<bool[]> in_use_;
  std::unique_ptr<Address[]> addrs_;
  std::unique_ptr<uint32_t[]> free_;  // removed slots, reused first
  uint32_t free_count_ = 0;
  // Open addressing, linear probing, never more than half full. An entry
  // is the peer's slot (the low kSlotBits) under its key's tag (11 bits,
  // so no entry is kNone); the key itself is compared through addrs_: 4 B
  // an entry, where a copy of the 48-bit key made 12 (PROTOCOL.md, "Memory
  // per peer").
  uint32_t index_mask_;
  std::unique_ptr<uint32_t[]> index_;  // kNone: empty
};

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_PEER_TABLE_H_
