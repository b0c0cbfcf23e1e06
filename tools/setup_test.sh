#!/usr/bin/env bash
# tools/setup.sh: a second run changes nothing and says nothing; without the
# privilege to reserve hugepages it says so in one line with what to do, and
# still succeeds (bypass falls back).
set -u
setup="$TEST_SRCDIR/bypass/tools/setup.sh"
fail() { echo "FAIL: $*"; exit 1; }

[ "$(id -u)" -eq 0 ] || fail "run as root (CI does): the test checks what root and an unprivileged user see"

"$setup" >/dev/null || fail "setup.sh failed as root"
out=$("$setup") || fail "the second run failed"
[ -z "$out" ] || fail "the second run was not silent: $out"

# An unprivileged user asking for more hugepages than are reserved. The
# runfiles live under root's home, so the user runs a copy.
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
cp "$setup" "$copy/setup.sh"
chmod 755 "$copy" "$copy/setup.sh"
want=$(( $(cat /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages) + 100000 ))
out=$(BYPASS_HUGEPAGES=$want setpriv --reuid=65534 --regid=65534 --clear-groups "$copy/setup.sh" 2>&1) ||
  fail "setup.sh failed for an unprivileged user, who must only get notes: $out"
echo "$out"
echo "$out" | grep -q "could not reserve .*2 MiB hugepages (need root: echo $want > " ||
  fail "no one-line note saying how to reserve hugepages"
echo "$out" | grep -q "falls back" || fail "the note does not say what runs instead"
[ "$(echo "$out" | grep -c 'hugepages')" -eq 1 ] || fail "expected one line about hugepages"
echo PASS
