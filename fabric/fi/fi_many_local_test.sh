#!/bin/bash
# 64 processes on this host over the default domain with nothing
# configured (fabric/fi/fi_many_local.cc says what they do).
set -u
unset FI_BYPASS_DEVICES
exec "$TEST_SRCDIR/bypass/fabric/fi/fi_many_local" --procs=64 --msgs=2
