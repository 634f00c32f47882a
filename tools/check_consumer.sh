#!/usr/bin/env bash
# Builds and tests examples/consumer/, a workspace of its own that uses overlap as a library
# (README, "As a library"), twice:
#   1. in place: its WORKSPACE points at overlap with local_repository(path = "../..");
#   2. as a copy placed outside the repository, with --override_repository=overlap=<this
#      checkout>: what a user's workspace elsewhere does.
# Each run builds the consumer's program against @overlap's public targets, generates a graph
# with @overlap//:overlap at build time, runs the program's test, prints its output, and
# checks that a target depending on one of overlap's test oracles is refused (visibility).
# Each workspace has its own Bazel server; both are shut down afterwards (and the copy's
# output base deleted), so nothing lingers. Shares overlap's disk cache, so a second run and
# the copy after the in-place build mostly hit it.
#
#   tools/check_consumer.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
cache=(--disk_cache="$HOME/.cache/overlap/bazel-disk")
status=0

# Runs the consumer's test and program in the current directory, with extra flags "$@".
check() {
  bazel test "${cache[@]}" "$@" //... || return 1
  bazel run "${cache[@]}" "$@" //:plan -- "$(bazel info "$@" bazel-bin 2>/dev/null)/gpt2.json" ||
    return 1
  # overlap's internals are not visible here: a target depending on a test oracle fails.
  local log
  log=$(bazel build "${cache[@]}" "$@" //:uses_internal 2>&1) && {
    echo "check_consumer: //:uses_internal built, but overlap's test oracles must not be visible"
    return 1
  }
  grep -q "is not visible from target" <<<"$log" || { echo "$log"; return 1; }
  echo "check_consumer: //:uses_internal refused (not visible), as it must be"
}

echo "== consumer workspace, in place (examples/consumer)"
(cd examples/consumer && { check; r=$?; bazel shutdown; exit $r; }) || status=1

copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
# Its files only: not the bazel-* links a build in place leaves.
git ls-files examples/consumer | sed 's|^examples/consumer/||' |
  (cd examples/consumer && xargs cp --parents -t "$copy")
echo "== consumer workspace, a copy outside the repository ($copy)"
(cd "$copy" && { check --override_repository=overlap="$root"; r=$?
                 bazel clean --expunge 2>/dev/null; bazel shutdown; exit $r; }) || status=1

if ((status == 0)); then echo "check_consumer: ok (in place and from a copy outside)"; fi
exit "$status"
