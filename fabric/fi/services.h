// The libfabric core services the provider uses (fi_log, fi_param_*), reached
// through one translation unit. Inside libfabric (libbypass-fi.so) they are
// the loaded libfabric's own functions, bound when the .so is opened; in the
// static library they are fabric/fi/core's. A program that links neither
// (the facade's own unit tests) gets the environment and stderr instead.
#ifndef BYPASS_FABRIC_FI_SERVICES_H_
#define BYPASS_FABRIC_FI_SERVICES_H_

#include <rdma/fabric.h>
#include <rdma/fi_ext.h>
#include <rdma/providers/fi_prov.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace bypass::fi {

// The provider structure fi_prov_ini returns (the core writes its context).
fi_provider* Provider();

// Defines one FI_BYPASS_<NAME> parameter (fi_info -e lists it).
void DefineParam(const char* name, fi_param_type type, const char* help);
// Its value, if set (fi_param_get; getenv without a core).
std::optional<std::string> ParamString(const char* name);
std::optional<int64_t> ParamInt(const char* name, fi_param_type type = FI_PARAM_INT);

// fi_cq_strerror / fi_eq_strerror: err_data (our one-line message) when
// present, else the errno's text; copied into buf when one is given.
const char* ErrorText(int prov_errno, const void* err_data, char* buf, size_t len);

bool LogEnabled(fi_log_level level, fi_log_subsys subsys);
void LogLine(fi_log_level level, fi_log_subsys subsys, const char* func, int line, const char* fmt,
             ...) __attribute__((format(printf, 5, 6)));

}  // namespace bypass::fi

#define BYPASS_FI_LOG(level, subsys, ...)                                               \
  do {                                                                                  \
    if (::bypass::fi::LogEnabled(level, subsys))                                        \
      ::bypass::fi::LogLine(level, subsys, __func__, __LINE__, __VA_ARGS__);            \
  } while (0)
#define BYPASS_FI_WARN(subsys, ...) BYPASS_FI_LOG(FI_LOG_WARN, subsys, __VA_ARGS__)
#define BYPASS_FI_INFO(subsys, ...) BYPASS_FI_LOG(FI_LOG_INFO, subsys, __VA_ARGS__)
#define BYPASS_FI_DBG(subsys, ...) BYPASS_FI_LOG(FI_LOG_DEBUG, subsys, __VA_ARGS__)

#endif  // BYPASS_FABRIC_FI_SERVICES_H_
