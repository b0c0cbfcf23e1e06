#!/usr/bin/env bash
# bw end to end with small sizes and counts: raw and rdm over memif between
# two processes, fi over libfabric's shm provider. The JSON has a result per
# size; reliable layers deliver every message; raw skips sizes above the
# MTU with a note; the text run shows a table and a progress line on stderr.
set -u
bw="$TEST_SRCDIR/bypass/tools/bw/bw"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
err="$tmp/err"
fail() { echo "FAIL: $*"; exit 1; }

# Checks one bw JSON line: tool, layer, a result per size in order, each
# with positive figures (or a skip reason), msgs == sent when reliable.
check() {  # json layer "sizes" reliable
  echo "$1" | awk -v layer="$2" -v sizes="$3" -v reliable="$4" '
    {
      if ($0 !~ /^\{"tool":"bw",/) { print "not a bw object"; exit 1 }
      if ($0 !~ "\"layer\":\"" layer "\"") { print "wrong layer"; exit 1 }
      if ($0 !~ /"window":[0-9]+,"results":\[/) { print "no window/results"; exit 1 }
      n = split(sizes, want, ",")
      body = $0; sub(/.*"results":\[/, "", body)
      m = split(body, res, /\},?/)
      got = 0
      for (i = 1; i <= m; i++) {
        if (res[i] !~ /"size":/) continue
        got++
        split(res[i], kv, ",")
        delete f
        for (j in kv) { split(kv[j], p, ":"); gsub(/[{"]/, "", p[1]); f[p[1]] = p[2] }
        if (f["size"] != want[got]) { print "result " got " is size " f["size"] ", want " want[got]; exit 1 }
        if (res[i] ~ /"skipped":/) { skipped++; continue }
        if (f["msgs"] + 0 <= 0 || f["seconds"] + 0 <= 0 || f["msg_rate"] + 0 <= 0 || f["mbytes_per_s"] + 0 <= 0) {
          print "size " f["size"] ": non-positive figures"; exit 1
        }
        if (reliable && f["msgs"] != f["sent"]) { print "size " f["size"] ": " f["msgs"] " of " f["sent"]; exit 1 }
        if (f["msgs"] + 0 > f["sent"] + 0) { print "size " f["size"] ": more received than sent"; exit 1 }
      }
      if (got != n) { print got " results for " n " sizes"; exit 1 }
    }' || fail "$2: bad JSON: $1"
}

# raw over memif: 9000 does not fit memif's frame and is skipped.
out=$("$bw" --local --layer=raw --sizes=1,64,1024,9000 --iters=20000 --warmup=100 --json 2>"$err") || fail "raw: $(cat "$err")"
echo "$out"
grep -q $'\r' "$err" && fail "--json still drew a progress line"
check "$out" raw "1,64,1024,9000" 0
echo "$out" | grep -q '"size":9000,[^}]*"skipped":"raw sends one frame per message' || fail "raw: 9000 B not skipped with a note"

# rdm over memif: multi-packet sizes too; every message arrives.
out=$("$bw" --local --layer=rdm --sizes=1,4096,65536 --iters=300 --warmup=10 --window=8 --json 2>"$err") || fail "rdm: $(cat "$err")"
echo "$out"
check "$out" rdm "1,4096,65536" 1

# fi over shm, by duration, as a table with a progress line.
"$bw" --local --layer=fi --provider=shm --sizes=64-256,1M --duration_ms=200 --warmup=10 >"$tmp/out" 2>"$err" \
  || fail "fi: $(cat "$err")"
cat "$tmp/out"
grep -q "provider shm" "$tmp/out" || fail "fi: no header"
for s in 64 128 256 1048576; do
  grep -qE "^ +$s +[0-9]+ +[0-9]+ +[0-9.]+ +[0-9]+ +[0-9.]+$" "$tmp/out" || fail "fi: no row for $s"
done
grep -q $'\r' "$err" || fail "no progress line on stderr"
out=$("$bw" --local --layer=fi --provider=shm --sizes=64 --iters=5000 --json 2>"$err") || fail "fi json: $(cat "$err")"
echo "$out"
check "$out" fi "64" 1
echo "$out" | grep -q '"provider":"shm"' || fail "fi: no provider"

# Bad input: one line each, saying what to do.
out=$("$bw" --local --sizes=0 2>&1) && fail "--sizes=0 was accepted"
echo "$out" | grep -q -- "--sizes" || fail "the error does not name --sizes: $out"
out=$("$bw" --local --layer=carrier 2>&1) && fail "an unknown layer was accepted"
echo "$out" | grep -q "layer" || fail "no word about the layer: $out"
echo PASS
