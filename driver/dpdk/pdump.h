// DPDK's packet capture framework (lib/pdump) for the EAL bypass starts
// itself: with BYPASS_PDUMP=1 the EAL keeps its shared configuration and
// hugepage files (not --in-memory) under the prefix bypass-<pid>, and
// rte_pdump_init lets Debian's dpdk-pdump (a secondary process) capture a
// port's traffic:
//
//   dpdk-pdump --file-prefix=bypass-<pid> --lcores=1@0 -- --pdump
//       'device_id=net_ring0,queue=*,rx-dev=/tmp/b.pcap,tx-dev=/tmp/b.pcap'
//
// dpdk-pdump must run on an lcore id other than bypass's 0 (--lcores=1@0):
// the capture's mempool caches per lcore id, and two processes on one id
// corrupt it. An application that owns the EAL calls rte_pdump_init
// itself.
#ifndef BYPASS_DRIVER_DPDK_PDUMP_H_
#define BYPASS_DRIVER_DPDK_PDUMP_H_

#include "absl/status/status.h"

namespace bypass::driver::dpdk {

// BYPASS_PDUMP is set and not "0".
bool PdumpRequested();

// After rte_eal_init with shared configuration: rte_pdump_init, and at
// exit the removal of the EAL's hugepage files and runtime directory
// (a primary with shared memory leaves them behind). A process killed
// before its exit leaves them: the next one removes the files no process
// holds. FailedPrecondition in one line when DPDK refuses.
absl::Status StartPdump();

}  // namespace bypass::driver::dpdk

#endif  // BYPASS_DRIVER_DPDK_PDUMP_H_
