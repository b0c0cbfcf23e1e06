#!/bin/bash
# Debian's fi_pingpong across two network namespaces ("hosts") through
# libbypass-fi.so: with nothing configured (the default domain reaches the
# other namespace over kernel UDP), then over AF_XDP on a veth pair with one
# variable. A second veth pair carries fi_pingpong's own TCP control
# connection, since AF_XDP takes every frame of the interface it binds.
set -u
. "$TEST_SRCDIR/bypass/fabric/fi/fi_pingpong_lib.sh"
[ "$(id -u)" -eq 0 ] || fail "this test needs root (network namespaces, AF_XDP)"

p="bfi$(( $$ % 10000 ))"
n=$(( $$ % 200 + 1 ))
del_ns() { ip netns del "${p}a" 2>/dev/null; ip netns del "${p}b" 2>/dev/null; }
trap 'del_ns; rm -rf "$PROVIDER_DIR"' EXIT
del_ns  # leftovers of a killed run
ip netns add "${p}a" && ip netns add "${p}b" ||
  fail "cannot create network namespaces: the test needs root and a kernel with netns"
for ns in a b; do
  ip netns exec "$p$ns" sh -c 'echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6;
                               echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6'
  ip -n "$p$ns" link set lo up
done
# c: control (kernel TCP), d: data (AF_XDP)
for kind in c d; do
  ip link add "${p}${kind}0" netns "${p}a" type veth peer name "${p}${kind}1" netns "${p}b" ||
    fail "cannot create a veth pair: the kernel needs veth"
done
ip -n "${p}a" addr add "10.202.$n.1/24" dev "${p}c0"
ip -n "${p}b" addr add "10.202.$n.2/24" dev "${p}c1"
ip -n "${p}a" addr add "10.203.$n.1/24" dev "${p}d0"
ip -n "${p}b" addr add "10.203.$n.2/24" dev "${p}d1"
for ns in a b; do
  for i in "${p}c" "${p}d"; do
    ip -n "$p$ns" link set "$i$([ $ns = a ] && echo 0 || echo 1)" up
  done
done

# No configuration: the default domain (intra-host + kernel UDP).
na="ip netns exec ${p}a env -u FI_BYPASS_DEVICES"
nb="ip netns exec ${p}b env -u FI_BYPASS_DEVICES"
run_pair "no configuration (kernel UDP) msg, -c" "$na" "$nb" "10.202.$n.1" -e rdm -c -I 10
run_pair "no configuration (kernel UDP) tagged 1 MiB, -c" "$na" "$nb" "10.202.$n.1" -e rdm -m tagged -S 1048576 -I 5 -c

# One variable: the intra-host device with AF_XDP for other hosts.
oa="ip netns exec ${p}a env FI_BYPASS_DEVICES=shm:+dpdk:net_af_xdp0,iface=${p}d0"
ob="ip netns exec ${p}b env FI_BYPASS_DEVICES=shm:+dpdk:net_af_xdp0,iface=${p}d1"
run_pair "shm:+af_xdp msg, -c" "$oa" "$ob" "10.202.$n.1" -e rdm -c -I 10

# Each side's FI_BYPASS_DEVICES names its own data interface.
sa="ip netns exec ${p}a env FI_BYPASS_DEVICES=dpdk:net_af_xdp0,iface=${p}d0"
sb="ip netns exec ${p}b env FI_BYPASS_DEVICES=dpdk:net_af_xdp0,iface=${p}d1"
run_pair "af_xdp msg, -c" "$sa" "$sb" "10.202.$n.1" -e rdm -c -I 10
run_pair "af_xdp datagrams (FI_EP_DGRAM), -c" "$sa" "$sb" "10.202.$n.1" -e dgram -c -I 20
run_pair "af_xdp tagged, 1 B" "$sa" "$sb" "10.202.$n.1" -e rdm -m tagged -S 1 -I 20 -c
echo PASS
