#!/bin/bash
# Debian's Open MPI over bypass on one host with nothing configured but
# FI_PROVIDER_PATH (the default domain): four ranks through the OFI MTL run
# testdata/mpi_check.c (MPI_ANY_SOURCE, probes, cancel, one-sided through
# osc pt2pt, and a receiver that starts late while the others send).
set -u
. "$TEST_SRCDIR/bypass/fabric/fi/fi_pingpong_lib.sh"
unset FI_BYPASS_DEVICES FI_PROVIDER
trap 'rm -rf "$PROVIDER_DIR" "$work"' EXIT
work=$(mktemp -d)
for tool in mpicc mpirun; do
  command -v "$tool" >/dev/null ||
    fail "$tool is missing: install Debian's openmpi-bin and libopenmpi-dev (tools/setup.sh installs them)"
done
mpicc -O2 -o "$work/mpi_check" "$TEST_SRCDIR/bypass/fabric/fi/testdata/mpi_check.c" ||
  fail "mpicc could not build testdata/mpi_check.c"

# run LABEL RANKS ARGS...: the program over bypass, 120 s at most.
run() {
  local label=$1 ranks=$2
  shift 2
  echo "== $label"
  local out
  out=$(timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$ranks" \
    --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include bypass --mca btl self \
    --mca osc pt2pt -x FI_PROVIDER_PATH "$work/mpi_check" "$@" 2>&1)
  local rc=$?
  echo "$out" | grep -v "are not authenticated"
  [ $rc -eq 0 ] && echo "$out" | grep -q "all checks passed on $ranks ranks" ||
    fail "$label: mpirun exited $rc"
}

run "4 ranks, the receiver 1 s late for 3 x 2000 messages" 4 1 2000
run "2 ranks" 2 0 100
echo PASS
