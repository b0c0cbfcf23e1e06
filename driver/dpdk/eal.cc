#include "driver/dpdk/eal.h"
#include "driver/dpdk/pdump.h"

#include <rte_alarm.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_log.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "hugepage/region.h"

namespace bypass::driver::dpdk {
namespace {

EalState& State() {
  static EalState state;
  return state;
}

// "0-1" style list of the CPUs this thread may run on, so pinning the main
// lcore keeps the thread's affinity exactly as it was.
std::string AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return "0";
  std::vector<std::string> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(std::to_string(c));
  }
  return cpus.empty() ? "0" : absl::StrJoin(cpus, ",");
}

bool Free2MHugepages() {
  for (const auto& size : hugepage::ReadHugepageState().sizes) {
    if (size.page_size == hugepage::Bytes::MiB(2) && size.free >= 64) return true;
  }
  return false;
}

// AwaitInterruptThread's alarms: each carries a token, and the highest token
// that ran is kept (alarms set later run later). Static atomics, not a flag
// on the caller's stack or heap: TSan cannot see the EAL's alarm list hand a
// flag to the interrupt thread, and reported its initialising write.
std::atomic<uint64_t> g_alarm_tokens{0};
std::atomic<uint64_t> g_alarm_ran{0};

void MarkAlarmRan(void* arg) {
  const uint64_t token = reinterpret_cast<uintptr_t>(arg);
  uint64_t seen = g_alarm_ran.load(std::memory_order_relaxed);
  while (seen < token &&
         !g_alarm_ran.compare_exchange_weak(seen, token, std::memory_order_release,
                                            std::memory_order_relaxed)) {
  }
}

// RunOnInterruptThread's alarm: its argument carries the token (high 32
// bits) and the value; the function waits in g_run_fn, set before the
// alarm and read after it (one caller at a time: g_run_mu).
std::mutex g_run_mu;
std::atomic<void (*)(uint32_t)> g_run_fn{nullptr};

void RunAlarm(void* arg) {
  const uint64_t v = reinterpret_cast<uintptr_t>(arg);
  g_run_fn.load(std::memory_order_acquire)(static_cast<uint32_t>(v));
  MarkAlarmRan(reinterpret_cast<void*>(static_cast<uintptr_t>(v >> 32)));
}

}  // namespace

bool StatsRequested() {
  const char* v = std::getenv("BYPASS_STATS");
  return v != nullptr && *v != '\0' && std::string_view(v) != "0";
}

const EalState& CurrentEal() { return State(); }

absl::Status EnsureEal(const EalRequest& req) {
  EalState& st = State();
  if (st.initialized) {
    if (!req.pci_address.empty() && st.ours && st.args.find(req.pci_address) == std::string::npos) {
      return absl::FailedPreconditionError(absl::StrCat(
          "dpdk: the EAL was started without PCI device ", req.pci_address,
          "; open PCI devices before any other dpdk/memif device in this process"));
    }
    return absl::OkStatus();
  }
  if (rte_lcore_count() > 0) {  // the embedding application ran rte_eal_init
    st.initialized = true;
    st.ours = false;
    st.hugepages = rte_eal_has_hugepages() != 0;
    return absl::OkStatus();
  }

  std::vector<std::string> args = {"bypass", absl::StrCat("--lcores=0@(", AllowedCpus(), ")"),
                                   "--log-level=*:error",
                                   // memif logs an error for every --in-memory probe (no
                                   // multi-process channel); bypass reports memif's real
                                   // failures itself. BYPASS_EAL_ARGS can turn it back on.
                                   "--log-level=pmd.net.memif:critical"};
  // Telemetry is a thread and a socket: only when asked for (BYPASS_STATS,
  // fabric/stats), so that dpdk-telemetry.py -f bypass-<pid> reads the
  // engine's counters.
  if (!StatsRequested()) args.push_back("--no-telemetry");
  if (req.pci_address.empty()) {
    args.push_back("--no-pci");
  } else {
    args.push_back(absl::StrCat("--allow=", req.pci_address));
  }
  // A unique prefix per process so several bypass processes coexist.
  args.push_back(absl::StrCat("--file-prefix=bypass-", getpid()));
  st.hugepages = Free2MHugepages();
  const bool pdump = PdumpRequested();
  if (pdump && !st.hugepages) {
    return absl::FailedPreconditionError(
        "dpdk: BYPASS_PDUMP=1 needs free 2 MiB hugepages (dpdk-pdump maps this process's "
        "packet memory from its hugepage files): reserve them with tools/setup.sh");
  }
  if (pdump) {
    // Shared configuration and hugepage files, for dpdk-pdump to attach.
  } else if (st.hugepages) {
    args.push_back("--in-memory");
  } else {
    args.insert(args.end(), {"--no-huge", "-m", "512", "--no-shconf"});
    st.notice =
        "bypass: no free 2 MiB hugepages, DPDK runs with --no-huge (slower, no physical "
        "addresses); run tools/setup.sh as root to reserve them";
    std::fprintf(stderr, "%s\n", st.notice.c_str());
  }
  if (const char* extra = std::getenv("BYPASS_EAL_ARGS"); extra != nullptr && *extra != '\0') {
    for (absl::string_view a : absl::StrSplit(extra, ' ', absl::SkipEmpty())) {
      args.emplace_back(a);
    }
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int rc = rte_eal_init(static_cast<int>(args.size()), argv.data());
  if (rc < 0) {
    return absl::UnavailableError(absl::StrCat(
        "dpdk: rte_eal_init failed (", rte_strerror(rte_errno), ") with arguments '",
        absl::StrJoin(args, " "),
        "': run as root, reserve hugepages with tools/setup.sh, or pass fixes in BYPASS_EAL_ARGS"));
  }
  st.initialized = true;
  st.ours = true;
  st.args = absl::StrJoin(args, " ");
  if (pdump) return StartPdump();
  return absl::OkStatus();
}

void AwaitInterruptThread() {
  // Two alarms, the second set once the first ran: the thread handles one
  // epoll batch before it rebuilds its list of sources (after a callback
  // was unregistered), and the first alarm may run in the batch that asks
  // for the rebuild; the second runs after it.
  for (int round = 0; round < 2; ++round) {
    const uint64_t n = g_alarm_tokens.fetch_add(1) + 1;
    void* token = reinterpret_cast<void*>(static_cast<uintptr_t>(n));
    if (rte_eal_alarm_set(1, MarkAlarmRan, token) != 0) return;
    const auto ran = [n] { return g_alarm_ran.load(std::memory_order_acquire) >= n; };
    for (int i = 0; i < 10000 && !ran(); ++i) usleep(100);
    if (!ran()) {
      rte_eal_alarm_cancel(MarkAlarmRan, token);  // waits if it is running now
      return;
    }
  }
}

void RunOnInterruptThread(void (*fn)(uint32_t), uint32_t value) {
  std::lock_guard<std::mutex> one_at_a_time(g_run_mu);
  g_run_fn.store(fn, std::memory_order_release);
  const uint64_t n = g_alarm_tokens.fetch_add(1) + 1;
  void* arg = reinterpret_cast<void*>(static_cast<uintptr_t>(n << 32 | value));
  const auto ran = [n] { return g_alarm_ran.load(std::memory_order_acquire) >= n; };
  if (rte_eal_alarm_set(1, RunAlarm, arg) == 0) {
    for (int i = 0; i < 10000 && !ran(); ++i) usleep(100);
    if (ran()) return;
    rte_eal_alarm_cancel(RunAlarm, arg);  // waits if it is running now
    if (ran()) return;
  }
  fn(value);
}

}  // namespace bypass::driver::dpdk
