#include "driver/shm/area.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "driver/host.h"

namespace bypass::driver::shm {
namespace {

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

std::atomic<int> reserve_failure{0};  // FailReservationsForTesting

// A regular file of this user: anything else under an area's name was put
// there by someone else (/dev/shm is writable by all) or is debris, and
// says nothing about an owner of ours.
bool Ours(const struct stat& st) { return S_ISREG(st.st_mode) && st.st_uid == geteuid(); }

std::string Errno(int e) { return std::strerror(e); }

// A uint32_t of decimal digits at s[*at...] up to `stop`.
std::optional<uint32_t> ParseDecimal(const std::string& s, size_t* at, char stop) {
  uint64_t v = 0;
  size_t i = *at;
  for (; i < s.size() && s[i] != stop; ++i) {
    if (s[i] < '0' || s[i] > '9' || i - *at >= 10) return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(s[i] - '0');
  }
  if (i == *at || i >= s.size() || v > UINT32_MAX) return std::nullopt;
  *at = i + 1;
  return static_cast<uint32_t>(v);
}

}  // namespace

AreaLayout AreaLayout::For(uint32_t max_frame, uint32_t lanes, uint32_t slots) {
  AreaLayout l;
  l.slot_bytes = static_cast<uint32_t>(RoundUp(max_frame, 64));
  l.lanes = lanes;
  l.slots = slots;
  l.frames_offset = RoundUp(kLensOffset + sizeof(uint32_t) * slots, 64);
  l.lane_stride = RoundUp(l.frames_offset + uint64_t{slots} * l.slot_bytes, kAreaPage);
  l.lanes_offset = kAreaPage;
  l.area_bytes = l.lanes_offset + l.lane_stride * lanes;
  return l;
}

std::optional<AreaLayout> AreaLayout::FromHeader(const AreaHeader& h) {
  if (h.magic != kAreaMagic || h.version != kAreaVersion) return std::nullopt;
  if (h.slot_bytes == 0 || h.slot_bytes % 64 != 0 || h.slot_bytes > kMaxSlotBytes) {
    return std::nullopt;
  }
  if (h.lanes == 0 || h.lanes > kMaxLanes) return std::nullopt;
  if (h.slots < 2 || h.slots > kMaxSlots || (h.slots & (h.slots - 1)) != 0) return std::nullopt;
  const AreaLayout l = For(h.slot_bytes, h.lanes, h.slots);
  if (l.lane_stride != h.lane_stride || l.lanes_offset != h.lanes_offset ||
      l.area_bytes != h.area_bytes) {
    return std::nullopt;
  }
  return l;
}

std::string AreaPrefix(uid_t uid) { return absl::StrCat("bypass.u", uid, "."); }

std::string AreaName(uid_t uid, uint32_t pid, uint32_t nonce) {
  char hex[9];
  std::snprintf(hex, sizeof(hex), "%08" PRIx32, nonce);
  return absl::StrCat(AreaPrefix(uid), pid, ".", hex);
}

std::optional<uint32_t> AreaPid(uid_t uid, const std::string& name) {
  const std::string prefix = AreaPrefix(uid);
  if (name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  size_t at = prefix.size();
  std::optional<uint32_t> pid = ParseDecimal(name, &at, '.');
  if (!pid || name.size() - at != 8) return std::nullopt;
  for (size_t i = at; i < name.size(); ++i) {
    const char c = name[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return std::nullopt;
  }
  return pid;
}

bool AreaAlive(const std::string& name) {
  const std::string path = AreaPath(name);
  // O_NONBLOCK: a FIFO planted under the name must not hang the open.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  struct stat st;
  if (fd < 0) {
    if (errno == ENOENT) return false;
    // Another user's 0600 file, or a symlink, is not ours; a file of ours
    // we cannot open: assume a live owner.
    return lstat(path.c_str(), &st) == 0 && Ours(st);
  }
  // The lock is trusted only on our own file: another user could create a
  // dead area's name and hold its flock to keep its links and lanes.
  const bool alive = fstat(fd, &st) == 0 && Ours(st) &&
                     flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  close(fd);  // releases the lock if we took it
  return alive;
}

bool ReclaimArea(const std::string& name) {
  const std::string path = AreaPath(name);
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return false;
  if (!Ours(st)) {
    // Not an area of ours, so no owner of ours to protect: removed if we
    // may (the sticky /dev/shm lets only root remove another user's file).
    return !S_ISDIR(st.st_mode) && unlink(path.c_str()) == 0;
  }
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return false;
  bool removed = false;
  if (fstat(fd, &st) == 0 && Ours(st) && flock(fd, LOCK_EX | LOCK_NB) == 0) {
    removed = unlink(path.c_str()) == 0;
  }
  close(fd);
  return removed;
}

int ReserveRange(int fd, uint64_t offset, uint64_t len) {
  if (const int e = reserve_failure.load(std::memory_order_relaxed); e != 0) return e;
  while (fallocate(fd, 0, static_cast<off_t>(offset), static_cast<off_t>(len)) != 0) {
    if (errno != EINTR) return errno;
  }
  return 0;
}

void FailReservationsForTesting(int err) {
  reserve_failure.store(err, std::memory_order_relaxed);
}

Mapping& Mapping::operator=(Mapping&& o) noexcept {
  if (this != &o) {
    if (base_ != nullptr) munmap(base_, bytes_);
    base_ = o.base_;
    bytes_ = o.bytes_;
    o.base_ = nullptr;
  }
  return *this;
}

Mapping::~Mapping() {
  if (base_ != nullptr) munmap(base_, bytes_);
}

absl::StatusOr<OwnArea> OwnArea::Create(uint32_t max_frame, uint32_t lanes, uint32_t slots) {
  OwnArea a;
  a.layout_ = AreaLayout::For(max_frame, lanes, slots);
  a.pid_ = static_cast<uint32_t>(getpid());
  a.pid_ns_ = PidNamespaceId();
  // The file is made nameless (O_TMPFILE), sized, initialised and locked,
  // then linked under its name: nobody can see it unlocked or half-written.
  const int fd = open(kShmDir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("shm: cannot create an area file in ", kShmDir,
                                               ": ", Errno(errno),
                                               " (needs a tmpfs at /dev/shm)"));
  }
  a.fd_ = fd;  // closed by ~OwnArea on every error below
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    return absl::InternalError(absl::StrCat("shm: flock on a new area file: ", Errno(errno)));
  }
  if (ftruncate(fd, static_cast<off_t>(a.layout_.area_bytes)) != 0) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "shm: sizing an area file to ", a.layout_.area_bytes, " bytes in ", kShmDir, ": ",
        Errno(errno), " (fewer lanes=, slots= or a smaller mtu= make it smaller)"));
  }
  // The header page is written now and by senders later (active bits):
  // allocated up front, so a full /dev/shm is this error and not a SIGBUS.
  // Each lane is reserved by the sender that claims it.
  if (const int e = ReserveRange(fd, 0, a.layout_.lanes_offset); e != 0) {
    return absl::ResourceExhaustedError(absl::StrCat("shm: reserving an area's header in ",
                                                     kShmDir, ": ", Errno(e),
                                                     " (is it full? df ", kShmDir, ")"));
  }
  void* base = mmap(nullptr, a.layout_.area_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("shm: mapping ", a.layout_.area_bytes, " bytes: ", Errno(errno)));
  }
  a.map_ = Mapping(static_cast<uint8_t*>(base), a.layout_.area_bytes);
  const std::string proc = absl::StrCat("/proc/self/fd/", fd);
  for (int attempt = 0;; ++attempt) {
    uint32_t nonce = 0;
    while (nonce == 0) {
      if (getrandom(&nonce, sizeof(nonce), 0) != sizeof(nonce)) {
        return absl::InternalError(absl::StrCat("shm: getrandom: ", Errno(errno)));
      }
    }
    AreaHeader* h = new (a.map_.base()) AreaHeader{};
    h->magic = kAreaMagic;
    h->version = kAreaVersion;
    h->pid = a.pid_;
    h->nonce = nonce;
    h->slot_bytes = a.layout_.slot_bytes;
    h->lanes = a.layout_.lanes;
    h->slots = a.layout_.slots;
    h->lane_stride = a.layout_.lane_stride;
    h->lanes_offset = a.layout_.lanes_offset;
    h->area_bytes = a.layout_.area_bytes;
    h->pid_ns = a.pid_ns_;
    const std::string name = AreaName(geteuid(), a.pid_, nonce);
    // linkat through /proc needs no privilege (AT_EMPTY_PATH would).
    if (linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, AreaPath(name).c_str(), AT_SYMLINK_FOLLOW) == 0) {
      a.name_ = name;
      a.nonce_ = nonce;
      return a;
    }
    if (errno != EEXIST || attempt >= 8) {
      return absl::UnavailableError(absl::StrCat("shm: naming area file ", AreaPath(name), ": ",
                                                 Errno(errno)));
    }
  }
}

OwnArea::OwnArea(OwnArea&& o) noexcept
    : name_(std::move(o.name_)),
      pid_(o.pid_),
      nonce_(o.nonce_),
      pid_ns_(o.pid_ns_),
      layout_(o.layout_),
      map_(std::move(o.map_)),
      fd_(o.fd_) {
  o.fd_ = -1;
  o.name_.clear();
}

OwnArea::~OwnArea() {
  // Unlinked while still locked, so no reclaimer can mistake it for a dead one.
  if (!name_.empty()) unlink(AreaPath(name_).c_str());
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<Mapping> MapPeerArea(const std::string& name, AreaLayout* layout, FileId* id) {
  const std::string path = AreaPath(name);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("shm: ", path, ": ", Errno(errno)));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      static_cast<uint64_t>(st.st_size) < kAreaPage) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat("shm: ", path, " is not an area of ours"));
  }
  AreaHeader h;
  if (pread(fd, &h, sizeof(h), 0) != static_cast<ssize_t>(sizeof(h))) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat("shm: ", path, ": short header"));
  }
  std::optional<AreaLayout> l = AreaLayout::FromHeader(h);
  if (!l || l->area_bytes > static_cast<uint64_t>(st.st_size)) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("shm: ", path, ": bad header (magic, version or sizes)"));
  }
  // Its owner reads our memory by the pid we send (process_vm_readv): a pid
  // of another pid namespace names another process, or none.
  if (h.pid_ns != PidNamespaceId()) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(
        "shm: ", path, ": its owner is in another pid namespace (", h.pid_ns, ")"));
  }
  void* base = mmap(nullptr, l->area_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);  // the mapping keeps the file
  if (base == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("shm: mapping ", path, ": ", Errno(errno)));
  }
  *layout = *l;
  *id = FileId{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  return Mapping(static_cast<uint8_t*>(base), l->area_bytes);
}

int ReopenPeerArea(const std::string& name, const FileId& id) {
  const int fd = open(AreaPath(name).c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return -1;
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_dev) != id.dev ||
      static_cast<uint64_t>(st.st_ino) != id.ino) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace bypass::driver::shm
