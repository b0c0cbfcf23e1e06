#!/usr/bin/env bash
# tools/bench end to end, at CI size: its parsers against the tools' output
# shapes (--selftest), then a tiny alternating run of every column. Checks the
# shape of the table and the JSON, that a column which cannot run says why in
# one line while the run goes on, that a hung tool is cut off by the timeout,
# and that bad flags get one line. Never checks a timing.
set -u
bench="$TEST_SRCDIR/bypass/tools/bench"
tmp="${TEST_TMPDIR:-/tmp}/bench_test.$$"
mkdir -p "$tmp"
fail() { echo "FAIL: $*"; exit 1; }

# 64 B fits every layer; 4 KiB does not fit one memif frame, so raw and bare
# DPDK must say why and the others must still be measured.
"$bench" --selftest --json="$tmp/b.json" --plot="$tmp/b.png" >"$tmp/out" 2>"$tmp/err" ||
  fail "bench --selftest exited $?: $(tail -5 "$tmp/err")"
cat "$tmp/out"
for want in "== local:" "x bare" "x shm" "p50" "windowed Mmsg/s" "ping-pong Mxfer/s" \
            "bare DPDK memif" "bypass raw" "bypass rdm" "bypass fi" "bypass fi default (shm)" \
            "bypass fi default (kernel UDP)" "libfabric shm" "libfabric tcp" \
            "fi_pingpong bypass" "fi_pingpong shm" "fi_pingpong tcp" "== netns:" \
            "== rate at 64 B" "rdm / bare:" "fi / shm:"; do
  grep -qF -- "$want" "$tmp/out" || fail "the table lacks '$want'"
done

python3 - "$tmp/b.json" "$tmp/b.png" "$(id -u)" <<'EOF' || fail "JSON shape"
import json, os, sys
doc = json.load(open(sys.argv[1]))
root = sys.argv[3] == "0"
def check(cond, what):
    if not cond:
        print("JSON:", what)
        sys.exit(1)
check(doc["tool"] == "bench", "tool is not bench")
check(doc["config"]["sizes"] == [64, 4096], "sizes are %s" % doc["config"]["sizes"])
check(doc["config"]["reps"] == 2, "reps")
for k in ("cpus", "cpu_model", "kernel", "os"):
    check(k in doc["machine"], "machine lacks " + k)
secs = {s["name"]: s for s in doc["sections"]}
check(set(secs) == {"local", "netns"}, "sections are %s" % sorted(secs))
local = secs["local"]
check(local["baseline"] == "bare" and local["reference"] == "shm", "local baseline/reference")
keys = [c["key"] for c in local["columns"]]
check(keys == ["bare", "raw", "rdm", "fi", "fi_host", "shm", "tcp", "fi_pingpong",
               "shm_fi_pingpong", "tcp_fi_pingpong"], "local columns %s" % keys)
rows = {(r["column"], r["size"]): r for r in local["rows"]}
check(len(rows) == len(keys) * 2, "local has %d rows" % len(rows))
for (col, size), r in rows.items():
    has = r["p50_ns"] is not None or r["mean_ns"] is not None
    check(has != bool(r["latency_error"]), "%s %d: a value and an error, or neither" % (col, size))
    if r["latency_error"]:
        check("\n" not in r["latency_error"] and r["latency_error"].strip(), "%s %d: reason" % (col, size))
    if has:
        check(r["mean_ns"] > 0 and r["lat_reps"] >= 1, "%s %d: mean and reps" % (col, size))
# The layers this tree builds were measured where they fit.
for col in ("bare", "raw", "rdm"):
    check(rows[(col, 64)]["p50_ns"] and rows[(col, 64)]["p50_ns"] > 0, col + " at 64 B has no p50")
check(rows[("rdm", 4096)]["p50_ns"], "rdm at 4 KiB has no p50")
# raw sends one frame per message: 4 KiB over memif is refused, with the reason.
check(rows[("raw", 4096)]["latency_error"] and "pingpong" in rows[("raw", 4096)]["latency_error"],
      "raw at 4 KiB: %r" % rows[("raw", 4096)]["latency_error"])
check(rows[("bare", 4096)]["latency_error"], "bare at 4 KiB ran")
check(abs(rows[("bare", 64)]["latency_vs_bare"] - 1.0) < 1e-9, "bare is not 1.00x of itself")
check(rows[("raw", 64)]["latency_vs_bare"] > 0, "raw has no ratio to bare")
check(rows[("bare", 64)]["msg_rate"] and rows[("bare", 64)]["msg_rate"] > 0, "bare burst rate")
# The fi columns run or say what to build.
for col in ("fi", "fi_host", "fi_pingpong"):
    r = rows[(col, 64)]
    err = r["latency_error"] or ""
    check(r["mean_ns"] or "libbypass-fi.so" in err or err.startswith(("pingpong:", "fi_pingpong:", "server ")),
          "%s neither ran nor said why: %r" % (col, err))
# libfabric's own providers through the fi layer, and through Debian's fi_pingpong.
check(rows[("shm", 64)]["p50_ns"] and rows[("shm", 64)]["latency_vs_shm"] == 1.0, "shm at 64 B")
check(rows[("tcp", 64)]["p50_ns"], "tcp at 64 B: %s" % rows[("tcp", 64)]["latency_error"])
check(rows[("shm", 4096)]["msg_rate"], "shm windowed rate at 4 KiB: %s" % rows[("shm", 4096)]["rate_error"])
if os.path.exists("/usr/bin/fi_pingpong"):
    for col in ("shm_fi_pingpong", "tcp_fi_pingpong"):
        r = rows[(col, 64)]
        check(r["mean_ns"] and r["p50_ns"] is None and r["pp_xfers_per_s"] > 0, col + " at 64 B")
# The rate table (issue 22 part 5): 64 B rates of bare, raw, rdm, fi and shm,
# with rdm/bare and fi/shm and their goals.
rate = doc["rate"]
check(rate["size"] == 64 and "skipped" not in rate, "rate table: %s" % rate)
rr = {r["column"]: r for r in rate["rows"]}
check(list(rr) == ["bare", "raw", "rdm", "fi", "fi_host", "shm"], "rate columns %s" % list(rr))
check(rr["bare"]["msg_rate"] == rows[("bare", 64)]["msg_rate"] and rr["bare"]["vs_bare"] == 1.0,
      "rate table's bare")
check(rr["shm"]["vs_shm"] == 1.0, "rate table's shm")
goals = {(g["ours"], g["theirs"]): g for g in rate["goals"]}
check(set(goals) == {("rdm", "bare"), ("fi", "shm")}, "rate goals %s" % sorted(goals))
g = goals[("rdm", "bare")]
check(abs(g["ratio"] - rows[("rdm", 64)]["msg_rate"] / rows[("bare", 64)]["msg_rate"]) < 1e-9 and
      g["goal"] == 0.5 and g["met"] == (g["ratio"] >= 0.5), "rdm/bare goal %s" % g)
netns = secs["netns"]
if root:
    check(not netns["skipped"], "netns skipped as root: %s" % netns["skipped"])
    nrows = {(r["column"], r["size"]): r for r in netns["rows"]}
    check(len(nrows) == 7 * 2, "netns has %d rows" % len(nrows))
    r = nrows[("fi_udp", 64)]
    err = r["latency_error"] or ""
    check(r["mean_ns"] or "libbypass-fi.so" in err or err.startswith(("pingpong:", "server ")),
          "fi_udp neither ran nor said why: %r" % err)
    check(nrows[("tcp", 64)]["p50_ns"], "tcp in the namespaces: %s" % nrows[("tcp", 64)]["latency_error"])
    check(nrows[("raw", 64)]["p50_ns"], "raw over af_xdp at 64 B: %s" % nrows[("raw", 64)]["latency_error"])
else:
    check("root" in netns["skipped"], "netns skipped without saying root")
if doc["plot"]:
    check(open(sys.argv[2], "rb").read(8) == b"\x89PNG\r\n\x1a\n", "the plot is not a PNG")
EOF
if [ "$(id -u)" != 0 ]; then grep -q "needs root" "$tmp/out" || fail "no line saying the namespaces need root"; fi

# A tool that runs past the timeout is cut off, says so, and the run goes on.
out=$("$bench" --selftest --reps=1 --sizes=64 --timeout=0.05 --no_netns --plot= --skip=fi_host,shm,tcp,fi_pingpong,shm_fi_pingpong,tcp_fi_pingpong 2>&1) ||
  fail "bench with a tiny timeout exited non-zero: $out"
echo "$out" | grep -q "timeout" || fail "no timeout reason: $out"
sleep 1
leftover=$(pgrep -f "$TEST_SRCDIR/bypass/tools/(pingpong|bare)/" | wc -l)
[ "$leftover" -eq 0 ] || fail "$leftover tool processes outlived the timeout"

# --json alone: JSON on stdout, the tables on stderr.
"$bench" --selftest --reps=1 --sizes=64 --no_netns --plot= --skip=bare,rdm,fi,fi_host,shm,tcp,fi_pingpong,shm_fi_pingpong,tcp_fi_pingpong --json \
  >"$tmp/stdout" 2>"$tmp/stderr" || fail "--json to stdout: $(tail -3 "$tmp/stderr")"
python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$tmp/stdout" || fail "stdout is not JSON alone"
grep -q "bypass raw" "$tmp/stderr" || fail "the table did not go to stderr"

# Bad flags: one line that says what to do.
for bad in --sizes=abc --reps=0 --skip=carrier --window=0; do
  out=$("$bench" "$bad" 2>&1) && fail "$bad was accepted"
  [ "$(echo "$out" | wc -l)" -eq 1 ] || fail "$bad: not one line: $out"
  echo "$out" | grep -q "^bench: " || fail "$bad: $out"
done
rm -rf "$tmp"
echo PASS
