# Shared by the fi_pingpong tests: runs Debian's unmodified fi_pingpong as a
# server and a client over libbypass-fi.so and checks both finish cleanly.
# Source it; it sets PROVIDER_DIR and defines fail, run_pair and (for the
# Open MPI tests) mpi_setup.

fail() { echo "FAIL: $*"; exit 1; }

for tool in fi_pingpong fi_info; do
  command -v "$tool" >/dev/null ||
    fail "$tool is missing: install Debian's libfabric-bin (tools/setup.sh installs it)"
done
so="$TEST_SRCDIR/bypass/fabric/fi/libbypass-fi.so"
[ -f "$so" ] || fail "libbypass-fi.so is not in the runfiles ($so)"
# Debian's fi_pingpong is not built with a sanitizer, so it cannot load a
# provider that is (the sanitizer runtime must come first in the process);
# under --config=asan/tsan the static-library test carries this traffic.
if nm -D "$so" 2>/dev/null | grep -q -E ' U __(asan|tsan)_init'; then
  echo "SKIP: libbypass-fi.so is sanitizer-built and Debian's fi_pingpong is not; fi_static_pingpong_test covers this traffic under sanitizers"
  exit 0
fi
PROVIDER_DIR=$(mktemp -d)
# libfabric loads every lib*-fi.so in FI_PROVIDER_PATH: a directory of ours alone.
ln -s "$so" "$PROVIDER_DIR/libbypass-fi.so"
export FI_PROVIDER_PATH="$PROVIDER_DIR" FI_PROVIDER=bypass
# A provider that fails to load is skipped silently: prove ours loads.
fi_info -l 2>&1 | grep -q "^bypass:" ||
  fail "libfabric did not load $so; FI_LOG_LEVEL=debug fi_info -p bypass says:
$(FI_LOG_LEVEL=debug fi_info -p bypass 2>&1 | grep -a -i 'bypass\|dlopen' | head -20)"

# run_pair LABEL SERVER_PREFIX CLIENT_PREFIX SERVER_CTRL_ADDR ARGS...
# The prefixes run each side somewhere (e.g. "ip netns exec ns"); "" for here.
# Each side gets 60 s; the control port is picked per run.
run_pair() {
  local label=$1 sp=$2 cp=$3 addr=$4
  shift 4
  local port=$(( 20000 + (RANDOM % 20000) ))
  local out
  out=$(mktemp)
  $sp timeout 60 env FI_LOG_LEVEL=${PP_LOG:-warn} fi_pingpong -p bypass -B "$port" "$@" >"$out.srv" 2>&1 &
  local spid=$!
  # The server listens on its control port before the client connects.
  local i
  for i in $(seq 1 200); do
    $sp ss -ltn 2>/dev/null | grep -q ":$port " && break
    sleep 0.05
  done
  $cp timeout 60 fi_pingpong -p bypass -P "$port" "$@" "$addr" >"$out.cli" 2>&1
  local crc=$?
  wait $spid
  local src=$?
  echo "--- $label: server (rc $src)"; cat "$out.srv"
  echo "--- $label: client (rc $crc)"; cat "$out.cli"
  [ $src -eq 0 ] || fail "$label: the fi_pingpong server failed (rc $src; rc 124 is a 60 s timeout)"
  [ $crc -eq 0 ] || fail "$label: the fi_pingpong client failed (rc $crc)"
  grep -q "^bytes" "$out.cli" || fail "$label: the client printed no results"
  rm -f "$out" "$out.srv" "$out.cli"
}

# mpi_setup PROGRAM: for the Open MPI tests, with nothing configured but
# FI_PROVIDER_PATH (the default domain): a work directory $work (removed
# on exit with the provider's), and testdata/PROGRAM.c built there with
# Debian's mpicc; fails with what to install when mpicc or mpirun is
# missing.
mpi_setup() {
  unset FI_BYPASS_DEVICES FI_PROVIDER
  work=$(mktemp -d)
  trap 'rm -rf "$PROVIDER_DIR" "$work"' EXIT
  local tool
  for tool in mpicc mpirun; do
    command -v "$tool" >/dev/null ||
      fail "$tool is missing: install Debian's openmpi-bin and libopenmpi-dev (tools/setup.sh installs them)"
  done
  mpicc -O2 -o "$work/$1" "$TEST_SRCDIR/bypass/fabric/fi/testdata/$1.c" ||
    fail "mpicc could not build testdata/$1.c"
}
