#!/bin/bash
# Open MPI over bypass against Open MPI's own transports, in one run:
# 8 B one-way latency and 1 MiB bandwidth (mpi_perf.c, 2 ranks), medians
# of alternating repetitions, as ratios against the baseline of the same
# run. On one host: bypass's default domain (nothing configured but
# FI_PROVIDER_PATH) against vader (ob1, shared memory). As root, across two
# network namespaces (mpi_lib.sh make_hosts): the default domain (kernel
# UDP) and AF_XDP (FI_BYPASS_DEVICES, one variable) against ob1 over TCP.
#
#   bazel run -c opt //test/mpi:mpi_bench -- [--reps=N] [--quick] [--local]
# --quick: one repetition of fewer iterations; --local: one host only;
# --smoke: a handful of iterations, to see that every row runs (its
# numbers mean nothing; mpi_bench_test).
set -u
reps=3 lat_iters=10000 bw_windows=20 local_only=0
for a in "$@"; do
  case "$a" in
    --reps=*) reps=${a#--reps=} ;;
    --quick) reps=1 lat_iters=2000 bw_windows=5 ;;
    --local) local_only=1 ;;
    --smoke) reps=1 lat_iters=100 bw_windows=2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "mpi_bench: unknown flag $a (--reps=N, --quick, --local, --smoke)" >&2; exit 2 ;;
  esac
done
case "$reps" in ''|*[!0-9]*|0) echo "mpi_bench: --reps wants a positive count" >&2; exit 2 ;; esac
root=
for c in "${RUNFILES_DIR:-}/bypass" "$0.runfiles/bypass" "${TEST_SRCDIR:-}/bypass"; do
  [ -f "$c/test/mpi/mpi_lib.sh" ] && root=$c && break
done
[ -n "$root" ] || { echo "mpi_bench: no runfiles; run it with bazel run -c opt //test/mpi:mpi_bench" >&2; exit 1; }
BYPASS_SO="$root/fabric/fi/libbypass-fi.so"
. "$root/test/mpi/mpi_lib.sh"
mpi_setup "$root/test/mpi/mpi_perf.c"

# measure KEY PREFIX MPIRUN_ARGS...: one run of mpi_perf, its four numbers
# (latency, bandwidth, and their medians, mpi_perf.c) appended to
# $WORK/KEY (or the reason it failed, once).
measure() {
  local key=$1 prefix=$2
  shift 2
  local out
  out=$(mpi_run 120 "$prefix" "$@" "$WORK/mpi_perf" 8 "$lat_iters" 1048576 "$bw_windows")
  local line
  line=$(echo "$out" | grep -o "latency_us=[0-9.]* bandwidth_mbs=[0-9.]* p50_latency_us=[0-9.]* p50_bandwidth_mbs=[0-9.]*")
  if [ -n "$line" ]; then
    echo "$line" | sed 's/[a-z0-9_]*=//g' >>"$WORK/$key"
  elif [ ! -f "$WORK/$key.err" ]; then
    echo "$out" | tail -3 >"$WORK/$key.err"
  fi
  printf '.'
}

# median KEY FIELD: the median of column FIELD (1 latency, 2 bandwidth,
# 3 and 4 their medians within a run).
median() {
  [ -s "$WORK/$1" ] || return 0
  cut -d' ' -f"$2" "$WORK/$1" | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.2fx", a / b }'; }

# row LABEL KEY BASE_KEY
row() {
  local l b bl bb pl pb pbl pbb
  l=$(median "$2" 1) b=$(median "$2" 2) bl=$(median "$3" 1) bb=$(median "$3" 2)
  pl=$(median "$2" 3) pb=$(median "$2" 4) pbl=$(median "$3" 3) pbb=$(median "$3" 4)
  if [ -z "$l" ]; then
    printf '| %s | failed: %s | | | | | | | |\n' "$1" "$(tr '\n' ' ' <"$WORK/$2.err" 2>/dev/null | cut -c1-160)"
    return
  fi
  printf '| %s | %.2f us | %.2f us | %.0f MB/s | %.0f MB/s |' "$1" "$l" "$pl" "$b" "$pb"
  if [ "$2" = "$3" ]; then
    printf ' baseline | baseline | baseline | baseline |\n'
  else
    printf ' %s | %s | %s | %s |\n' "$(ratio "$l" "$bl")" "$(ratio "$pl" "$pbl")" "$(ratio "$b" "$bb")" "$(ratio "$pb" "$pbb")"
  fi
}

netns=0
if [ "$local_only" -eq 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    make_hosts "bmb$(( $$ % 10000 ))" && netns=1
  else
    echo "mpi_bench: not root: no namespaces, one host only"
  fi
fi
NA="ip netns exec ${NS_A:-}"
XDP="FI_BYPASS_DEVICES=shm:+dpdk:net_af_xdp0,iface=${DATA_IF:-}"
printf 'mpi_bench: %s repetitions, ' "$reps"
for rep in $(seq 1 "$reps"); do
  measure vader "" -np 2 $MPI_VADER
  measure bypass "" -np 2 $MPI_BYPASS
  if [ $netns -eq 1 ]; then
    hosts="--host $CTRL_A:1,$CTRL_B:1 -np 2 $MPI_HOSTS"
    measure tcp "$NA" $hosts --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include "$KERN_NET.0/24" --mca osc pt2pt
    measure udp "$NA" $hosts $MPI_BYPASS
    measure xdp "$NA" $hosts $MPI_BYPASS -x "$XDP"
  fi
done
echo
echo
echo "$(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "8 B one-way latency and 1 MiB bandwidth (mpi_perf.c): the mean of a round (OSU's way) and the median"
echo "round trip / 2 or window (p50; what one message costs when the machine's other work deschedules ranks),"
echo "medians of $reps runs; ratios: latency ours/theirs (lower is better), bandwidth ours/theirs (higher is better)"
hdr="8 B latency | 8 B p50 | 1 MiB bandwidth | 1 MiB p50 | latency ratio | p50 ratio | bandwidth ratio | p50 ratio |"
echo
echo "| one host | $hdr"
echo "|---|---|---|---|---|---|---|---|---|"
row "Open MPI vader (ob1, --mca btl self,vader)" vader vader
row "Open MPI over bypass, default domain (shared memory)" bypass vader
if [ $netns -eq 1 ]; then
  echo
  echo "| two namespaces | $hdr"
  echo "|---|---|---|---|---|---|---|---|---|"
  row "Open MPI tcp (ob1, --mca btl self,tcp)" tcp tcp
  row "Open MPI over bypass, default domain (kernel UDP)" udp tcp
  row "Open MPI over bypass, $XDP" xdp tcp
fi
