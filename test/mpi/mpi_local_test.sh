#!/bin/bash
# Debian's Open MPI over bypass on one host with nothing configured but
# FI_PROVIDER_PATH (the default domain): 2 and 4 ranks through the OFI MTL
# run mpi_check.c (ping-pong, bandwidth, collectives, ANY_SOURCE/ANY_TAG,
# probes, cancel, one-sided through osc pt2pt with fences and locks, and a
# receiver that starts late while the others send), each value checked.
set -u
BYPASS_SO="$TEST_SRCDIR/bypass/fabric/fi/libbypass-fi.so"
. "$TEST_SRCDIR/bypass/test/mpi/mpi_lib.sh"
needs_mpi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
provider_dir "$WORK/prov"
build_prog "$TEST_SRCDIR/bypass/test/mpi/mpi_check.c" "$WORK/mpi_check"

# run LABEL RANKS ARGS...: mpi_check over bypass, 120 s at most.
run() {
  local label=$1 ranks=$2
  shift 2
  echo "== $label"
  local out rc
  out=$(mpi_run 120 "" -np "$ranks" $MPI_BYPASS --mca osc pt2pt "$WORK/mpi_check" "$@")
  rc=$?
  echo "$out"
  [ $rc -eq 0 ] && echo "$out" | grep -q "all checks passed on $ranks ranks" ||
    fail "$label: mpirun exited $rc (124: timed out)"
}

run "4 ranks, the receiver 1 s late for 3 x 2000 messages" 4 1 2000
run "2 ranks" 2 0 100
echo PASS
