#!/usr/bin/env bash
# The raw ping-pong end to end: --local starts a server process and a client
# over memif; the JSON carries every key the tools promise; rate mode counts
# what arrived; bad flags get one line.
set -u
pp="$TEST_SRCDIR/bypass/tools/pingpong/pingpong"
fail() { echo "FAIL: $*"; exit 1; }

out=$("$pp" --local --iters=3000 --warmup=100 --json 2>/tmp/pp_err.$$) || fail "latency run: $(cat /tmp/pp_err.$$)"
echo "$out"
json=$(echo "$out" | grep '^{')
for key in '"layer":"raw"' '"device":"memif:' '"size":64' '"iters":3000' '"rtt_ns":{"p50":' '"p90":' '"p99":' '"p999":' '"max":' '"msgs_per_sec":'; do
  echo "$json" | grep -q "$key" || fail "JSON lacks $key"
done
p50=$(echo "$json" | sed -E 's/.*"p50":([0-9]+).*/\1/')
[ "$p50" -gt 0 ] || fail "p50 is $p50"

out=$("$pp" --local --mode=rate --iters=200000 --warmup=1000 --json 2>/tmp/pp_err.$$) || fail "rate run: $(cat /tmp/pp_err.$$)"
echo "$out"
received=$(echo "$out" | grep '^{' | sed -E 's/.*"received":([0-9]+).*/\1/')
[ "$received" -gt 0 ] && [ "$received" -le 200000 ] || fail "rate mode received $received of 200000"
echo "$out" | grep -q rtt_ns && fail "rate mode printed round-trip figures it did not measure"

# Several sizes and both modes in one run: a JSON line each, latencies first;
# a size raw cannot carry is skipped with the reason, the others measured.
out=$("$pp" --local --sizes=16,1400,4096 --mode=latency,rate --duration_ms=30 --warmup=50 --json 2>/tmp/pp_err.$$) ||
  fail "sizes run: $(cat /tmp/pp_err.$$)"
echo "$out"
lines=$(echo "$out" | grep '^{')
[ "$(echo "$lines" | wc -l)" -eq 6 ] || fail "not 6 JSON lines (3 sizes, 2 modes): $lines"
[ "$(echo "$lines" | head -3 | grep -c '"mode":"latency"')" -eq 3 ] || fail "latencies do not come first"
for size in 16 1400; do
  echo "$lines" | grep '"mode":"latency"' | grep "\"size\":$size," | grep -q '"p50_ns":[1-9]' ||
    fail "no latency measured at $size B"
  echo "$lines" | grep '"mode":"rate"' | grep "\"size\":$size," | grep -q '"received":[1-9]' ||
    fail "no rate measured at $size B"
done
[ "$(echo "$lines" | grep '"size":4096,' | grep -c '"skipped":"raw sends one frame')" -eq 2 ] ||
  fail "4096 B was not skipped with the reason in both modes"

out=$("$pp" --local --size=1400 --iters=500 --warmup=10 2>&1) || fail "1400-byte payload: $out"
out=$("$pp" --local --size=100000 --iters=10 2>&1) && fail "a payload larger than a frame was accepted"
[ "$(echo "$out" | grep -c 'pingpong:')" -eq 1 ] || fail "not one line: $out"
echo "$out" | grep -q -- "--size up to" || fail "the error does not say what to do: $out"

out=$("$pp" --local --size=4000 --iters=10 2>&1) && fail "a payload larger than memif's frame was accepted"
[ "$(echo "$out" | grep -c 'pingpong:')" -eq 1 ] || fail "not one line: $out"
out=$("$pp" --local --mode=both 2>&1) && fail "--mode=both was accepted"
echo "$out" | grep -q "latency,rate" || fail "the --mode error does not name the modes: $out"

out=$("$pp" --layer=carrier 2>&1) && fail "an unknown layer was accepted"
echo "$out" | grep -q "layer" || fail "no word about the layer: $out"
out=$("$pp" 2>&1) && fail "no device and no --local was accepted"
echo "$out" | grep -q -- "--device=URI" || fail "the error does not say what to do: $out"
rm -f /tmp/pp_err.$$
echo PASS
