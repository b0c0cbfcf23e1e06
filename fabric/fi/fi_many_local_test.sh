#!/bin/bash
# 64 processes on this host over the default domain with nothing
# configured (fabric/fi/fi_many_local.cc says what they do).
set -u
unset FI_BYPASS_DEVICES
# 64 processes share two cores with whatever else runs: a peer is given up
# only after two minutes of silence, so only a real hang fails the test.
export FI_BYPASS_PEER_TIMEOUT_MS=120000
exec "$TEST_SRCDIR/bypass/fabric/fi/fi_many_local" --procs=64 --msgs=2
