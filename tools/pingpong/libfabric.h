// libfabric's core entry points, loaded when the fi layer first needs them:
// a tool that runs the raw or rdm layer never maps libfabric, whose loading
// costs a process start about 0.2 s here (Debian's build pulls in PSM,
// whose constructor sleeps).
#ifndef BYPASS_TOOLS_PINGPONG_LIBFABRIC_H_
#define BYPASS_TOOLS_PINGPONG_LIBFABRIC_H_

#include <rdma/fabric.h>

#include <cstdint>

#include "absl/status/statusor.h"

namespace bypass::tools {

// The functions the fi layer calls by name; everything else in libfabric's
// API is an inline call through the objects' ops tables.
struct Libfabric {
  int (*getinfo)(uint32_t version, const char* node, const char* service, uint64_t flags,
                 const fi_info* hints, fi_info** info) = nullptr;
  void (*freeinfo)(fi_info* info) = nullptr;
  fi_info* (*dupinfo)(const fi_info* info) = nullptr;
  int (*fabric)(fi_fabric_attr* attr, fid_fabric** fabric, void* context) = nullptr;
  const char* (*strerror)(int errnum) = nullptr;
};

// Loads libfabric.so.1 (RTLD_GLOBAL: providers it loads, libbypass-fi.so
// among them, bind to its symbols) once; later calls return the same
// table. Fails with one line saying what to install.
absl::StatusOr<const Libfabric*> LoadLibfabric();

}  // namespace bypass::tools

#endif  // BYPASS_TOOLS_PINGPONG_LIBFABRIC_H_
