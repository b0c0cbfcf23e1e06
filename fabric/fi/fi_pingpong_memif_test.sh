#!/bin/bash
# Debian's fi_pingpong, server and client as two processes on this host,
# over libbypass-fi.so and memif (FI_BYPASS_DEVICES names a socket; the
# default domain is fi_pingpong_local_test's): msg and tagged, with data
# checks (-c), 1 B to 1 MiB; and FI_EP_DGRAM (64 B .. 1 KiB datagrams).
set -u
. "$TEST_SRCDIR/bypass/fabric/fi/fi_pingpong_lib.sh"

export FI_BYPASS_DEVICES="memif:/tmp/bypass-fi-test-$$.sock,role=auto"
run_pair "tagged, -c" "" "" 127.0.0.1 -e rdm -m tagged -c -I 10
run_pair "1 byte" "" "" 127.0.0.1 -e rdm -S 1 -I 50 -c
run_pair "datagrams (FI_EP_DGRAM), -c" "" "" 127.0.0.1 -e dgram -c -I 20
run_pair "1 MiB tagged" "" "" 127.0.0.1 -e rdm -m tagged -S 1048576 -I 5 -c
rm -f "/tmp/bypass-fi-test-$$.sock" "/tmp/bypass-fi-test-$$.sock.lock"
echo PASS
