#!/usr/bin/env bash
# The pipeline example over memif between two processes: the app (its own
# EAL, port and lcores: a ring pipeline on queue 0, bypass on queue 1) and a
# peer sending ordinary datagrams to queue 0 and RDM messages to queue 1.
# Neither path may lose a packet; the app's engine counters are read through
# its EAL's telemetry socket (dpdk-telemetry.py) while it runs.
set -u
bin="${TEST_SRCDIR:-.}/bypass/examples/pipeline/pipeline"
[ -x "$bin" ] || bin=examples/pipeline/pipeline
work=$(mktemp -d /tmp/pipeline-test.XXXXXX)
sock="$work/memif.sock"
app_prefix="pipeline-app-$$"
peer_prefix="pipeline-peer-$$"
packets=${PACKETS:-5000}
messages=${MESSAGES:-300}
cleanup() {
  [ -n "${app_pid:-}" ] && kill "$app_pid" 2>/dev/null
  [ -n "${peer_pid:-}" ] && kill "$peer_pid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$work"
  rmdir "/var/run/dpdk/$app_prefix" "/var/run/dpdk/$peer_prefix" 2>/dev/null
}
trap cleanup EXIT
eal=(--no-pci --no-huge -m 256 --no-shconf --log-level='*:warning'
     --log-level=pmd.net.memif:critical '--lcores=0@(0-1),1@(0-1),2@(0-1)')

"$bin" "${eal[@]}" --file-prefix="$app_prefix" \
  --vdev="net_memif0,role=server,socket=$sock,socket-abstract=no,mac=02:00:00:00:0a:01" -- \
  --role=app --ip=10.23.0.1 --packets="$packets" --messages="$messages" \
  --stop-file="$work/stop" --seconds=28 >"$work/app.out" 2>"$work/app.err" &
app_pid=$!
for _ in $(seq 1 500); do [ -S "$sock" ] && break; sleep 0.01; done
"$bin" "${eal[@]}" --file-prefix="$peer_prefix" \
  --vdev="net_memif0,role=client,socket=$sock,socket-abstract=no,mac=02:00:00:00:0b:01" -- \
  --role=peer --ip=10.23.0.2 --peer-ip=10.23.0.1 --peer-mac=02:00:00:00:0a:01 \
  --packets="$packets" --messages="$messages" --seconds=25 >"$work/peer.out" 2>"$work/peer.err" &
peer_pid=$!

fail=0
# The peer prints its counts when its traffic is done, then keeps its end of
# the memif open until the app closed its own (pipeline.cc, AwaitAppClose).
for _ in $(seq 1 3000); do
  [ -s "$work/peer.out" ] && break
  kill -0 "$peer_pid" 2>/dev/null || break
  sleep 0.01
done
# The app runs until told to stop: its counters through DPDK's telemetry.
tel=""
if [ -x /usr/bin/dpdk-telemetry.py ]; then
  tel=$(printf '/bypass/engines\n' | /usr/bin/dpdk-telemetry.py -f "$app_prefix" 2>&1)
fi
touch "$work/stop"
wait "$app_pid"; app_rc=$?; app_pid=
wait "$peer_pid"; peer_rc=$?; peer_pid=
echo "app:  $(cat "$work/app.out")"
echo "peer: $(cat "$work/peer.out")"
echo "telemetry: $tel"
field() { sed -n "s/.*\"$2\": \([0-9]*\).*/\1/p" "$work/$1.out"; }
expect() {  # what side field want
  local got; got=$(field "$1" "$2")
  if [ "$got" != "$3" ]; then echo "FAIL: $1 $2 is '$got', want $3"; fail=1; fi
}
[ "$peer_rc" -eq 0 ] || { echo "FAIL: the peer exited $peer_rc"; cat "$work/peer.err"; fail=1; }
[ "$app_rc" -eq 0 ] || { echo "FAIL: the app exited $app_rc"; cat "$work/app.err"; fail=1; }
expect peer sent "$packets"
expect peer returned "$packets"
expect peer duplicates 0
expect peer corrupt 0
expect app rx "$packets"
expect app forwarded "$packets"
expect app tx "$packets"
expect peer messages_sent "$messages"
expect peer echoes_ok "$messages"
expect peer echoes_bad 0
expect peer errors 0
expect app messages_received "$messages"
expect app messages_echoed "$messages"
expect app errors 0
if [ -x /usr/bin/dpdk-telemetry.py ]; then
  # One engine; it received at least one packet per message.
  echo "$tel" | grep -q '"engines": \[1\]' || { echo "FAIL: telemetry: no engine 1"; fail=1; }
  rx=$(echo "$tel" | sed -n 's/.*"rx_data_packets": \([0-9]*\).*/\1/p')
  [ -n "$rx" ] && [ "$rx" -ge "$messages" ] || { echo "FAIL: telemetry: rx_data_packets '$rx'"; fail=1; }
fi
[ "$fail" -eq 0 ] && echo PASS
exit "$fail"
