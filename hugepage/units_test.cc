// Bytes and PageCount: arithmetic, rounding, covering, printing.
#include "hugepage/units.h"

#include "gtest/gtest.h"

namespace bypass::hugepage {
namespace {

TEST(BytesTest, Arithmetic) {
  EXPECT_EQ(Bytes::KiB(1).value(), 1024u);
  EXPECT_EQ(Bytes::MiB(2).value(), 2u << 20);
  EXPECT_EQ(Bytes::GiB(1).value(), 1u << 30);
  EXPECT_EQ(Bytes(3) + Bytes(4), Bytes(7));
  EXPECT_EQ(Bytes(10) - Bytes(4), Bytes(6));
  EXPECT_EQ(Bytes::KiB(4) * 512, Bytes::MiB(2));
  Bytes b(1);
  b += Bytes(2);
  EXPECT_EQ(b, Bytes(3));
  EXPECT_LT(Bytes::MiB(2), Bytes::GiB(1));
  EXPECT_EQ(Bytes(), Bytes(0));
}

TEST(BytesTest, RoundUpTo) {
  EXPECT_EQ(Bytes(0).RoundUpTo(Bytes::KiB(4)), Bytes(0));
  EXPECT_EQ(Bytes(1).RoundUpTo(Bytes::KiB(4)), Bytes::KiB(4));
  EXPECT_EQ(Bytes::KiB(4).RoundUpTo(Bytes::KiB(4)), Bytes::KiB(4));
  EXPECT_EQ((Bytes::MiB(2) + Bytes(1)).RoundUpTo(Bytes::MiB(2)), Bytes::MiB(4));
  EXPECT_EQ(Bytes(100).RoundUpTo(Bytes(64)), Bytes(128));
  EXPECT_EQ(Bytes(100).RoundUpTo(Bytes(1)), Bytes(100));
  static_assert(Bytes::MiB(4).RoundUpTo(Bytes::GiB(1)) == Bytes::GiB(1));
}

TEST(PageCountTest, Covering) {
  EXPECT_EQ(PageCount::Covering(Bytes(0), Bytes::KiB(4)), PageCount(0));
  EXPECT_EQ(PageCount::Covering(Bytes(1), Bytes::KiB(4)), PageCount(1));
  EXPECT_EQ(PageCount::Covering(Bytes::MiB(4), Bytes::MiB(2)), PageCount(2));
  EXPECT_EQ(PageCount::Covering(Bytes::MiB(4) + Bytes(1), Bytes::MiB(2)), PageCount(3));
  EXPECT_EQ(PageCount(3).InBytes(Bytes::MiB(2)), Bytes::MiB(6));
  EXPECT_LT(PageCount(1), PageCount(2));
}

TEST(BytesTest, ToString) {
  EXPECT_EQ(Bytes(0).ToString(), "0 B");
  EXPECT_EQ(Bytes(1536).ToString(), "1536 B");
  EXPECT_EQ(Bytes::KiB(4).ToString(), "4 KiB");
  EXPECT_EQ(Bytes::KiB(1536).ToString(), "1536 KiB");
  EXPECT_EQ(Bytes::MiB(2).ToString(), "2 MiB");
  EXPECT_EQ(Bytes::GiB(1).ToString(), "1 GiB");
  EXPECT_EQ(Bytes::GiB(1024).ToString(), "1 TiB");
  EXPECT_EQ((Bytes::GiB(1) + Bytes(1)).ToString(), "1073741825 B");
}

}  // namespace
}  // namespace bypass::hugepage
