#!/usr/bin/env bash
# The rdm ping-pong end to end: --layer=rdm --local runs an RDM endpoint in a
# server process and a client over memif; every reply is verified by the
# tool; the JSON carries the engine's retransmit counters, which count
# something when the devices drop packets; multi-packet messages and rate
# mode with a window work under faults.
set -u
pp="$TEST_SRCDIR/bypass/tools/pingpong/pingpong"
err=$(mktemp)
trap 'rm -f "$err"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
num() { echo "$1" | sed -E "s/.*\"$2\":([0-9]+).*/\\1/"; }

out=$("$pp" --layer=rdm --local --iters=2000 --warmup=100 --json 2>"$err") || fail "latency run: $(cat "$err")"
echo "$out"
json=$(echo "$out" | grep '^{')
for key in '"layer":"rdm"' '"device":"memif:' '"size":64' '"iters":2000' '"rtt_ns":{"p50":' '"p99":' \
           '"msgs_per_sec":' '"retransmits_fast":' '"retransmits_timeout":' '"duplicates_dropped":' '"srtt_ns":'; do
  echo "$json" | grep -q "$key" || fail "JSON lacks $key"
done
[ "$(num "$json" p50)" -gt 0 ] || fail "p50 is 0"
[ "$(num "$json" srtt_ns)" -gt 0 ] || fail "no RTT estimate"
echo "$json" | grep -q '"faults"' && fail "fault counters without --loss"

out=$("$pp" --layer=rdm --local --iters=2000 --warmup=100 --loss=0.01 --json 2>"$err") || fail "run under loss: $(cat "$err")"
echo "$out"
json=$(echo "$out" | grep '^{')
dropped=$(echo "$json" | sed -E 's/.*"faults":\{"dropped":([0-9]+).*/\1/')
[ "$dropped" -gt 0 ] || fail "the fault device dropped nothing at --loss=0.01"
rt=$(( $(num "$json" retransmits_fast) + $(num "$json" retransmits_timeout) ))
[ "$rt" -gt 0 ] || fail "no retransmits counted under loss"

# Messages of several packets, with loss, duplication and reordering.
out=$("$pp" --layer=rdm --local --size=20000 --iters=200 --warmup=10 --loss=0.01 --dup=0.01 --reorder=0.02 2>&1) \
  || fail "multi-packet run: $out"
echo "$out"
echo "$out" | grep -q "retransmits fast" || fail "no counters in the text output"

# Rate mode: a window of outstanding messages, all of which must arrive.
out=$("$pp" --layer=rdm --local --mode=rate --window=16 --iters=20000 --warmup=100 --loss=0.01 --json 2>"$err") \
  || fail "rate run: $(cat "$err")"
echo "$out"
json=$(echo "$out" | grep '^{')
[ "$(num "$json" received)" -eq 20000 ] || fail "rate mode: not every message arrived"

out=$("$pp" --layer=raw --local --loss=0.1 2>&1) && fail "--loss was accepted on the raw layer"
echo "$out" | grep -q -- "--layer=rdm" || fail "the error does not say what to do: $out"
echo PASS
