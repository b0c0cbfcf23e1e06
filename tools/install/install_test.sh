#!/usr/bin/env bash
# tools/install.sh puts the provider, the static archive, the headers and a
# pkg-config file under a prefix; Debian's fi_info finds the provider there
# through the .pc file's provider_path, and a C program links the archive
# (pkg-config --libs) and runs with no libfabric.
set -euo pipefail
root="$TEST_SRCDIR/bypass"
prefix="$TEST_TMPDIR/prefix"
# Debian's fi_info and a plain cc link cannot use objects built with a
# sanitizer (the runtime must come first in the process).
# (nm's output is read whole: with pipefail, grep -q closing the pipe early
# would fail nm with SIGPIPE.)
undefined=$(nm -D --undefined-only "$root/fabric/fi/libbypass-fi.so" 2>/dev/null || true)
if grep -q -E '__(asan_init|tsan_init|tsan_func_entry)' <<<"$undefined"; then
  echo "SKIP: a sanitizer build; Debian's fi_info and a plain C link need an uninstrumented provider and archive"
  exit 0
fi
BYPASS_SOURCE_ROOT="$root" "$root/tools/install.sh" --prefix="$prefix" --from="$root"
for f in lib/libfabric/libbypass-fi.so lib/libbypass-fi.a lib/pkgconfig/bypass-fi.pc \
         include/bypass/fabric/rdm/rdm.h include/bypass/driver/device.h; do
  [ -f "$prefix/$f" ] || { echo "FAIL: $prefix/$f was not installed"; exit 1; }
done
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
provider_path=$(pkg-config --variable=provider_path bypass-fi)
[ "$provider_path" = "$prefix/lib/libfabric" ] || { echo "FAIL: provider_path is '$provider_path'"; exit 1; }

# Debian's fi_info loads the installed provider.
export FI_BYPASS_DEVICES="loopback:install,ip=10.0.0.1"
out=$(FI_PROVIDER_PATH="$provider_path" FI_PROVIDER=bypass fi_info -l)
echo "$out"
grep -q "bypass" <<<"$out" || { echo "FAIL: fi_info does not list bypass from $provider_path"; exit 1; }

# A C program against the static archive.
cc -o "$TEST_TMPDIR/app" "$root/tools/install/install_test_main.c" \
   $(pkg-config --cflags --libs bypass-fi)
if ldd "$TEST_TMPDIR/app" | grep -q libfabric; then
  echo "FAIL: the static program links libfabric"; exit 1
fi
out=$("$TEST_TMPDIR/app")
echo "$out"
grep -q "provider bypass domain loopback:install" <<<"$out" || { echo "FAIL: unexpected: $out"; exit 1; }

# Bad input: one line, non-zero.
if "$root/tools/install.sh" --prefix=relative/dir --from="$root" 2>"$TEST_TMPDIR/err"; then
  echo "FAIL: a relative prefix was accepted"; exit 1
fi
grep -q "absolute path" "$TEST_TMPDIR/err" || { echo "FAIL: $(cat "$TEST_TMPDIR/err")"; exit 1; }
echo PASS
