#!/bin/bash
# mpi_bench end to end at its smallest (--smoke): every row is measured
# (none says "failed") and has its ratios. Never checks a timing.
set -u
fail() { echo "FAIL: $*"; exit 1; }
bench="$TEST_SRCDIR/bypass/test/mpi/mpi_bench"
out=$("$bench" --smoke 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "mpi_bench --smoke exited $rc"
echo "$out" | grep -q "^SKIP" && exit 0
rows="vader|over bypass, default domain (shared memory)"
[ "$(id -u)" -eq 0 ] && rows="$rows|tcp (ob1|default domain (kernel UDP)|net_af_xdp0"
IFS='|' read -r -a want <<<"$rows"
for w in "${want[@]}"; do
  line=$(echo "$out" | grep -F -- "$w" | grep "^| ")
  [ -n "$line" ] || fail "no row for '$w'"
  echo "$line" | grep -q "failed" && fail "the row '$w' failed: $line"
  echo "$line" | grep -q -E "baseline|[0-9]x \| [0-9.]+x \|$" || fail "the row '$w' has no ratios: $line"
done
echo PASS
