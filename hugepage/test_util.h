// Test helpers: sysfs writes undone at scope exit, and independent readers of
// /proc/self/{pagemap,smaps} to check Region against the kernel's own view.
#ifndef BYPASS_HUGEPAGE_TEST_UTIL_H_
#define BYPASS_HUGEPAGE_TEST_UTIL_H_

#include <cstdint>
#include <string>

#include "hugepage/units.h"

namespace bypass::hugepage::testing {

// Writes a sysfs file now and its old contents back at scope exit.
class ScopedSysfsValue {
 public:
  ScopedSysfsValue(std::string path, const std::string& value);
  ~ScopedSysfsValue();
  ScopedSysfsValue(const ScopedSysfsValue&) = delete;
  ScopedSysfsValue& operator=(const ScopedSysfsValue&) = delete;
  // Empty if the write worked; else what failed and errno's text.
  const std::string& error() const { return error_; }

 private:
  std::string path_;
  std::string old_;
  std::string error_;
};

// Sets nr_hugepages so that exactly `free` pages of `page_size` are free, and
// restores the old nr_hugepages at scope exit.
class ScopedFreeHugepages {
 public:
  ScopedFreeHugepages(Bytes page_size, uint64_t free);
  ~ScopedFreeHugepages();
  ScopedFreeHugepages(const ScopedFreeHugepages&) = delete;
  ScopedFreeHugepages& operator=(const ScopedFreeHugepages&) = delete;
  // Empty if the kernel did it; else what it did instead, in its own words.
  const std::string& refusal() const { return refusal_; }

 private:
  std::string path_;
  uint64_t old_total_ = 0;
  std::string refusal_;
};

// Reads an unsigned number from a sysfs file; 0 if unreadable.
uint64_t ReadSysfsNumber(const std::string& path);
// "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages" etc.
std::string HugepageFile(Bytes page_size, const std::string& name);

// The raw /proc/self/pagemap entry of the page holding p.
uint64_t PagemapEntry(const void* p);
inline bool PagePresent(uint64_t entry) { return (entry >> 63) & 1; }
inline uint64_t PagePfn(uint64_t entry) { return entry & ((uint64_t{1} << 55) - 1); }
// Physical address of p by pagemap, computed independently of the library.
uint64_t PhysicalAddress(const void* p);

// How many of the 4 KiB pages in [p, p+len) mincore reports resident.
uint64_t ResidentPages(const void* p, uint64_t len);
// How many of the 4 KiB pages in [p, p+len) pagemap reports present.
uint64_t PresentPages(const void* p, uint64_t len);

// Sum of a /proc/self/smaps field ("AnonHugePages", "Locked", ...), in KiB,
// over the mappings that overlap [p, p+len).
uint64_t SmapsKiB(const void* p, uint64_t len, const std::string& field);

}  // namespace bypass::hugepage::testing

#endif  // BYPASS_HUGEPAGE_TEST_UTIL_H_
