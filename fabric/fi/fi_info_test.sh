#!/bin/bash
# Debian's unmodified fi_info loads libbypass-fi.so, lists the provider and
# its FI_BYPASS_* parameters.
set -u
. "$TEST_SRCDIR/bypass/fabric/fi/fi_pingpong_lib.sh"
export FI_BYPASS_DEVICES="loopback:fiinfo,ip=10.77.0.1"

# The .so stands alone: every dependency resolves, libfabric is not linked,
# and fi_prov_ini is the one function it exports.
undefined=$(ldd -r "$so" 2>&1 | grep -E "undefined symbol|not found")
[ -z "$undefined" ] || fail "libbypass-fi.so has unresolved dependencies: $undefined"
readelf -d "$so" | grep -q "libfabric" && fail "libbypass-fi.so links libfabric: $(readelf -d "$so" | grep libfabric)"
exported=$(nm -D --defined-only "$so" | awk '$2 == "T" {print $3}')
[ "$exported" = "fi_prov_ini" ] || fail "libbypass-fi.so exports more than fi_prov_ini: $exported"

out=$(fi_info -p bypass 2>&1) || fail "fi_info -p bypass failed: $out"
echo "$out"
echo "$out" | grep -q "provider: bypass" || fail "fi_info -p bypass does not list bypass"
echo "$out" | grep -q "domain: loopback:fiinfo,ip=10.77.0.1" ||
  fail "the domain is not the FI_BYPASS_DEVICES URI"
echo "$out" | grep -q "FI_EP_RDM" || fail "no FI_EP_RDM entry"

# No utility provider layers over us: fi_pingpong takes the first entry,
# which must be the engine's FI_EP_RDM, not "bypass;ofi_rxd" over datagrams.
out=$(fi_info -p bypass -t FI_EP_RDM 2>&1) || fail "fi_info -p bypass -t FI_EP_RDM failed: $out"
first=$(echo "$out" | grep -m1 "provider:")
[ "$first" = "provider: bypass" ] ||
  fail "the first FI_EP_RDM entry is \"$first\", not the native provider: $(echo "$out" | grep "provider:")"

# Connected endpoints: an FI_EP_MSG entry wherever FI_EP_RDM is.
out=$(fi_info -p bypass -t FI_EP_MSG 2>&1) || fail "fi_info -p bypass -t FI_EP_MSG failed: $out"
echo "$out" | grep -q "type: FI_EP_MSG" || fail "no FI_EP_MSG entry: $out"

out=$(fi_info -p bypass -t FI_EP_RDM -c FI_TAGGED -v 2>&1) || fail "fi_info -v failed: $out"
echo "$out" | grep -q "FI_PROGRESS_MANUAL" || fail "progress is not FI_PROGRESS_MANUAL"
# The limits the domain enforces (fi_attr_test): 64 endpoints per domain.
echo "$out" | grep -q "ep_cnt: 64" || fail "ep_cnt is not 64: $(echo "$out" | grep ep_cnt:)"
# Addresses in the format asked: FI_SOCKADDR as well as FI_SOCKADDR_IN.
out=$(fi_info -p bypass -a FI_SOCKADDR -v 2>&1) || fail "fi_info -a FI_SOCKADDR failed: $out"
echo "$out" | grep -q "addr_format: FI_SOCKADDR$" ||
  fail "fi_info -a FI_SOCKADDR answers $(echo "$out" | grep -m1 addr_format:)"

out=$(fi_info -e 2>&1)
for p in FI_BYPASS_DEVICES FI_BYPASS_PORT FI_BYPASS_WINDOW FI_BYPASS_RTO_MIN_US FI_BYPASS_AUTH_KEY_FILE; do
  echo "$out" | grep -q "$p" || fail "fi_info -e does not list $p"
done

# FI_LOG_LEVEL reaches the provider's log.
out=$(FI_LOG_LEVEL=info fi_info -p bypass 2>&1)
echo "$out" | grep -a -q ":bypass:" || fail "FI_LOG_LEVEL=info shows no bypass log line"

# With nothing configured: the default domain, local and remote, and a node
# given as 127.0.0.1, the host's name or its address.
unset FI_BYPASS_DEVICES
out=$(fi_info -p bypass -t FI_EP_RDM -v 2>&1) || fail "fi_info with no configuration failed: $out"
echo "$out" | grep -q "domain: shm:+udp:" || fail "the default domain is not shm:+udp:: $(echo "$out" | grep domain:)"
caps=$(echo "$out" | grep -m1 "caps:")
for c in FI_LOCAL_COMM FI_REMOTE_COMM FI_TAGGED FI_DIRECTED_RECV; do
  echo "$caps" | grep -q "$c" || fail "the default domain does not offer $c: $caps"
done
for node in 127.0.0.1 "$(hostname)" "$(hostname -I 2>/dev/null | awk '{print $1}')"; do
  [ -n "$node" ] || continue
  out=$(fi_info -p bypass -n "$node" -s 5000 2>&1) || fail "fi_info -n $node -s 5000 failed: $out"
  echo "$out" | grep -q "provider: bypass" || fail "fi_info -n $node lists no bypass entry: $out"
done
echo PASS
