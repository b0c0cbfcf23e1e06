// Runs every case against bypass (loaded by Debian's libfabric through
// FI_PROVIDER_PATH) and against its reference provider, each run in a child
// process of its own, and judges bypass's outcome by its ledger row:
//   done     the case must pass;
//   missing  the case must fail (reported as skipped with the row's reason);
//            one that passes fails the test: the ledger is out of date;
//   refused  fi_getinfo must refuse what the case needs.
// The reference provider's outcomes are printed, never a failure.
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <cstring>
#include <string>

#include "fabric/fi/conformance/conformance.h"
#include "fabric/fi/conformance/ledger.h"
#include "gtest/gtest.h"

namespace bypass::fi::conformance {
namespace {

// A child that outlives this is killed and reported as a hang. Above every
// guard inside a case (HangGuard: at most kHangSeconds + 5), and short: a
// reference provider that blocks past its own guard (shm's sread ignores
// the alarm) costs the suite this much per case.
constexpr int kCaseHangSeconds = 25;

enum class Kind { kPass, kFail, kRefused };
struct Outcome {
  Kind kind;
  std::string message;
};

const char* KindName(Kind k) { return k == Kind::kPass ? "pass" : k == Kind::kFail ? "fail" : "refused"; }

// The case in this (child) process; its verdict as one line on `fd`.
[[noreturn]] void RunHere(const CaseDef& def, const std::string& prov, int fd) {
  std::string verdict;
  SetVerdictFd(fd);
  {
    Ctx ctx(prov);
    try {
      def.fn(ctx);
      verdict = "P";
    } catch (const Failure& f) {
      verdict = "F" + f.what;
    } catch (const Refused& r) {
      verdict = "R" + r.what;
    } catch (const std::exception& e) {
      verdict = std::string("Fexception: ") + e.what();
    }
    // The verdict goes before the objects close, so a close that crashes
    // or hangs is told apart from the case.
    if (write(fd, verdict.data(), verdict.size()) < 0) _exit(3);
  }
  // Not exit(): nothing of the parent's (gtest, leak checks) runs here.
  _exit(0);
}

// libfabric's shm provider names its regions /dev/shm/PID:DOMAIN:EP and
// unlinks them when the endpoint closes. A case child that ended without
// closing (a hang cut short, a crash, HangGuard's _exit) leaves them; a
// later process that gets the same pid (pid_max is often 32768) then fails
// to open its own (fi_enable: -FI_EBUSY). The runner removes them.
void RemoveShmRegionsOf(pid_t pid) {
  const std::string prefix = std::to_string(pid) + ":";
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return;
  while (const dirent* e = readdir(dir)) {
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) {
      unlinkat(dirfd(dir), e->d_name, 0);
    }
  }
  closedir(dir);
}

Outcome RunInChild(const CaseDef& def, const std::string& prov) {
  int fds[2];
  if (pipe(fds) != 0) return {Kind::kFail, "pipe failed"};
  fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return {Kind::kFail, "fork failed"};
  if (pid == 0) {
    close(fds[0]);
    RunHere(def, prov, fds[1]);
  }
  close(fds[1]);
  std::string verdict;
  bool hung = false;
  pollfd p{fds[0], POLLIN, 0};
  for (;;) {
    const int r = poll(&p, 1, kCaseHangSeconds * 1000);
    if (r == 0) {
      hung = true;
      kill(pid, SIGKILL);
      break;
    }
    char buf[4096];
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    verdict.append(buf, n);
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  RemoveShmRegionsOf(pid);
  const bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (hung) return {Kind::kFail, "hang: the case did not end in " + std::to_string(kCaseHangSeconds) + " s"};
  std::string how = WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                        : "exited " + std::to_string(WEXITSTATUS(status));
  if (verdict.empty()) return {Kind::kFail, "the case crashed (" + how + ")"};
  if (verdict[0] == 'F') return {Kind::kFail, verdict.substr(1)};
  if (!clean) return {Kind::kFail, "the case ended, then closing its objects crashed (" + how + ")"};
  return {verdict[0] == 'P' ? Kind::kPass : Kind::kRefused, verdict.substr(1)};
}

struct Suite {
  std::vector<Row> rows;
  std::map<std::string, const Row*> by_test;
  // Outcomes for the summary at the end.
  std::vector<std::string> bypass_failing, reference_failing;
};

Suite& TheSuite() {
  static Suite s;
  return s;
}

void JudgeBypass(const CaseDef& def) {
  Suite& s = TheSuite();
  auto it = s.by_test.find(def.name);
  ASSERT_NE(it, s.by_test.end()) << "case " << def.name << " has no row in CONFORMANCE.md: add one";
  const Row& row = *it->second;
  const Outcome o = RunInChild(def, kBypass);
  if (o.kind != Kind::kPass) s.bypass_failing.push_back(std::string(def.name) + " (" + KindName(o.kind) + ")");
  if (row.state == State::kDone) {
    if (o.kind != Kind::kPass) {
      ADD_FAILURE() << "row " << def.name << " (CONFORMANCE.md:" << row.line << ", done) " << KindName(o.kind)
                    << "s on bypass: " << o.message;
    }
    return;
  }
  if (o.kind == Kind::kPass) {
    ADD_FAILURE() << "row " << def.name << " now passes: mark it done in CONFORMANCE.md (line " << row.line << ")";
  } else if (row.state == State::kRefused && o.kind != Kind::kRefused) {
    ADD_FAILURE() << "row " << def.name << " says fi_getinfo refuses it, but the case " << KindName(o.kind)
                  << "s: " << o.message;
  } else {
    GTEST_SKIP() << (row.state == State::kMissing ? "missing" : "refused") << " in bypass (" << row.note
                 << "); the case says: " << o.message;
  }
}

// The reference column's word for `prov`, e.g. "pass" from "shm: pass (..)".
std::string LedgerReference(const Row& row) {
  const size_t colon = row.reference.find(':');
  std::istringstream words(colon == std::string::npos ? row.reference : row.reference.substr(colon + 1));
  std::string word;
  words >> word;
  return word;
}

void RecordReference(const CaseDef& def) {
  Suite& s = TheSuite();
  const Outcome o = RunInChild(def, def.ref);
  std::printf("reference %s: %s: %s%s%s\n", def.ref, def.name, KindName(o.kind), o.message.empty() ? "" : ": ",
              o.message.c_str());
  if (o.kind != Kind::kPass) s.reference_failing.push_back(std::string(def.name) + " (" + KindName(o.kind) + ")");
  auto it = s.by_test.find(def.name);
  if (it != s.by_test.end() && LedgerReference(*it->second) != KindName(o.kind)) {
    std::printf("NOTE: CONFORMANCE.md:%d says the reference's result is \"%s\"; today it is %s\n",
                it->second->line, it->second->reference.c_str(), KindName(o.kind));
  }
}

class Fn : public ::testing::Test {
 public:
  explicit Fn(std::function<void()> f) : f_(std::move(f)) {}
  void TestBody() override { f_(); }

 private:
  std::function<void()> f_;
};

void RegisterOne(const char* suite, const std::string& name, std::function<void()> f) {
  ::testing::RegisterTest(suite, name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                          [f]() -> ::testing::Test* { return new Fn(f); });
}

// Every case has a row and every row names a case.
void CheckLedgerTies() {
  std::set<std::string> cases;
  for (const CaseDef& d : Cases()) {
    cases.insert(d.name);
    EXPECT_TRUE(TheSuite().by_test.count(d.name)) << "case " << d.name << " has no row in CONFORMANCE.md: add one";
  }
  for (const Row& r : TheSuite().rows) {
    EXPECT_TRUE(cases.count(r.test)) << "CONFORMANCE.md:" << r.line << ": row " << r.test
                                     << " names no case of the suite: remove the row or write the case";
  }
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// FI_PROVIDER_PATH: a directory holding our provider alone (libfabric loads
// every lib*-fi.so there), set before libfabric initialises.
// Answers the directory ("" on failure, said on stderr).
std::string UseProvider(const std::string& so) {
  if (access(so.c_str(), R_OK) != 0) {
    std::fprintf(stderr, "libbypass-fi.so is not in the runfiles (%s): run the suite through bazel test\n",
                 so.c_str());
    return "";
  }
  const char* tmp = getenv("TEST_TMPDIR");
  std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/bypass-conformance.XXXXXX";
  if (mkdtemp(dir.data()) == nullptr || symlink(so.c_str(), (dir + "/libbypass-fi.so").c_str()) != 0) {
    std::perror("making the provider directory");
    return "";
  }
  setenv("FI_PROVIDER_PATH", dir.c_str(), 1);
  // The providers this suite uses, nothing else of libfabric's (udp:
  // multicast's reference; sockets: the triggered operations', cases_trigger.cc).
  setenv("FI_PROVIDER", "bypass,shm,tcp,ofi_rxm,udp,sockets", 1);
  // A dead peer's operations fail after this silence (the default is 10 s).
  setenv("FI_BYPASS_PEER_TIMEOUT_MS", "2000", 0);
  return dir;
}

void PrintSummary() {
  const Suite& s = TheSuite();
  std::printf("\nbypass: %zu case(s) not passing today:", s.bypass_failing.size());
  for (const auto& n : s.bypass_failing) std::printf(" %s", n.c_str());
  std::printf("\nreference: %zu case(s) not passing:", s.reference_failing.size());
  for (const auto& n : s.reference_failing) std::printf(" %s", n.c_str());
  std::printf("\n");
}

}  // namespace
}  // namespace bypass::fi::conformance

int main(int argc, char** argv) {
  using namespace bypass::fi::conformance;
  ::testing::InitGoogleTest(&argc, argv);
  const char* srcdir = getenv("TEST_SRCDIR");
  const std::string root = std::string(srcdir != nullptr ? srcdir : ".") + "/bypass/fabric/fi/";
  const std::string provider_dir = UseProvider(root + "libbypass-fi.so");
  if (provider_dir.empty()) return 1;
  const std::string text = Slurp(root + "conformance/CONFORMANCE.md");
  if (text.empty()) {
    std::fprintf(stderr, "%sCONFORMANCE.md is missing from the runfiles: it is the suite's data\n", root.c_str());
    return 1;
  }
  absl::StatusOr<std::vector<Row>> rows = ParseLedger(text);
  if (!rows.ok()) {
    std::fprintf(stderr, "%s\n", std::string(rows.status().message()).c_str());
    return 1;
  }
  Suite& s = TheSuite();
  s.rows = *std::move(rows);
  for (const Row& r : s.rows) s.by_test[r.test] = &r;

  RegisterOne("Ledger", "TiedToTheSuite", CheckLedgerTies);
  for (const CaseDef& d : Cases()) {
    RegisterOne("bypass", d.name, [d] { JudgeBypass(d); });
  }
  for (const CaseDef& d : Cases()) {
    RegisterOne("reference", d.name, [d] { RecordReference(d); });
  }
  const int rc = RUN_ALL_TESTS();
  PrintSummary();
  unlink((provider_dir + "/libbypass-fi.so").c_str());
  rmdir(provider_dir.c_str());
  return rc;
}
