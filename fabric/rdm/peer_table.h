// The peers of an endpoint: a fixed array found by (IPv4, UDP port) through
// an open-addressing index sized at creation. A peer that restarts or times
// out keeps its slot and PeerId; a removed peer's slot is reused by a later
// Add under a new generation, so its old PeerId stays invalid (Valid() is
// false) instead of naming the newcomer. A PeerId is the slot index in the
// low kIndexBits and the slot's generation above it; generations count
// modulo kGenerations, so an id aliases again only after that many
// removals of the same slot.
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

  static constexpr uint32_t kIndexBits = PeerId::kSlotBits;
  static constexpr uint32_t kIndexMask = PeerId::kSlotMask;
  // 0..kGenerations-1; never 0xfff, so no PeerId equals kAnyPeer.
  static constexpr uint32_t kGenerations = (1u << (32 - kIndexBits)) - 1;

  // The peer at (ip, port), or kNone.
  uint32_t Find(uint32_t ip, uint16_t port) const;
  // A new peer at (ip, port), reset to defaults; kNone when full.
  // REQUIRES: Find(ip, port) == kNone.
  uint32_t Add(uint32_t ip, uint16_t port);
  // Frees slot i (its state reset; `queued` kept, as the engine's work FIFO
  // may still name it) and gives it a new generation.
  // REQUIRES: peer i is in use.
  void Remove(uint32_t i);

  Peer& operator[](uint32_t i) { return peers_[i]; }
  const Peer& operator[](uint32_t i) const { return peers_[i]; }
  // Slots 0..size()-1 have been used; those with in_use are peers now.
  uint32_t size() const { return count_; }
  uint32_t capacity() const { return max_; }
  bool Valid(PeerId id) const {
    const uint32_t i = id.value & kIndexMask;
    return i < count_ && peers_[i].in_use && (id.value >> kIndexBits) == generation_[i];
  }
  // The id of slot i, and the slot of a valid id.
  PeerId Id(uint32_t i) const { return PeerId{generation_[i] << kIndexBits | i}; }
  static uint32_t Index(PeerId id) { return id.value & kIndexMask; }

 private:
  static uint64_t Key(uint32_t ip, uint16_t port) { return uint64_t{ip} << 16 | port; }
  // Fibonacci hashing of the 48-bit key: where its probe starts.
  uint32_t Home(uint64_t key) const {
    return static_cast<uint32_t>((key * 0x9e3779b97f4a7c15ull) >> 40) & index_mask_;
  }
  uint32_t Slot(uint64_t key) const;

  uint32_t max_;
  uint32_t ring_size_;
  uint32_t count_ = 0;
  std::unique_ptr<uint32_t[]> generation_;
  std::unique_ptr<uint32_t[]> free_;  // removed slots, reused first
  uint32_t free_count_ = 0;
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
