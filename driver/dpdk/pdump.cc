#include "driver/dpdk/pdump.h"

#include <dirent.h>
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

// At exit: the hugepage files (<hugetlbfs mount>/bypass-<pid>map_N) and the
// runtime directory's files, which a primary with shared memory keeps for
// its secondaries. The memory stays mapped until the process ends.
void RemoveSharedFiles() {
  rte_pdump_uninit();
  const std::string prefix = absl::StrCat("bypass-", getpid());
  if (FILE* mounts = std::fopen("/proc/mounts", "r")) {
    char line[512];
    while (std::fgets(line, sizeof(line), mounts) != nullptr) {
      std::vector<std::string> f = absl::StrSplit(line, ' ');
      if (f.size() > 2 && f[2] == "hugetlbfs") RemoveStartingWith(f[1], prefix + "map_");
    }
    std::fclose(mounts);
  }
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
  return absl::OkStatus();
}

}  // namespace bypass::driver::dpdk
