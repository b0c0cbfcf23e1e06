#!/usr/bin/env bash
# Installs bypass under a prefix, so FI_PROVIDER_PATH is stable for
# applications and mpirun:
#   PREFIX/lib/libfabric/libbypass-fi.so   the libfabric provider
#   PREFIX/lib/libbypass-fi.a              the static library (fi_* with no libfabric)
#   PREFIX/include/bypass/...              the engine's and driver's public headers
#   PREFIX/lib/pkgconfig/bypass-fi.pc      cflags, libs, provider_path
#
#   tools/install.sh [--prefix=DIR]        builds (bazel -c opt) and installs; default /usr/local
#   tools/install.sh --prefix=DIR --from=DIR   installs files already built (no bazel)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
prefix=/usr/local
from=""
for arg in "$@"; do
  case "$arg" in
    --prefix=*) prefix=${arg#--prefix=} ;;
    --from=*) from=${arg#--from=} ;;
    -h|--help) sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown argument '$arg'; see --help" >&2; exit 2 ;;
  esac
done
case "$prefix" in
  /*) ;;
  *) echo "install.sh: --prefix must be an absolute path, not '$prefix'" >&2; exit 2 ;;
esac

# The source tree: this script's checkout, or (from a Bazel test's runfiles)
# the directory given by BYPASS_SOURCE_ROOT.
root=${BYPASS_SOURCE_ROOT:-$(cd "$here/.." && pwd)}
if [ -z "$from" ]; then
  command -v bazel >/dev/null || { echo "install.sh: bazel not found; run tools/setup.sh first" >&2; exit 1; }
  (cd "$root" && bazel build -c opt //fabric/fi:libbypass-fi.so //tools/install:libbypass-fi.a)
  from=$(cd "$root" && bazel info -c opt bazel-bin 2>/dev/null)
  so="$from/fabric/fi/libbypass-fi.so"
  archive="$from/tools/install/libbypass-fi.a"
else
  so=$(find -L "$from" -name libbypass-fi.so -print -quit)
  archive=$(find -L "$from" -name libbypass-fi.a -print -quit)
fi
for f in "$so" "$archive"; do
  [ -n "$f" ] && [ -f "$f" ] || { echo "install.sh: libbypass-fi.so or libbypass-fi.a not found under '$from'" >&2; exit 1; }
done

if ! mkdir -p "$prefix/lib/libfabric" "$prefix/lib/pkgconfig" "$prefix/include/bypass" 2>/dev/null; then
  echo "install.sh: cannot create directories under $prefix; choose a writable --prefix or run as root" >&2
  exit 1
fi
install -m 0755 "$so" "$prefix/lib/libfabric/libbypass-fi.so"
install -m 0644 "$archive" "$prefix/lib/libbypass-fi.a"
# The public headers: the engine's API and the driver contract it names.
for h in fabric/rdm/rdm.h fabric/rdm/types.h fabric/rdm/config.h \
         driver/device.h driver/packet.h driver/clock.h; do
  install -D -m 0644 "$root/$h" "$prefix/include/bypass/$h"
done

# System libraries the static archive needs, all Debian packages, linked as
# shared libraries (their link flags only: DPDK's compile flags stay out of
# an application's build).
modules="libdpdk libibverbs libmlx5 numa absl_status absl_statusor absl_strings absl_str_format
         absl_synchronization absl_time absl_flags absl_flags_parse absl_random_random libsodium"
# shellcheck disable=SC2086
if ! syslibs=$(pkg-config --libs $modules 2>&1); then
  echo "install.sh: pkg-config cannot find what the archive needs ($syslibs); run tools/setup.sh" >&2
  exit 1
fi
cat > "$prefix/lib/pkgconfig/bypass-fi.pc" <<PC
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include
provider_path=\${libdir}/libfabric

Name: bypass-fi
Description: bypass: libfabric's API over a kernel-bypass RDM engine (provider in provider_path; static library)
Version: 1.0
Cflags: -I\${includedir}/bypass
Libs: -L\${libdir} -lbypass-fi $syslibs -lstdc++ -lpthread
PC

echo "installed under $prefix:"
echo "  provider  $prefix/lib/libfabric/libbypass-fi.so  (export FI_PROVIDER_PATH=$prefix/lib/libfabric)"
echo "  static    $prefix/lib/libbypass-fi.a  (cc app.c \$(pkg-config --cflags --libs bypass-fi))"
echo "  pkg-config: PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --variable=provider_path bypass-fi"
