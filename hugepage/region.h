// Memory regions on hugepages, with NUMA binding, locking, IOVA translation
// and a registration hook for drivers that DMA-map every region.
#ifndef BYPASS_HUGEPAGE_REGION_H_
#define BYPASS_HUGEPAGE_REGION_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hugepage/units.h"

namespace bypass::hugepage {

// What backs a region, from best to worst. Fallback goes down this list.
enum class Backing {
  kHuge1G,        // 1 GiB hugetlb pages (hugetlbfs / MAP_HUGETLB / memfd)
  kHuge2M,        // 2 MiB hugetlb pages
  kTransparent,   // transparent hugepages (madvise(MADV_HUGEPAGE)), 2 MiB aligned
  kSmall,         // ordinary 4 KiB pages
};
std::string_view BackingName(Backing b);  // "1G hugetlb", "2M hugetlb", ...
Bytes BackingPageSize(Backing b);

// How a region's addresses translate to device (IO) addresses.
enum class IovaMode {
  kPhysical,  // IOVA = physical address, read from /proc/self/pagemap
  kVirtual,   // IOVA = virtual address (unprivileged, or an IOMMU does it)
};
// Physical IOVAs are used only for hugetlb regions: the kernel may move small
// and transparent pages at any time (compaction, khugepaged), which would leave
// a device DMA-ing into memory that is no longer ours.
std::string_view IovaModeName(IovaMode m);

// How to obtain a region.
struct RegionOptions {
  Bytes size;                       // rounded up to the backing's page size
  Backing best = Backing::kHuge1G;  // the first backing tried
  // If set, exactly this backing or an error (no fallback).
  std::optional<Backing> require;
  int numa_node = -1;    // -1: no binding
  bool lock = true;      // mlock; a refusal is an error only with require
  bool prefault = true;  // touch every page now, not on the data path
  // Back the region by a memfd so another process can map it (FromFd).
  bool shareable = false;
  std::string name = "bypass";  // memfd name, hugetlbfs file name
};

// One mapped region. Owns the mapping (and the memfd if shareable).
class Region {
 public:
  // Maps a region, falling back from opts.best down to small pages unless
  // opts.require is set. Every fallback is recorded in fallback_note().
  static absl::StatusOr<std::unique_ptr<Region>> Create(const RegionOptions& opts);

  // Maps a region that another process created with shareable = true, from
  // its memfd (received over a UNIX socket, or /proc/PID/fd/N). size and
  // backing are the creator's size() and backing(). The region holds its own
  // duplicate of fd (the caller keeps fd), is prefaulted and locked if allowed.
  static absl::StatusOr<std::unique_ptr<Region>> FromFd(int fd, Bytes size,
                                                        Backing backing);

  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  ~Region();

  void* data() const { return data_; }
  Bytes size() const { return size_; }
  Backing backing() const { return backing_; }
  Bytes page_size() const { return BackingPageSize(backing_); }
  int numa_node() const { return numa_node_; }  // -1 if unbound
  bool locked() const { return locked_; }
  int fd() const { return fd_; }  // -1 unless shareable
  bool Contains(const void* p) const;
  // Empty if the backing is what was asked for; else one line per fallback
  // (or mlock refusal) saying what was tried, why it failed and what to do.
  const std::string& fallback_note() const { return fallback_note_; }

  IovaMode iova_mode() const { return iova_mode_; }
  // REQUIRES: Contains(addr). Per page: the page's IOVA plus the offset.
  uint64_t Iova(const void* addr) const {
    const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
    if (iova_mode_ == IovaMode::kVirtual) return a;
    const uintptr_t offset = a - reinterpret_cast<uintptr_t>(data_);
    return page_iova_[offset >> iova_shift_] + (offset & ((uintptr_t{1} << iova_shift_) - 1));
  }

 private:
  Region() = default;
  // Locks, translates and registers a freshly mapped region.
  absl::Status Finish(bool lock, bool lock_required);
  // Reads each hugepage's physical address when pagemap allows it.
  void TranslateIova();

  void* data_ = nullptr;
  Bytes size_;
  Backing backing_ = Backing::kSmall;
  int numa_node_ = -1;
  bool locked_ = false;
  int fd_ = -1;
  std::string fallback_note_;
  IovaMode iova_mode_ = IovaMode::kVirtual;
  std::unique_ptr<uint64_t[]> page_iova_;  // one per page when kPhysical
  unsigned iova_shift_ = 0;                 // log2 of the page size when kPhysical
  std::vector<int> hook_ids_;               // hooks whose on_map succeeded
};

// Callbacks run for every region created (after mapping) and destroyed
// (before unmapping), so a driver can DMA-map them. A failing on_map makes
// Region::Create fail with that status. on_unmap runs only for regions whose
// on_map succeeded, and only while the hook is registered. Hooks run under a
// recursive registry lock: they may create regions and add or remove hooks.
struct RegistrationHook {
  std::function<absl::Status(const Region&)> on_map;
  std::function<void(const Region&)> on_unmap;
};
// Returns an id for RemoveRegistrationHook. Existing regions are not replayed.
int AddRegistrationHook(RegistrationHook hook);
void RemoveRegistrationHook(int id);

// The host's hugepage state, for the report and for error messages.
struct HugepageState {
  struct Size {
    Bytes page_size;
    uint64_t total = 0;  // nr_hugepages
    uint64_t free = 0;
  };
  std::vector<Size> sizes;        // from /sys/kernel/mm/hugepages
  std::string thp_mode;           // "always", "madvise", "never"
  std::string hugetlbfs_mount;    // empty if none mounted
  bool privileged_pagemap = false;  // can read PFNs from /proc/self/pagemap
  int numa_nodes = 1;
};
HugepageState ReadHugepageState();

}  // namespace bypass::hugepage

#endif  // BYPASS_HUGEPAGE_REGION_H_
