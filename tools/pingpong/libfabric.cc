#include "tools/pingpong/libfabric.h"

#include <dlfcn.h>

#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"

namespace bypass::tools {

absl::StatusOr<const Libfabric*> LoadLibfabric() {
  static Libfabric lib;
  static std::string error;
  static const bool loaded = [] {
    void* h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (h == nullptr) {
      const char* why = dlerror();
      error = absl::StrCat("cannot load libfabric.so.1 (", why == nullptr ? "?" : why,
                           "): install libfabric1 (tools/setup.sh does)");
      return false;
    }
    bool ok = true;
    auto bind = [&](auto** fn, const char* name) {
      *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(h, name));
      if (*fn == nullptr && ok) {
        ok = false;
        error = absl::StrCat("libfabric.so.1 has no ", name, ": install libfabric1 1.17 or later");
      }
    };
    bind(&lib.getinfo, "fi_getinfo");
    bind(&lib.freeinfo, "fi_freeinfo");
    bind(&lib.dupinfo, "fi_dupinfo");
    bind(&lib.fabric, "fi_fabric");
    bind(&lib.strerror, "fi_strerror");
    return ok;
  }();
  if (!loaded) return absl::FailedPreconditionError(error);
  return &lib;
}

}  // namespace bypass::tools
