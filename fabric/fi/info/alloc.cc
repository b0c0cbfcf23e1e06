// fi_info lists with libfabric's allocation discipline: every part comes
// from calloc/malloc/strdup, so libfabric's fi_freeinfo (free()) and ours
// release the same lists.
#include <cstdlib>
#include <cstring>

#include "fabric/fi/info/info.h"

namespace bypass::fi {
namespace {

template <typename T>
T* CopyOf(const T* src) {
  T* dst = static_cast<T*>(std::malloc(sizeof(T)));
  if (dst != nullptr) std::memcpy(dst, src, sizeof(T));
  return dst;
}

// A malloc'd copy of len bytes; null when src is null (not an error).
bool CopyBytes(const void* src, size_t len, void** dst) {
  *dst = nullptr;
  if (src == nullptr || len == 0) return true;
  *dst = std::malloc(len);
  if (*dst == nullptr) return false;
  std::memcpy(*dst, src, len);
  return true;
}

bool CopyString(const char* src, char** dst) {
  *dst = nullptr;
  if (src == nullptr) return true;
  *dst = strdup(src);
  return *dst != nullptr;
}

fi_info* AllocZeroed() {
  fi_info* info = static_cast<fi_info*>(std::calloc(1, sizeof(fi_info)));
  if (info == nullptr) return nullptr;
  info->tx_attr = static_cast<fi_tx_attr*>(std::calloc(1, sizeof(fi_tx_attr)));
  info->rx_attr = static_cast<fi_rx_attr*>(std::calloc(1, sizeof(fi_rx_attr)));
  info->ep_attr = static_cast<fi_ep_attr*>(std::calloc(1, sizeof(fi_ep_attr)));
  info->domain_attr = static_cast<fi_domain_attr*>(std::calloc(1, sizeof(fi_domain_attr)));
  info->fabric_attr = static_cast<fi_fabric_attr*>(std::calloc(1, sizeof(fi_fabric_attr)));
  if (info->tx_attr == nullptr || info->rx_attr == nullptr || info->ep_attr == nullptr ||
      info->domain_attr == nullptr || info->fabric_attr == nullptr) {
    FreeInfo(info);
    return nullptr;
  }
  return info;
}

void FreeOne(fi_info* info) {
  std::free(info->src_addr);
  std::free(info->dest_addr);
  std::free(info->tx_attr);
  std::free(info->rx_attr);
  if (info->ep_attr != nullptr) {
    std::free(info->ep_attr->auth_key);
    std::free(info->ep_attr);
  }
  if (info->domain_attr != nullptr) {
    std::free(info->domain_attr->name);
    std::free(info->domain_attr->auth_key);
    std::free(info->domain_attr);
  }
  if (info->fabric_attr != nullptr) {
    std::free(info->fabric_attr->name);
    std::free(info->fabric_attr->prov_name);
    std::free(info->fabric_attr);
  }
  // A NIC is an object with its own close, as in libfabric's fi_freeinfo.
  if (info->nic != nullptr) fi_close(&info->nic->fid);
  std::free(info);
}

}  // namespace

void FreeInfo(fi_info* info) {
  while (info != nullptr) {
    fi_info* next = info->next;
    FreeOne(info);
    info = next;
  }
}

fi_info* DupInfo(const fi_info* info) {
  if (info == nullptr) return AllocZeroed();
  fi_info* dup = CopyOf(info);
  if (dup == nullptr) return nullptr;
  dup->next = nullptr;
  // Everything below is replaced before it can be freed.
  dup->src_addr = nullptr;
  dup->dest_addr = nullptr;
  dup->tx_attr = nullptr;
  dup->rx_attr = nullptr;
  dup->ep_attr = nullptr;
  dup->domain_attr = nullptr;
  dup->fabric_attr = nullptr;
  // NICs are libfabric objects we cannot duplicate (none of ours has one).
  dup->nic = nullptr;
  bool ok = CopyBytes(info->src_addr, info->src_addrlen, &dup->src_addr) &&
            CopyBytes(info->dest_addr, info->dest_addrlen, &dup->dest_addr);
  if (ok && info->tx_attr != nullptr) ok = (dup->tx_attr = CopyOf(info->tx_attr)) != nullptr;
  if (ok && info->rx_attr != nullptr) ok = (dup->rx_attr = CopyOf(info->rx_attr)) != nullptr;
  if (ok && info->ep_attr != nullptr) {
    dup->ep_attr = CopyOf(info->ep_attr);
    ok = dup->ep_attr != nullptr;
    if (ok) {
      dup->ep_attr->auth_key = nullptr;
      void* key = nullptr;
      ok = CopyBytes(info->ep_attr->auth_key, info->ep_attr->auth_key_size, &key);
      dup->ep_attr->auth_key = static_cast<uint8_t*>(key);
    }
  }
  if (ok && info->domain_attr != nullptr) {
    dup->domain_attr = CopyOf(info->domain_attr);
    ok = dup->domain_attr != nullptr;
    if (ok) {
      dup->domain_attr->name = nullptr;
      dup->domain_attr->auth_key = nullptr;
      void* key = nullptr;
      ok = CopyString(info->domain_attr->name, &dup->domain_attr->name) &&
           CopyBytes(info->domain_attr->auth_key, info->domain_attr->auth_key_size, &key);
      dup->domain_attr->auth_key = static_cast<uint8_t*>(key);
    }
  }
  if (ok && info->fabric_attr != nullptr) {
    dup->fabric_attr = CopyOf(info->fabric_attr);
    ok = dup->fabric_attr != nullptr;
    if (ok) {
      dup->fabric_attr->name = nullptr;
      dup->fabric_attr->prov_name = nullptr;
      ok = CopyString(info->fabric_attr->name, &dup->fabric_attr->name) &&
           CopyString(info->fabric_attr->prov_name, &dup->fabric_attr->prov_name);
    }
  }
  if (!ok) {
    FreeInfo(dup);
    return nullptr;
  }
  return dup;
}

}  // namespace bypass::fi
