#!/usr/bin/env bash
# The driver adds nothing to DPDK: runs the bare DPDK memif ping-pong
# (tools/bare) and `pingpong --layer=raw --local` alternately, several times
# each, and prints the medians and their ratios. A benchmark, not a test: it
# never fails on a timing. Run it optimised:
#
#   bazel run -c opt //tools:raw_vs_bare -- [--reps=5] [--iters=200000] [--size=64]
set -u
reps=5
iters=200000
rate_iters=5000000
size=64
for a in "$@"; do
  case "$a" in
    --reps=*) reps=${a#*=} ;;
    --iters=*) iters=${a#*=} ;;
    --rate_iters=*) rate_iters=${a#*=} ;;
    --size=*) size=${a#*=} ;;
    *) echo "raw_vs_bare: unknown argument $a (--reps, --iters, --rate_iters, --size)" >&2; exit 2 ;;
  esac
done
here=$(dirname "$0")
find_bin() {
  for c in "$here/$1" "${RUNFILES_DIR:-$0.runfiles}/bypass/tools/$1"; do
    [ -x "$c" ] && { echo "$c"; return; }
  done
  echo "raw_vs_bare: cannot find $1 next to the script; run it with bazel run" >&2
  exit 1
}
bare=$(find_bin bare/memif_pingpong)
raw=$(find_bin pingpong/pingpong)

field() { sed -E "s/.*\"$1\":\{?\"?([0-9.]+).*/\1/"; }
p50() { sed -E 's/.*"p50":([0-9]+).*/\1/'; }
rate() { sed -E 's/.*"msgs_per_sec":([0-9.]+).*/\1/'; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR==0) print 0; else print a[int((NR+1)/2)]}'; }

declare -a bare_p50 raw_p50 bare_rate raw_rate
for ((i = 1; i <= reps; i++)); do
  printf '\rrepetition %d of %d' "$i" "$reps" >&2
  j=$("$bare" --local --json --size="$size" --iters="$iters" 2>/dev/null | grep '^{') && bare_p50+=("$(echo "$j" | p50)")
  j=$("$raw" --local --json --size="$size" --iters="$iters" 2>/dev/null | grep '^{') && raw_p50+=("$(echo "$j" | p50)")
  j=$("$bare" --local --json --mode=rate --size="$size" --iters="$rate_iters" 2>/dev/null | grep '^{') && bare_rate+=("$(echo "$j" | rate)")
  j=$("$raw" --local --json --mode=rate --size="$size" --iters="$rate_iters" 2>/dev/null | grep '^{') && raw_rate+=("$(echo "$j" | rate)")
done
printf '\r%40s\r' '' >&2
bp=$(printf '%s\n' "${bare_p50[@]}" | median)
rp=$(printf '%s\n' "${raw_p50[@]}" | median)
br=$(printf '%s\n' "${bare_rate[@]}" | median)
rr=$(printf '%s\n' "${raw_rate[@]}" | median)
echo "memif, $size B payload, medians of $reps alternating repetitions ($(nproc) cores, $(uname -r))"
printf '%-28s %12s %12s %8s\n' "" "bare DPDK" "bypass raw" "ratio"
awk -v b="$bp" -v r="$rp" 'BEGIN {printf "%-28s %10.0f ns %10.0f ns %7.2fx\n", "round trip p50", b, r, (b > 0 ? r / b : 0)}'
awk -v b="$br" -v r="$rr" 'BEGIN {printf "%-28s %9.2f M/s %9.2f M/s %7.2fx\n", "one-way burst rate", b / 1e6, r / 1e6, (r > 0 ? b / r : 0)}'
echo "(ratio: bypass cost relative to bare DPDK; 1.00x is no overhead, the goal is at most 1.10x)"
