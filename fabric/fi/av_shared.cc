// The shared table of a named AV (av_shared.h).
#include "fabric/fi/av_shared.h"

#include <fcntl.h>
#include <rdma/fi_errno.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "fabric/fi/services.h"

namespace bypass::fi {
namespace {

constexpr char kMagic[8] = {'B', 'Y', 'P', 'A', 'S', 'S', 'A', 'V'};
constexpr uint32_t kVersion = 1;

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t entry_size;
  uint64_t count;  // entries appended (removed ones included)
  uint8_t reserved[40];
};
static_assert(sizeof(Header) == 64);

struct Entry {
  uint8_t valid;
  uint8_t pad0;
  uint16_t udp_port;
  uint32_t ip;
  uint8_t mac[6];
  uint8_t pad1[2];
  uint32_t incarnation;
  uint32_t pad2;
};
static_assert(sizeof(Entry) == 24);

constexpr size_t kMaxNameChars = 200;
constexpr off_t kCountOffset = offsetof(Header, count);

off_t EntryOffset(size_t i) { return static_cast<off_t>(sizeof(Header) + i * sizeof(Entry)); }

bool Whole(ssize_t got, size_t want) { return got == static_cast<ssize_t>(want); }

// "/dev/shm/bypass-av.u<uid>.<name>", the name's unsafe characters as %XX;
// empty when the name is empty or too long.
std::string PathOf(const char* name) {
  std::string n = name;
  while (!n.empty() && n.front() == '/') n.erase(0, 1);  // POSIX shm style "/name"
  if (n.empty() || n.size() > kMaxNameChars) return "";
  std::string out = "/dev/shm/bypass-av.u" + std::to_string(getuid()) + ".";
  for (const unsigned char ch : n) {
    if (std::isalnum(ch) || ch == '.' || ch == '_' || ch == '-') {
      out += static_cast<char>(ch);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof(hex), "%%%02X", ch);
      out += hex;
    }
  }
  return out;
}

// An existing table: the user's own regular file, no access for others, a
// header we wrote.
int CheckExisting(int fd, const std::string& path) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != getuid() ||
      (st.st_mode & 077) != 0) {
    BYPASS_FI_WARN(FI_LOG_AV, "shared AV %s is not a 0600 regular file of this user; remove it\n",
                   path.c_str());
    return -FI_EACCES;
  }
  Header h;
  if (!Whole(pread(fd, &h, sizeof(h), 0), sizeof(h)) || std::memcmp(h.magic, kMagic, 8) != 0 ||
      h.version != kVersion || h.entry_size != sizeof(Entry)) {
    BYPASS_FI_WARN(FI_LOG_AV, "shared AV %s is not a bypass AV table of this version; remove it\n",
                   path.c_str());
    return -FI_EINVAL;
  }
  return 0;
}

// A new table under a temporary name, linked to `path`: 0, 1 if `path`
// exists already, or -FI_*.
int Create(const std::string& path) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  const int fd = open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    BYPASS_FI_WARN(FI_LOG_AV, "cannot create %s: %s\n", tmp.c_str(), std::strerror(errno));
    return -FI_EIO;
  }
  Header h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kVersion;
  h.entry_size = sizeof(Entry);
  const bool written = Whole(pwrite(fd, &h, sizeof(h), 0), sizeof(h));
  close(fd);
  int ret = 0;
  if (!written) {
    BYPASS_FI_WARN(FI_LOG_AV, "cannot write %s (is /dev/shm full?)\n", tmp.c_str());
    ret = -FI_EIO;
  } else if (link(tmp.c_str(), path.c_str()) != 0) {
    ret = errno == EEXIST ? 1 : -FI_EIO;  // a link never replaces: someone else's won
    if (ret < 0) BYPASS_FI_WARN(FI_LOG_AV, "cannot link %s: %s\n", path.c_str(), std::strerror(errno));
  }
  unlink(tmp.c_str());
  return ret;
}

}  // namespace

int SharedAvTable::Open(const char* name, bool read_only, std::unique_ptr<SharedAvTable>* out) {
  const std::string path = PathOf(name);
  if (path.empty()) {
    BYPASS_FI_WARN(FI_LOG_AV, "an AV name is 1 to %zu characters\n", kMaxNameChars);
    return -FI_EINVAL;
  }
  bool owner = false;
  if (!read_only) {
    const int made = Create(path);
    if (made < 0) return made;
    owner = made == 0;
  }
  const int fd = open(path.c_str(), (read_only ? O_RDONLY : O_RDWR) | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      BYPASS_FI_WARN(FI_LOG_AV, "FI_READ: no shared AV named \"%s\" is open (%s)\n", name,
                     path.c_str());
      return -FI_ENOENT;
    }
    BYPASS_FI_WARN(FI_LOG_AV, "cannot open %s: %s\n", path.c_str(), std::strerror(errno));
    return -FI_EIO;
  }
  if (int ret = CheckExisting(fd, path); ret != 0) {
    close(fd);
    return ret;
  }
  out->reset(new SharedAvTable(fd, owner, read_only, path));
  return 0;
}

SharedAvTable::~SharedAvTable() {
  if (owner_) unlink(path_.c_str());
  close(fd_);
}

SharedAvTable::Lock::Lock(const SharedAvTable& t, bool exclusive) : fd_(t.fd_) {
  while (flock(fd_, exclusive ? LOCK_EX : LOCK_SH) != 0 && errno == EINTR) {
  }
}
SharedAvTable::Lock::~Lock() { flock(fd_, LOCK_UN); }

bool SharedAvTable::ReadCount(uint64_t* count) const {
  if (Whole(pread(fd_, count, sizeof(*count), kCountOffset), sizeof(*count))) return true;
  BYPASS_FI_WARN(FI_LOG_AV, "cannot read %s: %s\n", path_.c_str(), std::strerror(errno));
  return false;
}

bool SharedAvTable::ReadNew(std::vector<std::optional<rdm::Address>>* mirror) const {
  uint64_t count = 0;
  if (!ReadCount(&count)) return false;
  for (size_t i = mirror->size(); i < count; ++i) {
    Entry e;
    if (!Whole(pread(fd_, &e, sizeof(e), EntryOffset(i)), sizeof(e))) {
      BYPASS_FI_WARN(FI_LOG_AV, "cannot read entry %zu of %s\n", i, path_.c_str());
      return false;
    }
    if (e.valid == 0) {
      mirror->emplace_back();
      continue;
    }
    rdm::Address a;
    a.ip.value = e.ip;
    a.udp_port = e.udp_port;
    std::memcpy(a.mac.bytes.data(), e.mac, 6);
    a.incarnation = e.incarnation;
    mirror->push_back(a);
  }
  return true;
}

bool SharedAvTable::Append(const rdm::Address& a) const {
  uint64_t count = 0;
  if (!ReadCount(&count)) return false;
  Entry e{};
  e.valid = 1;
  e.udp_port = a.udp_port;
  e.ip = a.ip.value;
  std::memcpy(e.mac, a.mac.bytes.data(), 6);
  e.incarnation = a.incarnation;
  const uint64_t next = count + 1;
  // The entry first, then the count that makes it visible.
  if (!Whole(pwrite(fd_, &e, sizeof(e), EntryOffset(count)), sizeof(e)) ||
      !Whole(pwrite(fd_, &next, sizeof(next), kCountOffset), sizeof(next))) {
    BYPASS_FI_WARN(FI_LOG_AV, "cannot append to %s (is /dev/shm full?)\n", path_.c_str());
    return false;
  }
  return true;
}

bool SharedAvTable::MarkRemoved(size_t i) const {
  const uint8_t zero = 0;
  return Whole(pwrite(fd_, &zero, 1, EntryOffset(i)), 1);
}

}  // namespace bypass::fi
