// Process-wide DPDK EAL: set up by bypass when the process has none, or the
// embedding application's, used as it is.
#ifndef BYPASS_DRIVER_DPDK_EAL_H_
#define BYPASS_DRIVER_DPDK_EAL_H_

#include <string>

#include "absl/status/status.h"

namespace bypass::driver::dpdk {

// What the first device open needs from the EAL.
struct EalRequest {
  std::string pci_address;  // non-empty: allow exactly this PCI device
};

// How the EAL came to be.
struct EalState {
  bool initialized = false;
  bool ours = false;           // false: the application initialised it
  bool hugepages = false;      // false: --no-huge
  std::string args;            // the arguments bypass passed (when ours)
  std::string notice;          // one line said once (e.g. running --no-huge)
};

// Initialises the EAL if the process has none: main lcore only (no worker
// threads) with the calling thread's CPU affinity kept, --in-memory with
// hugepages when 2 MiB pages are free, else --no-huge with a one-line notice
// on stderr; --no-pci unless a PCI address is named; no telemetry unless
// StatsRequested (then its socket is /var/run/dpdk/bypass-<pid>/
// dpdk_telemetry.v2, for dpdk-telemetry.py -f bypass-<pid>). With
// BYPASS_PDUMP set (pdump.h), shared configuration and hugepage files
// instead of --in-memory, and rte_pdump_init (FailedPrecondition without
// free 2 MiB hugepages). Extra arguments may be given in the environment
// variable BYPASS_EAL_ARGS.
// Thread-compatible: call from one thread at a time (cold path).
absl::Status EnsureEal(const EalRequest& req);

const EalState& CurrentEal();

// BYPASS_STATS is set (and not "0"): the process serves its counters
// (fabric/stats), and an EAL bypass starts runs DPDK's telemetry.
bool StatsRequested();

// Returns once DPDK's interrupt thread has finished the callback it was
// running (an alarm set now runs on that thread after it), or after a second
// (no interrupt thread, or it is stuck). memif's control-channel handler
// runs there: on the peer's disconnect it marks the link down first and
// then unmaps the shared regions and frees the queues' state; closing the
// port meanwhile frees that state under it (a segfault in eal-intr-thread
// when both ends of a memif closed at once). Call it after
// rte_eth_dev_stop (which unregisters the handler) and before
// rte_eth_dev_close, or after seeing the link go down, and again before
// rte_eal_cleanup: DPDK 22.11's cleanup unmaps the heap without stopping
// that thread, which may still be rebuilding its list of sources (kept in
// the heap) after the close unregistered one (a segfault in the thread's
// rte_intr_fd_get at exit).
void AwaitInterruptThread();

// Runs fn(value) on DPDK's interrupt thread (as an alarm) and returns once
// it ran; if that thread does not take it within a second (none, or
// stuck), runs it here instead. A PMD whose control-channel handler runs
// there is then never entered by both threads at once: memif's handler
// disconnects the port when its peer goes (memif_disconnect frees the
// channel and unregisters its interrupt), and so does rte_eth_dev_stop;
// run on two threads at once they freed the channel twice (a segfault in
// the EAL's interrupt code under rte_eth_dev_stop when the peer closed as
// we stopped, about one run in fifteen of fi_pingpong_memif_test).
void RunOnInterruptThread(void (*fn)(uint32_t), uint32_t value);

}  // namespace bypass::driver::dpdk

#endif  // BYPASS_DRIVER_DPDK_EAL_H_
