"""overlap_fuzz_target: one libFuzzer target, its standalone binary, and its corpus replay test.

For a target `foo` with source defining LLVMFuzzerTestOneInput this makes:
  foo                 the fuzzer. Under --config=fuzz it links libFuzzer's main; otherwise a
                      small main that runs the target on each file named on the command
                      line (to reproduce a crash without clang).
  foo_corpus_test     a cc_test that replays every file of the corpus through the target, so
                      `bazel test //...` keeps every seed and every past crash as a regression.
"""

def overlap_fuzz_target(name, srcs, deps, corpus):
    native.cc_library(
        name = name + "_lib",
        testonly = True,
        srcs = srcs,
        deps = deps,
        alwayslink = 1,
    )
    native.cc_binary(
        name = name,
        testonly = True,
        deps = [":" + name + "_lib"] + select({
            "//fuzz:libfuzzer": [],
            "//conditions:default": ["//fuzz:standalone_main"],
        }),
        linkopts = select({
            "//fuzz:libfuzzer": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
    )
    native.cc_test(
        name = name + "_corpus_test",
        # medium: a corpus of several hundred CLI round trips replays in ~40 s under ASan.
        size = "medium",
        deps = [":" + name + "_lib", "//fuzz:corpus_replay"],
        data = native.glob([corpus + "/**"]),
        args = [native.package_name() + "/" + corpus],
    )
