// bypass-stat: the engine counters of running bypass processes, read from
// their stats sockets (fabric/stats/README.md) or any DPDK telemetry socket.
//
//   bypass-stat                          every process: its socket and /bypass/engines
//   bypass-stat PID [CMD...]             CMD: /bypass/engines (default),
//                                        /bypass/engine,ID, /bypass/peers,ID,
//                                        /bypass/devices, /bypass/device,ID, /
//   bypass-stat --socket=PATH [CMD...]   e.g. /var/run/dpdk/PREFIX/dpdk_telemetry.v2
//
// Prints one JSON answer per line, as the socket sent it.
#include <dirent.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "fabric/stats/stats.h"

namespace {

constexpr char kUsage[] =
    "usage: bypass-stat [PID | --socket=PATH] [CMD...]\n"
    "  no PID: every process serving stats under $BYPASS_STATS_DIR or /run/bypass/stats.u<uid>\n"
    "  CMD: /bypass/engines (default), /bypass/engine,ID, /bypass/peers,ID,\n"
    "       /bypass/devices, /bypass/device,ID, / (the commands)\n"
    "  processes serve their stats when run with BYPASS_STATS=1\n";

// Queries cmds at path; false if one failed (said on stderr).
bool Print(const std::string& path, const std::vector<std::string>& cmds) {
  bool ok = true;
  for (const std::string& cmd : cmds) {
    absl::StatusOr<std::string> answer = bypass::stats::Query(path, cmd);
    if (!answer.ok()) {
      std::fprintf(stderr, "bypass-stat: %s\n", std::string(answer.status().message()).c_str());
      ok = false;
      continue;
    }
    std::printf("%s\n", answer->c_str());
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  std::string path;
  std::vector<std::string> cmds;
  bool all = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    int pid = 0;
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (absl::StartsWith(a, "--socket=")) {
      path = a.substr(9);
      all = false;
    } else if (all && path.empty() && absl::SimpleAtoi(a, &pid) && pid > 0) {
      path = bypass::stats::SocketPath(pid);
      all = false;
    } else if (absl::StartsWith(a, "/")) {
      cmds.push_back(a);
    } else {
      std::fprintf(stderr, "bypass-stat: unknown argument '%s'\n%s", a.c_str(), kUsage);
      return 2;
    }
  }
  if (cmds.empty()) cmds.push_back("/bypass/engines");
  if (!all) return Print(path, cmds) ? 0 : 1;
  const std::string dir = bypass::stats::SocketDir();
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    std::fprintf(stderr, "bypass-stat: no process serves stats (%s is missing): run them with BYPASS_STATS=1\n",
                 dir.c_str());
    return 1;
  }
  int found = 0;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (!absl::EndsWith(name, ".sock")) continue;
    std::printf("# %s/%s\n", dir.c_str(), name.c_str());
    Print(dir + "/" + name, cmds);
    ++found;
  }
  closedir(d);
  if (found == 0) std::fprintf(stderr, "bypass-stat: no process serves stats in %s\n", dir.c_str());
  return found > 0 ? 0 : 1;
}
