#include "hugepage/sysfs.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "numa.h"

namespace bypass::hugepage {
namespace internal {

std::optional<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string HugepageDir(Bytes page_size) {
  return absl::StrCat("/sys/kernel/mm/hugepages/hugepages-", page_size.value() >> 10, "kB");
}

namespace {

std::optional<uint64_t> ReadNumber(const std::string& path) {
  std::optional<std::string> text = ReadSmallFile(path);
  uint64_t n = 0;
  if (!text || !absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &n)) return std::nullopt;
  return n;
}

}  // namespace

std::optional<HugepageState::Size> ReadHugepageSize(Bytes page_size) {
  const std::string dir = HugepageDir(page_size);
  std::optional<uint64_t> total = ReadNumber(dir + "/nr_hugepages");
  std::optional<uint64_t> free = ReadNumber(dir + "/free_hugepages");
  if (!total || !free) return std::nullopt;
  return HugepageState::Size{page_size, *total, *free};
}

std::string SelectedWord(std::string_view text) {
  const size_t open = text.find('[');
  const size_t close = text.find(']', open);
  if (open == std::string_view::npos || close == std::string_view::npos) return "";
  return std::string(text.substr(open + 1, close - open - 1));
}

std::string ThpMode() {
  std::optional<std::string> text = ReadSmallFile("/sys/kernel/mm/transparent_hugepage/enabled");
  return text ? SelectedWord(*text) : "";
}

std::string ShmemThpMode() {
  std::optional<std::string> text =
      ReadSmallFile("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  return text ? SelectedWord(*text) : "";
}

PagemapReader::PagemapReader() : fd_(open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC)) {}

PagemapReader::~PagemapReader() {
  if (fd_ >= 0) close(fd_);
}

uint64_t PagemapReader::PhysicalAddress(const void* addr) const {
  if (fd_ < 0) return 0;
  static const uint64_t kPage = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t va = reinterpret_cast<uintptr_t>(addr);
  uint64_t entry = 0;
  const off_t offset = static_cast<off_t>(va / kPage * sizeof(entry));
  if (pread(fd_, &entry, sizeof(entry), offset) != sizeof(entry)) return 0;
  const bool present = (entry >> 63) & 1;           // bit 63: page present
  const uint64_t pfn = entry & ((1ull << 55) - 1);  // bits 0-54: frame number
  if (!present || pfn == 0) return 0;
  return pfn * kPage + va % kPage;
}

bool PagemapPrivileged() {
  volatile uint64_t probe = 1;  // on the stack, so certainly present
  probe = probe + 1;
  return PagemapReader().PhysicalAddress(const_cast<uint64_t*>(&probe)) != 0;
}

}  // namespace internal

HugepageState ReadHugepageState() {
  HugepageState state;
  if (DIR* dir = opendir("/sys/kernel/mm/hugepages")) {
    while (dirent* e = readdir(dir)) {
      uint64_t kib = 0;
      absl::string_view name = e->d_name;
      if (!absl::ConsumePrefix(&name, "hugepages-") || !absl::ConsumeSuffix(&name, "kB") ||
          !absl::SimpleAtoi(name, &kib)) {
        continue;
      }
      if (auto size = internal::ReadHugepageSize(Bytes::KiB(kib))) state.sizes.push_back(*size);
    }
    closedir(dir);
  }
  std::sort(state.sizes.begin(), state.sizes.end(),
            [](const auto& a, const auto& b) { return a.page_size < b.page_size; });
  state.thp_mode = internal::ThpMode();
  if (std::optional<std::string> mounts = internal::ReadSmallFile("/proc/mounts")) {
    for (absl::string_view line : absl::StrSplit(*mounts, '\n')) {
      std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
      if (f.size() > 2 && f[2] == "hugetlbfs") {
        state.hugetlbfs_mount = std::string(f[1]);
        break;
      }
    }
  }
  state.privileged_pagemap = internal::PagemapPrivileged();
  state.numa_nodes = numa_available() >= 0 ? numa_num_configured_nodes() : 1;
  return state;
}

}  // namespace bypass::hugepage
