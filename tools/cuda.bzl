"""cuda_library: .cu sources compiled by nvcc into a cc_library (Bazel 4 has no CUDA rules).

    load("//tools:cuda.bzl", "cuda_library")
    cuda_library(name = "spin_kernel", srcs = ["spin_kernel.cu"], hdrs = ["spin_kernel.h"])

Each .cu becomes one object through a genrule running /usr/local/cuda/bin/nvcc (the path
@cuda is wired to) with GCC as the host compiler:
  -Xcompiler -fPIC    the object links into shared and position-independent binaries alike;
  sm_90 + compute_90  a cubin for Hopper (H100 / H200) and PTX that the driver compiles for
                      any newer device; older devices are refused at run time, by name.
The object is built once per configuration (opt, asan-ubsan, tsan: three nvcc runs of
seconds each in CI); it is not instrumented by the sanitizers, which see only host code.
A .cu file includes headers by relative path (nvcc searches the file's directory first):
its own, and other packages' named in `includes`; and CUDA's.
"""

_NVCC = "/usr/local/cuda/bin/nvcc"
_FLAGS = " ".join([
    "-c",
    "-O3",
    "--Werror all-warnings",  # host-only calls in device code and the like are errors
    "-std=c++17",
    "-Xcompiler -fPIC",
    "-gencode arch=compute_90,code=sm_90",
    "-gencode arch=compute_90,code=compute_90",
])

def cuda_library(name, srcs, hdrs = [], deps = [], includes = [], **kwargs):
    """A cc_library of nvcc-compiled `srcs` (.cu) with `hdrs`, linking CUDA's runtime.

    `includes`: other packages' headers the .cu files include by relative path (exported
    files); the library's `deps` should carry their cc_library for host code.
    """
    objects = []
    for src in srcs:
        obj = "%s_%s.o" % (name, src.replace("/", "_").replace(".cu", ""))
        native.genrule(
            name = obj.replace(".o", "_nvcc"),
            srcs = [src] + hdrs + includes,
            outs = [obj],
            cmd = "%s %s -o $@ $(location %s)" % (_NVCC, _FLAGS, src),
            message = "nvcc %s" % src,
        )
        objects.append(obj)
    native.cc_library(
        name = name,
        srcs = objects,
        hdrs = hdrs,
        deps = deps + ["@cuda"],
        **kwargs
    )
