#!/usr/bin/env bash
# netns_counts: a round trip across two namespaces in counts (tools/netns_counts.py, standard-library
# Python 3; see tools/README.md). A shell wrapper rather than a py_binary:
# Bazel 4's Python stub asks for `python`, which Debian 12 does not have.
#
#   bazel build -c opt //tools:netns_counts && bazel-bin/tools/netns_counts --sizes=64,4096
set -u
for c in "${RUNFILES_DIR:-}/bypass/tools/netns_counts.py" "$0.runfiles/bypass/tools/netns_counts.py" \
         "${TEST_SRCDIR:-}/bypass/tools/netns_counts.py"; do
  if [ -f "$c" ]; then
    export RUNFILES_DIR="${c%/bypass/tools/netns_counts.py}"
    exec python3 "$c" "$@"
  fi
done
echo "netns_counts: cannot find netns_counts.py in the runfiles; build //tools:netns_counts" >&2
exit 1
