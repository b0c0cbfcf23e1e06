#include "driver/shm/registry.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "driver/host.h"
#include "driver/shm/area.h"

namespace bypass::driver::shm {
namespace {

constexpr size_t kGenerationBytes = 64;

std::string Errno(int e) { return std::strerror(e); }

// Holds the directory's flock; released by close, by scope end, or by death.
class DirLock {
 public:
  explicit DirLock(int fd) : fd_(fd) {
    while (flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  ~DirLock() { flock(fd_, LOCK_UN); }
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  int fd_;
};

// mkdir that accepts an existing directory.
int MakeDir(const std::string& path, mode_t mode) {
  if (mkdir(path.c_str(), mode) == 0 || errno == EEXIST) return 0;
  return errno;
}

std::string Advice() { return "give a writable directory of yours with shm:DIR"; }

std::string ModeText(mode_t m) {
  char text[8];
  std::snprintf(text, sizeof(text), "%04o", static_cast<unsigned>(m & 07777));
  return text;
}

// The lstat of directory `dir`; a symlink or a file is refused.
absl::StatusOr<struct stat> StatDirectory(const std::string& dir) {
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("shm: directory ", dir, ": ", Errno(errno), "; ", Advice()));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("shm: ", dir, " is not a directory (a symlink is refused); ", Advice()));
  }
  return st;
}

// The directory holding the per-user directories and keys: others may not
// write in it unless it is sticky (as /tmp), else they could rename a
// user's directory or key away and put their own in its place.
absl::Status CheckBase(const std::string& base) {
  absl::StatusOr<struct stat> st = StatDirectory(base);
  if (!st.ok()) return st.status();
  if ((st->st_mode & 022) != 0 && (st->st_mode & S_ISVTX) == 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("shm: ", base, " has mode ", ModeText(st->st_mode),
                     ": others may replace what is in it; chmod 755 ", base,
                     " (or 1777 for every user's) or ", Advice()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> DefaultDirectory() {
  // Processes that share it must share the network namespace (ports are
  // bound per namespace) and the pid namespace (memory is read by pid).
  const std::string leaf =
      absl::StrCat("u", geteuid(), ".net", NetNamespaceId(), ".pid", PidNamespaceId());
  int err = MakeDir("/run/bypass", 0755);
  std::string failed = "/run/bypass";
  if (err == 0) {
    if (absl::Status s = CheckBase("/run/bypass"); !s.ok()) return s;
    const std::string dir = "/run/bypass/" + leaf;
    err = MakeDir(dir, 0700);
    if (err == 0) return dir;
    failed = dir;
  }
  // Not root: /run/bypass is not ours to write. The per-user runtime
  // directory is.
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  if (xdg != nullptr && xdg[0] == '/') {
    const std::string base = std::string(xdg) + "/bypass";
    int xerr = MakeDir(base, 0700);
    const std::string dir = base + "/" + leaf;
    if (xerr == 0) {
      if (absl::Status s = CheckBase(base); !s.ok()) return s;
      xerr = MakeDir(dir, 0700);
    }
    if (xerr == 0) return dir;
    return absl::PermissionDeniedError(absl::StrCat("shm: cannot create ", failed, " (",
                                                    Errno(err), ") nor ", dir, " (", Errno(xerr),
                                                    "); ", Advice()));
  }
  return absl::PermissionDeniedError(absl::StrCat("shm: cannot create ", failed, " (", Errno(err),
                                                  ") and XDG_RUNTIME_DIR is not set; ", Advice()));
}

absl::StatusOr<std::unique_ptr<Registry>> Registry::Open(const std::string& given) {
  std::string dir = given;
  if (dir.empty()) {
    absl::StatusOr<std::string> d = DefaultDirectory();
    if (!d.ok()) return d.status();
    dir = *d;
  } else if (int err = MakeDir(dir, 0700); err != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("shm: cannot create directory ", dir, ": ", Errno(err), "; ", Advice()));
  }
  absl::StatusOr<struct stat> st = StatDirectory(dir);
  if (!st.ok()) return st.status();
  if (st->st_uid != geteuid()) {
    return absl::PermissionDeniedError(absl::StrCat("shm: directory ", dir, " is owned by uid ",
                                                    st->st_uid, ", not by us (uid ", geteuid(),
                                                    "); ", Advice()));
  }
  if ((st->st_mode & 077) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "shm: directory ", dir, " has mode ", ModeText(st->st_mode),
        ", open to group or others; make it 0700 (chmod 700 ", dir, ") or use another shm:DIR"));
  }
  std::unique_ptr<Registry> r(new Registry());
  r->dir_ = dir;
  r->dir_fd_ = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (r->dir_fd_ < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("shm: opening directory ", dir, ": ", Errno(errno), "; ", Advice()));
  }
  r->lock_fd_ = openat(r->dir_fd_, ".lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (r->lock_fd_ < 0) {
    return absl::PermissionDeniedError(absl::StrCat("shm: cannot write in directory ", dir, " (",
                                                    dir, "/.lock: ", Errno(errno), "); ",
                                                    Advice()));
  }
  const int gen_fd =
      openat(r->dir_fd_, ".generation", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (gen_fd < 0) {
    return absl::PermissionDeniedError(absl::StrCat("shm: ", dir, "/.generation: ", Errno(errno),
                                                    "; ", Advice()));
  }
  {
    DirLock lock(r->lock_fd_);
    struct stat gst;
    // Only ever grown, under the lock: a counter already there is kept.
    if (fstat(gen_fd, &gst) != 0 || (static_cast<size_t>(gst.st_size) < kGenerationBytes &&
                                     ftruncate(gen_fd, kGenerationBytes) != 0)) {
      const int e = errno;
      close(gen_fd);
      return absl::PermissionDeniedError(
          absl::StrCat("shm: ", dir, "/.generation: ", Errno(e), "; ", Advice()));
    }
  }
  void* g = mmap(nullptr, kGenerationBytes, PROT_READ | PROT_WRITE, MAP_SHARED, gen_fd, 0);
  close(gen_fd);
  if (g == MAP_FAILED) {
    return absl::InternalError(absl::StrCat("shm: mapping ", dir, "/.generation: ", Errno(errno)));
  }
  r->generation_ = static_cast<uint64_t*>(g);
  return r;
}

Registry::~Registry() {
  if (generation_ != nullptr) munmap(generation_, kGenerationBytes);
  if (lock_fd_ >= 0) close(lock_fd_);
  if (dir_fd_ >= 0) close(dir_fd_);
}

std::string Registry::LinkName(Ipv4Address ip, uint16_t port) {
  return absl::StrCat(ip.ToString(), ":", port);
}

void Registry::Bump() {
  std::atomic_ref<uint64_t>(*generation_).fetch_add(1, std::memory_order_acq_rel);
}

std::optional<std::string> Registry::Lookup(Ipv4Address ip, uint16_t port) const {
  char buf[256];
  const ssize_t n = readlinkat(dir_fd_, LinkName(ip, port).c_str(), buf, sizeof(buf));
  if (n <= 0 || n >= static_cast<ssize_t>(sizeof(buf))) return std::nullopt;
  std::string target(buf, static_cast<size_t>(n));
  // Only names of areas of ours: never a path elsewhere.
  if (!AreaPid(geteuid(), target)) return std::nullopt;
  return target;
}

absl::Status Registry::Bind(Ipv4Address ip, uint16_t port, const std::string& area) {
  const std::string link = LinkName(ip, port);
  DirLock lock(lock_fd_);
  if (std::optional<std::string> holder = Lookup(ip, port)) {
    if (*holder == area) return absl::OkStatus();
    // A liveness probe by another process holds a dead area's lock for a
    // moment and makes it look alive: ask again before refusing.
    bool alive = AreaAlive(*holder);
    for (int i = 0; alive && i < 3; ++i) {
      usleep(1000);
      alive = AreaAlive(*holder);
    }
    if (alive) {
      const std::optional<uint32_t> pid = AreaPid(geteuid(), *holder);
      return absl::AlreadyExistsError(absl::StrCat("shm: ", link, " is already bound by pid ",
                                                   pid.value_or(0), " (area ", *holder, ") in ",
                                                   dir_));
    }
    RemoveLinksTo(*holder);
    ReclaimArea(*holder);
  }
  // Anything else under that name (a link to a non-area, a file) is ours to replace.
  unlinkat(dir_fd_, link.c_str(), 0);
  if (symlinkat(area.c_str(), dir_fd_, link.c_str()) != 0) {
    const int e = errno;
    Bump();
    return absl::InternalError(
        absl::StrCat("shm: binding ", link, ": symlink in ", dir_, ": ", Errno(e)));
  }
  Bump();
  return absl::OkStatus();
}

void Registry::Unbind(Ipv4Address ip, uint16_t port, const std::string& area) {
  DirLock lock(lock_fd_);
  if (Lookup(ip, port) != area) return;
  unlinkat(dir_fd_, LinkName(ip, port).c_str(), 0);
  Bump();
}

bool Registry::RemoveLinksTo(const std::string& area) {
  const int fd = dup(dir_fd_);
  if (fd < 0) return false;
  DIR* d = fdopendir(fd);
  if (d == nullptr) {
    close(fd);
    return false;
  }
  rewinddir(d);
  std::vector<std::string> doomed;
  while (dirent* e = readdir(d)) {
    if (e->d_type != DT_LNK && e->d_type != DT_UNKNOWN) continue;
    char buf[256];
    const ssize_t n = readlinkat(dir_fd_, e->d_name, buf, sizeof(buf));
    if (n > 0 && area.compare(0, std::string::npos, buf, static_cast<size_t>(n)) == 0) {
      doomed.emplace_back(e->d_name);
    }
  }
  closedir(d);
  for (const std::string& name : doomed) unlinkat(dir_fd_, name.c_str(), 0);
  if (!doomed.empty()) Bump();
  return !doomed.empty();
}

bool Registry::ReclaimIfDead(const std::string& name) {
  DirLock lock(lock_fd_);
  if (AreaAlive(name)) return false;
  RemoveLinksTo(name);
  ReclaimArea(name);
  Bump();
  return true;
}

void Registry::ReclaimStale(const std::string& self) {
  DirLock lock(lock_fd_);
  // Links first, then the area files (of every directory: /dev/shm is shared).
  const int fd = dup(dir_fd_);
  if (DIR* d = fd >= 0 ? fdopendir(fd) : nullptr) {
    rewinddir(d);
    std::vector<std::string> doomed;
    while (dirent* e = readdir(d)) {
      if (e->d_type != DT_LNK && e->d_type != DT_UNKNOWN) continue;
      char buf[256];
      const ssize_t n = readlinkat(dir_fd_, e->d_name, buf, sizeof(buf));
      if (n <= 0 || n >= static_cast<ssize_t>(sizeof(buf))) continue;
      const std::string target(buf, static_cast<size_t>(n));
      if (target != self && !AreaAlive(target)) doomed.emplace_back(e->d_name);
    }
    closedir(d);
    for (const std::string& name : doomed) unlinkat(dir_fd_, name.c_str(), 0);
    if (!doomed.empty()) Bump();
  } else if (fd >= 0) {
    close(fd);
  }
  const std::string prefix = AreaPrefix(geteuid());
  if (DIR* d = opendir(kShmDir)) {
    std::vector<std::string> candidates;
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name != self && AreaPid(geteuid(), name)) candidates.push_back(name);
    }
    closedir(d);
    for (const std::string& name : candidates) ReclaimArea(name);
  }
}

}  // namespace bypass::driver::shm
