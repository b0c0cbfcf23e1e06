// The process's own telemetry socket, and the client both tools use.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "driver/dpdk/telemetry.h"
#include "fabric/stats/stats.h"

namespace bypass::stats {
namespace {

// DPDK's telemetry answers up to this many bytes (dpdk-telemetry.py reads
// max_output_len from the greeting).
constexpr size_t kMaxOutput = 64 * 1024;

absl::StatusOr<sockaddr_un> UnixAddress(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof(a.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("stats: socket path too long (", path.size(), " bytes): ", path));
  }
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  return a;
}

absl::Status Errno(const std::string& what) {
  return absl::UnavailableError(absl::StrCat("stats: ", what, ": ", std::strerror(errno)));
}

std::string ListAnswer() {
  std::vector<std::string> quoted;
  for (const std::string& c : driver::dpdk::TelemetryCommands()) {
    quoted.push_back(absl::StrCat("\"", c, "\""));
  }
  return absl::StrCat("{\"/\": [", absl::StrJoin(quoted, ", "), "]}");
}

}  // namespace

std::string SocketDir() {
  if (const char* d = std::getenv("BYPASS_STATS_DIR"); d != nullptr && *d != '\0') return d;
  return absl::StrCat("/run/bypass/stats.u", getuid());
}

std::string SocketPath(pid_t pid) { return absl::StrCat(SocketDir(), "/", pid, ".sock"); }

struct Server::Impl {
  std::string path;
  int listen_fd = -1;
  int stop_fd = -1;  // an eventfd: written to stop the thread
  std::thread thread;

  // Waits for fd to be readable or stop; false on stop or timeout.
  bool Wait(int fd, int timeout_ms) {
    pollfd p[2] = {{fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    if (poll(p, 2, timeout_ms) <= 0) return false;
    return (p[1].revents & POLLIN) == 0;
  }

  void Serve(int fd) {
    const std::string greeting = absl::StrCat(
        "{\"version\": \"bypass stats 1\", \"pid\": ", getpid(), ", \"max_output_len\": ",
        kMaxOutput, "}");
    if (send(fd, greeting.data(), greeting.size(), MSG_NOSIGNAL) < 0) return;
    char buf[1024];
    while (Wait(fd, 5000)) {
      const ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
      if (n <= 0) return;
      std::string cmd(buf, static_cast<size_t>(n));
      while (!cmd.empty() && (cmd.back() == '\n' || cmd.back() == '\r')) cmd.pop_back();
      std::string answer = cmd == "/" ? ListAnswer() : Answer(cmd);
      if (answer.size() > kMaxOutput) answer = absl::StrCat("{\"", cmd, "\": null}");
      if (send(fd, answer.data(), answer.size(), MSG_NOSIGNAL) < 0) return;
    }
  }

  void Run() {
    while (Wait(listen_fd, -1)) {
      const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      Serve(fd);
      close(fd);
    }
  }
};

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const std::string& path) {
  const std::string dir = path.substr(0, path.rfind('/'));
  if (!dir.empty() && mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Errno(absl::StrCat("mkdir ", dir));
  }
  absl::StatusOr<sockaddr_un> addr = UnixAddress(path);
  if (!addr.ok()) return addr.status();
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (impl->listen_fd < 0) return Errno("socket");
  unlink(path.c_str());  // a dead process's with our pid
  if (bind(impl->listen_fd, reinterpret_cast<const sockaddr*>(&*addr), sizeof(*addr)) != 0 ||
      listen(impl->listen_fd, 4) != 0) {
    const absl::Status s = Errno(absl::StrCat("bind ", path));
    close(impl->listen_fd);
    return s;
  }
  impl->stop_fd = eventfd(0, EFD_CLOEXEC);
  if (impl->stop_fd < 0) {
    const absl::Status s = Errno("eventfd");
    close(impl->listen_fd);
    unlink(path.c_str());
    return s;
  }
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->Run(); });
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() {
  const uint64_t one = 1;
  if (write(impl_->stop_fd, &one, sizeof(one)) != sizeof(one)) std::abort();
  impl_->thread.join();
  close(impl_->listen_fd);
  close(impl_->stop_fd);
  unlink(impl_->path.c_str());
}

const std::string& Server::path() const { return impl_->path; }

absl::StatusOr<std::string> Query(const std::string& path, const std::string& cmd) {
  absl::StatusOr<sockaddr_un> addr = UnixAddress(path);
  if (!addr.ok()) return addr.status();
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  const timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  std::string buf(kMaxOutput + 1, '\0');
  absl::StatusOr<std::string> out;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&*addr), sizeof(*addr)) != 0) {
    out = Errno(absl::StrCat("connect ", path));
  } else if (recv(fd, buf.data(), buf.size(), 0) <= 0) {  // the greeting
    out = Errno(absl::StrCat("no greeting from ", path));
  } else if (send(fd, cmd.data(), cmd.size(), MSG_NOSIGNAL) < 0) {
    out = Errno(absl::StrCat("send to ", path));
  } else if (const ssize_t n = recv(fd, buf.data(), buf.size(), 0); n <= 0) {
    out = Errno(absl::StrCat("no answer from ", path));
  } else {
    out = buf.substr(0, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

}  // namespace bypass::stats
