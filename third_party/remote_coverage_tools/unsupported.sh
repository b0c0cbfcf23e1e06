#!/bin/sh
echo "bazel coverage is not supported offline: the coverage tools are local stand-ins (third_party/remote_coverage_tools)" >&2
exit 1
