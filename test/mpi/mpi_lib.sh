# Shared by the Open MPI tests and the benchmark (test/mpi/): Debian's
# mpirun over libbypass-fi.so. Source it with BYPASS_SO set to the
# provider; it defines fail, needs_mpi, provider_dir, mpi_setup, mpi_run,
# make_hosts and remove_hosts.

fail() { echo "FAIL: $*"; exit 1; }

# The flags every run takes, and those that choose bypass (Open MPI's OFI
# MTL) or a baseline of Open MPI's own.
MPI_COMMON="--allow-run-as-root --oversubscribe --bind-to none"
MPI_BYPASS="--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include bypass --mca btl self -x FI_PROVIDER_PATH"
MPI_VADER="--mca pml ob1 --mca btl self,vader"

needs_mpi() {
  local tool
  for tool in mpicc mpirun; do
    command -v "$tool" >/dev/null ||
      fail "$tool is missing: install Debian's openmpi-bin and libopenmpi-dev (tools/setup.sh installs them)"
  done
  [ -f "$BYPASS_SO" ] || fail "libbypass-fi.so is not where expected ($BYPASS_SO)"
  # Debian's Open MPI is not built with a sanitizer, so it cannot load a
  # provider that is (the sanitizer runtime must come first in the process).
  if nm -D "$BYPASS_SO" 2>/dev/null | grep -q -E ' U __(asan|tsan)_init'; then
    echo "SKIP: libbypass-fi.so is sanitizer-built and Debian's Open MPI is not"
    exit 0
  fi
}

# provider_dir DIR: a directory holding only our provider (libfabric loads
# every lib*-fi.so in FI_PROVIDER_PATH), exported as FI_PROVIDER_PATH.
# Nothing else of bypass is configured: the default domain.
provider_dir() {
  mkdir -p "$1"
  # An absolute target: BYPASS_SO may be relative to where we were started.
  ln -sf "$(readlink -f "$BYPASS_SO")" "$1/libbypass-fi.so"
  unset FI_BYPASS_DEVICES FI_PROVIDER
  export FI_PROVIDER_PATH="$1"
}

# mpi_setup SRC: a work directory WORK (removed at exit, with the
# namespaces of make_hosts), the provider directory in it, and the MPI
# program SRC built as $WORK/NAME (SRC's name without .c).
mpi_setup() {
  needs_mpi
  WORK=$(mktemp -d)
  trap 'remove_hosts; rm -rf "$WORK"' EXIT
  provider_dir "$WORK/prov"
  local out
  out="$WORK/$(basename "$1" .c)"
  mpicc -O2 -o "$out" "$1" || fail "mpicc could not build $1"
}

# mpi_run SECONDS PREFIX ARGS...: mpirun under timeout in a session of its
# own (so a hung run's ranks go with it), PREFIX before it ("" or
# "ip netns exec NS"); prints the output without Open MPI's notices about
# unauthenticated peers, returns mpirun's status (124: timed out).
mpi_run() {
  local secs=$1 prefix=$2
  shift 2
  local out rc
  out=$($prefix timeout -k 5 "$secs" setsid mpirun $MPI_COMMON "$@" 2>&1)
  rc=$?
  echo "$out" | grep -v "are not authenticated"
  return $rc
}

# make_hosts PREFIX: two network namespaces ("hosts") PREFIXa and PREFIXb
# joined by three veth pairs: control (Open MPI's launch and out-of-band
# TCP), CTRL_A/CTRL_B on CTRL_NET.0/24; data, DATA_A/DATA_B on
# DATA_NET.0/24, whose interface is named DATA_IF in both namespaces (so
# one FI_BYPASS_DEVICES value names it in every rank; MTU 1500: AF_XDP on
# veth refuses more); and kernel, KERN_A/KERN_B on KERN_NET.0/24 with
# jumbo frames (HOST_MTU, default 9000) and the default route, so that
# bypass's default domain (kernel UDP on the default route's address) and
# Open MPI's tcp (btl_tcp_if_include KERN_NET.0/24) share it. AGENT is a launch
# agent for --mca plm_rsh_agent that runs a command in the namespace of
# the host address it is given. Needs root.
make_hosts() {
  local p=$1 n=$(( $$ % 200 + 1 ))
  NS_A="${p}a" NS_B="${p}b" DATA_IF="${p}d"
  CTRL_NET="10.204.$n" DATA_NET="10.205.$n" KERN_NET="10.206.$n"
  CTRL_A="$CTRL_NET.1" CTRL_B="$CTRL_NET.2" DATA_A="$DATA_NET.1" DATA_B="$DATA_NET.2"
  KERN_A="$KERN_NET.1" KERN_B="$KERN_NET.2"
  remove_hosts
  ip netns add "$NS_A" && ip netns add "$NS_B" ||
    fail "cannot create network namespaces: this needs root and a kernel with netns"
  local ns
  for ns in "$NS_A" "$NS_B"; do
    ip netns exec "$ns" sh -c 'echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6;
                               echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6'
    ip -n "$ns" link set lo up
  done
  ip link add "${p}c" netns "$NS_A" type veth peer name "${p}c" netns "$NS_B" &&
    ip link add "$DATA_IF" netns "$NS_A" type veth peer name "$DATA_IF" netns "$NS_B" &&
    ip link add "${p}k" netns "$NS_A" type veth peer name "${p}k" netns "$NS_B" ||
    fail "cannot create veth pairs: the kernel needs veth"
  ip -n "$NS_A" addr add "$CTRL_A/24" dev "${p}c"
  ip -n "$NS_B" addr add "$CTRL_B/24" dev "${p}c"
  ip -n "$NS_A" addr add "$DATA_A/24" dev "$DATA_IF"
  ip -n "$NS_B" addr add "$DATA_B/24" dev "$DATA_IF"
  ip -n "$NS_A" addr add "$KERN_A/24" dev "${p}k"
  ip -n "$NS_B" addr add "$KERN_B/24" dev "${p}k"
  for ns in "$NS_A" "$NS_B"; do
    ip -n "$ns" link set "${p}c" up
    ip -n "$ns" link set "$DATA_IF" up
    ip -n "$ns" link set "${p}k" mtu "${HOST_MTU:-9000}" up ||
      fail "cannot set MTU ${HOST_MTU:-9000} on the kernel pair"
    ip -n "$ns" route add default dev "${p}k"
  done
  AGENT="$WORK/agent.sh"
  cat >"$AGENT" <<AGENT_EOF
#!/bin/sh
# Open MPI's launch agent (plm_rsh_agent): \$1 is a host's control address.
case "\$1" in $CTRL_A) ns=$NS_A ;; $CTRL_B) ns=$NS_B ;; *) echo "agent: no namespace for \$1" >&2; exit 1 ;; esac
shift
exec ip netns exec \$ns /bin/sh -c "\$*"
AGENT_EOF
  chmod +x "$AGENT"
  # mpirun runs in the first namespace and starts N ranks on each host.
  MPI_HOSTS="--mca plm_rsh_agent $AGENT --mca oob_tcp_if_include $CTRL_NET.0/24"
}

remove_hosts() {
  [ -n "${NS_A:-}" ] && ip netns del "$NS_A" 2>/dev/null
  [ -n "${NS_B:-}" ] && ip netns del "$NS_B" 2>/dev/null
  return 0
}
