"""bypass_fuzz_test: one libFuzzer target, built as a test and as a fuzzer.

A fuzz target is a `*_fuzz.cc` defining

    extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

`bypass_fuzz_test(name = "foo_fuzz", ...)` makes two targets of it:

  - `foo_fuzz`, a cc_test linked with //test/fuzz:fuzz_main: it runs the seed
    corpus and then `runs` deterministic generated inputs, under any compiler
    (gcc by default) and any sanitizer config. `bazel test //...` runs it.
  - `foo_fuzz_libfuzzer`, a cc_binary tagged `manual` and `fuzz`: with
    `--config=fuzz` (clang, see .bazelrc) a real libFuzzer binary that takes
    the seed corpus through -seed_inputs; without it, the same runner as the
    test, to replay an input under gcc.

See test/fuzz/README.md.
"""

load("//:copts.bzl", "BYPASS_COPTS")

def bypass_fuzz_test(
        name,
        srcs,
        deps = [],
        corpus = [],
        runs = 20000,
        copts = [],
        size = "small",
        tags = [],
        visibility = None):
    """Declares the test `name` and the libFuzzer binary `name`_libfuzzer.

    Args:
      name: the test's name, by convention the fuzz target's file name
        without `.cc` (`net_headers_fuzz`).
      srcs: the `*_fuzz.cc` file (and any helpers of it).
      deps: the code under test.
      corpus: seed inputs, files of this package, usually
        `glob(["testdata/<name>/*"])`.
      runs: generated inputs the test runs after the seeds.
      copts: added after BYPASS_COPTS.
      size: the test's size.
      tags: added to the test's tags.
      visibility: of both targets.
    """
    seeds = ["%s/%s" % (native.package_name(), f) for f in corpus]
    seed_args = ["-seed_inputs=" + ",".join(seeds)] if seeds else []
    native.cc_test(
        name = name,
        size = size,
        srcs = srcs,
        args = seed_args + ["-runs=%d" % runs],
        copts = BYPASS_COPTS + copts,
        data = corpus,
        tags = tags,
        visibility = visibility,
        deps = deps + ["//test/fuzz:fuzz_main"],
    )
    native.cc_binary(
        name = name + "_libfuzzer",
        testonly = True,
        srcs = srcs,
        args = seed_args,
        copts = BYPASS_COPTS + copts,
        data = corpus,
        linkopts = select({
            "//test/fuzz:libfuzzer": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
        tags = ["manual", "fuzz"],
        visibility = visibility,
        deps = deps + select({
            "//test/fuzz:libfuzzer": [],
            "//conditions:default": ["//test/fuzz:fuzz_main"],
        }),
    )
