// Readers of the kernel's hugepage, THP and pagemap files (internal).
#ifndef BYPASS_HUGEPAGE_SYSFS_H_
#define BYPASS_HUGEPAGE_SYSFS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "hugepage/region.h"
#include "hugepage/units.h"

namespace bypass::hugepage::internal {

// The whole of a small text file (sysfs, procfs); nullopt if unreadable.
std::optional<std::string> ReadSmallFile(const std::string& path);

// "/sys/kernel/mm/hugepages/hugepages-2048kB" for 2 MiB.
std::string HugepageDir(Bytes page_size);

// nr_hugepages and free_hugepages of one size; nullopt if the kernel lacks it.
std::optional<HugepageState::Size> ReadHugepageSize(Bytes page_size);

// The bracketed word of a sysfs selector: "always [madvise] never" -> "madvise".
std::string SelectedWord(std::string_view text);

// /sys/kernel/mm/transparent_hugepage/{enabled,shmem_enabled}; "" if absent.
std::string ThpMode();
std::string ShmemThpMode();

// Reads /proc/self/pagemap; owns its file descriptor.
class PagemapReader {
 public:
  PagemapReader();
  ~PagemapReader();
  PagemapReader(const PagemapReader&) = delete;
  PagemapReader& operator=(const PagemapReader&) = delete;

  // The physical address of the byte at addr; 0 when unknown: page not
  // present, or PFNs hidden from an unprivileged process.
  uint64_t PhysicalAddress(const void* addr) const;

 private:
  int fd_ = -1;
};

// True if this process can read physical frame numbers from pagemap.
bool PagemapPrivileged();

}  // namespace bypass::hugepage::internal

#endif  // BYPASS_HUGEPAGE_SYSFS_H_
