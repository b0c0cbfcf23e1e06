#include "tools/wireshark/tshark.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace bypass::wireshark {

std::string FindTshark() {
  const char* path = getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "", ':')) {
    const std::string p = absl::StrCat(dir, "/tshark");
    if (!dir.empty() && access(p.c_str(), X_OK) == 0) return p;
  }
  return access("/usr/bin/tshark", X_OK) == 0 ? "/usr/bin/tshark" : "";
}

TsharkResult RunTshark(const std::string& tshark, const std::string& capture,
                       const std::vector<std::string>& args) {
  TsharkResult r;
  const char* tmp = getenv("TEST_TMPDIR");
  // Arguments are the test's own (paths, field names): quoted, not escaped.
  r.command = absl::StrCat("HOME='", tmp != nullptr ? tmp : "/tmp", "' '", tshark, "' -n -r '",
                           capture, "' -X lua_script:tools/wireshark/bypass.lua");
  for (const std::string& a : args) absl::StrAppend(&r.command, " '", a, "'");
  FILE* p = popen(absl::StrCat(r.command, " 2>/dev/null").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace bypass::wireshark
