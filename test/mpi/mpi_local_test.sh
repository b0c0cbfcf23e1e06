#!/bin/bash
# Debian's Open MPI over bypass on one host with nothing configured but
# FI_PROVIDER_PATH (the default domain): 4 ranks, then 2 with the MTL's
# other AV type and tag layout, then 2 on a scalable endpoint; through the OFI MTL they
# run mpi_check.c (ping-pong, bandwidth, collectives, ANY_SOURCE/ANY_TAG,
# probes, cancel, one-sided through osc pt2pt with fences and locks, and a
# receiver that starts late while the others send), each value checked.
set -u
BYPASS_SO="$TEST_SRCDIR/bypass/fabric/fi/libbypass-fi.so"
. "$TEST_SRCDIR/bypass/test/mpi/mpi_lib.sh"
mpi_setup "$TEST_SRCDIR/bypass/test/mpi/mpi_check.c"

# run LABEL RANKS ARGS...: mpi_check over bypass, 120 s at most; extra
# mpirun flags in EXTRA.
run() {
  local label=$1 ranks=$2
  shift 2
  echo "== $label"
  local out rc
  out=$(mpi_run 120 "" -np "$ranks" $MPI_BYPASS --mca osc pt2pt ${EXTRA:-} "$WORK/mpi_check" "$@")
  rc=$?
  echo "$out"
  [ $rc -eq 0 ] && echo "$out" | grep -q "all checks passed on $ranks ranks" ||
    fail "$label: mpirun exited $rc (124: timed out)"
}

# The late receiver makes no MPI call for 1 s while three ranks' sends to
# it wait: more than three peer timeouts of 0.3 s. It is alive (its shared
# memory area's lock says so), so none is given up (fabric/fi/README.md,
# "Silent and dead peers").
EXTRA="-x FI_BYPASS_PEER_TIMEOUT_MS=300" \
  run "4 ranks, the receiver 1 s late (3 peer timeouts) for 3 x 2000 messages" 4 1 2000
# The MTL's other AV type, and the tag layout that carries the source rank
# in remote CQ data (FI_REMOTE_CQ_DATA).
EXTRA="--mca mtl_ofi_av table --mca mtl_ofi_tag_mode ofi_tag_full" \
  run "2 ranks, FI_AV_TABLE, ofi_tag_full" 2 0 100
# Scalable endpoints (opt-in in the MTL): the name Open MPI publishes is
# taken before its contexts are enabled (fabric/fi/sep.cc).
EXTRA="--mca mtl_ofi_enable_sep 1" run "2 ranks, scalable endpoint" 2 0 100

# MPI_THREAD_MULTIPLE: four threads a rank, each on a communicator of its
# own, at once; with thread grouping each communicator has a context of the
# scalable endpoint (FI_THREAD_SAFE), and MPI_Comm_free closes them while
# the MTL goes on polling their CQs (a closed CQ reads empty). Eight
# contexts: Open MPI 4.1's MTL writes past its comm_to_context table (sized
# mtl_ofi_num_ctxts + 2, while user communicators start at index 3) once
# the communicators outnumber the contexts by two, corrupting the heap.
mpicc -O2 -o "$WORK/mpi_threads" "$TEST_SRCDIR/bypass/test/mpi/mpi_threads.c" -lpthread ||
  fail "mpicc could not build mpi_threads.c"
threads() {
  local label=$1
  shift
  echo "== $label"
  local out rc
  out=$(mpi_run 120 "" -np 2 $MPI_BYPASS "$@" "$WORK/mpi_threads" 200)
  rc=$?
  echo "$out"
  [ $rc -eq 0 ] && echo "$out" | grep -q "all thread checks passed on 2 ranks" ||
    fail "$label: mpirun exited $rc (124: timed out)"
}
threads "2 ranks, 4 threads each (MPI_THREAD_MULTIPLE)"
threads "2 ranks, 4 threads each, thread grouping on 8 scalable endpoint contexts" \
  --mca mtl_ofi_enable_sep 1 --mca mtl_ofi_thread_grouping 1 --mca mtl_ofi_num_ctxts 8
echo PASS
