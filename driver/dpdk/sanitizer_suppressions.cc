// Sanitizer suppressions for DPDK's own code, in every binary that links the
// DPDK backends (no-ops in a build without the sanitizer).
//
// LeakSanitizer: DPDK 22.11's af_xdp PMD never frees libxdp's UMEM handle
// (80 bytes per queue, from xsk_umem__create) when it closes a port: its
// refcount test is off by one (af_xdp.cc closes the socket that leaves open,
// see CloseLeftXskSockets). The handle is in the PMD's private queue data:
// not ours to free. Without this an ASan build of any binary that opened an
// af_xdp port (pingpong, the conformance test) fails at exit.
//
// ThreadSanitizer: Debian's DPDK is not built with TSan, so TSan sees none of
// its atomics and spinlocks, only the libc calls it makes, which it then
// reports as races between DPDK's interrupt thread (eal-intr-thread: memif's
// control channel, rte_malloc's memsets of freed hugepage memory) and the
// thread that opens and closes ports, and between the telemetry library's
// socket thread and a thread registering commands (driver/dpdk/telemetry.h)
// after rte_eal_init, both under its command table's spinlock. called_from_lib makes TSan ignore the
// libc calls of those libraries, as it already ignores the rest of their
// code; our own code and its calls into DPDK stay checked.
//
// The sanitizers read these hooks from the executable only: this target is
// linked statically and whole (BUILD.bazel), and no other file may define
// them.
extern "C" const char* __lsan_default_suppressions();
extern "C" const char* __lsan_default_suppressions() { return "leak:xsk_umem__create\n"; }

extern "C" const char* __tsan_default_suppressions();
extern "C" const char* __tsan_default_suppressions() {
  return "called_from_lib:librte_eal.so\n"
         "called_from_lib:librte_net_memif.so\n"
         "called_from_lib:librte_telemetry.so\n";
}
