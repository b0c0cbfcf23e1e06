/* A C program linked against the installed static library only: fi_getinfo
 * and fi_fabric from bypass, with no libfabric in the process. */
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  struct fi_info* info = NULL;
  int ret = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, NULL, &info);
  if (ret != 0) {
    fprintf(stderr, "fi_getinfo: %s\n", fi_strerror(-ret));
    return 1;
  }
  struct fid_fabric* fabric = NULL;
  ret = fi_fabric(info->fabric_attr, &fabric, NULL);
  if (ret != 0) {
    fprintf(stderr, "fi_fabric: %s\n", fi_strerror(-ret));
    return 1;
  }
  printf("provider %s domain %s\n", info->fabric_attr->prov_name, info->domain_attr->name);
  fi_close(&fabric->fid);
  fi_freeinfo(info);
  return 0;
}
