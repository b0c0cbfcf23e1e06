// What the core's entry points share: the one provider, the core's own
// logging identity and parameters.
#ifndef BYPASS_FABRIC_FI_CORE_INTERNAL_H_
#define BYPASS_FABRIC_FI_CORE_INTERNAL_H_

#include <rdma/fabric.h>
#include <rdma/providers/fi_log.h>
#include <rdma/providers/fi_prov.h>

extern "C" struct fi_provider* fi_prov_ini(void);

namespace bypass::fi::core {

// The provider fi_prov_ini returned (asked once); null if it returned none.
fi_provider* Provider();

// The name libfabric's core logs and defines its parameters under.
fi_provider* CoreProvider();

// Whether FI_PROVIDER (a comma-separated list, '^' first to exclude) lets
// a provider of this name be used.
bool ProviderAllowed(const char* name);

// Reads FI_LOG_LEVEL, FI_LOG_PROV, FI_LOG_SUBSYS and FI_LOG_INTERVAL again
// (they are read once, at the first log call). REQUIRES: no concurrent
// logging (tests).
void ReloadLogConfig();

// Drops a logger imported with fi_import_log (tests).
void ForgetImportedLogger();

// Defines the core's own parameters (FI_PROVIDER, FI_LOG_*) once.
void DefineCoreParams();

}  // namespace bypass::fi::core

// Logs as libfabric's core does (FI_WARN(&core_prov, ...)).
#define BYPASS_CORE_LOG(level, ...)                                                      \
  do {                                                                                   \
    if (fi_log_enabled(::bypass::fi::core::CoreProvider(), level, FI_LOG_CORE)) {        \
      fi_log(::bypass::fi::core::CoreProvider(), level, FI_LOG_CORE, __func__, __LINE__, \
             __VA_ARGS__);                                                               \
    }                                                                                    \
  } while (0)

#endif  // BYPASS_FABRIC_FI_CORE_INTERNAL_H_
