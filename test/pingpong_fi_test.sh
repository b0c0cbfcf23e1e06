#!/usr/bin/env bash
# pingpong --layer=fi end to end through Debian's libfabric with its own shm
# and tcp providers: --local (address through a file), --server/--connect
# (address over a TCP socket), FI_MSG and FI_TAGGED, rate mode with a
# window; the histogram exported as CSV (parsed back here) and PNG (gnuplot);
# the bypass provider either runs or is reported missing in one line.
set -u
pp="$TEST_SRCDIR/bypass/tools/pingpong/pingpong"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
err="$tmp/err"
fail() { echo "FAIL: $*"; exit 1; }
num() { echo "$1" | sed -E "s/.*\"$2\":([0-9.]+).*/\\1/"; }

# Latency over shm: every key of the schema, numbers in order.
out=$("$pp" --layer=fi --provider=shm --local --iters=2000 --warmup=100 --json 2>"$err") || fail "shm run: $(cat "$err")"
echo "$out"
json=$(echo "$out" | grep '^{')
for key in '"tool":"pingpong"' '"layer":"fi"' '"provider":"shm"' '"device":"' '"size":64' '"iters":2000' \
           '"p50_ns":' '"p90_ns":' '"p99_ns":' '"p999_ns":' '"max_ns":' '"mean_ns":' '"msg_rate":' '"fi_provider":"shm"'; do
  echo "$json" | grep -q "$key" || fail "JSON lacks $key"
done
p50=$(num "$json" p50_ns); p99=$(num "$json" p99_ns); max=$(num "$json" max_ns)
[ "$p50" -gt 0 ] && [ "$p50" -le "$p99" ] && [ "$p99" -le "$max" ] || fail "percentiles out of order: $p50 $p99 $max"

# Tagged, larger messages, with the histogram exported.
out=$("$pp" --layer=fi --provider=shm --tagged --local --size=4000 --iters=1000 --warmup=10 \
      --csv="$tmp/h.csv" 2>"$err") || fail "tagged run: $(cat "$err")"
echo "$out"
echo "$out" | grep -q "fi_tsend" || fail "the tagged run did not use fi_tsend"
[ -s "$tmp/h.csv" ] || fail "no CSV written"
awk -F, -v iters=1000 '
  /^#/ { next }
  /^lower_ns,upper_ns,count$/ { sect = "h"; next }
  /^statistic,ns$/ { sect = "s"; next }
  /^$/ { next }
  sect == "h" {
    if (NF != 3 || $1 !~ /^[0-9]+$/ || $2 !~ /^[0-9]+$/ || $3 !~ /^[0-9]+$/) { print "bad row: " $0; bad = 1 }
    if ($1 + 0 >= $2 + 0) { print "empty bucket range: " $0; bad = 1 }
    if (rows > 0 && $1 + 0 != prev) { print "gap before: " $0; bad = 1 }
    prev = $2 + 0; rows++; total += $3; next
  }
  sect == "s" { stat[$1] = $2; next }
  { print "line outside any section: " $0; bad = 1 }
  END {
    if (rows == 0) { print "no buckets"; bad = 1 }
    if (total != iters) { print "bucket counts sum to " total ", not " iters; bad = 1 }
    if (stat["count"] != iters) { print "count is " stat["count"]; bad = 1 }
    if (!("p50" in stat) || !("p99" in stat) || !("p999" in stat) || !("max" in stat) || !("mean" in stat)) { print "summary incomplete"; bad = 1 }
    if (stat["p50"] + 0 > stat["max"] + 0) { print "p50 above max"; bad = 1 }
    exit bad
  }' "$tmp/h.csv" || fail "the CSV does not parse back (above)"

# The PNG, when gnuplot is installed (CI runs tools/setup.sh, which installs
# it); without gnuplot on PATH, one line saying what to install.
if command -v gnuplot >/dev/null; then
  "$pp" --layer=fi --provider=shm --local --iters=500 --warmup=10 --plot="$tmp/h.png" >/dev/null 2>"$err" \
    || fail "plot run: $(cat "$err")"
  [ "$(head -c 8 "$tmp/h.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || fail "--plot did not write a PNG"
else
  echo "gnuplot is not installed here: the PNG itself is not checked"
fi
out=$(PATH=/nonexistent "$pp" --layer=fi --provider=shm --local --iters=10 --plot="$tmp/x.png" 2>&1) \
  && fail "--plot without gnuplot was accepted"
[ "$(echo "$out" | wc -l)" -eq 1 ] || fail "not one line: $out"
echo "$out" | grep -q "gnuplot" || fail "the error does not name gnuplot: $out"

# Rate mode with a window: every message arrives.
out=$("$pp" --layer=fi --provider=shm --local --mode=rate --window=16 --iters=20000 --warmup=100 --json 2>"$err") \
  || fail "rate run: $(cat "$err")"
echo "$out"
json=$(echo "$out" | grep '^{')
[ "$(num "$json" received)" -eq 20000 ] || fail "rate mode: not every message arrived"
echo "$json" | grep -q '"p50_ns":null' || fail "rate mode claims round-trip figures"

# tcp (tcp;ofi_rxm) on 127.0.0.1.
out=$("$pp" --layer=fi --provider=tcp --local --iters=500 --warmup=10 --json 2>"$err") || fail "tcp run: $(cat "$err")"
echo "$out"
echo "$out" | grep -q '"provider":"tcp"' || fail "tcp: no provider in the JSON"

# Connected endpoints (--ep=msg, FI_EP_MSG through fi_connect/fi_accept)
# over tcp; shm has none: one line naming the endpoint type; a bad --ep.
out=$("$pp" --layer=fi --provider=tcp --ep=msg --local --iters=500 --warmup=10 --json 2>"$err") \
  || fail "tcp --ep=msg run: $(cat "$err")"
echo "$out"
echo "$out" | grep -q '"fi_ep":"msg"' || fail "tcp --ep=msg: the JSON does not say fi_ep msg"
out=$("$pp" --layer=fi --provider=shm --ep=msg --local --iters=10 2>&1) && fail "shm --ep=msg was accepted"
echo "$out" | grep -q "FI_EP_MSG" || fail "the error does not name FI_EP_MSG: $out"
out=$("$pp" --layer=fi --ep=dgram --local --iters=10 2>&1) && fail "--ep=dgram was accepted"
[ "$(echo "$out" | wc -l)" -eq 1 ] || fail "not one line: $out"

# --server and --connect: the address over a TCP socket, as fi_pingpong does.
port=$((20000 + $$ % 20000))
"$pp" --layer=fi --provider=shm --server --oob_port="$port" --link_timeout_ms=20000 2>"$tmp/server.err" &
server=$!
out=$("$pp" --layer=fi --provider=shm --connect=127.0.0.1:"$port" --iters=500 --warmup=10 2>"$err") \
  || { kill "$server" 2>/dev/null; fail "client of a separate server: $(cat "$err") / server: $(cat "$tmp/server.err")"; }
echo "$out"
wait "$server" || fail "the server did not exit cleanly: $(cat "$tmp/server.err")"

# Errors: a provider libfabric lacks, and no way to reach the server.
out=$("$pp" --layer=fi --provider=nosuchprovider --local --iters=10 2>&1) && fail "an unknown provider was accepted"
[ "$(echo "$out" | grep -c 'pingpong:')" -eq 1 ] || fail "not one line: $out"
echo "$out" | grep -q "nosuchprovider" || fail "the error does not name the provider: $out"
out=$("$pp" --layer=fi --provider=shm 2>&1) && fail "a client with no server address was accepted"
echo "$out" | grep -q -- "--connect" || fail "the error does not say what to do: $out"

# The bypass provider: runs if libbypass-fi.so is where the tool looks (the
# runfiles, or bazel-bin next to the tool), else one line saying to build it.
real=$(readlink -f "$pp")
if [ -e "$TEST_SRCDIR/bypass/fabric/fi/libbypass-fi.so" ] || [ -e "$(dirname "$real")/../../fabric/fi/libbypass-fi.so" ]; then
  out=$(env -u FI_PROVIDER_PATH "$pp" --layer=fi --local --iters=500 --warmup=10 --json 2>&1) || fail "bypass provider: $out"
  echo "$out" | grep -q '"provider":"bypass"' || fail "bypass: no provider in the JSON: $out"
  # Connected, latency and rate (every message arrives).
  out=$(env -u FI_PROVIDER_PATH "$pp" --layer=fi --ep=msg --local --iters=500 --warmup=10 --json 2>&1) \
    || fail "bypass --ep=msg: $out"
  echo "$out"
  echo "$out" | grep -q '"fi_ep":"msg"' || fail "bypass --ep=msg: the JSON does not say fi_ep msg: $out"
  out=$(env -u FI_PROVIDER_PATH "$pp" --layer=fi --ep=msg --tagged --local --mode=rate --window=16 \
        --iters=5000 --warmup=100 --json 2>&1) || fail "bypass --ep=msg rate: $out"
  json=$(echo "$out" | grep '^{')
  [ "$(num "$json" received)" -eq 5000 ] || fail "bypass --ep=msg rate: not every message arrived: $out"
else
  out=$(env -u FI_PROVIDER_PATH "$pp" --layer=fi --local --iters=10 2>&1) && fail "the bypass provider ran without its library"
  [ "$(echo "$out" | wc -l)" -eq 1 ] || fail "not one line: $out"
  echo "$out" | grep -q "//fabric/fi:libbypass-fi.so" || fail "the error does not say what to build: $out"
fi
echo PASS
