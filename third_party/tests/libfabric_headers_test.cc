// libfabric 1.17's headers from Debian's libfabric-dev compile, with the
// version and ABI structures the facade implements. No libfabric is linked.
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/providers/fi_prov.h>

#include <cstddef>

#include "gtest/gtest.h"

namespace {

TEST(LibfabricHeadersTest, VersionIs1_17) {
  EXPECT_EQ(FI_MAJOR_VERSION, 1);
  EXPECT_EQ(FI_MINOR_VERSION, 17);
  EXPECT_EQ(FI_VERSION(1, 17), (1u << 16) | 17u);
}

TEST(LibfabricHeadersTest, ProviderAbiIsPresent) {
  fi_provider prov{};
  prov.version = FI_VERSION(1, 0);
  prov.fi_version = FI_VERSION(1, 17);
  prov.name = "bypass";
  EXPECT_STREQ(prov.name, "bypass");
  // Objects embed their fid first; the facade relies on these offsets.
  EXPECT_EQ(offsetof(fid_ep, fid), 0u);
  EXPECT_EQ(offsetof(fid_domain, fid), 0u);
  EXPECT_EQ(FI_EAGAIN, 11);
  EXPECT_NE(FI_EP_RDM, FI_EP_DGRAM);
}

}  // namespace
