#include "hugepage/test_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

namespace bypass::hugepage::testing {
namespace {

constexpr uint64_t kPage = 4096;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Writes value; returns "" or "echo V > PATH failed: <errno text>".
std::string WriteAll(const std::string& path, const std::string& value) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  ssize_t n = -1;
  if (fd >= 0) {
    n = write(fd, value.data(), value.size());
    const int err = errno;
    close(fd);
    errno = err;
  }
  if (n == static_cast<ssize_t>(value.size())) return "";
  return "echo " + value + " > " + path + " failed: " + strerrordesc_np(errno);
}

}  // namespace

ScopedSysfsValue::ScopedSysfsValue(std::string path, const std::string& value)
    : path_(std::move(path)), old_(ReadAll(path_)) {
  error_ = WriteAll(path_, value);
}

ScopedSysfsValue::~ScopedSysfsValue() {
  // Selector files read "always [madvise] never": write back the bracketed word.
  std::string old = old_;
  const size_t open = old.find('['), close = old.find(']');
  if (open != std::string::npos && close != std::string::npos) {
    old = old.substr(open + 1, close - open - 1);
  }
  if (error_.empty()) WriteAll(path_, old);
}

std::string HugepageFile(Bytes page_size, const std::string& name) {
  return "/sys/kernel/mm/hugepages/hugepages-" + std::to_string(page_size.value() >> 10) + "kB/" +
         name;
}

uint64_t ReadSysfsNumber(const std::string& path) {
  return std::strtoull(ReadAll(path).c_str(), nullptr, 10);
}

ScopedFreeHugepages::ScopedFreeHugepages(Bytes page_size, uint64_t free)
    : path_(HugepageFile(page_size, "nr_hugepages")), old_total_(ReadSysfsNumber(path_)) {
  const uint64_t in_use = old_total_ - ReadSysfsNumber(HugepageFile(page_size, "free_hugepages"));
  const uint64_t target = in_use + free;
  refusal_ = WriteAll(path_, std::to_string(target));
  if (!refusal_.empty()) return;
  const uint64_t got = ReadSysfsNumber(path_);
  const uint64_t now_free = ReadSysfsNumber(HugepageFile(page_size, "free_hugepages"));
  if (got != target || now_free != free) {
    refusal_ = "echo " + std::to_string(target) + " > " + path_ + " left nr_hugepages at " +
               std::to_string(got) + " with " + std::to_string(now_free) + " free (wanted " +
               std::to_string(free) + " free): the kernel could not assemble the pages";
  }
}

ScopedFreeHugepages::~ScopedFreeHugepages() { WriteAll(path_, std::to_string(old_total_)); }

uint64_t PagemapEntry(const void* p) {
  const int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  uint64_t entry = 0;
  const off_t offset = static_cast<off_t>(reinterpret_cast<uintptr_t>(p) / kPage * 8);
  if (fd < 0 || pread(fd, &entry, sizeof(entry), offset) != sizeof(entry)) entry = 0;
  if (fd >= 0) close(fd);
  return entry;
}

uint64_t PhysicalAddress(const void* p) {
  return PagePfn(PagemapEntry(p)) * kPage + reinterpret_cast<uintptr_t>(p) % kPage;
}

uint64_t ResidentPages(const void* p, uint64_t len) {
  std::vector<unsigned char> v((len + kPage - 1) / kPage);
  if (mincore(const_cast<void*>(p), len, v.data()) != 0) return 0;
  uint64_t n = 0;
  for (unsigned char c : v) n += c & 1;
  return n;
}

uint64_t PresentPages(const void* p, uint64_t len) {
  uint64_t n = 0;
  for (uint64_t off = 0; off < len; off += kPage) {
    n += PagePresent(PagemapEntry(static_cast<const char*>(p) + off));
  }
  return n;
}

uint64_t SmapsKiB(const void* p, uint64_t len, const std::string& field) {
  std::istringstream smaps(ReadAll("/proc/self/smaps"));
  const uintptr_t lo = reinterpret_cast<uintptr_t>(p), hi = lo + len;
  bool inside = false;
  uint64_t sum = 0;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t start = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &start, &end) == 2 &&
        line.find(':') > line.find(' ')) {
      inside = start < hi && end > lo;  // a mapping header line
    } else if (inside && line.rfind(field + ":", 0) == 0) {
      sum += std::strtoull(line.c_str() + field.size() + 1, nullptr, 10);
    }
  }
  return sum;
}

}  // namespace bypass::hugepage::testing
