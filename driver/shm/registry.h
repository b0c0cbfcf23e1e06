// The directory through which shm devices find each other: one symlink per
// bound (IPv4, UDP port), named "<a.b.c.d>:<port>", whose target is the name
// of the binding device's area file; a lock file (`.lock`, flock) that
// serialises binds and reclaims; and a generation counter (`.generation`,
// 8 bytes mapped shared) bumped on every change, so senders cache lookups
// and revalidate only when it moves.
#ifndef BYPASS_DRIVER_SHM_REGISTRY_H_
#define BYPASS_DRIVER_SHM_REGISTRY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "driver/device.h"

namespace bypass::driver::shm {

// The default directory, "/run/bypass/u<uid>.net<netns>.pid<pidns>", else
// under $XDG_RUNTIME_DIR/bypass when /run/bypass cannot be written; one-line
// error naming the directory that failed and what to do, or refusing a
// /run/bypass (or $XDG_RUNTIME_DIR/bypass) that others may write in and
// that is not sticky.
absl::StatusOr<std::string> DefaultDirectory();

class Registry {
 public:
  // Opens (creating it 0700 if missing) directory `dir`, or the default
  // when empty. Refuses a directory that is not ours or that group/other
  // may access.
  static absl::StatusOr<std::unique_ptr<Registry>> Open(const std::string& dir);
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;
  ~Registry();

  const std::string& dir() const { return dir_; }

  // The current generation (hot path: one atomic load).
  uint64_t generation() const {
    return std::atomic_ref<uint64_t>(*generation_).load(std::memory_order_acquire);
  }

  // Links ip:port to `area`; AlreadyExists naming the holder's pid when a
  // live area holds it, a dead holder's link (and area file) replaced.
  // Binding a port `area` already holds is OK.
  absl::Status Bind(Ipv4Address ip, uint16_t port, const std::string& area);
  // Removes the link if it still points to `area`.
  void Unbind(Ipv4Address ip, uint16_t port, const std::string& area);
  // The area name ip:port links to, if any (cold path: readlink).
  std::optional<std::string> Lookup(Ipv4Address ip, uint16_t port) const;
  // Removes every link to a dead area, and the dead areas of this uid in
  // /dev/shm, except `self`.
  void ReclaimStale(const std::string& self);
  // If area `name` is dead: removes its links and its file. Returns whether
  // it was dead.
  bool ReclaimIfDead(const std::string& name);

  static std::string LinkName(Ipv4Address ip, uint16_t port);

 private:
  Registry() = default;
  void Bump();
  // Unlinks the links to `area` in the directory; true if any. Under the lock.
  bool RemoveLinksTo(const std::string& area);

  std::string dir_;
  int dir_fd_ = -1;
  int lock_fd_ = -1;
  uint64_t* generation_ = nullptr;  // mapped from .generation
};

}  // namespace bypass::driver::shm

#endif  // BYPASS_DRIVER_SHM_REGISTRY_H_
