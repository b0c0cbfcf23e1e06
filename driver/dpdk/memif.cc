#include "driver/dpdk/memif.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "driver/clock.h"
#include "driver/dpdk/port.h"

namespace bypass::driver::dpdk {
namespace {

// How long a memif client keeps trying to reach its server at open.
constexpr uint64_t kMemifConnectMs = 10000;

// True once a server listens on the UNIX socket at path, read from
// /proc/net/unix (flag __SO_ACCEPTCON). Connecting to find out would not do:
// DPDK's memif server takes the first connection as its client, and a memif
// client whose first dev_start failed may never come up.
bool MemifServerListens(const std::string& path) {
  std::FILE* f = std::fopen("/proc/net/unix", "r");
  if (f == nullptr) return false;
  char line[512];
  bool listening = false;
  while (!listening && std::fgets(line, sizeof(line), f) != nullptr) {
    unsigned long flags = 0;
    char sock_path[256] = {0};
    // Num RefCount Protocol Flags Type St Inode Path
    if (std::sscanf(line, "%*s %*s %*s %lx %*s %*s %*s %255s", &flags, sock_path) == 2 &&
        (flags & 0x10000) != 0 && path == sock_path) {
      listening = true;
    }
  }
  std::fclose(f);
  return listening;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Device>> OpenMemif(const DeviceUri& uri, const DeviceOptions& opts) {
  if (absl::Status s = uri.CheckKnown({"role", "id"}); !s.ok()) return s;
  const std::string& socket_path = uri.target;
  if (socket_path.empty() || socket_path[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "memif: '", socket_path, "' is not an absolute socket path: write memif:/run/bypass/NAME.sock"));
  }
  const std::string dir = socket_path.substr(0, socket_path.rfind('/'));
  struct stat st {};
  if (!dir.empty() && (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))) {
    return absl::NotFoundError(absl::StrCat("memif: socket directory ", dir,
                                            " does not exist: create it (mkdir -p ", dir,
                                            ") or choose another socket path"));
  }
  std::string role = uri.Get("role").value_or("auto");
  if (role != "server" && role != "client" && role != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("memif: role=", role, " is not server, client or auto"));
  }
  uint32_t id = 0;
  if (auto v = uri.Get("id"); v && !absl::SimpleAtoi(*v, &id)) {
    return absl::InvalidArgumentError(absl::StrCat("memif: id=", *v, " is not a number"));
  }
  // The server of a socket holds an exclusive lock on SOCKET.lock for its
  // lifetime. With role=auto the first to take it serves and the rest
  // connect; the kernel arbitrates, so two processes starting together
  // cannot both become servers, and a dead server's lock is released.
  int lock_fd = -1;
  if (role != "client") {
    const std::string lock_path = socket_path + ".lock";
    lock_fd = open(lock_path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    if (lock_fd < 0) {
      return absl::PermissionDeniedError(absl::StrCat("memif: cannot open ", lock_path, ": ",
                                                      std::strerror(errno),
                                                      ": choose a socket path you can write"));
    }
    if (flock(lock_fd, LOCK_EX | LOCK_NB) == 0) {
      role = "server";
      unlink(socket_path.c_str());  // a stale socket of a dead server
    } else {
      close(lock_fd);
      lock_fd = -1;
      if (role == "server") {
        return absl::AlreadyExistsError(absl::StrCat(
            "memif: ", socket_path, " is already served by another process: use role=client, "
            "role=auto, or another socket path"));
      }
      role = "client";
    }
  }
  if (role == "client") {
    // DPDK's memif client connects once, in dev_start. Wait until the server
    // listens, so the two sides may start in either order.
    const uint64_t deadline = SteadyClock::Get().NowNs() + kMemifConnectMs * 1'000'000;
    while (!MemifServerListens(socket_path)) {
      if (SteadyClock::Get().NowNs() > deadline) {
        return absl::UnavailableError(absl::StrCat(
            "memif: no server listens on ", socket_path, " after ", kMemifConnectMs / 1000,
            " s: start the other side (role=server or role=auto) first"));
      }
      usleep(2000);
    }
  }
  const std::string devargs =
      absl::StrCat("net_memif_bypass", getpid(), "_", NextObjectSerial(), ",socket=", socket_path,
                   ",socket-abstract=no,role=", role, ",id=", id,
                   // memif sizes its shared rings itself (default 1024 slots):
                   // make them the queue size asked for.
                   ",rsize=", std::countr_zero(static_cast<uint32_t>(opts.ring_size)));
  // OpenOwned owns lock_fd from here, also when it fails.
  return DpdkDevice::OpenOwned(devargs, uri.text, opts, lock_fd, std::nullopt,
                               role == "client" ? kMemifConnectMs : 0);
}

}  // namespace bypass::driver::dpdk
