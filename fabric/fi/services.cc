#include "fabric/fi/services.h"

#include <cctype>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"

// Weak: resolved by the libfabric that opens us, or by fabric/fi/core when
// linked statically; null in a program with neither. Only this file names
// them, so nothing else makes the references strong.
#pragma weak fi_param_define
#pragma weak fi_param_get
#pragma weak fi_log_enabled
#pragma weak fi_log

namespace bypass::fi {
namespace {

// FI_BYPASS_<NAME>, as libfabric spells a provider's variable.
std::string EnvName(const char* name) {
  std::string env = "FI_BYPASS_";
  for (const char* p = name; *p != '\0'; ++p) {
    env += static_cast<char>(std::toupper(static_cast<unsigned char>(*p)));
  }
  return env;
}

}  // namespace

const char* ErrorText(int prov_errno, const void* err_data, char* buf, size_t len) {
  const char* msg = err_data != nullptr ? static_cast<const char*>(err_data)
                                        : std::strerror(prov_errno < 0 ? -prov_errno : prov_errno);
  if (buf != nullptr && len > 0) {
    std::snprintf(buf, len, "%s", msg);
    return buf;
  }
  return msg;
}

void DefineParam(const char* name, fi_param_type type, const char* help) {
  if (fi_param_define != nullptr) fi_param_define(Provider(), name, type, "%s", help);
}

std::optional<std::string> ParamString(const char* name) {
  if (fi_param_get != nullptr) {
    char* value = nullptr;
    if (fi_param_get(Provider(), name, &value) == 0 && value != nullptr) return std::string(value);
    return std::nullopt;
  }
  const char* v = std::getenv(EnvName(name).c_str());
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

std::optional<int64_t> ParamInt(const char* name, fi_param_type type) {
  if (fi_param_get != nullptr) {
    // fi_param_get writes the parameter's defined type.
    if (type == FI_PARAM_SIZE_T) {
      size_t v = 0;
      if (fi_param_get(Provider(), name, &v) == 0) return static_cast<int64_t>(v);
    } else {
      int v = 0;
      if (fi_param_get(Provider(), name, &v) == 0) return v;
    }
    return std::nullopt;
  }
  const char* text = std::getenv(EnvName(name).c_str());
  if (text == nullptr) return std::nullopt;
  int64_t v = 0;
  if (!absl::SimpleAtoi(text, &v)) {
    BYPASS_FI_WARN(FI_LOG_CORE, "%s=%s is not a number; ignored\n", EnvName(name).c_str(), text);
    return std::nullopt;
  }
  return v;
}

bool LogEnabled(fi_log_level level, fi_log_subsys subsys) {
  if (fi_log_enabled != nullptr) return fi_log_enabled(Provider(), level, subsys) != 0;
  return level == FI_LOG_WARN;
}

void LogLine(fi_log_level level, fi_log_subsys subsys, const char* func, int line, const char* fmt,
             ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (fi_log != nullptr) {
    fi_log(Provider(), level, subsys, func, line, "%s", msg);
  } else {
    std::fprintf(stderr, "bypass:%s(): %s", func, msg);
  }
}

}  // namespace bypass::fi
