#!/usr/bin/env bash
# bench: where bypass stands, in one run (tools/bench.py, standard-library
# Python 3; see tools/README.md). A shell wrapper rather than a py_binary:
# Bazel 4's Python stub asks for `python`, which Debian 12 does not have.
#
#   bazel run -c opt //tools:bench -- --quick
set -u
for c in "${RUNFILES_DIR:-}/bypass/tools/bench.py" "$0.runfiles/bypass/tools/bench.py" \
         "${TEST_SRCDIR:-}/bypass/tools/bench.py"; do
  if [ -f "$c" ]; then
    export RUNFILES_DIR="${c%/bypass/tools/bench.py}"
    exec python3 "$c" "$@"
  fi
done
echo "bench: cannot find bench.py in the runfiles; run it with bazel run -c opt //tools:bench" >&2
exit 1
