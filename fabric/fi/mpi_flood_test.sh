#!/bin/bash
# A many-to-one flood whose receiver is busy before it posts (issue 21),
# through Debian's Open MPI (OFI MTL) over the default domain on one host:
# three ranks each send 20,000 small messages to rank 0, which computes
# (no MPI call) before it posts its receives, then checks that every
# message arrived, in order per sender, with its payload
# (testdata/mpi_flood.c). No send may fail however late the receiver comes.
#
# 20 runs with the receiver-not-ready intervals shortened (retries back off
# up to 0.5 s) and a 1 MiB unexpected budget (4,096 of these messages:
# the rest of the 60,000 are refused and come again, back-pressure) and a
# 1 s busy receiver; then one run with the defaults and a 6 s busy
# receiver (longer than the 5 s give-up the provider used to have).
set -u
. "$TEST_SRCDIR/bypass/fabric/fi/fi_pingpong_lib.sh"
mpi_setup mpi_flood

# flood LABEL BUSY_MS [VAR=VALUE...]: one run, 120 s at most.
flood() {
  local label=$1 busy=$2
  shift 2
  local pass=() v
  for v in "$@"; do
    export "${v?}"
    pass+=(-x "${v%%=*}")
  done
  local start=$SECONDS out rc
  out=$(timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4 \
    --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include bypass --mca btl self \
    -x FI_PROVIDER_PATH "${pass[@]}" "$work/mpi_flood" "$busy" 20000 2>&1)
  rc=$?
  for v in "$@"; do unset "${v%%=*}"; done
  echo "== $label: $(echo "$out" | grep "flood passed") ($((SECONDS - start)) s)"
  [ $rc -eq 0 ] && echo "$out" | grep -q "flood passed: 3 senders x 20000 messages" || {
    echo "$out" | grep -v "are not authenticated"
    fail "$label: mpirun exited $rc"
  }
}

for i in $(seq 1 20); do
  flood "run $i, retries up to 0.5 s, 1 MiB budget, 1 s busy" 1000 \
    FI_BYPASS_RNR_RETRY_MAX_US=500000 FI_BYPASS_UNEXPECTED_BYTES=1048576
done
flood "defaults, 6 s busy" 6000
echo PASS
