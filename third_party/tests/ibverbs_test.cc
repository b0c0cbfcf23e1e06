// rdma-core's libibverbs and libmlx5 from Debian link; the device list is
// read. On a machine without RDMA devices (as here) an empty list is a pass
// that says so.
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>

#include "gtest/gtest.h"

namespace {

TEST(IbverbsTest, DeviceListIsReadable) {
  int n = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) {
    printf("ibv_get_device_list: no RDMA devices on this machine (%s); that is a pass\n",
           errno ? strerror(errno) : "empty");
    SUCCEED();
    return;
  }
  printf("%d RDMA device(s)\n", n);
  for (int i = 0; i < n; ++i) {
    printf("  %s mlx5dv supported: %d\n", ibv_get_device_name(list[i]),
           mlx5dv_is_supported(list[i]) ? 1 : 0);
  }
  ibv_free_device_list(list);
}

TEST(IbverbsTest, Mlx5HeaderLayoutIsTheOneWeCodeAgainst) {
  static_assert(sizeof(mlx5_wqe_ctrl_seg) == 16);
  static_assert(sizeof(mlx5_wqe_data_seg) == 16);
  static_assert(sizeof(mlx5_cqe64) == 64);
  mlx5_wqe_data_seg seg;
  mlx5dv_set_data_seg(&seg, 0x100, 0x1234, 0xabcdef);
  EXPECT_EQ(be32toh(seg.byte_count), 0x100u);
  EXPECT_EQ(be32toh(seg.lkey), 0x1234u);
  EXPECT_EQ(be64toh(seg.addr), 0xabcdefu);
}

}  // namespace
