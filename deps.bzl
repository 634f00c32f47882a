"""overlap_dependencies(): every repository overlap's targets refer to, for any workspace.

A workspace that uses overlap as a library (examples/consumer/ is one) writes

    local_repository(name = "overlap", path = "/path/to/overlap")
    load("@overlap//:deps.bzl", "overlap_dependencies")
    overlap_dependencies()

and overlap's own WORKSPACE calls the same macro, so the two cannot drift apart.

What it declares (each only when the workspace has not declared that name already, so a
consumer can bring its own):
  rules_cc, rules_java, remote_coverage_tools
      Offline stand-ins kept in overlap's third_party/. Bazel 4.2.3 (Debian's bazel-bootstrap)
      would otherwise download them, and these machines reach no download server. They must
      be declared before anything loads from them: call overlap_dependencies() right after
      the local_repository of overlap, before other loads.
  absl, gtest, rapidcheck, benchmark, nlohmann_json, gloo, openblas, dnnl, sleef, python
      Debian's packages under /usr (tools/bootstrap.sh installs them), BUILD files in
      overlap's third_party/.
  cuda
      /usr/local/cuda (CUDA 13 with NCCL); only GPU targets use it.

The stand-ins live inside overlap, whose path the calling workspace chose; a macro cannot
turn a label into a path, so a small repository rule does (repository_ctx.path of a Label),
then links the stand-in's files into the new repository.
"""

def _overlap_stand_in_impl(ctx):
    # The anchor is a file that certainly exists in overlap's third_party/ package.
    third_party = ctx.path(ctx.attr._anchor).dirname
    source = third_party.get_child(ctx.attr.directory)
    if not source.exists:
        fail("overlap_dependencies: %s is missing from overlap's third_party/" % source)
    for child in source.readdir():
        ctx.symlink(child, child.basename)

_overlap_stand_in = repository_rule(
    implementation = _overlap_stand_in_impl,
    attrs = {
        "directory": attr.string(mandatory = True),
        "_anchor": attr.label(default = Label("//third_party:BUILD.bazel")),
    },
    local = True,
    doc = "A repository whose files are those of overlap's third_party/<directory>.",
)

# Debian packages wired in with a BUILD file of overlap's third_party/: name -> path.
_SYSTEM_LIBRARIES = [
    ("absl", "/usr"),
    ("gtest", "/usr"),
    ("rapidcheck", "/usr"),
    ("benchmark", "/usr"),
    ("nlohmann_json", "/usr"),
    ("gloo", "/usr"),
    ("openblas", "/usr"),
    ("dnnl", "/usr"),
    ("sleef", "/usr"),
    ("python", "/usr"),
    ("cuda", "/usr/local/cuda"),
]

def overlap_dependencies():
    """Declares the repositories overlap's targets need (see the top of this file)."""
    for name in ["rules_cc", "rules_java", "remote_coverage_tools"]:
        if not native.existing_rule(name):
            _overlap_stand_in(name = name, directory = name)
    for name, path in _SYSTEM_LIBRARIES:
        if not native.existing_rule(name):
            native.new_local_repository(
                name = name,
                # Label() resolves against this file's repository: "@overlap//third_party:..."
                # in a consumer, overlap's own package at home.
                build_file = str(Label("//third_party:%s.BUILD" % name)),
                path = path,
            )
