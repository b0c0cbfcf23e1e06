#include "driver/shm/keys.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace bypass::driver::shm {
namespace {

std::string Errno(int e) { return std::strerror(e); }

std::string Mode(mode_t m) {
  char text[8];
  std::snprintf(text, sizeof(text), "%04o", static_cast<unsigned>(m & 07777));
  return text;
}

// Closes a descriptor at scope end.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Owner and mode of an open key file, as ssh checks a private key: only we
// may have written it, and only we may read it.
absl::Status CheckOwnerAndMode(const std::string& path, const struct stat& st) {
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("key file ", path, " is not a regular file; give a file holding the key"));
  }
  if (st.st_uid != geteuid()) {
    return absl::PermissionDeniedError(absl::StrCat("key file ", path, " is owned by uid ",
                                                    st.st_uid, ", not by us (uid ", geteuid(),
                                                    "); chown it or use a key file of yours"));
  }
  if ((st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(absl::StrCat("key file ", path, " has mode ",
                                                    Mode(st.st_mode),
                                                    ", open to group or others; chmod 600 ", path));
  }
  return absl::OkStatus();
}

// Reads all of fd (at most max + 1 bytes, to tell a file that is too long).
absl::StatusOr<std::string> ReadAll(const std::string& path, int fd, size_t max) {
  std::string bytes(max + 1, '\0');
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::UnavailableError(absl::StrCat("key file ", path, ": read: ", Errno(errno)));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  bytes.resize(got);
  return bytes;
}

// Writes a fresh random key to a new 0600 file in dir; returns its path.
absl::StatusOr<std::string> WriteFreshKey(const std::string& dir) {
  uint64_t tag;
  randombytes_buf(&tag, sizeof(tag));
  const std::string tmp = absl::StrCat(dir, "/.key.", getpid(), ".", tag);
  Fd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (fd.get() < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create a key file in ", dir, ": ", Errno(errno)));
  }
  Key key;
  randombytes_buf(key.data(), key.size());
  const ssize_t n = write(fd.get(), key.data(), key.size());
  const int err = errno;
  sodium_memzero(key.data(), key.size());
  if (n != static_cast<ssize_t>(key.size())) {
    unlink(tmp.c_str());
    return absl::UnavailableError(
        absl::StrCat("writing key file ", tmp, ": ", n < 0 ? Errno(err) : "short write"));
  }
  return tmp;
}

}  // namespace

void InitSodium() {
  static const int ok = sodium_init();
  if (ok < 0) {
    std::fprintf(stderr, "bypass: libsodium cannot start (sodium_init failed); no keys\n");
    std::abort();
  }
}

absl::StatusOr<std::string> ReadKeyFile(const std::string& path, size_t min_bytes,
                                        size_t max_bytes, bool follow_symlink) {
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | (follow_symlink ? 0 : O_NOFOLLOW)));
  if (fd.get() < 0) {
    const int e = errno;
    if (e == ENOENT) return absl::NotFoundError(absl::StrCat("key file ", path, " does not exist"));
    if (e == ELOOP) {
      return absl::FailedPreconditionError(
          absl::StrCat("key file ", path, " is a symlink; remove it (it is created again)"));
    }
    return absl::PermissionDeniedError(absl::StrCat("key file ", path, ": ", Errno(e),
                                                    "; give a readable file of yours (chmod 600)"));
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0) {
    return absl::UnavailableError(absl::StrCat("key file ", path, ": fstat: ", Errno(errno)));
  }
  if (absl::Status s = CheckOwnerAndMode(path, st); !s.ok()) return s;
  absl::StatusOr<std::string> bytes = ReadAll(path, fd.get(), max_bytes);
  if (!bytes.ok()) return bytes.status();
  if (bytes->size() < min_bytes || bytes->size() > max_bytes) {
    const std::string want = min_bytes == max_bytes ? absl::StrCat("exactly ", min_bytes)
                                                    : absl::StrCat(min_bytes, " to ", max_bytes);
    return absl::InvalidArgumentError(absl::StrCat(
        "key file ", path, " holds ", bytes->size() > max_bytes ? "more than " : "",
        bytes->size() > max_bytes ? max_bytes : bytes->size(), " bytes; a key is ", want,
        " bytes (e.g. head -c 32 /dev/urandom > FILE; chmod 600 FILE)"));
  }
  return bytes;
}

Key KeyFromBytes(absl::Span<const uint8_t> material) {
  Key key;
  if (material.size() == kKeyBytes) {
    std::memcpy(key.data(), material.data(), kKeyBytes);
    return key;
  }
  InitSodium();
  crypto_generichash(key.data(), key.size(), material.data(), material.size(), nullptr, 0);
  return key;
}

std::string KeyId(const Key& key) {
  InitSodium();
  static constexpr char kLabel[] = "bypass key id";
  uint8_t mac[16];
  crypto_generichash(mac, sizeof(mac), reinterpret_cast<const uint8_t*>(kLabel),
                     sizeof(kLabel) - 1, key.data(), key.size());
  char hex[9];
  std::snprintf(hex, sizeof(hex), "%02x%02x%02x%02x", mac[0], mac[1], mac[2], mac[3]);
  return hex;
}

std::string UserKeyPath(const std::string& registry_dir) {
  // The registry directory's parent (views, not assignments: GCC 12's
  // -Wrestrict misreads a string assigned its own literal at -O2).
  absl::string_view dir = registry_dir;
  while (dir.size() > 1 && dir.back() == '/') dir.remove_suffix(1);
  const size_t slash = dir.rfind('/');
  const absl::string_view parent =
      slash == absl::string_view::npos ? absl::string_view(".") : dir.substr(0, slash == 0 ? 1 : slash);
  return absl::StrCat(parent, parent == "/" ? "" : "/", "u", geteuid(), ".key");
}

absl::StatusOr<Key> UserKey(const std::string& registry_dir) {
  InitSodium();
  const std::string path = UserKeyPath(registry_dir);
  // Two rounds: the second reads the key a process that raced us linked.
  for (int round = 0; round < 2; ++round) {
    absl::StatusOr<std::string> bytes = ReadKeyFile(path, kKeyBytes, kKeyBytes, false);
    if (bytes.ok()) {
      Key key;
      std::memcpy(key.data(), bytes->data(), kKeyBytes);
      sodium_memzero(bytes->data(), bytes->size());
      return key;
    }
    if (!absl::IsNotFound(bytes.status())) return bytes.status();
    absl::StatusOr<std::string> tmp = WriteFreshKey(registry_dir);
    if (!tmp.ok()) return tmp.status();
    // link, unlike rename, never replaces: the first process's key stays.
    const int linked = link(tmp->c_str(), path.c_str());
    const int err = errno;
    unlink(tmp->c_str());
    if (linked != 0 && err != EEXIST) {
      return absl::PermissionDeniedError(absl::StrCat("cannot create key file ", path, ": ",
                                                      Errno(err),
                                                      "; give a writable directory of yours "
                                                      "with shm:DIR"));
    }
  }
  return absl::InternalError(absl::StrCat("key file ", path, " vanished while it was created"));
}

}  // namespace bypass::driver::shm
