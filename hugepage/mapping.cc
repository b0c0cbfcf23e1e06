#include "hugepage/mapping.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "hugepage/sysfs.h"
#include "numa.h"
#include "numaif.h"

namespace bypass::hugepage::internal {
namespace {

constexpr Bytes kThpSize = Bytes::MiB(2);

// MAP_HUGE_* and MFD_HUGE_* both encode log2(page size) at bit 26
// (HUGETLB_FLAG_ENCODE_SHIFT); <linux/memfd.h> would clash with <sys/mman.h>.
unsigned HugeFlag(Bytes page) {
  return static_cast<unsigned>(std::countr_zero(page.value())) << MAP_HUGE_SHIFT;
}

std::string Prefix(Backing b) { return std::string(BackingName(b)) + ": "; }

absl::Status WithPrefix(Backing b, const absl::Status& s) {
  return absl::Status(s.code(), Prefix(b) + std::string(s.message()));
}

// An address range of `size` aligned to `align`, reserved PROT_NONE so that
// MAP_FIXED over it replaces only our own reservation.
void* ReserveAligned(Bytes size, Bytes align) {
  const size_t len = size.value() + align.value();
  void* p = mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = (start + align.value() - 1) & ~(align.value() - 1);
  if (aligned > start) munmap(p, aligned - start);
  const uintptr_t end = aligned + size.value();
  if (start + len > end) munmap(reinterpret_cast<void*>(end), start + len - end);
  return reinterpret_cast<void*>(aligned);
}

// A memfd of `size` bytes; -1 with errno set on failure.
int SizedMemfd(const std::string& name, unsigned flags, Bytes size) {
  const int fd = memfd_create(name.c_str(), MFD_CLOEXEC | flags);
  if (fd < 0) return -1;
  if (ftruncate(fd, static_cast<off_t>(size.value())) != 0) {
    const int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

// Why a hugetlb mapping found no pages, and the sysfs write that fixes it.
std::string ShortageAdvice(Bytes page, Bytes size) {
  const std::string dir = HugepageDir(page);
  std::optional<HugepageState::Size> s = ReadHugepageSize(page);
  uint64_t resv = 0;
  if (auto text = ReadSmallFile(dir + "/resv_hugepages"))
    resv = std::strtoull(text->c_str(), nullptr, 10);
  const uint64_t total = s ? s->total : 0;
  const uint64_t usable = s && s->free > resv ? s->free - resv : 0;
  const uint64_t need = size.value() / page.value();
  return absl::StrCat("needs ", need, " hugepage(s) of ", page.ToString(), ", ", usable, " of the ",
                      total, " reserved are free: run tools/setup.sh or echo ",
                      total + need - std::min(need, usable), " > ", dir, "/nr_hugepages");
}

absl::StatusOr<Mapping> MapHugetlb(Backing b, Bytes size, const RegionOptions& opts) {
  const Bytes page = BackingPageSize(b);
  if (!ReadHugepageSize(page)) {
    return absl::UnavailableError(absl::StrCat(
        "this kernel has no ", page.ToString(), " hugepages (", HugepageDir(page),
        " is missing): use a smaller page size or boot with hugepagesz=", page.ToString()));
  }
  Mapping m{nullptr, size, -1};
  if (opts.shareable) {
    m.fd = SizedMemfd(opts.name, MFD_HUGETLB | HugeFlag(page), size);
    if (m.fd < 0) return ErrnoError(errno, "memfd_create(MFD_HUGETLB) failed");
    m.data = mmap(nullptr, size.value(), PROT_READ | PROT_WRITE, MAP_SHARED, m.fd, 0);
  } else {
    m.data = mmap(nullptr, size.value(), PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | HugeFlag(page), -1, 0);
  }
  if (m.data == MAP_FAILED) {
    const int err = errno;
    if (m.fd >= 0) close(m.fd);
    const std::string what = absl::StrCat("mmap of ", size.ToString(), " failed");
    return ErrnoError(err, what, err == ENOMEM ? ShortageAdvice(page, size) : "");
  }
  return m;
}

absl::StatusOr<Mapping> MapTransparent(Bytes size, const RegionOptions& opts) {
  const std::string mode = opts.shareable ? ShmemThpMode() : ThpMode();
  if (mode.empty()) {
    return absl::UnavailableError(
        "this kernel has no transparent hugepages (/sys/kernel/mm/transparent_hugepage is "
        "missing): reserve hugetlb pages instead (tools/setup.sh)");
  }
  if (opts.shareable && (mode == "never" || mode == "deny")) {
    return absl::FailedPreconditionError(
        absl::StrCat("transparent hugepages for shared memory are off (shmem_enabled is [", mode,
                     "]): echo advise > /sys/kernel/mm/transparent_hugepage/shmem_enabled"));
  }
  if (!opts.shareable && mode == "never") {
    return absl::FailedPreconditionError(
        "transparent hugepages are off (enabled is [never]): "
        "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled");
  }
  Mapping m{ReserveAligned(size, kThpSize), size, -1};
  if (m.data == nullptr) return ErrnoError(errno, "mmap of " + size.ToString() + " failed");
  void* got;
  if (opts.shareable) {
    m.fd = SizedMemfd(opts.name, 0, size);
    got = m.fd < 0
              ? MAP_FAILED
              : mmap(m.data, size.value(), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, m.fd, 0);
  } else {
    got = mmap(m.data, size.value(), PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  }
  if (got == MAP_FAILED || madvise(m.data, size.value(), MADV_HUGEPAGE) != 0) {
    const int err = errno;
    Unmap(m);
    return ErrnoError(err,
                      got == MAP_FAILED ? "memfd/mmap failed" : "madvise(MADV_HUGEPAGE) failed");
  }
  return m;
}

absl::StatusOr<Mapping> MapSmall(Bytes size, const RegionOptions& opts) {
  Mapping m{nullptr, size, -1};
  if (opts.shareable) {
    m.fd = SizedMemfd(opts.name, 0, size);
    if (m.fd < 0) return ErrnoError(errno, "memfd_create failed");
    m.data = mmap(nullptr, size.value(), PROT_READ | PROT_WRITE, MAP_SHARED, m.fd, 0);
  } else {
    m.data =
        mmap(nullptr, size.value(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  }
  if (m.data == MAP_FAILED) {
    const int err = errno;
    if (m.fd >= 0) close(m.fd);
    return ErrnoError(err, "mmap of " + size.ToString() + " failed");
  }
  // Small means small, also when THP is in "always" mode. EINVAL here only
  // means the kernel has no THP, so the result is ignored.
  madvise(m.data, size.value(), MADV_NOHUGEPAGE);
  return m;
}

absl::Status BindToNode(const Mapping& m, int node) {
  if (node < 0 || numa_available() < 0) return absl::OkStatus();
  bitmask* mask = numa_allocate_nodemask();
  numa_bitmask_setbit(mask, static_cast<unsigned>(node));
  const long rc = mbind(m.data, m.size.value(), MPOL_BIND, mask->maskp, mask->size + 1, 0);
  const int err = errno;
  numa_free_nodemask(mask);
  if (rc != 0) return ErrnoError(err, absl::StrCat("mbind to NUMA node ", node, " failed"));
  return absl::OkStatus();
}

// Faults every page in now. MADV_POPULATE_WRITE (Linux 5.14) reports a
// hugepage shortage as an error instead of the SIGBUS a plain touch would
// raise later. Older kernels: fallocate the memfd (ENOSPC on shortage), then
// touch each page with an atomic add of 0, which keeps existing contents.
absl::Status Prefault(const Mapping& m, Backing b) {
  if (madvise(m.data, m.size.value(), MADV_POPULATE_WRITE) == 0) return absl::OkStatus();
  const int err = errno;
  const bool huge = b == Backing::kHuge1G || b == Backing::kHuge2M;
  if (err != EINVAL) {
    absl::Status s = ErrnoError(
        err, "prefault (MADV_POPULATE_WRITE) of " + m.size.ToString() + " failed",
        huge ? "the kernel ran out of hugepages at fault time (on the bound NUMA node?): "
               "reserve more (tools/setup.sh, or nodeN/hugepages/ in /sys/devices/system/node)"
             : "");
    // EFAULT is where a plain touch would have raised SIGBUS: also a shortage.
    if (err == ENOMEM || err == EFAULT) return absl::ResourceExhaustedError(s.message());
    return s;
  }
  if (m.fd >= 0 && fallocate(m.fd, 0, 0, static_cast<off_t>(m.size.value())) != 0) {
    return ErrnoError(errno, "fallocate of " + m.size.ToString() + " failed");
  }
  const uint64_t step =
      huge ? BackingPageSize(b).value() : BackingPageSize(Backing::kSmall).value();
  char* p = static_cast<char*>(m.data);
  for (uint64_t off = 0; off < m.size.value(); off += step) {
    __atomic_fetch_add(p + off, 0, __ATOMIC_RELAXED);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ErrnoError(int err, const std::string& what, const std::string& todo) {
  std::string message = absl::StrCat(what, ": ", strerrordesc_np(err));
  if (!todo.empty()) absl::StrAppend(&message, ": ", todo);
  return absl::Status(absl::ErrnoToStatusCode(err), message);
}

absl::StatusOr<Mapping> MapBacking(Backing backing, const RegionOptions& opts) {
  const Bytes size = opts.size.RoundUpTo(BackingPageSize(backing));
  absl::StatusOr<Mapping> m;
  switch (backing) {
    case Backing::kHuge1G:
    case Backing::kHuge2M:
      m = MapHugetlb(backing, size, opts);
      break;
    case Backing::kTransparent:
      m = MapTransparent(size, opts);
      break;
    case Backing::kSmall:
      m = MapSmall(size, opts);
      break;
  }
  if (!m.ok()) return WithPrefix(backing, m.status());
  absl::Status s = BindToNode(*m, opts.numa_node);
  if (s.ok() && opts.prefault) s = Prefault(*m, backing);
  if (!s.ok()) {
    Unmap(*m);
    return WithPrefix(backing, s);
  }
  return m;
}

absl::StatusOr<Mapping> MapFd(int fd, Bytes size, Backing backing) {
  const Bytes page = BackingPageSize(backing);
  const bool huge = backing == Backing::kHuge1G || backing == Backing::kHuge2M;
  struct statfs fs;
  struct stat st;
  if (fstatfs(fd, &fs) != 0 || fstat(fd, &st) != 0) {
    return ErrnoError(errno, absl::StrCat("Region::FromFd: fd ", fd, " is not usable"),
                      "pass the memfd of a shareable Region (Region::fd())");
  }
  const bool is_hugetlbfs = static_cast<uint64_t>(fs.f_type) == HUGETLBFS_MAGIC;
  if (huge != is_hugetlbfs || (huge && static_cast<uint64_t>(fs.f_bsize) != page.value())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Region::FromFd: fd ", fd, " is ", is_hugetlbfs ? "" : "not ", "on hugetlbfs (block size ",
        Bytes(static_cast<uint64_t>(fs.f_bsize)).ToString(), ") but the backing given is ",
        std::string(BackingName(backing)), ": pass the creator's Region::backing()"));
  }
  const Bytes rounded = size.RoundUpTo(page);
  if (size.value() == 0 || static_cast<uint64_t>(st.st_size) < rounded.value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Region::FromFd: fd ", fd, " holds ", Bytes(static_cast<uint64_t>(st.st_size)).ToString(),
        ", cannot map ", rounded.ToString(), ": pass the creator's Region::size()"));
  }
  Mapping m{nullptr, rounded, fcntl(fd, F_DUPFD_CLOEXEC, 0)};
  if (m.fd < 0) return ErrnoError(errno, "Region::FromFd: dup failed");
  m.data = backing == Backing::kTransparent ? ReserveAligned(rounded, kThpSize) : nullptr;
  const int fixed = m.data != nullptr ? MAP_FIXED : 0;
  void* got = mmap(m.data, rounded.value(), PROT_READ | PROT_WRITE, MAP_SHARED | fixed, m.fd, 0);
  if (got == MAP_FAILED) {
    const int err = errno;
    Unmap(m);
    return ErrnoError(err, "Region::FromFd: mmap of " + rounded.ToString() + " failed");
  }
  m.data = got;
  if (backing == Backing::kTransparent) madvise(m.data, rounded.value(), MADV_HUGEPAGE);
  if (absl::Status s = Prefault(m, backing); !s.ok()) {
    Unmap(m);
    return s;
  }
  return m;
}

void Unmap(const Mapping& m) {
  if (m.data != nullptr) munmap(m.data, m.size.value());
  if (m.fd >= 0) close(m.fd);
}

}  // namespace bypass::hugepage::internal
