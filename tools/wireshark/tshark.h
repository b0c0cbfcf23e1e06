// For tests: runs Debian's tshark with the bypass dissector over a capture.
#ifndef BYPASS_TOOLS_WIRESHARK_TSHARK_H_
#define BYPASS_TOOLS_WIRESHARK_TSHARK_H_

#include <string>
#include <vector>

namespace bypass::wireshark {

// tshark's path (PATH, then /usr/bin), or "" when it is not installed.
std::string FindTshark();

// What tshark printed on standard output and how it exited.
struct TsharkResult {
  int status = -1;     // exit status; -1: it could not run or was killed
  std::string out;
  std::string command;  // for messages
};

// Runs `tshark -n -r capture -X lua_script:<the dissector> <args...>` with
// the dissector from the runfiles (tools/wireshark/bypass.lua) and HOME in
// the test's temporary directory (tshark reads and writes its profile there).
TsharkResult RunTshark(const std::string& tshark, const std::string& capture,
                       const std::vector<std::string>& args);

// The message a test fails with when tshark is missing.
inline constexpr char kTsharkMissing[] =
    "tshark is missing: tools/setup.sh installs it (Debian package tshark)";

}  // namespace bypass::wireshark

#endif  // BYPASS_TOOLS_WIRESHARK_TSHARK_H_
