"""The one warnings list for project code."""

BYPASS_COPTS = [
    "-Wall",
    "-Wextra",
    "-Werror",
    "-Wshadow",
    "-Wnon-virtual-dtor",
    "-Wcast-align",
    "-Wformat=2",
    "-Wimplicit-fallthrough",
    "-Werror=switch",
    "-Wvla",
]

# Third-party headers (DPDK, rdma-core) trip some of the above; these are added
# after BYPASS_COPTS in the few packages that include them.
SYSTEM_HEADER_COPTS = [
    "-Wno-cast-align",
]
