#!/usr/bin/env bash
# info: a loopback device with its capabilities; an absent device gets one
# line with the open error (and exit status 1); the default run lists the
# default devices, the hugepage report and the fi_info section (entries, or
# one line saying the bypass provider is not built).
set -u
info="$TEST_SRCDIR/bypass/tools/info/info"
fail() { echo "FAIL: $*"; exit 1; }

out=$("$info" --device=loopback:infotest 2>&1) || fail "loopback: $out"
echo "$out"
for key in "^loopback:infotest$" "driver: loopback" "mtu: [0-9]+" "mac: ([0-9a-f]{2}:){5}[0-9a-f]{2}" "ipv4: " \
           "queues: [0-9]+" "offloads: " "can_steer: (yes|no)" "link: (up|down)" "^== hugepages ==$" "^== fi_info"; do
  echo "$out" | grep -qE "$key" || fail "no match for $key"
done

# Absent devices: one line each, naming the device and why, exit status 1.
for uri in "memif:/nonexistent-bypass-dir/x.sock,role=client" "mlx5:mlx5_nosuch" "bogus:x"; do
  out=$("$info" --device="$uri" 2>/dev/null) && fail "$uri: exit status 0"
  lines=$(echo "$out" | grep -F -- "$uri")
  echo "$lines"
  [ "$(echo "$lines" | wc -l)" -eq 1 ] || fail "$uri: not one line: $lines"
  echo "$lines" | grep -q ": cannot open: ." || fail "$uri: no reason: $lines"
  echo "$out" | grep -q "^== hugepages ==$" || fail "$uri: the hugepage section went missing"
done
out=$("$info" --device="memif:/nonexistent-bypass-dir/x.sock,role=client" 2>/dev/null)
echo "$out" | grep -q "/nonexistent-bypass-dir does not exist" || fail "the memif error does not say why: $out"

# The default run: loopback, memif, the notes, hugepages, fi_info.
out=$("$info" 2>/dev/null) || fail "default run: $out"
echo "$out"
echo "$out" | grep -q "^loopback:info$" || fail "no loopback device"
echo "$out" | grep -qE "^memif:/tmp/bypass-info-[0-9]+\.sock,role=server$" || fail "no memif device"
echo "$out" | grep -qE "^(  2 MiB pages|  backing) " || fail "no hugepage report"
if echo "$out" | grep -q "^provider: "; then
  echo "$out" | grep -q "^    fabric: " || fail "fi_info entries without a fabric"
else
  [ "$(echo "$out" | sed -n '/^== fi_info/,$p' | wc -l)" -eq 2 ] || fail "the fi_info section is not one line"
  echo "$out" | grep -qE "not built|returned nothing" || fail "the fi_info section says nothing useful"
fi
echo PASS
