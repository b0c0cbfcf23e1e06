#include "hugepage/report.h"

#include <string>

#include "absl/strings/str_split.h"
#include "hugepage/region.h"
#include "numaif.h"

namespace bypass::hugepage {
namespace {

void Line(std::FILE* out, const char* key, const std::string& value) {
  std::fprintf(out, "  %-16s %s\n", key, value.c_str());
}

// The node holding the region's first page, as the kernel reports it.
std::string NodeOf(const Region& r) {
  int node = -1;
  if (get_mempolicy(&node, nullptr, 0, r.data(), MPOL_F_NODE | MPOL_F_ADDR) != 0) node = -1;
  const std::string where = node >= 0 ? "on node " + std::to_string(node) : "node unknown";
  if (r.numa_node() < 0) return "unbound (" + where + ")";
  return "bound to " + std::to_string(r.numa_node()) + " (" + where + ")";
}

void PrintRegion(std::FILE* out) {
  RegionOptions opts;
  opts.size = Bytes::MiB(4);
  opts.best = Backing::kHuge1G;
  std::fprintf(out, "test region (%s, best %s)\n", opts.size.ToString().c_str(),
               std::string(BackingName(opts.best)).c_str());
  absl::StatusOr<std::unique_ptr<Region>> r = Region::Create(opts);
  if (!r.ok()) {
    Line(out, "error", std::string(r.status().ToString()));
    return;
  }
  const Region& region = **r;
  Line(out, "backing", std::string(BackingName(region.backing())));
  Line(out, "page size", region.page_size().ToString());
  Line(out, "size", region.size().ToString());
  Line(out, "numa node", NodeOf(region));
  Line(out, "locked", region.locked() ? "yes" : "no");
  Line(out, "iova", std::string(IovaModeName(region.iova_mode())));
  const char* key = "fallback";
  for (absl::string_view note : absl::StrSplit(region.fallback_note(), '\n', absl::SkipEmpty())) {
    Line(out, key, std::string(note));
    key = "";
  }
  if (region.fallback_note().empty()) Line(out, key, "none");
}

void PrintHost(std::FILE* out) {
  const HugepageState state = ReadHugepageState();
  std::fprintf(out, "host\n");
  if (state.sizes.empty()) Line(out, "hugepages", "none (this kernel has no hugetlb pages)");
  for (const HugepageState::Size& s : state.sizes) {
    const std::string key = s.page_size.ToString() + " pages";
    Line(out, key.c_str(), "total " + std::to_string(s.total) + ", free " + std::to_string(s.free));
  }
  Line(out, "thp", state.thp_mode.empty() ? "not in this kernel" : state.thp_mode);
  Line(out, "hugetlbfs",
       state.hugetlbfs_mount.empty()
           ? "not mounted (DPDK wants one: mount -t hugetlbfs nodev /dev/hugepages)"
           : state.hugetlbfs_mount);
  Line(out, "numa nodes", std::to_string(state.numa_nodes));
  Line(out, "pagemap PFNs",
       state.privileged_pagemap ? "readable (physical IOVA possible)"
                                : "hidden (not root: IOVA = VA)");
}

}  // namespace

void PrintHugepageReport(std::FILE* out) {
  PrintRegion(out);
  PrintHost(out);
}

}  // namespace bypass::hugepage
