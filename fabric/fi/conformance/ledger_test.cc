#include "fabric/fi/conformance/ledger.h"

#include "gtest/gtest.h"

namespace bypass::fi::conformance {
namespace {

constexpr char kHeader[] =
    "# Ledger\n\ntext\n\n| test | object | call | behaviour | bypass | reference | note |\n|---|---|---|---|---|---|---|\n";

TEST(Ledger, ParsesRows) {
  const std::string text = std::string(kHeader) +
                           "| `a_b` | cq | fi_cq_read | x \\| y | done | shm: pass | |\n"
                           "| `c` | av | fi_av_insert | z | missing | tcp: fail (why) | not yet |\n"
                           "\nafter the table | not a row |\n";
  absl::StatusOr<std::vector<Row>> rows = ParseLedger(text);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].test, "a_b");
  EXPECT_EQ((*rows)[0].state, State::kDone);
  EXPECT_EQ((*rows)[0].line, 7);
  EXPECT_EQ((*rows)[1].state, State::kMissing);
  EXPECT_EQ((*rows)[1].reference, "tcp: fail (why)");
  EXPECT_EQ((*rows)[1].note, "not yet");
}

TEST(Ledger, RefusesBadRows) {
  const char* bad[] = {
      "| `a` | cq | c | b | maybe | shm: pass | |\n",      // unknown state
      "| `a` | cq | c | b | missing | shm: pass | |\n",    // missing without a reason
      "| a | cq | c | b | done | shm: pass | |\n",          // not a `name`
      "| `a` | cq | c | b | done | shm: pass |\n",          // a column short
      "| `a` | cq | c | b | done | shm: pass | |\n| `a` | cq | c | b | done | shm: pass | |\n",  // twice
  };
  for (const char* row : bad) {
    absl::StatusOr<std::vector<Row>> rows = ParseLedger(std::string(kHeader) + row);
    EXPECT_FALSE(rows.ok()) << row;
    if (!rows.ok()) {
      EXPECT_NE(rows.status().message().find("CONFORMANCE.md:"), absl::string_view::npos) << rows.status();
    }
  }
  EXPECT_FALSE(ParseLedger("no table\n").ok());
}

}  // namespace
}  // namespace bypass::fi::conformance
