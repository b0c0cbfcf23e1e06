#!/bin/bash
# Debian's Open MPI over bypass across two "hosts" (network namespaces
# joined by veth pairs; mpirun starts the far ranks through a launch agent,
# mpi_lib.sh make_hosts): with nothing configured but FI_PROVIDER_PATH,
# ranks of one namespace meet through shared memory and the others through
# kernel UDP (the default domain); then, with one variable for every rank,
# the intra-host device with AF_XDP for the other host. mpi_check.c checks
# every value.
set -u
BYPASS_SO="$TEST_SRCDIR/bypass/fabric/fi/libbypass-fi.so"
. "$TEST_SRCDIR/bypass/test/mpi/mpi_lib.sh"
[ "$(id -u)" -eq 0 ] || fail "this test needs root (network namespaces, AF_XDP)"
mpi_setup "$TEST_SRCDIR/bypass/test/mpi/mpi_check.c"
make_hosts "bmpi$(( $$ % 10000 ))"

# run LABEL PER_HOST ARGS...: PER_HOST ranks in each namespace; extra
# mpirun flags in EXTRA; the output in $WORK/out.
run() {
  local label=$1 per=$2
  shift 2
  echo "== $label"
  local ranks=$(( per * 2 )) rc
  mpi_run 120 "ip netns exec $NS_A" --host "$CTRL_A:$per,$CTRL_B:$per" -np $ranks $MPI_HOSTS \
    $MPI_BYPASS --mca osc pt2pt ${EXTRA:-} "$WORK/mpi_check" "$@" >"$WORK/out"
  rc=$?
  grep -v "AddPeerToEp\|<info>" "$WORK/out"
  [ $rc -eq 0 ] && grep -q "all checks passed on $ranks ranks" "$WORK/out" ||
    fail "$label: mpirun exited $rc (124: timed out)"
}

# Each rank's log says which device carries each peer: both must be used.
EXTRA="-x FI_LOG_LEVEL=info" run "no configuration, 2 ranks on each host" 2 0 100
for path in "through shm (this host)" "through udp (another host)"; do
  grep -q "$path" "$WORK/out" || fail "no peer went $path"
done
EXTRA="-x FI_BYPASS_DEVICES=shm:+dpdk:net_af_xdp0,iface=$DATA_IF" \
  run "FI_BYPASS_DEVICES=shm:+dpdk:net_af_xdp0,iface=$DATA_IF, 1 rank on each host" 1 0 100
echo PASS
