// libfabric's logging: FI_LOG_LEVEL (warn by default), FI_LOG_PROV and
// FI_LOG_SUBSYS filters, rate limiting for FI_LOG_SPARSE (FI_LOG_INTERVAL),
// lines in libfabric's format on stderr, and fi_open("logging") so an
// application can import its own logger (fi_import_log, rdma/fi_ext.h).
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_ext.h>
#include <strings.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <new>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "fabric/fi/core/internal.h"

namespace bypass::fi::core {
namespace {

constexpr const char* kLevels[] = {"warn", "trace", "info", "debug"};
constexpr const char* kSubsys[] = {"core", "fabric", "domain", "ep_ctrl", "ep_data",
                                   "av",   "cq",     "eq",     "mr",      "cntr"};
static_assert(sizeof(kSubsys) / sizeof(kSubsys[0]) == FI_LOG_SUBSYS_MAX);

// A name list from the environment: "a,b" keeps those, "^a,b" all but those.
struct NameFilter {
  bool set = false;
  bool exclude = false;
  std::string names;  // ",a,b," for a plain search

  void Parse(const char* text) {
    set = text != nullptr && text[0] != '\0';
    if (!set) return;
    exclude = text[0] == '^';
    names.assign(1, ',');  // not names = ",": GCC 12 -O3 warns falsely (-Wrestrict)
    for (absl::string_view n : absl::StrSplit(text + (exclude ? 1 : 0), ',')) {
      absl::StrAppend(&names, absl::AsciiStrToLower(absl::StripAsciiWhitespace(n)), ",");
    }
  }
  bool Allows(const char* name) const {
    if (!set) return true;
    const std::string key = absl::StrCat(",", absl::AsciiStrToLower(name != nullptr ? name : ""), ",");
    const bool listed = names.find(key) != std::string::npos;
    return exclude ? !listed : listed;
  }
};

struct LogConfig {
  int level = FI_LOG_WARN;
  NameFilter provs;
  uint32_t subsys_mask = ~0u;
  uint64_t interval_ms = 2000;
};

LogConfig LoadConfig() {
  LogConfig c;
  if (const char* l = std::getenv("FI_LOG_LEVEL"); l != nullptr && l[0] != '\0') {
    c.level = -1;
    for (int i = 0; i < FI_LOG_MAX; ++i) {
      if (strcasecmp(l, kLevels[i]) == 0) c.level = i;
    }
    if (c.level < 0) {
      std::fprintf(stderr,
                   "libfabric: FI_LOG_LEVEL=%s is not warn, trace, info or debug; logging "
                   "warnings only\n",
                   l);
      c.level = FI_LOG_WARN;
    }
  }
  c.provs.Parse(std::getenv("FI_LOG_PROV"));
  NameFilter subsys;
  subsys.Parse(std::getenv("FI_LOG_SUBSYS"));
  c.subsys_mask = 0;
  for (int i = 0; i < FI_LOG_SUBSYS_MAX; ++i) {
    if (subsys.Allows(kSubsys[i])) c.subsys_mask |= 1u << i;
  }
  if (const char* iv = std::getenv("FI_LOG_INTERVAL"); iv != nullptr && iv[0] != '\0') {
    char* end = nullptr;
    const unsigned long long ms = std::strtoull(iv, &end, 10);
    if (end != iv && *end == '\0') c.interval_ms = ms;
  }
  return c;
}

// Read once, at the first log call (ReloadLogConfig for tests).
LogConfig g_config;
std::once_flag g_config_once;

const LogConfig& Config() {
  std::call_once(g_config_once, [] { g_config = LoadConfig(); });
  return g_config;
}

// The application's logger after fi_import_log, else null.
std::atomic<fi_ops_log*> g_imported{nullptr};

bool Filtered(const fi_provider* prov) {
  return !Config().provs.Allows(prov != nullptr ? prov->name : nullptr);
}

bool Enabled(const fi_provider* prov, int level, int subsys) {
  const LogConfig& c = Config();
  if (level < 0 || level >= FI_LOG_MAX || subsys < 0 || subsys >= FI_LOG_SUBSYS_MAX) return false;
  return level <= c.level && (c.subsys_mask & (1u << subsys)) != 0 && !Filtered(prov);
}

uint64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000;
}

// The fid fi_open("logging") returns; binding an application's
// fid_logging to it installs that logger.
int LogFidClose(fid* f) {
  delete f;
  return 0;
}

int LogFidBind(fid*, fid* bfid, uint64_t) {
  if (bfid == nullptr || bfid->fclass != FI_CLASS_LOG) return -FI_EINVAL;
  fid_logging* logging = reinterpret_cast<fid_logging*>(bfid);
  fi_ops_log* ops = logging->ops;
  if (ops == nullptr || ops->size < sizeof(fi_ops_log) || ops->enabled == nullptr ||
      ops->ready == nullptr || ops->log == nullptr) {
    return -FI_EINVAL;
  }
  g_imported.store(ops);
  return 0;
}

int LogFidControl(fid*, int, void*) { return -FI_ENOSYS; }
int LogFidOpsOpen(fid*, const char*, uint64_t, void**, void*) { return -FI_ENOSYS; }
int LogFidTostr(const fid*, char*, size_t) { return -FI_ENOSYS; }
int LogFidOpsSet(fid*, const char*, uint64_t, void*, void*) { return -FI_ENOSYS; }

fi_ops kLogFidOps = {
    sizeof(fi_ops), LogFidClose, LogFidBind,   LogFidControl,
    LogFidOpsOpen,  LogFidTostr, LogFidOpsSet,
};

}  // namespace

void ReloadLogConfig() {
  Config();
  g_config = LoadConfig();
}

void ForgetImportedLogger() { g_imported.store(nullptr); }

}  // namespace bypass::fi::core

using bypass::fi::core::Config;
using bypass::fi::core::g_imported;

extern "C" int fi_log_enabled(const struct fi_provider* prov, enum fi_log_level level,
                              enum fi_log_subsys subsys) {
  if (fi_ops_log* ops = g_imported.load(); ops != nullptr) {
    return ops->enabled(prov, level, subsys,
                        bypass::fi::core::Filtered(prov) ? FI_LOG_PROV_FILTERED : 0);
  }
  return bypass::fi::core::Enabled(prov, level, subsys) ? 1 : 0;
}

extern "C" int fi_log_ready(const struct fi_provider* prov, enum fi_log_level level,
                            enum fi_log_subsys subsys, uint64_t* showtime) {
  if (fi_ops_log* ops = g_imported.load(); ops != nullptr) {
    return ops->ready(prov, level, subsys,
                      bypass::fi::core::Filtered(prov) ? FI_LOG_PROV_FILTERED : 0, showtime);
  }
  if (!bypass::fi::core::Enabled(prov, level, subsys)) return 0;
  const uint64_t now = bypass::fi::core::NowMs();
  if (showtime == nullptr) return 1;
  if (*showtime != 0 && now < *showtime) return 0;
  *showtime = now + Config().interval_ms;
  return 1;
}

extern "C" void fi_log(const struct fi_provider* prov, enum fi_log_level level,
                       enum fi_log_subsys subsys, const char* func, int line, const char* fmt,
                       ...) {
  char msg[1024];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(msg, sizeof(msg), fmt, args);
  va_end(args);
  if (fi_ops_log* ops = g_imported.load(); ops != nullptr) {
    ops->log(prov, level, subsys, func, line, msg);
    return;
  }
  const int lvl = level >= 0 && level < FI_LOG_MAX ? level : FI_LOG_WARN;
  const int sub = subsys >= 0 && subsys < FI_LOG_SUBSYS_MAX ? subsys : FI_LOG_CORE;
  // libfabric's layout: package:pid:seconds:prefix:provider:subsystem:func():line<level> text.
  std::fprintf(stderr, "libfabric:%d:%ld::%s:%s:%s():%d<%s> %s", static_cast<int>(getpid()),
               static_cast<long>(std::time(nullptr)),
               prov != nullptr && prov->name != nullptr ? prov->name : "",
               bypass::fi::core::kSubsys[sub], func != nullptr ? func : "", line,
               bypass::fi::core::kLevels[lvl], msg);
}

// fi_open: libfabric 1.17 opens "logging" (fi_import_log) and "mr_cache"
// (fi_import of a memory monitor). bypass has logging; it registers memory
// with no cache, so there is no monitor to import: -FI_ENOSYS.
extern "C" int fi_open(uint32_t version, const char* name, void* attr, size_t attr_len,
                       uint64_t flags, struct fid** fid, void* context) {
  (void)version;
  (void)attr;
  (void)attr_len;
  (void)flags;
  if (name == nullptr || fid == nullptr) return -FI_EINVAL;
  if (std::strcmp(name, "logging") != 0) {
    BYPASS_CORE_LOG(FI_LOG_INFO, "fi_open(\"%s\"): bypass opens only \"logging\"\n", name);
    return -FI_ENOSYS;
  }
  struct fid* f = new (std::nothrow) struct fid;
  if (f == nullptr) return -FI_ENOMEM;
  f->fclass = FI_CLASS_LOG;
  f->context = context;
  f->ops = &bypass::fi::core::kLogFidOps;
  *fid = f;
  return 0;
}
