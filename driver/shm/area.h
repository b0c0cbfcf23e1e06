// The shared-memory area of one shm device: its file under /dev/shm, its
// layout (a header, then SPSC lanes of frame slots, one lane per sender), the
// names that tie areas, owners and processes together, and the liveness test
// (an flock held by the owner for its whole life).
#ifndef BYPASS_DRIVER_SHM_AREA_H_
#define BYPASS_DRIVER_SHM_AREA_H_

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace bypass::driver::shm {

inline constexpr uint64_t kAreaMagic = 0x316d687373707962;  // "bypsshm1" in memory
// 2: the header says the owner's pid namespace (pid_ns).
inline constexpr uint32_t kAreaVersion = 2;
inline constexpr uint32_t kMaxLanes = 1024;
inline constexpr uint32_t kMaxSlots = 4096;
inline constexpr uint32_t kMaxSlotBytes = 65536;
inline constexpr size_t kAreaPage = 4096;

// Where area files live: the tmpfs every process of the host sees.
inline constexpr char kShmDir[] = "/dev/shm";

// The header at offset 0 of an area. Written by the owner before the file
// gets its name, read-only afterwards except `active` (atomic bit words,
// set by senders that claim a lane, cleared by the owner).
struct AreaHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t pid;
  uint32_t nonce;
  uint32_t slot_bytes;  // frame bytes per slot, a multiple of 64
  uint32_t lanes;
  uint32_t slots;       // per lane, a power of two
  uint64_t lane_stride;
  uint64_t lanes_offset;
  uint64_t area_bytes;
  // The owner's PidNamespaceId(): senders of another pid namespace refuse
  // the area, as a receiver reads its senders' memory by pid.
  uint64_t pid_ns;
  // At kActiveOffset: (lanes + 63) / 64 uint64_t words, bit i = lane i has
  // (or had) a sender.
};
static_assert(sizeof(AreaHeader) <= 64);
inline constexpr size_t kActiveOffset = 64;

// The head of one lane. Each index is on its own cache line. `owner` is 0
// when free, else the owner word (OwnerWord) of the sending device; `tail`
// is written by that sender only, `head` by the area's owner only. Then, at
// kLensOffset, `slots` uint32_t frame lengths, and at frames_offset the
// frame slots.
struct LaneHeader {
  alignas(64) uint64_t owner;
  uint32_t tail;
  alignas(64) uint32_t head;
};
static_assert(sizeof(LaneHeader) == 128);
inline constexpr size_t kLensOffset = sizeof(LaneHeader);

// Offsets and sizes, computed from the three parameters (never read from a
// peer's memory without recomputing and comparing).
struct AreaLayout {
  uint32_t slot_bytes = 0;
  uint32_t lanes = 0;
  uint32_t slots = 0;
  uint64_t frames_offset = 0;  // within a lane
  uint64_t lane_stride = 0;    // page-aligned, so a lane's untouched slots cost nothing
  uint64_t lanes_offset = 0;
  uint64_t area_bytes = 0;

  // REQUIRES: max_frame <= kMaxSlotBytes, 1 <= lanes <= kMaxLanes, slots a
  // power of two in [2, kMaxSlots].
  static AreaLayout For(uint32_t max_frame, uint32_t lanes, uint32_t slots);
  // The layout a peer's header claims, if it is one we would have made.
  static std::optional<AreaLayout> FromHeader(const AreaHeader& h);
};

// Atomic access to fields of shared memory (lock-free and address-free).
template <typename T>
std::atomic_ref<T> Shared(T& field) {
  static_assert(std::atomic_ref<T>::is_always_lock_free);
  return std::atomic_ref<T>(field);
}

// The word a sending device writes into the lanes it owns: pid << 32 | nonce.
inline uint64_t OwnerWord(uint32_t pid, uint32_t nonce) {
  return uint64_t{pid} << 32 | nonce;
}

// "bypass.u<uid>.<pid>.<nonce, 8 hex digits>".
std::string AreaName(uid_t uid, uint32_t pid, uint32_t nonce);
// The prefix of every area of `uid`: "bypass.u<uid>.".
std::string AreaPrefix(uid_t uid);
// The pid in an area name, if it is one of `uid`'s.
std::optional<uint32_t> AreaPid(uid_t uid, const std::string& name);
inline std::string AreaPath(const std::string& name) {
  return std::string(kShmDir) + "/" + name;
}

// Whether the owner of area `name` is alive: its file exists, is a regular
// file of ours, and someone holds its flock. A file of another user under
// the name (/dev/shm is writable by all) is not ours and proves nothing: it
// counts as dead. Cold path (open, fstat, flock, close).
bool AreaAlive(const std::string& name);
// Unlinks area `name` if its owner is dead (we take its lock first, so a
// live owner is never touched); a file that is not an area of ours is
// unlinked whatever its lock, where we may (the sticky /dev/shm lets only
// root remove another user's file). Returns true if it was removed.
bool ReclaimArea(const std::string& name);

// Allocates bytes [offset, offset + len) of an area file (fallocate), so
// that touching them through a mapping cannot fault on a full tmpfs: a page
// of a sparse file that tmpfs cannot allocate is a SIGBUS at the store.
// Returns 0 or an errno (ENOSPC).
int ReserveRange(int fd, uint64_t offset, uint64_t len);
// For tests: every ReserveRange fails with `err` until called with 0.
void FailReservationsForTesting(int err);

// A mapping of a whole area, unmapped on destruction.
class Mapping {
 public:
  Mapping() = default;
  Mapping(uint8_t* base, size_t bytes) : base_(base), bytes_(bytes) {}
  Mapping(Mapping&& o) noexcept : base_(o.base_), bytes_(o.bytes_) { o.base_ = nullptr; }
  Mapping& operator=(Mapping&& o) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping();

  uint8_t* base() const { return base_; }
  size_t bytes() const { return bytes_; }

 private:
  uint8_t* base_ = nullptr;
  size_t bytes_ = 0;
};

// This process's own area: created under a fresh random nonce, sized sparse,
// mapped, its header written, and locked (flock LOCK_EX) before its name
// appears, so no reclaimer ever sees it unlocked. Unlinked and unlocked on
// destruction.
class OwnArea {
 public:
  static absl::StatusOr<OwnArea> Create(uint32_t max_frame, uint32_t lanes, uint32_t slots);
  OwnArea(OwnArea&& o) noexcept;
  OwnArea& operator=(OwnArea&&) = delete;
  OwnArea(const OwnArea&) = delete;
  ~OwnArea();

  const std::string& name() const { return name_; }
  uint32_t pid() const { return pid_; }
  uint32_t nonce() const { return nonce_; }
  // PidNamespaceId() at creation, as written in the header.
  uint64_t pid_ns() const { return pid_ns_; }
  uint64_t owner_word() const { return OwnerWord(pid_, nonce_); }
  const AreaLayout& layout() const { return layout_; }
  uint8_t* base() const { return map_.base(); }

 private:
  OwnArea() = default;
  std::string name_;
  uint32_t pid_ = 0;
  uint32_t nonce_ = 0;
  uint64_t pid_ns_ = 0;
  AreaLayout layout_;
  Mapping map_;
  int fd_ = -1;
};

// Which file a name was (a name is unlinked when its owner dies).
struct FileId {
  uint64_t dev = 0;
  uint64_t ino = 0;
};

// Maps a peer's area read-write after checking that it is a regular file of
// ours whose header and size match a layout we would have made, made by a
// process of our pid namespace. `id` says which file it was.
absl::StatusOr<Mapping> MapPeerArea(const std::string& name, AreaLayout* layout, FileId* id);
// Opens area `name` read-write (to reserve lanes in it) if it is still file
// `id`; -1 if it is gone or was replaced.
int ReopenPeerArea(const std::string& name, const FileId& id);

// Lane i of an area. REQUIRES: i < layout.lanes.
inline LaneHeader* LaneAt(uint8_t* base, const AreaLayout& layout, uint32_t i) {
  return reinterpret_cast<LaneHeader*>(base + layout.lanes_offset + layout.lane_stride * i);
}
inline uint64_t* ActiveWords(uint8_t* base) {
  return reinterpret_cast<uint64_t*>(base + kActiveOffset);
}

}  // namespace bypass::driver::shm

#endif  // BYPASS_DRIVER_SHM_AREA_H_
