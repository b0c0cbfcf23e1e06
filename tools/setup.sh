#!/usr/bin/env bash
# bypass setup: installs the Debian 12 packages bypass builds and runs with,
# reserves and mounts hugepages, and mounts bpffs, where this machine allows.
# Idempotent: a second run changes nothing. Everything it could not do is
# said in one line with what runs instead. Exit status is non-zero only when
# a build dependency is missing and could not be installed.
#
#   tools/setup.sh            set up, quietly when there is nothing to do
#   BYPASS_HUGEPAGES=N        2 MiB hugepages to have reserved (default 512)
set -u

say() { printf 'setup: %s\n' "$*"; }

PACKAGES=(
  # build
  bazel-bootstrap bazel-rules-java g++ pkg-config
  # libraries (pkg-config modules in WORKSPACE)
  libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev libnuma-dev
  dpdk dpdk-dev libdpdk-dev
  libibverbs-dev rdma-core ibverbs-providers
  libfabric-dev libfabric1 libfabric-bin
  # MACs and randomness (SECURITY.md)
  libsodium-dev
  # fuzzing and sanitizers
  clang libclang-rt-14-dev
  # multi-host tests: network namespaces and veth pairs
  iproute2
  # pingpong --plot: latency histograms as PNG
  gnuplot-nox
  # MPI over bypass (test/mpi/)
  openmpi-bin libopenmpi-dev
  # reading pcap= captures with tools/wireshark/bypass.lua (the capture
  # tests); installed noninteractively, so without its setuid dumpcap
  tshark
)

is_root() { [ "$(id -u)" -eq 0 ]; }

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  if ! is_root; then
    say "missing packages: ${missing[*]}; run this script as root (sudo tools/setup.sh) to install them"
    exit 1
  fi
  say "installing ${#missing[@]} Debian package(s): ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get update -qq >/tmp/bypass-setup-apt.log 2>&1 ||
     ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >>/tmp/bypass-setup-apt.log 2>&1; then
    say "apt-get could not install ${missing[*]}: see /tmp/bypass-setup-apt.log (is Debian's archive reachable?)"
    exit 1
  fi
fi

# --- hugepages --------------------------------------------------------------
want=${BYPASS_HUGEPAGES:-512}
hp2m=/sys/kernel/mm/hugepages/hugepages-2048kB
if [ ! -d "$hp2m" ]; then
  say "this kernel has no 2 MiB hugepages; bypass runs on transparent hugepages or small pages and DPDK with --no-huge"
else
  have=$(cat "$hp2m/nr_hugepages")
  if [ "$have" -lt "$want" ]; then
    if is_root && echo "$want" >"$hp2m/nr_hugepages" 2>/dev/null; then
      got=$(cat "$hp2m/nr_hugepages")
      if [ "$got" -lt "$want" ]; then
        say "the kernel reserved only $got of $want 2 MiB hugepages (memory is fragmented); bypass uses what is there and falls back to transparent hugepages"
      else
        say "reserved $got 2 MiB hugepages"
      fi
    elif [ "$have" -gt 0 ]; then
      say "could not reserve $want 2 MiB hugepages (need root: echo $want > $hp2m/nr_hugepages); bypass uses the $have reserved and falls back to transparent hugepages when they run out"
    else
      say "could not reserve 2 MiB hugepages (need root: echo $want > $hp2m/nr_hugepages); bypass falls back to transparent hugepages and DPDK runs with --no-huge"
    fi
  fi
  if ! grep -qs ' hugetlbfs ' /proc/mounts; then
    if is_root && mkdir -p /dev/hugepages && mount -t hugetlbfs nodev /dev/hugepages 2>/dev/null; then
      say "mounted hugetlbfs at /dev/hugepages"
    else
      say "could not mount hugetlbfs (need root: mount -t hugetlbfs nodev /dev/hugepages); DPDK runs with --no-huge"
    fi
  fi
fi

# --- bpffs (libxdp keeps AF_XDP programs there) -------------------------------
if ! grep -qs ' /sys/fs/bpf bpf ' /proc/mounts; then
  if is_root && mkdir -p /sys/fs/bpf && mount -t bpf bpf /sys/fs/bpf 2>/dev/null; then
    say "mounted bpffs at /sys/fs/bpf"
  else
    say "could not mount bpffs at /sys/fs/bpf (need root: mount -t bpf bpf /sys/fs/bpf); DPDK af_xdp loads its XDP program without libxdp's pinning"
  fi
fi

exit 0
