#!/usr/bin/env bash
# The layering rules Bazel 4.2.3 with gcc cannot check (it has no layering
# check): code outside fabric/rdm includes only the engine's public headers
# (rdm.h, types.h, config.h), and dependencies point down (tools -> fabric
# -> driver -> hugepage, tests aside; rte_*.h only in driver/dpdk and examples/, infiniband/* only in
# driver/mlx5, rdma/* only in fabric/fi and the tools that load libfabric).
# Arguments: the source files to check (filegroups of the packages).
set -u
public='fabric/rdm/(rdm|types|config)\.h'
bad=0
checked=0
for f in "$@"; do
  [ -f "$f" ] || continue
  checked=$((checked + 1))
  while IFS= read -r line; do
    inc=$(printf '%s' "$line" | sed -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]([^>"]+)[>"].*/\1/')
    why=""
    case "$f" in
      fabric/rdm/*) ;;
      # Test code elsewhere may build on the engine's test harness (the
      # loopback Net of fabric/rdm/test_util.h), nothing else inside.
      *_test.cc|*_testing.h|*_testing.cc) if [[ "$inc" == fabric/rdm/* ]] &&
           ! [[ "$inc" =~ ^$public$ ]] && [[ "$inc" != fabric/rdm/test_util.h ]]; then
           why="includes an internal header of fabric/rdm; tests may add fabric/rdm/test_util.h"
         fi ;;
      *) if [[ "$inc" == fabric/rdm/* ]] && ! [[ "$inc" =~ ^$public$ ]]; then
           why="includes an internal header of fabric/rdm; use fabric/rdm/rdm.h (with types.h, config.h)"
         fi ;;
    esac
    # A test may stack the layers it tests (the engine over a fake NIC).
    case "$f" in
      *_test.cc) ;;
      hugepage/*) [[ "$inc" =~ ^(driver|fabric|tools)/ ]] && why="hugepage/ depends on nothing above it" ;;
      driver/*) [[ "$inc" =~ ^(fabric|tools)/ ]] && why="driver/ depends on nothing above it" ;;
      fabric/*) [[ "$inc" =~ ^tools/ ]] && why="fabric/ depends on nothing in tools/" ;;
    esac
    # DPDK applications embedding bypass own their EAL: examples/ and the
    # tests that stand for such an application.
    if [[ "$inc" =~ ^rte_ ]] && [[ "$f" != driver/dpdk/* ]] && [[ "$f" != tools/bare/* ]] &&
       [[ "$f" != examples/* ]] && ! [[ "$f" == *_test.cc && "$inc" =~ ^rte_(eal|errno|ethdev)\.h$ ]]; then
      why="only driver/dpdk (the bare DPDK baseline, examples/, and an application's EAL or port in a test) include DPDK headers"
    fi
    if [[ "$inc" == infiniband/* ]] && [[ "$f" != driver/mlx5/* ]]; then
      why="only driver/mlx5 includes rdma-core headers"
    fi
    if [[ "$inc" == rdma/* ]] && [[ "$f" != fabric/fi/* ]] && [[ "$f" != tools/* ]]; then
      why="only fabric/fi (and tools that load libfabric) include libfabric headers"
    fi
    if [ -n "$why" ]; then
      echo "layering: $f: #include <$inc>: $why"
      bad=$((bad + 1))
    fi
  done < <(grep -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]' "$f")
done
if [ "$checked" -eq 0 ]; then
  echo "layering: no source files were given to check"
  exit 1
fi
echo "layering: $checked files checked, $bad violations"
[ "$bad" -eq 0 ]
