#!/usr/bin/env bash
# Instructions per round trip of pingpong's raw layer against the bare DPDK
# loop, counted by callgrind in one process over net_ring
# (tools/bare/raw_cost.cc): exact and repeatable whatever the machine's
# load, unlike raw_vs_bare's wall-clock medians. Needs valgrind.
#
#   bazel run -c opt //tools:raw_cost -- [--iters=20000] [--size=64]
set -u
iters=20000
size=64
for a in "$@"; do
  case "$a" in
    --iters=*) iters=${a#*=} ;;
    --size=*) size=${a#*=} ;;
    *) echo "raw_cost: unknown argument $a (--iters, --size)" >&2; exit 2 ;;
  esac
done
command -v valgrind >/dev/null || { echo "raw_cost: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
here=$(dirname "$0")
bin=""
for c in "$here/bare/raw_cost" "${RUNFILES_DIR:-$0.runfiles}/bypass/tools/bare/raw_cost"; do
  [ -x "$c" ] && { bin=$c; break; }
done
[ -n "$bin" ] || { echo "raw_cost: cannot find bare/raw_cost next to the script; run it with bazel run" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
count() {  # instructions inside Measure for --which=$1
  valgrind --tool=callgrind --toggle-collect='*Measure*' --callgrind-out-file="$tmp/$1.out" \
    "$bin" --which="$1" --iters="$iters" --size="$size" >"$tmp/$1.log" 2>&1 ||
    { echo "raw_cost: the $1 run failed:" >&2; tail -5 "$tmp/$1.log" >&2; exit 1; }
  sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$tmp/$1.out"
}
bare=$(count bare)
raw=$(count raw)
echo "net_ring in one process, $size B payload, $iters round trips each (callgrind instructions)"
awk -v b="$bare" -v r="$raw" -v n="$iters" 'BEGIN {
  printf "%-34s %10.1f\n", "bare DPDK per round trip", b / n
  printf "%-34s %10.1f\n", "bypass raw per round trip", r / n
  printf "%-34s %10.1f (%.2fx)\n", "raw - bare", (r - b) / n, (b > 0 ? r / b : 0)
}'
