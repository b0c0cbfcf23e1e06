#!/bin/bash
# A program linked with //fabric/fi:bypass_fi_static (no libfabric) runs a
# server and a client over memif and checks every echoed byte; then the
# same over connected endpoints (-e msg) on the default domain.
set -u
fail() { echo "FAIL: $*"; exit 1; }
bin="$TEST_SRCDIR/bypass/fabric/fi/fi_static_pingpong"
readelf -d "$bin" | grep -q "libfabric" && fail "fi_static_pingpong links libfabric: $(readelf -d "$bin" | grep libfabric)"
sock="/tmp/bypass-fi-static-$$.sock"
export FI_BYPASS_DEVICES="memif:$sock,role=auto"
out=$(timeout 120 "$bin" 2>&1)
rc=$?
echo "$out"
rm -f "$sock" "$sock.lock"
[ $rc -eq 0 ] || fail "fi_static_pingpong failed (rc $rc; 124 is a 120 s timeout)"
echo "$out" | grep -q "1048576 bytes: 20 round trips" || fail "the 1 MiB round trips did not run"
# Connected endpoints (-e msg) on the default domain: a passive endpoint
# opens a domain of its own, and memif joins two processes, one device each.
out=$(env -u FI_BYPASS_DEVICES timeout 120 "$bin" -e msg 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "fi_static_pingpong -e msg failed (rc $rc; 124 is a 120 s timeout)"
echo "$out" | grep -q "PASS: .*(connected endpoints)" || fail "the connected run did not finish"
echo PASS
