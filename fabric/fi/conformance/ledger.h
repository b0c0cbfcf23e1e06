// The ledger, fabric/fi/CONFORMANCE.md: one table row per behaviour of the
// man pages, naming the case that proves it and bypass's state. The suite
// reads it at runtime so the two cannot drift.
#ifndef BYPASS_FABRIC_FI_CONFORMANCE_LEDGER_H_
#define BYPASS_FABRIC_FI_CONFORMANCE_LEDGER_H_

#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"

namespace bypass::fi::conformance {

enum class State { kDone, kMissing, kRefused };

struct Row {
  std::string test;       // the case's name
  State state;            // bypass today
  std::string reference;  // e.g. "shm: pass"
  std::string note;       // a missing row's reason goes here
  int line;               // in CONFORMANCE.md
};

// The rows of the table whose header starts "| test |". A row with an
// unknown state, a missing row without a note, or a repeated test name is
// an error naming its line.
absl::StatusOr<std::vector<Row>> ParseLedger(absl::string_view text);

}  // namespace bypass::fi::conformance

#endif  // BYPASS_FABRIC_FI_CONFORMANCE_LEDGER_H_
