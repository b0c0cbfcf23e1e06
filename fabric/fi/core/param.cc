// libfabric's configuration parameters: fi_param_define records a name
// (FI_<PROV>_<NAME>, upper case, as libfabric forms it), a type and a help
// text; fi_param_get reads the environment; fi_getparams lists them all
// (what `fi_info -e` prints).
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include <strings.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "fabric/fi/core/internal.h"

namespace bypass::fi::core {
namespace {

struct Param {
  std::string name;  // the environment variable
  fi_param_type type;
  std::string help;
};

std::mutex g_mu;
std::vector<Param>& Params() {
  static auto* params = new std::vector<Param>();  // never destroyed: used until exit
  return *params;
}

// FI_ + provider name (if any) + _ + param name, upper case, nothing else
// changed (libfabric keeps '-' and '.').
std::string EnvName(const fi_provider* prov, const char* param) {
  std::string name = "FI_";
  if (prov != nullptr && prov->name != nullptr && prov != CoreProvider()) {
    name += prov->name;
    name += "_";
  }
  name += param;
  return absl::AsciiStrToUpper(name);
}

const Param* Find(const std::string& name) {
  for (const Param& p : Params()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

// "1", "on", "yes", "true" and their opposites, any case.
int ParseBool(const char* v, int* out) {
  for (const char* t : {"1", "on", "yes", "true"}) {
    if (strcasecmp(v, t) == 0) return *out = 1, 0;
  }
  for (const char* f : {"0", "off", "no", "false"}) {
    if (strcasecmp(v, f) == 0) return *out = 0, 0;
  }
  return -FI_EINVAL;
}

}  // namespace

void DefineCoreParams() {
  static std::once_flag once;
  std::call_once(once, [] {
    fi_provider* core = CoreProvider();
    fi_param_define(core, "provider", FI_PARAM_STRING,
                    "Only use specified provider (default: all available)");
    fi_param_define(core, "log_level", FI_PARAM_STRING,
                    "Specify logging level: warn, trace, info, debug (default: warn)");
    fi_param_define(core, "log_prov", FI_PARAM_STRING,
                    "Specify specific provider to log (default: all)");
    fi_param_define(core, "log_subsys", FI_PARAM_STRING,
                    "Specify specific subsystem to log (default: all)");
    fi_param_define(core, "log_interval", FI_PARAM_INT,
                    "Delay in ms between rate limited log messages (default 2000)");
  });
}

}  // namespace bypass::fi::core

using bypass::fi::core::EnvName;
using bypass::fi::core::Find;
using bypass::fi::core::g_mu;
using bypass::fi::core::Param;
using bypass::fi::core::Params;

extern "C" int fi_param_define(const struct fi_provider* provider, const char* param_name,
                               enum fi_param_type type, const char* help_string_fmt, ...) {
  if (param_name == nullptr || help_string_fmt == nullptr) return -FI_EINVAL;
  if (type != FI_PARAM_STRING && type != FI_PARAM_INT && type != FI_PARAM_BOOL &&
      type != FI_PARAM_SIZE_T) {
    return -FI_EINVAL;
  }
  char help[1024];
  va_list args;
  va_start(args, help_string_fmt);
  // The format is the caller's, by fi_param_define's contract (libfabric's
  // header declares it without a format attribute clang could check).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
  std::vsnprintf(help, sizeof(help), help_string_fmt, args);
#pragma GCC diagnostic pop
  va_end(args);
  Param p{EnvName(provider, param_name), type, help};
  std::lock_guard<std::mutex> lock(g_mu);
  // A second definition is accepted and changes nothing (as in libfabric).
  if (Find(p.name) != nullptr) return 0;
  Params().push_back(std::move(p));
  return 0;
}

extern "C" int fi_param_get(struct fi_provider* provider, const char* param_name, void* value) {
  if (param_name == nullptr || value == nullptr) return -FI_EINVAL;
  const std::string name = EnvName(provider, param_name);
  fi_param_type type;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    const Param* p = Find(name);
    if (p == nullptr) {
      BYPASS_CORE_LOG(FI_LOG_DEBUG, "variable %s is not defined (fi_param_define it first)\n",
                      name.c_str());
      return -FI_ENOENT;
    }
    type = p->type;
  }
  const char* v = std::getenv(name.c_str());
  if (v == nullptr) {
    BYPASS_CORE_LOG(FI_LOG_INFO, "variable %s=<not set>\n", param_name);
    return -FI_ENODATA;
  }
  char* end = nullptr;
  errno = 0;
  switch (type) {
    case FI_PARAM_STRING:
      *static_cast<char**>(value) = const_cast<char*>(v);
      BYPASS_CORE_LOG(FI_LOG_INFO, "read string var %s=%s\n", param_name, v);
      return 0;
    case FI_PARAM_INT: {
      const long n = std::strtol(v, &end, 0);
      if (end == v || *end != '\0' || errno != 0 || n < INT32_MIN || n > INT32_MAX) {
        BYPASS_CORE_LOG(FI_LOG_WARN, "%s=%s is not an integer; set a number or unset it\n",
                        name.c_str(), v);
        return -FI_EINVAL;
      }
      *static_cast<int*>(value) = static_cast<int>(n);
      BYPASS_CORE_LOG(FI_LOG_INFO, "read int var %s=%d\n", param_name, static_cast<int>(n));
      return 0;
    }
    case FI_PARAM_BOOL: {
      int b = 0;
      if (bypass::fi::core::ParseBool(v, &b) != 0) {
        BYPASS_CORE_LOG(FI_LOG_WARN,
                        "%s=%s is not a boolean; use 1/0, on/off, yes/no, true/false\n",
                        name.c_str(), v);
        return -FI_EINVAL;
      }
      *static_cast<int*>(value) = b;
      BYPASS_CORE_LOG(FI_LOG_INFO, "read bool var %s=%d\n", param_name, b);
      return 0;
    }
    case FI_PARAM_SIZE_T: {
      const unsigned long long n = std::strtoull(v, &end, 0);
      if (end == v || *end != '\0' || errno != 0 || v[0] == '-') {
        BYPASS_CORE_LOG(FI_LOG_WARN, "%s=%s is not a size; set a non-negative number or unset it\n",
                        name.c_str(), v);
        return -FI_EINVAL;
      }
      *static_cast<size_t*>(value) = static_cast<size_t>(n);
      BYPASS_CORE_LOG(FI_LOG_INFO, "read long var %s=%zu\n", param_name, static_cast<size_t>(n));
      return 0;
    }
  }
  return -FI_EINVAL;
}

extern "C" int fi_getparams(struct fi_param** params, int* count) {
  if (params == nullptr || count == nullptr) return -FI_EINVAL;
  bypass::fi::core::DefineCoreParams();
  std::lock_guard<std::mutex> lock(g_mu);
  const std::vector<Param>& all = Params();
  // One more, zeroed, ends the array as in libfabric.
  fi_param* out = static_cast<fi_param*>(std::calloc(all.size() + 1, sizeof(fi_param)));
  if (out == nullptr) return -FI_ENOMEM;
  for (size_t i = 0; i < all.size(); ++i) {
    const char* v = std::getenv(all[i].name.c_str());
    out[i].name = strdup(all[i].name.c_str());
    out[i].type = all[i].type;
    out[i].help_string = strdup(all[i].help.c_str());
    out[i].value = v != nullptr ? strdup(v) : nullptr;
    if (out[i].name == nullptr || out[i].help_string == nullptr ||
        (v != nullptr && out[i].value == nullptr)) {
      fi_freeparams(out);
      return -FI_ENOMEM;
    }
  }
  *params = out;
  *count = static_cast<int>(all.size());
  return 0;
}

extern "C" void fi_freeparams(struct fi_param* params) {
  if (params == nullptr) return;
  for (fi_param* p = params; p->name != nullptr; ++p) {
    std::free(const_cast<char*>(p->name));
    std::free(const_cast<char*>(p->help_string));
    std::free(const_cast<char*>(p->value));
  }
  std::free(params);
}
