#!/bin/bash
# Debian's fi_pingpong on this host with nothing configured (the default
# domain: the intra-host device, and kernel UDP for other hosts): four
# pairs at once, then msg and tagged with data checks from 1 B to 1 MiB,
# FI_EP_DGRAM, and connected endpoints (FI_EP_MSG).
set -u
. "$TEST_SRCDIR/bypass/fabric/fi/fi_pingpong_lib.sh"
unset FI_BYPASS_DEVICES
trap 'rm -rf "$PROVIDER_DIR"' EXIT

# Four pairs at once: eight processes share the host's directory and ports.
pids=()
for i in 1 2 3 4; do
  ( run_pair "pair $i of 4, tagged, -c" "" "" 127.0.0.1 -e rdm -m tagged -c -I 20 -S 4096 ) &
  pids+=($!)
done
for pid in "${pids[@]}"; do
  wait "$pid" || fail "one of the four concurrent pairs failed (its output is above)"
done

run_pair "msg, 1 B .. 1 MiB, -c" "" "" 127.0.0.1 -e rdm -c -I 10
run_pair "tagged, 1 MiB, -c" "" "" 127.0.0.1 -e rdm -m tagged -S 1048576 -I 5 -c
run_pair "datagrams (FI_EP_DGRAM), -c" "" "" 127.0.0.1 -e dgram -c -I 20
# Connected endpoints (FI_EP_MSG): fi_passive_ep, fi_listen, fi_connect,
# FI_CONNREQ, fi_accept, FI_CONNECTED, then the same data path.
run_pair "connected (FI_EP_MSG), msg, 1 B .. 1 MiB, -c" "" "" 127.0.0.1 -e msg -c -I 10
run_pair "connected (FI_EP_MSG), tagged, 1 MiB, -c" "" "" 127.0.0.1 -e msg -m tagged -S 1048576 -I 5 -c
echo PASS
