// The shared pieces of common.h: the graveyard of retired shells, fid
// checks, status mapping and the unsupported calls.
#include "fabric/fi/common.h"

#include <mutex>
#include <utility>
#include <vector>

namespace bypass::fi {
namespace {

// Shells of closed objects and how to free each (Retire).
std::mutex g_graveyard_mu;
std::vector<std::pair<void*, void (*)(void*)>>* g_graveyard = nullptr;

}  // namespace

void RetireShell(void* shell, void (*destroy)(void*)) {
  std::lock_guard<std::mutex> lock(g_graveyard_mu);
  if (g_graveyard == nullptr) g_graveyard = new std::vector<std::pair<void*, void (*)(void*)>>();
  g_graveyard->emplace_back(shell, destroy);
}

void FreeRetiredShells() {
  std::lock_guard<std::mutex> lock(g_graveyard_mu);
  if (g_graveyard == nullptr) return;
  for (const auto& [shell, destroy] : *g_graveyard) destroy(shell);
  delete g_graveyard;
  g_graveyard = nullptr;
}

int BadFid(const void* fid, size_t fclass) {
  if (fid == nullptr) return -FI_EINVAL;
  auto* f = static_cast<const ::fid*>(fid);
  if (f->fclass != fclass) return -FI_EINVAL;
  return -FI_EBADF;
}

int FromStatus(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk:
      return 0;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return -FI_EINVAL;
    case absl::StatusCode::kNotFound:
      return -FI_ENOENT;
    case absl::StatusCode::kAlreadyExists:
      return -FI_EADDRINUSE;
    case absl::StatusCode::kResourceExhausted:
      return -FI_ENOMEM;
    case absl::StatusCode::kUnimplemented:
      return -FI_ENOSYS;
    case absl::StatusCode::kPermissionDenied:
      return -FI_EPERM;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return -FI_ENODEV;
    default:
      return -FI_EOTHER;
  }
}

int NoSysOpsOpen(fid*, const char*, uint64_t, void**, void*) { return -FI_ENOSYS; }
int NoSysOpsSet(fid*, const char*, uint64_t, void*, void*) { return -FI_ENOSYS; }
int NoSysTostr(const fid*, char*, size_t) { return -FI_ENOSYS; }
int NoSysBind(fid*, fid*, uint64_t) { return -FI_ENOSYS; }

}  // namespace bypass::fi
