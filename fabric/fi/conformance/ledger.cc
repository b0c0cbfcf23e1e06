#include "fabric/fi/conformance/ledger.h"

#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"

namespace bypass::fi::conformance {
namespace {

// The cells of a Markdown table line ("| a | b |"), `\|` kept as `|`.
std::vector<std::string> Cells(absl::string_view line) {
  std::vector<std::string> cells;
  std::string cell;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
      cell += '|';
      ++i;
    } else if (line[i] == '|') {
      cells.push_back(std::string(absl::StripAsciiWhitespace(cell)));
      cell.clear();
    } else {
      cell += line[i];
    }
  }
  // The text before the first '|' is not a cell.
  if (!cells.empty()) cells.erase(cells.begin());
  return cells;
}

absl::StatusOr<State> ParseState(absl::string_view cell) {
  if (cell == "done") return State::kDone;
  if (cell == "missing") return State::kMissing;
  if (cell == "refused") return State::kRefused;
  return absl::InvalidArgumentError(
      absl::StrCat("state \"", cell, "\" is not done, missing or refused"));
}

constexpr int kColumns = 7;  // test, object, call, behaviour, bypass, reference, note

}  // namespace

absl::StatusOr<std::vector<Row>> ParseLedger(absl::string_view text) {
  std::vector<Row> rows;
  std::set<std::string> seen;
  bool in_table = false;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (absl::StartsWith(line, "| test |")) {
      in_table = true;
      continue;
    }
    if (!in_table) continue;
    if (!absl::StartsWith(line, "|")) {
      in_table = false;
      continue;
    }
    if (absl::StartsWith(line, "|---") || absl::StartsWith(line, "| ---")) continue;
    std::vector<std::string> cells = Cells(line);
    auto where = [&] { return absl::StrCat("CONFORMANCE.md:", line_no, ": "); };
    if (cells.size() != kColumns) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), "a row has ", cells.size(), " cells, want ", kColumns,
                       " (escape a | inside a cell as \\|)"));
    }
    absl::string_view test = cells[0];
    if (!absl::ConsumePrefix(&test, "`") || !absl::ConsumeSuffix(&test, "`") || test.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), "the test cell \"", cells[0], "\" is not a `name`"));
    }
    absl::StatusOr<State> state = ParseState(cells[4]);
    if (!state.ok()) return absl::InvalidArgumentError(absl::StrCat(where(), state.status().message()));
    if (*state == State::kMissing && cells[6].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), "row ", test, " is missing but its note gives no reason"));
    }
    if (!seen.insert(std::string(test)).second) {
      return absl::InvalidArgumentError(absl::StrCat(where(), "row ", test, " appears twice"));
    }
    rows.push_back(Row{std::string(test), *state, cells[5], cells[6], line_no});
  }
  if (rows.empty()) return absl::InvalidArgumentError("CONFORMANCE.md has no \"| test |\" table");
  return rows;
}

}  // namespace bypass::fi::conformance
