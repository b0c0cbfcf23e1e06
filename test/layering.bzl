"""The `sources` filegroup every package //test:layering_test reads."""

def layering_sources():
    """Declares `sources`: this package's .cc and .h files, for //test:layering_test."""
    native.filegroup(
        name = "sources",
        srcs = native.glob([
            "*.cc",
            "*.h",
        ]),
        visibility = ["//test:__pkg__"],
    )
