#include "driver/dpdk/pdump.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_pdump.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace bypass::driver::dpdk {
namespace {

// Removes dir's entries whose names start with prefix.
void RemoveStartingWith(const std::string& dir, const std::string& prefix) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  while (dirent* e = readdir(d)) {
    if (absl::StartsWith(e->d_name, prefix)) unlink(absl::StrCat(dir, "/", e->d_name).c_str());
  }
  closedir(d);
}

// The hugetlbfs mount points.
std::vector<std::string> HugepageMounts() {
  std::vector<std::string> out;
  if (FILE* mounts = std::fopen("/proc/mounts", "r")) {
    char line[512];
    while (std::fgets(line, sizeof(line), mounts) != nullptr) {
      std::vector<std::string> f = absl::StrSplit(line, ' ');
      if (f.size() > 2 && f[2] == "hugetlbfs") out.push_back(f[1]);
    }
    std::fclose(mounts);
  }
  return out;
}

// The hugepage files another BYPASS_PDUMP process left when it was killed
// (bypass-<pid>map_N): those no process holds, as DPDK tells, since every
// process keeps a shared flock on the files it maps (DPDK's own cleanup of
// its prefix tests them the same way).
void RemoveStaleFiles(const std::string& mount, const std::string& own_prefix) {
  DIR* d = opendir(mount.c_str());
  if (d == nullptr) return;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (!absl::StartsWith(name, "bypass-") || absl::StartsWith(name, own_prefix) ||
        name.find("map_") == std::string::npos) {
      continue;
    }
    const std::string path = absl::StrCat(mount, "/", name);
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) unlink(path.c_str());
    close(fd);
  }
  closedir(d);
}

// At exit: the hugepage files (<hugetlbfs mount>/bypass-<pid>map_N) and the
// runtime directory's files, which a primary with shared memory keeps for
// its secondaries. The memory stays mapped until the process ends.
void RemoveSharedFiles() {
  rte_pdump_uninit();
  const std::string prefix = absl::StrCat("bypass-", getpid(), "map_");
  for (const std::string& mount : HugepageMounts()) RemoveStartingWith(mount, prefix);
  const std::string runtime = rte_eal_get_runtime_dir();
  RemoveStartingWith(runtime, "");
  rmdir(runtime.c_str());
}

}  // namespace

bool PdumpRequested() {
  const char* v = std::getenv("BYPASS_PDUMP");
  return v != nullptr && *v != '\0' && std::string_view(v) != "0";
}

absl::Status StartPdump() {
  if (rte_pdump_init() != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("dpdk: BYPASS_PDUMP=1: rte_pdump_init failed: ", rte_strerror(rte_errno)));
  }
  std::atexit(RemoveSharedFiles);
  const std::string own = absl::StrCat("bypass-", getpid(), "map_");
  for (const std::string& mount : HugepageMounts()) RemoveStaleFiles(mount, own);
  return absl::OkStatus();
}

}  // namespace bypass::driver::dpdk
