// The static library's libfabric core: one provider, reached through
// fi_prov_ini(), behind fi_getinfo / fi_fabric / fi_freeinfo / fi_dupinfo /
// fi_version, with libfabric's FI_PROVIDER filtering.
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include <strings.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "fabric/fi/core/internal.h"
#include "fabric/fi/info/info.h"

namespace bypass::fi::core {
namespace {

fi_provider g_core_prov = {
    FI_VERSION(1, 0),  // version
    kApiVersion,       // fi_version
    {},                // context
    "core",            // name, as libfabric's core logs
    nullptr,
    nullptr,
    nullptr,
};

fi_provider* g_prov = nullptr;
std::once_flag g_prov_once;

}  // namespace

fi_provider* CoreProvider() { return &g_core_prov; }

fi_provider* Provider() {
  std::call_once(g_prov_once, [] {
    DefineCoreParams();
    fi_provider* p = fi_prov_ini();
    if (p == nullptr) {
      BYPASS_CORE_LOG(FI_LOG_WARN, "fi_prov_ini returned no provider\n");
    } else if (p->name == nullptr || p->getinfo == nullptr || p->fabric == nullptr) {
      BYPASS_CORE_LOG(FI_LOG_WARN, "provider from fi_prov_ini lacks a name, getinfo or fabric\n");
      p = nullptr;
    } else if (FI_MAJOR(p->fi_version) != FI_MAJOR(kApiVersion) ||
               FI_MINOR(p->fi_version) > FI_MINOR(kApiVersion)) {
      BYPASS_CORE_LOG(FI_LOG_WARN, "provider %s wants libfabric API %u.%u; this core is %u.%u\n",
                      p->name, FI_MAJOR(p->fi_version), FI_MINOR(p->fi_version),
                      FI_MAJOR(kApiVersion), FI_MINOR(kApiVersion));
      p = nullptr;
    } else {
      BYPASS_CORE_LOG(FI_LOG_INFO, "registering provider: %s (%u.%u)\n", p->name,
                      FI_MAJOR(p->version), FI_MINOR(p->version));
    }
    g_prov = p;
  });
  return g_prov;
}

bool ProviderAllowed(const char* name) {
  const char* list = std::getenv("FI_PROVIDER");
  if (list == nullptr || list[0] == '\0') return true;
  const bool exclude = list[0] == '^';
  bool listed = false;
  const char* p = list + (exclude ? 1 : 0);
  const size_t n = std::strlen(name);
  while (*p != '\0') {
    const char* comma = std::strchr(p, ',');
    const size_t len = comma != nullptr ? static_cast<size_t>(comma - p) : std::strlen(p);
    if (len == n && strncasecmp(p, name, n) == 0) listed = true;
    if (comma == nullptr) break;
    p = comma + 1;
  }
  return exclude ? !listed : listed;
}

}  // namespace bypass::fi::core

using bypass::fi::core::Provider;
using bypass::fi::core::ProviderAllowed;

extern "C" uint32_t fi_version(void) { return bypass::fi::kApiVersion; }

extern "C" int fi_getinfo(uint32_t version, const char* node, const char* service, uint64_t flags,
                          const struct fi_info* hints, struct fi_info** info) {
  if (info == nullptr) return -FI_EINVAL;
  *info = nullptr;
  if (FI_MAJOR(version) != FI_MAJOR(bypass::fi::kApiVersion) ||
      FI_MINOR(version) > FI_MINOR(bypass::fi::kApiVersion)) {
    BYPASS_CORE_LOG(FI_LOG_WARN, "API version %u.%u asked; this library implements %u.%u\n",
                    FI_MAJOR(version), FI_MINOR(version), FI_MAJOR(bypass::fi::kApiVersion),
                    FI_MINOR(bypass::fi::kApiVersion));
    return -FI_ENOSYS;
  }
  fi_provider* prov = Provider();
  if (prov == nullptr) return -FI_ENODATA;
  if (!ProviderAllowed(prov->name)) {
    BYPASS_CORE_LOG(FI_LOG_INFO, "FI_PROVIDER=%s excludes %s\n", std::getenv("FI_PROVIDER"),
                    prov->name);
    return -FI_ENODATA;
  }
  if (hints != nullptr && hints->fabric_attr != nullptr &&
      hints->fabric_attr->prov_name != nullptr &&
      !bypass::fi::ProviderNameMatches(hints->fabric_attr->prov_name)) {
    BYPASS_CORE_LOG(FI_LOG_INFO, "provider %s asked; only %s is linked\n",
                    hints->fabric_attr->prov_name, prov->name);
    return -FI_ENODATA;
  }
  fi_info* list = nullptr;
  const int ret = prov->getinfo(version, node, service, flags, hints, &list);
  if (ret != 0) {
    if (ret != -FI_ENODATA) {
      BYPASS_CORE_LOG(FI_LOG_WARN, "fi_getinfo: provider %s returned %d (%s)\n", prov->name, ret,
                      fi_strerror(ret));
    }
    return ret;
  }
  // As libfabric does: the provider's name and version on every entry.
  for (fi_info* cur = list; cur != nullptr; cur = cur->next) {
    if (cur->fabric_attr == nullptr) continue;
    if (cur->fabric_attr->prov_name == nullptr) {
      cur->fabric_attr->prov_name = strdup(prov->name);
      if (cur->fabric_attr->prov_name == nullptr) {
        bypass::fi::FreeInfo(list);
        return -FI_ENOMEM;
      }
    }
    cur->fabric_attr->prov_version = prov->version;
  }
  if (list == nullptr) return -FI_ENODATA;
  *info = list;
  return 0;
}

extern "C" void fi_freeinfo(struct fi_info* info) { bypass::fi::FreeInfo(info); }

extern "C" struct fi_info* fi_dupinfo(const struct fi_info* info) {
  return bypass::fi::DupInfo(info);
}

extern "C" int fi_fabric(struct fi_fabric_attr* attr, struct fid_fabric** fabric, void* context) {
  if (attr == nullptr || attr->name == nullptr || fabric == nullptr) return -FI_EINVAL;
  fi_provider* prov = Provider();
  if (prov == nullptr) return -FI_ENODEV;
  if (attr->prov_name != nullptr && strcasecmp(attr->prov_name, prov->name) != 0) {
    BYPASS_CORE_LOG(FI_LOG_WARN, "fi_fabric: provider %s is not linked (only %s)\n",
                    attr->prov_name, prov->name);
    return -FI_ENODEV;
  }
  return prov->fabric(attr, fabric, context);
}
