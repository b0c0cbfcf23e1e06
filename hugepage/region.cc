#include "hugepage/region.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <map>
#include <new>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "hugepage/mapping.h"
#include "hugepage/sysfs.h"
#include "numa.h"

namespace bypass::hugepage {

std::string_view BackingName(Backing b) {
  switch (b) {
    case Backing::kHuge1G:
      return "1G hugetlb";
    case Backing::kHuge2M:
      return "2M hugetlb";
    case Backing::kTransparent:
      return "transparent";
    case Backing::kSmall:
      return "small";
  }
  return "?";
}

Bytes BackingPageSize(Backing b) {
  switch (b) {
    case Backing::kHuge1G:
      return Bytes::GiB(1);
    case Backing::kHuge2M:
    case Backing::kTransparent:
      return Bytes::MiB(2);
    case Backing::kSmall:
      break;
  }
  static const Bytes kSmallPage(static_cast<uint64_t>(sysconf(_SC_PAGESIZE)));
  return kSmallPage;
}

std::string_view IovaModeName(IovaMode m) {
  switch (m) {
    case IovaMode::kPhysical:
      return "physical";
    case IovaMode::kVirtual:
      return "virtual";
  }
  return "?";
}

namespace {

// Every registered hook by id. Hooks run with `mu` held; it is recursive so
// that a hook may create regions or add and remove hooks itself.
struct HookRegistry {
  std::recursive_mutex mu;
  std::map<int, RegistrationHook> hooks;
  int next_id = 1;
};

HookRegistry& Registry() {
  // Never destroyed (static regions use it), and in static storage rather
  // than on the heap: a libfabric provider that links this is unloaded at
  // exit, and a heap block only it pointed to would then be reported as a
  // leak by LeakSanitizer.
  alignas(HookRegistry) static unsigned char storage[sizeof(HookRegistry)];
  static HookRegistry* registry = new (storage) HookRegistry;
  return *registry;
}

// Runs every on_map in id order; records in `ids` those that succeeded.
absl::Status RunOnMap(const Region& region, std::vector<int>& ids) {
  HookRegistry& reg = Registry();
  std::lock_guard<std::recursive_mutex> lock(reg.mu);
  std::vector<int> snapshot;
  for (const auto& entry : reg.hooks) snapshot.push_back(entry.first);
  for (int id : snapshot) {
    auto it = reg.hooks.find(id);
    if (it == reg.hooks.end()) continue;  // removed by an earlier hook
    auto on_map = it->second.on_map;      // a copy: the hook may remove itself
    if (on_map) {
      if (absl::Status s = on_map(region); !s.ok()) return s;
    }
    ids.push_back(id);
  }
  return absl::OkStatus();
}

// Runs on_unmap, in reverse order, of the hooks in `ids` still registered.
void RunOnUnmap(const Region& region, const std::vector<int>& ids) {
  HookRegistry& reg = Registry();
  std::lock_guard<std::recursive_mutex> lock(reg.mu);
  for (auto id = ids.rbegin(); id != ids.rend(); ++id) {
    auto it = reg.hooks.find(*id);
    if (it == reg.hooks.end()) continue;
    auto on_unmap = it->second.on_unmap;
    if (on_unmap) on_unmap(region);
  }
}

absl::Status ValidateNode(int node) {
  if (node == -1) return absl::OkStatus();
  if (node >= 0 && numa_available() < 0) {
    if (node == 0) return absl::OkStatus();  // no NUMA: everything is node 0
    return absl::InvalidArgumentError(
        absl::StrCat("NUMA node ", node,
                     " asked for but this kernel has no NUMA support: use numa_node -1 or 0"));
  }
  if (node < 0 || node > numa_max_node() ||
      !numa_bitmask_isbitset(numa_all_nodes_ptr, static_cast<unsigned>(node))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NUMA node ", node, " does not exist or is not allowed to this process (nodes 0-",
        numa_max_node(), "): pick one that `numactl --hardware` lists, or -1 for no binding"));
  }
  return absl::OkStatus();
}

std::string MlockAdvice() {
  rlimit limit{};
  getrlimit(RLIMIT_MEMLOCK, &limit);
  const std::string now =
      limit.rlim_cur == RLIM_INFINITY ? "unlimited" : Bytes(limit.rlim_cur).ToString();
  return absl::StrCat("RLIMIT_MEMLOCK is ", now,
                      ": raise it (ulimit -l unlimited, LimitMEMLOCK=infinity) or grant "
                      "CAP_IPC_LOCK");
}

}  // namespace

absl::StatusOr<std::unique_ptr<Region>> Region::Create(const RegionOptions& opts) {
  if (opts.size.value() == 0) {
    return absl::InvalidArgumentError("Region::Create: size is 0: ask for at least one byte");
  }
  if (absl::Status s = ValidateNode(opts.numa_node); !s.ok()) return s;
  Backing backing = opts.require.value_or(opts.best);
  std::string note;
  absl::StatusOr<internal::Mapping> m;
  for (;;) {
    m = internal::MapBacking(backing, opts);
    if (m.ok() || opts.require.has_value() || backing == Backing::kSmall) break;
    backing = static_cast<Backing>(static_cast<int>(backing) + 1);
    absl::StrAppend(&note, note.empty() ? "" : "\n", m.status().message(), "; trying ",
                    std::string(BackingName(backing)));
  }
  if (!m.ok()) {
    return absl::Status(m.status().code(),
                        absl::StrCat("Region::Create", opts.require ? " with require" : "", ": ",
                                     note, note.empty() ? "" : "\n", m.status().message()));
  }
  auto region = std::unique_ptr<Region>(new Region());
  region->data_ = m->data;
  region->size_ = m->size;
  region->fd_ = m->fd;
  region->backing_ = backing;
  region->numa_node_ = opts.numa_node;
  region->fallback_note_ = std::move(note);
  if (absl::Status s = region->Finish(opts.lock, opts.require.has_value()); !s.ok()) return s;
  return region;
}

absl::StatusOr<std::unique_ptr<Region>> Region::FromFd(int fd, Bytes size, Backing backing) {
  absl::StatusOr<internal::Mapping> m = internal::MapFd(fd, size, backing);
  if (!m.ok()) return m.status();
  auto region = std::unique_ptr<Region>(new Region());
  region->data_ = m->data;
  region->size_ = m->size;
  region->fd_ = m->fd;
  region->backing_ = backing;
  if (absl::Status s = region->Finish(/*lock=*/true, /*lock_required=*/false); !s.ok()) return s;
  return region;
}

absl::Status Region::Finish(bool lock, bool lock_required) {
  if (lock) {
    // The raw system call: sanitizer runtimes intercept mlock() and return 0
    // without locking anything, which would make locked() lie.
    if (syscall(SYS_mlock, data_, size_.value()) == 0) {
      locked_ = true;
    } else {
      absl::Status s =
          internal::ErrnoError(errno, "mlock of " + size_.ToString() + " failed", MlockAdvice());
      if (lock_required) {
        return absl::Status(s.code(), absl::StrCat("Region::Create with require: ", s.message()));
      }
      absl::StrAppend(&fallback_note_, fallback_note_.empty() ? "" : "\n", s.message());
    }
  }
  TranslateIova();
  return RunOnMap(*this, hook_ids_);
}

void Region::TranslateIova() {
  if (backing_ != Backing::kHuge1G && backing_ != Backing::kHuge2M) return;
  const uint64_t page = page_size().value();
  const uint64_t pages = size_.value() / page;
  auto iova = std::make_unique<uint64_t[]>(pages);
  internal::PagemapReader pagemap;
  for (uint64_t i = 0; i < pages; ++i) {
    iova[i] = pagemap.PhysicalAddress(static_cast<char*>(data_) + i * page);
    if (iova[i] == 0) return;  // unprivileged, or not faulted in (prefault off)
  }
  page_iova_ = std::move(iova);
  iova_shift_ = static_cast<unsigned>(std::countr_zero(page));
  iova_mode_ = IovaMode::kPhysical;
}

Region::~Region() {
  RunOnUnmap(*this, hook_ids_);
  internal::Unmap(internal::Mapping{data_, size_, fd_});
}

bool Region::Contains(const void* p) const {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t start = reinterpret_cast<uintptr_t>(data_);
  return a >= start && a - start < size_.value();
}

int AddRegistrationHook(RegistrationHook hook) {
  HookRegistry& reg = Registry();
  std::lock_guard<std::recursive_mutex> lock(reg.mu);
  const int id = reg.next_id++;
  reg.hooks.emplace(id, std::move(hook));
  return id;
}

void RemoveRegistrationHook(int id) {
  HookRegistry& reg = Registry();
  std::lock_guard<std::recursive_mutex> lock(reg.mu);
  reg.hooks.erase(id);
}

}  // namespace bypass::hugepage
